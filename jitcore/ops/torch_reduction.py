"""Ops: torch-level reductions, scans and sorts (torch.sum, Tensor.max, torch.var_mean, torch.cumsum, torch.sort, ...).
Each resolves dims (None, int, tuple; negatives) and keepdim, picks torch's result dtype (integers sum to int64, half
precision accumulates in float32 and is rounded once), then calls the strict reduction prims.
"""
from __future__ import annotations

import builtins
import math

import torch

from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.utils import canonical_dims, check, is_int, static_numbers

ND = (Tag.NON_DIFFERENTIABLE,)
T = torch.Tensor


# -- helpers other families use ---------------------------------------------------------------------------------
def reduction_dims(op: str, a, dim, *, empty_means_all=True) -> tuple[int, ...]:
    """dim (None, an int, or a sequence) as canonical dims of a; None (and, for most ops, ()) means every dim."""
    check(isinstance(a, TensorProxy), lambda: f"{op}(): expected a tensor input, got {type(a).__name__}")
    if dim is None:
        return tuple(range(a.ndim))
    dims = (dim,) if is_int(dim) else tuple(dim)
    if not dims and empty_means_all:
        return tuple(range(a.ndim))
    try:
        out = canonical_dims(dims, a.ndim)
    except IndexError as e:
        raise MetaError(f"{op}(): {e}; input shape {tuple(a.shape)}") from None
    check(len(set(out)) == len(out), lambda: f"{op}(): dim {dims} appears multiple times in the list of dims")
    return () if a.ndim == 0 else out


def keepdim_shape(shape, dims) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


def restore_dims(out, shape, dims):
    """A reduction's output reshaped to keep the reduced dims with size 1 (keepdim=True)."""
    return ps.reshape(out, keepdim_shape(shape, dims))


def _reduce(prim_op, op, input, dim, keepdim, dtype, *, int_to_long):
    dims = reduction_dims(op, input, dim)
    if dtype is not None:
        result = dtype
    elif int_to_long and dtypes.category(input.dtype) < 2:
        result = torch.int64
    else:
        result = input.dtype
    out = prim_op(to_dtype(input, dtypes.computation_dtype(result)), dims)
    out = to_dtype(out, result)
    return restore_dims(out, input.shape, dims) if keepdim else out


def _reduced_numel(a, dims) -> int:
    return math.prod(a.shape[d] for d in dims)


# -- sums and products ----------------------------------------------------------------------------------------
@torchsymbol(torch.sum, T.sum, method="sum", id="ltorch.sum")
def sum(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(pr.sum, "sum", input, dim, keepdim, dtype, int_to_long=True)


@torchsymbol(torch.prod, T.prod, method="prod", id="ltorch.prod")
def prod(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(pr.prod, "prod", input, dim, keepdim, dtype, int_to_long=True)


@torchsymbol(torch.nansum, T.nansum, method="nansum", id="ltorch.nansum")
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    if dtypes.is_inexact(input.dtype):
        input = te.where(te.isnan(input), to_dtype(0, input.dtype), input)
    return sum(input, dim, keepdim, dtype=dtype)


def _check_mean_dtype(op, dtype):
    check(dtypes.is_inexact(dtype), lambda: f"{op}(): could not infer output dtype. Input dtype must be either a "
                                            f"floating point or complex dtype. Got: {dtype}")


@torchsymbol(torch.mean, T.mean, method="mean", id="ltorch.mean")
def mean(input, dim=None, keepdim=False, *, dtype=None):
    result = dtype if dtype is not None else input.dtype
    _check_mean_dtype("mean", result)
    dims = reduction_dims("mean", input, dim)
    s = pr.sum(to_dtype(input, dtypes.computation_dtype(result)), dims)
    out = to_dtype(te.div(s, _reduced_numel(input, dims)), result)
    return restore_dims(out, input.shape, dims) if keepdim else out


@torchsymbol(torch.nanmean, T.nanmean, method="nanmean", id="ltorch.nanmean")
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    result = dtype if dtype is not None else input.dtype
    _check_mean_dtype("nanmean", result)
    keep = te.logical_not(te.isnan(input))
    total = nansum(to_dtype(input, dtypes.computation_dtype(result)), dim, keepdim)
    return to_dtype(te.div(total, sum(keep, dim, keepdim)), result)


# -- max / min ------------------------------------------------------------------------------------------------
def _extreme(prim_op, op, input, dim, keepdim):
    dims = reduction_dims(op, input, dim)
    out = prim_op(input, dims)
    return restore_dims(out, input.shape, dims) if keepdim else out


@torchsymbol(torch.amax, T.amax, method="amax", id="ltorch.amax")
def amax(input, dim=(), keepdim=False):
    return _extreme(pr.amax, "amax", input, dim, keepdim)


@torchsymbol(torch.amin, T.amin, method="amin", id="ltorch.amin")
def amin(input, dim=(), keepdim=False):
    return _extreme(pr.amin, "amin", input, dim, keepdim)


def _arg(prim_op, op, input, dim, keepdim):
    check(input.dtype is not torch.bool, lambda: f"{op}: not implemented for 'Bool'")
    if dim is None:
        out = prim_op(input, None)
        return ps.reshape(out, (1,) * input.ndim) if keepdim else out
    (d,) = reduction_dims(op, input, dim) or (None,)
    if d is None:  # a 0-d input
        return prim_op(input, None)
    out = prim_op(input, d)
    return restore_dims(out, input.shape, (d,)) if keepdim else out


@torchsymbol(torch.argmax, T.argmax, method="argmax", tags=ND, id="ltorch.argmax")
def argmax(input, dim=None, keepdim=False):
    return _arg(pr.argmax, "argmax", input, dim, keepdim)


@torchsymbol(torch.argmin, T.argmin, method="argmin", tags=ND, id="ltorch.argmin")
def argmin(input, dim=None, keepdim=False):
    return _arg(pr.argmin, "argmin", input, dim, keepdim)


def _max_min(op, extreme, arg, binary, input, dim, keepdim):
    if isinstance(dim, TensorProxy):  # torch.max(input, other): elementwise
        return binary(input, dim)
    if dim is None:
        check(input.numel() > 0, lambda: f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                                         f"Specify the reduction dim with the 'dim' argument.")
        return extreme(input, tuple(range(input.ndim)))
    check(is_int(dim), lambda: f"{op}(): dim must be an int, got {dim!r}")
    values = extreme(input, dim, keepdim)
    idx_input = to_dtype(input, torch.uint8) if input.dtype is torch.bool else input
    return getattr(torch.return_types, op)((values, arg(idx_input, dim, keepdim)))


@torchsymbol(torch.max, T.max, method="max", id="ltorch.max")
def max(input, dim=None, keepdim=False):
    """Full max; (values, indices) along dim (torch.return_types.max); or, given a tensor, torch.maximum."""
    return _max_min("max", amax, argmax, te.maximum, input, dim, keepdim)


@torchsymbol(torch.min, T.min, method="min", id="ltorch.min")
def min(input, dim=None, keepdim=False):
    """Full min; (values, indices) along dim; or, given a tensor, torch.minimum."""
    return _max_min("min", amin, argmin, te.minimum, input, dim, keepdim)


@torchsymbol(torch.aminmax, T.aminmax, method="aminmax", id="ltorch.aminmax")
def aminmax(input, *, dim=None, keepdim=False):
    dims = () if dim is None else dim
    return torch.return_types.aminmax((amin(input, dims, keepdim), amax(input, dims, keepdim)))


# -- variance ---------------------------------------------------------------------------------------------------
def _var_args(op, input, dim, unbiased, correction):
    if isinstance(dim, bool):  # torch.var(input, unbiased)
        dim, unbiased = None, dim
    check(unbiased is None or correction is None,
          lambda: f"{op}(): cannot specify both unbiased and correction")
    if correction is None:
        correction = 0 if unbiased is False else 1
    correction = static_numbers(correction)
    check(dtypes.is_inexact(input.dtype),
          lambda: f"{op}(): std and var only support floating point and complex dtypes, got {input.dtype}")
    return reduction_dims(op, input, dim), correction


def _var_mean(op, input, dim, unbiased, keepdim, correction, *, with_mean, root):
    dims, correction = _var_args(op, input, dim, unbiased, correction)
    compute = dtypes.computation_dtype(input.dtype)
    x = to_dtype(input, compute)
    if with_mean:
        v, m = pr.var_mean(x, dims, correction=correction)
    else:
        v, m = pr.var(x, dims, correction=correction), None
    if root:
        v = te.sqrt(v)
    outs = [to_dtype(v, dtypes.to_real(input.dtype))] + ([to_dtype(m, input.dtype)] if with_mean else [])
    if keepdim:
        outs = [restore_dims(o, input.shape, dims) for o in outs]
    return tuple(outs) if with_mean else outs[0]


@torchsymbol(torch.var, T.var, method="var", id="ltorch.var")
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _var_mean("var", input, dim, unbiased, keepdim, correction, with_mean=False, root=False)


@torchsymbol(torch.std, T.std, method="std", id="ltorch.std")
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _var_mean("std", input, dim, unbiased, keepdim, correction, with_mean=False, root=True)


@torchsymbol(torch.var_mean, id="ltorch.var_mean")
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _var_mean("var_mean", input, dim, unbiased, keepdim, correction, with_mean=True, root=False)


@torchsymbol(torch.std_mean, id="ltorch.std_mean")
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _var_mean("std_mean", input, dim, unbiased, keepdim, correction, with_mean=True, root=True)


# -- boolean reductions ---------------------------------------------------------------------------------------
def _bool_reduce(op, input, dim, keepdim, *, is_any):
    dims = reduction_dims(op, input, dim, empty_means_all=False)
    result = torch.uint8 if input.dtype is torch.uint8 else torch.bool
    b = input if input.dtype is torch.bool else te.ne(input, 0)
    if _reduced_numel(input, dims) == 0:
        shape = tuple(s for i, s in enumerate(input.shape) if i not in dims)
        out = pc.full(shape, not is_any, device=input.device, dtype=torch.bool)
    else:
        out = (pr.amax if is_any else pr.amin)(b, dims)
    out = to_dtype(out, result)
    return restore_dims(out, input.shape, dims) if keepdim else out


@torchsymbol(torch.all, T.all, method="all", tags=ND, id="ltorch.all")
def all(input, dim=None, keepdim=False):
    return _bool_reduce("all", input, dim, keepdim, is_any=False)


@torchsymbol(torch.any, T.any, method="any", tags=ND, id="ltorch.any")
def any(input, dim=None, keepdim=False):
    return _bool_reduce("any", input, dim, keepdim, is_any=True)


# torch.distributions validates arguments with these (`constraint.check(value).all()` becomes torch._is_all_true)
@torchsymbol(torch._is_all_true, tags=ND, id="ltorch._is_all_true")
def _is_all_true(input):
    check(input.dtype is torch.bool, lambda: f"_is_all_true(): expected a bool tensor, got {input.dtype}")
    return all(input)


@torchsymbol(torch._is_any_true, tags=ND, id="ltorch._is_any_true")
def _is_any_true(input):
    check(input.dtype is torch.bool, lambda: f"_is_any_true(): expected a bool tensor, got {input.dtype}")
    return any(input)


@torchsymbol(torch.count_nonzero, T.count_nonzero, method="count_nonzero", tags=ND, id="ltorch.count_nonzero")
def count_nonzero(input, dim=None):
    return sum(te.ne(input, 0), dim)


# -- logsumexp and norms --------------------------------------------------------------------------------------
@torchsymbol(torch.logsumexp, T.logsumexp, torch.special.logsumexp, method="logsumexp", id="ltorch.logsumexp")
def logsumexp(input, dim, keepdim=False):
    dims = reduction_dims("logsumexp", input, dim)
    result = input.dtype if dtypes.is_inexact(input.dtype) else torch.get_default_dtype()
    x = to_dtype(input, dtypes.computation_dtype(result))
    if _reduced_numel(input, dims) == 0:
        out = te.log(pr.sum(te.exp(x), dims))
    else:
        m = pr.amax(x, dims)
        m = te.where(te.isinf(m), to_dtype(0, m.dtype), m)
        shifted = te.sub(x, te.expand_to(restore_dims(m, input.shape, dims), input.shape))
        out = te.add(te.log(pr.sum(te.exp(shifted), dims)), m)
    out = to_dtype(out, result)
    return restore_dims(out, input.shape, dims) if keepdim else out


def _vector_norm(op, x, ord, dim, keepdim, dtype):
    check(dtypes.is_inexact(x.dtype) or (dtype is not None and dtypes.is_inexact(dtype)),
          lambda: f"{op}: Expected a floating point or complex tensor as input. Got {x.dtype}")
    if dtype is not None:
        x = to_dtype(x, dtype)
    result = dtypes.to_real(x.dtype)
    dims = reduction_dims(op, x, dim)
    a = to_dtype(te.abs(x), dtypes.computation_dtype(result))
    if ord == math.inf:
        out = pr.amax(a, dims)
    elif ord == -math.inf:
        out = pr.amin(a, dims)
    elif ord == 0:  # the count of nonzeros; a**0 (1 everywhere, gradient 0) keeps eager's zero gradient
        out = pr.sum(te.where(te.ne(a, 0), te.pow(a, 0), 0.0), dims)
    elif ord == 1:
        out = pr.sum(a, dims)
    elif ord == 2:
        out = te.sqrt(pr.sum(te.mul(a, a), dims))
    else:
        out = te.pow(pr.sum(te.pow(a, ord), dims), 1.0 / ord)
    out = to_dtype(out, result)
    return restore_dims(out, x.shape, dims) if keepdim else out


@torchsymbol(torch.linalg.vector_norm, id="ltorch.vector_norm")
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _vector_norm("linalg.vector_norm", x, ord, dim, keepdim, dtype)


@torchsymbol(torch.norm, T.norm, method="norm", id="ltorch.norm")
def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm: vector norms (p a number, or 'fro' over at most 2 dims); 'nuc' runs as an opaque torch op."""
    check(out is None, "norm: out= is not supported")
    if p is None or p == "fro":
        dims = None if dim is None else ((dim,) if is_int(dim) else tuple(dim))
        check(dims is None or len(dims) <= 2, lambda: f"norm: 'fro' takes at most 2 dims, got {dim}")
        p = 2
    if isinstance(p, str):  # 'nuc': a matrix norm (singular values), run by torch as an opaque op
        return opaque_symbol(torch.norm)(input, p, dim, keepdim, dtype=dtype)
    return _vector_norm("norm", input, p, dim, keepdim, dtype)


# -- scans -------------------------------------------------------------------------------------------------------
def _scan(prim_op, op, input, dim, dtype):
    result = dtype if dtype is not None else (torch.int64 if dtypes.category(input.dtype) < 2 else input.dtype)
    (d,) = reduction_dims(op, input, dim) or (0,)
    out = prim_op(to_dtype(input, dtypes.computation_dtype(result)), d)
    return to_dtype(out, result)


@torchsymbol(torch.cumsum, T.cumsum, method="cumsum", id="ltorch.cumsum")
def cumsum(input, dim, *, dtype=None):
    return _scan(pr.cumsum, "cumsum", input, dim, dtype)


@torchsymbol(torch.cumprod, T.cumprod, method="cumprod", id="ltorch.cumprod")
def cumprod(input, dim, *, dtype=None):
    return _scan(pr.cumprod, "cumprod", input, dim, dtype)


# -- selection and sorting -----------------------------------------------------------------------------------
@torchsymbol(torch.topk, T.topk, method="topk", id="ltorch.topk")
def topk(input, k, dim=-1, largest=True, sorted=True):
    return torch.return_types.topk(pr.topk(input, k, -1 if dim is None else static_numbers(dim), largest, sorted))


@torchsymbol(torch.sort, T.sort, method="sort", id="ltorch.sort")
def sort(input, dim=-1, descending=False, *, stable=False):
    return torch.return_types.sort(pr.sort(input, static_numbers(dim), descending, builtins.bool(stable)))


@torchsymbol(torch.argsort, T.argsort, method="argsort", tags=ND, id="ltorch.argsort")
def argsort(input, dim=-1, descending=False, *, stable=False):
    return pr.sort(input, static_numbers(dim), descending, builtins.bool(stable))[1]


@torchsymbol(torch.msort, T.msort, method="msort", id="ltorch.msort")
def msort(input):
    return pr.sort(input, 0, False, False)[0]
