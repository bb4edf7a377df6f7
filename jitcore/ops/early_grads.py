"""Ops: `grads_ready`, the line of a backward program that hands parameters their gradients while the backward
still runs (DDP(jitcore.jit(model)): DDP's reducer starts a bucket's all-reduce when its parameters' gradients are
accumulated, so the communication overlaps the rest of the backward). transforms/early_grads.py places the lines;
jitcore/autograd.py opens a delivery (the parameters of the call) around the backward program. With no delivery
open (the program runs outside DDP, or as text) a line does nothing and the gradients are returned as usual.
"""
from __future__ import annotations

import torch

from jitcore.ir.symbol import EAGER_KERNELS, Symbol, Tag


class Delivery:
    """The parameters whose gradients the backward of one call hands over itself (input position -> a view of the
    parameter made by the call's forward), by a backward of the autograd engine from each view (the parameter's
    AccumulateGrad node and the hooks on it run, as in eager autograd); `done`: the positions handed over so far."""

    __slots__ = ("done", "params")

    def __init__(self, params: dict):
        self.params, self.done = params, set()

    def hand_over(self, positions, grads):
        tensors, given = [], []
        for pos, g in zip(positions, grads):
            p = self.params.get(pos)
            if p is not None and g is not None and pos not in self.done:
                self.done.add(pos)
                tensors.append(p)
                given.append(g)
        if tensors:  # (a nested backward of the engine: the parameters' AccumulateGrad nodes and their hooks)
            torch.autograd.backward(tensors, given)


DELIVERIES: list = []  # the open deliveries, innermost last (a backward may run another jitted backward)


def grads_ready(positions, grads):
    """Hand the gradients `grads` of the inputs at `positions` to their parameters now (see Delivery)."""
    if DELIVERIES and DELIVERIES[-1] is not None:
        DELIVERIES[-1].hand_over(positions, grads)


grads_ready_sym = Symbol("python.grads_ready", "grads_ready", meta=lambda positions, grads: None,
                         tags=(Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE), module="",
                         call_ctx={"grads_ready": grads_ready})
EAGER_KERNELS[grads_ready_sym.id] = grads_ready
