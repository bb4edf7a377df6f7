"""Transforms: dead code elimination. Drops lines whose outputs nothing uses, keeping side-effecting ones:
in-place writes, DONT_DCE lines, and random draws (an unused draw still advances the generator, and the user's
later draws, in eager after the call, see that state).
"""
from __future__ import annotations

from jitcore.ir.proxies import Proxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Timer, Trace, from_trace

KEEP = frozenset({Tag.DONT_DCE, Tag.INPLACE})


def draws_random(bsym) -> bool:
    """Whether a line draws random numbers. A composite tagged RANDOM that recorded no random prim (dropout with
    p=0, sdpa with dropout_p=0.0) draws nothing, so only its decomposition is asked."""
    if bsym.subsymbols:
        return any(draws_random(s) for s in bsym.subsymbols)
    return Tag.RANDOM in bsym.sym.tags


def dce(trace: Trace) -> Trace:
    with Timer() as t:
        needed = {p.name for p in tree_leaves(trace.output) if isinstance(p, Proxy)}
        kept = []
        for bsym in reversed(trace.bound_symbols):
            outs = bsym.flat_proxy_outs()
            if bsym.sym.tags & KEEP or any(o.name in needed for o in outs) or draws_random(bsym):
                kept.append(bsym)
                needed.update(a.name for a in bsym.flat_proxy_args())
        new = from_trace(trace)
        new.bound_symbols = kept[::-1]
    return new.set_provenance("Dead Code Elimination", t.seconds)
