"""Executors: the torch executor's max pooling through a channels-last copy.

aten's 2-d max pooling over a contiguous (NCHW) tensor runs a scalar loop per plane; over a channels-last tensor it
runs vectors across the channels, 2.5-4x faster from 8 channels on (a 8x64x32x32 float32 input, 3x3 windows, stride
2: 3.0 ms against 1.2 ms with both layout copies, one thread). A max picks an element and does not round, and both
kernels scan each window in the same order with the same rule for ties (the first maximum) and NaN (the last NaN),
so the values and the argmax positions are bitwise eager's. The kernel copies a contiguous input to channels-last,
pools, and hands its results back in eager's contiguous layout; an input in any other layout runs eager's call as
given. Chosen when the line is claimed (torchex.BY_INPUT), where the input's sizes make the copies pay.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from executors.base import no_meta
from executors.torchex import BY_INPUT, FRESH_FUNCTIONS, torch_ex
from jitcore.ir.symbol import BoundSymbol
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import LTORCH

_CL = torch.channels_last
_WITH_INDICES = torch.ops.aten.max_pool2d_with_indices.default
# the least channel count at which the channels-last kernel wins, by dtype (float16's vectors pay from 16)
_MIN_CHANNELS = {torch.float32: 8, torch.float64: 8, torch.bfloat16: 8, torch.float16: 16}
_MIN_NUMEL = 16384  # below, the two copies cost about what the pooling saves


def _pays(x) -> bool:
    """Whether pooling a contiguous tensor like proxy `x` is faster through a channels-last copy: a CPU batch of
    images (N, C, H, W) with static sizes, enough channels and elements, and more than one pixel (a tensor with one
    pixel or one channel is contiguous in both layouts, and eager's kernel may pick either)."""
    if getattr(x, "ndim", None) != 4 or x.device.type != "cpu" or not all(type(n) is int for n in x.shape):
        return False
    n, c, h, w = x.shape
    least = _MIN_CHANNELS.get(x.dtype)
    return least is not None and c >= least and h * w > 1 and n * c * h * w >= _MIN_NUMEL


def _contiguous(result):
    return tuple(r.contiguous() for r in result) if isinstance(result, tuple) else result.contiguous()


def _through_channels_last(pool):
    def kernel(input, *args, **kwargs):
        if input.is_contiguous() and not input.is_contiguous(memory_format=_CL):
            return _contiguous(pool(input.contiguous(memory_format=_CL), *args, **kwargs))
        return pool(input, *args, **kwargs)

    return kernel


_WITH_INDICES_OP = opaque_symbol(_WITH_INDICES)  # the training forward's line (indices kept for the backward)
_KERNELS = {
    _WITH_INDICES_OP.id: torch_ex._kernel_symbol("max_pool2d_with_indices_channels_last",
                                                 _through_channels_last(_WITH_INDICES), no_meta(_WITH_INDICES_OP)),
    LTORCH["max_pool2d"].id: torch_ex._kernel_symbol("max_pool2d_channels_last", _through_channels_last(F.max_pool2d),
                                                     no_meta(LTORCH["max_pool2d"])),
}


def _choose(bsym):
    if not bsym.args or not _pays(bsym.args[0]):
        return None
    return BoundSymbol(_KERNELS[bsym.sym.id], bsym.args, bsym.kwargs, bsym.output, (bsym,))


for _id, _kernel in _KERNELS.items():
    BY_INPUT[_id] = _choose
FRESH_FUNCTIONS.update({f"torchex.{k.name}" for k in _KERNELS.values()})
