"""Guards stage: how a value a trace baked in is compared on a later call. value_check(name, value) is the condition
of the "value" guard kind (jitcore/guards/kinds.py): same type and value, where `==` alone would accept another
value (1 == 1.0 == True, 0.0 == -0.0, NaN != NaN), and the contents of containers native code read (a set, a
numpy array, a deque/array/bytearray).
"""
from __future__ import annotations

import array
import collections
import math

import torch

from jitcore.guards import data_guards


def value_check(name: str, value):
    if value is None or isinstance(value, (bool, torch.dtype)):
        return f"{name} is not {value}"
    if data_guards.has_nan(value):  # (math.nan, a float argument that is NaN: `!=` would reject every call)
        return lambda p: (f"type({name}) is not {p.const(type(value))} or "
                          f"not {p.const(data_guards.same_value)}({name}, {p.value(value)})")
    if isinstance(value, torch.device):
        return lambda p: f"{name} != {p.value(value)}"
    if type(value) in (set, frozenset) and mixes_numbers(value):  # ({1} == {1.0}, {0.0} == {-0.0})
        return lambda p: (f"type({name}) is not {type(value).__name__} or "
                          f"not {p.const(same_scalars)}({name}, {p.const(value)})")
    if type(value) in (set, frozenset):
        return lambda p: f"type({name}) is not {type(value).__name__} or {name} != {p.const(value)}"
    if type(value) is Members:
        return lambda p: f"{p.const(value)}.differs({name})"
    if is_ndarray(value):  # (its contents when first read: the program read them natively)
        return lambda p: f"not {p.const(_same_array)}({name}, {p.const(value)})"
    if type(value) in COPIED_CONTAINERS:  # (a deque, array or bytearray: its contents when first read)
        return lambda p: f"not {p.const(_same_contents)}({name}, {p.const(value)})"
    t = type(value)
    if t.__module__ != "builtins":  # (numpy.float64, an int subclass: the type by reference, not by name)
        return lambda p: f"type({name}) is not {p.const(t)} or {name} != {p.value(value)}"
    if (t is float and value == 0) or (t is tuple and mixes_numbers(value)):  # (-0.0 == 0.0, (1,) == (1.0,))
        return lambda p: (f"type({name}) is not {t.__name__} or "
                          f"not {p.const(same_scalars)}({name}, {p.value(value)})")
    return lambda p: f"type({name}) is not {t.__name__} or {name} != {p.value(value)}"


def _typed(x) -> tuple:
    return type(x), x, math.copysign(1.0, x) if type(x) is float else 0


def mixes_numbers(items) -> bool:
    """Whether `==` of a collection like `items` can hold for other items: numbers of another type (1 == 1.0 ==
    True) or a zero of the other sign."""
    return any(type(x) in (int, float, bool, complex) for x in items)


def same_scalars(a, b) -> bool:
    """a == b with the same types and signs of zero item for item (as sets, for sets); b a float, a tuple, a set."""
    if type(b) is float:
        return type(a) is float and _typed(a) == _typed(b)
    if isinstance(b, (set, frozenset)):
        return {_typed(x) for x in a} == {_typed(x) for x in b}
    return len(a) == len(b) and all(_typed(x) == _typed(y) for x, y in zip(a, b))


class Members:
    """The objects a set from outside held when traced (not all of them constants: `key in s` of objects whose class
    hashes in Python): a call where it holds others, compared by identity, or is no longer such a set, is another
    call."""

    def __init__(self, items):
        self.type, self.items = type(items), tuple(items)  # (held: their ids stay theirs)
        self.ids = frozenset(map(id, self.items))

    def differs(self, s) -> bool:
        return type(s) is not self.type or len(s) != len(self.ids) or any(id(e) not in self.ids for e in s)

    def __repr__(self):
        return f"a {self.type.__name__} of the same {len(self.items)} objects"


def is_ndarray(value) -> bool:
    t = type(value)
    return t.__name__ == "ndarray" and t.__module__ == "numpy"


def _same_array(a, b) -> bool:
    """Whether numpy array a has b's type, dtype, shape and bytes (no numpy import: the arrays compare themselves)."""
    return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


COPIED_CONTAINERS = (collections.deque, array.array, bytearray)


def contents_copy(c):
    """A copy of a deque, array or bytearray from outside whose contents native code reads (`len(dq)`, `sum(a)`)."""
    t = type(c)
    return t(c, c.maxlen) if t is collections.deque else t(c.typecode, c) if t is array.array else t(c)


def _same_contents(a, b) -> bool:
    """Whether a has b's type, items (and a deque's maxlen, an array's typecode)."""
    return type(a) is type(b) and a == b and getattr(a, "maxlen", None) == getattr(b, "maxlen", None) and \
        getattr(a, "typecode", None) == getattr(b, "typecode", None)
