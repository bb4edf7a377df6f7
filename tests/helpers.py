"""Test helpers: trace an op (or any function over ops) on proxies and run it three ways against torch:
its prims decomposition (eager prim kernels), the torch executor's claimed trace, and the printed text re-run.
"""
from __future__ import annotations

import torch

import executors  # noqa: F401  (kernels)
from executors.claim import claim, flatten_to_prims
from executors.torchex import torch_ex
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Trace, tracectx
from jitcore.ops.sizes import define_sizes


def trace_fn(fn, *args, **kwargs) -> Trace:
    """Record fn(*args, **kwargs) with every tensor in args/kwargs replaced by a proxy input."""
    trace = Trace()
    flat, spec = tree_flatten((args, kwargs))
    with tracectx(trace):
        pflat = [TensorProxy(a.shape, a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor) else a
                 for a in flat]
        pargs, pkwargs = tree_unflatten(spec, pflat)
        trace.args = [p for p in pflat if isinstance(p, TensorProxy)]
        trace.output = fn(*pargs, **pkwargs)
    trace.set_provenance("test trace")
    return trace


def tensor_inputs(*args, **kwargs) -> list:
    flat, _ = tree_flatten((args, kwargs))
    return [a for a in flat if isinstance(a, torch.Tensor)]


def run_ways(fn, *args, **kwargs) -> dict:
    """{"prims": ..., "torch_ex": ..., "text": ...}: fn's traced program run three ways on args' tensors."""
    trace = define_sizes(trace_fn(fn, *args, **kwargs))  # (sizes known only at run time: read from their tensors)
    inputs = tensor_inputs(*args, **kwargs)
    prim_trace = define_sizes(flatten_to_prims(trace))
    for b in prim_trace.bound_symbols:
        assert b.sym.is_prim, f"{b.sym.id} is not a prim"
        assert b.sym.id.startswith("prims.") or Tag.OPAQUE in b.sym.tags, b.sym.id
    exec_trace = define_sizes(claim(trace, [torch_ex]))
    text_ns: dict = {}
    exec(compile(str(exec_trace), "<test>", "exec"), {**exec_trace.python_callable().__globals__}, text_ns)
    return {
        "prims": prim_trace.python_callable()(*inputs),
        "torch_ex": exec_trace.python_callable()(*inputs),
        "text": text_ns[exec_trace.fn_name](*inputs),
    }


def assert_matches_torch(op_fn, torch_fn, *args, atol=None, rtol=None, equal_nan=True, **kwargs):
    """op_fn (over proxies) run every way equals torch_fn(*args) in values, dtypes and shapes."""
    expected = torch_fn(*args, **kwargs)
    for way, got in run_ways(op_fn, *args, **kwargs).items():
        assert_same(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan, msg=way)


def assert_same(got, expected, atol=None, rtol=None, equal_nan=True, msg=""):
    gflat, _gspec = tree_flatten(got)
    eflat, _espec = tree_flatten(expected)
    assert len(gflat) == len(eflat), f"{msg}: {len(gflat)} outputs vs {len(eflat)}"
    for g, e in zip(gflat, eflat):
        if isinstance(e, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{msg}: expected a tensor, got {type(g)}"
            assert g.dtype == e.dtype, f"{msg}: dtype {g.dtype} != {e.dtype}"
            assert g.shape == e.shape, f"{msg}: shape {tuple(g.shape)} != {tuple(e.shape)}"
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=equal_nan, msg=lambda m: f"{msg}: {m}",
                                       check_device=True)
        else:
            assert g == e, f"{msg}: {g!r} != {e!r}"


def assert_same_outcome(got, expected, where: str):
    """One call's outcome against eager's: the same error (its type's name, when eager raised) or a close tensor."""
    if isinstance(expected, str):
        assert got == expected, where
    else:
        assert isinstance(got, torch.Tensor), f"{where}: {got}"
        torch.testing.assert_close(got, expected, msg=where)
