"""Ops: checks, run with the program, of what Python assumed about a size known only at run time (`u0 > 3`) where the
prologue cannot compute it beforehand (the count comes from random draws, or from values written into the inputs
first) or where a pass after tracing asks (functionalization's slice bounds). The trace takes the answer seen while
tracing and the line `check_size(u0 > 3, True, ...)` raises RunTimeCheckFailed when a call's answer differs; the jitted
function then runs (or compiles) the entry for the other answer (jitcore/runtime/checked_runs.py), so a call never
gets a stale answer.
"""
from __future__ import annotations

import ast
import contextlib
import contextvars
import math
import random

from jitcore.errors import DataDependentError, RunTimeCheckFailed
from jitcore.ir import arith
from jitcore.ir.arith import strip
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
from jitcore.ir.trace import get_tracectx


def _check_size(value, expected, text):
    if value != expected:
        raise RunTimeCheckFailed(f"the compiled program assumed {text}, which does not hold for this call's values")


def _evaluate(template: str, values):
    """The checked expression on real values (the op's eager kernel; the program runs the printed line)."""
    names = [f"_v{i}" for i in range(len(values))]
    return eval(template.format(*names), {"math": math, **dict(zip(names, values))})


def _print(bsym, printer):
    template, expected, text, *symbols = bsym.args
    return f"check_size({template.format(*(printer.value(s) for s in symbols))}, {expected!r}, {text!r})"


check_size = Symbol("python.check_size", "check_size", meta=lambda *args: None,
                    tags=(Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE), module="", printer=_print,
                    call_ctx={"check_size": _check_size}, kernel=lambda template, expected, text, *values: _check_size(
                        _evaluate(template, values), expected, text))


def _top_level_values(trace, upto: int | None = None) -> dict:
    """name -> (proxy, None) for the values a line of the trace itself (not a subsymbol) can read now (before its
    line `upto`), and (tensor, dim) for a size symbol such a tensor carries (read as `t.shape[dim]`: a run-time size
    whose line comes later)."""
    found = {p.name: (p, None) for p in tree_flatten(trace.args)[0] if isinstance(p, Proxy)}
    lines = trace.bound_symbols[:upto]
    for b in lines:
        for p in (*b.flat_proxy_args(), *b.flat_proxy_outs()):
            found.setdefault(p.name, (p, None))
    for t in [p for p, _ in list(found.values()) if isinstance(p, TensorProxy)]:
        for d, size in enumerate(t._shape):
            if isinstance(size, NumberProxy):
                found.setdefault(size.name, (t, d))
    return found


class _Names(ast.NodeTransformer):
    """An expression's names replaced by `{0}`, `{1}`, ... placeholders (their order in `names`)."""

    def __init__(self):
        self.names: list[str] = []

    def visit_Name(self, node):
        if node.id in ("min", "max", "abs", "int", "float", "round", "math"):
            return node
        if node.id not in self.names:
            self.names.append(node.id)
        return ast.Name(id=f"__{self.names.index(node.id)}__", ctx=node.ctx)


# lines whose effects a call cannot take back: a check after one of them could not let another entry run the call
# (prints are written when the program ends: jitcore/runtime/checked_runs.py)
_EFFECTS = frozenset({"python.log", "python.warn", "generators.call", "generators.new"})


def _effect(b) -> bool:
    if b.sym.id == "python.per_call_value":  # a draw of Python's global generator is put back (checked_runs.py)
        return getattr(b.args[0], "__self__", None) is not random.random.__self__
    return b.sym.id in _EFFECTS or Tag.EFFECTS in b.sym.tags


def _effect_before(trace):
    """The index of the first line of the trace so far whose effect stays when a later check fails, or None."""
    return next((i for i, b in enumerate(trace.bound_symbols) if _effect(b)), None)


# (trace, lines) while a backward is recorded: its checks go into the forward (`checks_into`)
_INTO: contextvars.ContextVar = contextvars.ContextVar("jitcore_size_checks_into", default=None)


@contextlib.contextmanager
def checks_into(trace, lines: list):
    """While this runs, checks (the backward's rules asking about the forward's run-time sizes) read the values of
    `trace` (the forward) and are appended to `lines`, which the caller puts at the forward's end: a failed check in
    a backward could not let another entry run the call."""
    token = _INTO.set((trace, lines))
    try:
        yield lines
    finally:
        _INTO.reset(token)


def check(p: NumberProxy, value) -> bool:
    """Record, as a line of the trace itself, the check that `p` (an expression over sizes) is `value` on the
    calls the program runs for; False where no line can read what it needs (a symbol defined only inside an op).
    After a line whose effect a failed check could not take back (a logging call, a user's autograd.Function), the
    check goes before that line where what it reads is known there (a size counted earlier, which functionalization
    asks about later); else refused (DataDependentError)."""
    into = _INTO.get()
    trace = get_tracectx() if into is None else into[0]
    expr = getattr(p, "expr", None)
    if trace is None or expr is None or type(value) not in (bool, int, float):
        return False
    effect = _effect_before(trace)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        tree = None
    names = _Names()
    tree = names.visit(tree) if tree is not None else None
    values = _top_level_values(trace, effect)
    if effect is not None and (into is not None or tree is None or any(n not in values for n in names.names)):
        raise DataDependentError(
            f"Python control flow (or a conversion to a Python value) on {strip(expr)} needs the value of a size "
            f"known only at run time, which no prologue can compute; the program would check it when it runs, but "
            f"after {trace.bound_symbols[effect].sym.name}, whose effect a call with another answer could not take "
            "back")
    if tree is None or any(n not in values for n in names.names):
        return False
    template = ast.unparse(tree).replace("{", "{{").replace("}", "}}")
    for i, n in enumerate(names.names):
        dim = values[n][1]
        template = template.replace(f"__{i}__", "{" + str(i) + "}" + ("" if dim is None else f".shape[{dim}]"))
    text = f"{strip(expr)} == {value!r}" if type(value) is not bool else (
        strip(expr) if value else f"not ({strip(expr)})")
    bsym = BoundSymbol(check_size, (template, value, text, *(values[n][0] for n in names.names)), {}, None)
    if into is None:
        trace.record(bsym, outermost=True)
        if effect is not None:  # (before the effect: what it reads is made there)
            trace.bound_symbols.insert(effect, trace.bound_symbols.pop())
    else:
        into[1].append(bsym)
    return True


arith.register_size_check(check)
