"""Interpreter: the constructs whose bytecode changed in 3.12 and 3.13 (inlined comprehensions, super(), f-strings,
slices, closures with defaults, keyword calls, yield from with throw, except*, comparisons as branches, ...), each run
by the interpreter and natively, results and exceptions compared. They run on every Python; on each they exercise
that version's handlers."""
from __future__ import annotations

import pytest

from jitcore.interpreter import interpret


def _same(fn, *args):
    try:
        want = ("ok", fn(*args))
    except Exception as e:
        want = ("raised", type(e), str(e))
    try:
        got = ("ok", interpret(fn, args).output)
    except Exception as e:
        got = ("raised", type(e), str(e))
    assert got == want


def comprehension_shadows(n):
    x = "outer"
    squares = [x * x for x in range(n)]
    pairs = {x: y for x, y in zip(range(n), "abc")}  # noqa: C416 (the comprehension is the point)
    return x, squares, pairs


def comprehension_raises_and_restores(n):
    x = "outer"
    try:
        [1 // (x - 1) for x in range(n)]
    except ZeroDivisionError:
        pass
    return x


def comprehension_of_unbound(n):
    out = [y for y in range(n)]  # noqa: C416
    return out, "y" in locals()


def possibly_unbound(flag):
    if flag:
        v = 1
    return v


class Base:
    scale = 2

    def f(self, x):
        return x * self.scale

    @property
    def p(self):
        return "base"


class Child(Base):
    def f(self, x):
        return super().f(x) + 1

    def g(self, x):
        return super().f(x), super().scale, super().p


def super_calls(x):
    c = Child()
    return c.f(x), c.g(x)


def fstrings(a, w):
    return f"{a}", f"{a!r}", f"{a!s:>{w}}", f"{a:>{w}}|", f"{a!a}", f"{'é'!a}", f"{a=}"


def slices(n):
    a = list(range(n))
    b = a[1:3]
    a[1:3] = ["x", "y", "z"]
    c = a[::2]
    del a[:1]
    s = "abcdef"
    return a, b, c, s[2:], s[:-1], s[1:-1:2]


def closures(k):
    y = k

    def inner(a: int = 2, *, b=3) -> int:
        return a + b + y

    def counter():
        nonlocal y
        y += 1
        return y

    fns = [lambda i=i: i * y for i in range(3)]
    return inner(), inner(1, b=1), inner.__defaults__, inner.__kwdefaults__, inner.__annotations__, counter(), \
        [f() for f in fns]


class Holder:
    def __init__(self):
        self.fn = lambda x, k=0: x + k

    def m(self, x, k=0):
        return x - k


def calls(x):
    h = Holder()
    args, kw = (x,), {"k": 5}
    return (h.m(x, k=2), h.fn(x, k=3), h.m(*args, **kw), h.fn(*args), max(x, 3, key=lambda v: -v),
            sorted([3, 1, 2], reverse=True), dict(a=1, **kw), (*args, *args), print.__name__)


def sub_generator():
    try:
        yield 1
        yield 2
    except KeyError:
        return "caught"
    return "done"


def delegating():
    r = yield from sub_generator()
    yield r


def yield_from_throw(n):
    g = delegating()
    out = [next(g)]
    out.append(g.throw(KeyError("k")))  # the sub-generator returns: its value goes on (CLEANUP_THROW on 3.12+)
    g2 = delegating()
    next(g2)
    try:
        g2.throw(ValueError("v"))
    except ValueError as e:
        out.append(str(e))
    g3 = delegating()
    out.append(next(g3))
    out.append(g3.send(None))
    out.append(next(g3))
    g3.close()
    return out, list(delegating())


def stop_iteration_in_generator(n):
    def gen():
        yield 1
        raise StopIteration("inside")

    try:
        list(gen())
    except RuntimeError as e:
        return str(e), type(e.__cause__).__name__
    return None


def except_star(n):
    caught = []
    try:
        try:
            raise ExceptionGroup("eg", [ValueError(1), TypeError(2), KeyError(3)])
        except* ValueError as e:
            caught.append(("value", len(e.exceptions)))
        except* TypeError as e:
            caught.append(("type", len(e.exceptions)))
    except* KeyError as e:
        caught.append(("key", len(e.exceptions)))
    return caught


def branches(a, b):
    out = []
    if a < b:
        out.append("lt")
    if not a:
        out.append("not")
    if a is None or b is not None:
        out.append("none")
    if 0 < a < b <= 10:
        out.append("chain")
    while a < b:
        a += 1
    else:
        out.append(a)
    for i in range(3):
        if i == 1:
            break
    else:
        out.append("no break")
    return out, +a, -a, ~a, a if a > 2 else b


def matching(v):
    match v:
        case {"k": x, **rest}:
            return "map", x, rest
        case [1, *others]:
            return "seq", others
        case Holder(fn=f):
            return "cls", f(1)
        case int(n) if n > 3:
            return "int", n
        case _:
            return "other"


def exec_star_import(n):
    ns = {}
    exec("from math import *\nr = floor(2.5) + n", {"n": n}, ns)
    return ns["r"]


def with_and_finally(n):
    import contextlib

    log = []

    @contextlib.contextmanager
    def cm(tag):
        log.append(("enter", tag))
        try:
            yield tag
        finally:
            log.append(("exit", tag))

    def body():
        try:
            with cm("a") as t:
                if n > 1:
                    raise KeyError(t)
        except KeyError as e:
            return "caught", e.args
        finally:
            log.append("finally")

    return body(), log


def global_and_builtin_calls(n):
    return len(range(n)), abs(-n), comprehension_shadows(2), isinstance(n, int)


CASES = [
    (comprehension_shadows, (4,)), (comprehension_raises_and_restores, (3,)), (comprehension_of_unbound, (2,)),
    (possibly_unbound, (True,)), (possibly_unbound, (False,)), (super_calls, (3,)), (fstrings, ("ab", 5)),
    (fstrings, (3.5, 8)), (slices, (6,)), (closures, (4,)), (calls, (7,)), (yield_from_throw, (0,)),
    (stop_iteration_in_generator, (0,)), (except_star, (0,)), (branches, (1, 5)), (branches, (0, None)),
    (matching, ({"k": 1, "j": 2},)), (matching, ([1, 2, 3],)), (matching, (Holder(),)), (matching, (9,)),
    (matching, ("s",)), (exec_star_import, (2,)), (with_and_finally, (1,)), (with_and_finally, (2,)),
    (global_and_builtin_calls, (3,)),
]


@pytest.mark.parametrize("fn,args", CASES, ids=[f"{f.__name__}-{i}" for i, (f, _) in enumerate(CASES)])
def test_interpreted_as_native(fn, args):
    _same(fn, *args)
