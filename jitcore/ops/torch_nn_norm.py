"""Ops: torch-level normalizations (F.layer_norm, rms_norm, group_norm, batch_norm, instance_norm, normalize,
cosine_similarity, pairwise_distance). Statistics are computed in float32 for half-precision inputs; batch_norm's
running-stat update is a prims.copy_ into the buffers, so it happens when the program runs, like eager's.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_shape as ps
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import add, clamp_min, div, mul, rsqrt, sub, to_dtype
from jitcore.ops.torch_map import TORCH_MAP
from jitcore.ops.torch_reduction import vector_norm
from jitcore.ops.utils import check, is_int

F = torch.nn.functional


def _affine(out, weight, bias, shape):
    """out * weight + bias with weight/bias reshaped to `shape` (per-channel or trailing dims)."""
    if weight is not None:
        out = mul(out, nh.upcast(ps.reshape(weight, shape) if tuple(weight.shape) != shape else weight))
    if bias is not None:
        out = add(out, nh.upcast(ps.reshape(bias, shape) if tuple(bias.shape) != shape else bias))
    return out


def _check_normalized_shape(op, input, normalized_shape, *params):
    shape = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    k = len(shape)
    check(k >= 1, lambda: f"{op}: Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
                          f"one element, but got normalized_shape = {list(shape)}")
    check(input.ndim >= k and tuple(input.shape[input.ndim - k:]) == shape,
          lambda: f"{op}: Given normalized_shape={list(shape)}, expected input with shape [*, "
                  f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    for name, p in params:
        if p is not None and tuple(p.shape) != shape:
            check(False, f"{op}: Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                         f"{list(p.shape)} and normalized_shape = {list(shape)}")
    return shape, tuple(range(input.ndim - k, input.ndim))


@torchsymbol(F.layer_norm, torch.layer_norm, id="ltorch.layer_norm")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    nh.check_float("layer_norm", input)
    shape, dims = _check_normalized_shape("layer_norm", input, normalized_shape, ("weight", weight), ("bias", bias))
    x = nh.upcast(input)
    var, mean = nh.var_mean(x, dims, correction=0, keepdim=True)
    out = mul(sub(x, mean), rsqrt(add(var, eps)))
    return to_dtype(_affine(out, weight, bias, shape), input.dtype)


@torchsymbol(F.rms_norm, torch.rms_norm, id="ltorch.rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    nh.check_float("rms_norm", input)
    shape, dims = _check_normalized_shape("rms_norm", input, normalized_shape, ("weight", weight))
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    x = nh.upcast(input)
    out = mul(x, rsqrt(add(nh.mean(mul(x, x), dims, keepdim=True), eps)))
    return to_dtype(_affine(out, weight, None, shape), input.dtype)


@torchsymbol(F.group_norm, torch.group_norm, id="ltorch.group_norm")
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    nh.check_float("group_norm", input)
    check(input.ndim >= 2, lambda: f"group_norm: Expected at least 2 dimensions for input tensor but received "
                                   f"{input.ndim}")
    n, c = input.shape[0], input.shape[1]
    check(num_groups > 0 and c % num_groups == 0,
          lambda: f"group_norm: Expected number of channels in input to be divisible by num_groups, but got input of "
                  f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (c,):
            check(False, f"group_norm: Expected {name} to be a vector of size equal to the number of channels in "
                         f"input, but got {name} of shape {list(p.shape)} and input of shape {list(input.shape)}")
    x = ps.reshape(nh.upcast(input), (n, num_groups, input.numel() // max(n * num_groups, 1)))
    var, mean = nh.var_mean(x, 2, correction=0, keepdim=True)
    out = ps.reshape(mul(sub(x, mean), rsqrt(add(var, eps))), tuple(input.shape))
    return to_dtype(_affine(out, weight, bias, (c,) + (1,) * (input.ndim - 2)), input.dtype)


def _check_batch_norm(input, running_mean, running_var, weight, bias):
    nh.check_float("batch_norm", input)
    check(input.ndim >= 2, lambda: f"batch_norm: expected 2D or more input (got {input.ndim}D input)")
    c = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if p is not None and p.numel() != c:
            check(False, f"batch_norm: {name} should contain {c} elements not {p.numel()} (input {list(input.shape)})")
    return c, (1, c) + (1,) * (input.ndim - 2)


def _batch_stats(input):
    """(biased var, mean) over every dim but the channels, in float32 for half inputs, and the count per channel."""
    dims = (0,) + tuple(range(2, input.ndim))
    count = input.numel() // max(input.shape[1], 1)
    check(count > 1, lambda: f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
    var, mean = nh.var_mean(nh.upcast(input), dims, correction=0)
    return var, mean, count


@torchsymbol(id="ltorch.batch_norm_train")
def batch_norm_train(input, weight, bias, running_mean, running_var, momentum, eps):
    """Training-mode batch norm as a function: (out, batch mean, batch 1/std, new running mean, new running var),
    as aten's native_batch_norm computes them (the torch executor runs that kernel on copies of the running stats);
    its gradient is ltorch.batch_norm_backward, reading the mean and 1/std."""
    c, stat_shape = _check_batch_norm(input, running_mean, running_var, weight, bias)
    var, mean, count = _batch_stats(input)
    rstd = rsqrt(add(var, eps))
    new_mean = _running(running_mean, mean, momentum)
    new_var = _running(running_var, mul(var, count / (count - 1)), momentum)
    out = mul(sub(nh.upcast(input), ps.reshape(mean, stat_shape)), ps.reshape(rstd, stat_shape))
    out = to_dtype(_affine(out, weight, bias, (c,) + (1,) * (input.ndim - 2)), input.dtype)
    return out, mean, rstd, new_mean, new_var


def _running(buffer, new_stat, momentum):
    """(1 - momentum) * buffer + momentum * new_stat, without a gradient (eager's kernel updates the running stats
    outside autograd)."""
    value = add(mul(nh.upcast(buffer), 1.0 - momentum), mul(pm.stop_gradient(new_stat), momentum))
    return to_dtype(value, buffer.dtype)


def _update_running(buffer, new_stat, momentum):
    """buffer <- (1 - momentum) * buffer + momentum * new_stat, written when the program runs."""
    pm.copy_(_running(buffer, new_stat, momentum), buffer)


@torchsymbol(F.batch_norm, id="ltorch.batch_norm")
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-05):
    c, stat_shape = _check_batch_norm(input, running_mean, running_var, weight, bias)
    if training and input.numel() == 0:  # (eager's kernels: an empty batch, its running stats left as they are)
        return to_dtype(_affine(nh.upcast(input), weight, bias, (c,) + (1,) * (input.ndim - 2)), input.dtype)
    if training and running_mean is not None and running_var is not None:
        out, _mean, _rstd, new_mean, new_var = batch_norm_train(input, weight, bias, running_mean, running_var,
                                                                momentum, eps)
        pm.copy_(new_mean, running_mean)
        pm.copy_(new_var, running_var)
        return out
    x = nh.upcast(input)
    if training:
        var, mean, count = _batch_stats(input)
        if running_mean is not None:
            _update_running(running_mean, mean, momentum)
        if running_var is not None:
            _update_running(running_var, mul(var, count / (count - 1)), momentum)
        mean, var = ps.reshape(mean, stat_shape), ps.reshape(var, stat_shape)
    else:
        check(running_mean is not None and running_var is not None,
              "batch_norm: running_mean and running_var must be defined in evaluation mode")
        mean, var = ps.reshape(nh.upcast(running_mean), stat_shape), ps.reshape(nh.upcast(running_var), stat_shape)
    out = mul(sub(x, mean), rsqrt(add(var, eps)))
    return to_dtype(_affine(out, weight, bias, (c,) + (1,) * (input.ndim - 2)), input.dtype)


def _torch_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """torch.batch_norm's argument order -> F.batch_norm."""
    return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


TORCH_MAP[torch.batch_norm] = _torch_batch_norm


@torchsymbol(F.instance_norm, id="ltorch.instance_norm")
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-05):
    nh.check_float("instance_norm", input)
    check(input.ndim >= 3, lambda: f"instance_norm: expected 3D or more input (got {input.ndim}D input)")
    n, c = input.shape[0], input.shape[1]
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    x = nh.upcast(input)
    dims = tuple(range(2, input.ndim))
    count = input.numel() // max(n * c, 1)
    var, mean = nh.var_mean(x, dims, correction=0, keepdim=True)
    if running_mean is not None:
        _update_running(running_mean, nh.mean(ps.reshape(mean, (n, c)), 0), momentum)
    if running_var is not None:
        unbiased = mul(ps.reshape(var, (n, c)), count / max(count - 1, 1))
        _update_running(running_var, nh.mean(unbiased, 0), momentum)
    out = mul(sub(x, mean), rsqrt(add(var, eps)))
    return to_dtype(_affine(out, weight, bias, (c,) + (1,) * (input.ndim - 2)), input.dtype)


@torchsymbol(F.normalize, id="ltorch.normalize")
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    check(out is None, "normalize: out= is not supported")
    norm = vector_norm(input, p, dim, keepdim=True)
    return div(input, clamp_min(norm, eps))


@torchsymbol(F.cosine_similarity, torch.cosine_similarity, id="ltorch.cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    check(isinstance(x1, TensorProxy) and isinstance(x2, TensorProxy), "cosine_similarity: expected two tensors")
    x1, x2 = nh.float_pair(x1, x2, "cosine_similarity")
    d = nh.dims_of(x1, dim)
    n1 = clamp_min(vector_norm(x1, 2, d, keepdim=True), eps)
    n2 = clamp_min(vector_norm(x2, 2, d, keepdim=True), eps)
    return nh.sum_(mul(div(x1, n1), div(x2, n2)), d)


@torchsymbol(F.pairwise_distance, torch.pairwise_distance, id="ltorch.pairwise_distance")
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    rank = max(x1.ndim, x2.ndim)
    diff = add(sub(x1, x2), eps)
    if rank == 0:
        return vector_norm(diff, p, None, keepdim)
    return vector_norm(diff, p, rank - 1, keepdim)
