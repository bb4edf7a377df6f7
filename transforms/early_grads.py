"""Transforms: early gradients. Over a backward trace (saved, cotangents -> one gradient per input), a
`grads_ready(positions, grads)` line right after the line that computes the gradients of parameters (the inputs at
`positions`), so that under DDP each parameter's gradient is accumulated, and its bucket's all-reduce started, while
the rest of the backward runs (jitcore/ops/grads_ready.py). The gradients are unchanged: the lines only read them.
"""
from __future__ import annotations

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.grads_ready import grads_ready_sym


def with_grads_ready(backward: Trace, positions) -> Trace:
    """backward with a grads_ready line after each line making gradients of the inputs at `positions` (gradients
    that are arguments of the backward are handed over first). The same trace when none of them has a gradient."""
    outputs = list(backward.output)
    wanted = {}  # gradient name -> the input positions it is the gradient of
    for pos in positions:
        g = outputs[pos] if pos < len(outputs) else None
        if isinstance(g, TensorProxy):
            wanted.setdefault(g.name, []).append(pos)
    if not wanted:
        return backward
    with Timer() as t:
        new = from_trace(backward)
        given = {a.name: a for a in _flat_args(backward)}
        new.bound_symbols = list(_ready_after(given, wanted))
        for bsym in backward.bound_symbols:
            new.bound_symbols.append(bsym)
            made = {o.name: o for o in bsym.flat_proxy_outs()}
            new.bound_symbols += _ready_after(made, wanted)
    new.set_provenance("Early gradients (parameters' gradients handed over as soon as computed)", t.seconds)
    return new


def _flat_args(trace: Trace) -> list:
    out = []
    for a in trace.args:
        out += a if isinstance(a, (list, tuple)) else [a]
    return [a for a in out if isinstance(a, TensorProxy)]


def _ready_after(made: dict, wanted: dict) -> list:
    """The grads_ready line for the wanted gradients among `made` (consumed from `wanted`), or none."""
    positions, grads = [], []
    for name in [n for n in made if n in wanted]:
        for pos in wanted.pop(name):
            positions.append(pos)
            grads.append(made[name])
    if not positions:
        return []
    return [grads_ready_sym.bind(tuple(positions), tuple(grads), output=None)]
