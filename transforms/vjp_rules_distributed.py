"""Transforms (autodiff): VJP rules of the collective prims (jitcore/ops/prims_distributed.py), eager's rules for
torch.distributed._functional_collectives: the gradient of an all_reduce (a sum) is the all_reduce of the cotangents,
of an all_gather their reduce_scatter (a sum) and of a reduce_scatter (a sum) their all_gather; a wait passes its
cotangent on. The backward runs these collectives in the order the grad transform emits them, on every rank alike.
Also FSDP2's per-block lines (jitcore/ops/sharding.py).
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ops import prims_distributed as pd
from jitcore.ops import sharding
from transforms.vjp_helpers import VJP_RULES


def _sum_only(op: str, reduce_op: str):
    if reduce_op != "sum":
        raise UnsupportedError("autodiff", f"the gradient of {op} with reduction {reduce_op!r}: eager's backward only "
                               "supports 'sum' (torch.distributed._functional_collectives raises in the backward)",
                               hint="call it on a detached tensor or under torch.no_grad() if no gradient is needed")


def all_reduce_vjp(bsym, g):
    _a, reduce_op, group_name = bsym.args
    _sum_only("all_reduce", reduce_op)
    return pd.wait_tensor(pd.all_reduce(g, "sum", group_name)), None, None


VJP_RULES["prims.all_reduce"] = all_reduce_vjp


def all_gather_into_tensor_vjp(bsym, g):
    _a, group_size, group_name = bsym.args
    return pd.wait_tensor(pd.reduce_scatter_tensor(g, "sum", group_size, group_name)), None, None


VJP_RULES["prims.all_gather_into_tensor"] = all_gather_into_tensor_vjp


def reduce_scatter_tensor_vjp(bsym, g):
    _a, reduce_op, group_size, group_name = bsym.args
    _sum_only("reduce_scatter_tensor", reduce_op)
    return pd.wait_tensor(pd.all_gather_into_tensor(g, group_size, group_name)), None, None, None


VJP_RULES["prims.reduce_scatter_tensor"] = reduce_scatter_tensor_vjp


def wait_tensor_vjp(bsym, g):
    return (g,)


VJP_RULES["prims.wait_tensor"] = wait_tensor_vjp


# FSDP2's per-block lines (jitcore/ops/sharding.py): the block's gradients reach its parameters inside the backward, at
# fsdp_post_backward (FSDP reduce-scatters them there), so the backward returns none for them; before the block's
# backward, fsdp_regather gathers its parameters again
def fsdp_unshard_vjp(bsym, *gs):
    key, names, _params = bsym.args
    given = [(n, g) for n, g in zip(names, gs) if g is not None]
    if given:
        sharding.fsdp_post_backward_sym(key, tuple(n for n, _ in given), tuple(g for _, g in given))
    return None, None, None


VJP_RULES[sharding.fsdp_unshard_sym.id] = fsdp_unshard_vjp


def fsdp_reshard_vjp(bsym, *gs):
    passed = iter(sharding.fsdp_regather_sym(bsym.args[0], tuple(g for g in gs if g is not None)))
    return None, [None if g is None else next(passed) for g in gs], None, None


VJP_RULES[sharding.fsdp_reshard_sym.id] = fsdp_reshard_vjp
