"""add/sub with alpha: alpha takes no part in type promotion (bool tensors: `True + 2 * True` is True). The recorded
program's dtypes must be eager's, not only the torch kernel's result: a fusion region runs the decomposition."""
from __future__ import annotations

import itertools

import pytest
import torch

import jitcore
from jitcore.guards.cache import CACHE_MODES

DTYPES = [torch.bool, torch.int64, torch.float32, torch.float16]
ALPHAS = [2, 0, -1, 1.5, True]


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("op", ["add", "sub"])
def test_alpha_keeps_eager_dtypes_in_the_program(op, cache):
    fn = getattr(torch, op)
    for da, db, alpha in itertools.product(DTYPES, DTYPES, ALPHAS):
        a, b = (torch.tensor([[1, 0], [1, 1]]) * 3).to(da), torch.tensor([[1, 1], [0, 1]]).to(db)

        def f(x, y, alpha=alpha):
            return fn(x, y, alpha=alpha)

        try:
            want = f(a, b)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                jitcore.jit(f, cache=cache)(a, b)
            continue
        jf = jitcore.jit(f, cache=cache)
        got = jf(a, b)
        assert got.dtype == want.dtype and torch.equal(got, want), (da, db, alpha)
        wide_a, wide_b = a.repeat(1, 2), b.repeat(1, 2)  # another shape: the same entry under symbolic values
        assert torch.equal(jf(wide_a, wide_b), f(wide_a, wide_b)), (da, db, alpha)
        traced = jitcore.last_traces(jf)[0].output
        traced = traced[0] if isinstance(traced, tuple) else traced
        assert traced.dtype == want.dtype, (op, da, db, alpha, traced.dtype, want.dtype)


def test_bool_arithmetic_stays_out_of_inductor_regions():
    """Inductor's CPU code for `bool + 2 * bool` writes out of bounds (torch 2.13; fuzz seed 494 crashed the
    process with a corrupted heap): the torch kernel runs it, the rest of the program fuses."""
    from executors import inductor_ex, torch_ex

    def f(x):
        s = x.sum(0)
        return torch.add(s > s, s.bool(), alpha=2), (x * 2).sin()

    jf = jitcore.jit(f, executors=[inductor_ex, torch_ex])
    for _ in range(3):
        x = torch.randn(4, 5)
        for got, want in zip(jf(x), f(x)):
            torch.testing.assert_close(got, want)
    assert "torch.add(" in str(jitcore.last_traces(jf)[-1])


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_alpha_scales_a_python_number(cache):
    """`torch.add(x, 0.5, alpha=2)`: the number is scaled in Python (it stays a weak scalar of the promotion)."""
    for fn in (lambda x: torch.add(x, 0.5, alpha=2), lambda x: torch.sub(x, 3, alpha=-2),
               lambda x: torch.add(x.long(), 2, alpha=3), lambda x: torch.add(x > 0, True, alpha=2),
               lambda x: x.add(-2, alpha=2)):
        x = torch.randn(3)
        got, want = jitcore.jit(fn, cache=cache)(x), fn(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
