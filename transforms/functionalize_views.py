"""Transforms (functionalization): how a write into a view reaches the tensor it views, prim by prim (functionalize.py
walks the chain of views): each view prim's inverse (the base with the view replaced), expansions (several places of
the view share one element of the base) and as_strided over memory the program owns (prims.as_strided: a write into
it is an as_strided_scatter; where its places repeat, only writes whose result does not depend on eager's order);
the memory a chain of view prims reads (meta tensors), which tells whether a write through it can be followed.
"""
from __future__ import annotations

import torch

from jitcore.ir.arith import value_of
from jitcore.ir.symbol import BoundSymbol
from jitcore.ops import ltorch
from jitcore.ops import prims_shape as ps
from jitcore.ops.torch_inplace import slice_scatter
from jitcore.ops.torch_shape import same_shape, slice_dim
from transforms.functionalize_complex import COMPLEX_INVERSES, COMPLEX_VIEW_STRIDES, complex_view_meta


def is_same_dtype_copy(p: BoundSymbol) -> bool:
    """The piece a view op returns whole (`x.chunk(1)[0]`, a split wider than x): a copy in jitcore's decomposition
    (an op may not return its own input among several outputs), the input itself in eager."""
    return p.sym.id == "prims.convert_element_type" and p.args[1] == p.args[0].dtype


def expanded_dims(p: BoundSymbol, base) -> tuple:
    """The dims a broadcast_in_dim line makes (or widens from size 1) with more than one element; () otherwise."""
    if p.sym.id != "prims.broadcast_in_dim":
        return ()
    shape, bdims = tuple(p.args[1]), tuple(p.args[2])
    widened = {d for i, d in enumerate(bdims) if base.shape[i] == 1}
    return tuple(d for d in range(len(shape)) if (d not in bdims or d in widened) and shape[d] != 1)


def written_mask(chain, bases, value):
    """Where, in the first base of chain, a write of `value` through chain lands (a bool tensor)."""
    mask = ltorch.full(tuple(value.shape), True, dtype=torch.bool, device=value.device)
    for p, base in zip(reversed(chain), reversed(bases)):
        empty = ltorch.full(tuple(base.shape), False, dtype=torch.bool, device=base.device)
        dims = expanded_dims(p, base)
        mask = ltorch.reshape(ltorch.any(mask, dims, True), tuple(base.shape)) if dims else inverse(p, empty, mask)
    return mask


def unbroadcast(p, base, value, mask):
    """base after writing value into its expansion p at the places mask marks: each element of base takes the
    value written into one of its places (several places hold the same value, or eager refused the write)."""
    dims, shape = expanded_dims(p, base), tuple(base.shape)
    written = ltorch.reshape(ltorch.any(mask, dims, True), shape)
    if value.dtype == torch.bool:
        picked = ltorch.any(ltorch.logical_and(mask, value), dims, True)
    elif value.dtype.is_complex:
        picked = ltorch.sum(ltorch.where(mask, value, 0), dims, True)
    else:
        low = -float("inf") if value.dtype.is_floating_point else torch.iinfo(value.dtype).min
        picked = ltorch.amax(ltorch.where(mask, value, low), dims, True)
    return ltorch.where(written, ltorch.reshape(picked, shape), base)


def inverse(p: BoundSymbol, base, value):
    """base with p's view of it replaced by value."""
    pid, args = p.sym.id, p.args
    if pid == "prims.stop_gradient" or is_same_dtype_copy(p):
        return value
    if pid in ("prims.reshape", "prims.squeeze"):
        return ps.reshape(value, tuple(base.shape))
    if pid == "prims.transpose":
        perm = tuple(args[1])
        return ps.transpose(value, tuple(perm.index(i) for i in range(len(perm))))
    if pid == "prims.broadcast_in_dim":  # one that only adds dims of size 1 (unbroadcast does the others)
        return ps.reshape(value, tuple(base.shape))
    if pid in COMPLEX_INVERSES:
        return COMPLEX_INVERSES[pid](base, value)
    if pid == "prims.as_strided":
        return ps.as_strided_scatter(base, value, *args[1:4])
    if pid == "prims.slice":
        starts, ends = args[1], args[2]
        steps = args[3] if len(args) > 3 and args[3] is not None else (1,) * base.ndim
        # a dim is left out when it is whole for every size (asked of the expressions: no predicate)
        dims = [d for d in range(base.ndim) if not same_shape((starts[d], ends[d], steps[d]), (0, base.shape[d], 1))]
        return scatter_dims(base, value, dims, starts, ends, steps)
    raise AssertionError(f"functionalize: {pid} is not a view prim")


def scatter_dims(base, value, dims, starts, ends, steps):
    if not dims:
        return value
    d, rest = dims[0], dims[1:]
    if rest:
        inner = slice_dim(base, d, starts[d], ends[d], steps[d])
        value = scatter_dims(inner, value, rest, starts, ends, steps)
    return slice_scatter(base, value, d, starts[d], ends[d], steps[d])


# -- as_strided over memory the program owns (prims.as_strided; jitcore/ops/metadata_inplace.py) --------------------
def strided_view_meta(p: BoundSymbol, meta: torch.Tensor) -> torch.Tensor:
    """The layout of prims.as_strided's view of a tensor laid out as meta (contiguous in eager)."""
    size, stride, offset = p.args[1:4]
    flat = meta.contiguous().view(-1)
    return flat.as_strided(tuple(size), tuple(stride), flat.storage_offset() + offset)


def places_repeat(meta: torch.Tensor) -> bool:
    """Whether two elements of a view laid out as meta are one place in memory: exact (as_strided's strides may
    overlap in ways torch's own check calls too hard); a view of more than 2**22 elements whose strides do not show
    it is counted as repeating."""
    if meta.numel() <= 1:
        return False
    reach = 0  # the strides, smallest first, each past the places the smaller ones reach: no place repeats
    for d in sorted((d for d in range(meta.ndim) if meta.shape[d] > 1), key=meta.stride):
        if meta.stride(d) <= reach:
            break
        reach += (meta.shape[d] - 1) * meta.stride(d)
    else:
        return False
    if meta.numel() > 1 << 22:
        return True
    places = torch.zeros((), dtype=torch.int64)
    for n, s in zip(meta.shape, meta.stride()):
        places = places.unsqueeze(-1) + torch.arange(n) * s
    return places.unique().numel() < meta.numel()


# -- the memory a chain of view prims reads (meta tensors) --------------------------------------------------------
def example_values(xs) -> tuple:
    """The example values of sizes and view arguments (a proxy's value seen while tracing): read without recording a
    predicate; the one decision the metas feed (_check_write's overlap) records what it depends on."""
    return tuple(value_of(x) for x in xs)


def view_meta(p: BoundSymbol, meta: torch.Tensor):
    """The meta tensor of p's output viewed from meta (None when eager would copy instead of viewing)."""
    pid, args = p.sym.id, p.args
    try:
        if pid == "prims.stop_gradient" or is_same_dtype_copy(p):
            return meta
        if pid == "prims.reshape":
            return meta.view(example_values(args[1]))
        if pid == "prims.transpose":
            return meta.permute(example_values(args[1]))
        if pid == "prims.squeeze":
            return meta.squeeze(example_values(args[1])) if args[1] else meta
        if pid == "prims.slice":
            steps = args[3] if len(args) > 3 and args[3] is not None else (1,) * meta.ndim
            starts, ends, steps = example_values(args[1]), example_values(args[2]), example_values(steps)
            return meta[tuple(slice(s, e, k) for s, e, k in zip(starts, ends, steps))]
        if pid == "prims.unfold":
            return meta.unfold(*example_values(args[1:4]))
        if pid in COMPLEX_VIEW_STRIDES:
            return complex_view_meta(pid, meta)
        if pid == "prims.as_strided":
            return strided_view_meta(p, meta)
        if pid == "prims.broadcast_in_dim":
            shape, bdims = example_values(args[1]), example_values(args[2])
            view = [1] * len(shape)
            for i, d in enumerate(bdims):
                view[d] = meta.shape[i]
            return meta.view(view).expand(shape)
    except RuntimeError:
        return None
    return None


def within_new_strides(al) -> bool:
    """A write through a view made before an as_strided_ of the tensor it views (prims.as_strided whose grad_within
    is not writable): followed where that tensor is laid out contiguously from its memory's start, the new view's
    places do not repeat and they hold every place written (eager's backward then reads the gradient of each written
    place from the new view's; for a tensor laid out transposed it fails)."""
    k = next((k for k, p in enumerate(al.chain) if p.sym.id == "prims.as_strided" and len(p.args) > 4
              and p.args[4] is not None and p.args[4][3] is not True), None)
    if k is None:
        return True
    p = al.chain[k]
    if p.args[4][3] != "places":
        return False
    size, stride, offset = tuple(p.args[4][0]), tuple(p.args[4][1]), p.args[4][2]
    dtype = p.args[0].dtype  # (places relative to the memory it views)
    meta = torch.empty(tuple(example_values(p.args[0]._shape)), dtype=dtype, device="meta")
    for q in al.chain[k:]:
        meta = view_meta(q, meta)
        if meta is None or meta.dtype != dtype:
            return False
    new = torch.empty((meta.numel() + offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1,), device="meta")
    new = new.as_strided(size, stride, offset)
    if places_repeat(new) or max(new.numel(), meta.numel()) > 1 << 20:
        return False
    return bool(torch.isin(memory_places(meta), memory_places(new)).all())


def memory_places(meta: torch.Tensor) -> torch.Tensor:
    """The memory places of a meta tensor's elements, flattened."""
    places = torch.zeros((), dtype=torch.int64) + meta.storage_offset()
    for n, s in zip(meta.shape, meta.stride()):
        places = places.unsqueeze(-1) + torch.arange(n) * s
    return places.reshape(-1)
