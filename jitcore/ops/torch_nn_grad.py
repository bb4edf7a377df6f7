"""Ops: torch-level gradient ops, the bodies of aten's backward kernels (threshold, silu, hardswish, hardsigmoid,
batch_norm and max_pool2d backward). VJP rules call them; each records its torch-level body as subsymbols, so the
torch executor runs aten's kernel (executors/torchex_native.py) while a fusion executor may fuse the body instead.
Half-precision bodies compute in float32 and round once, like the kernels.
"""
from __future__ import annotations

import torch

from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_shape as ps
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import add, div, gt, le, logical_and, lt, mul, sigmoid, sub, to_dtype, where

aten = torch.ops.aten


@torchsymbol(aten.threshold_backward.default, id="ltorch.threshold_backward")
def threshold_backward(grad_output, self, threshold):
    """The gradient of relu/threshold: grad_output where self > threshold, else 0 (self: the input or the output)."""
    return where(le(self, threshold), to_dtype(0, grad_output.dtype), grad_output)


@torchsymbol(aten.silu_backward.default, id="ltorch.silu_backward")
def silu_backward(grad_output, self):
    """grad * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    g, x = nh.upcast(grad_output), nh.upcast(self)
    s = sigmoid(x)
    return to_dtype(mul(mul(g, s), add(mul(x, sub(1.0, s)), 1.0)), grad_output.dtype)


@torchsymbol(aten.hardswish_backward.default, id="ltorch.hardswish_backward")
def hardswish_backward(grad_output, self):
    """0 for x <= -3, grad * (x / 3 + 1/2) for -3 < x < 3, grad from 3 on (NaN too): aten's kernel."""
    g, x = nh.upcast(grad_output), nh.upcast(self)
    out = where(le(x, -3.0), 0.0, where(lt(x, 3.0), mul(g, add(div(x, 3.0), 0.5)), g))
    return to_dtype(out, grad_output.dtype)


@torchsymbol(aten.hardsigmoid_backward.default, id="ltorch.hardsigmoid_backward")
def hardsigmoid_backward(grad_output, self):
    """grad / 6 strictly between -3 and 3, else 0."""
    g, x = nh.upcast(grad_output), nh.upcast(self)
    return to_dtype(where(logical_and(gt(x, -3.0), lt(x, 3.0)), mul(g, 1.0 / 6.0), 0.0), grad_output.dtype)


@torchsymbol(id="ltorch.batch_norm_backward")
def batch_norm_backward(grad, input, weight, save_mean, save_rstd, output_mask):
    """Gradients (input, weight, bias) of training-mode batch norm from the batch mean and 1/std, each None where
    output_mask says so: what aten's native_batch_norm_backward computes."""
    c = input.shape[1]
    stat_shape = (1, c) + (1,) * (input.ndim - 2)
    dims = (0,) + tuple(range(2, input.ndim))
    count = input.numel() // max(c, 1)
    g, rstd = nh.upcast(grad), ps.reshape(save_rstd, stat_shape)
    xhat = mul(sub(nh.upcast(input), ps.reshape(save_mean, stat_shape)), rstd)
    g_sum, gx_sum = nh.sum_(g, dims), nh.sum_(mul(g, xhat), dims)
    gx = gw = gb = None
    if output_mask[0]:
        mean_g = div(ps.reshape(g_sum, stat_shape), count)
        inner = sub(sub(g, mean_g), mul(xhat, div(ps.reshape(gx_sum, stat_shape), count)))
        scale = rstd if weight is None else mul(rstd, ps.reshape(nh.upcast(weight), stat_shape))
        gx = to_dtype(mul(inner, scale), input.dtype)
    param_dtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        gw = to_dtype(gx_sum, param_dtype)
    if output_mask[2]:
        gb = to_dtype(g_sum, param_dtype)
    return gx, gw, gb


@torchsymbol(aten.max_pool2d_with_indices_backward.default, id="ltorch.max_pool2d_backward")
def max_pool2d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Each window's gradient added at its max's position (indices: flat positions in each input plane, as
    max_pool2d_with_indices returns them): aten's max_pool2d_with_indices_backward."""
    n, c = self.shape[0], self.shape[1]
    plane = self.shape[2] * self.shape[3]
    g = ps.reshape(nh.upcast(grad_output), (n, c, grad_output.numel() // max(n * c, 1)))
    idx = ps.reshape(indices, tuple(g.shape))
    zeros = pc.full((n, c, plane), 0.0, device=self.device, dtype=g.dtype)
    return to_dtype(ps.reshape(pi.scatter_add(zeros, idx, g, 2), tuple(self.shape)), self.dtype)
