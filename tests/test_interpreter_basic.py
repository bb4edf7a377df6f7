"""Interpreter: opcode families and Python features on plain values, compared against CPython."""
from __future__ import annotations

import collections
import dataclasses
import functools
import math

import pytest

from jitcore.interpreter import DefaultContext, interpret


def run(f, *args, **kwargs):
    return interpret(f, args, kwargs, DefaultContext()).output


def check(f, *args, **kwargs):
    expected = f(*args, **kwargs)
    got = run(f, *args, **kwargs)
    assert got == expected, (got, expected)
    return got


# -- arithmetic, comparisons, unary, in-place -----------------------------------------------------------------------
def arith(a, b):
    out = [a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, -a, +a, abs(a), a & 6, a | 1, a ^ 3, a << 2, a >> 1, ~a]
    x = a
    x += b
    x -= 1
    x *= 3
    x //= 2
    x %= 100
    x **= 2
    x <<= 1
    x >>= 1
    x &= 0xFFFF
    x |= 1
    x ^= 2
    y = float(x)
    y /= 3
    return out, x, y, a < b, a <= b, a == b, a != b, a > b, a >= b, 1 < a < 10 < b, not a, a is b, a is not b


def test_arith():
    check(arith, 7, 3)
    check(arith, 12, 30)


def test_matmul_operator():
    class M:
        def __init__(self, v):
            self.v = v

        def __matmul__(self, o):
            return M(self.v * o.v)

        def __imatmul__(self, o):
            self.v += o.v
            return self

    def f(a, b):
        c = M(a) @ M(b)
        c @= M(1)
        return c.v

    check(f, 3, 4)


def strings(s, n):
    t = s.upper() + "-" + s[::-1] + s[1:3] + str(n)
    parts = t.split("-")
    return (f"{s}:{n:>5}|{n!r}|{s!s:^9}|{n:.3f}|{3.5:{n}}", parts, " ".join(parts), s * 2, "x" in s, len(t),
            "%s-%d" % (s, n), "{}/{}".format(s, n),  # noqa: UP031, UP032
            s.startswith("h"), sorted(s), s.count("l"))


def test_strings_fstrings():
    check(strings, "hello", 7)


def test_containers_and_slicing():
    def f(xs):
        a = xs[1:3]
        b = xs[::-1]
        c = xs[-2:]
        extra = {"c": 3}
        d = {"a": 1, "b": 2, **extra}
        s = {1, 2, *xs}
        t = (*xs, *a)
        lst = [*xs, *b]
        lst[0] = 100
        lst[1:3] = [7, 8, 9]
        del lst[-1]
        del d["a"]
        d2 = dict(x=1, y=2)  # noqa: C408
        return a, b, c, d, s, t, lst, d2, xs[0:len(xs):2], {k: v for k, v in d.items()}  # noqa: C416 - exercises dict comprehensions

    check(f, [1, 2, 3, 4, 5])


def test_unpacking():
    def f(seq):
        a, b, c = seq
        first, *rest = seq
        *init, last = seq
        x, *mid, y = range(6)
        (p, q), r = (1, 2), 3
        it = iter([10, 20])
        m, n = it
        for i, (j, k) in enumerate([(1, 2), (3, 4)]):
            a += i + j + k
        return a, b, c, first, rest, init, last, x, mid, y, p, q, r, m, n

    check(f, (1, 2, 3))
    with pytest.raises(ValueError, match="not enough values"):
        run(f, (1, 2))
    with pytest.raises(ValueError, match="too many values"):
        run(f, (1, 2, 3, 4))


def test_loops_break_continue_else():
    def f(n):
        total = 0
        for i in range(n):
            if i % 2:
                continue
            if i > 7:
                break
            total += i
        else:
            total = -1
        j = 0
        while j < n:
            j += 3
            if j == 100:
                break
        else:
            total += 1000
        while True:
            j -= 1
            if j < 0:
                break
        return total, j

    check(f, 5)
    check(f, 20)


def test_comprehensions_and_genexpr():
    def f(n):
        sq = [i * i for i in range(n) if i % 2 == 0]
        st = {i % 3 for i in range(n)}
        dc = {i: [j for j in range(i)] for i in range(n)}  # noqa: C416 - exercises nested comprehensions
        g = sum(i for i in range(n))
        nested = [(i, j) for i in range(3) for j in range(i)]
        return sq, st, dc, g, nested, list(zip((x for x in "abc"), range(5))), any(x > 3 for x in range(n)), \
            all(x < 3 for x in range(n)), dict(enumerate(x * 2 for x in range(3))), sorted(x % 4 for x in range(n))

    check(f, 8)


def test_lambdas_closures_nonlocal():
    def f(n):
        k = 10
        add = lambda x, y=1: x + y + k  # noqa: E731 - exercises lambdas with defaults and closures

        def counter():
            c = 0

            def inc(by=1):
                nonlocal c
                c += by
                return c

            return inc

        inc = counter()
        inc()
        inc(5)
        fns = [lambda i=i: i * k for i in range(3)]
        return add(n), add(n, y=5), inc(), [g() for g in fns], sorted([3, 1, 2], key=lambda v: -v)

    check(f, 4)


def test_outer_closure_cell():
    base = 5

    def f(x):
        return x + base

    check(f, 3)


def test_args_kwargs_kwonly_defaults():
    def g(a, b=2, *args, c, d=4, **kw):
        return a, b, args, c, d, kw

    def h(a, /, b, *, c=3):
        return a, b, c

    def f(x):
        args = (1, 2, 3)
        kwargs = {"c": 5, "z": 6}
        return (g(x, c=1), g(x, 5, 6, 7, c=1, e=9), g(*args, **kwargs), g(*[x], **{"c": 0}), h(1, 2),  # noqa: PIE804,
                h(1, b=2, c=4), functools.partial(g, 1, c=2)(3))

    check(f, 0)

    def bad(x):
        return g(x)

    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'c'"):
        run(bad, 1)

    def bad2(x):
        return h(a=x, b=1)

    with pytest.raises(TypeError, match="positional-only"):
        run(bad2, 1)


def test_walrus_ternary_chained():
    def f(xs):
        if (n := len(xs)) > 2:
            y = "big" if n > 4 else "mid"
        else:
            y = "small"
        return n, y, [z for x in xs if (z := x * 2) > 2], 0 < n <= len(xs) + 2 != 4

    check(f, [1, 2, 3])
    check(f, [1])


def test_recursion():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    check(fact, 10)
    check(fib, 12)

    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)

    check(deep, 300)


def test_global_read_and_builtins():
    def f(x):
        return math.sqrt(x) + len([1, 2]) + max(x, 3), collections.Counter("aab")["a"]

    check(f, 16.0)


def test_imports_inside_function():
    def f(x):
        import json
        import os.path
        from collections import OrderedDict
        from math import floor as fl

        return os.path.join("a", "b"), list(OrderedDict(a=1)), fl(x), json.dumps({"a": x})

    check(f, 2.5)


def test_match_statement():
    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    def f(v):
        match v:
            case 0 | 1:
                return "small"
            case [a, b, *rest]:
                return ("seq", a, b, rest)
            case {"k": val, **others}:
                return ("map", val, others)
            case Point(x=0, y=yy):
                return ("yaxis", yy)
            case Point(xx, yy) if xx == yy:
                return ("diag", xx)
            case str() as s:
                return ("str", s)
            case int(n) if n > 100:
                return ("bigint", n)
            case _:
                return "other"

    for v in (0, 1, [1, 2, 3, 4], {"k": 1, "z": 2}, Point(0, 5), Point(3, 3), Point(1, 2), "hi", 500, 7.5):
        assert run(f, v) == f(v)


def test_classes_super_properties_dataclass():
    class Base:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

        @property
        def double(self):
            return self.v * 2

        @staticmethod
        def st(x):
            return x + 1

        @classmethod
        def make(cls, v):
            return cls(v)

    class Child(Base):
        def __init__(self, v, w):
            super().__init__(v)
            self.w = w

        def get(self):
            return super().get() + self.w

        def __call__(self, z):
            return self.get() * z

        @property
        def total(self):
            return self.v + self.w

        @total.setter
        def total(self, value):
            self.w = value - self.v

    @dataclasses.dataclass
    class DC:
        a: int
        b: list = dataclasses.field(default_factory=list)

        def __post_init__(self):
            self.b.append(self.a)

    def f(v):
        c = Child(v, 2)
        c.total = 10
        d = DC(v)

        class Local:
            k = v

            def m(self):
                return self.k * 3

        return (c.get(), c.double, c.total, c(3), Base.st(v), Child.make(v).v if False else Base.make(v).v,
                d, Local().m(), isinstance(c, Base), type(c).__name__)

    check(f, 4)


def test_with_statement():
    class CM:
        def __init__(self, log, swallow=False):
            self.log, self.swallow = log, swallow

        def __enter__(self):
            self.log.append("enter")
            return self

        def __exit__(self, et, ev, tb):
            self.log.append(("exit", et.__name__ if et else None))
            return self.swallow

    def f(x):
        log = []
        with CM(log) as cm:
            log.append(cm is not None)
        with CM(log, swallow=True):
            raise ValueError("x")
        try:
            with CM(log):
                raise KeyError("k")
        except KeyError:
            log.append("caught")
        import contextlib

        @contextlib.contextmanager
        def gen_cm():
            log.append("g-enter")
            try:
                yield 5
            finally:
                log.append("g-exit")

        with gen_cm() as v:
            log.append(v)
        with contextlib.suppress(ZeroDivisionError):
            log.append(1 / 0)
        return log

    check(f, 1)


def test_try_except_finally():
    def f(x):
        log = []
        try:
            log.append(1)
            if x:
                raise ValueError("bad")
        except (KeyError, ValueError) as e:
            log.append(("caught", str(e)))
        else:
            log.append("else")
        finally:
            log.append("finally")
        try:
            try:
                {}["missing"]
            finally:
                log.append("inner finally")
        except KeyError as e:
            log.append(repr(e))
        try:
            try:
                raise TypeError("t")
            except TypeError:
                raise ValueError("v")  # noqa: B904 - checks the implicit __context__ chaining
        except ValueError as e:
            log.append((type(e.__context__).__name__, e.__cause__))
        try:
            try:
                raise TypeError("t")
            except TypeError as e:
                raise ValueError("v") from e
        except ValueError as e:
            log.append((type(e.__cause__).__name__, e.__suppress_context__))
        try:
            try:
                raise TypeError("t")
            except TypeError:
                log.append("about to reraise")
                raise
        except TypeError as e:
            log.append(("reraised", str(e)))

        def ret_in_finally():
            try:
                return 1
            finally:
                log.append("rf")

        log.append(ret_in_finally())
        for i in range(3):
            try:
                if i == 1:
                    continue
                log.append(i)
            finally:
                log.append(("f", i))
        try:
            assert x == 5, "x is not 5"
        except AssertionError as e:
            log.append(str(e))
        return log

    check(f, 0)
    check(f, 1)


def test_exception_group_except_star():
    def f(x):
        log = []
        try:
            raise ExceptionGroup("g", [ValueError(1), TypeError(2), ValueError(3)])
        except* ValueError as eg:
            log.append(("v", len(eg.exceptions)))
        except* TypeError as eg:
            log.append(("t", len(eg.exceptions)))
        try:
            try:
                raise ExceptionGroup("g", [ValueError(1), KeyError(2)])
            except* ValueError:
                log.append("v only")
        except ExceptionGroup as rest:
            log.append(("rest", [type(e).__name__ for e in rest.exceptions]))
        try:
            raise ValueError("naked")
        except* ValueError as eg:
            log.append(("naked", type(eg).__name__))
        return log

    check(f, 0)


def test_user_exceptions_propagate_with_type():
    class MyError(Exception):
        pass

    def inner(x):
        if x > 1:
            raise MyError(f"too big: {x}")
        return {}["k"]

    def f(x):
        return inner(x)

    with pytest.raises(MyError, match="too big: 5"):
        run(f, 5)
    with pytest.raises(KeyError):
        run(f, 0)

    def g(x):
        return int("nope")

    with pytest.raises(ValueError, match="invalid literal"):
        run(g, 0)

    def h(x):
        return undefined_name_xyz  # noqa: F821

    with pytest.raises(NameError, match="undefined_name_xyz"):
        run(h, 0)

    def u(x):
        if x:
            y = 1
        return y

    with pytest.raises(UnboundLocalError):
        run(u, 0)


def test_locals_globals_vars_eval_exec():
    def f(x):
        y = x + 1
        loc = sorted(locals().items())
        e = eval("x * y")
        ns = {}
        exec("z = x + 100\nw = [i for i in range(3)]", {"x": x}, ns)
        exec("q = 5\nclass K:\n    a = q\nr = K.a", ns)
        return loc, e, ns["z"], ns["w"], ns["r"], "math" in globals(), sorted(vars())

    check(f, 3)


def test_getattr_family_iter_next():
    class Obj:
        a = 1

    def f(x):
        o = Obj()
        name_a, name_b = "a", "b"
        setattr(o, name_b, x)
        r = [getattr(o, name_a), getattr(o, name_b), getattr(o, "zz", "dflt"), hasattr(o, "b"), hasattr(o, "zz")]
        delattr(o, name_b)
        r.append(hasattr(o, "b"))
        it = iter([1, 2, 3])
        r.append(next(it))
        r.append(next(it, None))
        r.append(list(it))
        r.append(next(iter(()), "empty"))
        return r

    check(f, 9)


def test_callable_objects_and_partial():
    class Adder:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x + self.k

    def f(x):
        a = Adder(3)
        p = functools.partial(lambda u, v: u * v, 4)
        return a(x), p(x), list(map(a, [1, 2])), list(filter(lambda v: v % 2, range(5)))

    check(f, 2)


def test_set_annotations_in_class_body_and_print(capsys):
    def f(x):
        class A:
            v: int = 3

        print("hello", x)
        return A.__annotations__, A.v

    assert run(f, 1) == f(1)
    assert "hello 1" in capsys.readouterr().out


def test_call_errors_match_cpython():
    def f(x):
        def g(**k):
            return k

        out = []
        d1, d2 = {"a": 1}, {"a": 2}
        for bad in (lambda: g(**d1, **d2), lambda: g(**[1]), lambda: g(*1), lambda: g(1)):
            try:
                bad()
            except TypeError as e:
                out.append(str(e))
        return out

    check(f, 0)


def test_module_level_opcodes_through_exec(capsys):
    def f(x):
        ns = {}
        exec("from math import *\na: int = 3\nb = floor(2.5)\ndel a\n", ns)
        exec(compile("x + 1", "<s>", "single"), {"x": x})

        def outer():
            y = 1

            def inner():
                return y  # noqa: F821  (deleted below: DELETE_DEREF is what is tested)

            del y
            try:
                inner()
            except NameError as e:
                return str(e)

        return ns["b"], "a" in ns, ns["__annotations__"], outer()

    assert run(f, 3) == f(3)
    assert capsys.readouterr().out == "4\n4\n"
