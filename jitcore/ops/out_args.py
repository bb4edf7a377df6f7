"""Ops: calls with `out=` (torch.add(a, b, out=c), torch.cat(ts, out=buf), torch.max(x, 0, out=(v, i))). The call
runs as its functional form and the result is written into the out tensors (prims.copy_, as in-place ops write), so
later reads see it and the write reaches the caller's tensor; the call returns the out tensors, as eager does. What
eager does differently, it refuses: a result of more elements into an out tensor whose memory others may share (else
it resizes the out tensor, as eager does) and out= where autograd would need to see through it (eager raises the
same error there). An out tensor of another dtype gets an elementwise result cast where eager casts, and eager's
error where it raises (asked of eager on tensors of ones). A factory (no tensor argument) makes its result in the out
tensor's dtype, as eager does.
"""
from __future__ import annotations

import math
import warnings

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir.arith import value_of
from jitcore.ir.context import get_tracectx, services
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_map
from jitcore.ops.metadata_inplace import _makers, metadata_method


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


# the ops whose result is memory of its own (an out tensor they made, used by no line yet, may grow as in eager)
_NEW_MEMORY = frozenset(f"ltorch.{n}" for n in (
    "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_empty", "new_zeros",
    "new_ones", "new_full", "empty_strided")) | {pc.empty.id}


def _resize_out(name: str, o: TensorProxy, r: TensorProxy):
    """Eager resizes an out tensor of another shape to the result's (warning when it had elements): to as many
    elements or fewer, resize_'s view of its first elements (writes through it followed, whatever shares its memory);
    to more, the tensor becomes a new one of the result's shape where nothing else holds its memory (made by a
    factory in the function and read by no line yet: detach() or .data share memory without being views, so any use
    counts; eager's grown memory then holds only the result). Else refused."""
    if o.numel() != 0:
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(o.shape)}, which "
                      f"does not match the required output shape {list(r.shape)}. This behavior is deprecated, and in "
                      "a future PyTorch release outputs will not be resized unless they have zero elements.",
                      UserWarning, stacklevel=3)
    if r.numel() <= o.numel():
        metadata_method("resize_")(o, tuple(r.shape))
        return
    line = _makers().get(o.name)
    used = any(a is o for scope in get_tracectx()._scopes for b in scope for a in b.flat_proxy_args())
    if line is None or line.sym.id not in _NEW_MEMORY or used or o.requires_grad:
        raise UnsupportedError(
            "out=", f"{name}(out=...): the out tensor has shape {list(o.shape)} and the result {list(r.shape)}, more "
            "elements: eager grows its memory, which here other tensors share (an argument, a view, or viewed)",
            hint="pass an out tensor of the result's shape, or use the result (y = op(...)) instead of out=")
    new = pc.empty(tuple(r.shape), device=o.device, dtype=o.dtype)
    line = get_tracectx()._scopes[-1][-1]
    services().rebind_tensor(o, new, ("resize_", (tuple(r.shape),), {}, torch.is_grad_enabled()))
    line.moves_version = False  # (a new tensor views nothing: no other tensor's version moves; the write that
    # follows moves its own)


# prims an elementwise op's line may hold besides elementwise ones (its dtype and broadcast steps)
_ELEMENTWISE_STEPS = frozenset({pe.convert_element_type.id, ps.broadcast_in_dim.id})


def _elementwise(r: TensorProxy) -> bool:
    """Whether the line making r computes elementwise (all its prims): eager's TensorIterator then computes in the
    inputs' dtype and casts into an out tensor of another dtype."""
    def prims(b):
        return [b] if not b.subsymbols else [p for s in b.subsymbols for p in prims(s)]

    line = _makers().get(r.name)
    return line is not None and all(Tag.ELEMENTWISE in p.sym.tags or p.sym.id in _ELEMENTWISE_STEPS
                                    for p in prims(line))


def _cast_into(name: str, fn, args, kwargs, single: bool, o: TensorProxy, r: TensorProxy) -> TensorProxy:
    """The result r for an out tensor o of another dtype, as eager writes it: an elementwise op's result cast to
    o's dtype where eager allows the cast, and eager's own error where it does not (the call on meta tensors of
    these dtypes and sizes, on ones: mm, clamp, where, amax, sort raise there). Other ops (reductions compute in the
    out tensor's dtype) are refused."""
    def real(x, dtype=None):  # (ones broadcast to x's sizes: no memory; eager checks dtypes before values)
        return torch.ones((), dtype=dtype or x.dtype).expand(tuple(value_of(n) for n in x._shape))

    flat, spec = tree_flatten((args, kwargs))
    margs, mkwargs = tree_unflatten(spec, [real(a) if isinstance(a, TensorProxy) else value_of(a)
                                           if isinstance(a, NumberProxy) else a for a in flat])
    failed = None if single else "; an op of several results"
    if single and math.prod(value_of(n) for n in r._shape) > 1 << 20:
        failed = "; a result this large is not tried in eager"
    try:
        if failed is None:
            fn(*margs, **mkwargs, out=torch.empty(tuple(value_of(n) for n in r._shape), dtype=o.dtype))
    except RuntimeError as e:
        raise RuntimeError(str(e)) from None
    except Exception as e:  # (what eager does is not known here)
        failed = f"; eager's answer is not known here ({type(e).__name__})"
    if failed is None and _elementwise(r):
        return pe.convert_element_type(r, o.dtype)
    raise UnsupportedError(
        "out=", f"{name}(out=...): the out tensor is {o.dtype} and the result {r.dtype}" + (failed or ", an op not "
        "elementwise (eager computes reductions in the out tensor's dtype)"),
        hint="pass an out tensor of the result's dtype, or cast the result: out.copy_(op(...))")


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
            _resize_out(name, o, r)
        if o.dtype != r.dtype:
            r = _cast_into(name, fn, args, kwargs, not isinstance(out, (tuple, list)), o, r)
        pm.copy_(r, o)
    if not isinstance(out, (tuple, list)):
        return out
    try:  # torch.return_types.max(values=v, indices=i), as eager returns
        return type(result)(outs) if isinstance(result, tuple) and type(result) is not tuple else tuple(outs)
    except TypeError:
        return tuple(outs)


torch_map.OUT_CALL[0] = call_with_out
