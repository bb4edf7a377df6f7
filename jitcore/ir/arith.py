"""IR (symbolic values): the arithmetic recorded on number proxies, and the predicates Python needs of them.

Every NumberProxy carries `expr`, a Python expression over the prologue's input symbols (`i0`, `(i0 * i1)`).
Arithmetic records a PYTHON op in the active trace (jitcore/ops/prims_python.py) and returns a new proxy; when
Python needs a concrete answer (`if`, `range`, an index) the predicate that held is added to the active sink
(jitcore/guards/predicates.py: `recording(preds)`), and the prologue checks every predicate, so a reused entry is
never wrong.
"""
from __future__ import annotations

import ast
import contextvars
import functools
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
    """The comparison's answer if the inputs' known lower bounds decide it (for every input the prologue lets
    through), else None: a decided comparison needs no predicate."""
    if isinstance(a, SymbolicNumber) and isinstance(b, SymbolicNumber) and a.expr == b.expr:
        return op in ("==", "<=", ">=")  # the same expression: decided without looking at the inputs
    if isinstance(b, SymbolicNumber) and not isinstance(a, SymbolicNumber):
        a, b, op = b, a, _FLIP[op]
    lo = getattr(a, "lower", None)
    if lo is not None and not isinstance(b, SymbolicNumber) and type(b) in (int, float, bool):
        answer = _IMPLIED[op](b, lo)
        if answer is not None:
            return answer
    answer = _decide(op, a, b)
    if answer is not None and answer != _COMPARE_FN[op](value_of(a), value_of(b)):
        return None  # (never expected: the bounds analysis is sound; the value seen is the last word)
    return answer


# -- bounds analysis: is `a op b` decided by the input sizes' lower bounds? -----------------------------------------
# a - b is expanded into a polynomial over atoms, each shifted by its bound so it is >= 0 (`i0` with i0 >= 2 is
# `2 + y`, y >= 0): when every non-constant coefficient has one sign, the constant term bounds a - b. Atoms are the
# size symbols and the sub-expressions that are not polynomial (`a // b`, `a % b`), with the bounds that follow
# from their operands'. Only sizes and int constants: a number input, a float (`2.0`, `float(n)`, `/`) leaves the
# comparison undecided.

class _Undecided(Exception):
    pass


_POLY_LIMIT = 64  # monomials; a larger expansion is left undecided
_COMPARE_FN = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
               ">=": operator.ge}


def declare_lower(name: str, lower: int):
    """Symbol `name` is >= lower on every call the prologue lets through (it checks that): the bounds analysis
    uses it while the active sink (jitcore/guards/predicates.py) records."""
    bounds = getattr(SINK.get(), "lower", None)
    if bounds is not None:
        bounds[name] = lower


def _bounds() -> dict:
    """Lower bounds of the symbols: the inputs' (declared to the active sink) and the run-time sizes' (>= 0, kept
    by the trace that made them: jitcore/ir/proxies.py run_time_size)."""
    bounds = getattr(SINK.get(), "lower", None) or {}
    trace = get_tracectx()
    run_time = trace.extra.get("run_time_sizes") if trace is not None else None
    return {**bounds, **run_time} if run_time else bounds


def _decide(op: str, a, b):
    bounds = _bounds()
    if not bounds:
        return None
    env = _Env(bounds, getattr(SINK.get(), "same", None) or {})
    try:
        d = _sub(_poly_of(a, env), _poly_of(b, env))
    except (_Undecided, SyntaxError, RecursionError):
        return None
    if all(not m for m in d):
        return _COMPARE_FN[op](d.get((), 0), 0)
    lo, hi = _range(d, env.caps)
    if op in ("==", "!="):
        differ = (lo is not None and lo > 0) or (hi is not None and hi < 0)
        return (op == "!=") if differ else None
    if op in ("<", "<="):  # a < b is b > a: flip the difference
        lo, hi, op = (None if hi is None else -hi), (None if lo is None else -lo), _FLIP[op]
    strict = op == ">"
    if lo is not None and (lo > 0 if strict else lo >= 0):
        return True
    if hi is not None and (hi <= 0 if strict else hi < 0):
        return False
    return None


@functools.lru_cache(maxsize=4096)
def _parse(expr: str):
    return ast.parse(expr, mode="eval").body  # (read, never changed: shared between calls)


class _Env:
    """bounds: size symbol -> lower bound; caps: variable -> its largest value (an atom bounded on both sides,
    shifted to start at 0); same: run-time size -> the one it equals on every call the entry serves (a guarded
    `u1 == u0`: two selections by equal masks), read as that one."""

    def __init__(self, bounds, same=None):
        self.bounds, self.caps, self.same = bounds, {}, same or {}


def _poly_of(x, env):
    if isinstance(x, SymbolicNumber):
        if x.expr is None:
            raise _Undecided
        return _poly(_parse(x.expr), env)
    if type(x) not in (int, bool):
        raise _Undecided
    return {(): int(x)}


def _range(p, caps):
    """(lo, hi) of a polynomial whose variables are in [0, caps.get(v, inf)] (None: unbounded), `~` variables of
    either sign."""
    if any(v.startswith("~") for m, c in p.items() if c for v in m):
        return None, None
    lo = hi = p.get((), 0)
    for m, c in p.items():
        if not m or not c:
            continue
        top = 1
        for v in m:
            top = None if top is None or v not in caps else top * caps[v]
        if c < 0:  # the monomial lowers the bound by at most c * top
            lo = None if lo is None or top is None else lo + c * top
        else:
            hi = None if hi is None or top is None else hi + c * top
    return lo, hi


def _add(p, q):
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c or not m}


def _sub(p, q):
    return _add(p, {m: -c for m, c in q.items()})


def _mul(p, q):
    out: dict = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
    if len(out) > _POLY_LIMIT:
        raise _Undecided
    return {m: c for m, c in out.items() if c or not m}


def _atom(key: str, lo, hi, env):
    if lo is not None and lo == hi:
        return {(): lo}
    if lo is not None:
        if hi is not None:
            env.caps[key] = hi - lo
        return {(key,): 1, (): lo}
    if hi is not None:
        return {(key,): -1, (): hi}
    return {("~" + key,): 1}


def _constant(p):
    return p.get(()) if all(not m for m in p) else None


def _poly(node, env):
    t = type(node)
    if t is ast.Constant:
        if type(node.value) not in (int, bool):
            raise _Undecided
        return {(): int(node.value)}
    if t is ast.Name:  # a size symbol; a number input may be a float (nan, inf: `f0 - f0 == 0` fails): undecided
        name = env.same.get(node.id, node.id)
        if name not in env.bounds:
            raise _Undecided
        return _atom(name, env.bounds[name], None, env)
    if t is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        p = _poly(node.operand, env)
        return p if type(node.op) is ast.UAdd else {m: -c for m, c in p.items()}
    if (t is ast.Call and type(node.func) is ast.Name and node.func.id in ("max", "min") and len(node.args) == 2
            and not node.keywords):
        return _extreme(node, env)
    if t is not ast.BinOp:
        raise _Undecided
    p, q = _poly(node.left, env), _poly(node.right, env)
    o = type(node.op)
    if o is ast.Add:
        return _add(p, q)
    if o is ast.Sub:
        return _sub(p, q)
    if o is ast.Mult:
        return _mul(p, q)
    cp, cq = _constant(p), _constant(q)
    if o is ast.Pow and cq is not None and 0 <= cq <= 4:
        out = {(): 1}
        for _ in range(cq):
            out = _mul(out, p)
        return out
    if o not in (ast.FloorDiv, ast.Mod):
        raise _Undecided  # true division and the rest: floats
    if cq == 0:
        raise _Undecided
    if cp is not None and cq is not None:
        return {(): cp // cq if o is ast.FloorDiv else cp % cq}
    (plo, phi), (qlo, _) = _range(p, env.caps), _range(q, env.caps)
    lo = hi = None
    if o is ast.Mod:  # n % m with m >= 1 is in [0, m - 1]
        if qlo is not None and qlo >= 1:
            lo, hi = 0, (cq - 1 if cq is not None else None)
    elif cq is not None and cq > 0:  # floor(n / c) is monotone in n
        lo = None if plo is None else plo // cq
        hi = None if phi is None else phi // cq
    elif plo is not None and plo >= 0 and qlo is not None and qlo >= 1:
        lo = 0
    return _atom(ast.unparse(node), lo, hi, env)


def _extreme(node, env):
    """max(a, b) / min(a, b) (the interpreter's, and slice bounds' clamps): the operand that wins for every value
    the bounds allow, else an atom bounded by its operands' bounds."""
    p, q = (_poly(a, env) for a in node.args)
    largest = node.func.id == "max"
    lo, hi = _range(_sub(p, q), env.caps)
    if lo is not None and lo >= 0:  # p >= q everywhere
        return p if largest else q
    if hi is not None and hi <= 0:
        return q if largest else p
    (plo, phi), (qlo, qhi) = _range(p, env.caps), _range(q, env.caps)
    if largest:  # max is at least either operand's lower bound, at most the larger upper bound
        lo = max((b for b in (plo, qlo) if b is not None), default=None)
        hi = None if phi is None or qhi is None else max(phi, qhi)
    else:
        lo = None if plo is None or qlo is None else min(plo, qlo)
        hi = min((b for b in (phi, qhi) if b is not None), default=None)
    return _atom(ast.unparse(node), lo, hi, env)


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


def run_time_answer(p, convert, what: str = ""):
    """The value of a number that depends on a run-time size (`u0 > 0`, `int(u0)`): this call's, guarded by the
    data guards (the prologue recomputes the part of the program it comes from), since no predicate over the
    inputs' symbols can say it. DataDependentError where no guard can (no real inputs at hand: examine())."""
    known = getattr(SINK.get(), "run_time", None)  # answered (and guarded) while tracing: later passes that ask
    key, flip = _answer_key(p)  # again (functionalization, autodiff) get the same answer
    if known is not None and key in known:
        return (not known[key]) if flip else known[key]
    trace = get_tracectx()
    oracle = None if trace is None else trace.extra.get("runtime_oracle")
    what = what or f"Python control flow (or a conversion to a Python value) on {_strip(p.expr)}"
    if oracle is None:
        raise DataDependentError(f"{what} needs the value of a size known only at run time (a data-dependent size)")
    value = oracle(p, convert, what)
    if known is not None:
        known[key] = (not value) if flip else value
        _note_same(key, known[key])
    return value


def _note_same(key, equal):
    """`u1 == u0` (or `i1 - 1 == i3 - 1`) held and is guarded: later comparisons read one symbol as the other
    (_Env.same), when the two sides differ by a multiple of `x - y` only."""
    same = getattr(SINK.get(), "same", None)
    if same is None or not equal or key[0] != "==":
        return
    try:
        env = _Env(_bounds(), same)
        d = _sub(_poly(_parse(key[1]), env), _poly(_parse(key[2]), env))
    except (_Undecided, SyntaxError, RecursionError):
        return
    terms = {m: c for m, c in d.items() if m and c}
    if d.get((), 0) or len(terms) != 2 or any(len(m) != 1 or m[0].startswith("~") for m in terms) or \
            sum(terms.values()) or not all(m[0].isidentifier() for m in terms):
        return
    x, y = sorted(m[0] for m in terms)
    same[y] = x
    for k, v in same.items():
        if v == y:
            same[k] = x


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
        record(f"{_strip(expr_of(p))} == {v!r}")
    return v


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
