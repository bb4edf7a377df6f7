"""`t.data_ptr() != 0` inside a jitted function (issue 38: the fuzzer's template `{v} * ({v}.data_ptr() != 0)`, a
deliberate refusal before): for a tensor with elements it says whether its memory is allocated, True for a tensor the
program makes (an allocator gives more than 0 bytes a non-null address), read from the call's tensor and guarded for
an argument or a view of one (a storage resized to 0 bytes, as FSDP frees a parameter's, has address 0). Compared
with eager over call sequences in every cache mode; a tensor without elements is refused.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_1C52E7A
from tests.test_inplace_metadata import check


def _args(*shape, seed=0):
    def make():
        torch.manual_seed(seed)
        return (torch.randn(*shape), torch.randn(*shape))
    return make


CALLS = [_args(3, 4), _args(3, 4, seed=1), _args(5, 2, seed=2)]


def _compare(x, y):
    t = x * 2
    return x * (x.data_ptr() != 0) + (t[1:].data_ptr() == 0) + (0 != y.t().data_ptr())


def _truth(x, y):
    if (x + y).data_ptr() and y[1:].data_ptr():
        return x - y
    return x + y


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_compare, _truth])
def test_against_eager(fn, cache):
    check(fn, CALLS, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_freed_storage_of_an_argument(cache):
    """An argument whose storage was resized to 0 bytes: address 0, as eager reads it; a later call with memory is
    another program (the guard misses), not the first answer reused."""
    def f(w, x):
        return x * 2 if w.data_ptr() != 0 else x - 1

    jf = jitcore.jit(f, cache=cache)
    for freed in (True, False, True):
        w, x = torch.randn(4), torch.randn(3)
        if freed:
            w.untyped_storage().resize_(0)
        assert (w.data_ptr() != 0) is not freed
        torch.testing.assert_close(jf(w, x), f(w, x))


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_without_elements_is_refused(cache):
    with pytest.raises(UnsupportedError, match="without elements"):
        jitcore.jit(lambda x: x * (x[:0].data_ptr() != 0), cache=cache)(torch.randn(3))


def test_fuzz_template():
    """The fuzzer's `{v} * ({v}.data_ptr() != 0)` (seed 0) agrees with eager in every cache mode."""
    prog = generate(0, classes=CLASSES_1C52E7A)
    assert ".data_ptr() != 0" in prog.source
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems and report.refused is None, report.text(prog) + f"\nrefused: {report.refused}"
