"""Ops: torch-level activations, softmax family and dropout (F.relu, F.gelu, F.softmax, F.dropout, ...).

Bodies compute half precision in float32 and round once at the end, like torch's kernels; `inplace=True`
writes the result into the input with prims.copy_. Training-mode rrelu and alpha dropouts stay opaque;
dropout draws its noise with prims.bernoulli exactly as eager's CPU kernel does.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir import dtypes
from jitcore.ir.symbol import Tag
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_shape as ps
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_creation import draw_like
from jitcore.ops.torch_elementwise import (
    abs,
    add,
    clamp_max,
    div,
    erf,
    exp,
    expm1,
    ge,
    gt,
    le,
    log,
    log1p,
    lt,
    mul,
    neg,
    sigmoid,
    sub,
    tanh,
    to_dtype,
    where,
)
from jitcore.ops.torch_map import TORCH_MAP, register_method
from jitcore.ops.utils import check

F = torch.nn.functional
T = torch.Tensor


def _float_op(op, input, body):
    """body(x) on input upcast to its computation dtype, rounded back to input's dtype once."""
    nh.check_float(op, input)
    return to_dtype(body(nh.upcast(input)), input.dtype)


@torchsymbol(F.relu, torch.relu, T.relu, method="relu", id="ltorch.relu")
def relu(input, inplace=False):
    check(input.dtype is not torch.bool, "relu: \"clamp_min_scalar_cpu\" not implemented for 'Bool'")
    if inplace:  # a relu line, then the write: the line keeps relu's own gradient rule
        return nh.maybe_inplace(input, relu(input), True)
    return where(le(input, 0), to_dtype(0, input.dtype), input)


@torchsymbol(F.hardtanh, id="ltorch.hardtanh")
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    check(max_val >= min_val, "hardtanh: min_val cannot be greater than max_val")
    if dtypes.category(input.dtype) == 1:
        min_val, max_val = int(min_val), int(max_val)
    # picked with <= and >= (not clamp): eager's gradient is 0 at the bounds themselves, clamp's is 1 there
    out = where(le(input, min_val), min_val, where(ge(input, max_val), max_val, input))
    return nh.maybe_inplace(input, to_dtype(out, input.dtype), inplace)


@torchsymbol(F.relu6, id="ltorch.relu6")
def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


@torchsymbol(F.leaky_relu, id="ltorch.leaky_relu")
def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = _float_op("leaky_relu", input, lambda x: where(gt(x, 0), x, mul(x, negative_slope)))
    return nh.maybe_inplace(input, out, inplace)


def _elu(op, input, alpha, scale, input_scale):
    def body(x):
        negative = mul(expm1(mul(x, input_scale) if input_scale != 1 else x), alpha * scale)
        return where(le(x, 0), negative, mul(x, scale) if scale != 1 else x)

    return _float_op(op, input, body)


@torchsymbol(F.elu, id="ltorch.elu")
def elu(input, alpha=1.0, inplace=False):
    return nh.maybe_inplace(input, _elu("elu", input, alpha, 1.0, 1.0), inplace)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@torchsymbol(F.selu, torch.selu, id="ltorch.selu")
def selu(input, inplace=False):
    return nh.maybe_inplace(input, _elu("selu", input, _SELU_ALPHA, _SELU_SCALE, 1.0), inplace)


@torchsymbol(F.celu, torch.celu, id="ltorch.celu")
def celu(input, alpha=1.0, inplace=False):
    check(alpha != 0, "ZeroDivisionError in celu: alpha cannot be 0")
    return nh.maybe_inplace(input, _elu("celu", input, alpha, 1.0, 1.0 / alpha), inplace)


@torchsymbol(F.gelu, id="ltorch.gelu")
def gelu(input, *, approximate="none"):
    check(approximate in ("none", "tanh"), lambda: f"gelu: approximate argument must be either none or tanh, got "
                                                    f"{approximate!r}")

    def body(x):
        if approximate == "tanh":
            inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
            return mul(mul(x, 0.5), add(tanh(inner), 1.0))
        return mul(mul(x, 0.5), add(erf(mul(x, 1.0 / math.sqrt(2.0))), 1.0))

    return _float_op("gelu", input, body)


@torchsymbol(F.silu, id="ltorch.silu")
def silu(input, inplace=False):
    if inplace:
        return nh.maybe_inplace(input, silu(input), True)
    return _float_op("silu", input, lambda x: mul(x, sigmoid(x)))


def _softplus(x, beta=1.0, threshold=20.0):
    bx = mul(x, beta) if beta != 1 else x
    soft = log1p(exp(bx))
    return where(gt(bx, threshold), x, div(soft, beta) if beta != 1 else soft)


@torchsymbol(F.mish, id="ltorch.mish")
def mish(input, inplace=False):
    return nh.maybe_inplace(input, _float_op("mish", input, lambda x: mul(x, tanh(_softplus(x)))), inplace)


@torchsymbol(F.softplus, id="ltorch.softplus")
def softplus(input, beta=1.0, threshold=20.0):
    return _float_op("softplus", input, lambda x: _softplus(x, beta, threshold))


@torchsymbol(F.softsign, id="ltorch.softsign")
def softsign(input):
    return div(input, add(abs(input), 1))


def _hard_pieces(x, low, high, middle):
    """low for x <= -3, high for x >= 3, middle(x) between: eager's gradient at -3 and 3 is that of the outer pieces
    (clamp's would be the middle's)."""
    return where(le(x, -3.0), low, where(ge(x, 3.0), high, middle(x)))


@torchsymbol(F.hardsigmoid, id="ltorch.hardsigmoid")
def hardsigmoid(input, inplace=False):
    if inplace:
        return nh.maybe_inplace(input, hardsigmoid(input), True)
    out = _float_op("hardsigmoid", input, lambda x: _hard_pieces(x, 0.0, 1.0, lambda x: div(add(x, 3.0), 6.0)))
    return nh.maybe_inplace(input, out, inplace)


@torchsymbol(F.hardswish, id="ltorch.hardswish")
def hardswish(input, inplace=False):
    if inplace:
        return nh.maybe_inplace(input, hardswish(input), True)
    # x * 0 and x * 6 / 6 as eager computes them at the ends (NaN at -inf, rounding of large x)
    out = _float_op("hardswish", input, lambda x: _hard_pieces(x, mul(x, 0.0), div(mul(x, 6.0), 6.0),
                                                                lambda x: div(mul(x, add(x, 3.0)), 6.0)))
    return nh.maybe_inplace(input, out, inplace)


@torchsymbol(F.hardshrink, torch.hardshrink, T.hardshrink, method="hardshrink", id="ltorch.hardshrink")
def hardshrink(input, lambd=0.5):
    return _float_op("hardshrink", input, lambda x: where(le(abs(x), lambd), 0.0, x))


@torchsymbol(F.softshrink, id="ltorch.softshrink")
def softshrink(input, lambd=0.5):
    check(lambd >= 0, lambda: f"lambda must be greater or equal to 0, but found to be {lambd}.")

    def body(x):
        return where(gt(x, lambd), sub(x, lambd), where(lt(x, -lambd), add(x, lambd), mul(x, 0.0)))

    return _float_op("softshrink", input, body)


@torchsymbol(F.tanhshrink, id="ltorch.tanhshrink")
def tanhshrink(input):
    return sub(input, tanh(input))


@torchsymbol(F.logsigmoid, id="ltorch.logsigmoid")
def logsigmoid(input):
    return _float_op("log_sigmoid", input, lambda x: sub(clamp_max(x, 0.0), log1p(exp(neg(abs(x))))))


@torchsymbol(F.glu, id="ltorch.glu")
def glu(input, dim=-1):
    check(input.ndim > 0, "glu does not support scalars because halving size must be even")
    d = nh.dims_of(input, dim)[0]
    n = input.shape[d]
    check(n % 2 == 0, lambda: f"Halving dimension must be even, but dimension {d} is size {n}")
    a, b = nh.slice_dim(input, d, 0, n // 2), nh.slice_dim(input, d, n // 2, n)
    return _float_op("glu", input, lambda x: mul(nh.upcast(a), sigmoid(nh.upcast(b))))


@torchsymbol(F.threshold, torch.threshold, id="ltorch.threshold")
def threshold(input, threshold, value, inplace=False):
    out = where(le(input, threshold), to_dtype(value, input.dtype), input)
    return nh.maybe_inplace(input, out, inplace)


@torchsymbol(F.prelu, torch.prelu, T.prelu, method="prelu", id="ltorch.prelu")
def prelu(input, weight):
    nh.check_float("prelu", input)
    c = input.shape[1] if input.ndim >= 2 else 1
    check(weight.ndim <= 1 and weight.numel() in (1, c),
          lambda: f"prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                  f"{weight.numel()} and channel size = {c} (input shape {tuple(input.shape)}).")
    if weight.numel() == c and c != 1 and input.ndim >= 2:
        weight = ps.reshape(weight, (c,) + (1,) * (input.ndim - 2))
    elif weight.ndim:
        weight = ps.reshape(weight, ())
    return where(gt(input, 0), input, mul(weight, input))


@torchsymbol(F.rrelu, torch.rrelu, tags=(Tag.RANDOM,), id="ltorch.rrelu")
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    if training:  # a random slope per element: eager's own kernel (opaque)
        return opaque_symbol(torch.rrelu)(input, lower, upper, True)
    return leaky_relu(input, (lower + upper) / 2, inplace)


# -- softmax family ---------------------------------------------------------------------------------------------
def _softmax_dim(op, input, dim):
    if dim is None:  # torch's legacy implicit choice (with a deprecation warning in eager)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return nh.dims_of(input, dim)[0] if input.ndim else 0


def _softmax_input(op, input, dim, dtype):
    if dtype is not None:
        input = to_dtype(input, dtype)
    nh.check_float(op, input)
    return input, _softmax_dim(op, input, dim)


def _shifted(x, d):
    """x minus its max along d (numerically stable exp); all -inf rows give nan, like torch."""
    return sub(x, nh.amax(x, d, keepdim=True))


def _along_dim(input, d, core):
    """core(x, d) in input's computation dtype, rounded once; 0-d input is a 1-element row, empty input passes."""
    if input.numel() == 0:
        return input
    x = nh.upcast(input)
    if input.ndim == 0:
        return to_dtype(ps.reshape(core(ps.reshape(x, (1,)), 0), ()), input.dtype)
    return to_dtype(core(x, d), input.dtype)


def _softmax_core(x, d):
    e = exp(_shifted(x, d))
    return div(e, nh.sum_(e, d, keepdim=True))


def _log_softmax_core(x, d):
    shifted = _shifted(x, d)
    return sub(shifted, log(nh.sum_(exp(shifted), d, keepdim=True)))


@torchsymbol(F.softmax, torch.special.softmax, id="ltorch.softmax")
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    input, d = _softmax_input("softmax", input, dim, dtype)
    return _along_dim(input, d, _softmax_core)


@torchsymbol(F.log_softmax, torch.special.log_softmax, id="ltorch.log_softmax")
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    input, d = _softmax_input("log_softmax", input, dim, dtype)
    return _along_dim(input, d, _log_softmax_core)


@torchsymbol(F.softmin, id="ltorch.softmin")
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = to_dtype(input, dtype)
    return softmax(neg(input), _softmax_dim("softmin", input, dim))


def _tensor_softmax(input, dim, dtype=None):
    """torch.softmax / Tensor.softmax(dim, dtype=None): dim is required."""
    return softmax(input, dim, dtype=dtype)


def _tensor_log_softmax(input, dim, dtype=None):
    return log_softmax(input, dim, dtype=dtype)


for _fn, _adapter in ((torch.softmax, _tensor_softmax), (T.softmax, _tensor_softmax),
                      (torch.log_softmax, _tensor_log_softmax), (T.log_softmax, _tensor_log_softmax)):
    TORCH_MAP[_fn] = _adapter
register_method("softmax", _tensor_softmax)
register_method("log_softmax", _tensor_log_softmax)


# -- dropout ------------------------------------------------------------------------------------------------------
def _check_p(op, p):
    check(0.0 <= p <= 1.0, lambda: f"{op} probability has to be between 0 and 1, but got {p}")


def _dropout_with_mask_shape(input, p, mask_shape):
    """Eager's CPU dropout (aten's _dropout_impl): noise = empty(mask_shape).bernoulli_(1 - p) in the input's dtype,
    noise / (1 - p), input * noise; the same draw, in the same order, so values and the generator match eager's.
    The noise broadcasts over the dims it leaves at 1 (feature dropout)."""
    if p == 1.0:
        return mul(input, 0)
    if input.numel() == 0:
        return input  # eager returns the input without a draw

    def draw(shape):
        return pc.bernoulli(shape, 1.0 - p, device=input.device, dtype=input.dtype)

    # the noise of a whole-input mask is empty_like(input): filled in the input's memory order, as eager does
    noise = draw_like(input, draw) if tuple(mask_shape) == tuple(input.shape) else draw(tuple(mask_shape))
    return mul(input, div(noise, 1.0 - p))


def fused_in_eager(input, p) -> bool:
    """Whether eager's dropout runs one fused kernel here (aten's is_fused_kernel_acceptable: native_dropout on
    CUDA and other accelerators), whose draws no decomposition reproduces."""
    return input.device.type not in ("cpu", "meta") and 0.0 < p < 1.0


@torchsymbol(F.dropout, tags=(Tag.RANDOM,), id="ltorch.dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    _check_p("dropout", p)
    if not training or p == 0.0:
        return input
    nh.check_float("dropout", input)
    if fused_in_eager(input, p) and input.numel() > 0:  # eager's own call; its backward replays its draws
        return nh.maybe_inplace(input, opaque_symbol(F.dropout)(input, p, True, False), inplace)
    return nh.maybe_inplace(input, _dropout_with_mask_shape(input, p, input.shape), inplace)


def _torch_dropout(input, p, train):
    """torch.dropout(input, p, train) -> F.dropout."""
    return dropout(input, p, train)


TORCH_MAP[torch.dropout] = _torch_dropout


def _feature_dropout(op, input, p, training, inplace, spatial: int, ranks: tuple):
    _check_p(op, p)
    check(input.ndim in ranks, lambda: f"{op}: Expected {' or '.join(f'{r}D' for r in ranks)} input, but received "
                                       f"a {input.ndim}D input (shape {tuple(input.shape)})")
    if not training or p == 0.0:
        return input
    nh.check_float(op, input)
    mask_shape = tuple(input.shape[: input.ndim - spatial]) + (1,) * spatial
    return nh.maybe_inplace(input, _dropout_with_mask_shape(input, p, mask_shape), inplace)


@torchsymbol(F.dropout1d, tags=(Tag.RANDOM,), id="ltorch.dropout1d")
def dropout1d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout1d", input, p, training, inplace, 1, (2, 3))


@torchsymbol(F.dropout2d, tags=(Tag.RANDOM,), id="ltorch.dropout2d")
def dropout2d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout2d", input, p, training, inplace, max(input.ndim - 2, 1), (3, 4))


@torchsymbol(F.dropout3d, tags=(Tag.RANDOM,), id="ltorch.dropout3d")
def dropout3d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout3d", input, p, training, inplace, 3, (4, 5))


def _alpha_like(op_id, torch_fn):
    name = op_id.removeprefix("ltorch.")

    def body(input, p=0.5, training=False, inplace=False):
        _check_p(name, p)
        if not training or p == 0.0:
            return input
        return opaque_symbol(torch_fn)(input, p, training, inplace)  # eager's own mask and affine correction

    body.__name__ = name
    return torchsymbol(torch_fn, id=op_id, tags=(Tag.RANDOM,))(body)


alpha_dropout = _alpha_like("ltorch.alpha_dropout", F.alpha_dropout)
feature_alpha_dropout = _alpha_like("ltorch.feature_alpha_dropout", F.feature_alpha_dropout)
