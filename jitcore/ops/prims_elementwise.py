"""Ops: elementwise prims (unary, binary, ternary `where`) and dtype conversion.

Prims are strict: tensor inputs have one shape and one dtype (Python numbers may stand in for tensors); the
torch-level ops in torch_elementwise.py broadcast and promote before calling them. The result has the input
dtype, except comparisons and predicates, which give bool.
"""
from __future__ import annotations

import torch

from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops.registry import prim
from jitcore.ops.utils import check, is_number, requires_grad, same_device, tensors_of

ND = (Tag.NON_DIFFERENTIABLE,)
EW = (Tag.ELEMENTWISE,)


def _elementwise_meta(name, *args, out_dtype=None, allowed=None):
    ts = tensors_of(*args)
    check(len(ts) > 0, lambda: f"prims.{name}: expected at least one tensor input, got {args}")
    shape, dtype = ts[0].shape, ts[0].dtype
    for t in ts[1:]:
        check(tuple(t.shape) == tuple(shape), lambda: f"prims.{name}: shapes differ: {[tuple(x.shape) for x in ts]}")
        check(t.dtype == dtype, lambda: f"prims.{name}: dtypes differ: {[x.dtype for x in ts]}")
    for a in args:
        check(isinstance(a, TensorProxy) or is_number(a), lambda a=a: f"prims.{name}: unexpected argument {a!r}")
    if allowed is not None:
        check(dtypes.category(dtype) in allowed, lambda: f"prims.{name}: not implemented for '{dtype}'")
    device = same_device(f"prims.{name}", *ts)
    result = dtype if out_dtype is None else out_dtype
    rg = requires_grad(*ts) and dtypes.is_inexact(result)
    return TensorProxy(shape, result, device, rg)


INEXACT, INTEGRAL, ANY = (2, 3), (0, 1), (0, 1, 2, 3)
ANY_NUMBER = (1, 2, 3)


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
def _div(a, b):
    if isinstance(a, torch.Tensor) and not (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.div(a, b, rounding_mode="trunc")
    if isinstance(b, torch.Tensor) and not (b.dtype.is_floating_point or b.dtype.is_complex):
        return torch.div(a, b, rounding_mode="trunc")
    return torch.true_divide(a, b)


def _where(pred, a, b):
    return torch.where(pred, a, b)


def _convert_element_type(a, dtype):
    return a.to(dtype)


def _device_put(a, device):
    return a.to(device)


def as_tensor_pair(name, fn, promote=False):
    """A binary torch function that takes only tensors, accepting a Python number on either side (as a 0-d
    tensor of the other side's dtype, or of the promoted dtype when `promote`)."""

    def kernel(a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.scalar_tensor(a, dtype=torch.result_type(a, b) if promote else b.dtype, device=b.device)
        if not isinstance(b, torch.Tensor):
            b = torch.scalar_tensor(b, dtype=torch.result_type(a, b) if promote else a.dtype, device=a.device)
        return fn(a, b)

    kernel.__name__ = name
    return kernel


def _unary(op_id, allowed=ANY, out=None, tags=(), *, kernel):
    name = op_id.removeprefix("prims.")

    def meta(a):
        return _elementwise_meta(name, a, out_dtype=out, allowed=allowed)

    meta.__name__ = name
    return prim(op_id, tags=EW + tuple(tags), kernel=kernel)(meta)


def _binary(op_id, allowed=ANY, out=None, tags=(), *, kernel):
    name = op_id.removeprefix("prims.")

    def meta(a, b):
        return _elementwise_meta(name, a, b, out_dtype=out, allowed=allowed)

    meta.__name__ = name
    return prim(op_id, tags=EW + tuple(tags), kernel=kernel)(meta)


# -- unary -----------------------------------------------------------------------------------------------------
abs = _unary("prims.abs", ANY_NUMBER, kernel=torch.abs)
neg = _unary("prims.neg", ANY_NUMBER, kernel=torch.neg)
exp = _unary("prims.exp", INEXACT, kernel=torch.exp)
exp2 = _unary("prims.exp2", INEXACT, kernel=torch.exp2)
expm1 = _unary("prims.expm1", INEXACT, kernel=torch.expm1)
log = _unary("prims.log", INEXACT, kernel=torch.log)
log1p = _unary("prims.log1p", INEXACT, kernel=torch.log1p)
log2 = _unary("prims.log2", INEXACT, kernel=torch.log2)
log10 = _unary("prims.log10", INEXACT, kernel=torch.log10)
sin = _unary("prims.sin", INEXACT, kernel=torch.sin)
cos = _unary("prims.cos", INEXACT, kernel=torch.cos)
tan = _unary("prims.tan", INEXACT, kernel=torch.tan)
asin = _unary("prims.asin", INEXACT, kernel=torch.asin)
acos = _unary("prims.acos", INEXACT, kernel=torch.acos)
atan = _unary("prims.atan", INEXACT, kernel=torch.atan)
sinh = _unary("prims.sinh", INEXACT, kernel=torch.sinh)
cosh = _unary("prims.cosh", INEXACT, kernel=torch.cosh)
tanh = _unary("prims.tanh", INEXACT, kernel=torch.tanh)
asinh = _unary("prims.asinh", INEXACT, kernel=torch.asinh)
acosh = _unary("prims.acosh", INEXACT, kernel=torch.acosh)
atanh = _unary("prims.atanh", INEXACT, kernel=torch.atanh)
sqrt = _unary("prims.sqrt", INEXACT, kernel=torch.sqrt)
rsqrt = _unary("prims.rsqrt", INEXACT, kernel=torch.rsqrt)
reciprocal = _unary("prims.reciprocal", INEXACT, kernel=torch.reciprocal)
sigmoid = _unary("prims.sigmoid", INEXACT, kernel=torch.sigmoid)
erf = _unary("prims.erf", (2,), kernel=torch.erf)
erfc = _unary("prims.erfc", (2,), kernel=torch.erfc)
erfinv = _unary("prims.erfinv", (2,), kernel=torch.erfinv)
lgamma = _unary("prims.lgamma", (2,), kernel=torch.lgamma)
digamma = _unary("prims.digamma", (2,), kernel=torch.digamma)
sign = _unary("prims.sign", (0, 1, 2), kernel=torch.sign)
floor = _unary("prims.floor", (1, 2), kernel=torch.floor)
ceil = _unary("prims.ceil", (1, 2), kernel=torch.ceil)
round = _unary("prims.round", (1, 2), kernel=torch.round)
trunc = _unary("prims.trunc", (1, 2), kernel=torch.trunc)
bitwise_not = _unary("prims.bitwise_not", INTEGRAL, kernel=torch.bitwise_not)
signbit = _unary("prims.signbit", (1, 2), out=torch.bool, tags=ND, kernel=torch.signbit)
isfinite = _unary("prims.isfinite", ANY, out=torch.bool, tags=ND, kernel=torch.isfinite)

# -- binary ----------------------------------------------------------------------------------------------------
add = _binary("prims.add", kernel=torch.add)
sub = _binary("prims.sub", ANY_NUMBER, kernel=torch.sub)
mul = _binary("prims.mul", kernel=torch.mul)
# true division for inexact dtypes, truncation for integers (like C)
div = _binary("prims.div", ANY_NUMBER, kernel=_div)
remainder = _binary("prims.remainder", (1, 2), kernel=torch.remainder)  # Python's sign convention (follows the divisor)
fmod = _binary("prims.fmod", (1, 2), kernel=as_tensor_pair("fmod", torch.fmod))  # C's convention (the dividend's)
pow = _binary("prims.pow", ANY_NUMBER, kernel=torch.pow)
atan2 = _binary("prims.atan2", (2,), kernel=as_tensor_pair("atan2", torch.atan2))
maximum = _binary("prims.maximum", (0, 1, 2), kernel=as_tensor_pair("maximum", torch.maximum))
minimum = _binary("prims.minimum", (0, 1, 2), kernel=as_tensor_pair("minimum", torch.minimum))
copysign = _binary("prims.copysign", (2,), kernel=as_tensor_pair("copysign", torch.copysign))
nextafter = _binary("prims.nextafter", (2,), kernel=as_tensor_pair("nextafter", torch.nextafter))
bitwise_and = _binary("prims.bitwise_and", INTEGRAL, kernel=as_tensor_pair("bitwise_and", torch.bitwise_and))
bitwise_or = _binary("prims.bitwise_or", INTEGRAL, kernel=as_tensor_pair("bitwise_or", torch.bitwise_or))
bitwise_xor = _binary("prims.bitwise_xor", INTEGRAL, kernel=as_tensor_pair("bitwise_xor", torch.bitwise_xor))
bitwise_left_shift = _binary("prims.bitwise_left_shift", (1,),
                             kernel=as_tensor_pair("bitwise_left_shift", torch.bitwise_left_shift))
bitwise_right_shift = _binary("prims.bitwise_right_shift", (1,),
                              kernel=as_tensor_pair("bitwise_right_shift", torch.bitwise_right_shift))
eq = _binary("prims.eq", out=torch.bool, tags=ND, kernel=torch.eq)
ne = _binary("prims.ne", out=torch.bool, tags=ND, kernel=torch.ne)
lt = _binary("prims.lt", (0, 1, 2), out=torch.bool, tags=ND, kernel=torch.lt)
le = _binary("prims.le", (0, 1, 2), out=torch.bool, tags=ND, kernel=torch.le)
gt = _binary("prims.gt", (0, 1, 2), out=torch.bool, tags=ND, kernel=torch.gt)
ge = _binary("prims.ge", (0, 1, 2), out=torch.bool, tags=ND, kernel=torch.ge)


# -- ternary ---------------------------------------------------------------------------------------------------
@prim("prims.where", tags=EW, kernel=_where)
def where(pred, a, b):
    """pred ? a : b; pred is a bool tensor (or bool); a and b share pred's shape and one dtype."""
    check((isinstance(pred, TensorProxy) and pred.dtype is torch.bool) or isinstance(pred, bool),
          lambda: f"prims.where: the condition must be a bool tensor, got {pred!r}")
    vals = tensors_of(a, b)
    shape_src = vals[0] if vals else pred
    for t in tensors_of(pred, a, b):
        check(tuple(t.shape) == tuple(shape_src.shape),
              lambda: f"prims.where: shapes differ: {[tuple(x.shape) for x in tensors_of(pred, a, b)]}")
    check(len({t.dtype for t in vals}) <= 1, lambda: f"prims.where: dtypes differ: {[t.dtype for t in vals]}")
    dtype = vals[0].dtype if vals else dtypes.promote_dtypes(a, b)
    device = same_device(where.id, pred, *vals)
    return TensorProxy(shape_src.shape, dtype, device, requires_grad(a, b) and dtypes.is_inexact(dtype))


# -- conversion ------------------------------------------------------------------------------------------------
@prim("prims.convert_element_type", tags=EW, kernel=_convert_element_type)
def convert_element_type(a, dtype: torch.dtype):
    """a cast to dtype (torch's .to(dtype) semantics: float->int truncates toward zero)."""
    check(isinstance(dtype, torch.dtype), lambda: f"prims.convert_element_type: expected a dtype, got {dtype!r}")
    check(isinstance(a, TensorProxy), lambda: f"prims.convert_element_type: expected a tensor, got {a!r}")
    return a.like(dtype=dtype, requires_grad=requires_grad(a) and dtypes.is_inexact(dtype))


@prim("prims.device_put", tags=EW, kernel=_device_put)
def device_put(a, device):
    """a moved to device."""
    check(isinstance(a, TensorProxy), lambda: f"prims.device_put: expected a tensor, got {a!r}")
    return a.like(device=device, requires_grad=requires_grad(a))
