"""Inspection stage: `jitcore.examine(fn, *args)` (jitcore/api.py resolves the executors) traces fn once without
running it and reports, for each op it uses, whether it is supported, which executor would run it (or that it
decomposes), and which torch calls fell back to opaque ops.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from jitcore.frontend import trace_function
from jitcore.ir.symbol import Tag


@dataclass
class OpReport:
    op: str
    count: int
    executor: str  # the executor that claims it, or "decomposed" when its subsymbols are claimed instead
    opaque: bool


@dataclass
class ExamineReport:
    ops: list = field(default_factory=list)
    error: str | None = None

    @property
    def opaque_ops(self) -> list[str]:
        return [r.op for r in self.ops if r.opaque]

    def by_executor(self) -> Counter:
        c: Counter = Counter()
        for r in self.ops:
            c[r.executor] += r.count
        return c

    def __str__(self) -> str:
        if self.error:
            return f"jitcore.examine: tracing failed: {self.error}"
        lines = [f"{'op':40s} {'count':>5s}  executor", "-" * 64]
        for r in self.ops:
            lines.append(f"{r.op:40s} {r.count:5d}  {r.executor}{'  (opaque torch call)' if r.opaque else ''}")
        n = sum(r.count for r in self.ops)
        n_opaque = sum(r.count for r in self.ops if r.opaque)
        lines.append(f"{len(self.ops)} distinct ops, {n} calls; {n_opaque} opaque ({self.opaque_ops or 'none'})")
        return "\n".join(lines)

    _repr_pretty_ = None

    def __repr__(self):
        return str(self)


def _claimer(bsym, executors) -> str:
    for ex in executors:
        if ex.can_execute(bsym):
            return ex.name
    return "decomposed" if bsym.subsymbols else "UNSUPPORTED"


def examine_call(fn, args: tuple, kwargs: dict, executors: tuple) -> ExamineReport:
    """Trace fn(*args, **kwargs) and report each op and which of `executors` (in priority order) would run it."""
    report = ExamineReport()
    try:
        traced = trace_function(fn, args, kwargs)
    except Exception as e:  # the report says why instead of raising
        report.error = f"{type(e).__name__}: {e}"
        return report
    counts: Counter = Counter()
    info = {}
    for bsym in traced.trace.bound_symbols:
        counts[bsym.sym.id] += 1
        info.setdefault(bsym.sym.id, (_claimer(bsym, executors), Tag.OPAQUE in bsym.sym.tags))
    report.ops = [OpReport(op, n, *info[op]) for op, n in counts.most_common()]
    return report
