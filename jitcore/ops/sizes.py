"""Ops: size unpacks. `define_sizes` makes every symbolic size a trace reads defined once at run time, by
`prims.shape` lines after the tensors that carry it; run by the frontend after tracing, by the pipeline on the
forward of the grad transform, and by functionalization after inlining writes (which also moves the lines computing
numbers before their first use: numbers_before_use).
"""
from __future__ import annotations

from jitcore.ir.proxies import IntegerProxy, NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten
from jitcore.ir.symbol import BoundSymbol
from jitcore.ir.trace import Trace
from jitcore.ops import prims_misc as pm


def define_sizes(trace: Trace) -> Trace:
    """Make every symbolic size the trace reads defined once at run time: `(i0, _) = prims.shape(t0)` at the top
    for input tensors, and right after the line that makes an intermediate tensor whose size the program read
    (`x.reshape(-1).shape[0]`: the size was computed inside a decomposition only).

    Idempotent; run after tracing and again on the forward trace of the grad transform (the backward may read
    sizes the forward did not, and they are saved for it)."""
    used = _names_used(trace.bound_symbols) | {x.name for x in tree_flatten(trace.output)[0] if isinstance(x, Proxy)}
    inputs = {id(a) for a in trace.args}
    body = [b for b in trace.bound_symbols if b.sym is not pm.shape or id(b.args[0]) not in inputs]
    defined = {x.name for b in body for x in b.flat_proxy_outs()} | {a.name for a in trace.args}
    missing = used - defined

    def unpack(t):
        out = tuple(s if isinstance(s, IntegerProxy) and s.name in missing else _unused(s) for s in t._shape)
        if not any(isinstance(s, IntegerProxy) for s in out):
            return []
        missing.difference_update(s.name for s in out if isinstance(s, IntegerProxy))
        return [BoundSymbol(pm.shape, (t,), {}, out)]

    head = [u for a in trace.args if isinstance(a, TensorProxy) for u in unpack(a)]
    new_body = []
    for b in body:
        new_body.append(b)
        if missing:
            for t in b.flat_proxy_outs():
                if isinstance(t, TensorProxy):
                    new_body += unpack(t)
    trace.bound_symbols[:] = head + new_body
    return trace


def _unused(size):
    return size.value if isinstance(size, IntegerProxy) else size


def _names_used(bsyms) -> set:
    names = set()
    for b in bsyms:
        names.update(x.name for x in b.flat_args() if isinstance(x, Proxy))
        names |= _names_used(b.subsymbols)
    return names


def _reads(b) -> list:
    """The proxies line b reads: its arguments, and those its decomposition reads from outside it (a composite the
    executors take apart later: the masked write's `prims.reshape(t4, (i4,))` inside ltorch.setitem, s199c)."""
    out, made = list(b.flat_args()), set()

    def walk(subs):
        for s in subs:
            out.extend(x for x in s.flat_args() if isinstance(x, Proxy) and x.name not in made)
            walk(s.subsymbols)
            made.update(o.name for o in s.flat_proxy_outs())

    walk(b.subsymbols)
    return out


def numbers_before_use(lines: list, args) -> list:
    """lines, with each line that computes numbers from numbers moved before the first line reading its result.
    A write's ops, called again here, record the predicates they check (`i3 >= 2`, a select's index within a size
    that only a decomposition computed, `i3 = i1 * i2` of a reshape) as lines of their own, and _define_numbers may
    have emitted that size's line only later, for a later line (fuzz seed 36: writes into views in a loop)."""
    first = {}
    for b in lines:
        if b.sym is not pm.shape and not any(isinstance(x, TensorProxy) for x in b.flat_proxy_outs() +
                                             b.flat_proxy_args()):
            for o in b.flat_proxy_outs():
                first.setdefault(o.name, b)
    out, placed = [], set()
    defined = {a.name for a in args if isinstance(a, Proxy)}

    def put(b):
        placed.add(id(b))
        for a in _reads(b):
            later = first.get(a.name) if isinstance(a, NumberProxy) and a.name not in defined else None
            if later is not None and id(later) not in placed:
                put(later)
        out.append(b)
        defined.update(o.name for o in b.flat_proxy_outs())

    for b in lines:
        if id(b) not in placed:
            put(b)
    return out
