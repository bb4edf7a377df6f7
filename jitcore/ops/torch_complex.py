"""Ops: torch-level complex views: conj, real, imag, view_as_real, view_as_complex, x.H / x.mH / adjoint, resolve_conj,
resolve_neg, conj_physical, and the lazy conjugate / negative bits eager's tensors carry (lazy_bits: derived from the
lines that made a tensor, an input's read from the tensor passed, guarded). Over the complex prims (prims_complex.py),
which functionalization follows writes through; `z.real = v` writes through the view (z.real.copy_(v)).
"""
from __future__ import annotations

import torch

from jitcore.ir.context import services
from jitcore.ir.proxies import TensorProxy, register_tensor_property
from jitcore.ir.symbol import is_eager_view, viewed_tensor
from jitcore.ir.trace import get_tracectx
from jitcore.ops import prims_complex as pcx
from jitcore.ops import torch_elementwise as te
from jitcore.ops import torch_shape as tsh
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_layout import detach, matrix_transpose, permute_reversed
from jitcore.ops.utils import broadcast_shapes, check

T = torch.Tensor


# -- the lazy bits: eager's x.is_conj() / x.is_neg() of a tensor the program holds ------------------------------------
def _maker(trace, name):
    for scope in reversed(trace._scopes):
        for b in reversed(scope):
            if any(o.name == name for o in b.flat_proxy_outs()):
                return b
    return None


def lazy_bits(x: TensorProxy) -> tuple[bool, bool]:
    """(x.is_conj(), x.is_neg()) as eager's tensor has them: an input's are the tensor's own (read and guarded by the
    frontend); a view keeps its input's (conj, x.H flip the conjugate bit; imag of a conjugate view is a negative
    view); any other op makes a tensor without them."""
    got = services().input_bit(x, "is_conj")
    if got is not None:
        return got, services().input_bit(x, "is_neg")
    trace = get_tracectx()
    b = _maker(trace, x.name) if trace is not None else None
    if b is None or not (is_eager_view(b) or b.sym.id == detach.id):  # (a reshape that copied: no bits)
        return False, False
    source = viewed_tensor(b)
    if source is None:
        return False, False
    c, n = lazy_bits(source)
    rule = _BIT_RULES.get(b.sym.id)
    return rule(c, n) if rule is not None else (c, n)


# -- the ops ---------------------------------------------------------------------------------------------------------
@torchsymbol(torch.conj, T.conj, method="conj", id="ltorch.conj")
def conj(input):
    """The conjugate (a view in eager, with the conjugate bit flipped); a real tensor itself."""
    return pcx.conj(input) if input.dtype.is_complex else input


@torchsymbol(torch.real, id="ltorch.real")
def real(input):
    """x.real: the real parts (a view); a real tensor itself (eager gives the same tensor)."""
    return pcx.real(input) if input.dtype.is_complex else input


@torchsymbol(torch.imag, id="ltorch.imag")
def imag(input):
    """x.imag: the imaginary parts (a view); of a real tensor, eager's error (jitcore/compat.py knows its type)."""
    if not input.dtype.is_complex:
        _ = torch.empty(0, dtype=input.dtype, device="meta").imag  # raises eager's error (its type changed in 2.15)
        raise AssertionError("torch gave x.imag of a real tensor")
    return pcx.imag(input)


@torchsymbol(torch.view_as_real, id="ltorch.view_as_real")
def view_as_real(input):
    check(input.dtype.is_complex, "view_as_real is only supported for complex tensors")
    conjugated = services().records_user_code and lazy_bits(input)[0]  # (eager's bits: only of the user's tensors)
    check(not conjugated, "view_as_real doesn't work on unresolved conjugated tensors.  To resolve the "
          "conjugate tensor so you can view it as real, use self.resolve_conj(); however, be warned that the resulting "
          "tensor will NOT alias the original.")
    return pcx.view_as_real(input)


@torchsymbol(torch.view_as_complex, id="ltorch.view_as_complex")
def view_as_complex(input):
    check(input.dtype in pcx.COMPLEX_OF, lambda: f"view_as_complex is only supported for half, float and double "
          f"tensors, but got a tensor of scalar type: {_scalar_name(input.dtype)}")
    check(input.ndim >= 1 and input.shape[-1] == 2, "Tensor must have a last dimension of size 2")
    meta = input.eager_layout()
    if meta is not None:  # eager's layout rules (last stride 1, even strides and offset): its own error
        torch.view_as_complex(meta)
    return pcx.view_as_complex(input)


@torchsymbol(torch.complex, id="ltorch.complex")
def complex_(real, imag, *, out=None):
    """real + imag * 1j (one float dtype, broadcast)."""
    check(out is None, "torch.complex: out= is not supported")
    check(real.dtype in pcx.COMPLEX_OF and imag.dtype in pcx.COMPLEX_OF, lambda: f"Expected both inputs to be Half, "
          f"Float or Double tensors but got {_scalar_name(real.dtype)} and {_scalar_name(imag.dtype)}")
    check(real.dtype == imag.dtype, lambda: f"Expected object of scalar type {_scalar_name(real.dtype)} but got "
                                            f"scalar type {_scalar_name(imag.dtype)} for second argument")
    shape = broadcast_shapes("complex", real.shape, imag.shape)
    return pcx.complex_(te.expand_to(real, shape), te.expand_to(imag, shape))


def _scalar_name(dtype) -> str:
    return {torch.float16: "Half", torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16",
            torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte"}.get(dtype, str(dtype))


@torchsymbol(id="ltorch.H")
def adjoint_2d(input):
    """x.H: the conjugate transpose of a matrix (a view)."""
    check(input.ndim in (0, 2), lambda: f"tensor.H is only supported on matrices (2-D tensors). Got {input.ndim}-D "
          "tensor." + (" For batches of matrices, consider using tensor.mH" if input.ndim > 2 else ""))
    return conj_view(permute_reversed(input))


@torchsymbol(id="ltorch.mH")
def matrix_adjoint(input):
    """x.mH: the conjugate transpose of the last two dims (a view)."""
    check(input.ndim >= 2 or input.ndim == 0, lambda: f"tensor.mH is only supported on matrices or batches of "
                                                      f"matrices. Got {input.ndim}-D tensor.")  # (0-d: deprecated)
    return conj_view(matrix_transpose(input))


def conj_view(a):
    return pcx.conj(a) if a.dtype.is_complex else a


@torchsymbol(torch.resolve_conj, T.resolve_conj, method="resolve_conj", id="ltorch.resolve_conj")
def resolve_conj(input):
    """The same values without the lazy conjugate bit: a copy where eager's tensor has it, else the tensor itself."""
    return tsh.copy(input) if lazy_bits(input)[0] else input


@torchsymbol(torch.resolve_neg, T.resolve_neg, method="resolve_neg", id="ltorch.resolve_neg")
def resolve_neg(input):
    return tsh.copy(input) if lazy_bits(input)[1] else input


@torchsymbol(torch.conj_physical, T.conj_physical, method="conj_physical", id="ltorch.conj_physical")
def conj_physical(input):
    """The conjugate as a new tensor; a real tensor itself."""
    return pcx.conj_physical(input) if input.dtype.is_complex else input


for _name, _fn in {"H": adjoint_2d, "mH": matrix_adjoint, "real": real, "imag": imag}.items():
    register_tensor_property(_name, _fn)


# op id -> how its output's (is_conj, is_neg) follow from its input's: a view keeps them; these change them
_BIT_RULES = {
    **{op.id: lambda c, n: (not c, n) for op in (conj, adjoint_2d, matrix_adjoint, tsh.adjoint)},
    real.id: lambda c, n: (False, n),
    imag.id: lambda c, n: (False, c != n),
    view_as_real.id: lambda c, n: (False, n),
    view_as_complex.id: lambda c, n: (False, n),
}
