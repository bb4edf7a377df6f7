"""The guard contract as a property: one jitted function called in a sequence with varying argument counts,
keywords (present, absent, unknown), changed defaults, dtypes, shapes and grad modes answers every call as eager
does (the same results and gradients, or the same exception type for a TypeError), in every cache mode."""
from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import jitcore
from tests.fuzz import CACHE_MODES


def make_target():
    """A fresh function per sequence (its __defaults__ may be changed during the sequence)."""

    def target(a, b=None, c=1, *, scale=2.0, flag=False):
        out = a * scale + c
        if b is not None:
            out = out + b
        if flag:
            out = out.sum(0)
        return out

    return target


def make_varargs():
    def varargs(a, *rest, **extra):
        out = a.clone()
        for i, r in enumerate(rest):
            out = out + r * (i + 1)
        for name in sorted(extra):
            out = out * extra[name] if name.startswith("m") else out + extra[name]
        return out, len(rest), sorted(extra)

    return varargs


SHAPES = ((3,), (2, 3), (4, 3), (1, 3))
DTYPES = (torch.float32, torch.float64, torch.int64)

tensor_specs = st.tuples(st.sampled_from(SHAPES), st.sampled_from(DTYPES), st.booleans())
calls = st.fixed_dictionaries({
    "a": tensor_specs,
    "positional": st.lists(st.one_of(tensor_specs, st.integers(-2, 3), st.none()), max_size=3),
    "keywords": st.dictionaries(st.sampled_from(["b", "c", "scale", "flag", "mult", "shift", "bogus"]),
                                st.one_of(tensor_specs, st.integers(-2, 3), st.floats(-2, 2, width=32),
                                          st.booleans(), st.none()), max_size=3),
    "no_grad": st.booleans(),
    "new_defaults": st.none() | st.tuples(st.none(), st.integers(-2, 3)),
    "seed": st.integers(0, 2**16),
})


def _materialize(value, gen):
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], tuple):
        shape, dtype, rg = value
        t = torch.randn(shape, generator=gen)
        t = t.round().to(dtype) if dtype is torch.int64 else t.to(dtype)
        return t.requires_grad_(rg and dtype.is_floating_point)
    return value


def _args(call):
    gen = torch.Generator().manual_seed(call["seed"])
    args = [_materialize(call["a"], gen), *(_materialize(v, gen) for v in call["positional"])]
    kwargs = {k: _materialize(v, gen) for k, v in call["keywords"].items()}
    return args, kwargs


def _run(fn, call):
    args, kwargs = _args(call)
    try:
        with torch.set_grad_enabled(not call["no_grad"]):
            out = fn(*args, **kwargs)
    except Exception as e:  # compared by type with the other side
        return e, None
    grads = None
    tensors = [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]
    if tensors and tensors[0].requires_grad:
        leaves = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor) and a.requires_grad]
        grads = torch.autograd.grad(tensors[0].float().sum(), leaves, allow_unused=True)
    return out, grads


def _assert_same(got, exp, where):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got)}"
        assert (got.dtype, got.shape, got.requires_grad) == (exp.dtype, exp.shape, exp.requires_grad), \
            f"{where}: {got.dtype}{tuple(got.shape)} rg={got.requires_grad} vs eager " \
            f"{exp.dtype}{tuple(exp.shape)} rg={exp.requires_grad}"
        torch.testing.assert_close(got.detach(), exp.detach(), msg=lambda m: f"{where}: {m}")
    elif isinstance(exp, (tuple, list)):
        assert type(got) is type(exp) and len(got) == len(exp), f"{where}: {got!r} vs eager {exp!r}"
        for i, (g, e) in enumerate(zip(got, exp)):
            _assert_same(g, e, f"{where}[{i}]")
    else:
        assert got == exp, f"{where}: {got!r} vs eager {exp!r}"


def _binding_fails(fn, call) -> bool:
    args, kwargs = _args(call)
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return True
    return False


def _check_sequence(make, mode, sequence):
    fn = make()
    jfn = jitcore.jit(fn, cache=mode)
    log = []
    for i, call in enumerate(sequence):
        if call["new_defaults"] is not None and fn.__defaults__ is not None:
            fn.__defaults__ = call["new_defaults"]
        log.append(f"call {i}: {call}")
        where = f"{mode}, {make.__name__}\n" + "\n".join(log)
        exp, exp_grads = _run(fn, call)
        got, got_grads = _run(jfn, call)
        if isinstance(exp, Exception):
            if _binding_fails(fn, call):  # the call's shape is wrong: Python's own TypeError, before any tracing
                assert isinstance(got, TypeError), f"{where}\neager raised TypeError({exp}), jit gave {got!r}"
            else:
                assert isinstance(got, Exception), f"{where}\neager raised {exp!r}, jit returned"
            continue
        assert not isinstance(got, Exception), f"{where}\njit raised {got!r}"
        _assert_same(got, exp, f"{where}\nresult")
        _assert_same(got_grads, exp_grads, f"{where}\ngradients")


@pytest.mark.parametrize("make", [make_target, make_varargs])
@pytest.mark.parametrize("mode", CACHE_MODES)
# no shrinking: every step would compile again; the failure message lists the whole sequence of calls instead
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate], print_blob=True)
@given(sequence=st.lists(calls, min_size=2, max_size=6))
def test_call_sequence_matches_eager(make, mode, sequence):
    _check_sequence(make, mode, sequence)
