"""Interpreter stage: Python's operator protocols for objects whose class writes the operator in Python.

`cfg + 1`, `cfg == other`, `-v`, `float(v)`, `lst[v]`, `str(cfg)`, `f"{cfg}"`, `cfg in [a, b]`: run natively, the
dunder's reads of the object (`self.v`) were invisible to the guards, so a later call with the object changed reused
the first answer. Here the protocol is followed step by step (reflected operands, subclass priority, NotImplemented,
`!=` from `==`, `str` from `__repr__`), the Python dunders interpreted and builtin slots called natively. Each entry
point returns NATIVE when no operand's class has a Python dunder for it: the caller then does what it did before.
"""
from __future__ import annotations

import enum
import operator
import types
import weakref

from jitcore.errors import UnsupportedError
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.provenance import Attr, ObjectKey, StoredKey

NATIVE = object()  # "no Python dunder involved": the caller runs the operation natively

_PLAIN = frozenset({list, tuple, dict, str, int, float, bool, complex, type(None), set, frozenset, range, bytes,
                    slice, types.ModuleType})


def python_dunder(rt, t, name):
    """The Python function defining `name` on a user or library class (not builtins', not jitcore's own), else None."""
    if t in _PLAIN or _jitcore_type(t):
        return None
    fn = rt.lookup(t, name)
    return fn if type(fn) is types.FunctionType else None


def _jitcore_type(t) -> bool:
    mod = getattr(t, "__module__", None)
    return isinstance(mod, str) and mod.startswith("jitcore")


def _slot(rt, t, name, *args):
    """Call t's `name` on args: interpreted when written in Python, natively otherwise; NotImplemented if absent."""
    fn = rt.lookup(t, name)
    if fn is NULL or fn is None:
        return NotImplemented
    if type(fn) is types.FunctionType and not _jitcore_type(t):
        return _call(rt, fn, name, args)
    if name == "__ne__" and fn is object.__ne__:  # object's != is the inverse of ==, which may be Python
        r = _slot(rt, t, "__eq__", *args)
        return r if r is NotImplemented else not _truth(rt, r)
    if t in _PLAIN:  # (a builtin sequence's concatenation raises where Python's protocol would try the other side)
        try:
            return getattr(t, name)(*args)
        except TypeError:
            return NotImplemented
    return getattr(t, name)(*args)


def _call(rt, fn, name, args):
    """fn(*args), a dunder of type(args[0]) found on its class, interpreted with a provenance: through an external
    object, `obj.name.__func__` (reported: guarded, as any method it calls), else through its external class (what its
    closure holds can be fetched again: the epilogue replays a write into it, reprlib's running set)."""
    if id(fn) not in rt.external:
        prov = rt.external.get(id(args[0]))
        if prov is not None and isinstance(args[0], type):  # a class's dunder is its metaclass's (`repr(typing.Any)`
            fn = rt.report(fn, Attr(Attr(prov, "__class__"), name))  # on 3.14): `cls.name` would be the class's own
        elif prov is not None:
            fn = rt.report(fn, Attr(Attr(prov, name), "__func__"))
        elif id(type(args[0])) in rt.external:
            rt.register(fn, Attr(rt.external[id(type(args[0]))], name))
    return rt.call(fn, args, {})


def _truth(rt, value) -> bool:
    fn = python_dunder(rt, type(value), "__bool__")
    return _call(rt, fn, "__bool__", (value,)) if fn is not None else bool(value)


def _involved(rt, names, *values) -> bool:
    return any(python_dunder(rt, type(v), n) is not None for v in values for n in names)


def _reflected(rt, a, b, name, rname, fail, comparison=False):
    """`a <op> b` by Python's rules: a.name(b), then b.rname(a) (first when b's class is a subclass overriding it;
    for arithmetic, not at all when both have one type)."""
    ta, tb = type(a), type(b)
    order = [(ta, name, a, b)]
    if tb is not ta or comparison:
        order.append((tb, rname, b, a))
    if tb is not ta and issubclass(tb, ta) and rt.lookup(tb, rname) is not rt.lookup(ta, rname):
        order.reverse()
    for t, n, x, y in order:
        r = _slot(rt, t, n, x, y)
        if r is not NotImplemented:
            return r
    return fail(ta, tb)


_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
            operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
            operator.lshift: "<<", operator.rshift: ">>", operator.and_: "&", operator.or_: "|", operator.xor: "^"}
_BINARY = {op: (f"__{op.__name__.strip('_')}__", f"__r{op.__name__.strip('_')}__") for op in _SYMBOLS}
_INPLACE = {getattr(operator, f"i{op.__name__.strip('_')}"): op for op in _SYMBOLS}


def binary(rt, op, a, b):
    """`a <op> b` (op from the operator module, in-place forms included), or NATIVE."""
    base = _INPLACE.get(op, op)
    names = _BINARY.get(base)
    if names is None:
        return NATIVE
    iname = f"__i{names[0][2:]}" if base is not op else None
    if not _involved(rt, names + ((iname,) if iname else ()), a, b):
        return NATIVE
    if iname is not None:
        r = _slot(rt, type(a), iname, a, b)
        if r is not NotImplemented:
            return r

    def fail(ta, tb):
        raise TypeError(f"unsupported operand type(s) for {_SYMBOLS[base]}{'=' if iname else ''}: "
                        f"'{ta.__name__}' and '{tb.__name__}'")

    return _reflected(rt, a, b, names[0], names[1], fail)


_COMPARE = {operator.lt: ("__lt__", "__gt__", "<"), operator.le: ("__le__", "__ge__", "<="),
            operator.eq: ("__eq__", "__eq__", "=="), operator.ne: ("__ne__", "__ne__", "!="),
            operator.gt: ("__gt__", "__lt__", ">"), operator.ge: ("__ge__", "__le__", ">=")}


def compare(rt, op, a, b):
    """`a <op> b` for a comparison operator, or NATIVE."""
    name, rname, sym = _COMPARE[op]
    if not _involved(rt, (name, rname, "__eq__") if sym == "!=" else (name, rname), a, b):
        return NATIVE

    def fail(ta, tb):
        if sym in ("==", "!="):
            return (a is b) == (sym == "==")
        raise TypeError(f"'{sym}' not supported between instances of '{ta.__name__}' and '{tb.__name__}'")

    return _reflected(rt, a, b, name, rname, fail, comparison=True)


def contains_in_sequence(rt, item, seq):
    """`item in seq` for a list or tuple holding (or searched for) objects with a Python __eq__, or NATIVE."""
    if type(seq) not in (list, tuple) or not _involved(rt, ("__eq__",), item, *seq):
        return NATIVE
    for element in seq:
        if element is item or _truth(rt, compare(rt, operator.eq, element, item)):
            return True
    return False


def unary(rt, name, a):
    """`-a`, `+a`, `~a`, `abs(a)` (name: __neg__, __pos__, __invert__, __abs__), or NATIVE."""
    fn = python_dunder(rt, type(a), name)
    return NATIVE if fn is None else _call(rt, fn, name, (a,))


def to_index(rt, a):
    """operator.index(a) through a Python __index__ (a list subscript, `range(v)`), or NATIVE."""
    fn = python_dunder(rt, type(a), "__index__")
    if fn is None:
        return NATIVE
    r = _call(rt, fn, "__index__", (a,))
    if not isinstance(r, int):
        raise TypeError(f"__index__ returned non-int (type {type(r).__name__})")
    return r


def to_number(rt, kind, a):
    """float(a) or int(a) through a Python __float__ / __int__ (else __index__), or NATIVE."""
    for name in ("__float__", "__index__") if kind is float else ("__int__", "__index__"):
        fn = python_dunder(rt, type(a), name)
        if fn is not None:
            r = _call(rt, fn, name, (a,))
            if not isinstance(r, (int, float)):
                raise TypeError(f"{type(a).__name__}.{name} returned non-{kind.__name__} (type {type(r).__name__})")
            return kind(r)
        if rt.lookup(type(a), name) is not NULL:
            return NATIVE
    return NATIVE


def to_text(rt, kind, a, spec=""):
    """str(a), repr(a) or format(a, spec) through Python __str__ / __repr__ / __format__, or NATIVE."""
    t = type(a)
    if t in _PLAIN:
        return NATIVE
    if kind is format:
        fn = python_dunder(rt, t, "__format__")
        if fn is not None:
            return _text(_call(rt, fn, "__format__", (a, spec)), "__format__")
        if rt.lookup(t, "__format__") is not object.__format__ or spec:
            return NATIVE
        kind = str  # object.__format__(a, "") is str(a)
    if kind is str:
        fn = python_dunder(rt, t, "__str__")
        if fn is not None:
            return _text(_call(rt, fn, "__str__", (a,)), "__str__")
        if rt.lookup(t, "__str__") is not object.__str__:
            return NATIVE
    fn = python_dunder(rt, t, "__repr__")  # (object.__str__ is repr)
    return NATIVE if fn is None else _text(_call(rt, fn, "__repr__", (a,)), "__repr__")


def _text(r, name):
    if not isinstance(r, str):
        raise TypeError(f"{name} returned non-string (type {type(r).__name__})")
    return r


def hashed_in_python(rt, key) -> bool:
    """Whether a dict or set lookup of `key` runs Python code: its class writes __hash__ or __eq__ in Python (enum
    members aside: a member's hash is its name's, fixed); for a weak reference (a WeakKeyDictionary's lookup), its
    referent's class does."""
    t = type(key)
    if t in _PLAIN or isinstance(key, enum.Enum):
        return False
    if isinstance(key, weakref.ref):
        key = key()
        return key is not None and hashed_in_python(rt, key)
    return python_dunder(rt, t, "__hash__") is not None or python_dunder(rt, t, "__eq__") is not None


def hash_of(rt, v) -> int:
    """hash(v), interpreting a __hash__ written in Python (what it reads is then guarded)."""
    if isinstance(v, weakref.ref) and v() is not None:  # (a live reference hashes as its referent)
        v = v()
    fn = python_dunder(rt, type(v), "__hash__")
    if fn is None:
        return hash(v)
    r = _call(rt, fn, "__hash__", (v,))
    if not isinstance(r, int):
        raise TypeError("__hash__ method should return an integer")
    return -2 if r == -1 else r if -(1 << 63) <= r < (1 << 63) else hash(r)


def find_key(rt, container, key):
    """The key stored in a dict or set that a lookup of `key` finds (NULL: none), or NATIVE when no Python __hash__ or
    __eq__ takes part. Python's lookup, interpreted: key's hash, then among the stored keys with that hash the one
    that is key or equals it (weak references: their referents compared). For a container from outside, the stored
    keys' hashes are its own (native: a key changed after it was put in, whose hash is no longer the one stored, is
    refused) and the keys compared are read through it (StoredKey: what their __eq__ reads is guarded); for one the
    call built they are interpreted (computed from what the call read)."""
    if not hashed_in_python(rt, key):
        return NATIVE
    h = hash_of(rt, key)
    prov = rt.external.get(id(container))
    if prov is not None:
        _refuse_moved_keys(rt, container)
    for k in list(container):
        if (hash_of(rt, k) if prov is None else hash(k)) != h:
            continue
        if k is key:
            return k
        seen = k if prov is None else rt.report(k, StoredKey(prov, ObjectKey(k)))
        if _truth(rt, _equal(rt, *_referents(rt, seen, key))):
            return k
    return NULL


def _referents(rt, a, b) -> tuple:
    """(a, b) as == compares them: two live weak references compare their referents."""
    if isinstance(a, weakref.ref) and isinstance(b, weakref.ref):
        ra, rb = rt.call(a, (), {}), b()
        if ra is not None and rb is not None:
            return ra, rb
    return a, b


def _refuse_moved_keys(rt, container):
    """A key of an outside dict or set whose Python __hash__ now gives another value than when it was put in (a field
    it hashes changed): Python's lookups then depend on the hash it was stored with, which cannot be read."""
    is_dict = isinstance(container, dict)
    for k, v in (container.items() if is_dict else ((k, None) for k in container)):
        if hashed_in_python(rt, k) and not isinstance(k, weakref.ref) and \
                (k not in container or (is_dict and container.get(k, NULL) is not v)):  # (found: another equal key's)
            raise UnsupportedError(
                "changed dict key", f"a key of a {type(container).__name__} from outside ({type(k).__qualname__}) "
                "was changed after it was put in: its hash is no longer the one the container stored it under, and "
                "lookups in it depend on that", hint="put the key in again after changing it (or keep keys unchanged)")


def stored_key(rt, container, key):
    """The key a native operation on a dict or set should use so that it finds what find_key found (the stored key
    itself, which it finds by identity); `key` when nothing was found or no Python code takes part."""
    found = find_key(rt, container, key)
    return key if found is NATIVE or found is NULL else found


def _equal(rt, a, b):
    r = compare(rt, operator.eq, a, b)
    return a == b if r is NATIVE else r
