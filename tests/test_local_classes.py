"""Classes made inside a jitted function name the user's module, as eager's do (issue 38 item 5): namedtuple, type(),
dataclasses.make_dataclass, a class statement, metaclass calls, enum/typing functional APIs; `__module__`,
`__qualname__`, repr and pickling compared with eager over call sequences in every cache mode. The interpreter's
own module (jitcore.interpreter.*) was named before (frame_views.py, frame.with_caller_module)."""
from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import pickle
import sys
import typing

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


def _describe(cls) -> tuple:
    return cls.__module__, cls.__qualname__, cls.__name__, repr(cls)


def _namedtuple(x):
    P = collections.namedtuple("P", "a b")
    return P(x + 1, x * 2), _describe(P)


def _namedtuple_module(x):
    P = collections.namedtuple("P", "a", module="elsewhere")
    Q = collections.namedtuple("Q", ["b", "c"], defaults=[1])
    return x + 1, _describe(P), _describe(Q), repr(Q(2))


def _type_call(x):
    C = type("C", (), {"k": 1, "m": lambda self: 2})
    Q = type("Q", (C,), {"__qualname__": "outer.Q"})
    M = type("M", (), {"__module__": "mine"})
    return x * C.k, _describe(C), _describe(Q), _describe(M), repr(C())[:len("<" + C.__module__)]


def _make_dataclass(x):
    D = dataclasses.make_dataclass("D", ["a", ("b", int)], namespace={"k": 3})
    d = D(x, 2)
    F = dataclasses.dataclass(type("F", (), {"__annotations__": {"a": int}}))  # (3.11's make_dataclass: 'types')
    return d.a * d.b, _describe(D), repr(D(1, 2)), _describe(F), repr(F(3))


def _class_statement(x):
    class C:
        def method(self):
            return 1

        class Inner:
            pass

    def helper():
        return 0

    return x + C().method(), _describe(C), _describe(C.Inner), C.method.__qualname__, helper.__qualname__, \
        helper.__module__


class _Meta(type):
    pass


def _metaclasses(x):
    W = _Meta("W", (), {})  # type.__new__ makes it: the caller's module
    A = abc.ABCMeta("A", (), {})  # ABCMeta's own __new__ calls type.__new__: abc's module, as eager
    B = type("B", (A,), {})  # type() hands the call to ABCMeta.__new__: abc again
    S = type("S", (W,), {})  # the winning metaclass has no __new__ of its own: the caller's module

    class K(metaclass=_Meta):
        pass

    return x - 1, _describe(W), _describe(A), _describe(B), _describe(S), _describe(K)


def _functional_apis(x):
    E = enum.Enum("E", "RED GREEN")
    NT = typing.NamedTuple("NT", [("a", int)])  # noqa: UP014  (the functional form is the point)
    TV = typing.TypeVar("TV")
    return x * 3, _describe(E), repr(E.GREEN), _describe(NT), TV.__module__


PROGRAMS = [_namedtuple, _namedtuple_module, _type_call, _make_dataclass, _class_statement, _metaclasses,
            _functional_apis]


def _plain(out):
    """out with tensors kept and namedtuple instances as (type name, module, fields)."""
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        return (type(out).__name__, type(out).__module__, tuple(_plain(v) for v in out))
    if isinstance(out, tuple):
        return tuple(_plain(v) for v in out)
    return out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), (a, b)
        for u, v in zip(a, b):
            _same(u, v)
    else:
        assert a == b, (a, b)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_local_class_names_the_users_module(fn, mode):
    jf = jitcore.jit(fn, cache=mode)
    for shape in [(3,), (3,), (5,), (2, 4)]:
        x = torch.randn(shape)
        want, got = _plain(fn(x)), _plain(jf(x))
        _same(want, got)
    assert __name__ in repr(want)  # the eager answer names this module: the comparison above can fail


_GP = None


def _global_namedtuple(x):
    global _GP
    _GP = collections.namedtuple("_GP", "a b")
    p = _GP(1, 2)
    return x + 1, pickle.loads(pickle.dumps(p)), p


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_pickling_a_class_made_inside_works_as_in_eager(mode):
    """pickle finds the class at module.qualname: the module a namedtuple made inside names decides it."""
    jf = jitcore.jit(_global_namedtuple, cache=mode)
    for n in (3, 3, 4):
        x = torch.randn(n)
        want = _global_namedtuple(x)
        got = jf(x)
        assert torch.equal(want[0] + 0, want[0]) and torch.allclose(got[0], x + 1)
        assert tuple(got[1]) == tuple(want[1]) == (1, 2)
        assert type(got[2]).__module__ == type(want[2]).__module__ == __name__
        assert tuple(pickle.loads(pickle.dumps(got[2]))) == (1, 2)  # pickled by the caller after the call


def _local_class_pickled(x):
    class K:
        pass

    try:
        pickle.dumps(K())
    except Exception as e:  # eager: "Can't pickle local object 'f.<locals>.K'"
        return x + 1, type(e).__name__, str(e)
    return x, "", ""


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_pickling_a_local_class_fails_as_in_eager(mode):
    jf = jitcore.jit(_local_class_pickled, cache=mode)
    x = torch.randn(3)
    want, got = _local_class_pickled(x), jf(x)
    assert want[1:] == got[1:] and "_local_class_pickled.<locals>.K" in want[2]
    assert torch.equal(want[0], got[0])


def _frame_module(x):
    return x + 1, sys._getframe(0).f_globals["__name__"]


def test_user_code_reading_its_frame_is_still_refused():
    """Only library code gets an interpreted frame's view; user code asking for frames is refused clearly."""
    with pytest.raises(Exception, match=r"sys\._getframe"):
        jitcore.jit(_frame_module)(torch.randn(2))


class _Meta(type):
    def __repr__(cls):
        return f"<class {cls.__name__} by _Meta>"


class _WithMeta(metaclass=_Meta):
    pass


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_repr_of_a_class_uses_its_metaclass_dunder(mode):
    """repr(cls) runs type(cls).__repr__: the guard on it is fetched through the metaclass (3.14's make_dataclass
    reprs typing.Any, whose metaclass writes __repr__; `cls.__repr__.__func__` was guarded and could not be fetched
    again: 'a fresh prologue rejected its own call')."""
    def f(x):
        return x + 1, repr(_WithMeta)

    jf = jitcore.jit(f, cache=mode)
    for _ in range(2):
        x = torch.ones(2)
        got, want = jf(x), f(x)
        assert got[1] == want[1]
        torch.testing.assert_close(got[0], want[0])
