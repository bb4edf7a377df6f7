"""Interpreter stage: builtins with an explicit policy (one table, keyed by the builtin's id).

Each entry is `fn(rt, args, kwargs)` and replaces a native call of the builtin: zero-arg super(), locals(),
globals(), vars(), eval/exec (interpreted), iter, getattr/setattr/delattr/hasattr (provenance and side
effects), isinstance/issubclass (asked to the context), sys.exc_info, builtins that iterate or call back
(list, zip, map, sorted, ...: external items are reported, Python callbacks interpreted), range/list/len/type of
symbolic sizes (jitcore/ir/ranges.py: `range(n)` keeps n symbolic); breakpoint() and input() are refused
(frame readers and what names a caller's module: frame_views.py). print() is not here: with jitcore's context it is
an op that prints on every call (jitcore/ops/per_call.py); with the default context it runs natively.
"""
from __future__ import annotations
import __future__

import abc
import builtins
import collections
import functools
import itertools
import math
import operator
import sys
import types

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access, dunders, frame_views  # noqa: F401  (frame_views: its lookasides)
from jitcore.interpreter.frame import NULL, Frame, code_info, frame_locals, with_caller_module
from jitcore.interpreter.provenance import Attr, Call, Module
from jitcore.interpreter.run import BUILTIN_METHODS, CALLABLE_OBJECTS, LOOKASIDES, RETURNED, run_frame
from jitcore.ir import ranges
from jitcore.ir.arith import as_user
from jitcore.ir.proxies import BoolProxy, IntegerProxy, NumberProxy, TensorProxy, ir_op

_CellType = types.CellType
_FUTURE_FLAGS = functools.reduce(
    operator.or_, (getattr(__future__, n).compiler_flag for n in __future__.all_feature_names)
)


def lookaside(*targets):
    def deco(fn):
        for t in targets:
            LOOKASIDES[id(t)] = fn
        return fn

    return deco


@lookaside(builtins.super)
def _super(rt, args, kwargs):
    if args or kwargs or rt.frame is None:
        return super(*args, **kwargs)
    frame = rt.frame
    code, info = frame.code, frame.info
    if code.co_argcount == 0 and not code.co_flags & 0x04:
        raise RuntimeError("super(): no arguments")
    first = frame.localsplus[0]
    if 0 in info.cell_slots and type(first) is _CellType:
        first = first.cell_contents
    if first is NULL:
        raise RuntimeError("super(): arg[0] deleted")
    if code.co_argcount == 0:
        first = first[0]
    if "__class__" not in code.co_freevars:
        raise RuntimeError("super(): __class__ cell not found")
    cell = frame.localsplus[info.free_start + code.co_freevars.index("__class__")]
    try:
        cls = cell.cell_contents
    except ValueError:
        cls = NULL
    if cls is NULL:
        raise RuntimeError("super(): empty __class__ cell")
    return super(cls, first)


@lookaside(builtins.locals)
def _locals(rt, args, kwargs):
    if args or kwargs or rt.frame is None:
        return locals(*args, **kwargs)  # raises the builtin's TypeError
    return frame_locals(rt.frame)


@lookaside(builtins.globals)
def _globals(rt, args, kwargs):
    if args or kwargs or rt.frame is None:
        return globals(*args, **kwargs)
    return rt.frame.globals


@lookaside(builtins.vars)
def _vars(rt, args, kwargs):
    if len(args) == 1 and not kwargs and type(args[0]) not in (types.ModuleType, type):
        try:
            return access.load_attr(rt, args[0], "__dict__")  # vars(o) is o.__dict__: read as the program's
        except AttributeError:
            raise TypeError("vars() argument must have __dict__ attribute") from None
    if args or kwargs or rt.frame is None:
        return vars(*args, **kwargs)
    return frame_locals(rt.frame)


def _run_source(rt, source, globals_, locals_, mode, fname):
    caller = rt.frame
    if globals_ is None and caller is None:
        globals_ = {}
    if globals_ is None:
        globals_ = caller.globals
        if locals_ is None:
            locals_ = frame_locals(caller)
    elif locals_ is None:
        locals_ = globals_
    if not isinstance(globals_, dict):
        raise TypeError(f"{fname}() globals must be a dict, not {type(globals_).__name__}")
    globals_.setdefault("__builtins__", builtins)
    if isinstance(source, types.CodeType):
        code = source
    else:
        if isinstance(source, str) and mode == "eval":
            source = source.lstrip(" \t")
        # like CPython, the compiled source inherits the caller's `from __future__` flags
        flags = caller.code.co_flags & _FUTURE_FLAGS if caller is not None else 0
        code = builtins.compile(source, "<string>", mode, flags=flags, dont_inherit=True)
    if code.co_freevars:
        raise UnsupportedError("callable", f"{fname}() of a code object with free variables")
    frame = Frame(rt, code, code_info(code), globals_, None, locals_)
    frame.parent = caller
    rt.frame = frame
    try:
        sig = run_frame(frame)
    finally:
        rt.frame = caller
    return frame.retval if sig == RETURNED else None


@lookaside(builtins.eval)
def _eval(rt, args, kwargs):
    source, globals_, locals_ = (list(args) + [None, None])[:3]
    return _run_source(rt, source, globals_, locals_, "eval", "eval")


@lookaside(builtins.exec)
def _exec(rt, args, kwargs):
    if kwargs.get("closure") is not None:
        raise UnsupportedError("callable", "exec(..., closure=...)", hint="call exec outside the jitted function")
    source, globals_, locals_ = (list(args) + [kwargs.get("globals"), kwargs.get("locals")])[:3]
    _run_source(rt, source, globals_, locals_, "exec", "exec")


@lookaside(builtins.iter)
def _iter(rt, args, kwargs):
    if len(args) == 1 and not kwargs:
        return access.get_iter(rt, args[0])
    return iter(*_callbacks(rt, args), **kwargs)


@lookaside(builtins.getattr)
def _getattr(rt, args, kwargs):
    if kwargs or len(args) not in (2, 3) or type(args[1]) is not str:
        return getattr(*args, **kwargs)
    if len(args) == 2:
        return access.load_attr(rt, args[0], args[1])
    try:
        return access.load_attr(rt, args[0], args[1])
    except AttributeError:
        return args[2]


@lookaside(builtins.hasattr)
def _hasattr(rt, args, kwargs):
    if kwargs or len(args) != 2 or type(args[1]) is not str:
        return hasattr(*args, **kwargs)
    return access.has_attr(rt, args[0], args[1])


@lookaside(builtins.setattr)
def _setattr(rt, args, kwargs):
    if kwargs or len(args) != 3 or type(args[1]) is not str:
        return setattr(*args, **kwargs)
    access.store_attr(rt, *args)


@lookaside(builtins.delattr)
def _delattr(rt, args, kwargs):
    if kwargs or len(args) != 2 or type(args[1]) is not str:
        return delattr(*args, **kwargs)
    access.delete_attr(rt, *args)


@lookaside(builtins.isinstance)
def _isinstance(rt, args, kwargs):
    if len(args) == 2 and not kwargs:
        r = rt.isinstance_hook(args[0], args[1])
        if r is not NotImplemented:
            return r
        return _class_check(rt, "__instancecheck__", isinstance, *args)
    return isinstance(*args, **kwargs)


@lookaside(builtins.issubclass)
def _issubclass(rt, args, kwargs):
    if len(args) == 2 and not kwargs:
        r = rt.issubclass_hook(args[0], args[1])
        if r is not NotImplemented:
            return r
        return _class_check(rt, "__subclasscheck__", issubclass, *args)
    return issubclass(*args, **kwargs)


_ABC_CHECKS = (abc.ABCMeta.__instancecheck__, abc.ABCMeta.__subclasscheck__)  # (the registry: the context guards it)


def _class_check(rt, name, native, obj, cls):
    """isinstance/issubclass as Python does it, interpreting a metaclass's __instancecheck__ / __subclasscheck__ written
    in Python (what it reads of the object, `hasattr(o, "x")` of a runtime protocol, is then guarded)."""
    if type(cls) is tuple:
        return any(_class_check(rt, name, native, obj, c) for c in cls)
    meta = type(cls)
    fn = dunders.python_dunder(rt, meta, name) if meta is not type else None
    if fn is None or fn in _ABC_CHECKS or (native is isinstance and type(obj) is cls):
        return native(obj, cls)
    return access.truth(rt, rt.call(fn, (cls, obj), {}))


@lookaside(builtins.breakpoint, builtins.input)
def _refused(rt, args, kwargs):
    raise UnsupportedError("callable", "breakpoint() and input() cannot run while tracing",
                           hint="remove the call from the jitted function")


@lookaside(sys.exc_info)
def _exc_info(rt, args, kwargs):
    exc = rt.topmost_exc()
    return (None, None, None) if exc is None else (type(exc), exc, exc.__traceback__)


# -- builtins that iterate their argument or call back into Python ------------------------------------------------
class Interpreted:
    """A Python callable handed to native code (map, sorted's key, ...): calling it interprets it."""

    __slots__ = ("fn", "rt")

    def __init__(self, rt, fn):
        self.rt, self.fn = rt, fn

    def __call__(self, *args, **kwargs):
        return self.rt.call(self.fn, args, kwargs)


_CALLBACK_TYPES = (types.FunctionType, types.MethodType)


def _callbacks(rt, seq):
    return [Interpreted(rt, a) if type(a) in _CALLBACK_TYPES else a for a in seq]


def _iterable(rt, obj):
    if id(obj) in rt.external or type(obj) not in access._PLAIN:
        return access.get_iter(rt, obj)
    return obj


def _first_iterable(fn):
    def look(rt, args, kwargs):
        if len(args) == 1 or (args and fn in (sum, enumerate)):  # (sum(o, start), enumerate(o, 1))
            args = (_iterable(rt, args[0]), *args[1:])
        if "key" in kwargs and type(kwargs["key"]) in _CALLBACK_TYPES:
            kwargs = {**kwargs, "key": Interpreted(rt, kwargs["key"])}
        if fn in (sorted, min, max):
            args, kwargs = _ordered(rt, args, kwargs)
        return fn(*args, **kwargs)

    return look


class _Ordered:
    """The sort key of an item whose class compares in Python (`__lt__` reading `self.v`): the comparisons sorted(),
    min() and max() make are interpreted (dunders.compare), so what they read is guarded."""

    __slots__ = ("rt", "v")

    def __init__(self, rt, v):
        self.rt, self.v = rt, v

    def _compare(self, op, other):
        r = dunders.compare(self.rt, op, self.v, other.v)
        return op(self.v, other.v) if r is dunders.NATIVE else r

    def __lt__(self, other):
        return self._compare(operator.lt, other)

    def __gt__(self, other):
        return self._compare(operator.gt, other)


def _ordered(rt, args, kwargs):
    """sorted/min/max's arguments, with a key wrapping items (or their user key) in _Ordered when one compares in
    Python; else as they were."""
    items = list(args[0]) if len(args) == 1 else list(args)
    key = kwargs.get("key")
    if key is None and not any(dunders.python_dunder(rt, type(v), n) is not None for v in items
                               for n in ("__lt__", "__gt__")):  # (a user key's results: wrapped, not called twice)
        return ((items,) if len(args) == 1 else tuple(items)), kwargs
    by = (lambda v: _Ordered(rt, v)) if key is None else (lambda v: _Ordered(rt, key(v)))
    return ((items,) if len(args) == 1 else tuple(items)), {**kwargs, "key": by}


for _fn in (list, tuple, set, frozenset, sorted, sum, min, max, any, all, enumerate):
    LOOKASIDES[id(_fn)] = _first_iterable(_fn)


# -- native code consuming an iterable (or calling back): bytes(o), dict.fromkeys(o), ",".join(o), out.extend(o) ---
def _consumer(fn, mapping: bool = False):
    def look(rt, args, kwargs):
        args = [access.consumed(rt, a, mapping and i == 0) for i, a in enumerate(args)]
        return fn(*_callbacks(rt, args), **kwargs)

    return look


for _fn in (bytes, bytearray, collections.deque, math.prod, math.fsum, functools.reduce, operator.countOf,
            operator.indexOf, itertools.chain, itertools.chain.from_iterable, itertools.islice, itertools.cycle,
            itertools.accumulate, itertools.compress, itertools.dropwhile, itertools.takewhile,
            itertools.filterfalse, itertools.groupby, itertools.starmap, itertools.product, itertools.permutations,
            itertools.combinations, itertools.combinations_with_replacement, itertools.zip_longest,
            itertools.pairwise, itertools.tee, collections._count_elements):
    LOOKASIDES[id(_fn)] = _consumer(_fn)
for _fn in (dict, collections.OrderedDict):
    LOOKASIDES[id(_fn)] = _consumer(_fn, mapping=True)

# methods of builtin containers and strings that iterate their arguments, called natively (Runtime.call_native)
CONSUMING_METHODS = frozenset({"join", "extend", "extendleft", "update", "union", "intersection", "difference",
                               "symmetric_difference", "issubset", "issuperset", "isdisjoint", "fromkeys",
                               "intersection_update", "difference_update", "symmetric_difference_update"})
_CONSUMING_OWNERS = (str, bytes, bytearray, list, dict, set, frozenset, collections.deque)


def consuming_method(rt, fn, args, kwargs):
    """`sep.join(o)`, `out.extend(o)`, `dict.fromkeys(o)`, `s.update(o)` of a builtin container or string: o's
    items read as consumed() gives them; `lst.sort(key=...)` with its key interpreted. NULL when fn is not one."""
    owner = getattr(fn, "__self__", None)
    name = fn.__name__
    if not isinstance(owner, _CONSUMING_OWNERS) and not (isinstance(owner, type) and issubclass(owner, dict)):
        return NULL
    if name == "sort" and type(owner) is list:
        if "key" in kwargs and type(kwargs["key"]) in _CALLBACK_TYPES:
            kwargs = {**kwargs, "key": Interpreted(rt, kwargs["key"])}
        _, kwargs = _ordered(rt, (owner,), kwargs)
        return fn(*args, **kwargs)
    if name not in CONSUMING_METHODS:
        return NULL
    mapping = name == "update" and isinstance(owner, dict)
    return fn(*[access.consumed(rt, a, mapping and i == 0) for i, a in enumerate(args)], **kwargs)


for _name in CONSUMING_METHODS | {"sort"}:
    BUILTIN_METHODS[_name] = consuming_method
for _name in access.KEYED_METHODS:
    BUILTIN_METHODS[_name] = access.keyed_method
# -- ranges of symbolic sizes (jitcore/ir/ranges.py) -----------------------------------------------------------------
@lookaside(builtins.range)
def _range(rt, args, kwargs):
    """range() of a symbolic size keeps its bounds symbolic (a SymbolicRange: torch.tensor of it is one op for every
    size); anything else is the builtin range."""
    if not kwargs and 1 <= len(args) <= 3 and any(ranges.is_symbolic_int(a) for a in args) and \
            all(type(a) is int or ranges.is_symbolic_int(a) for a in args):
        return ranges.make_range(*args)
    return range(*args, **kwargs)


_plain_list = _first_iterable(list)


@lookaside(builtins.list)
def _list(rt, args, kwargs):
    """list() of a symbolic range is a RangeList: this call's values, remembering the range until something reads
    them."""
    if len(args) == 1 and not kwargs and type(args[0]) is ranges.SymbolicRange:
        return ranges.RangeList.of(args[0])
    return _plain_list(rt, args, kwargs)


@lookaside(builtins.len)
def _len(rt, args, kwargs):
    """len() of a symbolic range (or of list() of one, unread) is its symbolic length, not a predicate on it."""
    if len(args) == 1 and not kwargs:
        n = ranges.symbolic_len(args[0])
        if n is not None:
            return n
        return access.length(rt, args[0])
    return len(*args, **kwargs)


@lookaside(builtins.bool)
def _bool(rt, args, kwargs):
    if len(args) == 1 and not kwargs:
        return access.truth(rt, args[0])
    return bool(*args, **kwargs)


@lookaside(builtins.type)
def _type(rt, args, kwargs):
    """type(x) asks the context (a tensor proxy is a torch.Tensor to the program, a symbolic size an int, a symbolic
    range a range, as eager's objects answer)."""
    if len(args) == 1 and not kwargs:
        r = rt.type_hook(args[0])
        if r is not NotImplemented:
            return r
    if len(args) == 3:  # a class made by type(name, bases, ns): its __module__ is the caller's, as eager's
        args = (*args[:2], with_caller_module(rt.frame, type, args[1], args[2]))
    return type(*args, **kwargs)


def _extreme(name, native):
    """max()/min() of ints with a symbolic size among them is a recorded `max(i0, i1)`: no predicate on which won.
    Other arguments (floats, a key, a default, other objects) go to the builtin, comparing as Python does."""
    plain = _first_iterable(native)

    def look(rt, args, kwargs):
        items = list(_iterable(rt, args[0])) if len(args) == 1 and not kwargs else args
        ints = all(type(v) is int or (type(v) is IntegerProxy and v.expr is not None) for v in items)
        if kwargs or len(items) < 1 or not ints or not any(type(v) is IntegerProxy for v in items):
            return plain(rt, (items,) if len(args) == 1 and not kwargs else args, kwargs)
        out = items[0]
        for v in items[1:]:
            out = ir_op("number_op")(name, out, v)
        return out

    return look


LOOKASIDES[id(max)] = _extreme("max", max)
LOOKASIDES[id(min)] = _extreme("min", min)


def _symbolic_number(x) -> bool:
    # a bool's int() is its truth (a predicate); a per-call value (no expression) converted is refused natively
    return isinstance(x, NumberProxy) and not isinstance(x, BoolProxy) and x.expr is not None


@lookaside(builtins.int)
def _int(rt, args, kwargs):
    """int() of a symbolic number stays symbolic (`int(i0 / 2)` is a recorded truncation, not a predicate)."""
    if len(args) == 1 and not kwargs and _symbolic_number(args[0]):
        return args[0].__trunc__()
    r = dunders.to_number(rt, int, args[0]) if len(args) == 1 and not kwargs else dunders.NATIVE
    return int(*args, **kwargs) if r is dunders.NATIVE else r


@lookaside(builtins.float)
def _float(rt, args, kwargs):
    """float() of a symbolic number stays symbolic (a recorded conversion); of a tensor, the number its proxy gives
    (guarded, or read when the program runs: a proxy, which the builtin would refuse as __float__'s result)."""
    if len(args) == 1 and not kwargs and _symbolic_number(args[0]):
        x = args[0]
        return x if x.python_type is float else x.as_float()
    if len(args) == 1 and not kwargs and isinstance(args[0], TensorProxy):
        return args[0].__float__()
    r = dunders.to_number(rt, float, args[0]) if len(args) == 1 and not kwargs else dunders.NATIVE
    return float(*args, **kwargs) if r is dunders.NATIVE else r


def _text(kind):
    """str(o), repr(o), format(o, spec) of an object whose class writes them in Python: interpreted."""
    def look(rt, args, kwargs):
        if kwargs or not 1 <= len(args) <= (2 if kind is format else 1):
            return as_user(kind, *args, **kwargs)
        r = dunders.to_text(rt, kind, *args)
        return as_user(kind, *args) if r is dunders.NATIVE else r  # (a symbolic size's text is its value's)

    return look


for _kind in (str, repr, format):
    LOOKASIDES[id(_kind)] = _text(_kind)


@lookaside(builtins.abs)
def _abs(rt, args, kwargs):
    r = dunders.unary(rt, "__abs__", args[0]) if len(args) == 1 and not kwargs else dunders.NATIVE
    return as_user(abs, *args, **kwargs) if r is dunders.NATIVE else r


def _math(name, native):
    """A math-module function of a symbolic number is a recorded op (`math.sqrt(i2)`), not a specialisation of it
    (native, the function would call __float__); other arguments go to the function."""
    def look(rt, args, kwargs):
        if kwargs or not any(_symbolic_number(a) for a in args) or not all(
                type(a) in (int, float) or _symbolic_number(a) for a in args):
            return native(*args, **kwargs)
        op = name if name != "log" or len(args) == 1 else "log_base"
        return ir_op("number_op")(op, *args)

    return look


for _name, _native in (("sqrt", math.sqrt), ("exp", math.exp), ("log", math.log), ("log2", math.log2),
                       ("log10", math.log10), ("math_pow", math.pow)):
    LOOKASIDES[id(_native)] = _math(_name, _native)
del _name, _native


@lookaside(builtins.reversed)
def _reversed(rt, args, kwargs):
    if len(args) == 1 and id(args[0]) in rt.external and isinstance(args[0], (list, tuple)):
        return reversed(list(access.get_iter(rt, args[0])))
    if len(args) == 1 and type(args[0]) not in access._PLAIN:
        fn = rt.lookup(type(args[0]), "__reversed__")
        if type(fn) is types.FunctionType:
            return rt.call(fn, (args[0],), {})
        if fn is NULL and dunders.python_dunder(rt, type(args[0]), "__getitem__") is not None:  # obj[n - 1], ...
            return iter([access.get_item(rt, args[0], i) for i in range(access.length(rt, args[0]) - 1, -1, -1)])
    return reversed(*args, **kwargs)


@lookaside(builtins.zip)
def _zip(rt, args, kwargs):
    return zip(*[_iterable(rt, a) for a in args], **kwargs)


@lookaside(builtins.map)
def _map(rt, args, kwargs):
    if not args:
        return map(*args, **kwargs)
    return map(*_callbacks(rt, args[:1]), *[_iterable(rt, a) for a in args[1:]], **kwargs)


@lookaside(builtins.filter)
def _filter(rt, args, kwargs):
    if len(args) != 2:
        return filter(*args, **kwargs)
    return filter(*_callbacks(rt, args[:1]), _iterable(rt, args[1]))


def _getter(read):
    """operator.attrgetter(...)(obj) and itemgetter(...)(obj): each read as `obj.name` / `obj[key]` is (from an
    object from outside: reported, so guarded), not natively."""
    def call(rt, fn, args, kwargs):
        if len(args) != 1 or kwargs:
            return fn(*args, **kwargs)  # (its own error)
        keys = fn.__reduce__()[1]
        values = tuple(read(rt, args[0], k) for k in keys)
        return values[0] if len(keys) == 1 else values

    return call


def _attr_path(rt, obj, name):
    for part in name.split("."):
        obj = access.load_attr(rt, obj, part)
    return obj


CALLABLE_OBJECTS[operator.attrgetter] = _getter(_attr_path)
CALLABLE_OBJECTS[operator.itemgetter] = _getter(access.get_item)


def _lru_cached(rt, fn, args, kwargs):
    """A functools.lru_cache (functools.cache) wrapper from outside, called with constants (`scale(2)`): called
    natively, so its cache answers as in eager, and its result reported as read through that call (Call provenance):
    the prologue calls it again on every call (a hit is one dict lookup) and checks what the program used of the
    result, so after `scale.cache_clear()` and a change of what the function reads, a call is traced again, never the
    first call's answer. Objects from outside as arguments (`scale_of(self.cfg)`) are fetched again for that call.
    Given values of the program (tensors, symbolic numbers), the wrapped function is interpreted (what it reads is
    guarded as anywhere else); with other arguments (objects the function made: `logger.warning_once(msg)` on a
    message it built), or a wrapper the call made itself, it is called natively (its cache then answers while tracing
    only)."""
    prov = rt.external.get(id(fn))
    if prov is not None and not kwargs and all(type(a) in _CALL_CONSTANTS for a in args):
        return rt.report(fn(*args), Call(prov, tuple(args)))
    if not any(type(a).__module__ == "jitcore.ir.proxies" for a in (*args, *kwargs.values())):
        fetched = _fetched_args(rt, args) if prov is not None and not kwargs else None
        if fetched is not None:  # objects from outside (`scale_of(self.cfg)`): fetched again by the prologue
            return rt.report(fn(*args), Call(prov, fetched))
        return rt.call_native(fn, args, kwargs)
    wrapped = fn.__wrapped__
    if prov is not None:
        wrapped = rt.report(wrapped, Attr(prov, "__wrapped__"))
    return rt.call(wrapped, args, kwargs)


_CALL_CONSTANTS = (int, str, bytes, float, bool, type(None))


def _fetched_args(rt, args):
    """Per argument: the constant, or the provenance of an object from outside (None if one has neither)."""
    out = []
    for a in args:
        a_prov = None if type(a) in _CALL_CONSTANTS else rt.external.get(id(a))
        if a_prov is None and type(a) not in _CALL_CONSTANTS:
            return None
        out.append(a if a_prov is None else a_prov)
    return tuple(out)


CALLABLE_OBJECTS[functools._lru_cache_wrapper] = _lru_cached


@lookaside(builtins.__import__)
def _import(rt, args, kwargs):
    """`__import__("sys")`: the module, read as an import statement reads it (its attributes are guarded reads)."""
    mod = builtins.__import__(*args, **kwargs)
    name = getattr(mod, "__name__", None)
    if isinstance(mod, types.ModuleType) and sys.modules.get(name) is mod:
        mod = rt.report(mod, Module(name))
    return mod
