"""Ops: torch-level indexing: Tensor.__getitem__ (ints, slices, None, Ellipsis, Python bools, integer tensors and
lists with torch's placement of advanced-index dims), setitem as a functional op, gather/scatter, index_select/
index_add/index_copy/index_fill/index_put, take/take_along_dim, masked_fill/masked_scatter. Built on the index,
shape and elementwise prims; boolean masks, nonzero and masked_select select a number of entries known only at run
time (prims.nonzero).
"""
from __future__ import annotations

import contextlib
import math
import threading

import torch

from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.ranges import range_length
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_reduction import cumsum
from jitcore.ops.torch_shape import _permute, dim_of, size_max, slice_dim
from jitcore.ops.utils import (
    broadcast_shapes,
    check,
    is_number,
    requires_grad,
    slice_indices,
    static_numbers,
    type_name,
)

T = torch.Tensor
ND = (Tag.NON_DIFFERENTIABLE,)


# -- getitem --------------------------------------------------------------------------------------------------------
def _is_index_tensor(x) -> bool:
    return isinstance(x, TensorProxy)


def _python_index_list(a, seq, device):
    """A list index (x[[0, 2]], x[[True, False]]) as an int64 tensor; Python bool lists are static masks."""
    flat = list(_leaves(seq))
    check(all(isinstance(v, (int, bool, IntegerProxy)) for v in flat),
          lambda: f"__getitem__: unsupported index list {seq!r}")
    if flat and all(isinstance(v, bool) for v in flat) and not any(isinstance(v, list) for v in seq):
        seq = [i for i, v in enumerate(seq) if v]
    return pc.tensor_from_sequence(list(seq), dtype=torch.int64, device=device)


def _leaves(seq):
    for v in seq:
        if isinstance(v, (list, tuple)):
            yield from _leaves(v)
        else:
            yield v


def _expand_key(a, key):
    """key as a list of items, Ellipsis expanded to slices; lists become index tensors; bools become None (+ empty);
    a boolean tensor mask becomes the index tensors of its nonzero entries (one per dim it covers), whose length is
    a size known only at run time."""
    key = key if isinstance(key, tuple) else (key,)
    items = []
    for k in key:
        if isinstance(k, list):
            k = _python_index_list(a, k, a.device)
        elif isinstance(k, range):  # (a builtin range or a symbolic one): its values as an int64 index tensor
            k = pc.iota(range_length(k.start, k.stop, k.step), start=k.start, step=k.step, device=a.device,
                        dtype=torch.int64)
        if isinstance(k, TensorProxy) and k.dtype in (torch.bool, torch.uint8):
            k = _Mask(k) if k.ndim else bool(k)  # a 0-dim mask is a Python bool (its value guarded)
        if not (k is None or k is Ellipsis or isinstance(k, (int, IntegerProxy, slice, TensorProxy, _Mask))):
            raise MetaError(f"__getitem__: only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                            f"Variables are valid indices (got {type(k).__name__})")
        items.append(k)
    consumed = sum(k.ndim if isinstance(k, _Mask) else 1 for k in items
                   if k is not None and k is not Ellipsis and not isinstance(k, bool))
    check(consumed <= a.ndim, lambda: f"too many indices for tensor of dimension {a.ndim}")
    check(sum(1 for k in items if k is Ellipsis) <= 1, "an index can only have a single ellipsis ('...')")
    at = next((i for i, k in enumerate(items) if k is Ellipsis), None)
    if at is not None:
        items[at:at + 1] = [slice(None)] * (a.ndim - consumed)
    return _masks_as_indices(a, items)


class _Mask:
    """A boolean tensor in an index key, until its dims are known (after the Ellipsis is expanded)."""

    def __init__(self, mask):
        self.mask, self.ndim = mask, mask.ndim


def _masks_as_indices(a, items):
    out, d = [], 0
    for k in items:
        if isinstance(k, _Mask):
            covered = tuple(a.shape[d:d + k.ndim])
            if tuple(k.mask.shape) != covered:
                raise MetaError(f"The shape of the mask {list(k.mask.shape)} at index {d} does not match the shape "
                                f"of the indexed tensor {list(a.shape)} at index {d}")
            rows = pi.nonzero(k.mask)[0]
            out += [ps.squeeze(slice_dim(rows, 1, j, j + 1), (1,)) for j in range(k.ndim)]
            d += k.ndim
        else:
            out.append(k)
            d += 0 if k is None or isinstance(k, bool) else 1
    return out


def _normalize_index(idx, size):
    check(dtypes.category(idx.dtype) == 1, lambda: f"tensors used as indices must be long, int, byte or bool tensors, "
                                                   f"got {idx.dtype}")
    return te.where(te.lt(idx, 0), te.add(idx, size), idx)


def _basic(a, items):
    """Apply ints, slices, None and Python bools; return the view and [(dim in the view, index tensor), ...]."""
    x, d, advanced, src = a, 0, [], 0
    for k in items:
        if k is None or k is True:
            x, d = ps.reshape(x, tuple(x.shape[:d]) + (1,) + tuple(x.shape[d:])), d + 1
        elif k is False:
            x = ps.reshape(x, tuple(x.shape[:d]) + (1,) + tuple(x.shape[d:]))
            x, d = slice_dim(x, d, 0, 0), d + 1
        elif isinstance(k, (int, IntegerProxy)):  # a symbolic int (x[:, n - 1]) stays symbolic: `(i0 - 1) % i0`
            n = x.shape[d]
            if not -n <= k < n:
                raise MetaError(f"index {k} is out of bounds for dimension {src} with size {n}")
            k %= n
            x = ps.squeeze(slice_dim(x, d, k, k + 1), (d,))
            src += 1
        elif isinstance(k, slice):
            check(k.step is None or k.step > 0, "step must be greater than zero")
            start, stop, step = slice_indices(k, x.shape[d])
            x, d, src = slice_dim(x, d, start, size_max(start, stop), step), d + 1, src + 1
        else:
            advanced.append((d, _normalize_index(k, x.shape[d])))
            d, src = d + 1, src + 1
    return x, advanced


def _advanced(x, advanced):
    """x indexed by integer tensors at the given dims (torch's placement of the broadcast index dims)."""
    dims = [d for d, _ in advanced]
    bshape = broadcast_shapes("__getitem__", *[i.shape for _, i in advanced])
    idxs = [te.expand_to(i, bshape) for _, i in advanced]
    n = math.prod(bshape)
    if len(dims) == 1:
        d = dims[0]
        out = pi.take(x, ps.reshape(idxs[0], (n,)), d)
        return ps.reshape(out, tuple(x.shape[:d]) + tuple(bshape) + tuple(x.shape[d + 1:]))
    rest = [i for i in range(x.ndim) if i not in dims]
    xt = _permute(x, dims + rest)
    sizes = [x.shape[d] for d in dims]
    xt = ps.reshape(xt, (math.prod(sizes),) + tuple(x.shape[i] for i in rest))
    linear, stride = None, 1
    for idx, size in zip(reversed(idxs), reversed(sizes)):
        term = idx if stride == 1 else te.mul(idx, stride)
        linear = term if linear is None else te.add(linear, term)
        stride *= size
    out = pi.take(xt, ps.reshape(linear, (n,)), 0)
    rest_shape = tuple(x.shape[i] for i in rest)
    out = ps.reshape(out, tuple(bshape) + rest_shape)
    if dims == list(range(dims[0], dims[0] + len(dims))) and dims[0] > 0:  # adjacent: the index dims stay in place
        nb, p = len(bshape), dims[0]
        perm = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + len(rest)))
        out = _permute(out, perm)
    return out


@torchsymbol(T.__getitem__, method="__getitem__", id="ltorch.getitem")
def getitem(self, indices):
    """x[indices] with torch's indexing rules; a boolean tensor mask selects its nonzero entries (a run-time size)."""
    x, advanced = _basic(self, _expand_key(self, indices))
    return _advanced(x, advanced) if advanced else x


# -- setitem ----------------------------------------------------------------------------------------------------------
def _value_for(a, value, shape):
    """value (a tensor) converted to a's dtype and broadcast to shape (leading 1s may be dropped)."""
    v = to_dtype(value, a.dtype)
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = ps.squeeze(v, (0,))
    return te.expand_to(v, tuple(shape))


_MASK_KINDS = {torch.bool: "bool", torch.uint8: "byte"}


def key_index_kinds(key) -> list:
    """The index tensors eager's `x[key] = v` hands to index_put_, one kind each: "bool" / "byte" for a mask (a
    bool / uint8 tensor of 1 or more dims; a list of Python bools is a bool one), "long" for an integer index (an
    integer tensor of 1 or more dims, a list, a Python bool or a 0-dim bool tensor inside a tuple). Empty for a key
    eager copies into a view (ints, slices, None, Ellipsis, a bare Python bool, 0-dim integer tensors: selects)."""
    if not isinstance(key, tuple):
        if key is None or key is Ellipsis or isinstance(key, (bool, int, IntegerProxy, slice)):
            return []
        key = (key,)
    kinds = []
    for k in key:
        if isinstance(k, TensorProxy):
            if k.ndim == 0 and k.dtype not in _MASK_KINDS:
                continue
            kinds.append(_MASK_KINDS.get(k.dtype, "long") if k.ndim > 0 else "long")
        elif isinstance(k, (list, range)):
            leaves = list(_leaves(k)) if isinstance(k, list) else []
            kinds.append("bool" if leaves and all(isinstance(v, bool) for v in leaves) else "long")
        elif isinstance(k, bool):
            kinds.append("long")
    return kinds


def index_kinds(indices) -> list:
    """The kinds (as key_index_kinds names them) of index_put's index tensors (None entries skipped)."""
    return [_MASK_KINDS.get(i.dtype, "long") for i in indices if i is not None]


def check_put_dtype(input, kinds: list, values, accumulate=False):
    """Eager's index_put_ rules on values: where it runs as masked_fill_ (no accumulate, a single index that is a
    mask, values of one element on the CPU) it casts, and a uint8 mask raises; elsewhere values must have input's
    dtype. kinds: key_index_kinds / index_kinds. values: a tensor, or None for a number (eager makes it a
    one-element CPU tensor of input's dtype)."""
    if not kinds:
        return
    as_fill = (not accumulate and len(kinds) == 1 and kinds[0] in ("bool", "byte") and
               (values is None or (values.device.type == "cpu" and all(s == 1 for s in values.shape))))
    # (eager's types and messages already: torch asked on zero masks would select nothing)
    if as_fill and kinds[0] == "byte":
        raise MetaError.like(RuntimeError)("masked_fill_ only supports boolean masks, but got mask with dtype "
                                           "unsigned char")
    if not as_fill and values is not None and values.dtype != input.dtype:
        raise MetaError.like(RuntimeError)(
            f"Index put requires the source and destination dtypes match, got {type_name(input.dtype)} for the "
            f"destination and {type_name(values.dtype)} for the source.")


_INPLACE_FILL = threading.local()  # .depth > 0 while an in-place fill runs its functional form


@contextlib.contextmanager
def grad_fills_into_integers():
    """Inside: the functional fills below are the in-place ones' bodies, which eager runs (giving the integer tensor
    autograd history jitcore does not keep) where its functional forms raise."""
    _INPLACE_FILL.depth = getattr(_INPLACE_FILL, "depth", 0) + 1
    try:
        yield
    finally:
        _INPLACE_FILL.depth -= 1


def _check_fill_grad(input, value):
    """Eager's functional masked_fill/index_put/index_fill of a value that requires grad into a tensor of a dtype
    without gradients: "Autograd not support dtype"."""
    if getattr(_INPLACE_FILL, "depth", 0) or input.dtype.is_floating_point or input.dtype.is_complex:
        return
    if requires_grad(value):
        raise MetaError.like(RuntimeError)(f"Autograd not support dtype: {type_name(input.dtype)}")


@torchsymbol(id="ltorch.setitem", method="__setitem__")
def setitem(self, indices, value):
    """The functional `x[indices] = value`: returns a NEW tensor equal to x with the indexed region replaced.

    Writing the result back into x (the in-place semantics of `__setitem__`) is done by the in-place handling,
    not here. A boolean mask key works here (its shape is static): where(mask, value, x) or index_put.
    """
    if isinstance(indices, TensorProxy) and indices.dtype is torch.bool:
        check(tuple(indices.shape) == tuple(self.shape[:indices.ndim]),
              lambda: f"setitem: the shape of the mask {tuple(indices.shape)} does not match the shape of the indexed "
                      f"tensor {tuple(self.shape)}")
        if not isinstance(value, TensorProxy) or value.numel() == 1:
            mask = ps.reshape(indices, tuple(indices.shape) + (1,) * (self.ndim - indices.ndim))
            v = to_dtype(value, self.dtype) if not isinstance(value, TensorProxy) else \
                ps.reshape(to_dtype(value, self.dtype), ())
            return te.where(te.expand_to(mask, self.shape), v, self)
        return pi.index_put(self, (indices,), to_dtype(value, self.dtype), False)
    check(isinstance(value, TensorProxy) or is_number(value),
          lambda: f"setitem: value must be a number or a tensor, got {type(value).__name__}")
    n = self.numel()
    positions = pc.iota(n, start=0, step=1, device=self.device, dtype=torch.int64)
    positions = getitem(ps.reshape(positions, tuple(self.shape)), indices)
    m = positions.numel()
    v = ps.reshape(_value_for(self, value, positions.shape), (m,)) if isinstance(value, TensorProxy) else \
        to_dtype(value, self.dtype)
    out = pi.scatter(ps.reshape(self, (n,)), ps.reshape(positions, (m,)), v, 0)
    return ps.reshape(out, tuple(self.shape))


# -- gather / scatter -------------------------------------------------------------------------------------------------
@torchsymbol(torch.gather, T.gather, method="gather", id="ltorch.gather")
def gather(input, dim, index, *, sparse_grad=False):
    return pi.take_along_axis(input, index, static_numbers(dim))


@torchsymbol(torch.take_along_dim, T.take_along_dim, method="take_along_dim", id="ltorch.take_along_dim")
def take_along_dim(input, indices, dim=None):
    if dim is None:
        flat = ps.reshape(input, (input.numel(),))
        return pi.take_along_axis(flat, ps.reshape(indices, (indices.numel(),)), 0)
    check(input.ndim == indices.ndim, lambda: f"torch.take_along_dim(): input and indices should have the same number "
                                              f"of dimensions, but got {input.ndim} dimensions for input, and "
                                              f"{indices.ndim} dimensions for indices")
    d = dim_of("take_along_dim", dim, input.ndim)
    if input.ndim == 0:
        return pi.take_along_axis(input, indices, d)
    ones = [tuple(1 if i == d else s for i, s in enumerate(t.shape)) for t in (input, indices)]
    shape = list(broadcast_shapes("take_along_dim", *ones))
    in_shape, idx_shape = list(shape), list(shape)
    in_shape[d], idx_shape[d] = input.shape[d], indices.shape[d]
    indices = _normalize_index(indices, input.shape[d])  # with a dim, torch wraps negative indices
    return pi.take_along_axis(te.expand_to(input, tuple(in_shape)), te.expand_to(indices, tuple(idx_shape)), d)


def _src_like(op, input, src):
    if isinstance(src, TensorProxy):
        check(src.dtype == input.dtype, lambda: f"{op}(): Expected self.dtype to be equal to src.dtype")
        return src
    check(is_number(src), lambda: f"{op}(): src must be a tensor or a number, got {type(src).__name__}")
    return to_dtype(src, input.dtype)


@torchsymbol(torch.scatter, T.scatter, method="scatter", id="ltorch.scatter")
def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    src = value if src is None else src
    check(src is not None, "scatter(): expected src (a tensor) or value (a number)")
    if reduce is not None:
        return opaque_symbol(torch.scatter)(input, dim, index, src, reduce=reduce)
    return pi.scatter(input, index, _src_like("scatter", input, src), static_numbers(dim))


@torchsymbol(torch.scatter_add, T.scatter_add, method="scatter_add", id="ltorch.scatter_add")
def scatter_add(input, dim, index, src):
    return pi.scatter_add(input, index, _src_like("scatter_add", input, src), static_numbers(dim))


@torchsymbol(torch.index_select, T.index_select, method="index_select", id="ltorch.index_select")
def index_select(input, dim, index):
    return pi.take(input, index, static_numbers(dim))


@torchsymbol(torch.take, T.take, method="take", id="ltorch.take")
def take(input, index):
    flat = ps.reshape(input, (input.numel(),))
    idx = _normalize_index(index, input.numel())
    out = pi.take(flat, ps.reshape(idx, (index.numel(),)), 0)
    return ps.reshape(out, tuple(index.shape))


@torchsymbol(torch.index_add, T.index_add, method="index_add", id="ltorch.index_add")
def index_add(input, dim, index, source, *, alpha=1):
    check(source.dtype == input.dtype, lambda: f"index_add_(): self ({input.dtype}) and source ({source.dtype}) must "
                                               f"have the same scalar type")
    if alpha != 1:
        source = to_dtype(te.mul(source, alpha), input.dtype)
    return pi.index_add(input, index, source, static_numbers(dim))


def _along_dim_put(op, input, dim, index, values):
    """input with input.select(dim, index[i]) = values.select(dim, i) (values broadcast as index_put does)."""
    check(index.ndim <= 1, lambda: f"{op}(): Index should have dimension 1 or 0 (got {index.ndim})")
    if input.ndim == 0:
        out = pi.index_put(ps.reshape(input, (1,)), (ps.reshape(index, (1,)),), ps.reshape(values, (1,)), False)
        return ps.reshape(out, ())
    d = dim_of(op, dim, input.ndim)
    perm = [d] + [i for i in range(input.ndim) if i != d]
    inv = [perm.index(i) for i in range(input.ndim)]
    moved = _permute(input, perm)
    if values.ndim == input.ndim:
        values = _permute(values, perm)
    out = pi.index_put(moved, (ps.reshape(index, (index.numel(),)),), values, False)
    return _permute(out, inv)


@torchsymbol(torch.index_copy, T.index_copy, method="index_copy", id="ltorch.index_copy")
def index_copy(input, dim, index, source):
    check(source.dtype == input.dtype, lambda: f"index_copy_(): self and source expected to have the same dtype, but "
                                               f"got (self) {input.dtype} and (source) {source.dtype}")
    return _along_dim_put("index_copy", input, dim, index, source)


@torchsymbol(torch.index_fill, T.index_fill, method="index_fill", id="ltorch.index_fill")
def index_fill(input, dim, index, value):
    if isinstance(value, TensorProxy):
        check(value.ndim == 0, lambda: f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                                       f"{value.ndim} dimension(s).")
        v = to_dtype(value, input.dtype)
    else:
        v = pc.full((), to_dtype(value, input.dtype), device=input.device, dtype=input.dtype)
    check(index.ndim <= 1, lambda: f"index_fill(): Index should have dimension 1 or 0 (got {index.ndim})")
    if input.ndim == 0:
        _check_fill_grad(input, value)
        return _along_dim_put("index_fill", input, dim, index, v)
    # a mask of the filled positions, then where: each position takes value once, so value's gradient sums the
    # filled positions once however often index repeats them (as eager's), where scattering value per index would not
    d = dim_of("index_fill", dim, input.ndim)
    size = input.shape[d]
    hit = pi.index_put(pc.full((size,), False, device=input.device, dtype=torch.bool),
                       (ps.reshape(index, (index.numel(),)),), pc.full((), True, device=input.device, dtype=torch.bool),
                       False)
    mask = ps.reshape(hit, tuple(size if i == d else 1 for i in range(input.ndim)))
    _check_fill_grad(input, value)
    return te.where(te.expand_to(mask, tuple(input.shape)), v, input)


@torchsymbol(torch.index_put, T.index_put, method="index_put", id="ltorch.index_put")
def index_put(input, indices, values, accumulate=False):
    out = pi.index_put(input, tuple(indices), to_dtype(values, input.dtype), accumulate)  # (shapes first, as eager)
    if isinstance(values, TensorProxy):
        check_put_dtype(input, index_kinds(indices), values, accumulate)
    _check_fill_grad(input, values)
    return out


# -- masks ----------------------------------------------------------------------------------------------------------
def _check_mask(op, mask):
    check(isinstance(mask, TensorProxy) and mask.dtype is torch.bool,
          lambda: f"{op} only supports boolean masks, but got mask with dtype {getattr(mask, 'dtype', type(mask))}")


@torchsymbol(torch.masked_fill, T.masked_fill, method="masked_fill", id="ltorch.masked_fill")
def masked_fill(input, mask, value):
    _check_mask("masked_fill_", mask)
    if isinstance(value, TensorProxy):
        check(value.ndim == 0, lambda: f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                                       f"{value.ndim} dimension(s).")
    shape = broadcast_shapes("masked_fill", input.shape, mask.shape)
    _check_fill_grad(input, value)
    out = te.where(mask, to_dtype(value, input.dtype), input)
    return te.expand_to(out, shape)


@torchsymbol(torch.masked_scatter, T.masked_scatter, method="masked_scatter", id="ltorch.masked_scatter")
def masked_scatter(input, mask, source):
    """input where mask is False; source's leading elements, in order, where it is True."""
    _check_mask("masked_scatter_", mask)
    check(isinstance(source, TensorProxy),
          lambda: f"masked_scatter(): argument 'source' must be Tensor, not {type(source).__name__}")
    check(source.dtype == input.dtype, lambda: f"masked_scatter: expected self and source to have same dtypes but got "
                                               f"{input.dtype} and {source.dtype}")
    input, mask = te.broadcast(input, mask, op="masked_scatter")
    n = mask.numel()
    pos = te.sub(cumsum(ps.reshape(mask, (n,)), 0), 1)
    pos = te.where(te.lt(pos, 0), to_dtype(0, pos.dtype), pos)
    src = ps.reshape(source, (source.numel(),))
    if source.numel() == 0:
        return te.where(mask, to_dtype(0, input.dtype), input)
    picked = ps.reshape(pi.take(src, pos, 0), tuple(mask.shape))
    return te.where(mask, picked, input)
