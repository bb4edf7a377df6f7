"""Executors: the claim pass, the only place that decides who runs each op (first executor in priority order
whose implementation accepts the line), then each fusion executor groups the lines it claimed into regions.
Each claimed line records its executor in `BoundSymbol.claimed_by`, which later passes ask (transforms/memory.py).
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ir.trace import Timer, Trace, from_trace


def claim_bsym(bsym, executors) -> list:
    """The lines running bsym: the first executor whose implementation accepts it (checker on the actual proxies)
    claims it; a line no one claims is replaced by its subsymbols, offered in turn; an unclaimed prim is an error
    naming the op and the executors tried."""
    for ex in executors:
        if ex.can_execute(bsym):
            line = ex.execute(bsym)
            line = line.from_bsym() if line is bsym else line  # a line that runs as it prints: mark a copy
            line.claimed_by = ex
            return [line]
    if bsym.subsymbols:
        out = []
        for sub in bsym.subsymbols:
            out += claim_bsym(sub, executors)
        return out
    names = ", ".join(ex.name for ex in executors)
    raise UnsupportedError("op", f"no executor can run {bsym.sym.id} (tried: {names})",
                           hint="add an executor that implements it, or put torch_ex in the executor list")


def claim(trace: Trace, executors, fn_name: str | None = None) -> Trace:
    """A new trace where every line is a call of the executor that runs it (recorded in its `claimed_by`,
    for later passes to ask it about the line through the Executor interface, executors/base.py). Then each
    fusion executor (one with a `fuse` method) groups the lines it claimed into dependency-safe regions
    (executors/regions.py); the region lines it makes name it too."""
    with Timer() as t:
        new = from_trace(trace, fn_name)
        for bsym in trace.bound_symbols:
            new.bound_symbols += claim_bsym(bsym, executors)
        fusion = [ex for ex in executors if hasattr(ex, "fuse")]
        for ex in fusion:
            new = ex.fuse(new)
            for b in new.bound_symbols:  # the region lines it made
                if b.claimed_by is None:
                    b.claimed_by = ex
    new.set_provenance("Transform for execution (claim)", t.seconds)
    return new


def flatten_to_prims(trace: Trace) -> Trace:
    """The same program with every composite replaced by its decomposition (prims and opaque ops only)."""

    def flat(bsym):
        if bsym.sym.is_prim or not bsym.subsymbols:
            return [bsym]
        return [b for sub in bsym.subsymbols for b in flat(sub)]

    new = from_trace(trace)
    new.bound_symbols = [b for bsym in trace.bound_symbols for b in flat(bsym)]
    new.set_provenance("Flatten to prims")
    return new
