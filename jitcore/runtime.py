"""Runtime: the torch.autograd.Function that runs a compiled forward program and, on backward, the compiled
backward program, so jitted calls compose with eager autograd, optimizers and `loss.backward()`.
The backward program is differentiable once: a backward with create_graph=True through a jitted function raises
(its gradients would carry no graph, and a later second derivative would silently miss the jitted part).
"""
from __future__ import annotations

import torch


class _JitAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, *inputs):
        results = program.forward(*inputs)
        n = program.n_outputs
        outputs, saved = results[:n], results[n:]
        tensors = [s for s in saved if isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.saved_layout = [None if isinstance(s, torch.Tensor) else s for s in saved]
        ctx.program = program
        ctx.mark_non_differentiable(*[o for o, rg in zip(outputs, program.output_requires_grad)
                                      if isinstance(o, torch.Tensor) and not rg])
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *cotangents):
        if torch.is_grad_enabled():  # autograd turns grad mode on in backward only for create_graph=True
            raise RuntimeError(
                "jitcore: double backward is not supported: a backward with create_graph=True reached a jitted "
                "function, whose compiled backward is differentiable once. Compute higher-order gradients eagerly "
                "(call the original function) or take first-order gradients only.")
        program = ctx.program
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if s is None else s for s in ctx.saved_layout]
        del tensors
        # unless the graph is retained (retain_graph=True), ctx drops its references now; the backward program
        # empties `saved` on entry, so each saved tensor is freed right after its last use, as eager autograd does
        ctx.maybe_clear_saved_tensors()
        cts = [c for c, rg in zip(cotangents, program.output_requires_grad) if rg]
        grads = program.backward(saved, cts)
        return (None, *grads)


class AutogradProgram:
    """forward(*inputs) -> (*outputs, *saved); backward(saved, cotangents) -> one grad per input (two lists,
    emptied by the program as it unpacks them)."""

    def __init__(self, forward, backward, n_outputs: int, output_requires_grad: list):
        self.forward, self.backward = forward, backward
        self.n_outputs, self.output_requires_grad = n_outputs, list(output_requires_grad)

    def __call__(self, *inputs):
        if torch.is_grad_enabled():  # inside apply, the programs run with grad mode off
            return _JitAutograd.apply(self, *inputs)
        return self.forward(*inputs)[: self.n_outputs]
