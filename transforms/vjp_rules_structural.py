"""Transforms: VJP rows for the shape, reduction, indexing and nn prims (the elementwise ones are in
vjp_rules.py, which imports this file into the one table). Where torch has a dedicated backward kernel
(convolution, embedding, unfold), the rule calls it; a few prims pull back through torch.autograd at run time.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import EAGER_KERNELS
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol, opaque_vjp_sym


def rules(VJP_RULES: dict):
    """Fill VJP_RULES with this file's rows."""

    def row(op_id):
        def wrap(fn):
            VJP_RULES[op_id] = fn
            return fn

        return wrap

    def zeros_like(a):
        return pc.full(tuple(a.shape), 0, device=a.device, dtype=a.dtype)

    def via_torch_autograd(bsym, *gs, kernel=None):
        """Pull back through the prim's torch kernel (or `kernel`) with torch.autograd at run time."""
        kernel = kernel or EAGER_KERNELS[bsym.sym.id]
        grads = opaque_vjp_sym(kernel, tuple(bsym.args), dict(bsym.kwargs), list(gs))
        return tuple(grads)

    # -- shape ----------------------------------------------------------------------------------------------------
    @row("prims.broadcast_in_dim")
    def _(bsym, g):
        a, shape, bdims = bsym.args[0], bsym.args[1], bsym.args[2]
        summed = [d for d in range(len(shape)) if d not in bdims]
        summed += [d for i, d in enumerate(bdims) if a.shape[i] == 1 and shape[d] != 1]
        out = pr.sum(g, tuple(sorted(summed))) if summed else g
        return (ps.reshape(out, tuple(a.shape)) if tuple(out.shape) != tuple(a.shape) else out),

    @row("prims.reshape")
    def _(bsym, g):
        return ps.reshape(g, tuple(bsym.args[0].shape)),

    @row("prims.squeeze")
    def _(bsym, g):
        return ps.reshape(g, tuple(bsym.args[0].shape)),

    @row("prims.transpose")
    def _(bsym, g):
        perm = bsym.args[1]
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return ps.transpose(g, tuple(inv)),

    @row("prims.flip")
    def _(bsym, g):
        return ps.flip(g, bsym.args[1]),

    @row("prims.slice")
    def _(bsym, g):
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

    @row("prims.cat")
    def _(bsym, g):
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

    @row("prims.pad")
    def _(bsym, g):
        a, config = bsym.args[0], bsym.args[2]
        grow = tuple((max(-lo, 0), max(-hi, 0), 0) for lo, hi, _ in config)
        if any(lo or hi for lo, hi, _ in grow):
            g = ps.pad(g, 0, grow)
        start = [max(lo, 0) for lo, _, _ in config]
        step = [interior + 1 for _, _, interior in config]
        end = [s + (n - 1) * st + 1 if n else s for s, n, st in zip(start, a.shape, step)]
        return ps.slice_prim(g, tuple(start), tuple(end), tuple(step)), None

    @row("prims.unfold")
    def _(bsym, g):
        a, dim, size, step = bsym.args
        back = opaque_symbol(torch.ops.aten.unfold_backward.default)
        return back(g, list(a.shape), dim, size, step),

    # -- reductions -----------------------------------------------------------------------------------------------
    def expand_back(x, a, dims):
        kept = tuple(d for d in range(a.ndim) if d not in dims)
        return ps.broadcast_in_dim(x, tuple(a.shape), kept)

    @row("prims.sum")
    def _(bsym, g):
        a, dims = bsym.args[0], tuple(bsym.args[1])
        return expand_back(g, a, dims),

    @row("prims.amax")
    def amax_rule(bsym, g):
        a, dims = bsym.args[0], tuple(bsym.args[1])
        mask = te.eq(a, expand_back(bsym.output, a, dims))
        count = pr.sum(te.to_dtype(mask, g.dtype), dims)
        return te.mul(expand_back(te.div(g, count), a, dims), mask),

    VJP_RULES["prims.amin"] = amax_rule

    def var_grad(a, dims, correction, g_var, g_mean):
        n = 1
        for d in dims:
            n *= a.shape[d]
        grad = None
        if g_var is not None:
            mean = te.div(pr.sum(a, dims), n)
            centered = te.sub(a, expand_back(mean, a, dims))
            denom = n - correction  # 2 / (n - correction), inf when no degrees of freedom are left (one element)
            scaled = te.mul(centered, 2.0 / denom if denom > 0 else math.inf) \
                if isinstance(denom, (int, float)) else te.div(te.mul(centered, 2.0), denom)
            grad = te.mul(expand_back(g_var, a, dims), scaled)
        if g_mean is not None:
            gm = te.div(expand_back(g_mean, a, dims), n)
            grad = gm if grad is None else te.add(grad, gm)
        return grad

    def correction_of(bsym):
        return bsym.kwargs.get("correction", bsym.args[2] if len(bsym.args) > 2 else None)

    @row("prims.var")
    def _(bsym, g):
        a, dims = bsym.args[0], tuple(bsym.args[1])
        return var_grad(a, dims, correction_of(bsym), g, None),

    @row("prims.var_mean")
    def _(bsym, g_var, g_mean):
        a, dims = bsym.args[0], tuple(bsym.args[1])
        return var_grad(a, dims, correction_of(bsym), g_var, g_mean),

    @row("prims.cumsum")
    def _(bsym, g):
        dim = bsym.args[1]
        return ps.flip(pr.cumsum(ps.flip(g, (dim,)), dim), (dim,)),

    def values_indices_rule(bsym, g_values, g_indices=None):
        a, dim = bsym.args[0], bsym.args[2] if bsym.sym.name == "topk" else bsym.args[1]
        if g_values is None:
            return (None,)
        indices = bsym.output[1]
        return pi.scatter_add(zeros_like(a), indices, g_values, dim),

    VJP_RULES["prims.topk"] = values_indices_rule
    VJP_RULES["prims.sort"] = values_indices_rule
    for op in ("prims.prod", "prims.cumprod", "prims.index_put"):
        VJP_RULES[op] = via_torch_autograd

    # -- indexing -------------------------------------------------------------------------------------------------
    def is_diff(x):
        return isinstance(x, TensorProxy) and x.requires_grad

    @row("prims.take")
    def _(bsym, g):
        a, index, dim = bsym.args
        return pi.index_add(zeros_like(a), index, g, dim), None

    @row("prims.take_along_axis")
    def _(bsym, g):
        a, index, dim = bsym.args
        return pi.scatter_add(zeros_like(a), index, g, dim), None

    @row("prims.scatter_add")
    def _(bsym, g):
        _a, index, src, dim = bsym.args
        return g, None, pi.take_along_axis(g, index, dim) if is_diff(src) else None

    @row("prims.scatter")
    def _(bsym, g):
        a, index, src, dim = bsym.args
        ga = pi.scatter(g, index, zeros_like(src) if isinstance(src, TensorProxy) else 0, dim) if is_diff(a) else None
        return ga, None, pi.take_along_axis(g, index, dim) if is_diff(src) else None

    @row("prims.index_add")
    def _(bsym, g):
        _a, index, source, dim = bsym.args
        return g, None, pi.take(g, index, dim) if is_diff(source) else None

    # -- nn --------------------------------------------------------------------------------------------------------
    from jitcore.ops import prims_nn as pn
    from transforms.vjp_rules_composite import mT, sum_to

    @row("prims.linear")
    def _(bsym, g):
        a, w, bias = (list(bsym.args) + [None])[:3] if len(bsym.args) < 3 else bsym.args[:3]
        bias = bsym.kwargs.get("bias", bias)
        if a.ndim < 1 or w.ndim != 2:  # rare forms (1-D weight): pulled back by torch.autograd
            return via_torch_autograd(bsym, g, kernel=torch.nn.functional.linear)  # (ltorch.linear shares the row)
        ga = pn.matmul(g, w) if is_diff(a) else None
        gw = gbias = None
        if is_diff(w) or is_diff(bias):
            g2 = ps.reshape(g, (_numel(g) // g.shape[-1], g.shape[-1])) if g.ndim != 2 else g
            if is_diff(w):
                a2 = ps.reshape(a, (_numel(a) // a.shape[-1], a.shape[-1])) if a.ndim != 2 else a
                gw = pn.matmul(mT(g2), a2) if g.ndim else None
            if is_diff(bias):
                gbias = pr.sum(g2, (0,)) if bias.ndim == 1 else sum_to(g, tuple(bias.shape))
        return ga, gw, gbias

    @row("prims.convolution")
    def _(bsym, g):
        a, w, bias, stride, padding, dilation, transposed, output_padding, groups = bsym.args
        mask = [is_diff(a), is_diff(w), is_diff(bias)]
        back = opaque_symbol(torch.ops.aten.convolution_backward.default)
        bias_sizes = list(bias.shape) if bias is not None else None
        ga, gw, gb = back(g, a, w, bias_sizes, list(stride), list(padding), list(dilation), transposed,
                          list(output_padding), groups, mask)
        return ga if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None

    @row("prims.embedding")
    def _(bsym, g):
        from transforms.autodiff import bound_arguments

        a, w, padding_idx, _max_norm, _nt, scale_grad_by_freq, _sparse = bound_arguments(bsym)
        back = opaque_symbol(torch.ops.aten.embedding_dense_backward.default)
        pidx = -1 if padding_idx is None else padding_idx
        return None, back(g, a, w.shape[0], pidx, scale_grad_by_freq)

    for op in ("prims.stop_gradient", "prims.copy_", "prims.shape"):
        VJP_RULES[op] = lambda bsym, *gs: tuple(None for _ in bsym.args)
    VJP_RULES["prims.no_grad_update"] = lambda bsym, g: (g, None)


def _numel(t) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n
