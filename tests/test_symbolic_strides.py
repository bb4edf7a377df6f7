"""Stride reads under cache="symbolic values" (issue 38 item 7): the strides of a tensor eager lays out densely
(contiguous, transposed, channels-last) are products of its symbolic sizes, so code that reads them compiles once
over sizes; other layouts (a slice with gaps, an expand) read their exact strides, guarded. Compared with eager.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


def _dense(x):
    y = x.transpose(0, 1) * 2
    z = x.contiguous()
    return x * (y.stride(1) + y.stride()[0] + z.stride(0) + z.stride(-1)) + y.sum()


def _channels_last(x):
    y = x.contiguous(memory_format=torch.channels_last)
    s = y.stride()
    return y * s[1] + s[0] - s[2] * s[3]


def _gaps(x):
    y = x[:, ::2]  # not dense: its exact strides, guarded
    return y * y.stride(0) + y.stride(1)


CASES = {"dense": (_dense, [(3, 4), (5, 6), (7, 2)]),
         "channels_last": (_channels_last, [(2, 3, 4, 5), (2, 3, 6, 7), (3, 2, 5, 4)]),
         "gaps": (_gaps, [(3, 4), (5, 6), (7, 8)])}


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_stride_reads_over_sizes(name, cache):
    fn, shapes = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    for shape in shapes:
        x = torch.randn(shape)
        torch.testing.assert_close(jf(x), fn(x))
    if cache == "symbolic values" and name != "gaps":
        assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


def test_stride_read_of_a_transposed_argument():
    """An argument that is a transpose: its strides are read as products of its sizes, its layout guarded; a
    contiguous argument of the same sizes is another program (its strides differ)."""
    def f(x):
        return x * x.stride(0) + x.stride(1)

    jf = jitcore.jit(f, cache="symbolic values")
    for n, m in [(3, 4), (5, 6), (4, 7)]:
        x = torch.randn(m, n).t()
        torch.testing.assert_close(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1
    x = torch.randn(5, 6)
    torch.testing.assert_close(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 2


def test_t5_compiles_once_over_sequence_lengths():
    """HF T5 encoder-decoder (tiny config, as tests/test_models.py builds it) under symbolic values: one compile over
    three sequence lengths, eager's logits."""
    from tests.test_models import BUILDERS, VOCAB

    torch.manual_seed(0)
    model, *_ = BUILDERS["t5"]()
    model.eval()
    jm = jitcore.jit(model, cache="symbolic values")
    with torch.no_grad():
        for t in (8, 12, 16):
            ids = torch.randint(0, VOCAB, (2, t))
            kw = {"decoder_input_ids": torch.randint(0, VOCAB, (2, t))}
            torch.testing.assert_close(jm(ids, **kw).logits, model(ids, **kw).logits, atol=1e-4, rtol=1e-4)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)
