"""Ops: torch-level linear layers and convolutions (F.linear, bilinear, conv1d/2d/3d with 'same'/'valid' padding,
conv_transpose1d/2d/3d, embedding, one_hot, pixel_shuffle/unshuffle). They resolve torch's argument forms
(ints or tuples, unbatched inputs) and lower to prims.linear / prims.convolution / prims.embedding.
"""
from __future__ import annotations

import torch

from jitcore.errors import DataDependentError
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_shape as ps
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import add, eq, to_dtype
from jitcore.ops.torch_linalg import einsum
from jitcore.ops.torch_map import TORCH_MAP
from jitcore.ops.utils import check, static_numbers

F = torch.nn.functional


@torchsymbol(F.linear, id="ltorch.linear")
def linear(input, weight, bias=None):
    check(isinstance(input, TensorProxy) and isinstance(weight, TensorProxy),
          lambda: f"linear(): argument 'input' and 'weight' must be tensors, got {type(input).__name__} and "
                  f"{type(weight).__name__}")
    if weight.ndim == 1 and bias is not None:  # eager's 1-D weight form: a dot product, then the bias added
        return add(pn.linear(input, weight, None), bias)
    return pn.linear(input, weight, bias)


@torchsymbol(F.bilinear, torch.bilinear, id="ltorch.bilinear")
def bilinear(input1, input2, weight, bias=None):
    check(input1.ndim == input2.ndim and tuple(input1.shape[:-1]) == tuple(input2.shape[:-1]),
          lambda: f"bilinear(): input batch dimensions do not match: got {tuple(input1.shape)} and "
                  f"{tuple(input2.shape)}")
    check(weight.ndim == 3 and weight.shape[1] == input1.shape[-1] and weight.shape[2] == input2.shape[-1],
          lambda: f"bilinear(): weight {tuple(weight.shape)} does not match input sizes {input1.shape[-1]} and "
                  f"{input2.shape[-1]}")
    out = einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else add(out, bias)


def _batched(op, input, n):
    check(isinstance(input, TensorProxy) and input.ndim in (n + 1, n + 2),
          lambda: f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to {op}, but got input of size: "
                  f"{list(getattr(input, 'shape', ()))}")
    return (nh.unsqueeze(input, 0), True) if input.ndim == n + 1 else (input, False)


def _same_padding(op, x, weight, stride, dilation, n):
    """padding='same': symmetric padding, plus one extra at the end of dims with an odd total (like torch)."""
    check(all(s == 1 for s in stride), f"{op}: padding='same' is not supported for strided convolutions")
    left, extra = [], []
    for i in range(n):
        total = dilation[i] * (weight.shape[2 + i] - 1)
        left.append(total // 2)
        extra.append(total - 2 * (total // 2))
    if any(extra):
        config = ((0, 0, 0), (0, 0, 0)) + tuple((0, e, 0) for e in extra)
        x = ps.pad(x, to_dtype(0, x.dtype), config)
    return x, tuple(left)


def _conv(op, n, input, weight, bias, stride, padding, dilation, groups):
    x, unbatched = _batched(op, input, n)
    stride, dilation = nh.ntuple(stride, n, "stride", op), nh.ntuple(dilation, n, "dilation", op)
    if isinstance(padding, str):
        check(padding in ("same", "valid"), lambda: f"Invalid padding string '{padding}'")
        if padding == "valid":
            padding = (0,) * n
        else:
            x, padding = _same_padding(op, x, weight, stride, dilation, n)
    padding = nh.ntuple(padding, n, "padding", op)
    out = pn.convolution(x, weight, bias, stride, padding, dilation, False, (0,) * n, static_numbers(groups))
    return nh.squeeze(out, 0) if unbatched else out


@torchsymbol(F.conv1d, torch.conv1d, id="ltorch.conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@torchsymbol(F.conv2d, torch.conv2d, id="ltorch.conv2d")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


@torchsymbol(F.conv3d, torch.conv3d, id="ltorch.conv3d")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(op, n, input, weight, bias, stride, padding, output_padding, groups, dilation):
    x, unbatched = _batched(op, input, n)
    args = [nh.ntuple(v, n, name, op) for name, v in (("stride", stride), ("padding", padding),
                                                        ("dilation", dilation), ("output_padding", output_padding))]
    stride, padding, dilation, output_padding = args
    for i in range(n):
        if not output_padding[i] < max(stride[i], dilation[i]):
            check(False, f"{op}: output padding must be smaller than either stride or dilation, but got "
                         f"output_padding={output_padding[i]}, stride={stride[i]}, dilation={dilation[i]}")
    out = pn.convolution(x, weight, bias, stride, padding, dilation, True, output_padding, static_numbers(groups))
    return nh.squeeze(out, 0) if unbatched else out


@torchsymbol(F.conv_transpose1d, torch.conv_transpose1d, id="ltorch.conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


@torchsymbol(F.conv_transpose2d, torch.conv_transpose2d, id="ltorch.conv_transpose2d")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


@torchsymbol(F.conv_transpose3d, torch.conv_transpose3d, id="ltorch.conv_transpose3d")
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


@torchsymbol(F.embedding, id="ltorch.embedding")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    check(isinstance(weight, TensorProxy) and weight.ndim == 2,
          lambda: f"embedding: weight must be 2-D, got shape {tuple(getattr(weight, 'shape', ()))}")
    if padding_idx is not None:
        n = weight.shape[0]
        check(-n <= padding_idx < n, "Padding_idx must be within num_embeddings")
        padding_idx = padding_idx % n
    if max_norm is not None:  # renormalizes rows of weight in place: eager's own kernel
        return opaque_symbol(F.embedding)(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    return pn.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


def _torch_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding(weight, indices, ...) -> F.embedding (padding_idx -1 means none there)."""
    return embedding(indices, weight, None if padding_idx == -1 else padding_idx, None, 2.0, scale_grad_by_freq,
                     sparse)


TORCH_MAP[torch.embedding] = _torch_embedding


@torchsymbol(F.one_hot, id="ltorch.one_hot")
def one_hot(tensor, num_classes=-1):
    check(isinstance(tensor, TensorProxy) and tensor.dtype is torch.int64,
          "one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        raise DataDependentError("one_hot with num_classes=-1 takes the class count from the data (max + 1); pass "
                                 "num_classes explicitly")
    check(num_classes >= 0, lambda: f"one_hot: num_classes should be -1 or a non-negative number, got {num_classes}")
    classes = nh.iota(num_classes, tensor)
    return to_dtype(eq(nh.unsqueeze(tensor, -1), classes), torch.int64)


@torchsymbol(F.pixel_shuffle, torch.pixel_shuffle, id="ltorch.pixel_shuffle")
def pixel_shuffle(input, upscale_factor):
    r = upscale_factor
    check(input.ndim >= 3, lambda: f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                                   f"{input.ndim} dimension(s)")
    check(r > 0, lambda: f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    check(c % (r * r) == 0, lambda: f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
                                    f"square of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    b = len(batch)
    x = ps.reshape(input, (*batch, c // (r * r), r, r, h, w))
    x = nh.permute(x, list(range(b)) + [b, b + 3, b + 1, b + 4, b + 2])
    return ps.reshape(x, (*batch, c // (r * r), h * r, w * r))


@torchsymbol(F.pixel_unshuffle, torch.pixel_unshuffle, id="ltorch.pixel_unshuffle")
def pixel_unshuffle(input, downscale_factor):
    r = downscale_factor
    check(input.ndim >= 3, lambda: f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                                   f"{input.ndim} dimension(s)")
    check(r > 0, lambda: f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    check(h % r == 0 and w % r == 0,
          lambda: f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but got {h}x{w} and "
                  f"{r}")
    b = len(batch)
    x = ps.reshape(input, (*batch, c, h // r, r, w // r, r))
    x = nh.permute(x, list(range(b)) + [b, b + 2, b + 4, b + 1, b + 3])
    return ps.reshape(x, (*batch, c * r * r, h // r, w // r))

