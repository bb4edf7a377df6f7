"""Transforms: dead code elimination. Drops lines whose outputs nothing uses, keeping side-effecting ones
(in-place writes, random draws are kept only if used; DONT_DCE lines always).
"""
from __future__ import annotations

from jitcore.proxies import Proxy
from jitcore.pytree import tree_leaves
from jitcore.symbol import Tag
from jitcore.trace import Timer, Trace, from_trace

KEEP = frozenset({Tag.DONT_DCE, Tag.INPLACE})


def dce(trace: Trace) -> Trace:
    with Timer() as t:
        needed = {p.name for p in tree_leaves(trace.output) if isinstance(p, Proxy)}
        kept = []
        for bsym in reversed(trace.bound_symbols):
            outs = bsym.flat_proxy_outs()
            if bsym.sym.tags & KEEP or any(o.name in needed for o in outs):
                kept.append(bsym)
                needed.update(a.name for a in bsym.flat_proxy_args())
        new = from_trace(trace)
        new.bound_symbols = kept[::-1]
    return new.set_provenance("Dead Code Elimination", t.seconds)
