"""IR values: Python ranges over symbolic sizes (cache="symbolic values"). The interpreter's `range(n)` of a size gives
a SymbolicRange whose start, stop and step stay number proxies, and `list()` of it a RangeList; torch.tensor of either
records `prims.iota` of the range's symbolic length (jitcore/ops/torch_creation.py), so one compile serves every n.
Anything else Python does with them (iterate, index, `in`, compare, hash, print) concretizes the range first: the
predicates that pin its bounds (`i0 == 5`) are recorded, as a builtin range of a size would have recorded them.
"""
from __future__ import annotations

import operator
import weakref

import optree
import torch

from jitcore.ir import arith
from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import IntegerProxy, SymbolicSize, TensorProxy, ir_op
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


# -- list(range(n)) ---------------------------------------------------------------------------------------------------
_LIVE = "range_lists"  # trace.extra key: the RangeLists of the trace being recorded that nothing has read yet


class RangeList(list):
    """`list(r)` of a SymbolicRange: a real list holding this call's values, which also remembers its range while
    nothing has read it (`source`), so torch.tensor(list(range(n))) records the symbolic range. Every read or write of
    its contents pins it first (records the range's predicates, forgets the range); the frontend pins one handed to
    native code or to an op that does not take ranges, and every one still alive when the interpretation ends (it may
    escape). `type(l)` in interpreted code and `l.__class__` answer list."""

    __slots__ = ("__weakref__", "source")

    @classmethod
    def of(cls, source: SymbolicRange) -> RangeList:
        """list(source), remembering source (registered with the trace being recorded, which pins it at its end)."""
        out = list.__new__(cls)
        list.extend(out, source.values())
        out.source = source
        get_tracectx().extra.setdefault(_LIVE, weakref.WeakValueDictionary())[id(out)] = out
        return out

    @property
    def __class__(self):
        return list

    def pin(self):
        """Record the predicates of the range this list holds, and forget the range: its contents are now constants."""
        source = getattr(self, "source", None)
        if source is None:
            return
        self.source = None
        trace = get_tracectx()
        live = trace.extra.get(_LIVE) if trace is not None else None
        if live is not None:
            live.pop(id(self), None)
        source.concrete()

    def __bool__(self):
        source = getattr(self, "source", None)
        return bool(source) if source is not None else list.__len__(self) > 0

    def __radd__(self, other):  # `[1] + l`: list concatenation then reads l's items directly
        self.pin()
        return NotImplemented

    def __reduce_ex__(self, protocol):  # copy, deepcopy, pickle: a plain list
        self.pin()
        return list, (list.copy(self),)


def _pinning(name: str):
    base = getattr(list, name)

    def method(self, *args, **kwargs):
        self.pin()
        return base(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


for _name in ("__init__", "__getitem__", "__setitem__", "__delitem__", "__iter__", "__reversed__", "__contains__",
              "__len__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__iadd__", "__mul__",
              "__rmul__", "__imul__", "__repr__", "__sizeof__", "append", "extend", "insert", "pop", "remove", "clear",
              "sort", "reverse", "index", "count", "copy"):
    setattr(RangeList, _name, _pinning(_name))
del _name


def _items(lst: RangeList):
    lst.pin()  # (flattening reads every item)
    return tuple(list.__iter__(lst)), None, None


# flattened (an output, an argument) it is the list of its values, and a plain list when rebuilt
optree.register_pytree_node(RangeList, _items, lambda _, items: list(items), namespace=NAMESPACE)


# -- what the interpreter and the frontend ask ------------------------------------------------------------------------
def symbolic_len(obj):
    """len(obj) kept symbolic for a SymbolicRange, a RangeList nothing has read and a tensor whose first size is
    symbolic (`len(x)` is `x.shape[0]`, no predicate), else None (the builtin answers)."""
    t = type(obj)
    if isinstance(obj, TensorProxy):
        first = obj._shape[0] if obj._shape else None
        return first if isinstance(first, IntegerProxy) else None
    if t is SymbolicRange:
        return obj.length
    source = getattr(obj, "source", None) if t is RangeList else None
    return None if source is None else source.length


def stands_for(obj) -> type:
    """type(obj) as the interpreted program sees it: range and list for the stand-ins of this module, torch.Size for
    a shape with symbolic entries."""
    t = type(obj)
    return range if t is SymbolicRange else list if t is RangeList else torch.Size if t is SymbolicSize else t


def unread(trace) -> bool:
    """Whether the trace being recorded has RangeLists nothing has read yet (they must be pinned before native code or
    an op that does not take ranges sees them)."""
    return bool(trace.extra.get(_LIVE))


def pin_within(tree, depth: int = 0):
    """Pin every RangeList inside lists, tuples and dicts (the arguments of a native call or of an op)."""
    t = type(tree)
    if t is RangeList:
        tree.pin()
    elif depth < 16 and (t is list or t is tuple):
        for x in tree:
            pin_within(x, depth + 1)
    elif depth < 16 and t is dict:
        for x in tree.values():
            pin_within(x, depth + 1)


def pin_live(trace):
    """Pin the RangeLists of `trace` still alive: when the interpretation ends, what is alive may escape (an output, an
    attribute set on a module) and be read later, when no predicate can be recorded any more."""
    live = trace.extra.pop(_LIVE, None)
    for lst in list(live.values()) if live is not None else ():
        lst.pin()


def range_data(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The data argument of an op that takes ranges (torch.tensor(list(range(n)))): a RangeList nothing has read is
    read as its range, so the op records it symbolically."""
    if args and type(args[0]) is RangeList and args[0].source is not None:
        return (args[0].source, *args[1:]), kwargs
    data = kwargs.get("data")
    if type(data) is RangeList and data.source is not None:
        return args, {**kwargs, "data": data.source}
    return args, kwargs
