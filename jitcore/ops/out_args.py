"""Ops: calls with `out=` (torch.add(a, b, out=c), torch.cat(ts, out=buf), torch.max(x, 0, out=(v, i))). The call
runs as its functional form and the result is written into the out tensors (prims.copy_, as in-place ops write), so
later reads see it and the write reaches the caller's tensor; the call returns the out tensors, as eager does. What
eager does differently, it refuses: a result of another shape (eager resizes the out tensor), another dtype, and
out= where autograd would need to see through it (eager raises the same error there). A factory (no tensor
argument) makes its result in the out tensor's dtype, as eager does.
"""
from __future__ import annotations

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_flatten
from jitcore.ops import prims_misc as pm
from jitcore.ops import torch_map


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def call_with_out(call, fn, args, kwargs):
    """call(*args, **kwargs without out), its result written into kwargs["out"] (a tensor, or a tuple/list of
    them for a call with several results); returns the out tensors as eager's call returns them."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    name = _name(fn)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not all(isinstance(o, TensorProxy) for o in outs):
        raise UnsupportedError("out=", f"{name}(out=...): expected tensors to write into, got "
                               f"{', '.join(type(o).__name__ for o in outs)}")
    flat, _ = tree_flatten((args, kwargs))
    if torch.is_grad_enabled() and any(isinstance(a, TensorProxy) and a.requires_grad for a in flat + outs):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad.")
    if len(outs) == 1 and kwargs.get("dtype") is None and not any(isinstance(a, TensorProxy) for a in flat):
        kwargs["dtype"] = outs[0].dtype  # a factory (torch.arange(n, out=buf)) makes the out tensor's dtype
    result = call(*args, **kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(outs) or not all(isinstance(r, TensorProxy) for r in results):
        raise UnsupportedError("out=", f"{name}(out=...): {len(outs)} out tensor(s) for {len(results)} result(s)")
    for o, r in zip(outs, results):
        if tuple(o.shape) != tuple(r.shape):
            raise UnsupportedError(
                "out=", f"{name}(out=...): the out tensor has shape {list(o.shape)} and the result "
                f"{list(r.shape)}; eager would resize the out tensor, which a jitted function does not do",
                hint="pass an out tensor of the result's shape, or use the result (y = op(...)) instead of out=")
        if o.dtype != r.dtype:
            raise UnsupportedError(
                "out=", f"{name}(out=...): the out tensor is {o.dtype} and the result {r.dtype}",
                hint="pass an out tensor of the result's dtype, or cast the result: out.copy_(op(...))")
        pm.copy_(r, o)
    if not isinstance(out, (tuple, list)):
        return out
    try:  # torch.return_types.max(values=v, indices=i), as eager returns
        return type(result)(outs) if isinstance(result, tuple) and type(result) is not tuple else tuple(outs)
    except TypeError:
        return tuple(outs)


torch_map.OUT_CALL[0] = call_with_out
