"""Explain stage (above the API, beside packages): `jitcore.explain(jfn, *args, **kwargs)`, one report of a jitted
function: the programs of an entry (its passes, the final forward and backward), the executor of each op, the torch
calls that fell back to opaque ops, the guards and what each would miss on, compile time per stage, and the cache's
history with its miss reasons. Text (`str`) and HTML in Jupyter (`_repr_html_`). It calls the function only when no
cached entry accepts the call it is given. (`jitcore.examine(fn, *args)` is the look at a plain function, without
running it.)
"""
from __future__ import annotations

import ast
import html
from collections import Counter
from dataclasses import dataclass, field

from executors.torchex import TorchLinesFusionExecutor
from jitcore.api import JitFunction
from jitcore.guards.cache import CacheEntry
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import source_html


@dataclass
class OpRow:
    op: str  # the op id the program recorded (for a fusion region: the region and the ops inside it)
    executor: str  # the executor that runs it
    count: int


@dataclass
class Guard:
    check: str  # the condition that makes the prologue reject a call
    miss: str  # the miss reason recorded when it does


@dataclass
class Explanation:
    name: str
    cache: str  # the cache option
    executors: list[str]  # the executor list, in priority order
    call: str  # what explain did with the call it was given (or "the last call")
    passes: list[str] = field(default_factory=list)  # the header of each computation trace, in order
    forward: str = ""  # the forward program that runs
    backward: str = ""  # the backward program that runs ("" without autodiff)
    prologue: str = ""  # the full prologue
    ops: list[OpRow] = field(default_factory=list)  # forward, then backward (op ids prefixed "backward: ")
    opaque: list[str] = field(default_factory=list)  # torch callables run as opaque ops (with their counts)
    guards: list[Guard] = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # seconds per compile stage
    hits: int = 0
    misses: int = 0
    miss_reasons: list[str] = field(default_factory=list)
    n_entries: int = 0
    against: list[str] = field(default_factory=list)  # for a call given: each entry cached before it, and why it
    # accepts or would miss it (the entry's first failed guard)

    def sections(self) -> list[tuple[str, list[str]]]:
        """(title, lines) of the report, as both renderings show it."""
        total = sum(self.stats.values())
        return [
            ("function", [f"{self.name}: cache={self.cache!r}, executors {self.executors}", self.call]),
            ("cache", [f"{self.n_entries} entr{'y' if self.n_entries == 1 else 'ies'}, {self.hits} hits, "
                       f"{self.misses} misses"]
             + [f"miss {i}: {r}" for i, r in enumerate(self.miss_reasons, 1)]
             + [f"this call against entry {i}: {r}" for i, r in enumerate(self.against, 1)]),
            ("compile time", [f"{total * 1e3:.1f} ms: " + ", ".join(f"{k} {v * 1e3:.1f} ms"
                                                                     for k, v in self.stats.items())]),
            ("executors", [f"{r.count:4d}  {r.op:44s} {r.executor}" for r in self.ops]),
            ("opaque torch calls", self.opaque or ["none"]),
            ("guards (the prologue rejects a call when a check holds, and records the miss reason)",
             [f"if {g.check}  ->  {g.miss}" for g in self.guards]),
            ("passes", self.passes),
        ]

    def __str__(self) -> str:
        out = []
        for title, lines in self.sections():
            out += [f"== {title}", *(f"  {line}" for line in lines)]
        out += ["== forward program", self.forward.rstrip()]
        if self.backward:
            out += ["== backward program", self.backward.rstrip()]
        out += ["== prologue (guards)", self.prologue.rstrip()]
        return "\n".join(out)

    def __repr__(self):
        return str(self)

    def _repr_html_(self) -> str:
        parts = [f"<h3>jitcore.explain: {html.escape(self.name)}</h3>"]
        for title, lines in self.sections():
            body = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in lines)
            parts.append(f"<h4>{html.escape(title)}</h4><ul>{body}</ul>")
        programs = [("forward program", self.forward), ("backward program", self.backward),
                    ("prologue (guards)", self.prologue)]
        for title, text in programs:
            if text:
                parts.append(f"<details><summary>{title}</summary>{source_html(text)}</details>")
        return "\n".join(parts)


def explain(jfn, *args, **kwargs) -> Explanation:
    """One report of a jitted function: its programs, the executor of each op, opaque fallbacks, its guards and what
    each would miss on, compile time per stage, and its cache's history with reasons. With arguments, the report is
    of the entry for that call: a cached entry that accepts it (nothing runs), else the function is called (it
    compiles); without arguments, of the last call's entry. Prints nothing; `print` it, or show it in Jupyter.

    >>> jf = jitcore.jit(lambda x: torch.special.erfcx(x) * 2)
    >>> report = jitcore.explain(jf, torch.ones(3))
    >>> report.call
    'called it: first call: nothing cached yet'
    >>> [(r.op, r.executor) for r in report.ops]
    [('opaque.torch.special.erfcx', 'torch'), ('ltorch.mul', 'torch')]
    >>> report.opaque
    ['torch.special.erfcx (1 call)']
    >>> jitcore.explain(jf, torch.ones(3)).call      # a cached entry accepts it: not called again
    'not called: cached entry 1 of 1 accepts this call'
    """
    inner = getattr(jfn, "_jfn", jfn)  # a JitModule's JitFunction
    if not isinstance(inner, JitFunction):
        raise TypeError(f"jitcore.explain takes a jitcore.jit function or module, not {type(jfn).__name__} "
                        "(jitcore.examine(fn, *args) looks at a plain function)")
    against = []
    if args or kwargs:
        against = [(e.explain(inner.fn, args, kwargs) or "accepts it") for e in inner.entries()]
        entry, call = _entry_for(jfn, inner, args, kwargs)
    else:
        entry, call = inner._last_entry, "the last call"
        if entry is None:
            raise ValueError("this function has not been called yet: pass the arguments to explain it for")
    cache = inner._cache
    report = Explanation(inner.__name__, cache.mode, [ex.name for ex in inner.options.executors], call,
                         hits=cache.hits, misses=cache.misses, miss_reasons=list(cache.miss_reasons),
                         n_entries=len(inner.entries()), against=against)
    _programs(report, entry)
    return report


def _entry_for(jfn, inner: JitFunction, args, kwargs) -> tuple[CacheEntry, str]:
    """The entry whose full prologue accepts this call (no hit is counted), else the one calling jfn compiles."""
    entries = inner.entries()
    for i, entry in enumerate(entries, 1):
        if entry.check is not None and entry.check(inner.fn, args, kwargs) is not None:
            return entry, f"not called: cached entry {i} of {len(entries)} accepts this call"
    misses = inner._cache.misses
    jfn(*args, **kwargs)
    reasons = inner._cache.miss_reasons
    why = reasons[-1] if inner._cache.misses > misses and reasons else "a cached entry accepted it"
    return inner._last_entry, f"called it: {why}"


def _programs(report: Explanation, entry: CacheEntry):
    report.passes = [str(t).splitlines()[0].removeprefix("# ") for t in entry.traces]
    report.forward = str(entry.traces[-1])
    report.backward = str(entry.backward_traces[-1]) if entry.backward_traces else ""
    report.prologue = str(entry.prologue_traces[-1])
    report.ops = _executors(entry.traces[-1]) + [OpRow(f"backward: {r.op}", r.executor, r.count)
                                                 for r in (_executors(entry.backward_traces[-1])
                                                           if entry.backward_traces else [])]
    report.opaque = _opaque(entry.traces[0])
    report.guards = guards(entry)
    report.stats = dict(entry.stats)


def _executors(trace) -> list[OpRow]:
    """Per op of the program that runs (as the program recorded it): the executor that runs it."""
    counts: Counter = Counter()
    for b in trace.bound_symbols:
        region = b.region_trace
        if region is not None:
            inside = sorted({_original(s) for s in region.bound_symbols if not _bookkeeping(s)})
            counts[(f"{b.sym.name} ({', '.join(inside)})", b.executor or "?")] += 1
            continue
        ex = b.claimed_by
        if ex is None or _bookkeeping(b):
            continue
        # a line a fusion executor claimed but left out of its regions (a region of one op is not compiled) runs
        # the torch executor's kernel
        name = f"torch (unfused: {ex.name} left it out of its regions)" if isinstance(ex, TorchLinesFusionExecutor) \
            else ex.name
        counts[(_original(b), name)] += 1
    return [OpRow(op, ex, n) for (op, ex), n in counts.items()]


def _original(bsym) -> str:
    """The op a claimed line runs: the line the executor replaced (its one subsymbol), or the line itself."""
    if len(bsym.subsymbols) == 1 and bsym.subsymbols[0].output is bsym.output and bsym.sym.id.split(".")[0] != \
            bsym.subsymbols[0].sym.id.split(".")[0]:
        return bsym.subsymbols[0].sym.id
    return bsym.sym.id


def _bookkeeping(bsym) -> bool:
    return bsym.sym.id in ("del", "prims.python_del", "python_del", "prims.del") or bsym.sym.name in ("del",
                                                                                                   "python_return")


def _opaque(trace) -> list[str]:
    counts: Counter = Counter()

    def walk(bsyms):
        for b in bsyms:
            if Tag.OPAQUE in b.sym.tags:
                counts[b.sym.id.removeprefix("opaque.")] += 1
            walk(b.subsymbols)

    walk(trace.bound_symbols)
    return [f"{op} ({n} call{'s' if n > 1 else ''})" for op, n in counts.items()]


def guards(entry: CacheEntry) -> list[Guard]:
    """The checks of an entry's explain prologue (`if <check>: return <reason>`), each with the miss reason it
    records; a reason computed from the call's values shows its text parts joined by '…'."""
    source = getattr(entry.explain, "__jitcore_source__", "")
    out = []
    for line in source.splitlines():
        line = line.strip()
        if not line.startswith("if ") or ": return " not in line or line.endswith(": return None"):
            continue
        check, _, reason = line[3:].partition(": return ")
        out.append(Guard(check, _reason_text(reason)))
    return out


def _reason_text(expr: str) -> str:
    """The reason's text; one computed from the call's values (`'predicate i0 == 8 (' + 'i0=' + repr(i0) + ')'`)
    with each computed part shown as `{expression}`."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return expr

    def parts(node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return parts(node.left) + parts(node.right)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        return ["{" + ast.unparse(node) + "}"]

    return "".join(parts(tree))
