"""Ops: torch ops whose output sizes depend on tensor values: nonzero, argwhere, masked_select, unique,
unique_consecutive, bincount, repeat_interleave by a tensor. Each such size is known only when the program runs: it
is made by prims.nonzero (a count of entries) or prims.item_as_size (a tensor's value), and later ops use it
symbolically, so one program serves every count, in both cache modes. Boolean-mask indexing (torch_index) and
tensor_split by a tensor (torch_shape) build on the same two prims.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import IntegerProxy
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_index as pi
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_index import _check_mask
from jitcore.ops.torch_reduction import amax, cumsum
from jitcore.ops.torch_shape import size_max, slice_dim
from jitcore.ops.utils import check

T = torch.Tensor
ND = (Tag.NON_DIFFERENTIABLE,)


def _column(rows, j):
    return ps.squeeze(slice_dim(rows, 1, j, j + 1), (1,))


def _flat(a):
    return ps.reshape(a, (a.numel(),))


def _iota(n, device):
    return pc.iota(n, start=0, step=1, device=device, dtype=torch.int64)


# -- selections of a data-dependent number of entries (prims.nonzero) ------------------------------------------------
@torchsymbol(torch.nonzero, T.nonzero, method="nonzero", id="ltorch.nonzero", tags=ND)
def nonzero(input, *, out=None, as_tuple=False):
    check(out is None, "nonzero: out= is not supported inside a jitted function")
    if not as_tuple:
        return pi.nonzero(input)[0]
    if input.ndim == 0:  # a scalar counts as one entry: (tensor([0]),) or (tensor([]),)
        rows = pi.nonzero(ps.reshape(input, (1,)))[0]
        return (ps.reshape(rows, (rows.shape[0],)),)
    rows = pi.nonzero(input)[0]
    return tuple(_column(rows, j) for j in range(input.ndim))


@torchsymbol(torch.argwhere, T.argwhere, method="argwhere", id="ltorch.argwhere", tags=ND)
def argwhere(input):
    return pi.nonzero(input)[0]


@torchsymbol(torch.masked_select, T.masked_select, method="masked_select", id="ltorch.masked_select")
def masked_select(input, mask):
    """input's entries where mask (broadcast with it) is True, flattened in order."""
    _check_mask("masked_select", mask)
    input, mask = te.broadcast(input, mask, op="masked_select")
    rows = pi.nonzero(_flat(mask))[0]
    return pi.take(_flat(input), ps.reshape(rows, (rows.shape[0],)), 0)


# -- unique values: runs of equal entries of a (sorted) sequence -----------------------------------------------------
def _runs(input, seq, perm, return_inverse, return_counts):
    """The first entry of each run of equal entries of seq (1-D), and optionally each entry's run (inverse, in
    input's shape; perm: the sort that made seq from input's entries) and the runs' lengths."""
    n = seq.shape[0]
    pos = _iota(n, seq.device)
    prev = pi.take(seq, te.where(te.gt(pos, 0), te.sub(pos, 1), pos), 0)  # (works for n == 0 too)
    starts = te.logical_or(te.eq(pos, 0), te.ne(seq, prev))
    rows = pi.nonzero(starts)[0]
    count = rows.shape[0]
    values = pi.take(seq, ps.reshape(rows, (count,)), 0)
    if not (return_inverse or return_counts):
        return values
    run = te.sub(cumsum(starts, 0), 1)  # each entry's run (int64)
    out = [values]
    if return_inverse:
        inverse = run if perm is None else pi.scatter(pc.full((n,), 0, device=seq.device, dtype=torch.int64), perm,
                                                      run, 0)
        out.append(ps.reshape(inverse, tuple(input.shape)))
    if return_counts:
        ones = pc.full((n,), 1, device=seq.device, dtype=torch.int64)
        out.append(pi.index_add(pc.full((count,), 0, device=seq.device, dtype=torch.int64), run, ones, 0))
    return tuple(out)


@torchsymbol(torch.unique, T.unique, method="unique", id="ltorch.unique", tags=ND)
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values of input in ascending order (as torch gives them on CPU and CUDA, sorted or not)."""
    if dim is not None:  # unique slices: the torch kernel, its output sizes guarded
        return opaque_symbol(torch.unique)(input, sorted, return_inverse, return_counts, dim)
    seq, perm = pr.sort(_flat(input), 0, False, True)
    return _runs(input, seq, perm, return_inverse, return_counts)


@torchsymbol(torch.unique_consecutive, T.unique_consecutive, method="unique_consecutive",
             id="ltorch.unique_consecutive", tags=ND)
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    if dim is not None:
        return opaque_symbol(torch.unique_consecutive)(input, return_inverse, return_counts, dim)
    return _runs(input, _flat(input), None, return_inverse, return_counts)


# -- lengths that are tensor values (prims.item_as_size) -------------------------------------------------------------
@torchsymbol(torch.bincount, T.bincount, method="bincount", id="ltorch.bincount", tags=ND)
def bincount(input, weights=None, minlength=0):
    check(input.ndim == 1 and not input.dtype.is_floating_point and input.dtype is not torch.bool,
          lambda: f"bincount only supports 1-d non-negative integral inputs, got {input.dtype} of shape "
                  f"{tuple(input.shape)}")
    check(minlength >= 0, "minlength should be >= 0")
    n = input.shape[0]
    if isinstance(n, int) and n == 0:
        length = minlength
    else:  # max(input) + 1 (eager raises on a negative entry; so does the size)
        length = size_max(pm.item_as_size(te.add(amax(input), 1)), minlength)
    if weights is None:
        src, dtype = pc.full((n,), 1, device=input.device, dtype=torch.int64), torch.int64
    else:
        check(tuple(weights.shape) == tuple(input.shape), "weights should be 1-d and have the same length as input")
        dtype = weights.dtype if weights.dtype.is_floating_point else torch.float64
        src = to_dtype(weights, dtype)
    return pi.index_add(pc.full((length,), 0, device=input.device, dtype=dtype), input, src, 0)


@torchsymbol(torch.repeat_interleave, T.repeat_interleave, method="repeat_interleave", id="ltorch.repeat_interleave")
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each entry (or slice along dim) repeated; by a tensor of counts, the output length is their sum, known only
    at run time (unless output_size gives it)."""
    if repeats is None:  # torch.repeat_interleave(repeats): the indices 0..n-1, each repeated
        repeats, input, dim = input, _iota(input.shape[0], input.device), 0
    if dim is None:
        input, dim = _flat(input), 0
    d = dim % input.ndim if input.ndim else 0
    n = input.shape[d]
    if isinstance(repeats, (int, IntegerProxy)):
        shape = tuple(input.shape)
        grown = ps.broadcast_in_dim(input, shape[:d + 1] + (repeats,) + shape[d + 1:], tuple(range(d + 1)) +
                                    tuple(range(d + 2, input.ndim + 1)))
        return ps.reshape(grown, shape[:d] + (n * repeats,) + shape[d + 1:])
    check(repeats.ndim <= 1 and not repeats.dtype.is_floating_point,
          "repeat_interleave: repeats must be 0-dim or 1-dim integer tensor")
    if repeats.numel() == 1 and n != 1:
        repeats = te.expand_to(ps.reshape(repeats, (1,)), (n,))
    check(repeats.shape[0] == n, "repeats must have the same size as input along dim")
    ends = cumsum(repeats, 0)  # entry i fills [ends[i-1], ends[i])
    total = output_size if output_size is not None else pm.item_as_size(ps.reshape(slice_dim(ends, 0, n - 1, n), ()))
    # which entry each output position comes from: the number of ends[:-1] at or before it
    marks = pi.index_add(pc.full((total + 1,), 0, device=input.device, dtype=torch.int64), slice_dim(ends, 0, 0, n - 1),
                         pc.full((n - 1,), 1, device=input.device, dtype=torch.int64), 0)
    source = cumsum(slice_dim(marks, 0, 0, total), 0)
    return pi.take(input, source, d)
