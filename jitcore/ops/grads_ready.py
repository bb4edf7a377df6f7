"""Ops: `grads_ready`, the line of a backward program that hands parameters their gradients while the backward
still runs (DDP(jitcore.jit(model)): DDP's reducer starts a bucket's all-reduce when its parameters' gradients are
accumulated, so the communication overlaps the rest of the backward). transforms/early_grads.py places the lines;
jitcore/runtime/autograd.py opens a delivery (the parameters of the call) around the backward program. With no delivery
open (the program runs outside DDP, or as text) a line does nothing and the gradients are returned as usual.
"""
from __future__ import annotations

import torch

from jitcore.ir.symbol import EAGER_KERNELS, Symbol, Tag


class Delivery:
    """The parameters whose gradients the backward of one call hands over itself (input position -> a view of the
    parameter made by the call's forward), by a backward of the autograd engine from the views (the parameters'
    AccumulateGrad nodes and the hooks on them run, as in eager autograd). Gradients are handed over in batches of
    at least `batch_bytes` (one engine call each, a few tens of microseconds), and the rest by `flush()` at the end;
    `done`: the positions handed over (or batched) so far."""

    __slots__ = ("batch_bytes", "done", "params", "pending", "pending_bytes")

    def __init__(self, params: dict, batch_bytes: int = 0):
        self.params, self.batch_bytes, self.done = params, batch_bytes, set()
        self.pending, self.pending_bytes = ([], []), 0

    def hand_over(self, positions, grads):
        tensors, given = self.pending
        for pos, g in zip(positions, grads):
            p = self.params.get(pos)
            if p is not None and g is not None and pos not in self.done:
                self.done.add(pos)
                tensors.append(p)
                given.append(g)
                self.pending_bytes += g.numel() * g.element_size()
        if self.pending_bytes >= self.batch_bytes:
            self.flush()

    def flush(self):
        tensors, given = self.pending
        self.pending, self.pending_bytes = ([], []), 0
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
