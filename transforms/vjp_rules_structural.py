"""Transforms (autodiff): VJP rows for the shape, reduction, indexing and nn prims (the elementwise ones are in
vjp_rules_elementwise.py). Where torch has a dedicated backward kernel (convolution, embedding, unfold), the rule
calls it; a few prims (prod, cumprod, index_put) pull back through torch.autograd at run time, recomputing the prim
with its own eager call. Each row follows its rule.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol, opaque_vjp_sym
from jitcore.ops.torch_shape import same_shape, size_max
from jitcore.ops.utils import same_size
from transforms.vjp_helpers import VJP_RULES, bound_arguments, is_diff, mT, no_grad_vjp, numel, sum_to, zeros_like
from transforms.vjp_rules_complex import conj_tree, conjugated


def _via_torch_autograd(fn, bsym, gs):
    """Pull back by recomputing fn(*bsym.args, **bsym.kwargs) with torch.autograd at run time (torch's gradients of a
    holomorphic op conjugated, as the rows are written: transforms/vjp_rules_complex.py conjugates them back)."""
    if conjugated(bsym):
        gs = conj_tree(tuple(gs), physical=False)
        return conj_tree(tuple(opaque_vjp_sym(fn, tuple(bsym.args), dict(bsym.kwargs), list(gs))))
    return tuple(opaque_vjp_sym(fn, tuple(bsym.args), dict(bsym.kwargs), list(gs)))


def torch_autograd_vjp(bsym, *gs):
    """The rule of a prim whose backward torch.autograd computes at run time, through the prim's own eager call."""
    return _via_torch_autograd(bsym.sym.eager, bsym, gs)


# -- shape ----------------------------------------------------------------------------------------------------------
def broadcast_in_dim_vjp(bsym, g):
    a, shape, bdims = bsym.args[0], bsym.args[1], bsym.args[2]
    summed = [d for d in range(len(shape)) if d not in bdims]
    summed += [d for i, d in enumerate(bdims)
               if not same_size(a.shape[i], shape[d]) and a.shape[i] == 1 and shape[d] != 1]
    out = pr.sum(g, tuple(sorted(summed))) if summed else g
    return (out if same_shape(out.shape, a.shape) or tuple(out.shape) == tuple(a.shape) else
            ps.reshape(out, tuple(a.shape))),


VJP_RULES["prims.broadcast_in_dim"] = broadcast_in_dim_vjp


def reshape_vjp(bsym, g):
    return ps.reshape(g, tuple(bsym.args[0].shape)),


VJP_RULES["prims.reshape"] = reshape_vjp
VJP_RULES["prims.squeeze"] = reshape_vjp


def transpose_vjp(bsym, g):
    perm = bsym.args[1]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return ps.transpose(g, tuple(inv)),


VJP_RULES["prims.transpose"] = transpose_vjp


def flip_vjp(bsym, g):
    return ps.flip(g, bsym.args[1]),


VJP_RULES["prims.flip"] = flip_vjp


def slice_vjp(bsym, g):
    a, start = bsym.args[0], bsym.args[1]
    strides = bsym.args[3] if len(bsym.args) > 3 and bsym.args[3] is not None else (1,) * a.ndim
    strides = bsym.kwargs.get("strides", strides) or (1,) * a.ndim
    if 0 in tuple(g.shape):
        return zeros_like(a),
    config = []
    for d in range(a.ndim):
        last = start[d] + (g.shape[d] - 1) * strides[d]
        config.append((start[d], a.shape[d] - last - 1, strides[d] - 1))
    return ps.pad(g, 0.0 if a.dtype.is_floating_point else 0, tuple(config)),


VJP_RULES["prims.slice"] = slice_vjp


def cat_vjp(bsym, g):
    tensors, dim = bsym.args[0], bsym.args[1]
    grads, offset = [], 0
    for t in tensors:
        n = t.shape[dim]
        start = [0] * g.ndim
        end = list(g.shape)
        start[dim], end[dim] = offset, offset + n
        grads.append(ps.slice_prim(g, tuple(start), tuple(end)))
        offset += n
    return grads, None


VJP_RULES["prims.cat"] = cat_vjp


def pad_vjp(bsym, g):
    a, config = bsym.args[0], bsym.args[2]
    # recorded max()es where a pad is symbolic: a pad that reaches 0 for some sizes is no new branch
    grow = tuple((size_max(-lo, 0), size_max(-hi, 0), 0) for lo, hi, _ in config)
    if any(lo or hi for lo, hi, _ in grow):
        g = ps.pad(g, 0, grow)
    start = [size_max(lo, 0) for lo, _, _ in config]
    step = [interior + 1 for _, _, interior in config]
    end = [s + (n - 1) * st + 1 if n else s for s, n, st in zip(start, a.shape, step)]
    return ps.slice_prim(g, tuple(start), tuple(end), tuple(step)), None


VJP_RULES["prims.pad"] = pad_vjp


def unfold_vjp(bsym, g):
    a, dim, size, step = bsym.args
    back = opaque_symbol(torch.ops.aten.unfold_backward.default)
    return back(g, list(a.shape), dim, size, step),


VJP_RULES["prims.unfold"] = unfold_vjp


def as_strided_vjp(bsym, g):
    """Each element of a gets the sum of the cotangents of the view's places that are it (places may repeat)."""
    a, size, stride, offset = bsym.args[:4]
    within = bsym.args[4] if len(bsym.args) > 4 else bsym.kwargs.get("grad_within")
    n, m = numel(a), numel(g)
    iota = pc.iota(n, start=0, step=1, device=g.device, dtype=torch.int64)
    places = ps.as_strided(iota, size, stride, offset)
    zeros = pc.full((n,), 0, device=g.device, dtype=g.dtype)
    flat = pi.index_add(zeros, ps.reshape(places, (m,)), ps.reshape(g, (m,)), 0)
    if within is not None:  # only the places of that view (eager's as_strided backward over it drops the others)
        kept = ps.as_strided(iota, *within[:3])
        k = math.prod(within[0])
        hits = pi.index_add(pc.full((n,), 0, device=g.device, dtype=g.dtype), ps.reshape(kept, (k,)),
                            pc.full((k,), 1, device=g.device, dtype=g.dtype), 0)
        flat = te.where(te.gt(hits, 0), flat, 0)
    return ps.reshape(flat, tuple(a.shape)),


VJP_RULES["prims.as_strided"] = as_strided_vjp


def as_strided_scatter_vjp(bsym, g):
    """a's cotangent where src did not land; src's, read at its places (functionalization writes values with a
    gradient only where the places do not repeat)."""
    a, src, size, stride, offset = bsym.args
    ga = ps.as_strided_scatter(g, zeros_like(src), size, stride, offset) if is_diff(a) else None
    return ga, ps.as_strided(g, size, stride, offset) if is_diff(src) else None


VJP_RULES["prims.as_strided_scatter"] = as_strided_scatter_vjp


# -- reductions -----------------------------------------------------------------------------------------------------
def _expand_back(x, a, dims):
    kept = tuple(d for d in range(a.ndim) if d not in dims)
    return ps.broadcast_in_dim(x, tuple(a.shape), kept)


def sum_vjp(bsym, g):
    a, dims = bsym.args[0], tuple(bsym.args[1])
    return _expand_back(g, a, dims),


VJP_RULES["prims.sum"] = sum_vjp


def amax_vjp(bsym, g):
    a, dims = bsym.args[0], tuple(bsym.args[1])
    mask = te.eq(a, _expand_back(bsym.output, a, dims))
    count = pr.sum(te.to_dtype(mask, g.dtype), dims)
    return te.mul(_expand_back(te.div(g, count), a, dims), mask),


VJP_RULES["prims.amax"] = amax_vjp
VJP_RULES["prims.amin"] = amax_vjp


def _var_grad(a, dims, correction, g_var, g_mean):
    n = 1
    for d in dims:
        n *= a.shape[d]
    grad = None
    if g_var is not None:
        mean = te.div(pr.sum(a, dims), n)
        centered = te.sub(a, _expand_back(mean, a, dims))
        denom = n - correction  # 2 / (n - correction), inf when no degrees of freedom are left (one element)
        scaled = te.mul(centered, 2.0 / denom if denom > 0 else math.inf) \
            if isinstance(denom, (int, float)) else te.div(te.mul(centered, 2.0), denom)
        grad = te.mul(_expand_back(g_var, a, dims), scaled)
    if g_mean is not None:
        gm = te.div(_expand_back(g_mean, a, dims), n)
        grad = gm if grad is None else te.add(grad, gm)
    return grad


def _correction_of(bsym):
    return bsym.kwargs.get("correction", bsym.args[2] if len(bsym.args) > 2 else None)


def var_vjp(bsym, g):
    a, dims = bsym.args[0], tuple(bsym.args[1])
    return _var_grad(a, dims, _correction_of(bsym), g, None),


VJP_RULES["prims.var"] = var_vjp


def var_mean_vjp(bsym, g_var, g_mean):
    a, dims = bsym.args[0], tuple(bsym.args[1])
    return _var_grad(a, dims, _correction_of(bsym), g_var, g_mean),


VJP_RULES["prims.var_mean"] = var_mean_vjp


def cumsum_vjp(bsym, g):
    dim = bsym.args[1]
    return ps.flip(pr.cumsum(ps.flip(g, (dim,)), dim), (dim,)),


VJP_RULES["prims.cumsum"] = cumsum_vjp
VJP_RULES["prims.cumprod"] = torch_autograd_vjp
VJP_RULES["prims.prod"] = torch_autograd_vjp


def values_indices_vjp(bsym, g_values, g_indices=None):
    """topk, sort: the values' cotangent scattered back to where the indices point."""
    a, dim = bsym.args[0], bsym.args[2] if bsym.sym.name == "topk" else bsym.args[1]
    if g_values is None:
        return (None,)
    indices = bsym.output[1]
    return pi.scatter_add(zeros_like(a), indices, g_values, dim),


VJP_RULES["prims.topk"] = values_indices_vjp
VJP_RULES["prims.sort"] = values_indices_vjp


# -- indexing -------------------------------------------------------------------------------------------------------
def take_vjp(bsym, g):
    a, index, dim = bsym.args
    return pi.index_add(zeros_like(a), index, g, dim), None


VJP_RULES["prims.take"] = take_vjp


def take_along_axis_vjp(bsym, g):
    a, index, dim = bsym.args
    return pi.scatter_add(zeros_like(a), index, g, dim), None


VJP_RULES["prims.take_along_axis"] = take_along_axis_vjp


def scatter_add_vjp(bsym, g):
    _a, index, src, dim = bsym.args
    return g, None, pi.take_along_axis(g, index, dim) if is_diff(src) else None


VJP_RULES["prims.scatter_add"] = scatter_add_vjp


def scatter_vjp(bsym, g):
    a, index, src, dim = bsym.args
    ga = pi.scatter(g, index, zeros_like(src) if isinstance(src, TensorProxy) else 0, dim) if is_diff(a) else None
    return ga, None, pi.take_along_axis(g, index, dim) if is_diff(src) else None


VJP_RULES["prims.scatter"] = scatter_vjp


def index_add_vjp(bsym, g):
    _a, index, source, dim = bsym.args
    return g, None, pi.take(g, index, dim) if is_diff(source) else None


VJP_RULES["prims.index_add"] = index_add_vjp
VJP_RULES["prims.index_put"] = torch_autograd_vjp


# -- nn -------------------------------------------------------------------------------------------------------------
def linear_vjp(bsym, g):
    a, w, bias = (list(bsym.args) + [None])[:3] if len(bsym.args) < 3 else bsym.args[:3]
    bias = bsym.kwargs.get("bias", bias)
    if a.ndim < 1 or w.ndim != 2:  # rare forms (1-D weight): pulled back by torch.autograd
        return _via_torch_autograd(torch.nn.functional.linear, bsym, (g,))  # (ltorch.linear shares the row)
    ga = pn.matmul(g, w) if is_diff(a) else None
    gw = gbias = None
    if is_diff(w) or is_diff(bias):
        g2 = ps.reshape(g, (numel(g) // g.shape[-1], g.shape[-1])) if g.ndim != 2 else g
        if is_diff(w):
            a2 = ps.reshape(a, (numel(a) // a.shape[-1], a.shape[-1])) if a.ndim != 2 else a
            gw = pn.matmul(mT(g2), a2) if g.ndim else None
        if is_diff(bias):
            gbias = pr.sum(g2, (0,)) if bias.ndim == 1 else sum_to(g, tuple(bias.shape))
    return ga, gw, gbias


VJP_RULES["prims.linear"] = linear_vjp


def convolution_vjp(bsym, g):
    a, w, bias, stride, padding, dilation, transposed, output_padding, groups = bsym.args
    mask = [is_diff(a), is_diff(w), is_diff(bias)]
    back = opaque_symbol(torch.ops.aten.convolution_backward.default)
    bias_sizes = list(bias.shape) if bias is not None else None
    ga, gw, gb = back(g, a, w, bias_sizes, list(stride), list(padding), list(dilation), transposed,
                      list(output_padding), groups, mask)
    return ga if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None


VJP_RULES["prims.convolution"] = convolution_vjp


def embedding_vjp(bsym, g):
    a, w, padding_idx, _max_norm, _nt, scale_grad_by_freq, _sparse = bound_arguments(bsym)
    back = opaque_symbol(torch.ops.aten.embedding_dense_backward.default)
    pidx = -1 if padding_idx is None else padding_idx
    return None, back(g, a, w.shape[0], pidx, scale_grad_by_freq)


VJP_RULES["prims.embedding"] = embedding_vjp

VJP_RULES["prims.stop_gradient"] = no_grad_vjp
VJP_RULES["prims.copy_"] = no_grad_vjp
VJP_RULES["prims.shape"] = no_grad_vjp


def no_grad_update_vjp(bsym, g):
    return g, None


VJP_RULES["prims.no_grad_update"] = no_grad_update_vjp


def laid_out_vjp(bsym, g):
    return g, None


VJP_RULES["prims.laid_out"] = laid_out_vjp
