"""Ops: torch-level rearranging and conversion ops: flip/roll/rot90, tril/triu/diagonal/diag, meshgrid, clone/detach/
contiguous, Tensor.to and the dtype shorthands (x.float(), ...), and the x.T / x.mT properties (x.H, x.mH, x.real,
x.imag: torch_complex.py).
Written over the shape, creation and elementwise prims (a triangle is an iota comparison and a where).
"""
from __future__ import annotations

import torch

from jitcore import compat
from jitcore.errors import MetaError
from jitcore.ir import devices
from jitcore.ir.proxies import TensorProxy, register_tensor_property
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops import torch_shape as tsh
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_shape import copy, dim_of, method_adapter, shape_arg, slice_dim
from jitcore.ops.utils import check, is_int

T = torch.Tensor


# -- flips and rotations --------------------------------------------------------------------------------------------
@torchsymbol(torch.flip, id="ltorch.flip")
def flip(input, dims):
    dims = (dims,) if is_int(dims) else tuple(dims)
    dims = tuple(dim_of("flip", d, input.ndim) for d in dims)
    check(len(set(dims)) == len(dims), lambda: f"flip(): dims has duplicates: {dims}")
    if input.ndim == 0 or not dims:
        return copy(input)
    return ps.flip(input, tuple(sorted(dims)))


method_adapter("flip", lambda self, *dims: flip(self, shape_arg(dims)), T.flip)


@torchsymbol(torch.fliplr, T.fliplr, method="fliplr", id="ltorch.fliplr")
def fliplr(input):
    check(input.ndim >= 2, "Input must be >= 2-d.")
    return ps.flip(input, (1,))


@torchsymbol(torch.flipud, T.flipud, method="flipud", id="ltorch.flipud")
def flipud(input):
    check(input.ndim >= 1, "Input must be >= 1-d.")
    return ps.flip(input, (0,))


@torchsymbol(torch.roll, T.roll, method="roll", id="ltorch.roll")
def roll(input, shifts, dims=None):
    shifts = (shifts,) if is_int(shifts) else tuple(shifts)
    if dims is None or dims == () or dims == []:
        check(len(shifts) == 1, lambda: f"roll: shifts {shifts} need dims")
        flat = ps.reshape(input, (input.numel(),))
        return ps.reshape(roll(flat, shifts, 0), tuple(input.shape))
    dims = (dims,) if is_int(dims) else tuple(dims)
    check(input.ndim > 0, "roll: Dimension specified as 0 but tensor has no dimensions")
    check(len(shifts) == len(dims), lambda: f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                                            f"{len(dims)}")
    out = input
    for shift, dim in zip(shifts, dims):
        d = dim_of("roll", dim, input.ndim)
        n = input.shape[d] if input.ndim else 1
        if n == 0 or shift % n == 0:
            continue
        s = shift % n
        out = tsh._cat("roll", [slice_dim(out, d, n - s, n), slice_dim(out, d, 0, n - s)], d)
    return copy(out) if out is input else out


@torchsymbol(torch.rot90, T.rot90, method="rot90", id="ltorch.rot90")
def rot90(input, k=1, dims=(0, 1)):
    dims = tuple(dims)
    check(len(dims) == 2, lambda: f"expected total rotation dims == 2, but got dims = {len(dims)}")
    check(input.ndim >= 2, lambda: f"expected total dims >= 2, but got total dims = {input.ndim}")
    d0, d1 = dim_of("rot90", dims[0], input.ndim), dim_of("rot90", dims[1], input.ndim)
    check(d0 != d1, lambda: f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return tsh._swap("rot90", ps.flip(input, (d1,)), d0, d1)
    if k == 2:
        return ps.flip(input, tuple(sorted((d0, d1))))
    if k == 3:
        return tsh._swap("rot90", ps.flip(input, (d0,)), d0, d1)
    return copy(input)


# -- triangles and diagonals -----------------------------------------------------------------------------------------
def _tri_mask(op, input, diagonal, lower):
    check(input.ndim >= 2, lambda: f"{op}: input tensor must have at least 2 dimensions")
    n, m = input.shape[-2], input.shape[-1]
    rows = ps.reshape(pc.iota(n, start=0, step=1, device=input.device, dtype=torch.int64), (n, 1))
    cols = ps.reshape(pc.iota(m, start=0, step=1, device=input.device, dtype=torch.int64), (1, m))
    diff = te.sub(cols, rows)
    keep = te.le(diff, diagonal) if lower else te.ge(diff, diagonal)
    return te.where(keep, input, to_dtype(0, input.dtype))


@torchsymbol(torch.tril, T.tril, method="tril", id="ltorch.tril")
def tril(input, diagonal=0):
    return _tri_mask("tril", input, diagonal, True)


@torchsymbol(torch.triu, T.triu, method="triu", id="ltorch.triu")
def triu(input, diagonal=0):
    return _tri_mask("triu", input, diagonal, False)


@torchsymbol(torch.diagonal, T.diagonal, method="diagonal", id="ltorch.diagonal")
def diagonal(input, offset=0, dim1=0, dim2=1):
    check(input.ndim >= 2, lambda: f"diagonal(): expected a tensor with at least 2 dims, got {input.ndim}")
    d1, d2 = dim_of("diagonal", dim1, input.ndim), dim_of("diagonal", dim2, input.ndim)
    check(d1 != d2, lambda: f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [i for i in range(input.ndim) if i not in (d1, d2)]
    x = tsh._permute(input, rest + [d1, d2])
    n, m = input.shape[d1], input.shape[d2]
    length = max(0, min(n, m - offset)) if offset >= 0 else max(0, min(n + offset, m))
    start = (offset if offset >= 0 else -offset * m) if length else 0
    batch = tuple(input.shape[i] for i in rest)
    flat = ps.reshape(x, batch + (n * m,))
    end = start + (length - 1) * (m + 1) + 1 if length else 0
    return slice_dim(flat, len(batch), start, end, m + 1) if (start, end, m + 1) != (0, n * m, 1) else copy(flat)


_diagonal = diagonal


@torchsymbol(torch.diag, T.diag, method="diag", id="ltorch.diag")
def diag(input, diagonal=0):
    check(input.ndim in (1, 2), lambda: f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    if input.ndim == 2:
        return _diagonal(input, diagonal)
    n, k = input.shape[0], diagonal
    size = n + abs(k)
    if n == 0:
        return pc.full((size, size), 0, device=input.device, dtype=input.dtype)
    start = k if k >= 0 else -k * size
    hi = size * size - (start + n + (n - 1) * size)
    flat = ps.pad(input, to_dtype(0, input.dtype), ((start, hi, size),))
    return ps.reshape(flat, (size, size))


@torchsymbol(torch.meshgrid, torch.functional._meshgrid, compat.VariableFunctions.meshgrid,
             id="ltorch.meshgrid")
def meshgrid(*tensors, indexing=None):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    indexing = indexing or "ij"
    check(indexing in ("ij", "xy"), lambda: f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", "
                                            f"but received: {indexing}")
    check(len(tensors) > 0, "meshgrid expects a non-empty TensorList")
    for x in tensors:
        if x.ndim > 1:
            raise MetaError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {x.ndim}D")
        check(x.dtype == tensors[0].dtype, "meshgrid expects all tensors to have the same dtype")
    sizes = [x.numel() for x in tensors]
    where = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
        where[0], where[1] = 1, 0
    out = []
    for x, d in zip(tensors, where):
        out.append(ps.broadcast_in_dim(ps.reshape(x, (x.numel(),)), tuple(sizes), (d,)))
    return tuple(out)


# -- copies, detach, conversion ---------------------------------------------------------------------------------------
@torchsymbol(T.contiguous, method="contiguous", id="ltorch.contiguous")
def contiguous(self, *, memory_format=torch.contiguous_format):
    """The input itself, or a copy where eager's layout of it is not contiguous (a later view() sees the copy's
    layout, as in eager)."""
    meta = self.eager_layout()
    if meta is None or meta.is_contiguous(memory_format=memory_format):
        return self
    return copy(self)


@torchsymbol(torch.clone, T.clone, method="clone", id="ltorch.clone")
def clone(input, *, memory_format=torch.preserve_format):
    return copy(input)


@torchsymbol(torch.detach, T.detach, method="detach", id="ltorch.detach")
def detach(input):
    return pm.stop_gradient(input)


def _parse_to(args, kwargs):
    """(dtype, device, copy) from Tensor.to's forms: to(dtype), to(device, dtype), to(other), and keywords."""
    dtype, device, copy_ = kwargs.get("dtype"), kwargs.get("device"), kwargs.get("copy", False)
    args = list(args)
    if args:
        first = args.pop(0)
        if isinstance(first, TensorProxy):
            dtype, device = first.dtype, first.device
        elif isinstance(first, torch.dtype):
            dtype = first
        else:
            device = first
            if args and isinstance(args[0], torch.dtype):
                dtype = args.pop(0)
        if len(args) >= 2:  # non_blocking, copy
            copy_ = args[1]
    return dtype, device, copy_


@torchsymbol(T.to, method="to", id="ltorch.to")
def to(self, *args, **kwargs):
    dtype, device, copy_ = _parse_to(args, kwargs)
    out = self
    if device is not None and devices.to_device(device) != self.device:
        out = pe.device_put(out, devices.to_device(device))
    if dtype is not None:
        out = to_dtype(out, dtype)
    return copy(out) if copy_ and out is self else out


@torchsymbol(T.type_as, method="type_as", id="ltorch.type_as")
def type_as(self, other):
    return to_dtype(self, other.dtype)


def _shorthand(op_id, dtype):
    name = op_id.removeprefix("ltorch.")

    def body(self, *, memory_format=torch.preserve_format):
        return to_dtype(self, dtype)

    body.__name__ = name
    return torchsymbol(getattr(T, name), method=name, id=op_id)(body)


to_float = _shorthand("ltorch.float", torch.float32)
to_double = _shorthand("ltorch.double", torch.float64)
to_half = _shorthand("ltorch.half", torch.float16)
to_bfloat16 = _shorthand("ltorch.bfloat16", torch.bfloat16)
to_int = _shorthand("ltorch.int", torch.int32)
to_long = _shorthand("ltorch.long", torch.int64)
to_short = _shorthand("ltorch.short", torch.int16)
to_char = _shorthand("ltorch.char", torch.int8)
to_byte = _shorthand("ltorch.byte", torch.uint8)
to_bool = _shorthand("ltorch.bool", torch.bool)


# -- properties: x.T, x.mT, x.H, x.mH --------------------------------------------------------------------------------
@torchsymbol(id="ltorch.T")
def permute_reversed(input):
    """x.T: every dim reversed."""
    return tsh._permute(input, tuple(reversed(range(input.ndim))))


@torchsymbol(id="ltorch.mT")
def matrix_transpose(input):
    """x.mT: the last two dims swapped (0-d: the identity, deprecated in torch)."""
    if input.ndim == 0:
        return input
    check(input.ndim >= 2, lambda: f"tensor.mT is only supported on matrices or batches of matrices. Got "
                                   f"{input.ndim}-D tensor.")
    return tsh._swap("mT", input, -2, -1)


@torchsymbol(id="ltorch.data")
def data(input):
    """x.data: x's memory without its autograd history, as detach(), but with a version counter of its own (eager's
    writes through it do not move x's: transforms/write_history.py)."""
    return pm.stop_gradient(input)


for _name, _fn in {"T": permute_reversed, "mT": matrix_transpose, "data": data}.items():
    register_tensor_property(_name, _fn)
if hasattr(torch.Tensor, "names"):  # (named tensors, in the releases that still have them: 2.10-2.11; a named
    # input is refused, jitcore/frontend/tracing.py, so every tensor of a trace is unnamed)
    register_tensor_property("names", lambda a: (None,) * a.ndim)
