"""Ops: torch-level losses (F.cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss, huber_loss,
binary_cross_entropy[_with_logits], kl_div, soft_margin_loss, margin_ranking_loss, cosine_embedding_loss,
poisson_nll_loss, gaussian_nll_loss). Bodies follow torch's kernels: ignore_index, class weights, label smoothing,
probability targets, legacy size_average/reduce, and 'none'/'mean'/'sum' reductions.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_shape as ps
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import (
    abs,
    add,
    broadcast,
    clamp_min,
    div,
    eq,
    exp,
    expand_to,
    gt,
    log,
    log1p,
    lt,
    mul,
    ne,
    neg,
    sqrt,
    sub,
    to_dtype,
    where,
)
from jitcore.ops.torch_nn_activation import log_softmax, logsigmoid
from jitcore.ops.utils import check

F = torch.nn.functional


# -- class-index losses ---------------------------------------------------------------------------------------------
def _nll_args(op, input, target, weight):
    """input as (N, C, d...) and target as (N, d...) (1-D input gets a batch of one), with their checks."""
    check(input.ndim >= 1, lambda: f"{op}: input tensor should be 1D or more, got shape {tuple(input.shape)}")
    check(dtypes.category(target.dtype) == 1,
          lambda: f"{op}: expected target of an integer type (class indices), got {target.dtype}")
    if input.ndim == 1:
        check(target.ndim == 0, lambda: f"{op}: 1D input expects a 0D target, got target of shape "
                                        f"{tuple(target.shape)}")
        input, target = nh.unsqueeze(input, 0), nh.unsqueeze(target, 0)
    check(target.ndim == input.ndim - 1 and input.shape[0] == target.shape[0],
          lambda: f"{op}: Expected input batch_size ({input.shape[0]}) to match target batch_size "
                  f"({target.shape[0] if target.ndim else 0}); input {tuple(input.shape)}, "
                  f"target {tuple(target.shape)}")
    check(tuple(input.shape[2:]) == tuple(target.shape[1:]),
          lambda: f"{op}: expected target size {(input.shape[0],) + tuple(input.shape[2:])}, got "
                  f"{tuple(target.shape)}")
    c = input.shape[1]
    check(weight is None or (weight.ndim == 1 and weight.shape[0] == c),
          lambda: f"{op}: weight tensor should be defined either for all {c} classes or no classes but got weight "
                  f"tensor of shape: {list(weight.shape)}")
    return input, target


def _class_weights(target, weight, mask, dtype):
    """weight[target] (1 without weight), 0 where the target is ignored."""
    if weight is None:
        return to_dtype(mask, dtype)
    safe = where(mask, target, 0)
    w = ps.reshape(pi.take(weight, nh.flatten(safe), 0), tuple(safe.shape))
    return where(mask, w, 0)


def _nll(op, input, target, weight, ignore_index, reduction):
    squeeze = input.ndim == 1
    x, t = _nll_args(op, input, target, weight)
    mask = ne(t, ignore_index)
    safe = where(mask, t, 0)
    picked = nh.squeeze(pi.take_along_axis(x, nh.unsqueeze(safe, 1), 1), 1)
    w = _class_weights(t, weight, mask, x.dtype)
    loss = where(mask, neg(mul(picked, w) if weight is not None else picked), 0)
    if reduction == "none":
        return ps.reshape(loss, ()) if squeeze else loss
    if reduction == "sum":
        return nh.sum_(loss)
    check(reduction == "mean", lambda: f"{op}: {reduction} is not a valid value for reduction")
    return div(nh.sum_(loss), nh.sum_(w))


@torchsymbol(F.nll_loss, id="ltorch.nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    return _nll("nll_loss", input, target, weight, ignore_index, reduction)


def _smooth_term(lsm, target, weight, ignore_index, reduction):
    """The label-smoothing term of cross_entropy with class indices (torch's formula)."""
    x, t = _nll_args("cross_entropy", lsm, target, weight)
    mask = ne(t, ignore_index)
    if weight is not None:
        x = mul(x, ps.reshape(weight, (1, x.shape[1]) + (1,) * (x.ndim - 2)))
    smooth = where(mask, neg(nh.sum_(x, 1)), 0)
    if reduction == "none":
        return ps.reshape(smooth, ()) if lsm.ndim == 1 else smooth
    if reduction == "sum":
        return nh.sum_(smooth)
    return div(nh.sum_(smooth), nh.sum_(_class_weights(t, weight, mask, x.dtype)))


def _prob_target_ce(lsm, target, weight, reduction, label_smoothing):
    class_dim = 0 if lsm.ndim == 1 else 1
    n_classes = lsm.shape[class_dim]
    check(dtypes.is_float(target.dtype), lambda: f"cross_entropy: Expected floating point type for target with class "
                                                 f"probabilities, got {target.dtype}")
    if label_smoothing > 0:
        target = add(mul(target, 1 - label_smoothing), label_smoothing / n_classes)
    prod = mul(lsm, target)
    if weight is not None:
        prod = mul(prod, ps.reshape(weight, (n_classes,) + (1,) * (lsm.ndim - class_dim - 1)))
    if reduction == "none":
        return neg(nh.sum_(prod, class_dim))
    total = neg(nh.sum_(prod))
    if reduction == "sum":
        return total
    count = lsm.numel() // n_classes if n_classes else 0
    return div(total, count) if count else mul(total, math.nan)


@torchsymbol(F.cross_entropy, id="ltorch.cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    check(reduction in ("none", "mean", "sum"),
          lambda: f"cross_entropy: {reduction} is not a valid value for reduction")
    check(0.0 <= label_smoothing <= 1.0,
          lambda: f"cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    nh.check_float("cross_entropy", input)
    lsm = log_softmax(input, 0 if input.ndim == 1 else 1)
    if tuple(input.shape) == tuple(target.shape):
        check(ignore_index < 0, "cross_entropy: ignore_index is not supported for floating point target")
        return _prob_target_ce(lsm, target, weight, reduction, label_smoothing)
    nll = _nll("cross_entropy", lsm, target, weight, ignore_index, reduction)
    if label_smoothing == 0:
        return nll
    n_classes = lsm.shape[0 if lsm.ndim == 1 else 1]
    smooth = _smooth_term(lsm, target, weight, ignore_index, reduction)
    return add(mul(nll, 1 - label_smoothing), mul(smooth, label_smoothing / n_classes))


# -- pointwise regression losses ----------------------------------------------------------------------------------
def _pointwise(op, input, target, weight, reduction, fn, weighted_mean_by_weight=True):
    check(isinstance(input, TensorProxy) and isinstance(target, TensorProxy),
          lambda: f"{op}: expected input and target tensors, got {type(input).__name__} and {type(target).__name__}")
    x, t = broadcast(input, target, op=op)
    loss = fn(x, t)
    if weight is None:
        return nh.reduce_loss(op, loss, reduction)
    check(tuple(weight.shape) == tuple(input.shape), f"{op}: Weights and input must have the same size.")
    loss = mul(loss, weight)
    if reduction == "mean" and weighted_mean_by_weight:
        return div(nh.sum_(loss), nh.sum_(weight))
    return nh.reduce_loss(op, loss, reduction)


@torchsymbol(F.mse_loss, id="ltorch.mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    return _pointwise("mse_loss", input, target, weight, reduction, lambda x, t: _sq(sub(x, t)))


def _sq(d):
    return mul(d, d)


@torchsymbol(F.l1_loss, id="ltorch.l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    return _pointwise("l1_loss", input, target, weight, reduction, lambda x, t: abs(sub(x, t)))


def _smooth_l1(x, t, beta):
    d = abs(sub(x, t))
    if beta == 0:
        return d
    return where(lt(d, beta), div(mul(_sq(d), 0.5), beta), sub(d, 0.5 * beta))


@torchsymbol(F.smooth_l1_loss, id="ltorch.smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    check(beta >= 0, "smooth_l1_loss does not support negative values for beta.")
    reduction = nh.reduction_string(size_average, reduce, reduction)
    return _pointwise("smooth_l1_loss", input, target, None, reduction, lambda x, t: _smooth_l1(x, t, beta))


def _huber(x, t, delta):
    d = abs(sub(x, t))
    return where(lt(d, delta), mul(_sq(d), 0.5), mul(sub(d, 0.5 * delta), delta))


@torchsymbol(F.huber_loss, id="ltorch.huber_loss")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    check(delta > 0, "huber_loss does not support non-positive values for delta.")
    return _pointwise("huber_loss", input, target, weight, reduction, lambda x, t: _huber(x, t, delta), False)


# -- binary and probabilistic losses --------------------------------------------------------------------------------
def _bce(x, t):
    return sub(mul(sub(t, 1), clamp_min(log1p(neg(x)), -100.0)), mul(t, clamp_min(log(x), -100.0)))


@torchsymbol(F.binary_cross_entropy, id="ltorch.binary_cross_entropy")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    check(tuple(target.shape) == tuple(input.shape),
          lambda: f"Using a target size ({torch.Size(target.shape)}) that is different to the input size "
                  f"({torch.Size(input.shape)}) is deprecated. Please ensure they have the same size.")
    nh.check_float("binary_cross_entropy", input)
    loss = to_dtype(_bce(nh.upcast(input), nh.upcast(target)), input.dtype)
    if weight is not None:
        loss = mul(loss, weight)
    return nh.reduce_loss("binary_cross_entropy", loss, reduction)


@torchsymbol(F.binary_cross_entropy_with_logits, id="ltorch.binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    check(tuple(target.shape) == tuple(input.shape),
          lambda: f"Target size ({torch.Size(target.shape)}) must be the same as input size "
                  f"({torch.Size(input.shape)})")
    one_minus_t = sub(1, target)
    if pos_weight is not None:
        log_weight = add(mul(sub(pos_weight, 1), target), 1)
        softplus_neg = add(clamp_min(neg(input), 0), log1p(exp(neg(abs(input)))))
        loss = add(mul(one_minus_t, input), mul(log_weight, softplus_neg))
    else:
        loss = sub(mul(one_minus_t, input), logsigmoid(input))
    if weight is not None:
        loss = mul(loss, weight)
    return nh.reduce_loss("binary_cross_entropy_with_logits", loss, reduction)


def _xlogy(t, y):
    return where(eq(t, 0), 0.0, mul(t, log(y)))


@torchsymbol(F.kl_div, id="ltorch.kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if size_average is not None or reduce is not None:
        reduction = nh.reduction_string(size_average, reduce, reduction)
    if log_target:
        loss = mul(exp(target), sub(target, input))
    else:
        loss = sub(_xlogy(target, target), mul(target, input))
    if reduction == "batchmean":
        total = nh.sum_(loss)
        return div(total, input.shape[0]) if input.ndim else total
    return nh.reduce_loss("kl_div", loss, reduction)


@torchsymbol(F.soft_margin_loss, id="ltorch.soft_margin_loss")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    return nh.reduce_loss("soft_margin_loss", log1p(exp(mul(neg(input), target))), reduction)


@torchsymbol(F.margin_ranking_loss, id="ltorch.margin_ranking_loss")
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    check(input1.ndim == input2.ndim == target.ndim,
          lambda: f"margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: "
                  f"{torch.Size(input1.shape)}, input2: {torch.Size(input2.shape)}, "
                  f"target: {torch.Size(target.shape)} ")
    loss = clamp_min(add(mul(neg(target), sub(input1, input2)), margin), 0)
    return nh.reduce_loss("margin_ranking_loss", loss, reduction)


@torchsymbol(F.cosine_embedding_loss, id="ltorch.cosine_embedding_loss")
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    check(input1.ndim in (1, 2) and input1.ndim == input2.ndim and target.ndim == input1.ndim - 1,
          lambda: f"cosine_embedding_loss: 0D target tensor expects 1D input tensors, or 1D target expects 2D inputs; "
                  f"got {tuple(input1.shape)}, {tuple(input2.shape)} and target {tuple(target.shape)}")
    d = input1.ndim - 1
    eps = 1e-12
    prod = nh.sum_(mul(input1, input2), d)
    mag1 = add(nh.sum_(mul(input1, input1), d), eps)
    mag2 = add(nh.sum_(mul(input2, input2), d), eps)
    cos = div(prod, sqrt(mul(mag1, mag2)))
    pos = where(eq(target, 1), sub(1, cos), 0.0)
    neg_part = where(eq(target, -1), clamp_min(sub(cos, margin), 0), 0.0)
    return nh.reduce_loss("cosine_embedding_loss", add(pos, neg_part), reduction)


@torchsymbol(F.poisson_nll_loss, id="ltorch.poisson_nll_loss")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-08, reduce=None,
                     reduction="mean"):
    reduction = nh.reduction_string(size_average, reduce, reduction)
    if log_input:
        loss = sub(exp(input), mul(target, input))
    else:
        loss = sub(input, mul(target, log(add(input, eps))))
    if full:
        t = target
        stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2 * math.pi)), 0.5))
        loss = add(loss, where(gt(t, 1), stirling, 0.0))
    return nh.reduce_loss("poisson_nll_loss", loss, reduction)


@torchsymbol(F.gaussian_nll_loss, id="ltorch.gaussian_nll_loss")
def gaussian_nll_loss(input, target, var, full=False, eps=1e-06, reduction="mean"):
    if not isinstance(var, TensorProxy):
        check(var >= 0, "var has negative entry/entries")
        var = expand_to(nh.full((), var, input), input.shape)
    elif tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = nh.unsqueeze(var, -1)
        else:
            mismatched = sum(v for i, v in zip(input.shape, var.shape) if i != v) if input.ndim == var.ndim else 0
            check(mismatched == 1, "var is of incorrect size")
    check(reduction in ("none", "mean", "sum"), lambda: f"{reduction} is not valid")
    var = clamp_min(var, eps)
    loss = mul(add(log(var), div(_sq(sub(input, target)), var)), 0.5)
    if full:
        loss = add(loss, 0.5 * math.log(2 * math.pi))
    return nh.reduce_loss("gaussian_nll_loss", loss, reduction)
