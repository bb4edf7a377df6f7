"""Interpreter: user classes (dunder protocols, metaclasses, enums, namedtuples, ABCs), exception state."""
from __future__ import annotations

import abc
import collections
import enum
import sys
import typing

import pytest

from jitcore.interpreter import DefaultContext, interpret


def run(f, *args):
    return interpret(f, args, {}, DefaultContext()).output


def check(f, *args):
    expected = f(*args)
    got = run(f, *args)
    assert got == expected, (got, expected)


class Bag:
    def __init__(self, items):
        self.items = list(items)

    def __getitem__(self, i):
        return self.items[i] * 10

    def __setitem__(self, i, v):
        self.items[i] = v + 1

    def __delitem__(self, i):
        del self.items[i]

    def __iter__(self):
        yield from self.items

    def __len__(self):
        return len(self.items)

    def __contains__(self, v):
        return v in self.items

    def __reversed__(self):
        return iter(self.items[::-1])


class Color(enum.Enum):
    RED = 1
    GREEN = 2


Pair = collections.namedtuple("Pair", "a b")


class TypedPair(typing.NamedTuple):
    a: int
    b: int = 5


class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self): ...


class Square(Shape):
    def __init__(self, s):
        self.s = s

    def area(self):
        return self.s * self.s


class Meta(type):
    def __call__(cls, *args, **kwargs):
        obj = super().__call__(*args, **kwargs)
        obj.made_by_meta = True
        return obj


class WithMeta(metaclass=Meta):
    def __init__(self, v):
        self.v = v


def test_container_protocols_are_interpreted():
    def f(xs):
        b = Bag(xs)
        b[0] = 7
        del b[1]
        return b[0], list(b), len(b), 3 in b, list(reversed(b)), [x for x in b], sum(b)  # noqa: C416 - iterates via a comprehension, sorted(b)

    check(f, [1, 2, 3, 4])


def test_enum_namedtuple_abc_metaclass():
    def f(x):
        p = Pair(1, x)
        tp = TypedPair(x)
        sq = Square(x)
        w = WithMeta(x)
        return (Color(1), Color["GREEN"], Color.RED.value, p.b, p._replace(a=9), tp, tp.b, sq.area(),
                w.v, w.made_by_meta, isinstance(sq, Shape))

    check(f, 3)

    def g(x):
        return Shape()

    with pytest.raises(TypeError, match="abstract"):
        run(g, 0)


def test_super_variants():
    class A:
        def who(self):
            return "A"

        @classmethod
        def cm(cls):
            return cls.__name__

    class B(A):
        def who(self):
            return "B" + super().who()

        @classmethod
        def cm(cls):
            return "B" + super().cm()

        def gen(self):
            yield super().who()

        def uses_cell(self):
            f = lambda: self  # noqa: E731 - a lambda closing over self next to super()
            return super().who() + f().who()

    def f(x):
        b = B()
        return b.who(), B.cm(), list(b.gen()), b.uses_cell(), super(B, b).who()

    check(f, 0)


def test_exception_state_and_exc_info():
    def f(x):
        out = []
        try:
            raise ValueError("v")
        except ValueError:
            out.append(sys.exc_info()[0].__name__)
            try:
                raise KeyError("k")
            except KeyError:
                out.append(sys.exc_info()[0].__name__)
            out.append(sys.exc_info()[0].__name__)
        out.append(sys.exc_info())

        def helper():
            raise IndexError("inner")

        try:
            try:
                raise TypeError("outer")
            except TypeError:
                helper()
        except IndexError as e:
            out.append(type(e.__context__).__name__)
        return out

    check(f, 0)

    def no_active(x):
        raise  # noqa: PLE0704  (what is tested)

    with pytest.raises(RuntimeError, match="No active exception"):
        run(no_active, 0)


def test_finally_overrides_return_and_nested_loops():
    def f(x):
        def inner():
            for i in range(3):
                for j in range(3):
                    try:
                        if j == 1:
                            break
                    finally:
                        x.append((i, j))
            try:  # finally overriding return is what is tested
                return "try"
            finally:
                return "finally"  # noqa: B012

        return inner(), x

    check(f, [])


def test_deep_recursion_documented_limit():
    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)

    check(deep, 900)


def test_properties_and_descriptors():
    class Desc:
        def __get__(self, obj, owner=None):
            return 42 if obj is not None else self

    class P:
        d = Desc()

        def __init__(self):
            self._v = 1

        @property
        def v(self):
            return self._v * 2

        @v.setter
        def v(self, value):
            self._v = value

        @v.deleter
        def v(self):
            self._v = 0

    def f(x):
        p = P()
        p.v = x
        a = p.v
        del p.v
        return a, p.v, p.d

    check(f, 5)


def test_del_and_unbound_names():
    def f(x):
        y = x
        del y
        try:
            return y  # noqa: F821
        except UnboundLocalError as e:
            return "unbound" in str(e) or "cannot access" in str(e)

    check(f, 1)


def test_jit_of_a_bound_method_reads_the_object_each_call():
    import torch

    import jitcore

    class Scaler:
        def __init__(self):
            self.w = torch.randn(4)

        def f(self, a):
            return a * self.w

    s, x = Scaler(), torch.randn(3, 4)
    j = jitcore.jit(s.f)
    torch.testing.assert_close(j(x), s.f(x))
    s.w = torch.ones(4)
    torch.testing.assert_close(j(x), s.f(x))
