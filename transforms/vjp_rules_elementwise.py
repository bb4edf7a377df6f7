"""Transforms (autodiff): VJP rows for the elementwise prims. Rules are written over torch-level ops, so the backward
trace is recorded like any other program; most are one formula, made a rule by `unary` / `binary`
(transforms/vjp_helpers.py). Each row follows its rule.
"""
from __future__ import annotations

import cmath
import math

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.torch_creation import zeros_like
from transforms.vjp_helpers import VJP_RULES, binary, is_diff, unary

mul, div, add, sub, neg = te.mul, te.div, te.add, te.sub, te.neg
LN2, LN10, TWO_OVER_SQRT_PI = math.log(2.0), math.log(10.0), 2.0 / math.sqrt(math.pi)

# -- elementwise unary --------------------------------------------------------------------------------------------
VJP_RULES["prims.abs"] = unary(lambda a, out, g: mul(g, te.sgn(a)))  # (sgn: z / |z| of a complex z, as torch)
VJP_RULES["prims.neg"] = unary(lambda a, out, g: neg(g))
VJP_RULES["prims.exp"] = unary(lambda a, out, g: mul(g, out))
VJP_RULES["prims.exp2"] = unary(lambda a, out, g: mul(g, mul(out, LN2)))
VJP_RULES["prims.expm1"] = unary(lambda a, out, g: mul(g, add(out, 1)))
VJP_RULES["prims.log"] = unary(lambda a, out, g: div(g, a))
VJP_RULES["prims.log1p"] = unary(lambda a, out, g: div(g, add(a, 1)))
VJP_RULES["prims.log2"] = unary(lambda a, out, g: div(g, mul(a, LN2)))
VJP_RULES["prims.log10"] = unary(lambda a, out, g: div(g, mul(a, LN10)))
VJP_RULES["prims.sin"] = unary(lambda a, out, g: mul(g, te.cos(a)))
VJP_RULES["prims.cos"] = unary(lambda a, out, g: neg(mul(g, te.sin(a))))
VJP_RULES["prims.tan"] = unary(lambda a, out, g: mul(g, add(mul(out, out), 1)))
VJP_RULES["prims.asin"] = unary(lambda a, out, g: mul(g, te.rsqrt(sub(1, mul(a, a)))))
VJP_RULES["prims.acos"] = unary(lambda a, out, g: neg(mul(g, te.rsqrt(sub(1, mul(a, a))))))
VJP_RULES["prims.atan"] = unary(lambda a, out, g: div(g, add(mul(a, a), 1)))
VJP_RULES["prims.sinh"] = unary(lambda a, out, g: mul(g, te.cosh(a)))
VJP_RULES["prims.cosh"] = unary(lambda a, out, g: mul(g, te.sinh(a)))
VJP_RULES["prims.tanh"] = unary(lambda a, out, g: mul(g, sub(1, mul(out, out))))
VJP_RULES["prims.asinh"] = unary(lambda a, out, g: mul(g, te.rsqrt(add(mul(a, a), 1))))
VJP_RULES["prims.acosh"] = unary(lambda a, out, g: mul(g, te.rsqrt(sub(mul(a, a), 1))))
VJP_RULES["prims.atanh"] = unary(lambda a, out, g: div(g, sub(1, mul(a, a))))
VJP_RULES["prims.sqrt"] = unary(lambda a, out, g: div(g, mul(out, 2)))
VJP_RULES["prims.rsqrt"] = unary(lambda a, out, g: mul(g, mul(mul(out, mul(out, out)), -0.5)))
VJP_RULES["prims.reciprocal"] = unary(lambda a, out, g: neg(mul(g, mul(out, out))))
VJP_RULES["prims.sigmoid"] = unary(lambda a, out, g: mul(g, mul(out, sub(1, out))))
VJP_RULES["prims.erf"] = unary(lambda a, out, g: mul(g, mul(te.exp(neg(mul(a, a))), TWO_OVER_SQRT_PI)))
VJP_RULES["prims.erfc"] = unary(lambda a, out, g: mul(g, mul(te.exp(neg(mul(a, a))), -TWO_OVER_SQRT_PI)))
VJP_RULES["prims.erfinv"] = unary(lambda a, out, g: mul(g, mul(te.exp(mul(out, out)), math.sqrt(math.pi) / 2)))
VJP_RULES["prims.lgamma"] = unary(lambda a, out, g: mul(g, te.digamma(a)))
VJP_RULES["prims.digamma"] = unary(lambda a, out, g: mul(g, opaque_symbol(torch.polygamma)(1, a)))


def zero_vjp(bsym, g):
    """A unary op whose derivative is 0 almost everywhere (sign, floor, ...): eager's backward gives zeros, not None,
    so an input reached only through it ends with a zero .grad. Made from g, so a missing cotangent drops it."""
    return (zeros_like(g),)


VJP_RULES["prims.sign"] = zero_vjp
VJP_RULES["prims.floor"] = zero_vjp
VJP_RULES["prims.ceil"] = zero_vjp
VJP_RULES["prims.round"] = zero_vjp
VJP_RULES["prims.trunc"] = zero_vjp


# -- elementwise binary ---------------------------------------------------------------------------------------------
VJP_RULES["prims.add"] = binary(lambda a, b, out, g: g, lambda a, b, out, g: g)
VJP_RULES["prims.sub"] = binary(lambda a, b, out, g: g, lambda a, b, out, g: neg(g))
VJP_RULES["prims.mul"] = binary(lambda a, b, out, g: mul(g, b), lambda a, b, out, g: mul(g, a))
VJP_RULES["prims.div"] = binary(lambda a, b, out, g: div(g, b), lambda a, b, out, g: neg(mul(g, div(out, b))))


def _pow_grad_a(a, b, out, g):
    """b * a**(b - 1), and 0 where b is 0 (as eager: x**0 has gradient 0 at x = 0, not 0 * inf)."""
    if not isinstance(b, TensorProxy):
        return zeros_like(g) if b == 0 else mul(g, mul(b, te.pow(a, b - 1)))
    return mul(g, te.where(te.eq(b, 0), 0.0, mul(b, te.pow(a, sub(b, 1)))))


def _pow_grad_b(a, b, out, g):
    """a**b * log(a), and 0 where a is 0 and b >= 0 (as eager: 0 * log(0) would be NaN; a complex b: its real part)."""
    b_real = pcx.real(b) if isinstance(b, TensorProxy) and b.dtype.is_complex else b
    if not isinstance(a, TensorProxy):  # a number base
        if a != 0:
            return mul(g, mul(out, cmath.log(a) if isinstance(a, complex) else math.log(a)))
        return mul(g, te.where(te.ge(b_real, 0), 0.0, mul(out, -math.inf)))
    return mul(g, te.where(te.logical_and(te.eq(a, 0), te.ge(b_real, 0)), 0.0, mul(out, te.log(a))))


VJP_RULES["prims.pow"] = binary(_pow_grad_a, _pow_grad_b)
VJP_RULES["prims.atan2"] = binary(lambda a, b, out, g: mul(g, div(b, add(mul(a, a), mul(b, b)))),
                                  lambda a, b, out, g: mul(g, div(neg(a), add(mul(a, a), mul(b, b)))))
VJP_RULES["prims.remainder"] = binary(lambda a, b, out, g: g, lambda a, b, out, g: mul(g, neg(te.floor(div(a, b)))))
# eager: a step from a, a zero gradient at b (none before torch 2.13: refused as eager refuses it)
def _nextafter_grad_a(a, b, out, g):
    if not compat.eager_has("nextafter gradient"):
        raise UnsupportedError("torch version", f"the gradient of torch.nextafter: torch {torch.__version__} has none "
                               "(eager raises NotImplementedError)", hint="torch 2.13 or newer computes it")
    return te.where(te.ne(a, b), g, 0.0)


VJP_RULES["prims.nextafter"] = binary(_nextafter_grad_a, lambda a, b, out, g: zeros_like(g))
VJP_RULES["prims.fmod"] = binary(lambda a, b, out, g: g, lambda a, b, out, g: mul(g, neg(te.trunc(div(a, b)))))


def _minmax_grads(pick):
    # torch splits the gradient evenly between equal inputs
    def fa(a, b, out, g):
        return mul(g, te.where(te.eq(a, b), 0.5, te.where(pick(a, b), 1.0, 0.0)))

    def fb(a, b, out, g):
        return mul(g, te.where(te.eq(a, b), 0.5, te.where(pick(a, b), 0.0, 1.0)))

    return fa, fb


VJP_RULES["prims.maximum"] = binary(*_minmax_grads(te.gt))
VJP_RULES["prims.minimum"] = binary(*_minmax_grads(te.lt))
VJP_RULES["prims.copysign"] = binary(lambda a, b, out, g: mul(g, te.where(te.eq(a, 0), 0.0, div(out, a))),
                                     lambda a, b, out, g: zeros_like(g))  # (eager: a zero gradient for the sign)


def where_vjp(bsym, g):
    pred, a, b = bsym.args
    ga = te.where(pred, g, 0.0) if is_diff(a) else None
    gb = te.where(pred, 0.0, g) if is_diff(b) else None
    return None, ga, gb


VJP_RULES["prims.where"] = where_vjp


def convert_element_type_vjp(bsym, g):
    a = bsym.args[0]
    if g.dtype.is_complex and not a.dtype.is_complex:  # (a real tensor made complex: the real part)
        g = pcx.real(g)
    return (te.to_dtype(g, a.dtype),)


VJP_RULES["prims.convert_element_type"] = convert_element_type_vjp


def device_put_vjp(bsym, g):
    a = bsym.args[0]
    return (g if g.device == a.device else pe.device_put(g, a.device),)


VJP_RULES["prims.device_put"] = device_put_vjp


def bernoulli_tensor_vjp(bsym, g):
    """Eager's bernoulli derivative: zeros for the probabilities (the draw is not differentiable)."""
    prob = bsym.args[0]
    return pc.full(tuple(prob.shape), 0, device=prob.device, dtype=prob.dtype), None


VJP_RULES["prims.bernoulli_tensor"] = bernoulli_tensor_vjp
