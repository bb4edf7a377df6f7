"""Ops: miscellaneous prims: shape (a tensor's sizes as Python ints), copy_ (the one in-place write, into an
existing tensor), stop_gradient (a tensor cut off from autodiff), no_grad_update (a tensor after a write that
autograd did not record), item_as_size (a tensor's value as a size known only at run time) and inference_tensor (a
returned tensor eager makes under torch.inference_mode()) and laid_out (a tensor in the memory order eager's had).
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy, run_time_size
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import services
from jitcore.ops.registry import prim
from jitcore.ops.utils import check, requires_grad


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
def _shape(a):
    return tuple(a.shape)


def _inference_tensor(a):
    with torch.inference_mode():
        return a.clone()


def _no_grad_update(dst, values):
    return values


def _copy_(src, dst):
    return dst.copy_(src)


def _item_as_size(a):
    n = int(a.item())
    if n < 0:
        raise RuntimeError(f"a size computed from a tensor's value is negative ({n})")
    return n


def stride_order(t) -> tuple:
    """t's dims from outermost to innermost in memory (by decreasing stride; size-1 and stride-0 dims, whose place
    does not move an element, after the others in dim order)."""
    return tuple(sorted(range(t.dim()), key=lambda d: (0 if t.shape[d] == 1 else -t.stride(d), d)))


def _laid_out(a, order):
    if stride_order(a) == tuple(order):
        return a
    return a.permute(order).contiguous().permute(tuple(order.index(d) for d in range(len(order))))


def _tensor(op, a, what="a"):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected {what} to be a tensor, got {a!r}")


@prim("prims.shape", tags=(Tag.NON_DIFFERENTIABLE, Tag.PYTHON), kernel=_shape)
def shape(a):
    """The sizes of a as a tuple (ints, or IntegerProxy under symbolic values)."""
    _tensor("shape", a)
    return tuple(a._shape)


@prim("prims.copy_", tags=(Tag.INPLACE, Tag.DONT_DCE), kernel=_copy_)
def copy_(src, dst):
    """Writes src into dst when it runs (dst.copy_(src)); returns dst's new value. One shape; dtype, device convert."""
    _tensor("copy_", src, "src")
    _tensor("copy_", dst, "dst")
    check(tuple(src.shape) == tuple(dst.shape),
          lambda: f"prims.copy_: src shape {tuple(src.shape)} must equal dst shape {tuple(dst.shape)}")
    return dst.like(requires_grad=requires_grad(src, dst))


@prim("prims.stop_gradient", tags=(Tag.NON_DIFFERENTIABLE,), kernel=torch.detach)
def stop_gradient(a):
    """a's value with no gradient flowing back (torch's detach)."""
    _tensor("stop_gradient", a)
    return a.like(requires_grad=False)


@prim("prims.no_grad_update", kernel=_no_grad_update)
def no_grad_update(dst, values):
    """dst after a write autograd did not record (under no_grad, or through .data or detach()): values' values,
    dst's gradient path. Eager keeps the written tensor's autograd identity; its later uses send gradients to dst."""
    _tensor("no_grad_update", dst, "dst")
    _tensor("no_grad_update", values, "values")
    check(tuple(values.shape) == tuple(dst.shape),
          lambda: f"prims.no_grad_update: values shape {tuple(values.shape)} must equal dst shape {tuple(dst.shape)}")
    return values.like(requires_grad=dst.requires_grad)


@prim("prims.item_as_size", tags=(Tag.NON_DIFFERENTIABLE,), kernel=_item_as_size)
def item_as_size(a):
    """The value of a 0-dim integer tensor as a size known only at run time (the output length of bincount, of
    repeat_interleave by a tensor): jitcore/ir/proxies.py run_time_size. Raises at run time if it is negative."""
    _tensor("item_as_size", a)
    check(a.ndim == 0 and not a.dtype.is_floating_point and not a.dtype.is_complex,
          lambda: f"prims.item_as_size: expected a 0-dim integer tensor, got {a.dtype} of shape {tuple(a.shape)}")
    values = services().real_values([a])
    return run_time_size(0 if values is None else max(int(values[0]), 0))


@prim("prims.inference_tensor", tags=(Tag.NON_DIFFERENTIABLE,), kernel=_inference_tensor)
def inference_tensor(a):
    """a's values as an inference tensor (made under torch.inference_mode(): is_inference() is True, no autograd), for
    a tensor the function returns that eager made under inference mode."""
    _tensor("inference_tensor", a)
    return a.like(requires_grad=False)


@prim("prims.laid_out", kernel=_laid_out)
def laid_out(a, order):
    """a's values with its dims laid out in memory in `order` (outermost first, as stride_order tells): a itself when
    they already are, else a dense copy. For an opaque op whose random draws fill its input's memory order: the value
    jitcore computes at run time (functional, or a fused region's) may be laid out otherwise than eager's was."""
    _tensor("laid_out", a)
    check(sorted(order) == list(range(a.ndim)), lambda: f"prims.laid_out: {order} is no order of {a.ndim} dims")
    return a.like()
