"""Symbolic values on real models, property-tested: hypothesis draws sequences of (batch, length) shapes (sizes 2 and
up: 0 and 1 stay specialised) and each sequence, called on a fresh `jitcore.jit(model, cache="symbolic values")`,
compiles once and gives eager's logits (inference) and eager's loss and parameter gradients (a training step).
The fastest of the tiny models of tests/test_models.py; few examples each (every example pays one compile).
"""
from __future__ import annotations

import copy
import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitcore
from tests.test_models import BUILDERS, VOCAB

MODELS = ["nanogpt", "gpt2", "llama"]
TRAINED = ["nanogpt", "gpt2"]  # llama's training compile is the slowest (tests/test_models.py steps it over shapes)
MAX_LEN = 32  # nanoGPT's block_size (the HF configs allow 64 positions)

# two or three calls; repeats and coincidences (batch == length, a shape seen before) are left to hypothesis
shape_sequences = st.lists(st.tuples(st.integers(2, 6), st.integers(2, MAX_LEN)), min_size=2, max_size=3)
few = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _models(name: str, train: bool):
    """(model, eager reference): built once per name and mode (no optimizer step, so the weights stay as built)."""
    torch.manual_seed(0)
    model, *_ = BUILDERS[name]()
    model.train(train)
    return model, copy.deepcopy(model)


def _call(model, name, ids):
    # use_cache=False, as training loops pass it: transformers then checks positions for packed sequences (a data
    # guard over sizes computed from the symbols)
    out = model(ids) if name == "nanogpt" else model(ids, labels=ids, use_cache=False)
    if name == "nanogpt":
        return out, out.float().pow(2).mean()
    return out.logits, out.loss


def _ids(shapes):
    g = torch.Generator().manual_seed(sum(b * 100 + t for b, t in shapes))
    return [torch.randint(0, VOCAB, shape, generator=g) for shape in shapes]


@pytest.mark.parametrize("name", MODELS)
@few
@given(shapes=shape_sequences)
def test_inference_over_random_shape_sequences_compiles_once(name, shapes):
    model, ref = _models(name, train=False)
    jm = jitcore.jit(model, cache="symbolic values")
    with torch.no_grad():
        for ids in _ids(shapes):
            (out, loss), (want, want_loss) = _call(jm, name, ids), _call(ref, name, ids)
            torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(loss, want_loss, atol=1e-4, rtol=1e-4)
    assert jitcore.cache_misses(jm) == 1, (shapes, jitcore.cache_miss_reasons(jm))


@pytest.mark.parametrize("name", TRAINED)
@few
@given(shapes=shape_sequences)
def test_training_step_over_random_shape_sequences_compiles_once(name, shapes):
    model, ref = _models(name, train=True)
    jm = jitcore.jit(model, cache="symbolic values")
    for ids in _ids(shapes):
        (out, loss), (want, want_loss) = _call(jm, name, ids), _call(ref, name, ids)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(loss, want_loss, atol=1e-4, rtol=1e-4)
        loss.backward()
        want_loss.backward()
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            assert (p.grad is None) == (q.grad is None), n
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=lambda m, n=n: f"{n}: {m}")
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert jitcore.cache_misses(jm) == 1, (shapes, jitcore.cache_miss_reasons(jm))
