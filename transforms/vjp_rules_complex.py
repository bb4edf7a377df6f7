"""Transforms (autodiff): VJP rows for the complex prims, in torch's convention (the gradient of a real loss L with
respect to z = x + iy is dL/dx + i dL/dy), and the rule that turns the other rows into complex ones: a row written for
real numbers is g times the derivative; for an op with a complex output that is holomorphic in its inputs, torch's
gradient is g times the derivative's conjugate, which is conj(row(conj(g))) (complex_pullback).
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_elementwise as pe
from transforms.vjp_helpers import VJP_RULES, zeros_like

# rows already in torch's convention for complex values (the ops are not holomorphic: conjugation, parts)
# (prims.abs: |z| with a complex dtype, which a cast makes real; its row is g * sgn(z); var_mean: a real variance, and a
# mean whose row is real-linear, the same either way)
DIRECT = frozenset({"prims.conj", "prims.conj_physical", "prims.complex", "prims.view_as_complex", "prims.real",
                    "prims.imag", "prims.view_as_real", "prims.abs", "prims.var_mean"})


def _conj(x, physical=False):
    if not (isinstance(x, TensorProxy) and x.dtype.is_complex):
        return x
    return pcx.conj_physical(x) if physical else pcx.conj(x)


def conj_tree(x, physical=True):
    """x's complex tensors conjugated (physical: as tensors of their own, so a gradient never carries eager's lazy
    conjugate bit, which eager's gradients do not)."""
    if isinstance(x, (tuple, list)):
        return type(x)(conj_tree(v, physical) for v in x)
    return _conj(x, physical)


def conjugated(bsym) -> bool | None:
    """Whether the line's row is applied conjugated: a complex output, an op holomorphic in its inputs (None: a
    composite with complex and real outputs, differentiated through its decomposition)."""
    if bsym.sym.id in DIRECT:
        return False
    outs = [o.dtype.is_complex for o in bsym.flat_proxy_outs() if isinstance(o, TensorProxy) and o.requires_grad]
    if any(outs) and not all(outs) and not bsym.sym.is_prim:
        return None  # (a composite: its decomposition's lines are differentiated instead)
    if any(outs) and not all(outs):
        raise UnsupportedError("autodiff", f"the gradient of {bsym.sym.id} with both complex and real outputs",
                               hint="compute the complex and the real results with separate ops")
    return any(outs)


def complex_pullback(rule, bsym, gs):
    """The row's gradients where the line has a complex output (holomorphic ops: conj(row(conj(g)))); the row's own
    where every output is real (a real function of complex inputs, |z|, var: its row is written as torch's)."""
    how = conjugated(bsym)
    if how is None:
        return NotImplemented
    if not how:
        return rule(bsym, *gs)
    grads = rule(bsym, *[_conj(g) for g in gs])
    return grads if grads is NotImplemented else conj_tree(grads)


def _as_complex(g, dtype):
    return pe.convert_element_type(g, dtype)


def conj_vjp(bsym, g):
    return (pcx.conj_physical(g),)


def real_vjp(bsym, g):
    return (_as_complex(g, bsym.args[0].dtype),)


def imag_vjp(bsym, g):
    return (pcx.complex_(zeros_like(g), g),)


def view_as_real_vjp(bsym, g):
    return (pcx.view_as_complex(g),)


def view_as_complex_vjp(bsym, g):
    return (pcx.view_as_real(g),)


def complex_vjp(bsym, g):
    return pcx.real(g), pcx.imag(g)


VJP_RULES["prims.conj"] = conj_vjp
VJP_RULES["prims.conj_physical"] = conj_vjp
VJP_RULES["prims.real"] = real_vjp
VJP_RULES["prims.imag"] = imag_vjp
VJP_RULES["prims.view_as_real"] = view_as_real_vjp
VJP_RULES["prims.view_as_complex"] = view_as_complex_vjp
VJP_RULES["prims.complex"] = complex_vjp
