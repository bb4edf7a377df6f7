"""Ops: collective communication prims (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, wait_tensor), the
functional forms of torch.distributed's collectives over a process group named by its group name (a string, so a
trace prints and runs as text). Each is an effect (DONT_DCE, EFFECTS): every rank must run the same collectives in
the same order, so DCE never drops one whose result is unused, CSE never merges two and fusion never moves one.
The torch executor runs them with torch.ops._c10d_functional; torch_distributed.py maps the user's calls onto them.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops.registry import prim
from jitcore.ops.utils import check


# -- eager kernels: what each prim below runs on real tensors (torch), given with its definition ---------------
# torch's functional collectives, on contiguous tensors as c10d's
def _all_reduce(a, reduce_op, group_name):
    return torch.ops._c10d_functional.all_reduce(a.contiguous(), reduce_op, group_name)


def _all_gather_into_tensor(a, group_size, group_name):
    return torch.ops._c10d_functional.all_gather_into_tensor(a.contiguous(), group_size, group_name)


def _reduce_scatter_tensor(a, reduce_op, group_size, group_name):
    return torch.ops._c10d_functional.reduce_scatter_tensor(a.contiguous(), reduce_op, group_size, group_name)


def _wait_tensor(a):
    return torch.ops._c10d_functional.wait_tensor(a)


COLLECTIVE = (Tag.DONT_DCE, Tag.EFFECTS)
# the reductions torch.ops._c10d_functional takes, by name
REDUCE_OPS = frozenset({"sum", "avg", "product", "min", "max", "band", "bor", "bxor"})


def _tensor(op, a):
    check(isinstance(a, TensorProxy), lambda: f"prims.{op}: expected a tensor, got {a!r}")


def _group(op, group_name, group_size=None):
    check(isinstance(group_name, str), lambda: f"prims.{op}: the group is named by a string, got {group_name!r}")
    check(group_size is None or (type(group_size) is int and group_size > 0),
          lambda: f"prims.{op}: group_size must be a positive int, got {group_size!r}")


def _reduce_op(op, reduce_op):
    check(reduce_op in REDUCE_OPS, lambda: f"prims.{op}: unknown reduction {reduce_op!r} (one of {sorted(REDUCE_OPS)})")


@prim("prims.all_reduce", tags=COLLECTIVE, kernel=_all_reduce)
def all_reduce(a, reduce_op, group_name):
    """a reduced elementwise over the ranks of the group (a new tensor; a is unchanged). Not finished until
    prims.wait_tensor of the result."""
    _tensor("all_reduce", a)
    _reduce_op("all_reduce", reduce_op)
    _group("all_reduce", group_name)
    return a.like()


@prim("prims.all_gather_into_tensor", tags=COLLECTIVE, kernel=_all_gather_into_tensor)
def all_gather_into_tensor(a, group_size, group_name):
    """The ranks' a concatenated along dim 0, in rank order (a new tensor)."""
    _tensor("all_gather_into_tensor", a)
    _group("all_gather_into_tensor", group_name, group_size)
    check(a.ndim > 0, lambda: "prims.all_gather_into_tensor: expected a tensor of at least one dimension")
    return TensorProxy((a.shape[0] * group_size, *a.shape[1:]), a.dtype, a.device, a.requires_grad)


@prim("prims.reduce_scatter_tensor", tags=COLLECTIVE, kernel=_reduce_scatter_tensor)
def reduce_scatter_tensor(a, reduce_op, group_size, group_name):
    """a reduced over the ranks, then split in group_size pieces along dim 0: this rank's piece (a new tensor)."""
    _tensor("reduce_scatter_tensor", a)
    _reduce_op("reduce_scatter_tensor", reduce_op)
    _group("reduce_scatter_tensor", group_name, group_size)
    check(a.ndim > 0 and a.shape[0] % group_size == 0,
          lambda: f"prims.reduce_scatter_tensor: dim 0 of a ({tuple(a.shape)}) must divide by the group size "
                  f"{group_size}")
    return TensorProxy((a.shape[0] // group_size, *a.shape[1:]), a.dtype, a.device, a.requires_grad)


@prim("prims.wait_tensor", tags=COLLECTIVE, kernel=_wait_tensor)
def wait_tensor(a):
    """a once the collective that made it has finished (a itself when nothing is pending)."""
    _tensor("wait_tensor", a)
    return a.like()
