"""Ops: torch.distributed's collectives as written by the user, recorded as the collective prims
(prims_distributed.py), in program order. The in-place ones (`dist.all_reduce(t)`, `dist.all_gather_into_tensor(out,
t)`, `dist.reduce_scatter_tensor(out, t)`) record the functional collective, its wait, and a write into the tensor
they fill, which autograd does not record (as in eager: c10d's collectives have no autograd, a gradient passes through
the written tensor unchanged). The functional collectives (torch.distributed._functional_collectives) record the
collective and its wait; their gradients are eager's (all_reduce <-> all_reduce, all_gather <-> reduce_scatter).
torch.distributed's other calls (broadcast, barrier, send, ...) are refused: run once while tracing, they would be
missing from every later call.
"""
from __future__ import annotations

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_distributed as pd
from jitcore.ops import torch_map
from jitcore.ops.torch_inplace import write
from jitcore.ops.utils import check

AVAILABLE = torch.distributed.is_available()
if AVAILABLE:
    import torch.distributed as dist

    funcol = compat.functional_collectives()


def _refuse_async(name: str, async_op):
    if async_op:
        raise UnsupportedError(
            "torch.distributed", f"torch.distributed.{name}(..., async_op=True) returns a Work handle to wait on, "
            "which a jitted function does not support",
            hint=f"call the synchronous form torch.distributed.{name}(...) (async_op=False), or a functional "
                 "collective of torch.distributed._functional_collectives and its wait_tensor")


def _reduce_op_name(name: str, op) -> str:
    """"sum" for dist.ReduceOp.SUM (the names torch.ops._c10d_functional takes)."""
    if isinstance(op, str):
        low = op.lower()
    else:
        low = getattr(op, "name", "").lower()
    if low not in pd.REDUCE_OPS:
        raise UnsupportedError("torch.distributed", f"torch.distributed.{name}: reduction {op!r} is not supported",
                               hint=f"use one of {sorted(pd.REDUCE_OPS)} (dist.ReduceOp.SUM, ...)")
    return low


def _process_group(name: str, group):
    """(group name, group size) of a c10d collective's `group` argument (None: the default group)."""
    if group is None:
        group = compat.default_process_group()
    if not isinstance(group, dist.ProcessGroup):
        raise UnsupportedError("torch.distributed", f"torch.distributed.{name}: group {group!r} is not a ProcessGroup")
    return group.group_name, group.size()


def _funcol_group(group, tag: str):
    """(group name, group size) of a functional collective's group (a ProcessGroup, a list of ranks, a DeviceMesh)."""
    return compat.functional_group(group, tag)


def _tensor(name: str, what: str, t):
    check(isinstance(t, TensorProxy), lambda: f"torch.distributed.{name}: expected {what} to be a tensor, got {t!r}")


def _fill(name: str, target, value):
    """target <- value, a write autograd does not record (c10d's collectives have no autograd kernel)."""
    with torch.no_grad():
        if tuple(value.shape) != tuple(target.shape):  # output given stacked, (world, n, ...), or flat
            value = value.reshape(tuple(target.shape))
        write(name, target, value)


# -- torch.distributed (c10d): in-place, synchronous ---------------------------------------------------------------
def all_reduce(tensor, op=None, group=None, async_op=False):
    _refuse_async("all_reduce", async_op)
    _tensor("all_reduce", "tensor", tensor)
    op_name = "sum" if op is None else _reduce_op_name("all_reduce", op)
    group_name, _ = _process_group("all_reduce", group)
    with torch.no_grad():
        value = pd.wait_tensor(pd.all_reduce(tensor, op_name, group_name))
    _fill("all_reduce", tensor, value)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    _refuse_async("all_gather_into_tensor", async_op)
    _tensor("all_gather_into_tensor", "output_tensor", output_tensor)
    _tensor("all_gather_into_tensor", "input_tensor", input_tensor)
    group_name, size = _process_group("all_gather_into_tensor", group)
    with torch.no_grad():
        flat = input_tensor if input_tensor.ndim > 0 else input_tensor.reshape((1,))
        value = pd.wait_tensor(pd.all_gather_into_tensor(flat, size, group_name))
    _fill("all_gather_into_tensor", output_tensor, value)


def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    _refuse_async("reduce_scatter_tensor", async_op)
    _tensor("reduce_scatter_tensor", "output", output)
    _tensor("reduce_scatter_tensor", "input", input)
    op_name = "sum" if op is None else _reduce_op_name("reduce_scatter_tensor", op)
    group_name, size = _process_group("reduce_scatter_tensor", group)
    with torch.no_grad():
        flat = input.reshape((size * output.shape[0], *output.shape[1:])) if output.ndim > 0 else \
            input.reshape((size,))
        value = pd.wait_tensor(pd.reduce_scatter_tensor(flat, op_name, size, group_name))
    _fill("reduce_scatter_tensor", output, value)


# -- torch.distributed._functional_collectives: new tensors, waited on before use ----------------------------------
# (eager hands back an AsyncCollectiveTensor that waits on its first use: here the wait follows the collective)
def funcol_all_reduce(self, reduceOp, group, tag=""):
    group_name, _ = _funcol_group(group, tag)
    return pd.wait_tensor(pd.all_reduce(self, _reduce_op_name("all_reduce", reduceOp), group_name))


def funcol_all_gather_tensor(self, gather_dim, group, tag=""):
    group_name, size = _funcol_group(group, tag)
    gathered = pd.wait_tensor(pd.all_gather_into_tensor(self, size, group_name))
    if gather_dim % self.ndim == 0:
        return gathered
    return torch.cat(torch.chunk(gathered, size, 0), gather_dim)


def funcol_reduce_scatter_tensor(self, reduceOp, scatter_dim, group, tag=""):
    group_name, size = _funcol_group(group, tag)
    if scatter_dim % self.ndim != 0:
        self = torch.cat(torch.chunk(self, size, scatter_dim), 0)
    # (eager's layout too: the pieces along scatter_dim stacked along dim 0, so this rank's piece is its own chunk)
    return pd.wait_tensor(pd.reduce_scatter_tensor(self, _reduce_op_name("reduce_scatter_tensor", reduceOp), size,
                                                   group_name))


def funcol_wait_tensor(tensor):
    return pd.wait_tensor(tensor)


def _c10d_functional_all_reduce(input, reduce_op, group_name):
    return pd.all_reduce(input, _reduce_op_name("all_reduce", reduce_op), str(group_name))


def _c10d_functional_all_gather_into_tensor(input, group_size, group_name):
    return pd.all_gather_into_tensor(input, group_size, str(group_name))


def _c10d_functional_reduce_scatter_tensor(input, reduce_op, group_size, group_name):
    return pd.reduce_scatter_tensor(input, _reduce_op_name("reduce_scatter_tensor", reduce_op), group_size,
                                    str(group_name))


# torch.distributed's other communication calls: run at trace time only, they would be missing from every later call
_REFUSED = ("broadcast", "all_gather", "reduce", "gather", "scatter", "reduce_scatter", "all_to_all",
            "all_to_all_single", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
            "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
            "all_reduce_coalesced", "all_gather_coalesced")


def _refuse(name: str):
    def call(*args, **kwargs):
        raise UnsupportedError(
            "torch.distributed", f"torch.distributed.{name} inside a jitted function is not supported",
            hint="supported: torch.distributed.all_reduce, all_gather_into_tensor, reduce_scatter_tensor (synchronous) "
                 "and the functional collectives of torch.distributed._functional_collectives; or call it outside "
                 "the jitted function")

    return call


def _register():
    table = {getattr(dist, name): _refuse(name) for name in _REFUSED if hasattr(dist, name)}
    table.update({
        dist.all_reduce: all_reduce, dist.all_gather_into_tensor: all_gather_into_tensor,
        dist.reduce_scatter_tensor: reduce_scatter_tensor,
        funcol.all_reduce: funcol_all_reduce, funcol.wait_tensor: funcol_wait_tensor,
    })
    for name in compat.FUNCTIONAL_GATHERS:
        if hasattr(funcol, name):
            table[getattr(funcol, name)] = funcol_all_gather_tensor
    for name in compat.FUNCTIONAL_SCATTERS:
        if hasattr(funcol, name):
            table[getattr(funcol, name)] = funcol_reduce_scatter_tensor
    ops = torch.ops._c10d_functional
    for packet, fn in ((ops.all_reduce, _c10d_functional_all_reduce),
                       (ops.all_gather_into_tensor, _c10d_functional_all_gather_into_tensor),
                       (ops.reduce_scatter_tensor, _c10d_functional_reduce_scatter_tensor),
                       (ops.wait_tensor, pd.wait_tensor)):
        table[packet] = fn
        table[packet.default] = fn
    for torch_fn, fn in table.items():
        torch_map.TORCH_MAP.setdefault(torch_fn, fn)


if AVAILABLE:
    _register()
