"""Transforms: after autodiff, the forward trace's saved-for-backward values that are written inputs (or views of
them) replaced by copies: the epilogue writes those inputs after the forward, before the backward reads what it saved.
Split from functionalize.py, whose writebacks it follows.
"""
from __future__ import annotations

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.trace import Timer, Trace, from_trace, tracectx
from jitcore.ir.views import MULTI_INPUT_VIEW_OPS, VIEW_OPS
from jitcore.ops import ltorch

# lines whose result is one of their tensor arguments' storage at run time (and shares its version counter): a
# detached input, the input after a write under no_grad (the torch executor returns the written values, a detach)
_SAME_STORAGE = frozenset(("prims.stop_gradient", "prims.no_grad_update"))


def save_written_inputs_by_copy(forward: Trace, n_outputs: int, written: set) -> Trace:
    """The forward trace with each saved-for-backward value that is a written input, or a view of one, replaced by a
    copy: the epilogue overwrites those inputs after the forward, before any backward reads what it saved."""
    aliased = set(written)
    for b in forward.bound_symbols:
        tensors = [a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)]
        if b.sym.id in VIEW_OPS and any(t.name in aliased for t in tensors[:None if b.sym.id in MULTI_INPUT_VIEW_OPS
                                                                           else 1]):
            aliased.update(o.name for o in b.flat_proxy_outs())
        elif b.sym.id in _SAME_STORAGE and any(a.name in aliased for a in tensors):
            aliased.update(o.name for o in b.flat_proxy_outs())
    outs = list(forward.output)
    stale = [i for i in range(n_outputs, len(outs)) if isinstance(outs[i], TensorProxy) and outs[i].name in aliased]
    if not stale:
        return forward
    with Timer() as t:
        new = from_trace(forward)
        new.bound_symbols.extend(forward.bound_symbols)
        with tracectx(new):
            for i in stale:
                outs[i] = ltorch.clone(outs[i])
        new.output = tuple(outs)
    return new.set_provenance("Saved written inputs by copy (functionalization)", t.seconds)
