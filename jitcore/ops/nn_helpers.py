"""Ops: small helpers the torch_nn_* and torch_linalg families write their bodies with. They are plain functions
over prims (not ops), so a decomposition reads as the prims it records: keepdim reductions, unsqueeze, permute,
slicing one dim, constants from `full`/`iota`, upcasting half precision, loss reductions and `inplace=True`.
"""
from __future__ import annotations

import torch

from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops.torch_elementwise import broadcast, div, expand_to, to_dtype
from jitcore.ops.utils import canonical_dims, check, static_numbers


def dims_of(a, dim) -> tuple[int, ...]:
    """dim (None: all dims; int; sequence) as canonical dims of a."""
    if dim is None:
        return tuple(range(a.ndim))
    try:
        return canonical_dims(dim, a.ndim) if a.ndim else ()
    except IndexError as e:
        check(False, str(e))


def keep(out, a, dims):
    """out (a reduced over dims) reshaped with size-1 dims where the reduced ones were (keepdim=True)."""
    shape = tuple(1 if i in dims else s for i, s in enumerate(a.shape))
    return ps.reshape(out, shape)


def _reduce(prim_op, a, dim, keepdim):
    dims = dims_of(a, dim)
    out = prim_op(a, dims)
    return keep(out, a, dims) if keepdim else out


def sum_(a, dim=None, keepdim=False):
    return _reduce(pr.sum, a, dim, keepdim)


def amax(a, dim=None, keepdim=False):
    return _reduce(pr.amax, a, dim, keepdim)


def amin(a, dim=None, keepdim=False):
    return _reduce(pr.amin, a, dim, keepdim)


def mean(a, dim=None, keepdim=False):
    dims = dims_of(a, dim)
    n = 1
    for d in dims:
        n *= a.shape[d]
    return div(sum_(a, dims, keepdim), n)


def var_mean(a, dim, correction=0, keepdim=False):
    dims = dims_of(a, dim)
    v, m = pr.var_mean(a, dims, correction=correction)
    return (keep(v, a, dims), keep(m, a, dims)) if keepdim else (v, m)


def unsqueeze(a, dim: int):
    d = dim % (a.ndim + 1)
    return ps.reshape(a, tuple(a.shape[:d]) + (1,) + tuple(a.shape[d:]))


def squeeze(a, dim: int):
    return ps.squeeze(a, (dim % max(a.ndim, 1),))


def flatten(a):
    return ps.reshape(a, (a.numel(),))


def permute(a, perm):
    perm = tuple(perm)
    return a if perm == tuple(range(a.ndim)) else ps.transpose(a, perm)


def swap(a, d0: int, d1: int):
    perm = list(range(a.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(a, perm)


def movedim(a, src: int, dst: int):
    perm = [d for d in range(a.ndim) if d != src % a.ndim]
    perm.insert(dst % a.ndim, src % a.ndim)
    return permute(a, perm)


def slice_dim(a, dim: int, start: int, end: int, step: int = 1):
    """a[..., start:end:step, ...] along dim (bounds already in range)."""
    starts, ends, steps = [0] * a.ndim, list(a.shape), [1] * a.ndim
    starts[dim], ends[dim], steps[dim] = start, end, step
    if (start, end, step) == (0, a.shape[dim], 1):
        return a
    return ps.slice_prim(a, tuple(starts), tuple(ends), tuple(steps))


def full(shape, value, like, dtype=None):
    return pc.full(tuple(shape), value, device=like.device, dtype=dtype or like.dtype)


def iota(n: int, like, dtype=torch.int64, start=0, step=1):
    return pc.iota(n, start=start, step=step, device=like.device, dtype=dtype)


def upcast(a):
    """a in its computation dtype (float32 for half precision)."""
    return to_dtype(a, dtypes.computation_dtype(a.dtype)) if isinstance(a, TensorProxy) else a


def check_float(op: str, a, what="input"):
    check(isinstance(a, TensorProxy), lambda: f"{op}(): argument '{what}' must be Tensor, not {type(a).__name__}")
    check(dtypes.is_inexact(a.dtype), lambda: f"{op}: \"{op}\" not implemented for '{_dtname(a.dtype)}' ({what} has "
                                              f"shape {tuple(a.shape)})")


def _dtname(dtype) -> str:
    return {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(dtype, str(dtype).replace("torch.", ""))


def ntuple(x, n: int, name: str, op: str) -> tuple:
    """An int or a sequence of n ints as a tuple of n ints (conv/pool arguments)."""
    x = static_numbers(x)
    if isinstance(x, int):
        return (x,) * n
    x = tuple(x)
    if len(x) == 1:
        return x * n
    check(len(x) == n, lambda: f"{op}: expected {name} to be a single integer value or a list of {n} values to "
                               f"match the convolution dimensions, but got {name}={list(x)}")
    return x


def reduction_string(size_average, reduce, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction

        return _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    return reduction


def reduce_loss(op: str, loss, reduction: str):
    check(reduction in ("none", "mean", "sum"), lambda: f"{op}: {reduction} is not a valid value for reduction")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum_(loss)
    return mean(loss)


def maybe_inplace(input, out, inplace: bool):
    """`inplace=True`: out is written into input at run time (prims.copy_) and input's new value is returned."""
    if not inplace:
        return out
    return pm.copy_(to_dtype(expand_to(out, input.shape), input.dtype), input)


def float_pair(a, b, op: str):
    """a and b promoted to a common inexact dtype (integers -> the default float) and broadcast together."""
    dt = dtypes.promote_dtypes(a, b)
    if not dtypes.is_inexact(dt):
        dt = torch.get_default_dtype()
    return broadcast(to_dtype(a, dt), to_dtype(b, dt), op=op)
