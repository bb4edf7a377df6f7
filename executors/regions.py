"""Executors: dependency-safe fusion regions, shared by the fusion executors (inductor, nvFuser). Takes a claimed
trace and a predicate "this line is fusible"; gives a new trace where maximal groups of fusible lines are one line
each (`(t5, t9) = inductor_fusion0(t0, t1)`), whose subsymbols are the region's lines (see `order_for_fusion`).
"""
from __future__ import annotations

import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from jitcore.ir.codegen import Printer, bsym_call, lhs
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
from jitcore.ir.trace import Trace, from_trace

# fusion-region compile events, process-wide, for jitcore.last_compile_stats: [compiles, regions reused, C++ compiler
# runs, records in COMPILE_LOG]. A fusion executor adds 1 to [0] for every compile it runs (a region's first, a variant
# for new strides, a dynamic region's variant for a call its guards reject) and to [1] for every region taken from its
# compiled-region cache; [2] counts every run of the C++ compiler in the process (executors/cpu_compiler.py).
COMPILE_EVENTS = [0, 0, 0, 0]
# one record per region compile, its seconds per stage: {"region", "graph", "lowering", "codegen", "cpp_build", "load"}
COMPILE_LOG: list = []
REGION_STAGES = ("graph", "lowering", "codegen", "cpp_build", "load")


def log_compile(region: str) -> dict:
    """A new record of COMPILE_LOG for a compile of `region`, its stages at 0 (the compiler fills them in)."""
    record = {"region": region, **dict.fromkeys(REGION_STAGES, 0.0)}
    COMPILE_LOG.append(record)
    COMPILE_EVENTS[3] = len(COMPILE_LOG)
    return record


def has_side_effect(bsym: BoundSymbol) -> bool:
    """Whether a line writes memory, must not be removed, or draws random numbers (recursively).

    A composite tagged RANDOM that recorded no random prim (dropout with p=0, sdpa with dropout_p=0.0) draws
    nothing, so only its decomposition is asked.
    """
    tags = bsym.sym.tags
    if Tag.INPLACE in tags or Tag.DONT_DCE in tags:
        return True
    if Tag.OPAQUE in tags and (Tag.EFFECTS in tags or "out" in bsym.kwargs):
        return True
    if bsym.subsymbols:
        return any(has_side_effect(s) for s in bsym.subsymbols)
    return Tag.RANDOM in tags


@dataclass
class Region:
    """A group of lines to run as one call: `outputs = name(*inputs)`."""

    members: list
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


def _names(proxies) -> list[str]:
    return [p.name for p in proxies]


def order_for_fusion(bsyms: list, fusible: Callable[[BoundSymbol], bool]) -> list:
    """Items in execution order: a BoundSymbol (unfused) or a list of BoundSymbols (a candidate region).

    The lines are cut at side-effecting lines (in-place writes, DONT_DCE, random draws), which never move. Inside
    each piece, lines are re-listed in a topological order that takes a ready fusible line whenever there is one
    (Kahn's algorithm, ties broken by original position); runs of consecutive fusible lines in that order are the
    regions. A region is contiguous in a valid order, so fusing it can never create a cycle: a non-fusible line
    that depends on region output and feeds the region cannot be inside the run.
    """
    items: list = []
    segment: list = []
    for bsym in bsyms:
        if has_side_effect(bsym):
            items += _order_segment(segment, fusible)
            items.append(bsym)
            segment = []
        else:
            segment.append(bsym)
    items += _order_segment(segment, fusible)
    return items


def _number_line(bsym: BoundSymbol) -> bool:
    """A line that only computes numbers (size arithmetic, a tensor's sizes): it never needs to split a region."""
    outs = bsym.flat_proxy_outs()
    return bool(outs) and not any(isinstance(o, TensorProxy) for o in outs)


def _order_segment(bsyms: list, fusible) -> list:
    """Kahn's algorithm preferring fusible lines: consecutive fusible lines form one candidate region.

    A ready line that only computes numbers (`i3 = i0 * i1`, a size the region's reshape needs) goes before the
    region being formed when it reads nothing the region makes, so size arithmetic does not cut a region in two.
    """
    if not bsyms:
        return []
    producer = {}
    for i, b in enumerate(bsyms):
        for o in b.flat_proxy_outs():
            producer.setdefault(o.name, i)
    users: list[list[int]] = [[] for _ in bsyms]
    deps_of: list[set] = []
    indegree = [0] * len(bsyms)
    for i, b in enumerate(bsyms):
        deps = {producer[a.name] for a in b.flat_proxy_args() if producer.get(a.name, i) < i}
        deps_of.append(deps)
        indegree[i] = len(deps)
        for d in deps:
            users[d].append(i)
    # 0: fusible, 1: other, 2: number lines
    kind = [0 if fusible(b) else 2 if _number_line(b) else 1 for b in bsyms]
    ready: tuple[list, list, list] = ([], [], [])  # heaps of indices, by kind
    for i in range(len(bsyms)):
        if indegree[i] == 0:
            heapq.heappush(ready[kind[i]], i)
    items: list = []
    current: list | None = None
    in_current: set[int] = set()
    while ready[0] or ready[1] or ready[2]:
        if ready[2]:
            i = heapq.heappop(ready[2])
            if current is not None and deps_of[i] & in_current:
                kind[i] = 1  # it reads the open region: it waits as any other line
                heapq.heappush(ready[1], i)
                continue
            items.insert(len(items) - 1 if current is not None else len(items), bsyms[i])
        elif ready[0]:
            i = heapq.heappop(ready[0])
            if current is None:
                current, in_current = [], set()
                items.append(current)
            current.append(bsyms[i])
            in_current.add(i)
        else:
            i = heapq.heappop(ready[1])
            current = None
            items.append(bsyms[i])
        for u in users[i]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready[kind[u]], u)
    assert sum(len(x) if isinstance(x, list) else 1 for x in items) == len(bsyms), "cycle in a trace"
    return items


def _region_io(members: list, used_outside: Callable[[str, set], bool]) -> Region:
    produced: set[str] = set()
    inputs: dict[str, Proxy] = {}
    for b in members:
        for a in b.flat_proxy_args():
            if a.name not in produced and a.name not in inputs:
                inputs[a.name] = a
        for o in b.flat_proxy_outs():
            produced.add(o.name)
    member_ids = {id(b) for b in members}
    outputs: dict[str, Proxy] = {}
    for b in members:
        for o in b.flat_proxy_outs():
            if o.name not in outputs and used_outside(o.name, member_ids):
                outputs[o.name] = o
    return Region(members, list(inputs.values()), list(outputs.values()))


def find_regions(trace: Trace, fusible: Callable[[BoundSymbol], bool]) -> list:
    """The trace's lines in execution order, with each candidate group of fusible lines as a Region."""
    consumers: dict[str, list[int]] = {}
    for b in trace.bound_symbols:
        for a in b.flat_proxy_args():
            consumers.setdefault(a.name, []).append(id(b))
    trace_outs = {p.name for p in tree_leaves(trace.output) if isinstance(p, Proxy)}

    def used_outside(name, member_ids):
        return name in trace_outs or any(c not in member_ids for c in consumers.get(name, ()))

    out = []
    for item in order_for_fusion(trace.bound_symbols, fusible):
        out.append(_region_io(item, used_outside) if isinstance(item, list) else item)
    return out


def region_trace(name: str, region: Region, provenance: str) -> Trace:
    """The region as a program of its own: `def name(*inputs): <members>; return outputs`."""
    t = Trace(name)
    t.args = list(region.inputs)
    t.bound_symbols = list(region.members)
    t.output = region.outputs[0] if len(region.outputs) == 1 else tuple(region.outputs)
    t.names = {p.name for b in region.members for p in b.flat_proxy_args() + b.flat_proxy_outs()}
    t.set_provenance(provenance)
    return t


def _no_meta(*args, **kwargs):
    raise NotImplementedError("a fusion region is made by a fusion executor, never traced directly")


def region_bsym(name: str, executor_name: str, region: Region, sub: Trace, fn: Callable) -> BoundSymbol:
    """One line running the whole region: prints as `(outs) = name(ins)`; the members stay as its subsymbols, and
    its `region_trace` is the region as a printable, runnable sub-Trace."""
    sym = Symbol(f"{executor_name}.{name}", name, meta=_no_meta, module="", call_ctx={name: fn})
    output = region.outputs[0] if len(region.outputs) == 1 else tuple(region.outputs)
    bsym = BoundSymbol(sym, tuple(region.inputs), {}, output, tuple(region.members))
    bsym.region_trace = sub
    bsym.executor = executor_name
    return bsym


def boxed_region_line(bsym: BoundSymbol, dead: list) -> BoundSymbol | None:
    """A region line `outs = name(ins)` called boxed, as three statements on one line:

        name_args = [ins]; del <dead>; outs = name.boxed(name_args)

    The region's callable (one with a `boxed(list)` method, which empties the list before it computes) then holds
    the only reference to each argument in `dead` (the ones the program uses last here) and frees it after its last
    use inside the region. None when the line is not a region line or its callable has no `boxed`."""
    name = bsym.sym.name
    fn = (bsym.sym.call_ctx or {}).get(name)
    if bsym.region_trace is None or not callable(getattr(fn, "boxed", None)):
        return None
    box, gone = f"{name}_args", ", ".join(a.name for a in dead)

    def printer(b, p):
        target, call = lhs(b.output), f"{name}.boxed({box})"
        return f"{box} = [{p.call_args(b.args, {})}]; del {gone}; " + (f"{target} = {call}" if target else call)

    sym = Symbol(bsym.sym.id, name, meta=_no_meta, module="", call_ctx={name: fn}, printer=printer)
    return bsym.from_bsym(sym=sym)


def fuse_regions(trace: Trace, fusible: Callable[[BoundSymbol], bool], make_callable: Callable[[Trace], Callable],
                 *, prefix: str, executor_name: str, keep: Callable[[Region], bool] = lambda r: len(r.members) > 1,
                 pass_name: str | None = None) -> Trace:
    """A new trace where each region of fusible lines that `keep` accepts is one call of make_callable(sub_trace).

    Regions `keep` refuses (by default: a single line) are left as their lines, which run unfused.
    """
    new = from_trace(trace)
    for item in find_regions(trace, fusible):
        if not isinstance(item, Region):
            new.bound_symbols.append(item)
            continue
        if not item.outputs or not keep(item):
            new.bound_symbols += item.members if item.outputs else []
            continue
        name = new.make_name(prefix)
        sub = region_trace(name, item, f"{executor_name} fusion region ({len(item.members)} lines)")
        new.bound_symbols.append(region_bsym(name, executor_name, item, sub, make_callable(sub)))
    new.set_provenance(pass_name or f"Fusion ({executor_name})")
    return new


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def canonical_key(sub: Trace) -> tuple:
    """The region's program with proxies renamed in order of appearance (v0, v1, ...), plus its constants."""
    printer = Printer()
    rename: dict[str, str] = {}
    names = {p.name for b in sub.bound_symbols for p in b.flat_proxy_args() + b.flat_proxy_outs()}

    def canon(text: str) -> str:
        return _IDENT.sub(lambda m: rename.setdefault(m.group(), f"v{len(rename)}") if m.group() in names
                          else m.group(), text)

    lines = [canon(", ".join(f"{a.name}: {a.type_string()}" for a in sub.args if isinstance(a, Proxy)))]
    for b in sub.bound_symbols:
        outs = ", ".join(o.type_string() for o in b.flat_proxy_outs() if isinstance(o, TensorProxy))
        lines.append(canon(f"{lhs(b.output)} = {bsym_call(b, printer)}  # {outs}"))
    lines.append(canon(f"return {printer.value(sub.output)}"))
    return "\n".join(lines), tuple(id(c) for c in printer.consts.values())
