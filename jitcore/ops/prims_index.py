"""Ops: indexing prims (take, take_along_axis, scatter, scatter_add, index_add, index_put, nonzero). All are out
of place: they return a new tensor. Index tensors are integer (index_put also takes bool masks); ltorch wraps negative
indices and builds getitem/setitem from these.
"""
from __future__ import annotations

import torch

from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy, run_time_size
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import get_tracectx, services
from jitcore.ops.registry import prim
from jitcore.ops.utils import broadcast_shapes, canonical_dims, check, is_number, requires_grad, same_device, same_size


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
# (torch puts dim before index)
def _take(a, index, dim):
    return torch.index_select(a, dim, index)


def _take_along_axis(a, index, dim):
    return torch.gather(a, dim, index)


def _scatter(a, index, src, dim):
    return torch.scatter(a, dim, index, src)


def _scatter_add(a, index, src, dim):
    return torch.scatter_add(a, dim, index, src)


def _nonzero(a):
    rows = torch.nonzero(a)
    return rows, rows.shape[0]


def _index_add(a, index, source, dim):
    return torch.index_add(a, dim, index, source)


def _index_put(a, indices, values, accumulate):
    # torch.index_put's Python binding refuses None entries; the aten op takes them
    return torch.ops.aten.index_put.default(a, list(indices), values, accumulate)


def _shape(t) -> tuple:
    return tuple(t.shape)


def _tensor(op, a, what="a"):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected {what} to be a tensor, got {a!r}")


def _index(op, index, *, allow_bool=False):
    _tensor(op, index, "index")
    ok = dtypes.category(index.dtype) == 1 or (allow_bool and index.dtype is torch.bool)
    check(ok, lambda: f"prims.{op}: expected an integer index tensor, got {index.dtype}")


def _dim(op, a, dim) -> int:
    check(isinstance(dim, int), lambda: f"prims.{op}: dim must be an int, got {dim!r}")
    try:
        return canonical_dims(dim, a.ndim)[0]
    except IndexError as e:
        raise MetaError(f"prims.{op}: {e} for a tensor of shape {_shape(a)}") from None


def _size(a, d) -> int:
    return a.shape[d] if a.ndim else 1


@prim("prims.take", kernel=_take)
def take(a, index, dim):
    """torch.index_select: the entries of a at the 1-D int `index` along dim."""
    _tensor("take", a)
    _index("take", index)
    d = _dim("take", a, dim)
    check(index.ndim <= 1, lambda: f"prims.take: index should have 1 dimension, got shape {_shape(index)}")
    same_device(take.id, a, index)
    if a.ndim == 0:
        check(index.numel() == 1, lambda: f"prims.take: index to scalar can have only 1 value, got {index.numel()}")
        return a.like(requires_grad=requires_grad(a))
    shape = list(a.shape)
    shape[d] = index.numel()
    return a.like(shape=tuple(shape), requires_grad=requires_grad(a))


def _check_gather_like(op, a, index, d, src=None):
    check(index.ndim == a.ndim or (index.numel() == 0 and index.ndim <= 1),
          lambda: f"prims.{op}: index {_shape(index)} and input {_shape(a)} must have the same number of dimensions")
    if index.numel() == 0:
        return
    for i in range(index.ndim):
        if i != d and _size(index, i) > _size(a, i):
            raise MetaError(f"prims.{op}: size of index {_shape(index)} must not exceed the input's {_shape(a)} in "
                            f"dim {i} != {d}")
        if src is not None and _size(index, i) > _size(src, i):
            raise MetaError(f"prims.{op}: size of index {_shape(index)} must not exceed src's {_shape(src)} in dim {i}")


@prim("prims.take_along_axis", kernel=_take_along_axis)
def take_along_axis(a, index, dim):
    """torch.gather: out[..i..] = a[..index[..i..] at dim..]; output has index's shape."""
    _tensor("take_along_axis", a)
    _index("take_along_axis", index)
    d = _dim("take_along_axis", a, dim)
    _check_gather_like("take_along_axis", a, index, d)
    same_device(take_along_axis.id, a, index)
    return a.like(shape=_shape(index), requires_grad=requires_grad(a))


def _scatter_meta(op, a, index, src, dim, number_ok):
    _tensor(op, a)
    _index(op, index)
    d = _dim(op, a, dim)
    if number_ok and is_number(src):
        _check_gather_like(op, a, index, d)
        return a.like(requires_grad=requires_grad(a))
    _tensor(op, src, "src")
    check(src.dtype == a.dtype, lambda: f"prims.{op}: expected src dtype {a.dtype}, got {src.dtype}")
    check(src.ndim == a.ndim or index.numel() == 0,
          lambda: f"prims.{op}: src {_shape(src)} and input {_shape(a)} must have the same number of dimensions")
    _check_gather_like(op, a, index, d, src)
    same_device(f"prims.{op}", a, index, src)
    return a.like(requires_grad=requires_grad(a, src))


@prim("prims.scatter", kernel=_scatter)
def scatter(a, index, src, dim):
    """torch.scatter out of place: a copy of a with out[..index[..i..] at dim..] = src[..i..] (src may be a number)."""
    return _scatter_meta("scatter", a, index, src, dim, number_ok=True)


@prim("prims.scatter_add", kernel=_scatter_add)
def scatter_add(a, index, src, dim):
    """torch.scatter_add out of place: a copy of a with src[..i..] added at out[..index[..i..] at dim..]."""
    return _scatter_meta("scatter_add", a, index, src, dim, number_ok=False)


@prim("prims.index_add", kernel=_index_add)
def index_add(a, index, source, dim):
    """torch.index_add out of place: a copy of a with source's slices along dim added at the 1-D `index`."""
    _tensor("index_add", a)
    _index("index_add", index)
    _tensor("index_add", source, "source")
    d = _dim("index_add", a, dim)
    check(index.ndim <= 1, lambda: f"prims.index_add: index should have 1 dimension, got shape {_shape(index)}")
    check(source.dtype == a.dtype, lambda: f"prims.index_add: expected source dtype {a.dtype}, got {source.dtype}")
    expected = list(a.shape)
    if a.ndim:
        expected[d] = index.numel()
    check(_shape(source) == tuple(expected) or (a.ndim == 0 and source.numel() == 1 == index.numel()),
          lambda: f"prims.index_add: source {_shape(source)} must have the shape {tuple(expected)} of input "
                  f"{_shape(a)} with dim {d} replaced by the index's length {index.numel()}")
    same_device(index_add.id, a, index, source)
    return a.like(requires_grad=requires_grad(a, source))


def _indexed_shape(op, a, indices) -> tuple:
    """The shape of a[indices] by torch's advanced-indexing layout; None stands for a bool mask's count."""
    d, groups, kept, positions, first = 0, [], [], [], None
    for i, idx in enumerate(indices):
        check(d < a.ndim or (idx is not None and idx.dtype is torch.bool and idx.ndim == 0),
              lambda: f"prims.{op}: too many indices for tensor of dimension {a.ndim}")
        if idx is None:
            kept.append(a.shape[d])
            d += 1
            continue
        first = len(kept) if first is None else first
        positions.append(i)
        if idx.dtype is torch.bool:
            if _shape(idx) != tuple(a.shape[d:d + idx.ndim]):
                raise MetaError(f"prims.{op}: the shape of the mask {_shape(idx)} does not match the shape of the "
                                f"indexed tensor {_shape(a)} at dim {d}")
            groups.append(None)
            d += idx.ndim
        else:
            groups.append(_shape(idx))
            d += 1
    kept += list(a.shape[d:])
    known = [g for g in groups if g is not None]
    bshape = broadcast_shapes(f"prims.{op}", *known) if known else ()
    if None in groups:  # a mask acts as a 1-D index of data-dependent length
        bshape = bshape[:-1] + (None if bshape[-1] == 1 else bshape[-1],) if bshape else (None,)
    adjacent = not positions or positions[-1] - positions[0] == len(positions) - 1
    at = first if adjacent and first is not None else 0
    return tuple(kept[:at]) + tuple(bshape) + tuple(kept[at:])


@prim("prims.index_put", kernel=_index_put)
def index_put(a, indices, values, accumulate):
    """torch.index_put out of place: a copy of a with a[indices] = values (or += when accumulate).

    indices: a tuple of int or bool tensors (None entries take a whole dim), as torch.index_put.
    """
    _tensor("index_put", a)
    check(isinstance(indices, (tuple, list)), lambda: f"prims.index_put: indices must be a tuple, got {indices!r}")
    for idx in indices:
        if idx is not None:
            _index("index_put", idx, allow_bool=True)
    _tensor("index_put", values, "values")
    check(values.dtype == a.dtype, lambda: f"prims.index_put: values dtype {values.dtype} must match {a.dtype}")
    target = _indexed_shape("index_put", a, tuple(indices))
    vshape = _shape(values)
    ok = len(vshape) <= len(target) and all(
        t is None or same_size(v, t) or v == 1 or v == t for v, t in zip(reversed(vshape), reversed(target)))
    check(ok, lambda: f"prims.index_put: shape mismatch: value tensor of shape {vshape} cannot be broadcast to "
                      f"indexing result of shape {tuple('?' if t is None else t for t in target)}")
    same_device(index_put.id, a, values, *[i for i in indices if i is not None])
    return a.like(requires_grad=requires_grad(a, values))


@prim("prims.nonzero", tags=(Tag.NON_DIFFERENTIABLE,), kernel=_nonzero)
def nonzero(a):
    """torch.nonzero: the indices of a's nonzero entries, one row each, (u, a.ndim) int64, and their count u: a
    size known only when the program runs (jitcore/ir/proxies.py run_time_size), defined by this line wherever it
    runs. The same tensor has one count: a second nonzero of it defines the same u again (the same value). Every op
    that selects a data-dependent number of entries (masks, masked_select, where) is built on it."""
    _tensor("nonzero", a)
    trace = get_tracectx()
    counts = trace.extra.setdefault("nonzero_counts", {}) if trace is not None else {}
    count = counts.get(a.name)  # the same tensor has the same count: one size, so `x[m] * w[m]` needs no check
    if count is None:
        count = counts[a.name] = run_time_size(_count_now(a), upper=_numel_text(a))  # (at most every entry)
    return TensorProxy((count, a.ndim), torch.int64, a.device), count


def _numel_text(a):
    """a's number of entries as an int, or as the text of a product of its size expressions (recording no line)."""
    const, exprs = 1, []
    for s in a.shape:
        if isinstance(s, int):
            const *= s
        elif getattr(s, "expr", None) is None:
            return None
        else:
            exprs.append(f"({s.expr})")
    return const if not exprs or const == 0 else " * ".join(exprs + ([str(const)] if const != 1 else []))


def _count_now(a) -> int:
    """This call's number of nonzero entries of a (the trace's real values, when at hand), for the run-time size's
    value; 0 where they are not (examine(): no real inputs)."""
    values = services().real_values([a])
    return 0 if values is None else int(torch.count_nonzero(values[0]))
