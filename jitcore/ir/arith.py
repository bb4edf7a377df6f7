"""IR (symbolic values): the arithmetic recorded on number proxies, and the predicates Python needs of them.

Every NumberProxy carries `expr`, a Python expression over the prologue's input symbols (`i0`, `(i0 * i1)`).
Arithmetic records a PYTHON op in the active trace (jitcore/ops/prims_python.py) and returns a new proxy; when
Python needs a concrete answer (`if`, `range`, an index) the predicate that held is added to the active sink
(jitcore/guards/predicates.py: `recording(preds)`), and the prologue checks every predicate, so a reused entry is
never wrong.
"""
from __future__ import annotations

import contextvars
import math
import operator

from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.ir.context import get_tracectx


class SymbolicNumber:
    """The base of jitcore.ir.proxies.NumberProxy: how this module, which proxies imports, tells a number proxy from
    a plain number without importing proxies."""

    __slots__ = ()

# the active predicate sink (any object with .add(text)); jitcore/guards/predicates.py sets it while compiling
SINK: contextvars.ContextVar = contextvars.ContextVar("jitcore_predicates", default=None)


def record(text: str):
    sink = SINK.get()
    if sink is not None:
        sink.add(text)


# -- comparisons implied by what the prologue already checks (input sizes are >= 2) --------------------------------
_IMPLIED = {  # op -> (constant c, lower bound lo) -> the answer for every value >= lo, or None if undecided
    "==": lambda c, lo: False if c < lo else None,
    "!=": lambda c, lo: True if c < lo else None,
    ">": lambda c, lo: True if c < lo else None,
    ">=": lambda c, lo: True if c <= lo else None,
    "<": lambda c, lo: False if c <= lo else None,
    "<=": lambda c, lo: False if c < lo else None,
}
_FLIP = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def implied(op: str, a, b):
    """The comparison's answer if the known lower bound of a bare input size decides it, else None."""
    if isinstance(a, SymbolicNumber) and isinstance(b, SymbolicNumber) and a.expr == b.expr:
        return op in ("==", "<=", ">=")  # the same expression: decided without looking at the inputs
    if isinstance(b, SymbolicNumber) and not isinstance(a, SymbolicNumber):
        a, b, op = b, a, _FLIP[op]
    lo = getattr(a, "lower", None)
    if lo is None or isinstance(b, SymbolicNumber) or type(b) not in (int, float, bool):
        return None
    return _IMPLIED[op](b, lo)


_IDENTITY = {"mul": 1, "add": 0, "sub": 0, "floordiv": 1}


def identity(op: str, args):
    """The proxy operand itself when the op leaves it unchanged (`i0 * 1`, `i0 + 0`), else None."""
    unit = _IDENTITY.get(op)
    if unit is None or len(args) != 2:
        return None
    a, b = args
    if type(b) is int and b == unit and isinstance(a, SymbolicNumber) and a.python_type is int:
        return a
    if op in ("mul", "add") and type(a) is int and a == unit and isinstance(b, SymbolicNumber) and b.python_type is int:
        return b
    return None


def _strip(expr: str) -> str:
    """`(i0 > 2)` -> `i0 > 2` when the outer parentheses enclose the whole expression."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, c in enumerate(expr):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]


def _equality(a, b, op: str) -> str:
    x, y = sorted((_strip(expr_of(a)), _strip(expr_of(b))))
    return f"{x} {op} {y}"


def expr_of(x) -> str:
    if isinstance(x, SymbolicNumber):
        if x.expr is None:
            refuse(x)
        return x.expr
    return repr(x)


def per_call_origin(x) -> str | None:
    """The per-call source (`random.random()`, `time.time()`) a number with no expression comes from, if any."""
    trace = get_tracectx()
    return None if trace is None else trace.extra.get("per_call", {}).get(getattr(x, "name", None))


def unknown_expr(args) -> bool:
    """Whether a number op's operands include a number with no expression (its result has none either)."""
    return any(getattr(a, "expr", "") is None for a in args)


def inherit_origin(out, args):
    """out (a number computed from a per-call value) remembers where that value came from, for refusals."""
    origins = [per_call_origin(a) for a in args if getattr(a, "expr", "") is None]
    origin = next((o for o in origins if o is not None), None)
    if origin is not None and get_tracectx() is not None:
        get_tracectx().extra.setdefault("per_call", {})[out.name] = origin


def refuse(x):
    """Python needed the concrete value of a number with no expression over the inputs."""
    origin = per_call_origin(x)
    if origin is None:
        raise DataDependentError(f"the number {x.name} has no expression over the inputs (a data-dependent value)")
    raise UnsupportedError(
        "per-call value", f"Python control flow (or a conversion to a Python value) depends on {origin}, which "
        "changes on every call; the compiled program cannot take a different path per call",
        hint=f"pass the value in as an argument of the jitted function (call {origin} outside it), or use it only "
             "in tensor math")


def value_of(x):
    return x.value if isinstance(x, SymbolicNumber) else x


def concretize(p, why: str = ""):
    """p's value, after recording `expr == value` (a specialisation: correct, never general)."""
    if p.expr is None:
        refuse(p)
    v = p.value
    implied_eq = implied("==", p, v)
    if implied_eq is None:
        record(f"{_strip(expr_of(p))} == {v!r}")
    return v


def truth(b) -> bool:
    """bool(BoolProxy): records the comparison that held (or its negation)."""
    if b.expr is None:
        refuse(b)
    v = bool(b.value)
    if b.implied:
        return v
    op = b.cmp[0] if b.cmp is not None else None
    if op in ("==", "!="):  # equalities read (and dedupe) best as `i0 == i3` / `i0 != i3`
        holds = "==" if (op == "==") == v else "!="
        record(_equality(b.cmp[1], b.cmp[2], holds))
    elif op is not None and not v:
        record(f"not ({_strip(b.expr)})")
    else:
        record(_strip(b.expr))
    return v


BINARY = {  # name -> (python operator, format)
    "add": (operator.add, "{} + {}"), "sub": (operator.sub, "{} - {}"), "mul": (operator.mul, "{} * {}"),
    "floordiv": (operator.floordiv, "{} // {}"), "mod": (operator.mod, "{} % {}"),
    "truediv": (operator.truediv, "{} / {}"), "pow": (operator.pow, "{} ** {}"),
    # of ints only (the interpreter's max()/min() of sizes): the result's type never depends on which one won
    "max": (max, "max({}, {})"), "min": (min, "min({}, {})"),
}
COMPARE = {  # name -> (python operator, symbol)
    "eq": (operator.eq, "=="), "ne": (operator.ne, "!="), "lt": (operator.lt, "<"), "le": (operator.le, "<="),
    "gt": (operator.gt, ">"), "ge": (operator.ge, ">="),
}
UNARY = {"neg": (operator.neg, "-{}"), "abs": (abs, "abs({})"), "pos": (operator.pos, "+{}"),
         "float": (float, "float({})"),
         # float -> int roundings print with builtins only, so predicates over them run in the prologue as is
         "ceil": (math.ceil, "int(-(-{} // 1))"), "floor": (math.floor, "int({} // 1)"),
         "trunc": (math.trunc, "int({})"),
         "round": (round, "round({})")}
