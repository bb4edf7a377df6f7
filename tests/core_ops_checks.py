"""Test helpers for the torch-level core ops (reduction, shape, layout, index, creation, misc): run an op written
with torch calls on proxies and on tensors, and compare every way (tests.helpers.assert_matches_torch).
"""
from __future__ import annotations

import pytest
import torch
from torch.testing import make_tensor

from executors.claim import flatten_to_prims
from jitcore.errors import JitError
from jitcore.ir.symbol import Tag
from tests.helpers import assert_matches_torch, trace_fn

SHAPES = ((3, 4, 5), (), (0, 3), (2, 1, 3))
LOOSE = {torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}, torch.float16: {"atol": 1e-2, "rtol": 1e-2}}
# what torch raises for bad input, and what tracing raises for it
TORCH_ERRORS = (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError)
TRACE_ERRORS = (JitError, TypeError, ValueError, IndexError)


def sample(shape, dtype, *, noncontiguous=False, seed=0, low=None, high=None):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", noncontiguous=noncontiguous, low=low, high=high)


def opaque_ops(fn, *args) -> list[str]:
    trace = trace_fn(fn, *args)
    return [b.sym.id for b in flatten_to_prims(trace).bound_symbols if Tag.OPAQUE in b.sym.tags]


def check_op(fn, *args, atol=None, rtol=None):
    """fn traced on proxies equals fn on tensors every way (no opaque op allowed); torch raising means we raise."""
    try:
        fn(*args)
    except TORCH_ERRORS:
        with pytest.raises(TRACE_ERRORS):
            trace_fn(fn, *args)
        return
    opaque = opaque_ops(fn, *args)
    assert not opaque, f"opaque ops in the trace: {opaque}"
    dt = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
    tol = LOOSE.get(dt, {}) if atol is None else {"atol": atol, "rtol": rtol}
    assert_matches_torch(fn, fn, *args, **tol)


class _Mapped:
    """`J.zeros` is the jitcore op standing for torch.zeros (what the interpreter calls for it): factory functions
    without tensor arguments never reach TensorProxy.__torch_function__, so tests call them through the map."""

    def __getattr__(self, name):
        from jitcore.ops.torch_map import TORCH_MAP

        return TORCH_MAP[getattr(torch, name)]


J = _Mapped()


def check_factory(fn, *args, atol=None, rtol=None):
    """fn(J, *args) (jitcore ops) equals fn(torch, *args) every way; torch raising means we raise."""
    check_op_pair(lambda *a: fn(J, *a), lambda *a: fn(torch, *a), *args, atol=atol, rtol=rtol)


def check_op_pair(op_fn, torch_fn, *args, atol=None, rtol=None):
    try:
        torch_fn(*args)
    except TORCH_ERRORS:
        with pytest.raises(TRACE_ERRORS):
            trace_fn(op_fn, *args)
        return
    opaque = opaque_ops(op_fn, *args)
    assert not opaque, f"opaque ops in the trace: {opaque}"
    trace = trace_fn(op_fn, *args)
    assert trace.bound_symbols, "nothing was traced (did the call run eagerly?)"
    assert_matches_torch(op_fn, torch_fn, *args, atol=atol, rtol=rtol)
