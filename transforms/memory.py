"""Transforms: del-last-used. After the last use of each tensor, a `del` line frees it, so the generated
program holds no tensor longer than needed (the inputs' references are dropped too).
"""
from __future__ import annotations

from jitcore.proxies import Proxy
from jitcore.pytree import tree_leaves
from jitcore.symbol import BoundSymbol, Symbol, Tag
from jitcore.trace import Timer, Trace, from_trace


def _print_del(bsym, printer):
    return "del " + ", ".join(a.name for a in bsym.args)


python_del = Symbol("python.del", "del", meta=lambda *args: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                    printer=_print_del)


def del_last_used(trace: Trace) -> Trace:
    with Timer() as t:
        keep = {p.name for p in tree_leaves(trace.output) if isinstance(p, Proxy)}
        seen = set(keep)
        out = []
        for i, bsym in enumerate(reversed(trace.bound_symbols)):
            dead = []
            for a in bsym.flat_proxy_args():
                if a.name not in seen:
                    seen.add(a.name)
                    dead.append(a)
            if dead and i > 0:  # after the last line the function returns: its locals go anyway
                out.append(BoundSymbol(python_del, tuple(dead), {}, None))
            for o in bsym.flat_proxy_outs():
                seen.add(o.name)
            out.append(bsym)
        new = from_trace(trace)
        new.bound_symbols = out[::-1]
    return new.set_provenance("Delete Last Used (free tensors after their last use)", t.seconds)
