"""Ops: torch-level shape ops (reshape/view, permute/transpose, squeeze/unsqueeze, expand/repeat, cat/stack, split/
chunk, flip/roll, tril/diagonal, dtype/device conversion). They resolve -1 sizes, negative dims and torch's
varargs-or-tuple forms, then call the strict shape prims. Method forms (`x.view(2, 3)`) normalize their arguments.
"""
from __future__ import annotations

import itertools
import math

import torch

from jitcore import compat
from jitcore.errors import MetaError
from jitcore.ir import arith, dtypes
from jitcore.ir.proxies import NumberProxy, TensorProxy, canonical_dim
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_python as pp
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_map import TORCH_MAP, register_method
from jitcore.ops.utils import check, is_int, same_size, slice_indices

T = torch.Tensor


# -- helpers -------------------------------------------------------------------------------------------------------
def method_adapter(name, fn, *torch_fns):
    """`tensor.<name>(...)` (and the given Tensor callables) call fn(tensor, ...): for varargs-or-tuple methods."""
    register_method(name, fn)
    for f in torch_fns:
        TORCH_MAP.setdefault(f, fn)


def shape_arg(args) -> tuple:
    """torch's `*size` convention: f(2, 3) or f((2, 3)) or f(torch.Size([2, 3]))."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def dim_of(op, dim, rank, *, extra=0) -> int:
    """A canonical dim of a rank-`rank` tensor (extra=1 for ops that may address one past the end, unsqueeze)."""
    try:
        return canonical_dim(dim, rank + extra)
    except IndexError as e:
        raise MetaError(f"{op}(): {e}") from None
    except TypeError:
        raise MetaError(f"{op}(): dim must be an int, got {dim!r}") from None


def infer_size(op, shape, numel) -> tuple:
    """shape with one -1 resolved so that it holds numel elements."""
    shape = tuple(shape)
    holes = [i for i, s in enumerate(shape) if s == -1]
    check(len(holes) <= 1, f"{op}(): only one dimension can be inferred")
    check(all(s >= -1 for s in shape), lambda: f"{op}(): invalid shape dimension in {list(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if holes:
        check(known != 0 and numel % known == 0,
              lambda: f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = shape[:holes[0]] + (numel // known,) + shape[holes[0] + 1:]
    check(math.prod(shape) == numel, lambda: f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def size_max(a, b):
    """max(a, b) of sizes/bounds: a recorded `max(a, b)` when one is symbolic (no predicate on which is larger)."""
    if isinstance(a, NumberProxy) or isinstance(b, NumberProxy):
        if arith.implied(">=", b, a):  # decided by the bounds (a run-time size is >= 0): no max to record
            return b
        if arith.implied(">=", a, b):
            return a
        return pp.call("max", a, b)
    return max(a, b)


def slice_dim(a, dim, start, end, step=1):
    """a[..., start:end:step, ...] at dim (0 <= start <= end <= size); a itself when that is everything."""
    if same_shape((start, end, step), (0, a.shape[dim], 1)):  # asked of the expressions: no predicate
        return a
    starts, ends, steps = [0] * a.ndim, list(a.shape), [1] * a.ndim
    starts[dim], ends[dim], steps[dim] = start, end, step
    return ps.slice_prim(a, starts, ends, steps)


def same_shape(s, t) -> bool:
    """Whether two shapes are the same expressions, asked without recording a predicate: a symbolic size equal to
    another only for this call's values (i0 == i1 == 2) reads as different (a reshape to it is then a no-op view)."""
    s, t = tuple(s), tuple(t)
    return len(s) == len(t) and all(same_size(a, b) for a, b in zip(s, t))


def _reshape(a, shape):
    return a if same_shape(shape, a.shape) else ps.reshape(a, tuple(shape))


def _permute(a, perm):
    return a if tuple(perm) == tuple(range(a.ndim)) else ps.transpose(a, tuple(perm))


def copy(a):
    """A new tensor with a's values (clone)."""
    return pe.convert_element_type(a, a.dtype)


def _reshape_or_copy(a, shape):
    """reshape/flatten/ravel: a view where eager's layout of `a` allows one, else a reshaped copy, as eager decides
    (a write into the result reaches `a` only in the first case; the layout's inputs are guarded)."""
    if not same_shape(shape, a.shape):
        meta = a.eager_layout()
        if meta is not None:
            if not meta.is_contiguous():  # (a contiguous tensor is viewed as any shape)
                arith.unit_sizes(shape)
            try:
                meta.view(tuple(s.value if hasattr(s, "expr") else s for s in shape))
            except RuntimeError:
                a = copy(a)
    return _reshape(a, shape)


def fresh(outs, *inputs) -> tuple:
    """A multi-output op's outputs, with copies where an output would be one of its inputs (a tuple of inputs is
    not a passthrough the trace can skip)."""
    return tuple(copy(o) if any(o is i for i in inputs) else o for o in outs)


# -- reshape and views -------------------------------------------------------------------------------------------
@torchsymbol(torch.reshape, id="ltorch.reshape")
def reshape(input, shape):
    return _reshape_or_copy(input, infer_size("reshape", shape, input.numel()))


method_adapter("reshape", lambda self, *shape: reshape(self, shape_arg(shape)), T.reshape)


@torchsymbol(T.view, method="view", id="ltorch.view")
def view(self, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return opaque_symbol(T.view)(self, shape[0])
    shape = infer_size("view", shape_arg(shape), self.numel())
    check_view(self, shape)
    return _reshape(self, shape)


def check_view(a, shape):
    """Raise eager's RuntimeError when a's strides (as eager lays a out) cannot be viewed as `shape` without a copy;
    nothing when a's layout is not known (a reshape, which the program runs, gives the same values)."""
    meta = a.eager_layout()
    if meta is not None:
        if not meta.is_contiguous():
            arith.unit_sizes(shape)
        meta.view(tuple(s.value if hasattr(s, "expr") else s for s in shape))


@torchsymbol(T.view_as, method="view_as", id="ltorch.view_as")
def view_as(self, other):
    check_view(self, other.shape)
    return _reshape(self, other.shape)


@torchsymbol(T.reshape_as, method="reshape_as", id="ltorch.reshape_as")
def reshape_as(self, other):
    return _reshape_or_copy(self, other.shape)


@torchsymbol(torch.flatten, T.flatten, method="flatten", id="ltorch.flatten")
def flatten(input, start_dim=0, end_dim=-1):
    s, e = dim_of("flatten", start_dim, input.ndim), dim_of("flatten", end_dim, input.ndim)
    if input.ndim == 0:
        return _reshape(input, (1,))
    check(s <= e, "flatten() has invalid args: start_dim cannot come after end_dim")
    shape = tuple(input.shape)
    return _reshape_or_copy(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


@torchsymbol(torch.ravel, T.ravel, method="ravel", id="ltorch.ravel")
def ravel(input):
    return _reshape_or_copy(input, (input.numel(),))


@torchsymbol(torch.unflatten, T.unflatten, method="unflatten", id="ltorch.unflatten")
def unflatten(input, dim, sizes):
    check(input.ndim > 0, "unflatten: Dimension specified as 0 but tensor has no dimensions")
    d = dim_of("unflatten", dim, input.ndim)
    check(len(sizes) > 0, "unflatten: sizes must be non-empty")
    sizes = infer_size("unflatten", sizes, input.shape[d] if input.ndim else 1)
    shape = tuple(input.shape)
    return _reshape(input, shape[:d] + sizes + shape[d + 1:])


@torchsymbol(torch.squeeze, T.squeeze, method="squeeze", id="ltorch.squeeze")
def squeeze(input, dim=None):
    if dim is None:
        dims = tuple(i for i, s in enumerate(input.shape) if s == 1)
    else:
        dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        dims = tuple(dim_of("squeeze", d, input.ndim) for d in dims)
        check(len(set(dims)) == len(dims), lambda: f"squeeze(): dim {dims} appears multiple times in the list of dims")
        dims = tuple(d for d in dims if input.ndim and input.shape[d] == 1)
    return ps.squeeze(input, tuple(sorted(set(dims)))) if dims else input


@torchsymbol(torch.unsqueeze, T.unsqueeze, method="unsqueeze", id="ltorch.unsqueeze")
def unsqueeze(input, dim):
    d = dim_of("unsqueeze", dim, input.ndim, extra=1)
    shape = tuple(input.shape)
    return ps.reshape(input, shape[:d] + (1,) + shape[d:])


@torchsymbol(torch.permute, method=(), id="ltorch.permute")
def permute(input, dims):
    dims = tuple(dims)
    check(len(dims) == input.ndim, lambda: f"permute(sparse_coo): number of dimensions in the tensor input does not "
                                           f"match the length of the desired ordering of dimensions i.e. input.dim() "
                                           f"= {input.ndim} is not equal to len(dims) = {len(dims)}")
    perm = tuple(dim_of("permute", d, input.ndim) for d in dims)
    check(len(set(perm)) == len(perm), lambda: f"permute(): duplicate dims are not allowed: {dims}")
    return _permute(input, perm)


def _permute_method(self, *dims):
    if not dims:
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    return permute(self, shape_arg(dims))


method_adapter("permute", _permute_method, T.permute)


def _swap(op, a, d0, d1):
    if a.ndim == 0:
        dim_of(op, d0, 0), dim_of(op, d1, 0)
        return a
    d0, d1 = dim_of(op, d0, a.ndim), dim_of(op, d1, a.ndim)
    perm = list(range(a.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute(a, perm)


@torchsymbol(torch.transpose, T.transpose, method="transpose", id="ltorch.transpose")
def transpose(input, dim0, dim1):
    return _swap("transpose", input, dim0, dim1)


@torchsymbol(torch.swapaxes, T.swapaxes, method="swapaxes", id="ltorch.swapaxes")
def swapaxes(input, axis0, axis1):
    return _swap("swapaxes", input, axis0, axis1)


@torchsymbol(torch.swapdims, T.swapdims, method="swapdims", id="ltorch.swapdims")
def swapdims(input, dim0, dim1):
    return _swap("swapdims", input, dim0, dim1)


@torchsymbol(torch.t, T.t, method="t", id="ltorch.t")
def t(input):
    check(input.ndim <= 2, lambda: f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _swap("t", input, 0, -1) if input.ndim == 2 else input


@torchsymbol(torch.adjoint, T.adjoint, method="adjoint", id="ltorch.adjoint")
def adjoint(input):
    """The conjugate transpose of the last two dims (a view; conjugated lazily, as eager)."""
    check(input.ndim >= 2 or input.ndim == 0,
          "tensor.adjoint() is only supported on matrices or batches of matrices. Got 1-D tensor.")
    out = _swap("adjoint", input, -2, -1) if input.ndim else input
    return pcx.conj(out) if out.dtype.is_complex else out


@torchsymbol(torch.movedim, T.movedim, torch.moveaxis, T.moveaxis, method=("movedim", "moveaxis"), id="ltorch.movedim")
def movedim(input, source, destination):
    src = (source,) if is_int(source) else tuple(source)
    dst = (destination,) if is_int(destination) else tuple(destination)
    check(len(src) == len(dst), lambda: f"movedim: Invalid source or destination dims: source ({list(src)} dims) "
                                        f"should contain the same number of dims as destination ({list(dst)} dims)")
    src = tuple(dim_of("movedim", d, input.ndim) for d in src)
    dst = tuple(dim_of("movedim", d, input.ndim) for d in dst)
    check(len(set(src)) == len(src) and len(set(dst)) == len(dst), "movedim: repeated dim in source or destination")
    if input.ndim == 0:
        return input
    perm = [-1] * input.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(input.ndim) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return _permute(input, perm)


# -- expand, repeat ----------------------------------------------------------------------------------------------
def _expand(op, a, sizes):
    sizes = tuple(sizes)
    check(len(sizes) >= a.ndim, lambda: f"{op}: the number of sizes provided ({len(sizes)}) must be greater or equal "
                                        f"to the number of dimensions in the tensor ({a.ndim})")
    offset, shape = len(sizes) - a.ndim, []
    for i, s in enumerate(sizes):
        if i < offset and s < 0:
            raise MetaError(f"{op}: -1 is not allowed in a leading, non-existing dimension {i}")
        if i >= offset:
            cur = a.shape[i - offset]
            s = cur if s == -1 else s
            if not same_size(cur, s) and cur != 1 and cur != s:
                raise MetaError(f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at "
                                f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: "
                                f"{list(a.shape)}")
        shape.append(s)
    return te.expand_to(a, tuple(shape))


@torchsymbol(T.expand, method="expand", id="ltorch.expand")
def expand(self, *sizes):
    return _expand("expand", self, shape_arg(sizes))


@torchsymbol(T.expand_as, method="expand_as", id="ltorch.expand_as")
def expand_as(self, other):
    return _expand("expand_as", self, other.shape)


@torchsymbol(torch.broadcast_to, T.broadcast_to, method="broadcast_to", id="ltorch.broadcast_to")
def broadcast_to(input, size):
    return _expand("broadcast_to", input, size)


@torchsymbol(torch.broadcast_tensors, id="ltorch.broadcast_tensors")
def broadcast_tensors(*tensors):
    # (an input already of the broadcast shape comes out as a copy here, eager's view of it: an op's output that is
    # its own input would make the line its maker)
    return fresh(te.broadcast(*tensors, op="broadcast_tensors"), *tensors)


@torchsymbol(T.repeat, method="repeat", id="ltorch.repeat")
def repeat(self, *sizes):
    sizes = shape_arg(sizes)
    check(len(sizes) >= self.ndim, "Number of dimensions of repeat dims can not be smaller than number of dimensions "
                                   "of tensor")
    check(all(s >= 0 for s in sizes), lambda: f"repeat: repeats cannot be negative, got {list(sizes)}")
    shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
    x = _reshape(self, shape)
    wide = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    x = ps.broadcast_in_dim(x, wide, tuple(range(1, 2 * len(shape), 2)))
    return ps.reshape(x, tuple(r * s for r, s in zip(sizes, shape)))


@torchsymbol(torch.tile, T.tile, method="tile", id="ltorch.tile")
def tile(input, dims):
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


# -- joining -------------------------------------------------------------------------------------------------------
def _cat(op, tensors, dim):
    tensors = list(tensors)
    check(len(tensors) > 0, lambda: f"{op}(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if not isinstance(x, TensorProxy):
            raise MetaError(f"{op}(): expected Tensors, got {type(x).__name__} at {i}")
        if x.ndim == 0:
            raise MetaError(f"{op}(): zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = tensors[0].dtype if len(tensors) == 1 else _promote_all(tensors)
    kept = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)] or tensors[:1]
    d = dim_of(op, dim, kept[0].ndim)
    ref = kept[0].shape
    for i, x in enumerate(kept):
        if x.ndim != len(ref):
            raise MetaError(f"{op}(): Tensors must have same number of dimensions: got {len(ref)} and {x.ndim}")
        for j in range(len(ref)):
            if j != d and x.shape[j] != ref[j]:
                raise MetaError(f"{op}(): Sizes of tensors must match except in dimension {d}. Expected size "
                                f"{ref[j]} but got size {x.shape[j]} for tensor number {i} in the list.")
    return ps.cat([to_dtype(x, dtype) for x in kept], d)


def _promote_all(tensors):
    out = tensors[0].dtype
    for x in tensors[1:]:
        out = torch.promote_types(out, x.dtype)
    return out


@torchsymbol(torch.cat, torch.concat, id="ltorch.cat")
def cat(tensors, dim=0):
    return _cat("cat", tensors, dim)


@torchsymbol(torch.concatenate, id="ltorch.concatenate")
def concatenate(tensors, axis=0):
    return _cat("concatenate", tensors, axis)


@torchsymbol(torch.stack, id="ltorch.stack")
def stack(tensors, dim=0):
    tensors = list(tensors)
    check(len(tensors) > 0, "stack expects a non-empty TensorList")
    shape = tuple(tensors[0].shape)
    for i, x in enumerate(tensors):
        if tuple(x.shape) != shape:
            raise MetaError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                            f"{list(x.shape)} at entry {i}")
    d = dim_of("stack", dim, len(shape), extra=1)
    return _cat("stack", [ps.reshape(x, shape[:d] + (1,) + shape[d:]) for x in tensors], d)


def _atleast(op, n, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
        return fresh([_atleast(op, n, (x,)) for x in tensors], *tensors)
    if len(tensors) != 1:
        return fresh([_atleast(op, n, (x,)) for x in tensors], *tensors)
    x = tensors[0]
    if x.ndim >= n:
        return x
    shape = {0: (1,) * n, 1: (1, x.numel()) if n >= 2 else (x.numel(),), 2: tuple(x.shape)}[x.ndim]
    shape = shape + (1,) * (n - len(shape)) if n == 3 else shape
    return ps.reshape(x, shape)


@torchsymbol(torch.atleast_1d, compat.VariableFunctions.atleast_1d, id="ltorch.atleast_1d")
def atleast_1d(*tensors):
    return _atleast("atleast_1d", 1, tensors)


@torchsymbol(torch.atleast_2d, compat.VariableFunctions.atleast_2d, id="ltorch.atleast_2d")
def atleast_2d(*tensors):
    return _atleast("atleast_2d", 2, tensors)


@torchsymbol(torch.atleast_3d, compat.VariableFunctions.atleast_3d, id="ltorch.atleast_3d")
def atleast_3d(*tensors):
    return _atleast("atleast_3d", 3, tensors)


@torchsymbol(torch.hstack, id="ltorch.hstack")
def hstack(tensors):
    ts = _atleast("hstack", 1, (list(tensors),))
    return _cat("hstack", ts, 0 if ts[0].ndim == 1 else 1)


@torchsymbol(torch.vstack, torch.row_stack, id="ltorch.vstack")
def vstack(tensors):
    return _cat("vstack", _atleast("vstack", 2, (list(tensors),)), 0)


@torchsymbol(torch.dstack, id="ltorch.dstack")
def dstack(tensors):
    return _cat("dstack", _atleast("dstack", 3, (list(tensors),)), 2)


@torchsymbol(torch.column_stack, id="ltorch.column_stack")
def column_stack(tensors):
    ts = [ps.reshape(x, (x.numel(), 1)) if x.ndim <= 1 else x for x in tensors]
    return _cat("column_stack", ts, 1)


# -- splitting -----------------------------------------------------------------------------------------------------
def _split_sizes(op, a, d, sizes):
    n = a.shape[d]
    check(sum(sizes) == n and all(s >= 0 for s in sizes),
          lambda: f"{op}(): split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                  f"dimension {d}), but got split_sizes={list(sizes)}")
    out, start = [], 0
    for s in sizes:
        out.append(slice_dim(a, d, start, start + s))
        start += s
    return fresh(out, a)


@torchsymbol(torch.split, id="ltorch.split")
def split(tensor, split_size_or_sections, dim=0):
    check(tensor.ndim > 0, "split(): dim 0 out of range: a 0-d tensor cannot be split")
    d = dim_of("split", dim, tensor.ndim)
    n = tensor.shape[d]
    if is_int(split_size_or_sections):
        s = split_size_or_sections
        check(s > 0 or (n == 0 and s == 0),
              lambda: f"split(): split_size can only be 0 if dimension size is 0, but got "
                      f"dimension size of {n}")
        count = max(-(-n // s), 1) if s else 1
        sizes = [s] * (count - 1) + [n - s * (count - 1)]
    else:
        sizes = list(split_size_or_sections)
    return _split_sizes("split", tensor, d, sizes)


method_adapter("split", lambda self, split_size, dim=0: split(self, split_size, dim), T.split)


@torchsymbol(T.split_with_sizes, torch.split_with_sizes, method="split_with_sizes", id="ltorch.split_with_sizes")
def split_with_sizes(self, split_sizes, dim=0):
    check(self.ndim > 0, "split_with_sizes(): a 0-d tensor cannot be split")
    return _split_sizes("split_with_sizes", self, dim_of("split_with_sizes", dim, self.ndim), list(split_sizes))


@torchsymbol(torch.chunk, T.chunk, method="chunk", id="ltorch.chunk")
def chunk(input, chunks, dim=0):
    check(input.ndim > 0, "chunk expects at least a 1-dimensional tensor")
    check(chunks > 0, lambda: f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = dim_of("chunk", dim, input.ndim)
    n = input.shape[d]
    size = -(-n // chunks)
    if n == 0:
        return _split_sizes("chunk", input, d, [0] * chunks)
    return split(input, size, d)


@torchsymbol(torch.tensor_split, T.tensor_split, method="tensor_split", id="ltorch.tensor_split")
def tensor_split(input, indices_or_sections, dim=0):
    check(input.ndim > 0, lambda: "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    d = dim_of("tensor_split", dim, input.ndim)
    n = input.shape[d]
    if isinstance(indices_or_sections, TensorProxy):
        t = indices_or_sections
        check(t.dtype is torch.int64 and t.ndim <= 1, lambda: "tensor_split expected tensor_indices_or_sections to be "
              f"a zero-dimensional or one-dimensional tensor with dtype long, but got {t.dtype} of {t.ndim} dims")
        if t.ndim == 0:  # a number of sections: its value (guarded) decides how many pieces there are
            return tensor_split(input, int(t), dim)
        return fresh(_split_at(input, d, t), input)
    if is_int(indices_or_sections):
        k = indices_or_sections
        check(k > 0, lambda: f"number of sections must be larger than 0, got {k}")
        # piece i holds the j < n with j % k == i: (n - i + k - 1) // k of them (symbolic sizes stay symbolic)
        sizes = [(n - i + k - 1) // k for i in range(k)]
        bounds = [sum(sizes[:i]) for i in range(k + 1)]
        pieces = list(itertools.pairwise(bounds))
    else:
        idx = [0] + list(indices_or_sections) + [n]
        pieces = []
        for lo, hi in itertools.pairwise(idx):  # Python slicing, like numpy.array_split
            s, e, _ = slice_indices(slice(lo, hi), n)
            pieces.append((s, size_max(s, e)))
    return fresh([slice_dim(input, d, s, e) for s, e in pieces], input)


def _split_at(input, d, indices):
    """The pieces of input between the split points a tensor holds: each piece's length is known only at run time
    (prims.item_as_size), its entries taken by index (Python slicing: negative points count from the end)."""
    n = input.shape[d]
    points = [ps.reshape(slice_dim(indices, 0, i, i + 1), ()) for i in range(indices.shape[0])]

    def clamp(p):  # p (a 0-dim tensor) as a slice bound in [0, n]
        return te.clamp(te.where(te.lt(p, 0), te.add(p, n), p), 0, n)

    bounds = [None, *(clamp(p) for p in points), None]
    pieces = []
    for lo, hi in itertools.pairwise(bounds):
        lo_t = lo if lo is not None else pc.full((), 0, device=input.device, dtype=torch.int64)
        hi_t = hi if hi is not None else pc.full((), n, device=input.device, dtype=torch.int64)
        length = pm.item_as_size(te.clamp(te.sub(hi_t, lo_t), 0, None))
        where = te.add(pc.iota(length, start=0, step=1, device=input.device, dtype=torch.int64), lo_t)
        pieces.append(pi.take(input, where, d))
    return pieces


def _section_split(op, input, indices_or_sections, dim):
    if is_int(indices_or_sections):
        n = input.shape[dim]
        check(indices_or_sections != 0 and n % indices_or_sections == 0,
              lambda: f"torch.{op} attempted to split along dimension {dim}, but the size of the dimension {n} is not "
                      f"divisible by the split_size {indices_or_sections}!")
    return tensor_split(input, indices_or_sections, dim)


@torchsymbol(torch.hsplit, T.hsplit, method="hsplit", id="ltorch.hsplit")
def hsplit(input, indices_or_sections):
    check(input.ndim >= 1, "torch.hsplit requires a tensor with at least 1 dimension")
    return _section_split("hsplit", input, indices_or_sections, 1 if input.ndim > 1 else 0)


@torchsymbol(torch.vsplit, T.vsplit, method="vsplit", id="ltorch.vsplit")
def vsplit(input, indices_or_sections):
    check(input.ndim >= 2, lambda: f"torch.vsplit requires a tensor with at least 2 dimension, but got a tensor with "
                                   f"{input.ndim} dimensions!")
    return _section_split("vsplit", input, indices_or_sections, 0)


@torchsymbol(torch.dsplit, T.dsplit, method="dsplit", id="ltorch.dsplit")
def dsplit(input, indices_or_sections):
    check(input.ndim >= 3, lambda: f"torch.dsplit requires a tensor with at least 3 dimension, but got a tensor with "
                                   f"{input.ndim} dimensions!")
    return _section_split("dsplit", input, indices_or_sections, 2)


@torchsymbol(torch.select, T.select, method="select", id="ltorch.select")
def select(input, dim, index):
    check(input.ndim > 0, "select() cannot be applied to a 0-dim tensor.")
    d = dim_of("select", dim, input.ndim)
    n = input.shape[d]
    check(-n <= index < n, lambda: f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
                                   f"dimension {d}")
    index %= n
    return ps.squeeze(slice_dim(input, d, index, index + 1), (d,))


@torchsymbol(torch.unbind, T.unbind, method="unbind", id="ltorch.unbind")
def unbind(input, dim=0):
    check(input.ndim > 0, "Dimension specified as 0 but tensor has no dimensions")
    d = dim_of("unbind", dim, input.ndim)
    return tuple(ps.squeeze(slice_dim(input, d, i, i + 1), (d,)) for i in range(input.shape[d]))


@torchsymbol(torch.narrow, T.narrow, method="narrow", id="ltorch.narrow")
def narrow(input, dim, start, length):
    check(input.ndim > 0, "narrow() cannot be applied to a 0-dim tensor.")
    d = dim_of("narrow", dim, input.ndim)
    n = input.shape[d]
    if isinstance(start, TensorProxy):  # the values start where the tensor says; the shape is still static
        check(start.ndim == 0 and dtypes.category(start.dtype) == 1,
              "narrow(): start must be a 0-dim integral Tensor or an int")
        check(0 <= length <= n, lambda: f"narrow(): length ({length}) exceeds dimension size ({n}).")
        start = te.where(te.lt(start, 0), te.add(start, n), start)
        idx = te.add(pc.iota(length, start=0, step=1, device=input.device, dtype=start.dtype), start)
        return pi.take(input, idx, d)
    check(-n <= start <= n, lambda: f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    start = start % n if start < 0 else start
    check(length >= 0 and start + length <= n, lambda: f"start ({start}) + length ({length}) exceeds dimension "
                                                        f"size ({n}).")
    return slice_dim(input, d, start, start + length)


@torchsymbol(torch.narrow_copy, T.narrow_copy, method="narrow_copy", id="ltorch.narrow_copy")
def narrow_copy(input, dim, start, length):
    out = narrow(input, dim, start, length)
    return copy(out) if out is input else out


@torchsymbol(T.unfold, method="unfold", id="ltorch.unfold")
def unfold(self, dimension, size, step):
    return ps.unfold(self, dimension, size, step)
