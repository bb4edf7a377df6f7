"""`out=` tensors of another dtype than the result's (issue 38): eager casts an elementwise op's result into them
where the cast is allowed (float64 into float32, float32 into float16, int64 into float32; computed in the inputs'
dtype, so half overflow stays inf) and raises its own error where it is not (float into int64, mm, where, clamp);
jitcore does the same, over call sequences in every cache mode, and refuses clearly the ops eager computes in the out
tensor's dtype (reductions)."""
import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES


def _add64_into(a, b, o):
    torch.add(a.double(), b, alpha=2, out=o)
    return o * 1


def _mul_into_half(a, b, o):
    h = o.half()
    torch.mul(a, b, out=h)
    return h, o


def _half_sum_into_float(a, b, o):
    torch.add(a.half() * 3e4, b.half() * 3e4, out=o)
    return o.sin()


def _int_into_float(a, b, o):
    torch.sub((a * 10).long(), 3, out=o)
    return o


def _exp_into_long(a, b, o):
    torch.exp(a, out=o.long())
    return o


def _mm_into_float(a, b, o):
    return torch.mm(a.double()[:, None], b.double()[None], out=o[:, None] * b[None])


def _clamp_into_float(a, b, o):
    return torch.clamp(a.double(), 0, 1, out=o)


def _args(n):
    return torch.linspace(-2, 2, n), torch.linspace(1, 3, n) ** 2, torch.zeros(n)


def _run(fn, args):
    try:
        return fn(*args), args
    except Exception as e:
        return e, args


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_add64_into, _mul_into_half, _half_sum_into_float, _int_into_float])
def test_cast_into_out_as_eager(fn, cache):
    jfn = jitcore.jit(fn, cache=cache)
    for n in (5, 7, 5, 3):
        (exp, eargs), (got, jargs) = _run(fn, _args(n)), _run(jfn, _args(n))
        for a, b in zip(torch.utils._pytree.tree_leaves((exp, eargs)), torch.utils._pytree.tree_leaves((got, jargs))):
            assert a.dtype == b.dtype
            torch.testing.assert_close(b, a, equal_nan=True)


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_exp_into_long, _mm_into_float, _clamp_into_float])
def test_eagers_error_where_eager_does_not_cast(fn, cache):
    jfn = jitcore.jit(fn, cache=cache)
    for n in (5, 6):
        with pytest.raises(RuntimeError) as eager:
            fn(*_args(n))
        with pytest.raises(RuntimeError) as jit:
            jfn(*_args(n))
        assert not isinstance(jit.value, UnsupportedError)
        assert str(jit.value).splitlines()[0] == str(eager.value).splitlines()[0]


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_reduction_into_another_dtype_is_refused(cache):
    def f(a, o):
        torch.sum(a.double(), 0, out=o)
        return o

    f(torch.randn(4), torch.empty(()))  # (eager runs it, computing in float32)
    with pytest.raises(UnsupportedError, match="reductions in the out tensor's dtype"):
        jitcore.jit(f, cache=cache)(torch.randn(4), torch.empty(()))
