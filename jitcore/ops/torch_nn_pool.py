"""Ops: torch-level padding, pooling and resampling (F.pad, avg_pool1d/2d/3d, max_pool1d/2d/3d, adaptive_avg_pool1d/2d,
interpolate/upsample with nearest, nearest-exact and (bi/tri)linear modes, pixel-level index math in float32
like torch's CPU kernels). Windows are prims.unfold over padded input; other modes stay opaque.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir import dtypes
from jitcore.ir.proxies import FloatProxy, IntegerProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_shape as ps
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import (
    add,
    clamp,
    clamp_max,
    clamp_min,
    div,
    floor,
    ge,
    logical_and,
    lt,
    mul,
    sub,
    to_dtype,
    where,
)
from jitcore.ops.torch_linalg import matmul
from jitcore.ops.torch_map import TORCH_MAP
from jitcore.ops.utils import check, static_numbers

F = torch.nn.functional


# -- pad ------------------------------------------------------------------------------------------------------------
def _pad_pairs(op, input, pad):
    pad = tuple(pad)
    check(len(pad) % 2 == 0, "Padding length must be divisible by 2")
    check(len(pad) // 2 <= input.ndim,
          lambda: f"Padding length should be less than or equal to two times the input dimension but got padding "
                  f"length {len(pad)} and input of dimension {input.ndim}")
    return {input.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}


def _pad_dim(x, d, lo, hi, mode):
    if lo < 0 or hi < 0:  # a negative side crops, as eager's kernels do: circular wraps around the cropped part,
        n = x.shape[d]  # reflect and replicate read the whole input, then crop
        if mode == "circular":
            return _pad_dim(nh.slice_dim(x, d, max(-lo, 0), n - max(-hi, 0)), d, max(lo, 0), max(hi, 0), mode)
        y = _pad_dim(x, d, max(lo, 0), max(hi, 0), mode)
        return nh.slice_dim(y, d, max(-lo, 0), y.shape[d] - max(-hi, 0))
    n = x.shape[d]
    if mode == "reflect":
        check(lo < n and hi < n, lambda: f"Argument #4: Padding size should be less than the corresponding input "
                                         f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input "
                                         f"{list(x.shape)}")
        left = ps.flip(nh.slice_dim(x, d, 1, lo + 1), (d,)) if lo else None
        right = ps.flip(nh.slice_dim(x, d, n - 1 - hi, n - 1), (d,)) if hi else None
    elif mode == "replicate":
        check(n > 0, lambda: f"pad: replicate padding of an empty dim {d} of input {list(x.shape)}")
        size = list(x.shape)
        left = right = None
        if lo:
            size[d] = lo
            left = nh.expand_to(nh.slice_dim(x, d, 0, 1), tuple(size))
        if hi:
            size[d] = hi
            right = nh.expand_to(nh.slice_dim(x, d, n - 1, n), tuple(size))
    else:  # circular
        check(lo <= n and hi <= n, "Padding value causes wrapping around more than once.")
        left = nh.slice_dim(x, d, n - lo, n) if lo else None
        right = nh.slice_dim(x, d, 0, hi) if hi else None
    parts = [p for p in (left, x, right) if p is not None]
    return ps.cat(parts, d) if len(parts) > 1 else x


@torchsymbol(F.pad, id="ltorch.pad")
def pad(input, pad, mode="constant", value=None):
    pairs = _pad_pairs("pad", input, pad)
    if mode == "constant":
        config = tuple((*pairs.get(d, (0, 0)), 0) for d in range(input.ndim))
        return ps.pad(input, to_dtype(0 if value is None else value, input.dtype), config)
    check(mode in ("reflect", "replicate", "circular"),
          lambda: f"Unrecognised padding mode {mode}; expected one of 'constant', 'reflect', 'replicate', 'circular'")
    check(value is None or value == 0, lambda: f"Padding mode \"{mode}\" doesn't take in value argument.")
    k = len(pairs)
    check(k <= 3 and input.ndim in (k + 1, k + 2),
          lambda: f"pad: {mode} padding of the last {k} dims expects a {k + 1}D or {k + 2}D input, got "
                  f"{list(input.shape)}")
    x = input
    for d in sorted(pairs):
        x = _pad_dim(x, d, *pairs[d], mode)
    return x


# -- pooling --------------------------------------------------------------------------------------------------------
def _pool_args(op, n, input, kernel_size, stride, padding, dilation=1):
    check(input.ndim in (n + 1, n + 2),
          lambda: f"{op}: Expected {n + 1}D or {n + 2}D (batch mode) tensor for input, got {list(input.shape)}")
    k, stride = nh.ntuple(kernel_size, n, "kernel_size", op), static_numbers(stride)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else nh.ntuple(stride, n, "stride",
                                                                                                 op)
    p, d = nh.ntuple(padding, n, "padding", op), nh.ntuple(dilation, n, "dilation", op)
    check(all(x > 0 for x in k + s + d), lambda: f"{op}: kernel_size, stride and dilation must be positive, got "
                                                 f"{k}, {s}, {d}")
    for i in range(n):
        if not p[i] <= ((k[i] - 1) * d[i] + 1) // 2:
            check(False, f"{op}: pad should be at most half of effective kernel size, but got pad={p[i]}, "
                         f"kernel_size={k[i]} and dilation={d[i]}")
    return k, s, p, d


def _pool_out(n_in, k, s, p, d, ceil_mode):
    """(output size, extra right padding the ceil_mode windows need) for one spatial dim."""
    eff = (k - 1) * d + 1
    out = (n_in + 2 * p - eff + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n_in + p:
        out -= 1
    return out, max(0, (out - 1) * s + eff - (n_in + 2 * p))


def _windows(x, n, k, s, d, geometry, fill):
    """x padded (value fill) and unfolded: (..., out_1..out_n, k_1..k_n)."""
    first = x.ndim - n
    config = tuple((0, 0, 0) for _ in range(first)) + tuple((p, p + extra, 0) for p, extra in geometry)
    x = ps.pad(x, fill, config)
    for i in range(n):
        x = ps.unfold(x, first + i, (k[i] - 1) * d[i] + 1, s[i])
    if any(di > 1 for di in d):
        starts, ends = [0] * x.ndim, list(x.shape)
        steps = [1] * (x.ndim - n) + list(d)
        x = ps.slice_prim(x, tuple(starts), tuple(ends), tuple(steps))
    return x


def _check_out(op, input, n, outs):
    check(all(o > 0 for o in outs), lambda: f"{op}: Given input size: {tuple(input.shape[-n:])}. Calculated output "
                                            f"size: {tuple(outs)}. Output size is too small")


def _avg_pool(op, n, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    k, s, p, d = _pool_args(op, n, input, kernel_size, stride, padding)
    geometry = [(p[i], _pool_out(input.shape[input.ndim - n + i], k[i], s[i], p[i], 1, ceil_mode)[1])
                for i in range(n)]
    outs = [_pool_out(input.shape[input.ndim - n + i], k[i], s[i], p[i], 1, ceil_mode)[0] for i in range(n)]
    _check_out(op, input, n, outs)
    integer = input.dtype is torch.int64  # (eager's CPU kernels pool int64 only: exact sums, truncated quotients)
    if not integer:
        nh.check_float(op, input)
    x, rounding = (input, "trunc") if integer else (nh.upcast(input), None)
    window_dims = tuple(range(x.ndim, x.ndim + n))
    sums = nh.sum_(_windows(x, n, k, s, d, geometry, 0), window_dims)
    if divisor_override:
        return to_dtype(div(sums, divisor_override, rounding_mode=rounding), input.dtype)
    ones = nh.full(tuple(input.shape[-n:]), 1, x)
    if count_include_pad:
        ones = ps.pad(ones, to_dtype(1, ones.dtype), tuple((pi_, pi_, 0) for pi_ in p))
        geometry = [(0, extra) for _, extra in geometry]
    counts = nh.sum_(_windows(ones, n, k, s, d, geometry, 0), tuple(range(n, 2 * n)))
    return to_dtype(div(sums, counts, rounding_mode=rounding), input.dtype)


@torchsymbol(F.avg_pool1d, torch.avg_pool1d, id="ltorch.avg_pool1d")
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@torchsymbol(F.avg_pool2d, id="ltorch.avg_pool2d")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@torchsymbol(F.avg_pool3d, id="ltorch.avg_pool3d")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _max_pool(op, n, input, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d = _pool_args(op, n, input, kernel_size, stride, padding, dilation)
    dims = [_pool_out(input.shape[input.ndim - n + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(n)]
    _check_out(op, input, n, [o for o, _ in dims])
    check(input.dtype is not torch.bool, lambda: f"{op}: not implemented for 'Bool'")
    fill = -math.inf if dtypes.is_float(input.dtype) else torch.iinfo(input.dtype).min
    win = _windows(input, n, k, s, d, [(p[i], dims[i][1]) for i in range(n)], fill)
    return nh.amax(win, tuple(range(input.ndim, input.ndim + n)))


def _max_pool_op(op_id, n, torch_fn, with_indices):
    name = op_id.removeprefix("ltorch.")

    def body(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        if return_indices:  # values and argmax positions: eager's own kernel
            return opaque_symbol(with_indices)(input, kernel_size, stride, padding, dilation, ceil_mode, True)
        return _max_pool(name, n, input, kernel_size, stride, padding, dilation, ceil_mode)

    body.__name__ = name
    return torchsymbol(torch_fn, id=op_id)(body)


max_pool1d = _max_pool_op("ltorch.max_pool1d", 1, F.max_pool1d, F.max_pool1d_with_indices)
max_pool2d = _max_pool_op("ltorch.max_pool2d", 2, F.max_pool2d, F.max_pool2d_with_indices)
max_pool3d = _max_pool_op("ltorch.max_pool3d", 3, F.max_pool3d, F.max_pool3d_with_indices)


def _torch_max_pool(op):
    def adapter(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return op(input, kernel_size, stride, padding, dilation, ceil_mode)

    return adapter


TORCH_MAP[torch.max_pool1d] = _torch_max_pool(max_pool1d)
TORCH_MAP[torch.max_pool2d] = _torch_max_pool(max_pool2d)
TORCH_MAP[torch.max_pool3d] = _torch_max_pool(max_pool3d)


def _adaptive_avg_dim(x, d, out):
    """Average over torch's adaptive bins [floor(i*L/out), ceil((i+1)*L/out)) along dim d."""
    n = x.shape[d]
    if n == out:
        return x
    if n % out == 0:
        shape = tuple(x.shape[:d]) + (out, n // out) + tuple(x.shape[d + 1:])
        return nh.mean(ps.reshape(x, shape), d + 1)
    i = nh.unsqueeze(nh.iota(out, x), 1)
    j = nh.unsqueeze(nh.iota(n, x), 0)
    start = div(mul(i, n), out, rounding_mode="trunc")  # floor and ceil of non-negative ratios
    end = div(add(mul(add(i, 1), n), out - 1), out, rounding_mode="trunc")
    inside = logical_and(ge(j, start), lt(j, end))
    weights = where(inside, div(1.0, to_dtype(sub(end, start), x.dtype)), to_dtype(0, x.dtype))
    moved = nh.movedim(x, d, -1)
    return nh.movedim(matmul(moved, nh.swap(weights, 0, 1)), -1, d)


def _adaptive_avg(op, n, input, output_size):
    check(input.ndim in (n + 1, n + 2),
          lambda: f"{op}(): Expected {n + 1}D or {n + 2}D tensor, but got {list(input.shape)}")
    check(all(s > 0 for s in input.shape[1:]),
          lambda: f"{op}(): Expected input to have non-zero size for non-batch dimensions, but input has sizes "
                  f"{list(input.shape)} with dimension {list(input.shape).index(0)} being empty")
    output_size = static_numbers(output_size)
    sizes = (output_size,) * n if isinstance(output_size, int) or output_size is None else tuple(output_size)
    check(len(sizes) == n, lambda: f"{op}: output_size must be {n} ints, got {output_size}")
    x = nh.upcast(input)
    for i, o in enumerate(sizes):
        d = input.ndim - n + i
        x = _adaptive_avg_dim(x, d, input.shape[d] if o is None else o)
    return to_dtype(x, input.dtype)


@torchsymbol(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d, id="ltorch.adaptive_avg_pool1d")
def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


@torchsymbol(F.adaptive_avg_pool2d, id="ltorch.adaptive_avg_pool2d")
def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


@torchsymbol(F.adaptive_avg_pool3d, id="ltorch.adaptive_avg_pool3d")
def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool3d", 3, input, output_size)


# -- interpolate ----------------------------------------------------------------------------------------------------
def _f32(x: float) -> float:
    """x rounded to float32, as torch's CPU resampling kernels hold their scales."""
    return float(torch.tensor(x, dtype=torch.float32))


def _resample_scale(n_in, n_out, scale, align_corners, dtype=torch.float32, like=None):
    """The source-per-destination step, held in `dtype` (float32 for nearest and for float32/half inputs). With a
    symbolic size (cache="symbolic values") a float32 step is a 0-dim tensor computed by the program, so the step
    is the kernel's float32 quotient for every size the entry serves."""
    rounded = _f32 if dtype != torch.float64 else float
    if align_corners:
        if _symbolic(n_in, n_out):
            return _step(n_in - 1, n_out - 1, dtype, like) if n_out > 1 else 0.0
        return rounded((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
    if scale is not None and scale > 0:
        return rounded(1.0 / scale)
    if _symbolic(n_in, n_out):
        return _step(n_in, n_out, dtype, like)
    return float(torch.tensor(n_in, dtype=dtype) / n_out)


def _symbolic(*sizes) -> bool:
    return any(type(s) is not int for s in sizes)


def _step(num, den, dtype, like):
    """num / den held in dtype: a python float for float64 (exact), else a 0-dim tensor divided in dtype."""
    if dtype == torch.float64:
        return num / den
    return div(pc.full((), num, device=like.device, dtype=dtype), den)


def _nearest_dim(x, d, n_out, scale, exact):
    n_in = x.shape[d]
    if n_out == n_in and not exact:
        return x
    pos = nh.iota(n_out, x, torch.float32)
    src = mul(add(pos, 0.5), scale) if exact else mul(pos, scale)
    idx = clamp_max(to_dtype(floor(src), torch.int64), n_in - 1)
    return pi.take(x, idx, d)


def _linear_dim(x, d, n_out, scale, align_corners):
    n_in = x.shape[d]
    opmath = dtypes.computation_dtype(x.dtype)
    pos = nh.iota(n_out, x, opmath)
    src = mul(pos, scale) if align_corners else clamp_min(sub(mul(add(pos, 0.5), scale), 0.5), 0.0)
    i0 = clamp_max(to_dtype(floor(src), torch.int64), n_in - 1)
    lam1 = clamp(sub(src, i0), 0.0, 1.0)
    i1 = add(i0, to_dtype(lt(i0, n_in - 1), torch.int64))
    shape = (n_out,) + (1,) * (x.ndim - 1 - d)
    lam1 = ps.reshape(lam1, shape)
    x0, x1 = pi.take(x, i0, d), pi.take(x, i1, d)
    return add(mul(x0, sub(1.0, lam1)), mul(x1, lam1))


_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _output_sizes(input, n, size, scale_factor):
    check((size is None) != (scale_factor is None), "only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, IntegerProxy):
            sizes = (size,) * n
        else:  # (numbers passed in stay symbolic: the output sizes follow them)
            sizes = tuple(size) if type(size) in (list, tuple) and len(size) == n else nh.ntuple(size, n, "size",
                                                                                                 "interpolate")
        return tuple(sizes), (None,) * n
    single = isinstance(scale_factor, (int, float, IntegerProxy, FloatProxy))
    scales = tuple(float(s) for s in ((scale_factor,) * n if single else scale_factor))
    check(len(scales) == n, lambda: f"Input and scale_factor must have the same number of spatial dimensions, but got "
                                    f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of "
                                    f"shape {list(scales)}.")
    return tuple(math.floor(input.shape[2 + i] * scales[i]) for i in range(n)), scales


@torchsymbol(F.interpolate, F.upsample, id="ltorch.interpolate")
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    n = input.ndim - 2
    decomposed = mode in ("nearest", "nearest-exact") or _LINEAR.get(mode) == n
    if antialias or not decomposed or n < 1:  # bicubic, area, antialias: eager's own kernel
        return opaque_symbol(F.interpolate)(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                                            antialias)
    if mode.startswith("nearest"):
        check(align_corners is None, "align_corners option can only be set with the interpolating modes: linear | "
                                     "bilinear | bicubic | trilinear")
    sizes, scales = _output_sizes(input, n, size, scale_factor)
    if recompute_scale_factor:
        scales = (None,) * n
    nearest = mode.startswith("nearest")
    if not nearest:
        nh.check_float("interpolate", input)
    x = input if nearest else nh.upcast(input)
    for i in range(n):
        d, n_in = 2 + i, input.shape[2 + i]
        if nearest:
            x = _nearest_dim(x, d, sizes[i], _resample_scale(n_in, sizes[i], scales[i], False, like=x),
                              mode != "nearest")
        else:
            scale = _resample_scale(n_in, sizes[i], scales[i], bool(align_corners), x.dtype, like=x)
            x = _linear_dim(x, d, sizes[i], scale, bool(align_corners))
    return to_dtype(x, input.dtype)


def _upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, "nearest")


def _upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, "bilinear", True)


TORCH_MAP[F.upsample_nearest] = _upsample_nearest
TORCH_MAP[F.upsample_bilinear] = _upsample_bilinear
