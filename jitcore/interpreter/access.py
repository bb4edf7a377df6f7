"""Interpreter stage: attribute, item and iteration access with provenance and side effects.

Loads from external objects report the loaded value to the context (Attr/Item provenance); writes to
external objects go through the side-effect log. Python-level __getitem__/__setitem__/__iter__/__setattr__
and property getters of user classes are interpreted; everything else runs natively.
"""
from __future__ import annotations

import enum
import operator
import sys
import types
import weakref

from jitcore.errors import UnsupportedError
from jitcore.interpreter import dunders
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.provenance import NOT_CONST, Attr, DictView, Item, ObjectKey, StoredKey, constant_key
from jitcore.interpreter.side_effects import MISSING, NOT_WRITTEN, SideEffect
from jitcore.ir.proxies import SHADOWED_TENSOR_ATTRS, TENSOR_SETTERS, TensorProxy

_FunctionType = types.FunctionType
_BOUND_TYPES = (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)
_PLAIN = frozenset({list, tuple, dict, str, int, float, bool, type(None), set, frozenset, range, bytes,
                    types.ModuleType})


def _is_bound_to(value, obj) -> bool:
    """A method bound to `obj` (fully determined by obj and its class): not reported as a separate value."""
    return type(value) in _BOUND_TYPES and getattr(value, "__self__", None) is obj and type(obj) is not types.ModuleType


def get_attr(rt, obj, name):
    """getattr(obj, name), interpreting a property getter written in Python. An attribute an external object lacks
    is reported (the program depends on its absence: `hasattr(self, "cache")`, `getattr(cfg, "scale", 1.0)`); one
    a tensor proxy does not model is asked of the context (a Python attribute set on the tensor it stands for)."""
    t = type(obj)
    if t is TensorProxy and name in SHADOWED_TENSOR_ATTRS:
        return SHADOWED_TENSOR_ATTRS[name](obj)
    if t not in _PLAIN and not isinstance(obj, type):
        d = rt.lookup(t, name)
        if type(d) is property and type(d.fget) is _FunctionType and t.__getattribute__ is object.__getattribute__ \
                and not (d.fget.__module__ or "").startswith("jitcore."):
            # (3.14: subclasses of list, dict, tuple, int... come here too, their base no longer having its own
            # __getattribute__; a property of jitcore's own objects, RangeList.__class__, is read natively as before)
            return rt.call(d.fget, (obj,), {})
    if rt.lazy_annotations and t is _FunctionType and name == "__annotations__" and id(obj) in rt.lazy_annotations:
        _annotate(rt, obj)
    try:
        return getattr(obj, name)
    except AttributeError:
        if t is TensorProxy:
            return rt.proxy_attr(obj, name)
        prov = rt.external.get(id(obj))
        if prov is not None and rt.effects.attribute_before(obj, name) in (NOT_WRITTEN, MISSING):
            rt.on_attr_presence(Attr(prov, name), False)  # (absent before the call, not deleted by it)
        raise


def _annotate(rt, fn):
    """3.14 (PEP 649): the annotations of a function made in this interpretation, computed by its __annotate__ run
    interpreted on their first read (the globals they name are reported, as when 3.11-3.13 evaluate them at the def),
    not natively by the function's `__annotations__` getter."""
    annotate = rt.lazy_annotations.pop(id(fn))
    if fn.__annotate__ is annotate:
        fn.__annotations__ = rt.call(annotate, (1,), {})  # (1: annotationlib.Format.VALUE)


def has_attr(rt, obj, name) -> bool:
    """hasattr(obj, name); for an external object, the answer is reported (a later call where it differs is another
    call), unless the call itself set the attribute."""
    try:
        get_attr(rt, obj, name)  # (a miss is reported there)
    except AttributeError:
        return False
    prov = rt.external.get(id(obj))
    if prov is not None and rt.effects.attribute_before(obj, name) is NOT_WRITTEN:
        rt.on_attr_presence(Attr(prov, name), True)
    return True


_python_dunder = dunders.python_dunder


def length(rt, obj):
    """len(obj), interpreting a __len__ written in Python: what it reads (`self._size` of an nn.ParameterList,
    `len(self._modules)`) is read by the program, so guarded."""
    fn = _python_dunder(rt, type(obj), "__len__")
    if fn is not None:
        n = rt.call(fn, (obj,), {})
        if type(n) is int and n >= 0:
            return n
    return len(obj)  # (natively: its own error for a bad result)


def truth(rt, value) -> bool:
    """bool(value) as a branch sees it, interpreting a __bool__ (or, lacking one, a __len__) written in Python."""
    t = type(value)
    if t is bool:
        return value
    fn = _python_dunder(rt, t, "__bool__")
    if fn is not None:
        r = rt.call(fn, (value,), {})
        if type(r) is bool:
            return r
    elif t not in _PLAIN and rt.lookup(t, "__bool__") is NULL and _python_dunder(rt, t, "__len__") is not None:
        return length(rt, value) != 0
    return bool(value)


def contains(rt, item, container) -> bool:
    """`item in container`, interpreting a __contains__ written in Python (`"a" in module_dict`), and the __eq__ of
    objects searched in a list or tuple."""
    t = type(container)
    fn = _python_dunder(rt, t, "__contains__")
    if fn is not None:
        return truth(rt, rt.call(fn, (container, item), {}))
    if t not in _PLAIN and rt.lookup(t, "__contains__") is NULL and (
            _python_dunder(rt, t, "__iter__") is not None or _python_dunder(rt, t, "__getitem__") is not None):
        return any(e is item or truth(rt, _equal(rt, e, item)) for e in get_iter(rt, container))  # (Python's fallback)
    if isinstance(container, (dict, set, frozenset, _DictKeys)):  # (a key whose class hashes or compares in Python)
        found = dunders.find_key(rt, container.mapping if type(container) is _DictKeys else container, item)
        if found is not dunders.NATIVE:
            return found is not NULL
    r = dunders.contains_in_sequence(rt, item, container)
    return item in container if r is dunders.NATIVE else r


_DictKeys = type({}.keys())


def _equal(rt, a, b):
    r = dunders.compare(rt, operator.eq, a, b)
    return a == b if r is dunders.NATIVE else r


def load_attr(rt, obj, name):
    """`obj.name` as LOAD_ATTR sees it, reporting the value if `obj` is external."""
    value = get_attr(rt, obj, name)
    prov = rt.external.get(id(obj))
    if prov is not None and not _is_bound_to(value, obj):
        before = rt.effects.attribute_before(obj, name)
        if before is NOT_WRITTEN or before is value:  # else the call wrote it: the program's own value
            value = rt.report(value, Attr(prov, name))
    elif prov is not None and type(value) is types.MethodType:
        report_method(rt, value, prov, name)
    return value


def report_method(rt, method, prov, name):
    """A Python method found through an external object (`self.act`, `helper.forward`): its function is reported as
    `obj.name.__func__` (so a later call where the instance shadows it, `m.forward = wrapper`, or its class's
    function was replaced, is another call); returns that function."""
    func = method.__func__
    if type(func) is not _FunctionType or rt.effects.attribute_before(method.__self__, name) is not NOT_WRITTEN:
        rt.register(func, Attr(Attr(prov, name), "__func__"))
        return func
    return rt.report(func, Attr(Attr(prov, name), "__func__"))


def store_attr(rt, obj, name, value):
    t = type(obj)
    if isinstance(obj, TensorProxy):
        if name in TENSOR_SETTERS:  # `z.real = v`: a write into the view
            TENSOR_SETTERS[name](obj, value)
            return
        _refuse_tensor_setattr(name)
    if t not in _PLAIN:
        setter = rt.lookup(t, "__setattr__")
        if type(setter) is _FunctionType:
            rt.call(setter, (obj, name, value), {})
            return
    prov = rt.external.get(id(obj))
    if prov is None:
        setattr(obj, name, value)
        return
    rt.effects.snapshot_attrs(obj, name)
    setattr(obj, name, value)
    rt.effects.record(SideEffect("setattr", prov, obj, name, value))


def _refuse_tensor_setattr(name):
    hints = {"data": "write the values in place instead (`p.data.copy_(new)`, or `p.copy_(new)` under "
                     "torch.no_grad()), or swap the tensor outside the jitted function",
             "grad": "set .grad outside the jitted function (or return the value and assign it there)",
             "requires_grad": "call requires_grad_() outside the jitted function"}
    raise UnsupportedError("tensor attribute assignment", f"assigning `.{name}` of a tensor inside a jitted "
                           f"function (the traced program computes values; it cannot rebind a tensor's "
                           f"attributes)", hint=hints.get(name, "keep the value in a variable or a dict instead"))


def delete_attr(rt, obj, name):
    t = type(obj)
    if t not in _PLAIN:
        deleter = rt.lookup(t, "__delattr__")
        if type(deleter) is _FunctionType:
            rt.call(deleter, (obj, name), {})
            return
    prov = rt.external.get(id(obj))
    if prov is None:
        delattr(obj, name)
        return
    rt.effects.snapshot_attrs(obj, name)
    delattr(obj, name)
    rt.effects.record(SideEffect("delattr", prov, obj, name))


def get_item(rt, container, key):
    """`container[key]`, interpreting a Python-level __getitem__; reports items of external containers."""
    t = type(container)
    if t not in _PLAIN and not isinstance(container, type):
        gi = rt.lookup(t, "__getitem__")
        if type(gi) is _FunctionType:
            return rt.call(gi, (container, key), {})
    elif (t is list or t is tuple) and type(key) not in (int, slice):
        index = dunders.to_index(rt, key)  # (`layers[v]` with a Python __index__)
        key = key if index is dunders.NATIVE else index
    if isinstance(container, dict):  # (`d[key]` of a key whose class hashes or compares in Python: interpreted)
        key = dunders.stored_key(rt, container, key)
    return report_item(rt, container, key, container[key])


def report_item(rt, container, key, value):
    """value, read at `key` of container: reported with the position it held when the call began. In a container
    the call wrote into, that is where the snapshot holds the same object (every such position, so values equal by
    identity at several are all guarded); a value that was not there is the program's own (or reported already)."""
    prov = rt.external.get(id(container))
    if prov is None:
        return value
    before = rt.effects.contents_before(container)
    in_dict = isinstance(container, dict)
    if before is None:
        k = constant_key(key, in_dict)
        return value if k is NOT_CONST else rt.report(value, Item(prov, k))
    places = before.items() if isinstance(before, dict) else enumerate(before)
    first = value
    for k, v in list(places):
        k = constant_key(k, in_dict)
        if v is value and k is not NOT_CONST:
            reported = rt.report(value, Item(prov, k))
            first = reported if first is value else first
    return first


def _write_item(rt, kind, container, key, value=NULL):
    dunder = "__setitem__" if kind == "setitem" else "__delitem__"
    t = type(container)
    if t not in _PLAIN:
        fn = rt.lookup(t, dunder)
        if type(fn) is _FunctionType:
            rt.call(fn, (container, key) if value is NULL else (container, key, value), {})
            return
    if isinstance(container, dict):
        key = dunders.stored_key(rt, container, key)
        if type(key) is str and _is_module_globals(container):  # `globals()["G"] = v`: as `global G; G = v`
            _write_global(rt, kind, container, key, value)
            return
    prov = rt.external.get(id(container))
    if prov is not None and not _is_tensor(container):
        rt.effects.snapshot_container(container)
        if type(key) is slice and value is not NULL:  # `out[1:] = feats`: feats' contents now, not as left later
            value = _copy_contents(value)
    if value is NULL:
        del container[key]
    else:
        container[key] = value
    if prov is not None and not _is_tensor(container):
        rt.effects.record(SideEffect(kind, prov, container, key, None if value is NULL else value))


def _is_module_globals(d: dict) -> bool:
    name = d.get("__name__")
    mod = sys.modules.get(name) if type(name) is str else None
    return mod is not None and getattr(mod, "__dict__", None) is d


def _write_global(rt, kind, g: dict, name: str, value):
    """A write into a module's globals dict by key: recorded as STORE_GLOBAL / DELETE_GLOBAL record theirs (the
    epilogue sets it after the call; guards on the name read before it see the value the call started with)."""
    if value is NULL and name not in g:
        raise KeyError(name)
    rt.effects.snapshot_ns_key(g, name)
    if value is NULL:
        del g[name]
        rt.effects.record(SideEffect("delglobal", rt.global_prov(g, name, False), g, name))
    else:
        g[name] = value
        rt.effects.record(SideEffect("setglobal", rt.global_prov(g, name, False), g, name, value))


def set_item(rt, container, key, value):
    _write_item(rt, "setitem", container, key, value)


def del_item(rt, container, key):
    _write_item(rt, "delitem", container, key)


def _is_tensor(obj) -> bool:
    """Real tensors: writing their data is an op (jitcore's concern), not an object side effect."""
    t = type(obj)
    return getattr(t, "__module__", "").startswith("torch") and hasattr(obj, "data_ptr")


class ExternalIter:
    """Iterates an external list/tuple (or dict view), reporting each item with Item provenance."""

    __slots__ = ("i", "kind", "prov", "rt", "seq")

    def __init__(self, rt, seq, prov, kind="seq"):
        self.rt, self.seq, self.prov, self.i, self.kind = rt, seq, prov, 0, kind

    def __iter__(self):
        return self

    def __next__(self):
        if self.kind == "seq":
            seq, i = self.seq, self.i
            if i >= len(seq):
                raise StopIteration
            self.i = i + 1
            return report_item(self.rt, seq, i, seq[i])
        k, v = next(self.seq)
        k2 = constant_key(k, True)
        if k2 is not NOT_CONST:
            v = self.rt.report(v, Item(self.prov, k2))
        if self.kind == "values":
            return v
        return (self.rt.report(k, StoredKey(self.prov, k2)) if _object_key(k) else k), v


def get_iter(rt, obj):
    """iter(obj) as GET_ITER does it, with reporting for external sequences and interpreted __iter__."""
    t = type(obj)
    if id(obj) in rt.external:
        if isinstance(obj, (list, tuple)):
            return ExternalIter(rt, obj, rt.external[id(obj)])
        view = rt.views.get(id(obj))
        if view is not None and view[1] in ("values", "items"):
            return ExternalIter(rt, iter(view[0].items()), view[2], view[1])
        if t is dict or t is set or t is frozenset or (view is not None and view[1] == "keys"):
            return _stored_keys(rt, obj if view is None else view[0], rt.external[id(obj)] if view is None else view[2])
    if t not in _PLAIN:
        fn = rt.lookup(t, "__iter__")
        if type(fn) is _FunctionType:
            it = rt.call(fn, (obj,), {})
            if not hasattr(type(it), "__next__"):
                raise TypeError(f"iter() returned non-iterator of type '{type(it).__name__}'")
            return it
        if fn is NULL and _python_dunder(rt, t, "__getitem__") is not None:
            return _sequence_items(rt, obj)
    return iter(obj)


def _stored_keys(rt, container, prov):
    """The keys of an external dict or set as iteration gives them; a key that is an object of a user class (its
    fields can change) is read through the container (StoredKey), so what the program reads of it is guarded."""
    for k in container:
        yield rt.report(k, StoredKey(prov, ObjectKey(k))) if _object_key(k) else k


def _object_key(k) -> bool:
    """A key whose fields can change (an object of a user class), or a weak reference (a WeakKeyDictionary's key:
    what it refers to is read through it)."""
    return isinstance(k, weakref.ref) or (type(k).__module__ != "builtins" and hasattr(k, "__dict__") and
                                          not isinstance(k, (type, types.FunctionType, types.ModuleType, enum.Enum)))


def _sequence_items(rt, obj):
    """Python's sequence protocol for a class with a Python __getitem__ and no __iter__: obj[0], obj[1], ... until
    IndexError, each read interpreted (natively, what __getitem__ read was not guarded)."""
    i = 0
    while True:
        try:
            v = get_item(rt, obj, i)
        except (IndexError, StopIteration):
            return
        yield v
        i += 1


def consumed(rt, a, mapping: bool = False):
    """What native code iterating `a` should get: an iterator that interprets a Python __iter__ (or the older
    __getitem__ protocol) and reports an external list's or tuple's items, so what they read is guarded; a plain
    dict of a user mapping's items when the consumer takes mappings (dict(o), d.update(o): keys() and o[k]); else a."""
    t = type(a)
    if t is list or t is tuple:
        return get_iter(rt, a) if id(a) in rt.external else a
    if t in _PLAIN or dunders._jitcore_type(t) or isinstance(a, type):
        return a
    if mapping and rt.lookup(t, "keys") is not NULL and dunders.python_dunder(rt, t, "__getitem__") is not None:
        keys = rt.call(load_attr(rt, a, "keys"), (), {})
        return {k: get_item(rt, a, k) for k in get_iter(rt, keys)}
    it = rt.lookup(t, "__iter__")
    if type(it) is _FunctionType or (it is NULL and dunders.python_dunder(rt, t, "__getitem__") is not None):
        return get_iter(rt, a)
    return a


# -- methods of builtin containers, called on external containers ------------------------------------------------
def _mutator(rt, fn, args, kwargs):
    obj = args[0]
    if isinstance(obj, dict) and _is_module_globals(obj):
        return _globals_mutator(rt, fn, obj, args[1:], kwargs)
    rt.effects.snapshot_container(obj)
    rest = _contents_now(rt, fn.__name__, _keyed(rt, fn, obj, args[1:]))
    result = fn(obj, *rest, **kwargs)
    if fn.__name__ in ("pop", "setdefault"):  # an item the container held (it is snapshotted: the key is not used)
        result = report_item(rt, obj, None, result)
    elif fn.__name__ == "popitem" and type(result) is tuple:
        result = (result[0], report_item(rt, obj, None, result[1]))
    rt.effects.record(SideEffect("call", rt.external[id(obj)], obj, fn.__name__, None, rest, kwargs))
    return result


def _globals_mutator(rt, fn, g: dict, rest, kwargs):
    """A dict method writing a module's globals (`globals().__setitem__("G", v)`, `globals().update(G=v)`): each
    key written as STORE_GLOBAL writes it; the other mutators are refused."""
    name = fn.__name__
    if name in ("__setitem__", "__delitem__") and not kwargs and len(rest) == (2 if name == "__setitem__" else 1) \
            and type(rest[0]) is str:
        _write_global(rt, "setitem" if name == "__setitem__" else "delitem", g, rest[0],
                      rest[1] if name == "__setitem__" else NULL)
        return None
    if name == "update" and len(rest) <= 1:
        items = dict(consumed(rt, rest[0], True)) if rest else {}
        items.update(kwargs)
        if all(type(k) is str for k in items):
            for k, v in items.items():
                _write_global(rt, "setitem", g, k, v)
            return None
    raise UnsupportedError("globals write", f"globals().{name}(...) inside a jitted function: jitcore follows writes "
                           "of module globals by key (`globals()[name] = v`, `global name`), not this method",
                           hint="assign the global with `global name; name = value` or `globals()[name] = value`")


_mutator.writes_globals = True  # (the run loop hands it calls on module globals dicts too: jitcore/interpreter/run.py)


# mutators that read the contents of their arguments (`out.extend(feats)`): the replay must see those contents as they
# were at the call, not the container as the function left it (`feats.append(z)` afterwards)
_READS_CONTENTS = frozenset({"extend", "extendleft", "__iadd__", "update", "__ior__", "difference_update",
                             "intersection_update", "symmetric_difference_update", "__iand__", "__isub__", "__ixor__"})


def _contents_now(rt, name: str, rest: tuple) -> tuple:
    if name in _READS_CONTENTS:
        return tuple(_copy_contents(consumed(rt, a, name == "update")) for a in rest)
    if name == "__setitem__" and len(rest) == 2 and type(rest[0]) is slice:
        return rest[0], _copy_contents(rest[1])
    return tuple(rest)


def _copy_contents(a):
    """A copy of iterable a's contents, of a kind the mutators accept where a was accepted (iterators consumed once)."""
    if isinstance(a, (set, frozenset, dict)):
        return type(a)(a) if type(a) in (set, frozenset, dict) else (dict(a) if isinstance(a, dict) else set(a))
    if isinstance(a, (str, bytes, bytearray, range)):
        return a
    return list(a)


# methods of dicts and sets whose first argument is a key looked up (by its hash and ==)
KEYED_METHODS = frozenset({"get", "pop", "setdefault", "__getitem__", "__contains__", "__setitem__", "__delitem__",
                           "remove", "discard", "add"})


def _keyed(rt, fn, obj, rest: tuple) -> tuple:
    """rest with its key replaced by the stored key a lookup finds, interpreting a Python __hash__/__eq__."""
    if rest and fn.__name__ in KEYED_METHODS and isinstance(obj, (dict, set, frozenset)):
        return (dunders.stored_key(rt, obj, rest[0]), *rest[1:])
    return rest


def keyed_method(rt, fn, args, kwargs):
    """`d.get(key)`, `s.discard(key)`, ... of a dict or set the call made: the key a Python __hash__/__eq__ finds."""
    obj = fn.__self__
    if not isinstance(obj, (dict, set, frozenset)) or not args:
        return NULL
    return fn(*_keyed(rt, fn, obj, args), **kwargs)


def _reader(rt, fn, args, kwargs):
    args = (args[0], *_keyed(rt, fn, args[0], args[1:]))
    result = fn(*args, **kwargs)
    if len(args) >= 2:
        container, key = args[0], args[1]
        if not isinstance(container, dict) or key in container:
            result = report_item(rt, container, key, result)
    return result


def _view(rt, fn, args, kwargs):
    result = fn(*args, **kwargs)
    d = args[0]
    prov = DictView(rt.external[id(d)], fn.__name__)
    rt.register(result, prov)
    rt.views[id(result)] = (d, fn.__name__, rt.external[id(d)])
    return result


def install(table: dict):
    """Fill the run loop's CONTAINER_METHODS table: id(method descriptor) -> handler(rt, fn, args, kwargs)."""
    mutators = {
        list: ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__",
               "__delitem__", "__iadd__", "__imul__"),
        dict: ("__setitem__", "__delitem__", "update", "setdefault", "pop", "popitem", "clear", "__ior__"),
        set: ("add", "discard", "remove", "update", "clear", "pop", "difference_update",
              "intersection_update", "symmetric_difference_update", "__ior__", "__iand__", "__isub__",
              "__ixor__"),
        bytearray: ("append", "extend", "insert", "pop", "remove", "clear", "reverse", "__setitem__"),
    }
    from array import array
    from collections import OrderedDict, deque

    mutators[OrderedDict] = mutators[dict] + ("move_to_end",)
    mutators[deque] = ("append", "appendleft", "extend", "extendleft", "insert", "pop", "popleft", "remove", "clear",
                       "reverse", "rotate", "__setitem__", "__delitem__", "__iadd__", "__imul__")
    mutators[array] = ("append", "extend", "insert", "pop", "remove", "reverse", "byteswap", "frombytes", "fromlist",
                       "__setitem__", "__delitem__", "__iadd__", "__imul__")
    for cls, names in mutators.items():
        for name in names:
            table[id(cls.__dict__.get(name, getattr(cls, name)))] = _mutator
    for cls in (dict, OrderedDict):
        table[id(cls.get)] = _reader
        table[id(cls.__getitem__)] = _reader
        for name in ("values", "items", "keys"):
            table[id(getattr(cls, name))] = _view
    table[id(list.__getitem__)] = _reader
    table[id(tuple.__getitem__)] = _reader
    table[id(object.__setattr__)] = _obj_setattr
    table[id(object.__delattr__)] = _obj_delattr


def _obj_setattr(rt, fn, args, kwargs):
    obj, name, value = args
    rt.effects.snapshot_attrs(obj, name)
    fn(obj, name, value)
    rt.effects.record(SideEffect("setattr", rt.external[id(obj)], obj, name, value))


def _obj_delattr(rt, fn, args, kwargs):
    obj, name = args
    rt.effects.snapshot_attrs(obj, name)
    fn(obj, name)
    rt.effects.record(SideEffect("delattr", rt.external[id(obj)], obj, name))
