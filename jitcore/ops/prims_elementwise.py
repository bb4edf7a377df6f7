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


def _unary(op_id, allowed=ANY, out=None, tags=()):
    name = op_id.removeprefix("prims.")

    def meta(a):
        return _elementwise_meta(name, a, out_dtype=out, allowed=allowed)

    meta.__name__ = name
    return prim(op_id, tags=EW + tuple(tags))(meta)


def _binary(op_id, allowed=ANY, out=None, tags=()):
    name = op_id.removeprefix("prims.")

    def meta(a, b):
        return _elementwise_meta(name, a, b, out_dtype=out, allowed=allowed)

    meta.__name__ = name
    return prim(op_id, tags=EW + tuple(tags))(meta)


# -- unary -----------------------------------------------------------------------------------------------------
abs = _unary("prims.abs", ANY_NUMBER)
neg = _unary("prims.neg", ANY_NUMBER)
exp = _unary("prims.exp", INEXACT)
exp2 = _unary("prims.exp2", INEXACT)
expm1 = _unary("prims.expm1", INEXACT)
log = _unary("prims.log", INEXACT)
log1p = _unary("prims.log1p", INEXACT)
log2 = _unary("prims.log2", INEXACT)
log10 = _unary("prims.log10", INEXACT)
sin = _unary("prims.sin", INEXACT)
cos = _unary("prims.cos", INEXACT)
tan = _unary("prims.tan", INEXACT)
asin = _unary("prims.asin", INEXACT)
acos = _unary("prims.acos", INEXACT)
atan = _unary("prims.atan", INEXACT)
sinh = _unary("prims.sinh", INEXACT)
cosh = _unary("prims.cosh", INEXACT)
tanh = _unary("prims.tanh", INEXACT)
asinh = _unary("prims.asinh", INEXACT)
acosh = _unary("prims.acosh", INEXACT)
atanh = _unary("prims.atanh", INEXACT)
sqrt = _unary("prims.sqrt", INEXACT)
rsqrt = _unary("prims.rsqrt", INEXACT)
reciprocal = _unary("prims.reciprocal", INEXACT)
sigmoid = _unary("prims.sigmoid", INEXACT)
erf = _unary("prims.erf", (2,))
erfc = _unary("prims.erfc", (2,))
erfinv = _unary("prims.erfinv", (2,))
lgamma = _unary("prims.lgamma", (2,))
digamma = _unary("prims.digamma", (2,))
sign = _unary("prims.sign", (0, 1, 2))
floor = _unary("prims.floor", (1, 2))
ceil = _unary("prims.ceil", (1, 2))
round = _unary("prims.round", (1, 2))
trunc = _unary("prims.trunc", (1, 2))
bitwise_not = _unary("prims.bitwise_not", INTEGRAL)
signbit = _unary("prims.signbit", (1, 2), out=torch.bool, tags=ND)
isfinite = _unary("prims.isfinite", ANY, out=torch.bool, tags=ND)

# -- binary ----------------------------------------------------------------------------------------------------
add = _binary("prims.add")
sub = _binary("prims.sub", ANY_NUMBER)
mul = _binary("prims.mul")
div = _binary("prims.div", ANY_NUMBER)  # true division for inexact dtypes, truncation for integers (like C)
remainder = _binary("prims.remainder", (1, 2))  # Python's sign convention (follows the divisor)
fmod = _binary("prims.fmod", (1, 2))  # C's sign convention (follows the dividend)
pow = _binary("prims.pow", ANY_NUMBER)
atan2 = _binary("prims.atan2", (2,))
maximum = _binary("prims.maximum", (0, 1, 2))
minimum = _binary("prims.minimum", (0, 1, 2))
copysign = _binary("prims.copysign", (2,))
nextafter = _binary("prims.nextafter", (2,))
bitwise_and = _binary("prims.bitwise_and", INTEGRAL)
bitwise_or = _binary("prims.bitwise_or", INTEGRAL)
bitwise_xor = _binary("prims.bitwise_xor", INTEGRAL)
bitwise_left_shift = _binary("prims.bitwise_left_shift", (1,))
bitwise_right_shift = _binary("prims.bitwise_right_shift", (1,))
eq = _binary("prims.eq", out=torch.bool, tags=ND)
ne = _binary("prims.ne", out=torch.bool, tags=ND)
lt = _binary("prims.lt", (0, 1, 2), out=torch.bool, tags=ND)
le = _binary("prims.le", (0, 1, 2), out=torch.bool, tags=ND)
gt = _binary("prims.gt", (0, 1, 2), out=torch.bool, tags=ND)
ge = _binary("prims.ge", (0, 1, 2), out=torch.bool, tags=ND)


# -- ternary ---------------------------------------------------------------------------------------------------
@prim("prims.where", tags=EW)
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
@prim("prims.convert_element_type", tags=EW)
def convert_element_type(a, dtype: torch.dtype):
    """a cast to dtype (torch's .to(dtype) semantics: float->int truncates toward zero)."""
    check(isinstance(dtype, torch.dtype), lambda: f"prims.convert_element_type: expected a dtype, got {dtype!r}")
    check(isinstance(a, TensorProxy), lambda: f"prims.convert_element_type: expected a tensor, got {a!r}")
    return a.like(dtype=dtype, requires_grad=requires_grad(a) and dtypes.is_inexact(dtype))


@prim("prims.device_put", tags=EW)
def device_put(a, device):
    """a moved to device."""
    check(isinstance(a, TensorProxy), lambda: f"prims.device_put: expected a tensor, got {a!r}")
    return a.like(device=device, requires_grad=requires_grad(a))
