"""Transforms: VJP rows for torch-level composites whose decomposition's gradient differs from eager's at edge points
(std where it is 0, a vector norm at 0, max/min along a dim at ties, xlogy at x = 0, logsigmoid at 0). Each rule
writes eager's own backward formula (FunctionsManual.cpp: std_backward, norm_backward,
value_selecting_reduction_backward; xlogy's derivative; log_sigmoid_backward): the jitted gradient is eager's.
"""
from __future__ import annotations

import math

from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_reduction as pr
from jitcore.ops import torch_elementwise as te
from jitcore.ops.torch_reduction import _var_args, reduction_dims, restore_dims
from transforms.vjp_helpers import VJP_RULES, bound_arguments, is_diff, sum_to


def _real_float(x) -> bool:
    return isinstance(x, TensorProxy) and dtypes.is_inexact(x.dtype) and not x.dtype.is_complex


def _numel(shape, dims):
    n = 1
    for d in dims:
        n *= shape[d]
    return n


def _spread(t, shape, dims, keepdim):
    """A reduction's output (or its cotangent) broadcast back over the reduced dims of `shape`."""
    t = t if keepdim else restore_dims(t, shape, dims)
    return te.expand_to(t, tuple(shape))


def _upcast(t):
    return te.to_dtype(t, dtypes.computation_dtype(t.dtype)) if isinstance(t, TensorProxy) else t


# -- std, std_mean: eager masks the gradient of the square root where std is 0 ------------------------------------
def std_vjp(bsym, g_std, g_mean=None):
    input, dim, unbiased, keepdim, correction = bound_arguments(bsym)
    if not (_real_float(input) and is_diff(input)):
        return NotImplemented
    dims, correction = _var_args(bsym.sym.name, input, dim, unbiased, correction)
    shape = tuple(input.shape)
    n = _numel(shape, dims)  # an IntegerProxy under symbolic sizes: the arithmetic below is recorded
    x = _upcast(input)
    std = bsym.output[0] if isinstance(bsym.output, tuple) else bsym.output
    gx = None
    if g_std is not None:
        std, g_std = _upcast(std), _upcast(g_std)
        g_var = te.where(te.eq(std, 0), 0.0, te.div(g_std, te.mul(std, 2)))
        mean = restore_dims(te.div(pr.sum(x, dims), n), shape, dims)
        centered = te.sub(x, te.expand_to(mean, shape))
        gx = te.mul(_spread(g_var, shape, dims, keepdim), centered)
        denom = n - correction
        if isinstance(denom, (int, float)):  # eager scales by 2 / (n - correction) in double: 2 / 0 is inf
            gx = te.mul(gx, 2.0 / denom if denom != 0 else math.inf)
        else:
            gx = te.div(te.mul(gx, 2.0), denom)
    if g_mean is not None:
        gm = te.div(_spread(_upcast(g_mean), shape, dims, keepdim), n)
        gx = gm if gx is None else te.add(gx, gm)
    if gx is None:
        return NotImplemented
    return (te.to_dtype(gx, input.dtype), None, None, None, None)


VJP_RULES["ltorch.std"] = std_vjp
VJP_RULES["ltorch.std_mean"] = std_vjp


# -- vector norms: eager's norm_backward, 0 where the norm is 0 -----------------------------------------------------
def _norm_grad(x, p, norm, g):
    """d norm_p(x) pulled back (x, norm, g already broadcast to x's shape), as eager's norm_backward."""
    if p == 2:
        return te.mul(g, te.where(te.eq(norm, 0), 0.0, te.div(x, norm)))
    a, sign = te.abs(x), te.sgn if x.dtype.is_complex else te.sign  # (a complex x: z / |z|, as eager)
    if p < 1:
        scaled = te.mul(sign(x), te.where(te.eq(x, 0), 0.0, te.pow(a, p - 1)))
        return te.mul(te.mul(scaled, g), te.pow(norm, 1 - p))
    scaled = te.mul(sign(x), te.pow(a, p - 1)) if p < 2 else te.mul(x, te.pow(a, p - 2))
    return te.mul(scaled, te.where(te.eq(norm, 0), 0.0, te.div(g, te.pow(norm, p - 1))))


def _norm_grads(bsym, g, x, p, dim, keepdim, dtype):
    if isinstance(p, str) or p is None:
        p = 2 if p in (None, "fro") else p
    if not (dtypes.is_inexact(x.dtype) and is_diff(x)) or isinstance(p, str) or p in (0, 1) or math.isinf(p) \
            or (dtype is not None and dtype != x.dtype):
        return NotImplemented  # p = 0, 1, inf: the decomposition's gradient is already eager's
    shape = tuple(x.shape)
    dims = reduction_dims(bsym.sym.name, x, dim)
    xc = _upcast(x)
    norm = _spread(_upcast(bsym.output), shape, dims, keepdim)
    gx = _norm_grad(xc, float(p), norm, _spread(_upcast(g), shape, dims, keepdim))
    return (te.to_dtype(gx, x.dtype),) + (None,) * (len(bound_arguments(bsym)) - 1)


def vector_norm_vjp(bsym, g):
    x, ord, dim, keepdim, dtype = bound_arguments(bsym)  # vector_norm(x, ord, dim, keepdim, *, dtype)
    return _norm_grads(bsym, g, x, ord, dim, keepdim, dtype)


VJP_RULES["ltorch.vector_norm"] = vector_norm_vjp


def norm_vjp(bsym, g):
    input, p, dim, keepdim, _out, dtype = bound_arguments(bsym)  # norm(input, p, dim, keepdim, out, dtype)
    return _norm_grads(bsym, g, input, p, dim, keepdim, dtype)


VJP_RULES["ltorch.norm"] = norm_vjp


# -- max/min along a dim: the gradient goes to the index eager returned, not spread over ties -------------------------
def max_min_vjp(bsym, g_values, g_indices=None):
    input, dim, keepdim = bound_arguments(bsym)
    if dim is None or isinstance(dim, TensorProxy) or not is_diff(input) or g_values is None or input.ndim == 0:
        return NotImplemented  # full reductions spread over ties as eager does; the binary form is elementwise
    _values, indices = bsym.output
    (d,) = reduction_dims(bsym.sym.name, input, dim)
    if not keepdim:
        g_values, indices = restore_dims(g_values, input.shape, (d,)), restore_dims(indices, input.shape, (d,))
    zeros = pc.full(tuple(input.shape), 0, device=input.device, dtype=g_values.dtype)
    return pi.scatter(zeros, indices, g_values, d), None, None


VJP_RULES["ltorch.max"] = max_min_vjp
VJP_RULES["ltorch.min"] = max_min_vjp


# -- xlogy, xlog1py: eager's derivative, masked where x = 0 and the log is undefined --------------------------------
def _xlog_grads(bsym, g, log_of, edge, grad_other):
    """x * log_of(y): log_of(y) for x (0 where x = 0 and y <= edge, and where g = 0), x / grad_other(y) for y."""
    a, b = bsym.args[:2]
    if not all(_real_float(t) or not isinstance(t, TensorProxy) for t in (a, b)):
        return NotImplemented
    ga = gb = None
    if is_diff(a):
        ga = te.mul(g, log_of(b))
        ga = te.where(te.logical_and(te.eq(g, 0), te.logical_not(te.isnan(b))) if _is_t(b) else te.eq(g, 0),
                      0.0, ga)  # xlogy(g, b): 0 where g is 0
        ga = te.where(te.logical_and(te.eq(a, 0), te.le(b, edge)), 0.0, ga) if _is_t(b) \
            else (te.where(te.eq(a, 0), 0.0, ga) if b <= edge else ga)
        ga = te.to_dtype(sum_to(te.expand_to(ga, tuple(bsym.output.shape)), tuple(a.shape)), a.dtype)
    if is_diff(b):
        gb = te.mul(g, te.div(a, grad_other(b)))
        gb = te.to_dtype(sum_to(te.expand_to(gb, tuple(bsym.output.shape)), tuple(b.shape)), b.dtype)
    return ga, gb


def _is_t(x) -> bool:
    return isinstance(x, TensorProxy)


def xlogy_vjp(bsym, g):
    return _xlog_grads(bsym, g, lambda b: te.log(b) if _is_t(b) else te.log_number(b), 0.0, lambda b: b)


VJP_RULES["ltorch.xlogy"] = xlogy_vjp


def xlog1py_vjp(bsym, g):
    return _xlog_grads(bsym, g, lambda b: te.log1p(b) if _is_t(b) else te.log1p_number(b), -1.0,
                       lambda b: te.add(b, 1) if _is_t(b) else b + 1)


VJP_RULES["ltorch.xlog1py"] = xlog1py_vjp


# -- logsigmoid: eager's log_sigmoid_backward (1 - sigmoid(x), computed from exp(-|x|)); 0.5 at 0 -------------------
def logsigmoid_vjp(bsym, g):
    x = bsym.args[0]
    if not _real_float(x):
        return NotImplemented
    xc = _upcast(x)
    z = te.exp(te.neg(te.abs(xc)))
    s = te.div(z, te.add(z, 1))
    return (te.to_dtype(te.mul(_upcast(g), te.where(te.lt(xc, 0), te.sub(1, s), s)), x.dtype),)


VJP_RULES["ltorch.logsigmoid"] = logsigmoid_vjp
