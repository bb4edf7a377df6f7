"""Transforms (autodiff): VJP rows for torch-level composites (linear, matmul, softmax, layer_norm, rms_norm, sdpa,
cross_entropy, embedding, gelu, silu, relu, the split family). A composite with a row stays one torch call in the
forward; a rule returning NotImplemented sends the walk through its subsymbols. Heavy backwards call torch's aten
backward kernels (opaque ops); layer_norm, rms_norm and sdpa have an `augment`: their forward line becomes the aten
kernel that also returns the statistics the backward reads (mean/rstd, logsumexp), computed once.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import ltorch
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.prims_grad import sdpa_flash_cpu, sdpa_flash_cpu_backward
from jitcore.ops.torch_nn_activation import _softmax_dim
from transforms.vjp_helpers import AUGMENTED_FORWARDS, VJP_RULES, bound_arguments, call, is_diff, mT, sum_to, zeros_like
from transforms.vjp_rules_structural import linear_vjp

aten = torch.ops.aten


# -- products ---------------------------------------------------------------------------------------------------
def matmul_grads(a, b, g):
    """Gradients of torch.matmul(a, b) for every rank combination (1-D operands as a row / a column)."""
    if a.ndim == 1 and b.ndim == 1:
        return (te.mul(g, b) if is_diff(a) else None), (te.mul(g, a) if is_diff(b) else None)
    a2 = ps.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = ps.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = ps.reshape(g2, (*g.shape[:-1], 1, g.shape[-1]))
    if b.ndim == 1:
        g2 = ps.reshape(g2, (*g2.shape, 1))
    ga = sum_to(pn.matmul(g2, mT(b2)), tuple(a2.shape)) if is_diff(a) else None
    gb = sum_to(pn.matmul(mT(a2), g2), tuple(b2.shape)) if is_diff(b) else None
    ga = ps.reshape(ga, tuple(a.shape)) if ga is not None and a.ndim == 1 else ga
    gb = ps.reshape(gb, tuple(b.shape)) if gb is not None and b.ndim == 1 else gb
    return ga, gb


def matmul_vjp(bsym, g):
    a, b = bound_arguments(bsym)[:2]
    return matmul_grads(a, b, g)


VJP_RULES["ltorch.linear"] = linear_vjp  # same parameters as prims.linear (input, weight, bias)
VJP_RULES["prims.matmul"] = matmul_vjp
VJP_RULES["ltorch.matmul"] = matmul_vjp
VJP_RULES["ltorch.mm"] = matmul_vjp
VJP_RULES["ltorch.bmm"] = matmul_vjp


# -- softmax family and activations --------------------------------------------------------------------------------
def _softmax_grads(backward_op, bsym, g):
    """softmax and log_softmax: one aten backward kernel reading the output."""
    input, dim, _stacklevel, dtype = bound_arguments(bsym)
    out = bsym.output
    if not isinstance(out, TensorProxy) or out.numel() == 0:
        return NotImplemented
    x = input if dtype is None else out
    d = _softmax_dim(bsym.sym.name, x, dim)
    gx = call(backward_op, g, out, d, out.dtype)
    return te.to_dtype(gx, input.dtype) if gx.dtype != input.dtype else gx, None, None, None


def softmax_vjp(bsym, g):
    return _softmax_grads(aten._softmax_backward_data.default, bsym, g)


VJP_RULES["ltorch.softmax"] = softmax_vjp


def log_softmax_vjp(bsym, g):
    return _softmax_grads(aten._log_softmax_backward_data.default, bsym, g)


VJP_RULES["ltorch.log_softmax"] = log_softmax_vjp


def gelu_vjp(bsym, g):
    x, approximate = bound_arguments(bsym)
    return call(aten.gelu_backward.default, g, x, approximate=approximate), None


VJP_RULES["ltorch.gelu"] = gelu_vjp


def silu_vjp(bsym, g):
    x, inplace = bound_arguments(bsym)
    if inplace:
        return NotImplemented
    return ltorch.silu_backward(g, x), None


VJP_RULES["ltorch.silu"] = silu_vjp


def _from_output(backward_op, bsym, g):
    """A backward that is one torch kernel reading the output (tanh, sigmoid): one kernel, not three."""
    out = bsym.output
    if not (isinstance(out, TensorProxy) and out.dtype.is_floating_point and g.dtype == out.dtype):
        return NotImplemented
    return (call(backward_op, g, out),)


def tanh_vjp(bsym, g):
    return _from_output(aten.tanh_backward.default, bsym, g)


VJP_RULES["ltorch.tanh"] = tanh_vjp


def sigmoid_vjp(bsym, g):
    return _from_output(aten.sigmoid_backward.default, bsym, g)


VJP_RULES["ltorch.sigmoid"] = sigmoid_vjp


def relu_vjp(bsym, g):
    """From the output, as eager's autograd saves it (the input can then be freed)."""
    x, inplace = bound_arguments(bsym)
    if inplace or not isinstance(bsym.output, TensorProxy) or x.dtype.is_complex:
        return NotImplemented
    return ltorch.threshold_backward(g, bsym.output, 0), None


VJP_RULES["ltorch.relu"] = relu_vjp


def _hard_vjp(backward_op):
    def rule(bsym, g):
        x, inplace = bound_arguments(bsym)
        if inplace or not x.dtype.is_floating_point:
            return NotImplemented
        return backward_op(g, x), None

    return rule


VJP_RULES["ltorch.hardswish"] = _hard_vjp(ltorch.hardswish_backward)
VJP_RULES["ltorch.hardsigmoid"] = _hard_vjp(ltorch.hardsigmoid_backward)


# -- normalization: the forward kernel returns the statistics ------------------------------------------------------
def _shape_list(normalized_shape) -> list:
    return [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)


def _layer_norm_augment(bsym):
    x, shape, w, b, eps = bound_arguments(bsym)
    return opaque_symbol(aten.native_layer_norm.default), (x, _shape_list(shape), w, b, eps), {}, _layer_norm_backward


def _layer_norm_backward(bsym, residuals, g):
    x, shape, w, b, _eps = bound_arguments(bsym)
    mean, rstd = residuals
    mask = [is_diff(x), is_diff(w), is_diff(b)]
    gx, gw, gb = call(aten.native_layer_norm_backward.default, g, x, _shape_list(shape), mean, rstd, w, b, mask)
    return gx if mask[0] else None, None, gw if mask[1] else None, gb if mask[2] else None, None


def _rms_norm_augment(bsym):
    x, shape, w, eps = bound_arguments(bsym)
    return opaque_symbol(aten._fused_rms_norm.default), (x, _shape_list(shape), w, eps), {}, _rms_norm_backward


def _rms_norm_backward(bsym, residuals, g):
    """Written over torch-level ops (torch has no CPU kernel for _fused_rms_norm_backward), in float32 for half
    inputs: x^ = x * rstd, dw = sum(g * x^), dx = rstd * (g w - x^ * mean(g w x^))."""
    x, shape, w, _eps = bound_arguments(bsym)
    (rstd,) = residuals
    dims = tuple(range(x.ndim - len(_shape_list(shape)), x.ndim))
    x32, g32 = nh.upcast(x), nh.upcast(g)
    xhat = te.mul(x32, rstd)
    gw = None
    if is_diff(w):
        gw = te.to_dtype(nh.sum_(te.mul(g32, xhat), tuple(range(dims[0]))) if dims[0] else te.mul(g32, xhat), w.dtype)
    gx = None
    if is_diff(x):
        gxhat = te.mul(g32, nh.upcast(w)) if w is not None else g32
        inner = te.sub(gxhat, te.mul(xhat, nh.mean(te.mul(gxhat, xhat), dims, keepdim=True)))
        gx = te.to_dtype(te.mul(inner, rstd), x.dtype)
    return gx, None, gw, None


def batch_norm_train_vjp(bsym, g, *_stat_grads):
    """The statistics and new running stats carry no gradient (eager's kernel returns them outside autograd)."""
    x, w, b = bsym.args[:3]
    _out, mean, rstd = bsym.output[:3]
    mask = [is_diff(x), is_diff(w), is_diff(b)]
    if g is None or not any(mask):
        return None, None, None, None, None, None, None
    gx, gw, gb = ltorch.batch_norm_backward(g, x, w, mean, rstd, mask)
    return gx, gw, gb, None, None, None, None


VJP_RULES["ltorch.batch_norm_train"] = batch_norm_train_vjp
def _max_pool2d_augment(bsym):
    """The forward line becomes aten's max_pool2d_with_indices (eager's kernel), the indices its residual."""
    x, kernel_size, stride, padding, dilation, ceil_mode, return_indices = bound_arguments(bsym)
    if return_indices or x.ndim != 4 or not x.dtype.is_floating_point or x.numel() == 0:
        return None
    args = (x, kernel_size, stride if stride is not None else [], padding, dilation, ceil_mode)
    return opaque_symbol(aten.max_pool2d_with_indices.default), args, {}, _max_pool2d_backward


def _max_pool2d_backward(bsym, residuals, g):
    x, kernel_size, stride, padding, dilation, ceil_mode, _ri = bound_arguments(bsym)
    (indices,) = residuals
    return (ltorch.max_pool2d_backward(g, x, kernel_size, stride if stride is not None else [], padding, dilation,
                                       ceil_mode, indices), None, None, None, None, None, None)


def adaptive_avg_pool2d_vjp(bsym, g):
    """Global average pooling (output size 1, what eager computes as a mean over the last two dims): the gradient
    expanded over the input and divided by the count, as eager's mean backward does (one elementwise line, which a
    fusion executor may fuse); any other output size goes through the decomposition."""
    x, output_size = bound_arguments(bsym)
    sizes = (output_size,) * 2 if isinstance(output_size, int) or output_size is None else tuple(output_size)
    if len(sizes) != 2 or any(s != 1 for s in sizes) or not x.dtype.is_floating_point or x.ndim not in (3, 4):
        return NotImplemented
    return te.div(ltorch.expand(g, tuple(x.shape)), x.shape[-1] * x.shape[-2]), None


VJP_RULES["ltorch.adaptive_avg_pool2d"] = adaptive_avg_pool2d_vjp
AUGMENTED_FORWARDS["ltorch.max_pool2d"] = _max_pool2d_augment
AUGMENTED_FORWARDS["ltorch.layer_norm"] = _layer_norm_augment
AUGMENTED_FORWARDS["ltorch.rms_norm"] = _rms_norm_augment


# -- attention: torch's CPU flash kernels (out and logsumexp saved, like eager's autograd) -------------------------
_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _sdpa_augment(bsym):
    q, k, v, attn_mask, dropout_p, is_causal, scale, gqa = bound_arguments(bsym)
    tensors = (q, k, v)
    # (grouped-query attention, enable_gqa with fewer key/value heads: the CPU flash kernels take it as eager's
    # dispatch hands it to them, the gradients of key and value summed over each group)
    heads_ok = q.shape[1] == k.shape[1] or (gqa and k.shape[1] != 0 and q.shape[1] % k.shape[1] == 0)
    ok = (attn_mask is None and dropout_p == 0.0 and all(t.ndim == 4 and t.device.type == "cpu" for t in tensors)
          and q.dtype in _FLASH_DTYPES and q.shape[-1] == k.shape[-1] == v.shape[-1] and heads_ok
          and k.shape[1] == v.shape[1] and q.shape[0] == k.shape[0] == v.shape[0] and all(t.numel() for t in tensors))
    if not ok:
        return None
    return opaque_symbol(sdpa_flash_cpu), (q, k, v, 0.0, bool(is_causal), scale), {}, _sdpa_backward


def _sdpa_backward(bsym, residuals, g):
    q, k, v, _mask, _p, is_causal, scale, _gqa = bound_arguments(bsym)
    (lse,) = residuals
    gq, gk, gv = call(sdpa_flash_cpu_backward, g, q, k, v, bsym.output, lse, 0.0, bool(is_causal), scale)
    grads = gq if is_diff(q) else None, gk if is_diff(k) else None, gv if is_diff(v) else None
    return grads + (None,) * 5


AUGMENTED_FORWARDS["ltorch.scaled_dot_product_attention"] = _sdpa_augment


# -- cross_entropy with class-index targets: the log_softmax made inside is saved (as eager saves it) ----------------
def _log_softmax_inside(bsym):
    for sub in bsym.subsymbols:
        if sub.sym.id == ltorch.log_softmax.id:
            return sub.output
    return None


_REDUCTION_ENUM = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction, as aten's loss kernels take it


def cross_entropy_vjp(bsym, g):
    input, target, weight, size_average, ignore_index, reduce, reduction, smoothing = bound_arguments(bsym)
    reduction = nh.reduction_string(size_average, reduce, reduction)
    lsm = _log_softmax_inside(bsym)
    if lsm is None or tuple(input.shape) == tuple(target.shape) or input.numel() == 0 or not is_diff(input):
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
        g_lsm = call(aten.nll_loss_backward.default, g2, lsm2, t, weight, _REDUCTION_ENUM[reduction], ignore_index,
                      total)
        gx = call(aten._log_softmax_backward_data.default, g_lsm, lsm2, 1, dtype)
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
    gx = call(aten._log_softmax_backward_data.default, g_lsm, lsm2, 1, dtype)
    gx = ps.reshape(gx, tuple(lsm.shape)) if lsm.ndim == 1 else gx
    return (te.to_dtype(gx, input.dtype) if gx.dtype != input.dtype else gx,) + (None,) * 7


VJP_RULES["ltorch.cross_entropy"] = cross_entropy_vjp


# -- embedding ---------------------------------------------------------------------------------------------------
def embedding_vjp(bsym, g):
    input, weight, padding_idx, max_norm, _norm_type, scale_grad_by_freq, sparse = bound_arguments(bsym)
    if max_norm is not None or sparse:
        return NotImplemented
    n = weight.shape[0]
    pidx = -1 if padding_idx is None else padding_idx % n
    gw = call(aten.embedding_dense_backward.default, g, input, n, pidx, scale_grad_by_freq)
    return None, gw, None, None, None, None, None


VJP_RULES["ltorch.embedding"] = embedding_vjp


# -- split family: one cat of the pieces' cotangents (zeros for unused pieces) instead of a pad per piece ----------
def pieces_vjp(bsym, *gs):
    args = bound_arguments(bsym)
    a, dim = args[0], args[-1]
    pieces = list(bsym.output)
    if not is_diff(a) or not pieces or not all(isinstance(p, TensorProxy) for p in pieces):
        return NotImplemented
    d = dim % a.ndim
    unbound = bsym.sym.id == ltorch.unbind.id
    if not unbound and any(getattr(p.shape[d], "runtime", False) for p in pieces):
        return NotImplemented  # pieces of run-time lengths (split points in a tensor): through their decomposition
    if sum(1 if unbound else p.shape[d] for p in pieces) != a.shape[d]:
        return NotImplemented
    grads = [g if g is not None else zeros_like(p) for p, g in zip(pieces, gs)]
    if unbound:
        grads = [ps.reshape(g, (*a.shape[:d], 1, *a.shape[d + 1:])) for g in grads]
    out = ps.cat(grads, d) if len(grads) > 1 else grads[0]
    return (out,) + (None,) * (len(args) - 1)


VJP_RULES["ltorch.split"] = pieces_vjp
VJP_RULES["ltorch.split_with_sizes"] = pieces_vjp
VJP_RULES["ltorch.chunk"] = pieces_vjp
VJP_RULES["ltorch.tensor_split"] = pieces_vjp
VJP_RULES["ltorch.unbind"] = pieces_vjp
