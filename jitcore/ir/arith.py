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
from jitcore.ir import bounds
from jitcore.ir.context import get_tracectx, services


class SymbolicNumber:
    """The base of jitcore.ir.proxies.NumberProxy: how this module, which proxies imports, tells a number proxy from
    a plain number without importing proxies."""

    __slots__ = ()

# the active predicate sink (any object with .add(text)); jitcore/guards/predicates.py sets it while compiling
SINK: contextvars.ContextVar = contextvars.ContextVar("jitcore_predicates", default=None)


# True while native code called by the user's code runs (jitcore/interpreter: native calls, f-string conversions,
# `str % values`): str() and repr() of a number proxy are then the value's text, as the program would print it, after
# recording that the value is the one seen (the text depends on it); elsewhere (printing programs, jitcore's own
# messages) they are the proxy's name
USER_TEXT: contextvars.ContextVar = contextvars.ContextVar("jitcore_user_text", default=False)


def as_user(fn, *args, **kwargs):
    """fn(*args, **kwargs) with USER_TEXT on (what the user's code computes natively)."""
    token = USER_TEXT.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        USER_TEXT.reset(token)


def as_jitcore(fn):
    """fn with USER_TEXT off while it runs (jitcore's own printing, which names proxies, may run inside a native
    call of the user's code: a data guard's program compiled while `str(x.sum() > 0)` runs)."""
    def call(*args, **kwargs):
        token = USER_TEXT.set(False)
        try:
            return fn(*args, **kwargs)
        finally:
            USER_TEXT.reset(token)

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return call


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


def implied(op: str, a, b):
    """The comparison's answer if what the prologue checks decides it (for every input it lets through: the sizes'
    lower bounds, the predicates recorded so far; jitcore/ir/bounds.py), else None: a decided comparison needs no
    predicate."""
    if (isinstance(a, SymbolicNumber) and isinstance(b, SymbolicNumber) and a.expr == b.expr
            and float not in (a.python_type, b.python_type)):  # (a float may be NaN: `s == s` is then False)
        return op in ("==", "<=", ">=")  # the same expression: decided without looking at the inputs
    if isinstance(b, SymbolicNumber) and not isinstance(a, SymbolicNumber):
        a, b, op = b, a, bounds.FLIP[op]
    lo = getattr(a, "lower", None)
    if lo is not None and not isinstance(b, SymbolicNumber) and type(b) in (int, float, bool):
        answer = _IMPLIED[op](b, lo)
        if answer is not None:
            return answer
    answer = _decide(op, a, b)
    if answer is not None and answer != bounds.COMPARE[op](value_of(a), value_of(b)):
        return None  # (never expected: the bounds analysis is sound; the value seen is the last word)
    return answer


def declare_lower(name: str, lower: int):
    """Symbol `name` is >= lower on every call the prologue lets through (it checks that): the bounds analysis
    uses it while the active sink (jitcore/guards/predicates.py) records."""
    facts = getattr(SINK.get(), "facts", None)
    if facts is not None:
        facts.lower[name] = lower


def declare_upper(name: str, upper):
    """Symbol `name` is <= upper on every call (a run-time size is at most the numel of the tensor it counts): an
    int, or the text of an expression over other symbols. For the bounds analysis, while the sink records."""
    facts = getattr(SINK.get(), "facts", None)
    if facts is None:
        return
    if type(upper) is int:
        facts.upper[name] = min(upper, facts.upper.get(name, upper))
    elif type(upper) is str:
        facts.below[name] = upper


def declare_int(name: str):
    """Number input `name` is an int on every call the prologue lets through (it checks the type), of any value."""
    facts = getattr(SINK.get(), "facts", None)
    if facts is not None:
        facts.ints.add(name)


def _facts():
    """What the bounds analysis may assume: the active sink's facts (the inputs' lower bounds and what recorded
    predicates say), with the run-time sizes' bounds (>= 0, kept by the trace that made them: jitcore/ir/proxies.py
    run_time_size); None when nothing is known."""
    facts = getattr(SINK.get(), "facts", None)
    trace = get_tracectx()
    run_time = trace.run_time_sizes if trace is not None else None
    if not run_time:
        return facts if facts is not None and (facts.lower or facts.ints) else None
    if facts is None:
        return bounds.Facts(dict(run_time))
    return bounds.Facts({**run_time, **facts.lower}, facts.upper, facts.same, facts.ints, facts.below)


def _operand(x):
    """An int expression's text (or the int) for the bounds analysis; None for anything else."""
    if isinstance(x, SymbolicNumber):
        return x.expr
    return x if type(x) in (int, bool, str) else None


def _decide(op: str, a, b):
    facts = _facts()
    a, b = _operand(a), _operand(b)
    if facts is None or a is None or b is None:
        return None
    return bounds.decide(op, a, b, facts)


def simplified(expr: str):
    """(text, value) of a new int expression (jitcore/ir/bounds.py simplify) for every call the prologue lets
    through; (None, None) outside recording or when the analysis does not read it."""
    facts = _facts()
    if facts is None:
        return None, None
    return bounds.simplify(expr, facts)


def _learn(op: str, a, b):
    """A recorded predicate `a op b` that held: what it says of one size symbol (its value, a bound) is a fact
    for the comparisons and expressions that follow (the prologue checks it)."""
    facts, sink = _facts(), getattr(SINK.get(), "facts", None)
    a, b = _operand(a), _operand(b)
    if facts is not None and sink is not None and a is not None and b is not None:
        bounds.learn(op, a, b, facts, sink)


# -- new int expressions: the operand or the number they are on every call, else their simplified text ------------
_INT_RESULT = frozenset({"add", "sub", "mul", "floordiv", "mod", "pow", "max", "min", "neg", "pos", "abs"})
# (the sink, raw expression, its simplified text) `fold` just found, read once by `expression` (per thread)
_RECENT: contextvars.ContextVar = contextvars.ContextVar("jitcore_simplified", default=None)


def fold(name: str, args, fmt: str, fn):
    """An int op of sizes whose result what the prologue checks decides: the operand it equals on every call
    (`min(i0 + 1, 1)` is 1, `max(i0, i0 - 1)` is i0: sizes are >= 2) or its one value (`(i0 * 48) // (i0 * 6)` is
    8); it then needs no line. Else None: the op is recorded, its expression simplified (`expression`)."""
    _RECENT.set(None)
    if name not in _INT_RESULT or not any(isinstance(a, SymbolicNumber) for a in args) or not all(
            type(a) is int or (isinstance(a, SymbolicNumber) and a.python_type is int and a.expr is not None)
            for a in args):
        return None
    raw = "(" + fmt.format(*(a.expr if isinstance(a, SymbolicNumber) else repr(a) for a in args)) + ")"
    text, value = simplified(raw)
    if text is None:
        return None
    if value is not None:
        return value if value == fn(*(value_of(a) for a in args)) else None
    for a in args:
        if isinstance(a, SymbolicNumber) and _strip(a.expr) == _strip(text):
            return a
    _RECENT.set((SINK.get(), raw, text))
    return None


def expression(raw: str) -> str:
    """The expression a new number proxy carries: the simplified text `fold` just found for it, else raw."""
    recent = _RECENT.get()
    if recent is None or recent[0] is not SINK.get() or recent[1] != raw:
        return raw
    _RECENT.set(None)
    return recent[2]


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


strip = _strip  # (the public name: jitcore/ops/size_checks.py)


def _equality(a, b, op: str) -> str:
    x, y = sorted((_strip(expr_of(a)), _strip(expr_of(b))))
    return f"{x} {op} {y}"


def expr_of(x) -> str:
    if isinstance(x, SymbolicNumber):
        if x.expr is None:
            refuse(x)
        return x.expr
    return literal(x)


def literal(x) -> str:
    """Python source for the constant x (`float('inf')`, not repr's `inf`, which generated code cannot name)."""
    if type(x) is float and not math.isfinite(x):
        return f"float('{x}')"
    return repr(x)


def per_call_origin(x) -> str | None:
    """The per-call source (`random.random()`, `time.time()`) a number with no expression comes from, if any."""
    trace = get_tracectx()
    return None if trace is None or trace.per_call is None else trace.per_call.get(getattr(x, "name", None))


def unknown_expr(args) -> bool:
    """Whether a number op's operands include a number with no expression (its result has none either)."""
    return any(getattr(a, "expr", "") is None for a in args)


def inherit_origin(out, args):
    """out (a number computed from a per-call value) remembers where that value came from, for refusals."""
    origins = [per_call_origin(a) for a in args if getattr(a, "expr", "") is None]
    origin = next((o for o in origins if o is not None), None)
    if origin is not None and get_tracectx() is not None:
        note_per_call(out, origin)


def note_per_call(out, origin: str):
    """Number proxy `out` (of the trace being recorded) comes from a per-call source (`random.random()`): kept in
    the trace's per_call, for refusals."""
    trace = get_tracectx()
    if trace.per_call is None:
        trace.per_call = {}
    trace.per_call[out.name] = origin


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


def run_time_answer(p, convert, what: str = ""):
    """The value of a number that depends on a run-time size (`u0 > 0`, `int(u0)`): this call's, guarded by the
    data guards (the prologue recomputes the part of the program it comes from), since no predicate over the
    inputs' symbols can say it. DataDependentError where no guard can (no real inputs at hand: examine())."""
    known = getattr(SINK.get(), "run_time", None)  # answered (and guarded) while tracing: later passes that ask
    key, flip = _answer_key(p)  # again (functionalization, autodiff) get the same answer
    if known is not None and key in known:
        return (not known[key]) if flip else known[key]
    what = what or f"Python control flow (or a conversion to a Python value) on {_strip(p.expr)}"
    try:
        value = services().run_time_value(p, convert, what)  # (DataDependentError outside the recording)
    except DataDependentError:
        value = _checked(p, convert) if known is not None else None
        if value is None:
            raise
    if known is not None:
        known[key] = (not value) if flip else value
        _note_same(key, known[key])
        _note_answer(p, value)
    return value


def _checked(p, convert):
    """Where no prologue can compute the answer (the count comes from random draws, or from values written into the
    inputs first; a pass after tracing asks): the answer seen while tracing, checked by a line of the program when
    it runs (jitcore/ops/size_checks.py; a call with another answer runs another entry). None where no line can check
    it (the value was never seen: no real inputs at hand)."""
    if get_tracectx() is None or p.expr is None or not SIZE_CHECKS:
        return None
    value = convert(p.value)
    if type(value) not in (bool, int, float):
        return None
    return value if SIZE_CHECKS[0](p, value) else None


# the op that records such a check: (p, value) -> whether a line now checks it (jitcore/ops/size_checks.py)
SIZE_CHECKS: list = []


def register_size_check(fn):
    """Register the op `_checked` records a check through."""
    if SIZE_CHECKS:
        raise ValueError("a size check op is registered already")
    SIZE_CHECKS.append(fn)


def _note_same(key, equal):
    """`u1 == u0` (or `i1 - 1 == i3 - 1`, `u0 == 3`) held and is guarded: later comparisons read the one symbol as
    the other, or as the number (jitcore/ir/bounds.py learn)."""
    if equal and key[0] == "==":
        _learn("==", *key[1:])


def _note_answer(p, value):
    """A guarded answer about run-time sizes is a fact for the questions that follow (later passes ask their own:
    functionalization's `(1 % u0) < 0` after `range(1, u0)` pinned u0): `int(u0)` is 7 says u0 == 7, `u0 > 3` held
    says u0 >= 4 (jitcore/ir/bounds.py learn)."""
    cmp = getattr(p, "cmp", None)
    if cmp is not None and cmp[0] in _NEGATED:
        _learn(cmp[0] if value else _NEGATED[cmp[0]], *cmp[1:])
    elif cmp is None and p.python_type is int and type(value) is int:
        _learn("==", p, value)


def _answer_key(p) -> tuple:
    """(key, flip): an (in)equality is kept as the equality of its sorted sides (`u1 != u0` is `not (u0 == u1)`)."""
    cmp = getattr(p, "cmp", None)
    if cmp is None or cmp[0] not in ("==", "!="):
        return p.expr, False
    return ("==", *sorted(_strip(expr_of(x)) for x in cmp[1:])), cmp[0] == "!="


def concretize(p, why: str = ""):
    """p's value, after recording `expr == value` (a specialisation: correct, never general)."""
    if getattr(p, "runtime", False):
        return run_time_answer(p, p.python_type, why)
    if p.expr is None:
        refuse(p)
    v = p.value
    implied_eq = implied("==", p, v)
    if implied_eq is None:
        record(_equals_check(_strip(expr_of(p)), v))
        _learn("==", p, v)
    return v


def _equals_check(expr: str, v) -> str:
    """`expr == v`; for a float that == cannot pin (NaN equals nothing, -0.0 equals 0.0), its bits: `.hex()`."""
    if type(v) is float and (v != v or v == 0.0 or not math.isfinite(v)):
        return f"({expr}).hex() == {v.hex()!r}"
    return f"{expr} == {literal(v)}"


def truth(b) -> bool:
    """bool(BoolProxy): records the comparison that held (or its negation)."""
    if b.expr is None:
        refuse(b)
    v = bool(b.value)
    if b.implied:
        return v
    if b.runtime:
        return run_time_answer(b, bool)
    op = b.cmp[0] if b.cmp is not None else None
    if op in ("==", "!="):  # equalities read (and dedupe) best as `i0 == i3` / `i0 != i3`
        holds = "==" if (op == "==") == v else "!="
        record(_equality(b.cmp[1], b.cmp[2], holds))
        _note_same(("==", *(_strip(expr_of(x)) for x in b.cmp[1:])), holds == "==")  # (the prologue checks it)
    elif op is not None and not v:
        record(f"not ({_strip(b.expr)})")
        _learn(_NEGATED[op], *b.cmp[1:])
    else:
        record(_strip(b.expr))
        if op is not None:
            _learn(op, *b.cmp[1:])
    return v


def unit_sizes(shape, ones_only: bool = False):
    """Records, of each symbolic size in shape, whether it is 1: an answer that depends on a tensor's layout (is it
    contiguous, can a reshape be a view) ignores the strides of size-1 dimensions, so the answer given for a size
    other than 1 need not hold for 1 (`x.chunk(2, -1)[1].flatten()` copies a chunk 2 wide, views one 1 wide).
    ones_only: only the sizes that are 1 (a contiguous layout stays contiguous where another size becomes 1)."""
    for s in shape:
        if isinstance(s, SymbolicNumber) and (not ones_only or s.value == 1):
            bool(s == 1)


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}  # (of ints: what the analysis learns from)


BINARY = {  # name -> (python operator, format)
    "add": (operator.add, "{} + {}"), "sub": (operator.sub, "{} - {}"), "mul": (operator.mul, "{} * {}"),
    "floordiv": (operator.floordiv, "{} // {}"), "mod": (operator.mod, "{} % {}"),
    "truediv": (operator.truediv, "{} / {}"), "pow": (operator.pow, "{} ** {}"),
    # of ints only (the interpreter's max()/min() of sizes): the result's type never depends on which one won
    "max": (max, "max({}, {})"), "min": (min, "min({}, {})"),
    # bitwise, of ints (and bools)
    "and": (operator.and_, "{} & {}"), "or": (operator.or_, "{} | {}"), "xor": (operator.xor, "{} ^ {}"),
    "lshift": (operator.lshift, "{} << {}"), "rshift": (operator.rshift, "{} >> {}"),
}
COMPARE = {  # name -> (python operator, symbol)
    "eq": (operator.eq, "=="), "ne": (operator.ne, "!="), "lt": (operator.lt, "<"), "le": (operator.le, "<="),
    "gt": (operator.gt, ">"), "ge": (operator.ge, ">="),
}
UNARY = {"neg": (operator.neg, "-{}"), "abs": (abs, "abs({})"), "pos": (operator.pos, "+{}"),
         "invert": (operator.invert, "~{}"),
         "float": (float, "float({})"), "int": (int, "int({})"),
         # float -> int roundings print with builtins only, so predicates over them run in the prologue as is
         "ceil": (math.ceil, "int(-(-{} // 1))"), "floor": (math.floor, "int({} // 1)"),
         "trunc": (math.trunc, "int({})"),
         "round": (round, "round({})")}
# functions of the math module on numbers (an attention scale `1 / math.sqrt(d)`): name -> (function, format); they
# print as the module's calls (traces and prologues that read one import math), so a value is computed exactly as
# eager's Python computes it
MATH = {"sqrt": (math.sqrt, "math.sqrt({})"), "exp": (math.exp, "math.exp({})"), "log": (math.log, "math.log({})"),
        "log_base": (math.log, "math.log({}, {})"), "log2": (math.log2, "math.log2({})"),
        "log10": (math.log10, "math.log10({})"), "math_pow": (math.pow, "math.pow({}, {})")}
