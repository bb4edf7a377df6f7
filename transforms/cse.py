"""Transforms: common subexpression elimination. A line computing exactly what an earlier line computed (same op,
same arguments) is dropped and later uses read the earlier result; random draws, in-place writes and lines that
must stay are never merged. Typical catch: the backward of `y * y` computes `g * y` twice.
"""
from __future__ import annotations

from jitcore.proxies import Proxy
from jitcore.pytree import tree_flatten, tree_map
from jitcore.symbol import Tag
from jitcore.trace import Timer, Trace, from_trace

NEVER = frozenset({Tag.RANDOM, Tag.INPLACE, Tag.DONT_DCE})


def _key(x):
    """A hashable stand-in for an argument; proxies by name (never `==` on a proxy: that records an op)."""
    if isinstance(x, Proxy):
        return ("p", x.name)
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_key(e) for e in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _key(v)) for k, v in x.items()))
    if isinstance(x, (int, float, complex, bool, str, type(None))) or x is Ellipsis:
        return (type(x).__name__, repr(x))
    return ("id", id(x))


def _never(bsym) -> bool:
    return bool(bsym.sym.tags & NEVER) or any(_never(s) for s in bsym.subsymbols)


def rename_args(bsym, names: dict):
    """bsym reading the surviving values: its arguments and those of its decomposition, renamed."""
    if not names:
        return bsym

    def sub(x):
        return names.get(x.name, x) if isinstance(x, Proxy) else x

    args, kwargs = tree_map(sub, (bsym.args, bsym.kwargs))
    return bsym.from_bsym(args=args, kwargs=kwargs, subsymbols=tuple(rename_args(s, names) for s in bsym.subsymbols))


def cse(trace: Trace) -> Trace:
    with Timer() as t:
        seen: dict = {}
        names: dict = {}  # dropped output name -> the proxy that replaces it
        kept = []
        for bsym in trace.bound_symbols:
            bsym = rename_args(bsym, names)
            outs = bsym.flat_proxy_outs()
            if not outs or _never(bsym):
                kept.append(bsym)
                continue
            key = (bsym.sym.id, _key(bsym.args), _key(bsym.kwargs))
            first = seen.get(key)
            if first is None:
                seen[key] = bsym
                kept.append(bsym)
                continue
            mine, _ = tree_flatten(bsym.output)
            theirs, _ = tree_flatten(first.output)
            names.update({m.name: f for m, f in zip(mine, theirs) if isinstance(m, Proxy)})
        new = from_trace(trace)
        new.bound_symbols = kept
        new.output = tree_map(lambda x: names.get(x.name, x) if isinstance(x, Proxy) else x, trace.output)
    return new.set_provenance("Common Subexpression Elimination", t.seconds)
