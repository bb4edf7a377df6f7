"""IR values: Python ranges over symbolic sizes (cache="symbolic values"). The interpreter's `range(n)` of a size gives
a SymbolicRange whose start, stop and step stay number proxies; torch.tensor of it records `prims.iota` of the range's
symbolic length (jitcore/ops/torch_creation.py), so one compile serves every n.
Anything else Python does with them (iterate, index, `in`, compare, hash, print) concretizes the range first: the
predicates that pin its bounds (`i0 == 5`) are recorded, as a builtin range of a size would have recorded them.
"""
from __future__ import annotations

import operator

import optree

from jitcore.ir import arith
from jitcore.ir.proxies import IntegerProxy, ir_op
from jitcore.ir.pytree import NAMESPACE


def is_symbolic_int(x) -> bool:
    """An int proxy with an expression over the inputs (a per-call value converted to a bound is refused natively)."""
    return type(x) is IntegerProxy and x.expr is not None


def range_length(start, stop, step):
    """len(range(start, stop, step)); with a symbolic bound, a recorded `max(0, ceil((stop - start) / step))` whose
    clamp is left out when the inputs' bounds show it is never negative. The sign of a symbolic step is a predicate."""
    if not any(isinstance(v, arith.SymbolicNumber) for v in (start, stop, step)):
        return len(range(start, stop, step))
    span, size = (stop - start, step) if step > 0 else (start - stop, -step)
    n = span if type(size) is int and size == 1 else (span + (size - 1)) // size
    if arith.implied(">=", n, 0):
        return n
    return ir_op("number_op")("max", 0, n)


class SymbolicRange:
    """range(start, stop, step) with symbolic bounds. `isinstance(r, range)` is True (its `__class__` says range, and
    the interpreter's `type(r)` answers range); the bounds are read as they are, `len(r)` (the interpreter's) and
    `bool(r)` are symbolic, everything else works on the concrete range after recording its predicates."""

    __slots__ = ("start", "step", "stop")

    def __init__(self, start, stop, step=1):
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "step", step)

    @property
    def __class__(self):
        return range

    @property
    def length(self):
        return range_length(self.start, self.stop, self.step)

    def parts(self) -> tuple:
        return self.start, self.stop, self.step

    def concrete(self) -> range:
        """This call's range, after recording the predicates that pin its bounds."""
        return range(*(operator.index(v) for v in self.parts()))

    def values(self) -> range:
        """This call's range, recording nothing (what a RangeList holds until something reads it)."""
        return range(*(arith.value_of(v) for v in self.parts()))

    def __setattr__(self, name, value):
        raise AttributeError(f"readonly attribute {name!r} of 'range' object")

    def __getattr__(self, name):
        raise AttributeError(f"'range' object has no attribute '{name}'")

    def __len__(self):
        return operator.index(self.length)  # native len() must give an int: the length's value, recorded

    def __bool__(self):
        return bool(self.length != 0)

    def __iter__(self):
        return iter(self.concrete())

    def __reversed__(self):
        return reversed(self.concrete())

    def __getitem__(self, key):
        return self.concrete()[key]

    def __contains__(self, item):
        return item in self.concrete()

    def index(self, value):
        return self.concrete().index(value)

    def count(self, value):
        return self.concrete().count(value)

    def __eq__(self, other):
        other = other.concrete() if type(other) is SymbolicRange else other
        return self.concrete().__eq__(other)

    def __ne__(self, other):
        other = other.concrete() if type(other) is SymbolicRange else other
        return self.concrete().__ne__(other)

    def __hash__(self):
        return hash(self.concrete())

    def __repr__(self):
        return repr(self.concrete())

    def __reduce__(self):  # copy, deepcopy, pickle: a builtin range
        return range, tuple(operator.index(v) for v in self.parts())


def _unflatten(_, parts):
    """A pass renaming proxies gets a SymbolicRange over the new names; the program, at run time, a builtin range."""
    return range(*parts) if all(type(v) is int for v in parts) else SymbolicRange(*parts)


optree.register_pytree_node(SymbolicRange, lambda r: (r.parts(), None, None), _unflatten, namespace=NAMESPACE)


def make_range(*args) -> SymbolicRange:
    """`range(*args)` (1 to 3 ints, one a symbolic size) as builtin range checks it."""
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if step == 0:  # (a symbolic step: the predicate that it is not zero)
        raise ValueError("range() arg 3 must not be zero")
    return SymbolicRange(start, stop, step)


# -- what the interpreter asks ----------------------------------------------------------------------------------------
def symbolic_len(obj):
    """len(obj) kept symbolic for a SymbolicRange, else None (the builtin answers)."""
    return obj.length if type(obj) is SymbolicRange else None


def stands_for(obj) -> type:
    """type(obj) as the interpreted program sees it: range for a SymbolicRange."""
    t = type(obj)
    return range if t is SymbolicRange else t
