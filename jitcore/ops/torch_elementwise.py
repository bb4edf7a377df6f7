"""Ops: torch-level elementwise ops (torch.add, Tensor.exp, operators, ...). Each broadcasts its tensor inputs,
promotes dtypes exactly as torch does (jitcore/ir/dtypes.py), computes half precision in float32 like torch's
kernels, then calls the strict elementwise prims.
"""
from __future__ import annotations

import math

import torch

from jitcore import compat
from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.dtypes import Promotion
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_python
from jitcore.ops import prims_shape as ps
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_map import TORCH_MAP, register_method
from jitcore.ops.utils import broadcast_shapes, check, is_number

ND = (Tag.NON_DIFFERENTIABLE,)
T = torch.Tensor


# -- helpers other families use ---------------------------------------------------------------------------------
def to_dtype(a, dtype):
    """a converted to dtype (a no-op when it already is); Python numbers are converted as Python numbers."""
    if isinstance(a, TensorProxy):
        return a if a.dtype == dtype else pe.convert_element_type(a, dtype)
    if a is None:
        return a
    cat = dtypes.category(dtype)
    if isinstance(a, NumberProxy) and cat in (1, 2):  # symbolic values: int -> float stays symbolic
        target = int if cat == 1 else float
        if a.python_type is target:
            return a
        if target is float and a.python_type is int:
            return prims_python.call("float", a)
    return bool(a) if cat == 0 else int(a) if cat == 1 else complex(a) if cat == 3 else float(a)


def expand_to(a, shape):
    """a broadcast to shape (torch's rules: align trailing dims)."""
    # ranks first: a tuple == compares the common prefix before the lengths, and with symbolic sizes that
    # comparison (a.shape[0] against shape[0] of a longer shape) would record a predicate
    if not isinstance(a, TensorProxy) or (a.ndim == len(shape) and tuple(a.shape) == tuple(shape)):
        return a
    offset = len(shape) - a.ndim
    check(offset >= 0, lambda: f"cannot broadcast {tuple(a.shape)} to {tuple(shape)}")
    keep = [i for i in range(a.ndim) if a.shape[i] == shape[offset + i]]
    if len(keep) < a.ndim:  # drop the size-1 dims that grow, then place the rest
        a = ps.reshape(a, tuple(a.shape[i] for i in keep))
    return ps.broadcast_in_dim(a, tuple(shape), tuple(offset + i for i in keep))


def broadcast(*args, op="broadcast"):
    """Tensors among args broadcast to their common shape; numbers and None pass through."""
    shapes = [a.shape for a in args if isinstance(a, TensorProxy)]
    if not shapes:
        return args
    shape = broadcast_shapes(op, *shapes)
    return tuple(expand_to(a, shape) for a in args)


def elementwise(prim_op, kind: Promotion, *args, op_name=None):
    """prim_op over args after torch's broadcasting and type promotion; the workhorse of this file."""
    op_name = op_name or prim_op.name
    if not any(isinstance(a, TensorProxy) for a in args):
        raise MetaError(f"{op_name}: expected a tensor argument, got {args}")
    for a in args:
        if not (isinstance(a, TensorProxy) or is_number(a)):
            raise MetaError(f"{op_name}(): argument must be a Tensor or a number, not {type(a).__name__}")
    compute, result = dtypes.result_dtypes(kind, *args)
    if kind is not Promotion.NO_OPMATH:
        compute = dtypes.computation_dtype(compute)
    args = broadcast(*args, op=op_name)
    out = prim_op(*[to_dtype(a, compute) for a in args])
    return to_dtype(out, result)


def _unary(op_id, prim_op, kind, torch_fns, methods=(), tags=()):
    def body(input):
        return elementwise(prim_op, kind, input)

    body.__name__ = op_id.removeprefix("ltorch.")
    return torchsymbol(*torch_fns, method=methods, id=op_id, tags=tags)(body)


def _binary(op_id, prim_op, kind, torch_fns, methods=(), tags=()):
    def body(input, other):
        _tensors_only(body.__name__, input, other)
        return elementwise(prim_op, kind, input, other)

    body.__name__ = op_id.removeprefix("ltorch.")
    return torchsymbol(*torch_fns, method=methods, id=op_id, tags=tags)(body)


F, D = Promotion.INT_TO_FLOAT, Promotion.DEFAULT

# ops whose torch signatures take tensors only: a Python number is a TypeError in eager, so it is one here too
TENSOR_ONLY = frozenset("atan2 maximum minimum fmax fmin nextafter hypot logaddexp logaddexp2 heaviside isclose "
                        "logical_and logical_or logical_xor".split())


def _tensors_only(name, *args):
    if name in TENSOR_ONLY:
        for a in args:
            if not isinstance(a, TensorProxy):
                raise TypeError(f"{name}(): argument must be Tensor, not {type(a).__name__}")


def _no_bool(name, input, what="operator"):
    check(input.dtype is not torch.bool, lambda: f"{name}: not implemented for 'Bool' tensors ({what})")

# -- unary: int -> float ---------------------------------------------------------------------------------------
exp = _unary("ltorch.exp", pe.exp, F, (torch.exp, T.exp), "exp")
exp2 = _unary("ltorch.exp2", pe.exp2, F, (torch.exp2, T.exp2, torch.special.exp2), "exp2")
expm1 = _unary("ltorch.expm1", pe.expm1, F, (torch.expm1, T.expm1, torch.special.expm1), "expm1")
log = _unary("ltorch.log", pe.log, F, (torch.log, T.log), "log")
log1p = _unary("ltorch.log1p", pe.log1p, F, (torch.log1p, T.log1p, torch.special.log1p), "log1p")
log2 = _unary("ltorch.log2", pe.log2, F, (torch.log2, T.log2), "log2")
log10 = _unary("ltorch.log10", pe.log10, F, (torch.log10, T.log10), "log10")
sin = _unary("ltorch.sin", pe.sin, F, (torch.sin, T.sin), "sin")
cos = _unary("ltorch.cos", pe.cos, F, (torch.cos, T.cos), "cos")
tan = _unary("ltorch.tan", pe.tan, F, (torch.tan, T.tan), "tan")
asin = _unary("ltorch.asin", pe.asin, F, (torch.asin, T.asin, torch.arcsin, T.arcsin), ("asin", "arcsin"))
acos = _unary("ltorch.acos", pe.acos, F, (torch.acos, T.acos, torch.arccos, T.arccos), ("acos", "arccos"))
atan = _unary("ltorch.atan", pe.atan, F, (torch.atan, T.atan, torch.arctan, T.arctan), ("atan", "arctan"))
sinh = _unary("ltorch.sinh", pe.sinh, F, (torch.sinh, T.sinh), "sinh")
cosh = _unary("ltorch.cosh", pe.cosh, F, (torch.cosh, T.cosh), "cosh")
tanh = _unary("ltorch.tanh", pe.tanh, F, (torch.tanh, T.tanh, torch.nn.functional.tanh), "tanh")
asinh = _unary("ltorch.asinh", pe.asinh, F, (torch.asinh, T.asinh, torch.arcsinh), ("asinh", "arcsinh"))
acosh = _unary("ltorch.acosh", pe.acosh, F, (torch.acosh, T.acosh, torch.arccosh), ("acosh", "arccosh"))
atanh = _unary("ltorch.atanh", pe.atanh, F, (torch.atanh, T.atanh, torch.arctanh), ("atanh", "arctanh"))
sqrt = _unary("ltorch.sqrt", pe.sqrt, F, (torch.sqrt, T.sqrt), "sqrt")
rsqrt = _unary("ltorch.rsqrt", pe.rsqrt, F, (torch.rsqrt, T.rsqrt), "rsqrt")
reciprocal = _unary("ltorch.reciprocal", pe.reciprocal, F, (torch.reciprocal, T.reciprocal), "reciprocal")
sigmoid = _unary("ltorch.sigmoid", pe.sigmoid, F,
                 (torch.sigmoid, T.sigmoid, torch.nn.functional.sigmoid, torch.special.expit), "sigmoid")
erf = _unary("ltorch.erf", pe.erf, F, (torch.erf, T.erf, torch.special.erf), "erf")
erfc = _unary("ltorch.erfc", pe.erfc, F, (torch.erfc, T.erfc, torch.special.erfc), "erfc")
erfinv = _unary("ltorch.erfinv", pe.erfinv, F, (torch.erfinv, T.erfinv, torch.special.erfinv), "erfinv")
lgamma = _unary("ltorch.lgamma", pe.lgamma, F, (torch.lgamma, T.lgamma, torch.special.gammaln), "lgamma")
digamma = _unary("ltorch.digamma", pe.digamma, F, (torch.digamma, T.digamma, torch.special.digamma, torch.special.psi),
                 "digamma")

# -- unary: dtype-preserving -----------------------------------------------------------------------------------
neg = _unary("ltorch.neg", pe.neg, D, (torch.neg, T.neg, torch.negative, T.__neg__), ("neg", "negative", "__neg__"))
abs = _unary("ltorch.abs", pe.abs, Promotion.COMPLEX_TO_FLOAT, (torch.abs, T.abs, torch.absolute, T.__abs__),
             ("abs", "absolute", "__abs__"))
sign = _unary("ltorch.sign", pe.sign, D, (torch.sign, T.sign), "sign")
bitwise_not = _unary("ltorch.bitwise_not", pe.bitwise_not, D, (torch.bitwise_not, T.bitwise_not, T.__invert__),
                     ("bitwise_not", "__invert__"))


@torchsymbol(torch.signbit, T.signbit, method="signbit", tags=ND, id="ltorch.signbit")
def signbit(input):
    if input.dtype is torch.bool:
        return ne(input, input)  # all False
    if dtypes.category(input.dtype) == 1:
        return lt(input, 0)
    return elementwise(pe.signbit, Promotion.ALWAYS_BOOL, input)


isfinite = _unary("ltorch.isfinite", pe.isfinite, Promotion.ALWAYS_BOOL, (torch.isfinite, T.isfinite), "isfinite",
                  tags=ND)


def _integer_identity(prim_op, op_id, torch_fns):
    name = op_id.removeprefix("ltorch.")

    def body(input):
        _no_bool(name, input, "eager has no bool kernel")
        if dtypes.category(input.dtype) < 2:
            return input
        return elementwise(prim_op, D, input)

    body.__name__ = name
    return torchsymbol(*torch_fns, method=name, id=op_id)(body)


floor = _integer_identity(pe.floor, "ltorch.floor", (torch.floor, T.floor))
ceil = _integer_identity(pe.ceil, "ltorch.ceil", (torch.ceil, T.ceil))
trunc = _integer_identity(pe.trunc, "ltorch.trunc", (torch.trunc, T.trunc, torch.fix, T.fix))


@torchsymbol(torch.round, T.round, method="round", id="ltorch.round")
def round(input, *, decimals=0):
    _no_bool("round", input, "eager has no bool kernel")
    if dtypes.category(input.dtype) < 2:
        return input
    if decimals == 0:
        return elementwise(pe.round, D, input)
    scale = 10.0 ** decimals
    return div(elementwise(pe.round, D, mul(input, scale)), scale)


@torchsymbol(torch.positive, T.positive, T.__pos__, method=("positive", "__pos__"), id="ltorch.positive")
def positive(input):
    _no_bool("positive", input, "the `+` operator on a bool tensor is not supported")
    return input


@torchsymbol(torch.isnan, T.isnan, method="isnan", tags=ND, id="ltorch.isnan")
def isnan(input):
    if dtypes.category(input.dtype) < 2:
        return ne(input, input)
    return ne(input, input)


@torchsymbol(torch.isinf, T.isinf, method="isinf", tags=ND, id="ltorch.isinf")
def isinf(input):
    if dtypes.category(input.dtype) < 2:
        return ne(input, input)  # all False, with input's shape
    return logical_and(logical_not(isfinite(input)), logical_not(isnan(input)))


@torchsymbol(torch.logical_not, T.logical_not, method="logical_not", tags=ND, id="ltorch.logical_not")
def logical_not(input):
    zero = False if input.dtype is torch.bool else 0
    return elementwise(pe.eq, Promotion.ALWAYS_BOOL, input, zero, op_name="logical_not")


@torchsymbol(torch.square, T.square, method="square", id="ltorch.square")
def square(input):
    return pow(input, 2)  # x * x, except bool: int64 as in eager


@torchsymbol(torch.frac, T.frac, method="frac", id="ltorch.frac")
def frac(input):
    return sub(input, trunc(input))


@torchsymbol(torch.nan_to_num, T.nan_to_num, method="nan_to_num", id="ltorch.nan_to_num")
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    if dtypes.category(input.dtype) < 2:
        return input
    info = torch.finfo(input.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = where(isnan(input), nan, input)
    out = where(logical_and(isinf(out), gt(out, 0)), posinf, out)
    return where(logical_and(isinf(out), lt(out, 0)), neginf, out)


# -- binary ----------------------------------------------------------------------------------------------------
def _scaled(input, other, alpha):
    """`alpha * other` as add/sub take it: alpha does not take part in type promotion, it is a number of the
    result's dtype (bool tensors: alpha is a truth value, so True + 2 * True is True, not the int64 3)."""
    if is_number(input) and is_number(other):
        return other * alpha
    result = dtypes.promote_dtypes(input, other)
    if result is torch.bool:
        check(not isinstance(alpha, float) or alpha.is_integer(),
              "For integral input tensors, argument alpha must not be a floating point number.")
        return other if bool(alpha) else (False if is_number(other) else mul(other, False))
    if not result.is_floating_point and not result.is_complex:
        check(not isinstance(alpha, (float, complex)) and not (isinstance(alpha, NumberProxy) and
                                                               alpha.python_type is not int),
              "For integral input tensors, argument alpha must not be a floating point number.")
    if isinstance(alpha, bool):
        check(False, "Boolean alpha only supported for Boolean results.")
    if is_number(other):  # a Python number scaled in Python: it stays a weak scalar of the promotion
        return other * alpha
    return mul(to_dtype(other, result), alpha)


@torchsymbol(torch.add, T.add, T.__add__, T.__radd__, method=("add", "__add__", "__radd__"), id="ltorch.add")
def add(input, other, *, alpha=1):
    if alpha != 1:
        other = _scaled(input, other, alpha)
    if is_number(input) and is_number(other):
        return input + other
    return elementwise(pe.add, D, input, other, op_name="add")


@torchsymbol(torch.sub, T.sub, T.__sub__, torch.subtract, T.subtract, method=("sub", "__sub__", "subtract"),
             id="ltorch.sub")
def sub(input, other, *, alpha=1):
    if alpha != 1:
        other = _scaled(input, other, alpha)
    check(not (isinstance(input, TensorProxy) and input.dtype is torch.bool),
          "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
          "operator instead.")
    return elementwise(pe.sub, D, input, other, op_name="sub")


@torchsymbol(torch.rsub, T.__rsub__, method="__rsub__", id="ltorch.rsub")
def rsub(input, other, *, alpha=1):
    return sub(other, mul(input, alpha) if alpha != 1 else input)


@torchsymbol(torch.mul, T.mul, T.__mul__, T.__rmul__, torch.multiply, T.multiply,
             method=("mul", "__mul__", "__rmul__", "multiply"), id="ltorch.mul")
def mul(input, other):
    return elementwise(pe.mul, D, input, other, op_name="mul")


@torchsymbol(torch.div, T.div, T.__truediv__, torch.divide, T.divide, torch.true_divide, T.true_divide,
             method=("div", "__truediv__", "divide", "true_divide"), id="ltorch.div")
def div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return elementwise(pe.div, F, input, other, op_name="div")
    if rounding_mode == "trunc":
        out = elementwise(pe.div, D, input, other, op_name="div")
        return trunc(out) if dtypes.is_inexact(out.dtype) else out
    check(rounding_mode == "floor", lambda: f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
          f"but found '{rounding_mode}'")
    return floor_divide(input, other)


@torchsymbol(T.__rtruediv__, method="__rtruediv__", id="ltorch.rtruediv")
def rtruediv(input, other):
    return div(other, input)


@torchsymbol(torch.floor_divide, T.floor_divide, T.__floordiv__, method=("floor_divide", "__floordiv__"),
             id="ltorch.floor_divide")
def floor_divide(input, other):
    compute, _ = dtypes.result_dtypes(D, input, other)
    if dtypes.category(compute) < 2:
        # integer floor division: truncate, then step down where the signs differ and there is a remainder
        q = elementwise(pe.div, D, input, other, op_name="floor_divide")
        r = elementwise(pe.remainder, D, input, other, op_name="floor_divide")
        fix = logical_and(ne(r, 0), _ne_bool(_is_negative(input), _is_negative(other)))
        return where(fix, sub(q, 1), q)
    return floor(elementwise(pe.div, D, input, other, op_name="floor_divide"))


def _is_negative(x):
    return lt(x, 0) if isinstance(x, TensorProxy) else x < 0


def _ne_bool(a, b):
    if isinstance(a, TensorProxy):
        return ne(a, b)
    if isinstance(b, TensorProxy):
        return ne(b, a)
    return a != b


@torchsymbol(T.__rfloordiv__, method="__rfloordiv__", id="ltorch.rfloordiv")
def rfloordiv(input, other):
    return floor_divide(other, input)


remainder = _binary("ltorch.remainder", pe.remainder, D, (torch.remainder, T.remainder, T.__mod__),
                    ("remainder", "__mod__"))
fmod = _binary("ltorch.fmod", pe.fmod, D, (torch.fmod, T.fmod), "fmod")


@torchsymbol(T.__rmod__, method="__rmod__", id="ltorch.rmod")
def rmod(input, other):
    return remainder(other, input)


@torchsymbol(torch.pow, T.pow, T.__pow__, method=("pow", "__pow__"), id="ltorch.pow")
def pow(input, exponent):
    if is_number(exponent) and exponent == 2 and isinstance(input, TensorProxy) and \
            dtypes.promote_dtypes(input, exponent) == input.dtype:  # bool ** 2 is int64: no shortcut
        return mul(input, input)
    return elementwise(pe.pow, D, input, exponent, op_name="pow")


@torchsymbol(T.__rpow__, method="__rpow__", id="ltorch.rpow")
def rpow(input, other):
    return pow(other, input)


atan2 = _binary("ltorch.atan2", pe.atan2, F, (torch.atan2, T.atan2, torch.arctan2), ("atan2", "arctan2"))
maximum = _binary("ltorch.maximum", pe.maximum, D, (torch.maximum, T.maximum), "maximum")
minimum = _binary("ltorch.minimum", pe.minimum, D, (torch.minimum, T.minimum), "minimum")
copysign = _binary("ltorch.copysign", pe.copysign, F, (torch.copysign, T.copysign), "copysign")
nextafter = _binary("ltorch.nextafter", pe.nextafter, D, (torch.nextafter, T.nextafter), "nextafter")
bitwise_and = _binary("ltorch.bitwise_and", pe.bitwise_and, D,
                      (torch.bitwise_and, T.bitwise_and, T.__and__, T.__rand__), ("bitwise_and", "__and__", "__rand__"))
bitwise_or = _binary("ltorch.bitwise_or", pe.bitwise_or, D, (torch.bitwise_or, T.bitwise_or, T.__or__, T.__ror__),
                     ("bitwise_or", "__or__", "__ror__"))
bitwise_xor = _binary("ltorch.bitwise_xor", pe.bitwise_xor, D,
                      (torch.bitwise_xor, T.bitwise_xor, T.__xor__, T.__rxor__), ("bitwise_xor", "__xor__", "__rxor__"))
bitwise_left_shift = _binary("ltorch.bitwise_left_shift", pe.bitwise_left_shift, D,
                             (torch.bitwise_left_shift, T.bitwise_left_shift, T.__lshift__),
                             ("bitwise_left_shift", "__lshift__"))
bitwise_right_shift = _binary("ltorch.bitwise_right_shift", pe.bitwise_right_shift, D,
                              (torch.bitwise_right_shift, T.bitwise_right_shift, T.__rshift__),
                              ("bitwise_right_shift", "__rshift__"))

_B = Promotion.ALWAYS_BOOL
eq = _binary("ltorch.eq", pe.eq, _B, (torch.eq, T.eq, T.__eq__), ("eq", "__eq__"), tags=ND)
ne = _binary("ltorch.ne", pe.ne, _B, (torch.ne, T.ne, T.__ne__, torch.not_equal, T.not_equal),
             ("ne", "__ne__", "not_equal"), tags=ND)
lt = _binary("ltorch.lt", pe.lt, _B, (torch.lt, T.lt, T.__lt__, torch.less, T.less), ("lt", "__lt__", "less"), tags=ND)
le = _binary("ltorch.le", pe.le, _B, (torch.le, T.le, T.__le__, torch.less_equal, T.less_equal),
             ("le", "__le__", "less_equal"), tags=ND)
gt = _binary("ltorch.gt", pe.gt, _B, (torch.gt, T.gt, T.__gt__, torch.greater, T.greater), ("gt", "__gt__", "greater"),
             tags=ND)
ge = _binary("ltorch.ge", pe.ge, _B, (torch.ge, T.ge, T.__ge__, torch.greater_equal, T.greater_equal),
             ("ge", "__ge__", "greater_equal"), tags=ND)


def _to_bool(a):
    return a if not isinstance(a, TensorProxy) or a.dtype is torch.bool else ne(a, 0)


@torchsymbol(torch.logical_and, T.logical_and, method="logical_and", tags=ND, id="ltorch.logical_and")
def logical_and(input, other):
    _tensors_only("logical_and", input, other)
    return elementwise(pe.bitwise_and, D, _to_bool(input), _to_bool(other), op_name="logical_and")


@torchsymbol(torch.logical_or, T.logical_or, method="logical_or", tags=ND, id="ltorch.logical_or")
def logical_or(input, other):
    _tensors_only("logical_or", input, other)
    return elementwise(pe.bitwise_or, D, _to_bool(input), _to_bool(other), op_name="logical_or")


@torchsymbol(torch.logical_xor, T.logical_xor, method="logical_xor", tags=ND, id="ltorch.logical_xor")
def logical_xor(input, other):
    _tensors_only("logical_xor", input, other)
    return elementwise(pe.bitwise_xor, D, _to_bool(input), _to_bool(other), op_name="logical_xor")


# -- ternary ---------------------------------------------------------------------------------------------------
@torchsymbol(torch.where, id="ltorch.where")
def where(condition, input=None, other=None):
    if input is None and other is None:  # torch.where(condition): the indices of its True entries, per dim
        from jitcore.ops.torch_value_sizes import nonzero  # (it builds on this module)
        return nonzero(condition, as_tuple=True)
    check(isinstance(condition, TensorProxy) and condition.dtype is torch.bool,
          lambda: f"where expected condition to be a boolean tensor, but got {getattr(condition, 'dtype', condition)}")
    dtype = dtypes.promote_dtypes(input, other)
    condition, input, other = broadcast(condition, input, other, op="where")
    shape = condition.shape
    input, other = expand_to(to_dtype(input, dtype), shape), expand_to(to_dtype(other, dtype), shape)
    return pe.where(condition, input, other)


def _where_method(self, condition, other):
    """Tensor.where: `x.where(condition, y)` is torch.where(condition, x, y)."""
    return where(condition, self, other)


register_method("where", _where_method)
TORCH_MAP.setdefault(T.where, _where_method)


@torchsymbol(torch.clamp, T.clamp, torch.clip, T.clip, method=("clamp", "clip"), id="ltorch.clamp")
def clamp(input, min=None, max=None):
    check(min is not None or max is not None, "torch.clamp: At least one of 'min' or 'max' must not be None")
    out = input
    if compat.CLAMP_TIES_SPLIT:  # (torch 2.15's gradient where the input equals a bound: see compat)
        out = _clamp_ties(out, min, max)
    if min is not None:
        out = where(logical_or(lt(out, min), isnan(out)) if dtypes.is_inexact(out.dtype) else lt(out, min),
                    to_dtype(min, dtypes.promote_dtypes(input, min)) if is_number(min) else min, out)
        out = where(isnan(input), input, out) if dtypes.is_inexact(input.dtype) else out
    if max is not None:
        out = where(gt(out, max), max, out)
    return to_dtype(out, dtypes.promote_dtypes(input, *[m for m in (min, max) if m is not None]))


def _clamp_ties(x, *bounds):
    """x with torch 2.15's gradient where it equals a bound (the same values): none for a number bound; half of it
    for a tensor bound, the other half going to the bound."""
    for b in bounds:
        if b is None or not dtypes.is_inexact(x.dtype):
            continue
        tied = pm.stop_gradient(x) if not isinstance(b, TensorProxy) else add(x, mul(sub(to_dtype(b, x.dtype), x), 0.5))
        x = where(eq(x, b), tied, x)
    return x


@torchsymbol(torch.clamp_min, T.clamp_min, method="clamp_min", id="ltorch.clamp_min")
def clamp_min(input, min):
    return clamp(input, min, None)


@torchsymbol(torch.clamp_max, T.clamp_max, method="clamp_max", id="ltorch.clamp_max")
def clamp_max(input, max):
    return clamp(input, None, max)


@torchsymbol(torch.lerp, T.lerp, method="lerp", id="ltorch.lerp")
def lerp(input, end, weight):
    return add(input, mul(weight, sub(end, input)))


@torchsymbol(torch.addcmul, T.addcmul, method="addcmul", id="ltorch.addcmul")
def addcmul(input, tensor1, tensor2, *, value=1):
    return add(input, mul(mul(tensor1, tensor2), value) if value != 1 else mul(tensor1, tensor2))


@torchsymbol(torch.addcdiv, T.addcdiv, method="addcdiv", id="ltorch.addcdiv")
def addcdiv(input, tensor1, tensor2, *, value=1):
    return add(input, mul(div(tensor1, tensor2), value) if value != 1 else div(tensor1, tensor2))


# -- more elementwise ops, composed of the ones above (added with the core torch ops) -----------------------------
def _in_float(kind, fn, *args):
    """fn over args converted once to the computation dtype (float32 for half precision), rounded once at the end."""
    compute, result = dtypes.result_dtypes(kind, *args)
    out = fn(*[to_dtype(a, dtypes.computation_dtype(compute)) for a in args])
    return to_dtype(out, result)


def _inexact_only(op, *args):
    dt = dtypes.promote_dtypes(*args)
    check(dtypes.is_inexact(dt), lambda: f"{op}: not implemented for '{dt}' (floating point inputs only)")


@torchsymbol(torch.hypot, T.hypot, method="hypot", id="ltorch.hypot")
def hypot(input, other):
    _tensors_only("hypot", input, other)
    _inexact_only("hypot", input, other)

    def f(a, b):
        out = sqrt(add(mul(a, a), mul(b, b)))
        for x in (a, b):
            out = where(isinf(x), math.inf, out) if isinstance(x, TensorProxy) else out
        return out

    return _in_float(D, f, input, other)


def _logaddexp(a, b, log1p_of, scale):
    m = maximum(a, b)
    out = add(m, mul(log1p_of(neg(abs(sub(a, b)))), scale) if scale != 1 else log1p_of(neg(abs(sub(a, b)))))
    return where(logical_and(isinf(a), eq(a, b)), a, out)


@torchsymbol(torch.logaddexp, T.logaddexp, method="logaddexp", id="ltorch.logaddexp")
def logaddexp(input, other):
    _tensors_only("logaddexp", input, other)
    _inexact_only("logaddexp", input, other)
    check(not dtypes.promote_dtypes(input, other).is_complex, "logaddexp: complex inputs are not decomposed")
    return _in_float(D, lambda a, b: _logaddexp(a, b, lambda d: log1p(exp(d)), 1), input, other)


@torchsymbol(torch.logaddexp2, T.logaddexp2, method="logaddexp2", id="ltorch.logaddexp2")
def logaddexp2(input, other):
    _tensors_only("logaddexp2", input, other)
    _inexact_only("logaddexp2", input, other)
    check(not dtypes.promote_dtypes(input, other).is_complex, "logaddexp2: complex inputs are not decomposed")
    return _in_float(D, lambda a, b: _logaddexp(a, b, lambda d: log1p(exp2(d)), 1 / math.log(2)), input, other)


def log_number(b):
    """log of a Python number as torch computes it: -inf at 0, NaN below."""
    return math.log(b) if b > 0 else -math.inf if b == 0 else math.nan


def log1p_number(b):
    return math.log1p(b) if b > -1 else -math.inf if b == -1 else math.nan


def _xlog(f, f_number, a, b):
    if not isinstance(b, TensorProxy):  # a Python number: its log is a number too (NaN b: NaN everywhere)
        return mul(a, b) if math.isnan(b) else where(eq(a, 0), to_dtype(0, a.dtype), mul(a, f_number(b)))
    out = where(eq(a, 0), to_dtype(0, a.dtype if isinstance(a, TensorProxy) else b.dtype), mul(a, f(b)))
    return where(isnan(b), b, out)


@torchsymbol(torch.xlogy, T.xlogy, torch.special.xlogy, method="xlogy", id="ltorch.xlogy")
def xlogy(input, other):
    return _in_float(F, lambda a, b: _xlog(log, log_number, a, b), input, other)


@torchsymbol(torch.special.xlog1py, id="ltorch.xlog1py")
def xlog1py(input, other):
    return _in_float(F, lambda a, b: _xlog(log1p, log1p_number, a, b), input, other)


@torchsymbol(torch.float_power, T.float_power, method="float_power", id="ltorch.float_power")
def float_power(input, exponent):
    dt = torch.complex128 if dtypes.category(dtypes.promote_dtypes(input, exponent)) == 3 else torch.float64
    return pow(to_dtype(input, dt), to_dtype(exponent, dt))


def _nan_aware(binary, name):
    def body(input, other):
        _tensors_only(name, input, other)
        if dtypes.category(dtypes.promote_dtypes(input, other)) < 2:
            return binary(input, other)
        out = binary(input, other)
        return where(isnan(input), other, where(isnan(other), input, out))

    body.__name__ = name
    return body


fmax = torchsymbol(torch.fmax, T.fmax, method="fmax", id="ltorch.fmax")(_nan_aware(maximum, "fmax"))
fmin = torchsymbol(torch.fmin, T.fmin, method="fmin", id="ltorch.fmin")(_nan_aware(minimum, "fmin"))


@torchsymbol(torch.heaviside, T.heaviside, method="heaviside", id="ltorch.heaviside")
def heaviside(input, values):
    _tensors_only("heaviside", input, values)
    check(input.dtype == values.dtype, "heaviside is not yet implemented for tensors with different dtypes")
    step = to_dtype(where(gt(input, 0), 1, 0), input.dtype)  # numbers alone would make int64, outranking 0-d values
    return where(eq(input, 0), values, step)


@torchsymbol(torch.deg2rad, T.deg2rad, method="deg2rad", id="ltorch.deg2rad")
def deg2rad(input):
    return _in_float(F, lambda a: mul(a, math.pi / 180), input)


@torchsymbol(torch.rad2deg, T.rad2deg, method="rad2deg", id="ltorch.rad2deg")
def rad2deg(input):
    return _in_float(F, lambda a: mul(a, 180 / math.pi), input)


@torchsymbol(torch.sinc, T.sinc, torch.special.sinc, method="sinc", id="ltorch.sinc")
def sinc(input):
    def f(a):
        x = mul(a, math.pi)
        return where(eq(a, 0), to_dtype(1, a.dtype), div(sin(x), x))

    return _in_float(F, f, input)


@torchsymbol(torch.logit, T.logit, torch.special.logit, method="logit", id="ltorch.logit")
def logit(input, eps=None):
    def f(a):
        if eps is not None:
            a = clamp(a, eps, 1 - eps)
        return log(div(a, sub(1, a)))

    return _in_float(F, f, input)


@torchsymbol(torch.special.ndtr, id="ltorch.ndtr")
def ndtr(input):
    return _in_float(F, lambda a: mul(erfc(mul(a, -1 / math.sqrt(2))), 0.5), input)


@torchsymbol(torch.special.entr, id="ltorch.entr")
def entr(input):
    def f(a):
        out = where(gt(a, 0), neg(mul(a, log(a))), where(eq(a, 0), to_dtype(0, a.dtype), to_dtype(-float("inf"),
                                                                                                   a.dtype)))
        return where(isnan(a), a, out)

    return _in_float(F, f, input)


@torchsymbol(torch.isposinf, T.isposinf, method="isposinf", tags=ND, id="ltorch.isposinf")
def isposinf(input):
    return logical_and(isinf(input), gt(input, 0))


@torchsymbol(torch.isneginf, T.isneginf, method="isneginf", tags=ND, id="ltorch.isneginf")
def isneginf(input):
    return logical_and(isinf(input), lt(input, 0))


@torchsymbol(torch.isreal, T.isreal, method="isreal", tags=ND, id="ltorch.isreal")
def isreal(input):
    if input.dtype.is_complex:  # (a zero imaginary part)
        return eq(pcx.imag(input), 0)
    return logical_or(eq(input, input), isnan(input))


@torchsymbol(torch.sgn, T.sgn, method="sgn", id="ltorch.sgn")
def sgn(input):
    if not input.dtype.is_complex:
        return sign(input)
    magnitude = abs(input)
    return where(eq(magnitude, 0), to_dtype(0, input.dtype), div(input, magnitude))


@torchsymbol(torch.isclose, T.isclose, method="isclose", tags=ND, id="ltorch.isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    _tensors_only("isclose", input, other)
    check(input.dtype == other.dtype, lambda: f"isclose: {input.dtype} did not match {other.dtype}")
    close = eq(input, other)
    if input.dtype is torch.bool:
        return close
    if equal_nan and dtypes.is_inexact(input.dtype):
        close = logical_or(close, logical_and(isnan(input), isnan(other)))
    allowed = add(abs(mul(other, rtol)), atol)
    actual = abs(sub(input, other))
    return logical_or(close, logical_and(isfinite(actual), le(actual, allowed)))
