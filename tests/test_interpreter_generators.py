"""Interpreter: generators (next/send/throw/close, yield from, generator expressions driven by C builtins)."""
from __future__ import annotations

import pytest

from jitcore.interpreter import DefaultContext, InterpGenerator, interpret


def run(f, *args):
    return interpret(f, args, {}, DefaultContext()).output


def check(f, *args):
    expected = f(*args)
    got = run(f, *args)
    assert got == expected, (got, expected)


def test_simple_generator_and_builtins():
    def gen(n):
        for i in range(n):
            yield i * i
        return "done"

    def f(n):
        return (list(gen(n)), sum(gen(n)), list(zip(gen(n), gen(n + 1))), dict(enumerate(gen(3))),
                sorted(gen(n), reverse=True), [x for x in gen(n) if x % 2], max(gen(n)), any(gen(0)))

    check(f, 5)


def test_send_throw_close():
    def acc():
        total = 0
        while True:
            try:
                v = yield total
            except ValueError as e:
                total = -1000 + len(str(e))
                continue
            except GeneratorExit:
                raise
            if v is None:
                break
            total += v
        return total

    def f(x):
        g = acc()
        out = [next(g), g.send(x), g.send(2)]
        out.append(g.throw(ValueError("abc")))
        out.append(g.send(5))
        try:
            g.send(None)
        except StopIteration as e:
            out.append(("stop", e.value))
        g2 = acc()
        next(g2)
        g2.close()
        g3 = acc()
        g3.close()
        try:
            next(g3)
        except StopIteration:
            out.append("closed")
        return out

    check(f, 3)


def test_yield_from_and_return_value():
    def inner(n):
        got = []
        for i in range(n):
            got.append((yield i))
        return got

    def outer(n):
        r = yield from inner(n)
        yield ("inner returned", r)
        yield from [100, 200]

    def f(n):
        g = outer(n)
        out = [next(g)]
        for i in range(n + 4):
            try:
                out.append(g.send(f"s{i}" if i < n else None))
            except StopIteration:
                out.append("stop")
                break
        return out

    check(f, 3)


def test_throw_into_yield_from():
    def inner():
        try:
            yield 1
            yield 2
        except KeyError:
            yield "inner caught"
        return "inner done"

    def outer():
        r = yield from inner()
        yield r

    def f(x):
        g = outer()
        out = [next(g), g.throw(KeyError("k")), next(g)]
        g2 = outer()
        next(g2)
        try:
            g2.throw(IndexError("i"))
        except IndexError:
            out.append("propagated")
        g3 = outer()
        next(g3)
        g3.close()
        out.append("closed")
        return out

    check(f, 0)


def test_generator_exception_semantics():
    def bad():
        yield 1
        raise StopIteration("oops")

    def f(x):
        try:
            list(bad())
        except RuntimeError as e:
            return ("runtime", type(e.__cause__).__name__)
        return "no error"

    check(f, 0)


def test_generator_finally_runs_on_exhaustion_and_cleanup():
    def gen(log):
        try:
            yield 1
            yield 2
        finally:
            log.append("cleanup")

    def f(x):
        log = []
        for v in gen(log):
            log.append(v)
        g = gen(log)
        next(g)
        g.close()
        return log

    check(f, 0)


def test_genexpr_over_closure_and_returns_interp_generator():
    def f(n):
        k = 3
        return (i * k for i in range(n))

    out = run(f, 4)
    assert isinstance(out, InterpGenerator)
    assert list(out) == [0, 3, 6, 9]


def test_send_non_none_to_fresh_generator():
    def gen():
        yield 1

    def f(x):
        g = gen()
        g.send(x)

    with pytest.raises(TypeError, match="just-started"):
        run(f, 1)


def test_exception_state_inside_generators_and_contextmanager_throw():
    import contextlib
    import sys

    def f(x):
        def g():
            try:
                raise KeyError("k")
            except KeyError:
                yield sys.exc_info()[0].__name__
                yield sys.exc_info()[0].__name__
            yield sys.exc_info()[0]

        it = g()
        out = [next(it), sys.exc_info()[0], next(it), next(it)]

        @contextlib.contextmanager
        def c():
            try:
                yield 1
            except ValueError as e:
                out.append(("caught", str(e)))

        with c():
            raise ValueError("boom")

        def g2():
            try:
                yield 1
            finally:
                return 5  # noqa: B012

        it2 = g2()
        next(it2)
        try:
            next(it2)
        except StopIteration as e:
            out.append(e.value)
        return out

    check(f, 0)
