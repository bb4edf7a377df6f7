"""Interpreter stage: provenance of values that enter the interpreted function from outside.

A provenance is a small frozen dataclass naming a root (an argument, a global, a closure cell, an imported
module, the function object itself) or a path from another provenance (attribute, item, dict view).
`str(p)` reads like Python (`args[0].layers[1].weight`); `p.load(roots)` fetches the value again from a
concrete call's `Roots(args, kwargs, fn)` (jitcore's prologue uses this to re-fetch inputs).
"""
from __future__ import annotations

import builtins
import enum
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Roots:
    """The roots of one concrete call: positional args, keyword args and the called object."""

    args: tuple
    kwargs: dict
    fn: Any


class Provenance:
    """Base class: where an external value came from."""

    __slots__ = ()

    def load(self, roots: Roots):  # pragma: no cover - overridden
        raise NotImplementedError

    def root(self) -> Provenance:
        """The root this path starts from."""
        parent = getattr(self, "parent", None)
        return self if parent is None else parent.root()


@dataclass(frozen=True)
class Arg(Provenance):
    index: int

    def __str__(self):
        return f"args[{self.index}]"

    def load(self, roots):
        return roots.args[self.index]


@dataclass(frozen=True)
class Kwarg(Provenance):
    name: str

    def __str__(self):
        return f"kwargs[{self.name!r}]"

    def load(self, roots):
        return roots.kwargs[self.name]


@dataclass(frozen=True)
class Fn(Provenance):
    """The called object itself (the function, or the nn.Module / callable object)."""

    def __str__(self):
        return "fn"

    def load(self, roots):
        return roots.fn


@dataclass(frozen=True)
class Global(Provenance):
    """`module.name` read by LOAD_GLOBAL (module 'builtins' for builtins). namespace: the globals dict itself when it
    is not a module's (code made by exec, e.g. a namedtuple's __new__); `space` tells such namespaces apart."""

    module: str
    name: str
    space: int = 0
    namespace: Any = field(default=None, compare=False, hash=False, repr=False)

    def __str__(self):
        if self.module == "builtins":
            return f"builtins.{self.name}"
        return f"globals()[{self.name!r}]"

    def load(self, roots):
        if self.module == "builtins":
            return builtins.__dict__[self.name]
        mod = sys.modules.get(self.module)
        if self.namespace is not None:
            namespace = self.namespace
        else:
            namespace = mod.__dict__ if mod is not None else getattr(roots.fn, "__globals__", {})
        if self.name in namespace:
            return namespace[self.name]
        return builtins.__dict__[self.name]


@dataclass(frozen=True)
class Module(Provenance):
    """A module returned by an import statement."""

    name: str

    def __str__(self):
        return f"sys.modules[{self.name!r}]"

    def load(self, roots):
        return sys.modules[self.name]


@dataclass(frozen=True)
class Closure(Provenance):
    """Cell `name` of the closure of a function created outside the interpreter (`parent` names it)."""

    parent: Provenance | None
    qualname: str
    name: str

    def __str__(self):
        owner = str(self.parent) if self.parent is not None else f"<{self.qualname}>"
        return f"{owner}.__closure__[{self.name!r}]"

    def load(self, roots):
        if self.parent is None:
            raise LookupError(f"the function {self.qualname} has no provenance; its closure cannot be re-fetched")
        fn = self.parent.load(roots)
        fn = getattr(fn, "__func__", fn)
        idx = fn.__code__.co_freevars.index(self.name)
        return fn.__closure__[idx].cell_contents


@dataclass(frozen=True)
class Attr(Provenance):
    parent: Provenance
    name: str

    def __str__(self):
        if self.name.isidentifier():
            return f"{self.parent}.{self.name}"
        return f"getattr({self.parent}, {self.name!r})"

    def load(self, roots):
        return getattr(self.parent.load(roots), self.name)


@dataclass(frozen=True)
class SliceKey:
    """A hashable stand-in for a slice key (slices are not hashable before 3.12)."""

    start: Any
    stop: Any
    step: Any

    def __repr__(self):
        parts = ["" if p is None else repr(p) for p in (self.start, self.stop)]
        text = ":".join(parts)
        return text if self.step is None else f"{text}:{self.step!r}"

    def to_slice(self) -> slice:
        return slice(self.start, self.stop, self.step)


class ObjectKey:
    """A dict key that is no constant (a dtype, a class, an enum member, an object whose class hashes in Python), held
    by identity: the key is looked up again when the value is fetched, hashed and compared as the dict does then."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is ObjectKey and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)

    def __repr__(self):
        t = type(self.obj)
        if t.__module__ in ("builtins", "torch") or isinstance(self.obj, enum.Enum):
            return repr(self.obj)
        return f"<{t.__qualname__} at {id(self.obj):#x}>"


@dataclass(frozen=True)
class Item(Provenance):
    parent: Provenance
    key: Any

    def __str__(self):
        return f"{self.parent}[{self.key!r}]"

    def load(self, roots):
        key = self.key.to_slice() if isinstance(self.key, SliceKey) else self.key
        if type(key) is ObjectKey:
            key = key.obj
        return self.parent.load(roots)[key]


@dataclass(frozen=True)
class StoredKey(Provenance):
    """A key object stored in an external dict or set (`key`: ObjectKey), as the program met it (iterating the
    container, or comparing it with a key looked up): its fields are read through this, so they are guarded; it is
    found again by identity (a key no longer in the container fails to fetch: a miss)."""

    parent: Provenance
    key: Any

    def __str__(self):
        return f"{self.parent}.<key {self.key!r}>"

    def load(self, roots):
        return stored_key(self.parent.load(roots), self.key.obj)


def stored_key(container, obj):
    """obj, if it is (by identity) a key of container; KeyError otherwise."""
    for k in container:
        if k is obj:
            return k
    raise KeyError(obj)


@dataclass(frozen=True)
class DictView(Provenance):
    """`parent.values()` / `.items()` / `.keys()` of an external dict."""

    parent: Provenance
    kind: str

    def __str__(self):
        return f"{self.parent}.{self.kind}()"

    def load(self, roots):
        return getattr(self.parent.load(roots), self.kind)()


@dataclass(frozen=True)
class Converted(Provenance):
    """`fn(parent)`: a value made from an external one on every call (`torch.from_numpy(arr)`, sharing its memory)."""

    parent: Provenance
    fn: Any

    def __str__(self):
        return f"{getattr(self.fn, '__name__', self.fn)}({self.parent})"

    def load(self, roots):
        return self.fn(self.parent.load(roots))


@dataclass(frozen=True)
class Call(Provenance):
    """`parent(*args)` (each arg a constant, or the Provenance of an object fetched again per call): what a weak
    reference from outside refers to now, a ContextVar's value (`var.get()`), an lru_cache function's answer."""

    parent: Provenance
    args: tuple = ()

    def __str__(self):
        return f"{self.parent}({', '.join(str(a) if isinstance(a, Provenance) else repr(a) for a in self.args)})"

    def load(self, roots):
        return self.parent.load(roots)(*[a.load(roots) if isinstance(a, Provenance) else a for a in self.args])


_CONST_TYPES = (int, str, bytes, float, bool, type(None))
NOT_CONST = type("NOT_CONST", (), {"__repr__": lambda self: "<not a constant>"})()


def constant_key(key, in_dict: bool = False):
    """`key` as a hashable constant usable in Item provenance, or NOT_CONST if it is not a constant. in_dict: a key
    found in a dict, where any other hashable key is held by identity (ObjectKey)."""
    t = type(key)
    if t in _CONST_TYPES:
        return key
    if in_dict and t is not slice and not (t is tuple and all(type(k) in _CONST_TYPES for k in key)):
        return ObjectKey(key) if type(key).__module__ != "jitcore.ir.proxies" else NOT_CONST
    if t is slice:
        if all(type(p) in (int, type(None)) for p in (key.start, key.stop, key.step)):
            return SliceKey(key.start, key.stop, key.step)
        return NOT_CONST
    if t is tuple and all(type(k) in _CONST_TYPES for k in key):
        return key
    return NOT_CONST
