"""Ops: complex prims. conj, real, imag, view_as_real and view_as_complex are views in eager (functionalization
follows writes through them: transforms/functionalize.py); complex(re, im) builds a complex tensor. Their values are
the logical ones: a kernel given a tensor with a lazy conjugate bit computes with it as eager would (view_as_real
resolves it; eager's view_as_real refuses such a tensor, which ltorch.view_as_real checks before recording this).
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ops.registry import prim
from jitcore.ops.utils import check, requires_grad

# complex dtype -> the dtype of its real and imaginary parts, and back
REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}


def _view_as_real(a):
    return torch.view_as_real(a.resolve_conj() if a.is_conj() else a)


def _imag(a):
    """The imaginary parts; of a tensor with the lazy conjugate bit, as a tensor of its own (eager's is a view with the
    lazy negative bit, which a compiled region reading its memory would take for the parts' values)."""
    out = torch.imag(a)
    return out.resolve_neg() if a.is_conj() else out


def _view_as_complex(a):
    """a's pairs as complex numbers: a view where a's layout allows one (eager's rule), else of a contiguous copy (a
    functional program's value may be laid out otherwise than eager's was)."""
    if a.stride(-1) == 1 and a.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in a.stride()[:-1]):
        return torch.view_as_complex(a)
    return torch.view_as_complex(a.contiguous())


def _complex_input(op, a):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected a tensor, got {a!r}")
    check(a.dtype in REAL_OF, lambda: f"prims.{op}: expected a complex tensor, got {a.dtype}")


@prim("prims.conj", kernel=torch.conj)
def conj(a):
    """The complex conjugate of a (eager's lazy conjugate view: torch.conj)."""
    _complex_input("conj", a)
    return a.like(requires_grad=requires_grad(a))


@prim("prims.conj_physical", kernel=torch.conj_physical)
def conj_physical(a):
    """The complex conjugate of a as a tensor of its own (no lazy bit)."""
    _complex_input("conj_physical", a)
    return a.like(requires_grad=requires_grad(a))


@prim("prims.real", kernel=torch.real)
def real(a):
    """The real parts of a complex tensor (a view in eager)."""
    _complex_input("real", a)
    return a.like(dtype=REAL_OF[a.dtype], requires_grad=requires_grad(a))


@prim("prims.imag", kernel=_imag)
def imag(a):
    """The imaginary parts of a complex tensor (a view in eager; of a conjugate view, a negative view)."""
    _complex_input("imag", a)
    return a.like(dtype=REAL_OF[a.dtype], requires_grad=requires_grad(a))


@prim("prims.view_as_real", kernel=_view_as_real)
def view_as_real(a):
    """A complex tensor as a real one with a last dim of 2 (real, imaginary)."""
    _complex_input("view_as_real", a)
    return a.like(shape=(*a._shape, 2), dtype=REAL_OF[a.dtype], requires_grad=requires_grad(a))


@prim("prims.view_as_complex", kernel=_view_as_complex)
def view_as_complex(a):
    """A real tensor whose last dim is 2 as a complex one (pairs (real, imaginary))."""
    check(isinstance(a, TensorProxy), lambda: f"prims.view_as_complex: expected a tensor, got {a!r}")
    check(a.dtype in COMPLEX_OF, lambda: f"prims.view_as_complex: expected a float, double or half tensor, got "
                                         f"{a.dtype}")
    check(a.ndim >= 1 and a.shape[-1] == 2, lambda: f"prims.view_as_complex: the last dim must have size 2, got "
                                                    f"shape {tuple(a.shape)}")
    return a.like(shape=a._shape[:-1], dtype=COMPLEX_OF[a.dtype], requires_grad=requires_grad(a))


@prim("prims.complex", kernel=torch.complex)
def complex_(real, imag):
    """The complex tensor real + imag * 1j (one shape, one float dtype)."""
    check(all(isinstance(x, TensorProxy) and x.dtype in COMPLEX_OF for x in (real, imag)),
          lambda: f"prims.complex: expected float, double or half tensors, got {real!r} and {imag!r}")
    check(real.dtype == imag.dtype and tuple(real.shape) == tuple(imag.shape),
          lambda: f"prims.complex: real and imag must have one dtype and shape, got {real.dtype}{tuple(real.shape)} "
                  f"and {imag.dtype}{tuple(imag.shape)}")
    return real.like(dtype=COMPLEX_OF[real.dtype], requires_grad=requires_grad(real, imag))

