"""Ops: shape prims (broadcast_in_dim, reshape, transpose, squeeze, slice, cat, pad, flip, unfold, as_strided and its
scatter). They change metadata and layout, never values; they are strict (ltorch resolves -1, negative dims,
broadcasting).
"""
from __future__ import annotations

import torch

from jitcore.errors import MetaError
from jitcore.ir.proxies import IntegerProxy, TensorProxy, register_ir_op
from jitcore.ops.registry import prim
from jitcore.ops.utils import check, is_int, is_number, numel, prim_dims, requires_grad, same_device, same_size


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
def _broadcast_in_dim(a, shape, broadcast_dimensions):
    if len(broadcast_dimensions) == len(shape):  # same rank: the dims map in order, size-1 dims grow
        return a.expand(shape)
    view_shape = [1] * len(shape)
    for n, d in zip(a.shape, broadcast_dimensions):
        view_shape[d] = n
    return a.reshape(view_shape).expand(shape)


_INDEXES: dict = {}  # (start, end, strides) -> the tuple of slices (a program's lines repeat theirs on every call)


def _slice(a, start_indices, end_indices, strides=None):
    key = (start_indices, end_indices, strides)
    try:
        index = _INDEXES.get(key)
    except TypeError:  # (bounds given as lists)
        key, index = None, None
    if index is None:
        steps = strides or (1,) * len(start_indices)
        index = tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, steps))
        if key is not None:
            if len(_INDEXES) > 4096:  # (symbolic sizes: new bounds on every call)
                _INDEXES.clear()
            _INDEXES[key] = index
    return a[index]


def _pad(a, padding_value, padding_config):
    """lax.pad semantics: (lo, hi, interior) per dim; negative lo/hi crop after interior padding."""
    if all(interior == 0 for _, _, interior in padding_config):
        flat = [p for lo, hi, _ in reversed(padding_config) for p in (lo, hi)]
        return torch.constant_pad_nd(a, flat, padding_value)
    grown, place, crop = [], [], []
    for n, (lo, hi, interior) in zip(a.shape, padding_config):
        size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * interior
        grown.append(size)
        place.append(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (interior + 1) + min(n, 1), interior + 1))
        crop.append(slice(max(-lo, 0), size - max(-hi, 0)))
    out = torch.full(grown, padding_value, dtype=a.dtype, device=a.device)
    out[tuple(place)] = a
    return out[tuple(crop)]


@prim("prims.broadcast_in_dim", kernel=_broadcast_in_dim)
def broadcast_in_dim(a, shape, broadcast_dimensions):
    """a placed into `shape`: a's dim i becomes output dim broadcast_dimensions[i] (size equal or 1)."""
    check(isinstance(a, TensorProxy), lambda: f"prims.broadcast_in_dim: expected a tensor, got {a!r}")
    shape, bdims = tuple(shape), tuple(broadcast_dimensions)
    check(len(bdims) == a.ndim, lambda: f"prims.broadcast_in_dim: {a.ndim} dims but broadcast_dimensions={bdims}")
    check(list(bdims) == sorted(set(bdims)) and all(0 <= d < len(shape) for d in bdims),
          lambda: f"prims.broadcast_in_dim: broadcast_dimensions {bdims} must be increasing dims of {shape}")
    for i, d in enumerate(bdims):
        if not (same_size(a.shape[i], shape[d]) or a.shape[i] == 1 or a.shape[i] == shape[d]):
            raise MetaError(f"prims.broadcast_in_dim: cannot broadcast {tuple(a.shape)} to {shape} (dim {i})")
    return a.like(shape=shape, requires_grad=requires_grad(a))


@prim("prims.reshape", kernel=torch.reshape)
def reshape(a, shape):
    """a with a new shape of the same number of elements (no -1 here; ltorch resolves it)."""
    check(isinstance(a, TensorProxy), lambda: f"prims.reshape: expected a tensor, got {a!r}")
    shape = tuple(shape)
    check(all(is_int(s) and s >= 0 for s in shape), lambda: f"prims.reshape: invalid shape {shape}")
    check(numel(shape) == a.numel(), lambda: f"shape '{list(shape)}' is invalid for input of size {a.numel()}")
    return a.like(shape=shape, requires_grad=requires_grad(a))


register_ir_op("reshape", reshape)  # the alias a no-grad self view records (jitcore/ir/symbol.py)


def _check_tensor(op, a):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected a tensor, got {a!r}")


@prim("prims.transpose", kernel=torch.permute)
def transpose(a, permutation):
    """a with its dims permuted: output dim i is a's dim permutation[i] (torch.permute)."""
    _check_tensor("transpose", a)
    perm = tuple(permutation)
    check(sorted(perm) == list(range(a.ndim)),
          lambda: f"prims.transpose: {perm} is not a permutation of the dims of a tensor of shape {tuple(a.shape)}")
    return a.like(shape=tuple(a.shape[p] for p in perm), requires_grad=requires_grad(a))


@prim("prims.squeeze", kernel=torch.squeeze)
def squeeze(a, dims):
    """a without the given dims, each of size 1."""
    _check_tensor("squeeze", a)
    dims = prim_dims("squeeze", a, dims)
    if a.ndim == 0:  # torch: squeezing dim 0 of a 0-d tensor is a no-op
        return a.like(requires_grad=requires_grad(a))
    for d in dims:
        if a.shape[d] != 1:
            raise MetaError(f"prims.squeeze: dim {d} of shape {tuple(a.shape)} has size {a.shape[d]}, not 1")
    shape = tuple(s for i, s in enumerate(a.shape) if i not in dims)
    return a.like(shape=shape, requires_grad=requires_grad(a))


@prim("prims.slice", kernel=_slice)
def slice_prim(a, start_indices, end_indices, strides=None):
    """a[start:end:stride] in every dim; 0 <= start <= end <= size, stride >= 1."""
    _check_tensor("slice", a)
    starts, ends = tuple(start_indices), tuple(end_indices)
    steps = (1,) * a.ndim if strides is None else tuple(strides)
    check(len(starts) == len(ends) == len(steps) == a.ndim,
          lambda: f"prims.slice: expected {a.ndim} start, end and stride values for shape {tuple(a.shape)}, got "
                  f"{starts}, {ends}, {steps}")
    shape = []
    for d, (s, e, st) in enumerate(zip(starts, ends, steps)):
        if not (0 <= s <= e <= a.shape[d] and st >= 1):
            raise MetaError(f"prims.slice: invalid slice {s}:{e}:{st} of dim {d} (size {a.shape[d]}) of shape "
                            f"{tuple(a.shape)}; need 0 <= start <= end <= size and stride >= 1")
        unit = type(st) is int and st == 1  # (the common case keeps the expression short: `u0`, `i0 - i1`)
        shape.append((e if type(s) is int and s == 0 else e - s) if unit else (e - s + st - 1) // st)
    return a.like(shape=tuple(shape), requires_grad=requires_grad(a))


@prim("prims.cat", kernel=torch.cat)
def cat(tensors, dim):
    """The tensors joined along dim: one dtype, one rank, equal sizes in the other dims."""
    check(isinstance(tensors, (tuple, list)) and len(tensors) > 0,
          lambda: "prims.cat: expected a non-empty list of tensors")
    for t in tensors:
        _check_tensor("cat", t)
    first = tensors[0]
    check(first.ndim > 0, "prims.cat: zero-dimensional tensor cannot be concatenated")
    d = prim_dims("cat", first, (dim,))[0]
    shapes = [tuple(t.shape) for t in tensors]
    check(len({t.dtype for t in tensors}) == 1, lambda: f"prims.cat: dtypes differ: {[t.dtype for t in tensors]}")
    for s in shapes:
        check(len(s) == first.ndim and all(s[i] == first.shape[i] for i in range(first.ndim) if i != d),
              lambda: f"prims.cat: sizes of tensors must match except in dimension {d}; shapes {shapes}")
    device = same_device(cat.id, *tensors)
    shape = list(first.shape)
    shape[d] = sum(s[d] for s in shapes)
    return TensorProxy(tuple(shape), first.dtype, device, requires_grad(*tensors))


@prim("prims.pad", kernel=_pad)
def pad(a, padding_value, padding_config):
    """a padded with padding_value: per dim (lo, hi, interior); negative lo/hi crop, interior goes between."""
    _check_tensor("pad", a)
    config = tuple(tuple(c) for c in padding_config)
    check(len(config) == a.ndim and all(len(c) == 3 for c in config),
          lambda: f"prims.pad: expected one (lo, hi, interior) per dim of shape {tuple(a.shape)}, got {config}")
    check(is_number(padding_value), lambda: f"prims.pad: padding_value must be a number, got {padding_value!r}")
    shape = []
    for d, (lo, hi, interior) in enumerate(config):
        if interior < 0:
            raise MetaError(f"prims.pad: interior padding {interior} of dim {d} is negative")
        n = a.shape[d]
        if type(lo) is int and type(hi) is int and lo == hi == interior == 0:  # (no question about n)
            shape.append(n)
            continue
        size = lo + hi + n + (max(n - 1, 0) * interior if interior else 0)
        if size < 0:
            raise MetaError(f"prims.pad: padding {config[d]} of dim {d} (size {n}) gives a negative size")
        shape.append(size)
    return a.like(shape=tuple(shape), requires_grad=requires_grad(a))


@prim("prims.flip", kernel=torch.flip)
def flip(a, dims):
    """a reversed along dims."""
    _check_tensor("flip", a)
    prim_dims("flip", a, dims)
    return a.like(requires_grad=requires_grad(a))


@prim("prims.unfold", kernel=torch.Tensor.unfold)
def unfold(a, dim, size, step):
    """Tensor.unfold: windows of `size` every `step` along dim, as a new last dim."""
    _check_tensor("unfold", a)
    d = prim_dims("unfold", a, (dim,))[0]
    n = a.shape[d] if a.ndim else 1
    check(isinstance(size, (int, IntegerProxy)) and 0 <= size <= n,
          lambda: f"prims.unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
    check(isinstance(step, (int, IntegerProxy)) and step > 0, lambda: f"prims.unfold: step is {step} but must be > 0")
    shape = list(a.shape)
    if a.ndim:
        shape[d] = (n - size) // step + 1
    return a.like(shape=tuple(shape) + (size,), requires_grad=requires_grad(a))


# -- as_strided over memory a program owns (jitcore/ops/metadata_inplace.py) ----------------------------------------
def _memory(a):
    """a's elements in the order eager lays them out in memory (a, as the caller of these prims guarantees, is
    contiguous in eager): a 1-D tensor of them, a view where a's value is contiguous here too."""
    return a.contiguous().view(-1)


def _as_strided(a, size, stride, storage_offset, grad_within=None):
    flat = _memory(a)
    return flat.as_strided(size, stride, flat.storage_offset() + storage_offset)


def _as_strided_scatter(a, src, size, stride, storage_offset):
    out = a.reshape(-1).clone(memory_format=torch.contiguous_format)
    out.as_strided(size, stride, storage_offset).copy_(src)
    return out.view(a.shape)


def _strided_extent(a, size, stride, storage_offset, op) -> None:
    """Check the view's places lie within a's elements."""
    check(len(size) == len(stride) and all(is_int(n) and n >= 0 for n in size) and
          all(is_int(s) and s >= 0 for s in stride) and is_int(storage_offset) and storage_offset >= 0,
          lambda: f"prims.{op}: invalid sizes {size}, strides {stride}, offset {storage_offset}")
    if all(n > 0 for n in size):
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
        check(last < a.numel(), lambda: f"prims.{op}: the view reaches element {last} of a tensor of {a.numel()}")


@prim("prims.as_strided", kernel=_as_strided)
def as_strided(a, size, stride, storage_offset, grad_within=None):
    """The elements of a, taken in eager's memory order (a is contiguous in eager), viewed with sizes `size` and
    strides `stride` from element `storage_offset` of a: Tensor.as_strided over the memory a owns. Places may repeat
    (overlapping strides); reading is a view, a write through it is prims.as_strided_scatter. grad_within: (sizes,
    strides, offset, writable) of another view of a; a's gradient only at its places (eager's as_strided backward
    over that view drops the others: jitcore/ops/metadata_inplace.py); writable: whether functionalization follows a
    write through the view (True; "places": only into the other view's places, for a view made before an as_strided_
    of the contiguous tensor it views; False: never)."""
    _check_tensor("as_strided", a)
    size, stride = tuple(size), tuple(stride)
    _strided_extent(a, size, stride, storage_offset, "as_strided")
    if grad_within is not None:
        _strided_extent(a, tuple(grad_within[0]), tuple(grad_within[1]), grad_within[2], "as_strided")
    return a.like(shape=size, requires_grad=requires_grad(a))


@prim("prims.as_strided_scatter", kernel=_as_strided_scatter)
def as_strided_scatter(a, src, size, stride, storage_offset):
    """a with the places of its view prims.as_strided(a, size, stride, storage_offset) replaced by src's values (in
    src's order: where places repeat, the last element written to a place is its value)."""
    _check_tensor("as_strided_scatter", a)
    _check_tensor("as_strided_scatter", src)
    size, stride = tuple(size), tuple(stride)
    _strided_extent(a, size, stride, storage_offset, "as_strided_scatter")
    check(tuple(src.shape) == size and src.dtype == a.dtype,
          lambda: f"prims.as_strided_scatter: src {src.dtype}{tuple(src.shape)} for a view {a.dtype}{size}")
    return a.like(requires_grad=requires_grad(a, src))
