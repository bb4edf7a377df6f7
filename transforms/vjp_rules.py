"""Transforms: THE autodiff table. VJP_RULES maps an op id to its rule: rule(bsym, *output_cotangents) returns
the cotangent of each positional argument (None where there is none). Rules are written over torch-level ops,
so the backward trace is recorded like any other program. A row follows each rule's definition.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol, opaque_vjp_replay_sym, opaque_vjp_sym, with_rng_state_sym

VJP_RULES: dict = {}


def _unary(op_id, fn):
    """A rule for a unary op: fn(a, out, g) -> grad of a."""
    VJP_RULES[op_id] = lambda bsym, g: (fn(bsym.args[0], bsym.output, g),)


def _binary(op_id, fa, fb):
    """A rule for a binary elementwise op: fa/fb(a, b, out, g) -> grads (skipped for number arguments)."""

    def rule(bsym, g):
        a, b = bsym.args
        ga = fa(a, b, bsym.output, g) if isinstance(a, TensorProxy) and a.requires_grad else None
        gb = fb(a, b, bsym.output, g) if isinstance(b, TensorProxy) and b.requires_grad else None
        return ga, gb

    VJP_RULES[op_id] = rule


def _zero(op_id):
    """A unary op whose derivative is 0 almost everywhere (sign, floor, ...): eager's backward gives zeros, not None,
    so an input reached only through it ends with a zero .grad. Made from g, so a missing cotangent drops it."""
    from jitcore.ops.torch_creation import zeros_like

    VJP_RULES[op_id] = lambda bsym, g: (zeros_like(g),)


mul, div, add, sub, neg = te.mul, te.div, te.add, te.sub, te.neg
LN2, LN10, TWO_OVER_SQRT_PI = math.log(2.0), math.log(10.0), 2.0 / math.sqrt(math.pi)

# -- elementwise unary --------------------------------------------------------------------------------------------
_unary("prims.abs", lambda a, out, g: mul(g, te.sign(a)))
_unary("prims.neg", lambda a, out, g: neg(g))
_unary("prims.exp", lambda a, out, g: mul(g, out))
_unary("prims.exp2", lambda a, out, g: mul(g, mul(out, LN2)))
_unary("prims.expm1", lambda a, out, g: mul(g, add(out, 1)))
_unary("prims.log", lambda a, out, g: div(g, a))
_unary("prims.log1p", lambda a, out, g: div(g, add(a, 1)))
_unary("prims.log2", lambda a, out, g: div(g, mul(a, LN2)))
_unary("prims.log10", lambda a, out, g: div(g, mul(a, LN10)))
_unary("prims.sin", lambda a, out, g: mul(g, te.cos(a)))
_unary("prims.cos", lambda a, out, g: neg(mul(g, te.sin(a))))
_unary("prims.tan", lambda a, out, g: mul(g, add(mul(out, out), 1)))
_unary("prims.asin", lambda a, out, g: mul(g, te.rsqrt(sub(1, mul(a, a)))))
_unary("prims.acos", lambda a, out, g: neg(mul(g, te.rsqrt(sub(1, mul(a, a))))))
_unary("prims.atan", lambda a, out, g: div(g, add(mul(a, a), 1)))
_unary("prims.sinh", lambda a, out, g: mul(g, te.cosh(a)))
_unary("prims.cosh", lambda a, out, g: mul(g, te.sinh(a)))
_unary("prims.tanh", lambda a, out, g: mul(g, sub(1, mul(out, out))))
_unary("prims.asinh", lambda a, out, g: mul(g, te.rsqrt(add(mul(a, a), 1))))
_unary("prims.acosh", lambda a, out, g: mul(g, te.rsqrt(sub(mul(a, a), 1))))
_unary("prims.atanh", lambda a, out, g: div(g, sub(1, mul(a, a))))
_unary("prims.sqrt", lambda a, out, g: div(g, mul(out, 2)))
_unary("prims.rsqrt", lambda a, out, g: mul(g, mul(mul(out, mul(out, out)), -0.5)))
_unary("prims.reciprocal", lambda a, out, g: neg(mul(g, mul(out, out))))
_unary("prims.sigmoid", lambda a, out, g: mul(g, mul(out, sub(1, out))))
_unary("prims.erf", lambda a, out, g: mul(g, mul(te.exp(neg(mul(a, a))), TWO_OVER_SQRT_PI)))
_unary("prims.erfc", lambda a, out, g: mul(g, mul(te.exp(neg(mul(a, a))), -TWO_OVER_SQRT_PI)))
_unary("prims.erfinv", lambda a, out, g: mul(g, mul(te.exp(mul(out, out)), math.sqrt(math.pi) / 2)))
_unary("prims.lgamma", lambda a, out, g: mul(g, te.digamma(a)))
_unary("prims.digamma", lambda a, out, g: mul(g, opaque_symbol(torch.polygamma)(1, a)))
for _op in ("prims.sign", "prims.floor", "prims.ceil", "prims.round", "prims.trunc"):
    _zero(_op)


# -- elementwise binary ---------------------------------------------------------------------------------------------
_binary("prims.add", lambda a, b, out, g: g, lambda a, b, out, g: g)
_binary("prims.sub", lambda a, b, out, g: g, lambda a, b, out, g: neg(g))
_binary("prims.mul", lambda a, b, out, g: mul(g, b), lambda a, b, out, g: mul(g, a))
_binary("prims.div", lambda a, b, out, g: div(g, b), lambda a, b, out, g: neg(mul(g, div(out, b))))
def _pow_grad_a(a, b, out, g):
    return mul(g, mul(b, te.pow(a, sub(b, 1) if isinstance(b, TensorProxy) else b - 1)))


def _pow_grad_b(a, b, out, g):
    if not isinstance(a, TensorProxy):  # a number base: d(a**b)/db = a**b * log(a)
        return mul(g, mul(out, math.log(a))) if a != 0 else mul(g, 0.0)
    return mul(g, te.where(te.eq(a, 0), 0.0, mul(out, te.log(a))))


_binary("prims.pow", _pow_grad_a, _pow_grad_b)
_binary("prims.atan2",
        lambda a, b, out, g: mul(g, div(b, add(mul(a, a), mul(b, b)))),
        lambda a, b, out, g: mul(g, div(neg(a), add(mul(a, a), mul(b, b)))))
_binary("prims.remainder", lambda a, b, out, g: g,
        lambda a, b, out, g: mul(g, neg(te.floor(div(a, b)))))
_binary("prims.nextafter", lambda a, b, out, g: te.where(te.ne(a, b), g, 0.0),  # eager: a step from a, none at b
        lambda a, b, out, g: None)
_binary("prims.fmod", lambda a, b, out, g: g, lambda a, b, out, g: mul(g, neg(te.trunc(div(a, b)))))


def _minmax_rule(pick):
    # torch splits the gradient evenly between equal inputs
    def fa(a, b, out, g):
        return mul(g, te.where(te.eq(a, b), 0.5, te.where(pick(a, b), 1.0, 0.0)))

    def fb(a, b, out, g):
        return mul(g, te.where(te.eq(a, b), 0.5, te.where(pick(a, b), 0.0, 1.0)))

    return fa, fb


_binary("prims.maximum", *_minmax_rule(te.gt))
_binary("prims.minimum", *_minmax_rule(te.lt))
_binary("prims.copysign", lambda a, b, out, g: mul(g, te.where(te.eq(a, 0), 0.0, div(out, a))),
        lambda a, b, out, g: None)


def _where_rule(bsym, g):
    pred, a, b = bsym.args
    ga = te.where(pred, g, 0.0) if isinstance(a, TensorProxy) and a.requires_grad else None
    gb = te.where(pred, 0.0, g) if isinstance(b, TensorProxy) and b.requires_grad else None
    return None, ga, gb


VJP_RULES["prims.where"] = _where_rule


def _convert_rule(bsym, g):
    a = bsym.args[0]
    return (te.to_dtype(g, a.dtype),)


VJP_RULES["prims.convert_element_type"] = _convert_rule


def _device_put_rule(bsym, g):
    from jitcore.ops import prims_elementwise as pe

    a = bsym.args[0]
    return (g if g.device == a.device else pe.device_put(g, a.device),)


VJP_RULES["prims.device_put"] = _device_put_rule


def _bernoulli_tensor_rule(bsym, g):
    """Eager's bernoulli derivative: zeros for the probabilities (the draw is not differentiable)."""
    from jitcore.ops import prims_creation as pc

    prob = bsym.args[0]
    return pc.full(tuple(prob.shape), 0, device=prob.device, dtype=prob.dtype), None


VJP_RULES["prims.bernoulli_tensor"] = _bernoulli_tensor_rule


# -- opaque torch ops: torch.autograd at run time ----------------------------------------------------------------------
def opaque_vjp(bsym, gs):
    """Backward of an opaque torch op: one recorded line that recomputes it with torch.autograd."""
    return opaque_vjp_sym(bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs), list(gs))


def random_opaque_vjp(bsym, *gs):
    """An opaque op that draws random numbers: recomputing it in the backward would draw new numbers (another mask,
    another slope) and advance the generator, so its forward line is always swapped (augment) for one that also
    returns the generator state it started from, and the backward recomputes it from that state."""
    return NotImplemented


def _random_opaque_augment(bsym):
    return with_rng_state_sym, (bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs)), {}, _random_opaque_backward


def _random_opaque_backward(bsym, residuals, *gs):
    (state,) = residuals
    return opaque_vjp_replay_sym(bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs), list(gs), state)


random_opaque_vjp.augment = _random_opaque_augment


# shape, reduction, indexing and nn prims, then torch-level composites: their rows live in files of their own
def _structural_rows():
    from transforms import vjp_rules_composite, vjp_rules_edges, vjp_rules_structural

    vjp_rules_structural.rules(VJP_RULES)
    vjp_rules_composite.rules(VJP_RULES)
    vjp_rules_edges.rules(VJP_RULES)


_structural_rows()
