"""IR (symbolic values): the bounds analysis. Which comparisons of size expressions hold for every call a cache
entry's prologue lets through (`decide`), and an expression's shortest exact text and, where it is one number on
all of them, that number (`simplify`), given what the prologue checks: each size's lower bound and the facts its
predicates state (`Facts`, `learn`). jitcore/ir/arith.py asks it before recording a predicate or a number op.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
from dataclasses import dataclass, field

# An expression is read as a polynomial over variables, each shifted by its lower bound so it is >= 0 (`i0` with
# i0 >= 2 is `2 + y`, y >= 0): when every non-constant coefficient of a - b has one sign, the constant term bounds
# a - b. Variables are the size symbols and the sub-expressions that are not polynomial (`a // b`, `a % b`,
# `max(a, b)`, `abs(a)`) that the operands' bounds do not resolve, each with the bounds that follow from its
# operands'. Only sizes and int constants: a number input, a float (`2.0`, `float(n)`, `/`) leaves it undecided.

POLY_LIMIT = 64  # monomials; a larger expansion is left undecided
COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge}
FLIP = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


class Undecided(Exception):
    pass


@dataclass
class Facts:
    """What every call an entry serves satisfies: lower[x] <= x (<= upper[x]) for the size symbols (input sizes
    >= 2, run-time sizes >= 0) and what predicates over one variable add (of a symbol, or of a sub-expression by
    its canonical text: `(i1 // 2) % 4`); `ints`: int number inputs (any int unless a predicate bounds them);
    same[x]: the symbol or int a guarded equality says x equals (read as that); below[x]: the text of an expression
    over other symbols that x is at most (a run-time size is at most the numel of the tensor it counts)."""

    lower: dict = field(default_factory=dict)
    upper: dict = field(default_factory=dict)
    same: dict = field(default_factory=dict)
    ints: set = field(default_factory=set)
    below: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Var:
    """A variable y >= 0 of a shifted polynomial: the value it stands for is `offset + sign * y` (sign 0: y is the
    value itself, of either sign); `cap`: y's largest value, or None."""

    text: str
    offset: int
    sign: int
    cap: int | None


class _Env:
    """vars: key -> _Var; relations: key -> what else is known of the value a variable stands for, beyond its
    bounds, as (kind, poly) over the other variables: ("ge", p) value >= p, ("le", p) value <= p, ("times", (c, p))
    c * value == p (`max(a, b) >= a`, `min(n, k) <= n`, `2 * (n // 2) == n - n % 2`)."""

    def __init__(self, facts: Facts):
        self.facts, self.vars, self.relations = facts, {}, {}
        self.expanding: set = set()  # names whose `below` bound is being read (a bound never reads itself)

    def relate(self, p, kind: str, q):
        """Note (if p is a variable: the polynomial of a value that is not a number) that p `kind` q."""
        keys = [m for m in p if m]
        if len(keys) == 1 and len(keys[0]) == 1:
            self.relations.setdefault(keys[0][0], {})[(kind, repr(q))] = (kind, q)


@functools.lru_cache(maxsize=4096)
def _parse(expr: str):
    return ast.parse(expr, mode="eval").body  # (read, never changed: shared between calls)


def _poly_of(x, env):
    """The shifted polynomial of an expression's text or an int."""
    if type(x) is str:
        return _poly(_parse(x), env)
    if type(x) not in (int, bool):
        raise Undecided
    return {(): int(x)}


# -- polynomials: {monomial (a sorted tuple of variable keys): coefficient}; () is the constant term ---------------
def _add(p, q):
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c or not m}


def _scale(p, k):
    return {m: c * k for m, c in p.items() if c * k or not m}


def _sub(p, q):
    return _add(p, _scale(q, -1))


def _mul(p, q):
    out: dict = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
    if len(out) > POLY_LIMIT:
        raise Undecided
    return {m: c for m, c in out.items() if c or not m}


def _constant(p):
    return p.get((), 0) if all(not m for m in p) else None


def _range(p, env):
    """(lo, hi) of a shifted polynomial over its variables' ranges (None: unbounded)."""
    lo = hi = p.get((), 0)
    for m, c in p.items():
        if not m:
            continue
        if any(env.vars[v].sign == 0 for v in m):
            return None, None
        top = 1
        for v in m:
            cap = env.vars[v].cap
            top = None if top is None or cap is None else top * cap
        if c < 0:  # the monomial lowers the bound by at most c * top
            lo = None if lo is None or top is None else lo + c * top
        else:
            hi = None if hi is None or top is None else hi + c * top
    return lo, hi


def _variable(text: str, lo, hi, env):
    """The shifted polynomial of a value known only to lie in [lo, hi] (either may be None); a sub-expression's
    (not a name) also within what recorded predicates say of it (`learn`: its value, its bounds)."""
    facts = env.facts
    if not text.isidentifier():
        if type(facts.same.get(text)) is int:
            return {(): facts.same[text]}
        lo = facts.lower.get(text) if lo is None else max(lo, facts.lower.get(text, lo))
        hi = facts.upper.get(text) if hi is None else min(hi, facts.upper.get(text, hi))
    if lo is not None and lo == hi:
        return {(): lo}
    if lo is not None:
        var = _Var(text, lo, 1, None if hi is None else hi - lo)
    elif hi is not None:
        var = _Var(text, hi, -1, None)
    else:
        var = _Var(text, 0, 0, None)
    key = text if var.sign else "~" + text
    env.vars[key] = var
    return {(key,): var.sign or 1, (): var.offset}


# -- bounds through the relations: a variable replaced by what it is known to be >=, <= or equal to -------------
_SUBSTITUTIONS = 48  # polynomials tried per bound; the rest is left to the variables' own bounds


def _bounded(p, env):
    """(lo, hi) of p: its range (_range), tightened by replacing variables by what their relations bound them by
    (`max(a, b) - a >= 0`: max(a, b) >= a), each choice a valid bound, the best kept."""
    lo, hi = _range(p, env)
    if not any(v in env.relations for m in p for v in m):
        return lo, hi
    budget = [_SUBSTITUTIONS]
    found = _search(p, env, True, frozenset(), budget)
    lo = found if lo is None else lo if found is None else max(lo, found)
    budget[0] = _SUBSTITUTIONS
    found = _search(p, env, False, frozenset(), budget)
    hi = found if hi is None else hi if found is None else min(hi, found)
    return lo, hi


def _search(p, env, lower: bool, done, budget):
    """The best lower (or upper) bound of p over substitutions of the variables not yet in `done`."""
    best = None
    for key in sorted({v for m in p for v in m if v in env.relations and v not in done}):
        for kind, q in env.relations[key].values():
            if budget[0] <= 0:
                return best
            budget[0] -= 1
            try:
                r = _substitute(p, key, kind, q, env, lower)
            except Undecided:  # (an expansion over POLY_LIMIT)
                r = None
            if r is None:
                continue
            lo, hi = _range(r, env)
            here = lo if lower else hi
            deeper = _search(r, env, lower, done | {key}, budget)
            for b in (here, deeper):
                if b is not None:
                    best = b if best is None else max(best, b) if lower else min(best, b)
    return best


def _substitute(p, key, kind, q, env, lower: bool):
    """p with the variable `key` replaced by what its relation says of it, where that bounds p from the side asked
    (an equality: both sides); None where it does not (the variable twice in a term, terms of both signs)."""
    var = env.vars[key]
    s = var.sign or 1  # value = offset + s * y
    if kind == "times":  # c * value == q: (c * s) * y == q - c * offset
        c, q = q
        c, q = c * s, _sub(q, {(): c * var.offset})
    else:  # value >= q is y >= q - offset (s = 1) or y <= offset - q (s = -1)
        c, q = 1, (_sub(q, {(): var.offset}) if s == 1 else _sub({(): var.offset}, q))
        if s == -1:
            kind = "le" if kind == "ge" else "ge"
    out: dict = {}
    signs = set()
    for m, k in p.items():
        n = m.count(key)
        if n == 0:
            out = _add(out, {m: k})
            continue
        rest = tuple(v for v in m if v != key)
        if n > 1 or k % c or any(env.vars[v].sign == 0 for v in rest):
            return None
        signs.add(k > 0)
        out = _add(out, _mul({rest: k // c}, q))
    if kind != "times":  # k * rest * y >= k * rest * q where k > 0 and y >= q (rest >= 0), and so on
        if len(signs) != 1 or ((kind == "ge") == signs.pop()) != lower:
            return None
    return out


# -- exact text: a shifted polynomial back over the values it stands for, printed canonically --------------------
def _exact(p, env):
    """p over the variables' values (`y` replaced by `(value - offset) / sign`): {monomial of texts: coefficient}."""
    out: dict = {}
    for m, c in p.items():
        term = {(): c}
        for key in m:
            var = env.vars[key]
            sign = var.sign or 1
            term = _mul(term, {(var.text,): sign, (): -sign * var.offset if var.sign else 0})
        out = _add(out, term)
    return out


def _monomial_text(m) -> str:
    return " * ".join(m)


def _text(p) -> str:
    """An exact polynomial as Python: terms by degree, highest first, then by text; the constant last."""
    terms = sorted(((m, c) for m, c in p.items() if m and c), key=lambda mc: (-len(mc[0]), mc[0]))
    const = p.get((), 0)
    out = ""
    for m, c in terms:
        body = _monomial_text(m) if abs(c) == 1 else f"{abs(c)} * {_monomial_text(m)}"
        out += (" - " if c < 0 else " + ") + body if out else ("-" if c < 0 else "") + body
    if const or not out:
        out += (" - " if const < 0 else " + ") + str(abs(const)) if out else str(const)
    return out


def _operand(p, env) -> str:
    return _as_operand(_exact(p, env))


def _as_operand(e) -> str:
    """The text of an exact polynomial as an operand of another operator: bare when a single name or atom (with
    coefficient 1), or a number >= 0; else parenthesized."""
    text = _text(e)
    terms = [(m, c) for m, c in e.items() if m and c]
    const = e.get((), 0)
    single = (not terms and const >= 0) or (not const and len(terms) == 1 and terms[0][1] == 1
                                            and len(terms[0][0]) == 1)
    return text if single else f"({text})"


# -- the expression walk ------------------------------------------------------------------------------------------
def _poly(node, env):
    t = type(node)
    if t is ast.Constant:
        if type(node.value) not in (int, bool):
            raise Undecided
        return {(): int(node.value)}
    if t is ast.Name:
        return _name(node.id, env)
    if t is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        p = _poly(node.operand, env)
        return p if type(node.op) is ast.UAdd else _scale(p, -1)
    if t is ast.Call and type(node.func) is ast.Name and not node.keywords:
        rule = _CALLS.get((node.func.id, len(node.args)))
        if rule is None:
            raise Undecided
        return rule(node.func.id, [_poly(a, env) for a in node.args], env)
    if t is not ast.BinOp:
        raise Undecided
    p, q = _poly(node.left, env), _poly(node.right, env)
    o = type(node.op)
    if o is ast.Add:
        return _add(p, q)
    if o is ast.Sub:
        return _sub(p, q)
    if o is ast.Mult:
        return _mul(p, q)
    if o is ast.Pow:
        k = _constant(q)
        if k is None or not 0 <= k <= 4:
            raise Undecided
        out = {(): 1}
        for _ in range(k):
            out = _mul(out, p)
        return out
    if o in (ast.FloorDiv, ast.Mod):
        return _divmod(o is ast.FloorDiv, p, q, env)
    raise Undecided  # true division and the rest: floats


def _name(name: str, env):
    """A size symbol or an int number input (read as the one, or the int, a guarded equality says it equals); a
    float number input (nan, inf: `f0 - f0 == 0` fails) or any other name: undecided."""
    same = env.facts.same
    while name in same:
        name = same[name]
        if type(name) is int:
            return {(): name}
    if name not in env.facts.lower and name not in env.facts.ints:
        raise Undecided
    out = _variable(name, env.facts.lower.get(name), env.facts.upper.get(name), env)
    bound = env.facts.below.get(name)
    if bound is not None and name not in env.expanding:  # x <= the expression (over other symbols) it is below
        env.expanding.add(name)
        try:
            env.relate(out, "le", _poly_of(bound, env))
        except (Undecided, SyntaxError, RecursionError):
            pass
        finally:
            env.expanding.discard(name)
    return out


def _divmod(floor: bool, p, q, env):
    """p // q or p % q: exact when q is a constant that divides p's variable part, or when p lies within [k*q,
    (k+1)*q) for one k on every call (q >= 1): a constant quotient; else a variable bounded by p's and q's bounds."""
    cq = _constant(q)
    if cq == 0:
        raise Undecided  # (a ZeroDivisionError in eager)
    if cq is not None:
        k = p.get((), 0)
        if all(c % cq == 0 for m, c in p.items() if m):  # p = cq * r + k: p // cq = r + k // cq, p % cq = k % cq
            return _add({m: c // cq for m, c in p.items() if m}, {(): k // cq}) if floor else {(): k % cq}
    qlo, qhi = _range(q, env)
    if qlo is not None and qlo >= 1:
        reduced = _cancel(p, q, env)
        if reduced is not None:  # (g * a) // (g * b) is a // b, (g * a) % (g * b) is g * (a % b), for g >= 1
            g, a, b = reduced
            return _divmod(floor, a, b, env) if floor else _mul(g, _divmod(False, a, b, env))
        for k in _quotients(p, q):
            rest = _sub(p, _scale(q, k))  # p // q == k exactly when 0 <= p - k * q <= q - 1 for every call
            lo, _ = _range(rest, env)
            gap, _ = _range(_sub(q, rest), env)
            if lo is not None and lo >= 0 and gap is not None and gap >= 1:
                return {(): k} if floor else rest
    (plo, phi) = _range(p, env)
    lo = hi = None
    if not floor:  # n % m with m >= 1 is in [0, m - 1], and n % m <= n for n >= 0
        if qlo is not None and qlo >= 1:
            lo = 0
            caps = [b for b in (None if qhi is None else qhi - 1, phi if plo is not None and plo >= 0 else None)
                    if b is not None]
            hi = min(caps, default=None)
    elif cq is not None and cq > 0:  # floor(n / c) is monotone in n
        lo = None if plo is None else plo // cq
        hi = None if phi is None else phi // cq
    elif plo is not None and plo >= 0 and qlo is not None and qlo >= 1:
        lo, hi = 0, (None if phi is None else phi // qlo)
    out = _variable(f"({_operand(p, env)} {'//' if floor else '%'} {_operand(q, env)})", lo, hi, env)
    if floor and cq is not None and cq > 0:  # c * (n // c) == n - n % c, with n % c in [0, c - 1]
        env.relate(out, "times", (cq, _sub(p, _variable(f"({_operand(p, env)} % {cq})", 0, cq - 1, env))))
    elif floor and plo is not None and plo >= 0 and qlo is not None and qlo >= 1:  # n // m <= n
        env.relate(out, "le", p)
    return out


def _cancel(p, q, env):
    """(g, a, b) with p = g * a, q = g * b and g >= 1 on every call (a common factor of every term of both: a
    number, a variable >= 1), shifted polynomials; None when p and q share no factor."""
    ep, eq = _exact(p, env), _exact(q, env)
    terms = [(m, c) for e in (ep, eq) for m, c in e.items() if c]
    if not terms:
        return None
    g = 0
    for _, c in terms:
        g = math.gcd(g, c)
    common = set(terms[0][0])
    for m, _ in terms:
        common &= set(m)
    texts = {var.text: key for key, var in env.vars.items() if var.sign == 1}  # (value = offset + y)
    common = sorted(v for v in common if v in texts and env.vars[texts[v]].offset >= 1)
    if g == 1 and not common:
        return None
    factor = {tuple(common): g}
    return tuple(_shifted(e, env) for e in (factor, _divide(ep, g, common), _divide(eq, g, common)))


def _divide(e, g, common):
    out = {(): 0}
    for m, c in e.items():
        if not c:
            continue
        rest = list(m)
        for v in common:
            rest.remove(v)
        out[tuple(rest)] = c // g
    return out


def _poly_of_key(key, env):
    var = env.vars[key]
    return {(key,): var.sign or 1, (): var.offset}


def _shifted(e, env):
    """An exact polynomial (over the texts of env's variables) as a shifted one."""
    keys = {var.text: key for key, var in env.vars.items()}
    out: dict = {}
    for m, c in e.items():
        term = {(): c}
        for text in m:
            term = _mul(term, _poly_of_key(keys[text], env))
        out = _add(out, term)
    return out


def _quotients(p, q):
    """Candidate constant quotients of p // q: 0, and near the ratio of their leading coefficients (the terms of
    highest degree, which shifting the variables leaves as they are)."""
    top = max(len(m) for m in q)
    m = min(m for m in q if len(m) == top)
    if top == 0 or any(len(n) > top for n in p if p[n]):
        return (0,)
    a, b = p.get(m, 0), q[m]
    return tuple(dict.fromkeys((0, a // b, -(-a // b) - 1)))


def _extreme(name, args, env):
    """max(a, b) / min(a, b) (the interpreter's, and slice bounds' clamps): the operand that wins for every value
    the bounds allow, else a variable bounded by its operands' bounds."""
    p, q = args
    largest = name == "max"
    lo, hi = _bounded(_sub(p, q), env)
    if lo is not None and lo >= 0:  # p >= q everywhere
        return p if largest else q
    if hi is not None and hi <= 0:
        return q if largest else p
    (plo, phi), (qlo, qhi) = _range(p, env), _range(q, env)
    if largest:  # max is at least either operand's lower bound, at most the larger upper bound
        lo = max((b for b in (plo, qlo) if b is not None), default=None)
        hi = None if phi is None or qhi is None else max(phi, qhi)
    else:
        lo = None if plo is None or qlo is None else min(plo, qlo)
        hi = min((b for b in (phi, qhi) if b is not None), default=None)
    a, b = sorted((_text(_exact(p, env)), _text(_exact(q, env))))  # max(a, b) is max(b, a)
    out = _variable(f"{name}({a}, {b})", lo, hi, env)
    for operand in (p, q):  # max(a, b) >= a, min(a, b) <= a
        env.relate(out, "ge" if largest else "le", operand)
    return out


def _abs(name, args, env):
    (p,) = args
    lo, hi = _bounded(p, env)
    if lo is not None and lo >= 0:
        return p
    if hi is not None and hi <= 0:
        return _scale(p, -1)
    out = _variable(f"abs({_text(_exact(p, env))})", 0, None if lo is None or hi is None else max(-lo, hi), env)
    env.relate(out, "ge", p)
    env.relate(out, "ge", _scale(p, -1))
    return out


def _int(name, args, env):
    return args[0]  # (every polynomial is an int: int() of one is itself)


_CALLS = {("max", 2): _extreme, ("min", 2): _extreme, ("abs", 1): _abs, ("int", 1): _int}


# -- what arith asks --------------------------------------------------------------------------------------------
def _difference(a, b, facts):
    env = _Env(facts)
    try:
        return _sub(_poly_of(a, env), _poly_of(b, env)), env
    except (Undecided, SyntaxError, RecursionError):
        return None, env


def decide(op: str, a, b, facts: Facts):
    """`a op b` (texts of int expressions, or ints) for every call the facts allow: True, False, or None when
    the facts do not decide it."""
    d, env = _difference(a, b, facts)
    if d is None:
        return None
    if all(not m for m in d):
        return COMPARE[op](d.get((), 0), 0)
    lo, hi = _bounded(d, env)
    if op in ("==", "!="):
        differ = (lo is not None and lo > 0) or (hi is not None and hi < 0)
        return (op == "!=") if differ else None
    if op in ("<", "<="):  # a < b is b > a: flip the difference
        lo, hi, op = (None if hi is None else -hi), (None if lo is None else -lo), FLIP[op]
    strict = op == ">"
    if lo is not None and (lo > 0 if strict else lo >= 0):
        return True
    if hi is not None and (hi <= 0 if strict else hi < 0):
        return False
    return None


def simplify(expr: str, facts: Facts):
    """(text, value): the expression's shortest exact text over the symbols for every call the facts allow (its
    polynomial, printed canonically; parenthesized unless one name, atom or number, so it reads as an operand),
    and its int value where that is one number on all of them; (None, None) where the expression is not one this
    analysis reads (floats, number inputs)."""
    env = _Env(facts)
    try:
        e = _exact(_poly(_parse(expr), env), env)
    except (Undecided, SyntaxError, RecursionError):
        return None, None
    return _as_operand(e), _constant(e)


def linear(a, b, facts: Facts):
    """a - b as `c * x + k` when it is linear in one variable x (a size symbol, an int number input, or a
    sub-expression this analysis does not resolve, by its text): (x, c, k), else None."""
    d, env = _difference(a, b, facts)
    if d is None:
        return None
    e = _exact(d, env)
    terms = [(m, c) for m, c in e.items() if m and c]
    if len(terms) != 1 or len(terms[0][0]) != 1:
        return None
    (name,), c = terms[0]
    return name, c, e.get((), 0)


def learn(op: str, a, b, facts: Facts, into: Facts):
    """`a op b` held and the prologue checks it: where it says a size symbol (or a sub-expression: `linear`) is one
    number (`i1 + 1 == 10`) or is bounded (`i0 > 3`), add that to `into` (the facts later comparisons and
    expressions read)."""
    if op == "!=":
        return
    if op == "==" and _unify(a, b, facts, into):
        return
    found = linear(a, b, facts)
    if found is None:
        return
    name, c, k = found  # c * name + k  op  0
    if op == "==":
        if k % c == 0:
            into.same[name] = -k // c
            for key, v in into.same.items():
                if v == name:
                    into.same[key] = -k // c
        return
    if op in ("<", "<="):
        c, k, op = -c, -k, FLIP[op]
    if op == ">":  # c * name + k > 0  is  c * name + k - 1 >= 0
        k -= 1
    if c > 0:  # name >= ceil(-k / c)
        into.lower[name] = max(facts.lower.get(name, -(k // c)), -(k // c))
    else:  # name <= floor(k / -c)
        bound = k // -c
        into.upper[name] = min(facts.upper.get(name, bound), bound)


def _unify(a, b, facts: Facts, into: Facts) -> bool:
    """a == b where a - b is `c * (x - y)`: later reads of y read x (the lower name, so every chain ends at one)."""
    d, env = _difference(a, b, facts)
    if d is None:
        return False
    e = _exact(d, env)
    terms = {m: c for m, c in e.items() if m and c}
    if e.get((), 0) or len(terms) != 2 or sum(terms.values()) or \
            not all(len(m) == 1 and m[0].isidentifier() for m in terms):
        return False
    x, y = sorted(m[0] for m in terms)
    into.same[y] = x
    for key, v in into.same.items():
        if v == y:
            into.same[key] = x
    return True
