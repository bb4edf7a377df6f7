"""Ops: reduction, scan and sort prims (sum, prod, amax, amin, var, var_mean, argmax, argmin, topk, sort, cumsum,
cumprod). Dims are canonical tuples; outputs drop the reduced dims (ltorch handles keepdim), and keep the input
dtype (ltorch upcasts), except var (real for complex input) and the int64 indices.
"""
from __future__ import annotations

import torch

from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops.registry import prim
from jitcore.ops.utils import canonical_dims, check, prim_dims, requires_grad

ND = (Tag.NON_DIFFERENTIABLE,)


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
# dims=() reduces nothing (torch reads an empty dim list as "all dims")
def _sum(a, dims):
    if not dims:
        return torch.sum(a.unsqueeze(-1), -1, dtype=a.dtype)
    if a.is_floating_point():  # keeps its dtype without being told (integers and bools would become int64)
        return torch.sum(a, dims)
    return torch.sum(a, dims, dtype=a.dtype)


def _prod(a, dims):
    if not dims:
        return torch.prod(a.unsqueeze(-1), -1, dtype=a.dtype)
    if len(dims) == a.ndim:
        return torch.prod(a, dtype=a.dtype)
    if len(dims) == 1:
        return torch.prod(a, dims[0], dtype=a.dtype)
    kept = [d for d in range(a.ndim) if d not in dims]
    moved = a.permute(kept + list(dims)).reshape([a.shape[d] for d in kept] + [-1])
    return torch.prod(moved, -1, dtype=a.dtype)


def _amax(a, dims):
    return torch.amax(a, dims) if dims else a.clone()


def _amin(a, dims):
    return torch.amin(a, dims) if dims else a.clone()


def _var(a, dims, *, correction):
    return torch.var(a, dims, correction=correction) if dims else torch.var(a.unsqueeze(-1), -1, correction=correction)


def _var_mean(a, dims, *, correction):
    if not dims:
        return torch.var_mean(a.unsqueeze(-1), -1, correction=correction)
    return torch.var_mean(a, dims, correction=correction)


def _sort(a, dim, descending, stable):
    return torch.sort(a, dim=dim, descending=descending, stable=stable)


def _cumsum(a, dim):
    return torch.cumsum(a, dim, dtype=a.dtype)


def _cumprod(a, dim):
    return torch.cumprod(a, dim, dtype=a.dtype)


def _tensor(op, a, allowed=None):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected a tensor, got {a!r}")
    if allowed is not None:
        check(dtypes.category(a.dtype) in allowed, lambda: f"prims.{op}: not implemented for '{a.dtype}'")


def _dim(op, a, dim) -> int:
    check(isinstance(dim, int) and not isinstance(dim, bool), lambda: f"prims.{op}: dim must be an int, got {dim!r}")
    try:
        return canonical_dims(dim, a.ndim)[0]
    except IndexError as e:
        raise MetaError(f"prims.{op}: {e} for a tensor of shape {tuple(a.shape)}") from None


def _reduced(op, a, dims, *, nonempty=False) -> tuple:
    """The output shape of reducing a over dims (canonical, distinct); nonempty: reduced dims need size > 0."""
    dims = prim_dims(op, a, dims)
    if nonempty:
        for d in dims:
            if a.ndim and a.shape[d] == 0:
                raise MetaError(f"prims.{op}: Expected reduction dim {d} to have non-zero size; shape {tuple(a.shape)}")
    return tuple(s for i, s in enumerate(a.shape) if i not in dims)


def _reduction(op_id, allowed, nonempty=False, *, kernel):
    name = op_id.removeprefix("prims.")

    def meta(a, dims):
        _tensor(name, a, allowed)
        return a.like(shape=_reduced(name, a, dims, nonempty=nonempty), requires_grad=requires_grad(a))

    meta.__name__ = name
    meta.__doc__ = f"{name} of a over dims (a tuple of canonical dims; () reduces nothing)."
    return prim(op_id, kernel=kernel)(meta)


sum = _reduction("prims.sum", (0, 1, 2, 3), kernel=_sum)
prod = _reduction("prims.prod", (0, 1, 2, 3), kernel=_prod)
amax = _reduction("prims.amax", (0, 1, 2), nonempty=True, kernel=_amax)
amin = _reduction("prims.amin", (0, 1, 2), nonempty=True, kernel=_amin)


def _var_out(op, a, dims, correction):
    _tensor(op, a, (2, 3))
    check(isinstance(correction, (int, float)) and not isinstance(correction, bool),
          lambda: f"prims.{op}: correction must be a number, got {correction!r}")
    shape = _reduced(op, a, dims)
    return TensorProxy(shape, dtypes.to_real(a.dtype), a.device, requires_grad(a))


@prim("prims.var", kernel=_var)
def var(a, dims, *, correction):
    """Variance over dims with `correction` (Bessel's is 1); inexact dtypes; real result for complex a."""
    return _var_out("var", a, dims, correction)


@prim("prims.var_mean", kernel=_var_mean)
def var_mean(a, dims, *, correction):
    """(variance, mean) over dims, like torch.var_mean."""
    v = _var_out("var_mean", a, dims, correction)
    return v, a.like(shape=v.shape, requires_grad=requires_grad(a))


def _arg_reduction(op_id, *, kernel):
    name = op_id.removeprefix("prims.")

    def meta(a, dim):
        _tensor(name, a, (1, 2))
        if dim is None:
            check(a.numel() != 0, lambda: f"prims.{name}: Expected reduction dim to be specified for input.numel() "
                                          f"== 0; shape {tuple(a.shape)}")
            return TensorProxy((), torch.int64, a.device)
        d = _dim(name, a, dim)
        shape = _reduced(name, a, (d,), nonempty=True)
        return TensorProxy(shape, torch.int64, a.device)

    meta.__name__ = name
    meta.__doc__ = f"int64 index of the {name[3:]} along dim (None: of the flattened tensor); first on ties."
    return prim(op_id, tags=ND, kernel=kernel)(meta)


argmax = _arg_reduction("prims.argmax", kernel=torch.argmax)
argmin = _arg_reduction("prims.argmin", kernel=torch.argmin)


@prim("prims.topk", kernel=torch.topk)
def topk(a, k, dim, largest, sorted):
    """(values, int64 indices) of the k largest (or smallest) entries along dim."""
    _tensor("topk", a, (1, 2))
    d = _dim("topk", a, dim)
    n = a.shape[d] if a.ndim else 1
    check(isinstance(k, (int, IntegerProxy)) and 0 <= k <= n,  # (a symbolic k: the bounds are predicates)
          lambda: f"prims.topk: selected index k out of range: k={k} for dim {d} of shape {tuple(a.shape)}")
    shape = list(a.shape)
    if a.ndim:
        shape[d] = k
    return a.like(shape=tuple(shape), requires_grad=requires_grad(a)), TensorProxy(shape, torch.int64, a.device)


@prim("prims.sort", kernel=_sort)
def sort(a, dim, descending, stable):
    """(values, int64 indices) of a sorted along dim."""
    _tensor("sort", a, (0, 1, 2))
    _dim("sort", a, dim)
    return a.like(requires_grad=requires_grad(a)), TensorProxy(a.shape, torch.int64, a.device)


def _scan(op_id, *, kernel):
    name = op_id.removeprefix("prims.")

    def meta(a, dim):
        _tensor(name, a, (1, 2, 3))
        _dim(name, a, dim)
        return a.like(requires_grad=requires_grad(a))

    meta.__name__ = name
    meta.__doc__ = f"inclusive {name} along dim, in a's dtype (bool is refused; ltorch converts first)."
    return prim(op_id, kernel=kernel)(meta)


cumsum = _scan("prims.cumsum", kernel=_cumsum)
cumprod = _scan("prims.cumprod", kernel=_cumprod)
