"""Transforms: VJP rows for torch-level composites (linear, matmul/mm/bmm, softmax, log_softmax, layer_norm,
rms_norm, scaled_dot_product_attention, cross_entropy, embedding, gelu, silu, relu). A composite with a row stays
one torch call in the forward; a rule that returns NotImplemented (an argument form it does not cover) sends the
walk through the composite's subsymbols instead. Heavy backwards call torch's own aten backward kernels (opaque
ops: eager's numerics, one kernel each). layer_norm, rms_norm and sdpa have an `augment`: their forward line
becomes the aten kernel that also returns the statistics the backward reads (mean/rstd, logsumexp), computed once.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol, register_opaque_meta

aten = torch.ops.aten


def _args(bsym) -> list:
    from transforms.autodiff import bound_arguments

    return bound_arguments(bsym)


def _diff(x) -> bool:
    return isinstance(x, TensorProxy) and x.requires_grad


def _call(op, *args, **kwargs):
    return opaque_symbol(op)(*args, **kwargs)


# -- products ---------------------------------------------------------------------------------------------------
def _mT(x):
    """x with its last two dims swapped."""
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ps.transpose(x, tuple(perm))


def _sum_to(x, shape):
    """x summed over the leading and size-1 dims it was broadcast along, to `shape`."""
    lead = x.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1]
    out = pr.sum(x, tuple(dims)) if dims else x
    return ps.reshape(out, tuple(shape)) if tuple(out.shape) != tuple(shape) else out


mT, sum_to = _mT, _sum_to  # shared with vjp_rules_structural.py


def matmul_grads(a, b, g):
    """Gradients of torch.matmul(a, b) for every rank combination (1-D operands as a row / a column)."""
    if a.ndim == 1 and b.ndim == 1:
        return (te.mul(g, b) if _diff(a) else None), (te.mul(g, a) if _diff(b) else None)
    a2 = ps.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = ps.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = ps.reshape(g2, (*g.shape[:-1], 1, g.shape[-1]))
    if b.ndim == 1:
        g2 = ps.reshape(g2, (*g2.shape, 1))
    ga = _sum_to(pn.matmul(g2, _mT(b2)), tuple(a2.shape)) if _diff(a) else None
    gb = _sum_to(pn.matmul(_mT(a2), g2), tuple(b2.shape)) if _diff(b) else None
    ga = ps.reshape(ga, tuple(a.shape)) if ga is not None and a.ndim == 1 else ga
    gb = ps.reshape(gb, tuple(b.shape)) if gb is not None and b.ndim == 1 else gb
    return ga, gb


def _matmul_rule(bsym, g):
    a, b = _args(bsym)[:2]
    return matmul_grads(a, b, g)


# -- softmax family and activations --------------------------------------------------------------------------------
def _softmax_rule(backward_op):
    def rule(bsym, g):
        from jitcore.ops.torch_nn_activation import _softmax_dim

        input, dim, _stacklevel, dtype = _args(bsym)
        out = bsym.output
        if not isinstance(out, TensorProxy) or out.numel() == 0:
            return NotImplemented
        x = input if dtype is None else out
        d = _softmax_dim(bsym.sym.name, x, dim)
        gx = _call(backward_op, g, out, d, out.dtype)
        return te.to_dtype(gx, input.dtype) if gx.dtype != input.dtype else gx, None, None, None

    return rule


def _gelu_rule(bsym, g):
    x, approximate = _args(bsym)
    return _call(aten.gelu_backward.default, g, x, approximate=approximate), None


def _silu_rule(bsym, g):
    x, inplace = _args(bsym)
    if inplace:
        return NotImplemented
    return _call(aten.silu_backward.default, g, x), None


def _from_output(backward_op):
    """A rule whose whole backward is one torch kernel reading the output (tanh, sigmoid): one kernel, not three."""

    def rule(bsym, g):
        out = bsym.output
        if not (isinstance(out, TensorProxy) and out.dtype.is_floating_point and g.dtype == out.dtype):
            return NotImplemented
        return (_call(backward_op, g, out),)

    return rule


def _relu_rule(bsym, g):
    x, inplace = _args(bsym)
    if inplace:
        return NotImplemented
    return te.where(te.gt(x, 0), g, 0), None


# -- normalization: the forward kernel returns the statistics ------------------------------------------------------
def _with_augment(augment):
    """A rule whose forward is always swapped by `augment`; called on its own (augment declined) it defers to the
    composite's subsymbols."""

    def rule(bsym, *gs):
        return NotImplemented

    rule.augment = augment
    return rule


def _shape_list(normalized_shape) -> list:
    return [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)


def _layer_norm_augment(bsym):
    x, shape, w, b, eps = _args(bsym)
    return opaque_symbol(aten.native_layer_norm.default), (x, _shape_list(shape), w, b, eps), {}, _layer_norm_backward


def _layer_norm_backward(bsym, residuals, g):
    x, shape, w, b, _eps = _args(bsym)
    mean, rstd = residuals
    mask = [_diff(x), _diff(w), _diff(b)]
    gx, gw, gb = _call(aten.native_layer_norm_backward.default, g, x, _shape_list(shape), mean, rstd, w, b, mask)
    return gx if mask[0] else None, None, gw if mask[1] else None, gb if mask[2] else None, None


def _rms_norm_augment(bsym):
    x, shape, w, eps = _args(bsym)
    return opaque_symbol(aten._fused_rms_norm.default), (x, _shape_list(shape), w, eps), {}, _rms_norm_backward


def _rms_norm_backward(bsym, residuals, g):
    """Written over torch-level ops (torch has no CPU kernel for _fused_rms_norm_backward), in float32 for half
    inputs: x^ = x * rstd, dw = sum(g * x^), dx = rstd * (g w - x^ * mean(g w x^))."""
    x, shape, w, _eps = _args(bsym)
    (rstd,) = residuals
    dims = tuple(range(x.ndim - len(_shape_list(shape)), x.ndim))
    x32, g32 = nh.upcast(x), nh.upcast(g)
    xhat = te.mul(x32, rstd)
    gw = None
    if _diff(w):
        gw = te.to_dtype(nh.sum_(te.mul(g32, xhat), tuple(range(dims[0]))) if dims[0] else te.mul(g32, xhat), w.dtype)
    gx = None
    if _diff(x):
        gxhat = te.mul(g32, nh.upcast(w)) if w is not None else g32
        inner = te.sub(gxhat, te.mul(xhat, nh.mean(te.mul(gxhat, xhat), dims, keepdim=True)))
        gx = te.to_dtype(te.mul(inner, rstd), x.dtype)
    return gx, None, gw, None


# -- attention: torch's CPU flash kernels (out and logsumexp saved, like eager's autograd) -------------------------
def _last_dim_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def sdpa_flash_cpu(query, key, value, dropout_p, is_causal, scale):
    """The CPU flash-attention forward (reads rows along the last dim: it needs unit stride there)."""
    q, k, v = (_last_dim_contiguous(t) for t in (query, key, value))
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, scale=scale)


def sdpa_flash_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale):
    g, q, k, v, o = (_last_dim_contiguous(t) for t in (grad_out, query, key, value, out))
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, o, logsumexp, dropout_p, is_causal,
                                                                     scale=scale)


def _sdpa_flash_cpu_meta(query, key, value, dropout_p, is_causal, scale):
    rg = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    out = query.like(shape=tuple(query.shape[:-1]) + (value.shape[-1],), requires_grad=rg)
    return out, query.like(shape=tuple(query.shape[:-1]), dtype=torch.float32, requires_grad=False)


def _sdpa_flash_cpu_backward_meta(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale):
    return tuple(t.like(requires_grad=False) for t in (query, key, value))


register_opaque_meta(sdpa_flash_cpu, _sdpa_flash_cpu_meta)
register_opaque_meta(sdpa_flash_cpu_backward, _sdpa_flash_cpu_backward_meta)

_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _sdpa_augment(bsym):
    q, k, v, attn_mask, dropout_p, is_causal, scale, _gqa = _args(bsym)
    tensors = (q, k, v)
    ok = (attn_mask is None and dropout_p == 0.0 and all(t.ndim == 4 and t.device.type == "cpu" for t in tensors)
          and q.dtype in _FLASH_DTYPES and q.shape[-1] == k.shape[-1] == v.shape[-1] and q.shape[1] == k.shape[1]
          and k.shape[1] == v.shape[1] and q.shape[0] == k.shape[0] == v.shape[0] and all(t.numel() for t in tensors))
    if not ok:
        return None
    return opaque_symbol(sdpa_flash_cpu), (q, k, v, 0.0, bool(is_causal), scale), {}, _sdpa_backward


def _sdpa_backward(bsym, residuals, g):
    q, k, v, _mask, _p, is_causal, scale, _gqa = _args(bsym)
    (lse,) = residuals
    gq, gk, gv = _call(sdpa_flash_cpu_backward, g, q, k, v, bsym.output, lse, 0.0, bool(is_causal), scale)
    return gq if _diff(q) else None, gk if _diff(k) else None, gv if _diff(v) else None, None, None, None, None, None


# -- cross_entropy with class-index targets: the log_softmax made inside is saved (as eager saves it) ----------------
def _log_softmax_inside(bsym):
    for sub in bsym.subsymbols:
        if sub.sym.id == "ltorch.log_softmax":
            return sub.output
    return None


_REDUCTION_ENUM = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction, as aten's loss kernels take it


def _cross_entropy_rule(bsym, g):
    input, target, weight, size_average, ignore_index, reduce, reduction, smoothing = _args(bsym)
    reduction = nh.reduction_string(size_average, reduce, reduction)
    lsm = _log_softmax_inside(bsym)
    if lsm is None or tuple(input.shape) == tuple(target.shape) or input.numel() == 0 or not _diff(input):
        return NotImplemented  # probability targets, empty input: through the subsymbols
    lsm2, t = (ps.reshape(lsm, (1, lsm.shape[0])), ps.reshape(target, (1,))) if lsm.ndim == 1 else (lsm, target)
    dtype, n_classes = lsm.dtype, lsm2.shape[1]
    mask = te.ne(t, ignore_index)
    safe = te.where(mask, t, 0)
    w_t = te.to_dtype(mask, dtype) if weight is None else \
        te.where(mask, ps.reshape(pi.take(weight, nh.flatten(safe), 0), tuple(safe.shape)), 0)
    if smoothing == 0 and lsm2.ndim == 2:  # eager's own pair of kernels (one call where the scatter below is six)
        total = pr.sum(w_t, tuple(range(w_t.ndim))) if reduction == "mean" else \
            pc.full((), 0, device=lsm.device, dtype=dtype)
        g2 = ps.reshape(g, (1,)) if reduction == "none" and lsm.ndim == 1 else g
        g_lsm = _call(aten.nll_loss_backward.default, g2, lsm2, t, weight, _REDUCTION_ENUM[reduction], ignore_index,
                      total)
        gx = _call(aten._log_softmax_backward_data.default, g_lsm, lsm2, 1, dtype)
        gx = ps.reshape(gx, tuple(lsm.shape)) if lsm.ndim == 1 else gx
        return (te.to_dtype(gx, input.dtype) if gx.dtype != input.dtype else gx,) + (None,) * 7
    if reduction == "none":
        coef = ps.reshape(g, tuple(t.shape)) if lsm.ndim == 1 else g
    elif reduction == "sum":
        coef = g
    else:
        coef = te.div(g, pr.sum(w_t, tuple(range(w_t.ndim))))
    coef = te.where(mask, te.expand_to(coef, tuple(t.shape)), 0)  # 0 on ignored rows (also when mean divides by 0)
    col = (t.shape[0], 1, *t.shape[1:])
    picked = ps.reshape(te.mul(te.mul(coef, w_t), -(1.0 - smoothing)), col)
    g_lsm = pi.scatter(pc.full(tuple(lsm2.shape), 0, device=lsm.device, dtype=dtype), ps.reshape(safe, col), picked, 1)
    if smoothing > 0:
        spread = te.mul(ps.reshape(coef, col), -smoothing / n_classes)
        if weight is not None:
            spread = te.mul(spread, ps.reshape(weight, (1, n_classes) + (1,) * (lsm2.ndim - 2)))
        g_lsm = te.add(g_lsm, spread)
    gx = _call(aten._log_softmax_backward_data.default, g_lsm, lsm2, 1, dtype)
    gx = ps.reshape(gx, tuple(lsm.shape)) if lsm.ndim == 1 else gx
    return (te.to_dtype(gx, input.dtype) if gx.dtype != input.dtype else gx,) + (None,) * 7


# -- embedding ---------------------------------------------------------------------------------------------------
def _embedding_rule(bsym, g):
    input, weight, padding_idx, max_norm, _norm_type, scale_grad_by_freq, sparse = _args(bsym)
    if max_norm is not None or sparse:
        return NotImplemented
    n = weight.shape[0]
    pidx = -1 if padding_idx is None else padding_idx % n
    gw = _call(aten.embedding_dense_backward.default, g, input, n, pidx, scale_grad_by_freq)
    return None, gw, None, None, None, None, None


# -- split family: one cat of the pieces' cotangents (zeros for unused pieces) instead of a pad per piece ----------
def _zeros_like(t):
    return pc.full(tuple(t.shape), 0, device=t.device, dtype=t.dtype)


def _pieces_rule(bsym, *gs):
    args = _args(bsym)
    a, dim = args[0], args[-1]
    pieces = list(bsym.output)
    if not _diff(a) or not pieces or not all(isinstance(p, TensorProxy) for p in pieces):
        return NotImplemented
    d = dim % a.ndim
    unbound = bsym.sym.id == "ltorch.unbind"
    if sum(1 if unbound else p.shape[d] for p in pieces) != a.shape[d]:
        return NotImplemented
    grads = [g if g is not None else _zeros_like(p) for p, g in zip(pieces, gs)]
    if unbound:
        grads = [ps.reshape(g, (*a.shape[:d], 1, *a.shape[d + 1:])) for g in grads]
    out = ps.cat(grads, d) if len(grads) > 1 else grads[0]
    return (out,) + (None,) * (len(args) - 1)


def rules(VJP_RULES: dict):
    """Fill VJP_RULES with this file's rows."""
    VJP_RULES["ltorch.linear"] = VJP_RULES["prims.linear"]  # same parameters (input, weight, bias)
    for op in ("prims.matmul", "ltorch.matmul", "ltorch.mm", "ltorch.bmm"):
        VJP_RULES[op] = _matmul_rule
    VJP_RULES["ltorch.softmax"] = _softmax_rule(aten._softmax_backward_data.default)
    VJP_RULES["ltorch.log_softmax"] = _softmax_rule(aten._log_softmax_backward_data.default)
    VJP_RULES["ltorch.gelu"] = _gelu_rule
    VJP_RULES["ltorch.silu"] = _silu_rule
    VJP_RULES["ltorch.tanh"] = _from_output(aten.tanh_backward.default)
    VJP_RULES["ltorch.sigmoid"] = _from_output(aten.sigmoid_backward.default)
    VJP_RULES["ltorch.relu"] = _relu_rule
    VJP_RULES["ltorch.layer_norm"] = _with_augment(_layer_norm_augment)
    VJP_RULES["ltorch.rms_norm"] = _with_augment(_rms_norm_augment)
    VJP_RULES["ltorch.scaled_dot_product_attention"] = _with_augment(_sdpa_augment)
    VJP_RULES["ltorch.cross_entropy"] = _cross_entropy_rule
    VJP_RULES["ltorch.embedding"] = _embedding_rule
    for op in ("split", "split_with_sizes", "chunk", "tensor_split", "unbind"):
        VJP_RULES[f"ltorch.{op}"] = _pieces_rule
