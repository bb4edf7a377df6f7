"""Ops: values from outside that change on every call (Python's `random`, `numpy.random`, clocks, `os.urandom`,
`uuid`) and `print()`. Each call becomes a line of the trace that runs when the program runs, in program order
(`f0 = _c0()` draws from the same generator eager would; `print_(_c1, t0, sep=' ')` prints the real values), so
a cached call draws, times and prints exactly as eager does; logging calls likewise (jitcore/ops/log_calls.py).
Numbers come back as number proxies with no expression: tensor math may use them, Python control flow may not
(jitcore/ir/arith.py refuses it).
"""
from __future__ import annotations

import builtins
import contextvars
import io
import os
import random
import sys
import time
import uuid

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir import arith
from jitcore.ir.arith import value_of
from jitcore.ir.data_ptr import address_error, address_in
from jitcore.ir.proxies import BoolProxy, FloatProxy, IntegerProxy, NumberProxy, Proxy, SymbolicSize, TensorProxy
from jitcore.ir.pytree import tree_map
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
from jitcore.ir.trace import get_tracectx

_TAGS = (Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE)
_NUMBERS = (int, float, bool)
_HINT = "pass the value in as an argument of the jitted function (draw it, or read the clock, outside)"

# module-level callables whose result changes on every call; bound methods of random generators are found by
# their owner (`_owner_state`)
_CLOCKS = (time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic, time.monotonic_ns,
           time.process_time, time.process_time_ns, time.thread_time, time.thread_time_ns)
SOURCES: dict[int, str] = {id(f): f"time.{f.__name__}" for f in _CLOCKS}
SOURCES.update({id(os.urandom): "os.urandom", id(uuid.uuid1): "uuid.uuid1", id(uuid.uuid4): "uuid.uuid4"})
# sources that read or change the sequences handed to them (a list read natively would be baked in unguarded)
_REFUSED = frozenset({"random.shuffle", "random.choice", "random.choices", "random.sample", "numpy.random.shuffle",
                      "numpy.random.choice", "numpy.random.permutation", "numpy.random.permuted"})


def _run_source(fn, args, kwargs):
    return fn(*args, **kwargs)


def _source_printer(bsym, printer):
    fn, args, kwargs = bsym.args
    call = f"{printer.value(fn)}({printer.call_args(args, kwargs)})"
    return call if bsym.output is None else f"{bsym.output.name} = {call}"


def _source_meta(fn, args, kwargs):  # the output proxy is made by `call_source`, which knows the value
    raise AssertionError("per_call_value is recorded by jitcore.ops.per_call.call_source")


# RANDOM too: never merged, never recomputed (a data guard refuses a value drawn per call)
per_call_value = Symbol("python.per_call_value", "per_call_value", meta=_source_meta, tags=(*_TAGS, Tag.RANDOM),
                        module="", printer=_source_printer, kernel=_run_source)


# while a program that checks run-time sizes runs (jitcore/runtime/checked_runs.py): a list its prints go to, as
# (text, file, flush), written when it ends (a failed check, after which another entry runs the call, drops them)
DEFERRED_PRINTS: contextvars.ContextVar = contextvars.ContextVar("jitcore_deferred_prints", default=None)


def _print(*args, **kwargs):
    deferred = DEFERRED_PRINTS.get()
    if deferred is None:
        builtins.print(*args, **kwargs)
        return
    file, flush = kwargs.pop("file", None), kwargs.pop("flush", False)
    text = io.StringIO()
    builtins.print(*args, file=text, **kwargs)
    deferred.append((text.getvalue(), sys.stdout if file is None else file, flush))


def _print_printer(bsym, printer):
    parts = [_print_arg(printer, a) for a in bsym.args]
    parts += [f"{k}={printer.value(v)}" for k, v in bsym.kwargs.items()]
    return f"print_({', '.join(parts)})"


def _print_arg(printer, x) -> str:
    """printer.value, except that a torch.Size stays one (print shows `torch.Size([2, 3])`, not a tuple)."""
    t = type(x)
    if t is torch.Size or t is SymbolicSize:
        return f"torch.Size({printer.value(list(x))})"
    if t is list or t is tuple:
        inner = ", ".join(_print_arg(printer, e) for e in x)
        return f"[{inner}]" if t is list else (f"({inner},)" if len(x) == 1 else f"({inner})")
    if t is dict:
        return "{" + ", ".join(f"{_print_arg(printer, k)}: {_print_arg(printer, v)}" for k, v in x.items()) + "}"
    return printer.value(x)


def _print_meta(*args, **kwargs):
    address = address_in((args, kwargs))
    if address is not None:  # (eager prints the number, which the program does not have)
        raise address_error(address.name, "printing")


print_ = Symbol("python.print", "print_", meta=_print_meta, tags=_TAGS, module="",
                printer=_print_printer, call_ctx={"print_": _print}, kernel=_print)


# -- numbers read from a tensor when the program runs --------------------------------------------------------------
def _tensor_number_printer(bsym, printer):
    (t,) = bsym.args
    value = f"{printer.value(t)}.item()" if bsym.kwargs["kind"] == "item" else f"float({printer.value(t)})"
    return f"{bsym.output.name} = {value}"


def _read_number(t, *, kind):
    return t.item() if kind == "item" else float(t)


def _tensor_number_meta(t, *, kind):  # the output proxy is made by `tensor_number`
    raise AssertionError("tensor_number is recorded by jitcore.ops.per_call.tensor_number")


read_tensor_number = Symbol("python.tensor_number", "tensor_number", meta=_tensor_number_meta,
                            tags=(Tag.PYTHON, Tag.NON_DIFFERENTIABLE), module="", printer=_tensor_number_printer,
                            kernel=_read_number)


def tensor_number(t: TensorProxy, kind: str) -> FloatProxy:
    """`float(t)` / `t.item()` of a one-element tensor whose value no guard can know beforehand (it comes from the
    program's writes into its inputs): a line reading it when the program runs, its number a proxy with no
    expression, which tensor math and arithmetic may use and Python control flow may not."""
    out = FloatProxy(float("nan"))  # (no value while tracing: nothing may branch on it)
    out.expr = None
    arith.note_per_call(out, f"{'float' if kind == 'float' else 'item'}({t.name})")
    get_tracectx().record(BoundSymbol(read_tensor_number, (t,), {"kind": kind}, out))
    return out


# -- which callables are per-call sources -------------------------------------------------------------------------
def _numpy_random():
    np = sys.modules.get("numpy")
    return None if np is None else np.random


def _owner_state(owner):
    """(get state, set state) of a random generator that owns a bound method, or None if `owner` is none."""
    if isinstance(owner, random.Random):
        if isinstance(owner, random.SystemRandom):
            return lambda: None, lambda s: None  # draws from the OS: no state to keep
        return owner.getstate, owner.setstate
    npr = _numpy_random()
    if npr is not None:
        if isinstance(owner, npr.RandomState):
            return owner.get_state, owner.set_state
        if isinstance(owner, npr.Generator):
            bits = owner.bit_generator
            return (lambda: bits.state), (lambda s: setattr(bits, "state", s))
        if isinstance(owner, npr.BitGenerator):
            return (lambda: owner.state), (lambda s: setattr(owner, "state", s))
    return None


# module-level functions drawing from a global generator that is not their __self__: id -> () -> the generator
_MODULE_OWNERS: dict = {}


def _add_numpy_sources(npr):
    """numpy.random's module functions that are not methods of its global RandomState (seed, ranf, sample)."""
    for name in ("seed", "ranf", "sample"):
        fn = getattr(npr, name, None)
        if fn is not None and getattr(fn, "__self__", None) is not npr.mtrand._rand:
            SOURCES[id(fn)] = f"numpy.random.{name}"
            _MODULE_OWNERS[id(fn)] = lambda: npr.mtrand._rand
    _MODULE_OWNERS.setdefault(0, None)  # numpy's functions were looked for (it may have none of them)


def _refuse_new_generator(name):
    def refuse(*args, **kwargs):
        raise UnsupportedError("per-call value", f"{name}(...) inside a jitted function: the generator would be "
                               "made once, when the function is traced, and its draws would go on across calls",
                               hint="make the generator outside the jitted function and use it there (as a "
                                    "global, an attribute or an argument)")

    return refuse


_classes: dict = {}


def _generator_classes() -> tuple:
    npr = _numpy_random()
    found = _classes.get(npr is not None)
    if found is None:
        extra = (npr.RandomState, npr.Generator, npr.BitGenerator) if npr is not None else ()
        found = _classes[npr is not None] = (random.Random, *random.Random.__mro__[1:-1], *extra)
    return found


_unbound_table: dict = {}  # number of generator classes -> {id(method): (method, name)}


def _unbound_name(fn) -> str | None:
    """`Random.randint` (a generator class's own method, called with the generator as first argument, as
    `rng.randint(...)` is called by the interpreter) -> "random.randint"; None for other callables."""
    classes = _generator_classes()
    table = _unbound_table.get(len(classes))
    if table is None:
        table = _unbound_table[len(classes)] = {}
        for cls in classes:
            module = "numpy.random" if cls.__module__.startswith("numpy") else "random"
            for attr, value in vars(cls).items():
                if callable(value) and not isinstance(value, type):
                    table.setdefault(id(value), (value, f"{module}.{attr}"))
    found = table.get(id(fn))
    return found[1] if found is not None and found[0] is fn else None


def source_name(fn) -> str | None:
    """`random.random`, `time.time`, ...: the name of a callable whose result changes per call, else None."""
    name = SOURCES.get(id(fn))
    if name is not None:
        return name
    if not _MODULE_OWNERS and _numpy_random() is not None:
        _add_numpy_sources(_numpy_random())
    owner = getattr(fn, "__self__", None)
    if owner is None or isinstance(owner, type) or _owner_state(owner) is None:
        return None
    module = "random" if isinstance(owner, random.Random) else "numpy.random"
    return f"{module}.{getattr(fn, '__name__', '?')}"


def _plain_args(obj) -> bool:
    if isinstance(obj, (tuple, list)):
        return all(_plain_args(x) for x in obj)
    if isinstance(obj, dict):
        return all(_plain_args(x) for x in obj.values())
    return not isinstance(obj, TensorProxy) and (isinstance(obj, NumberProxy) or obj is None or
                                                   type(obj) in (int, float, bool, str, bytes))


def _sample(fn, args, kwargs):
    """What fn returns now, leaving its generator's state as it was: the trace draws nothing itself."""
    owner = _MODULE_OWNERS.get(id(fn), lambda: getattr(fn, "__self__", None))()
    state = _owner_state(owner) if owner is not None else None
    saved = state[0]() if state is not None else None
    try:
        return fn(*tree_map(value_of, args), **tree_map(value_of, kwargs))
    finally:
        if state is not None:
            state[1](saved)


def _number_type(value):
    """int, float or bool for a number (numpy scalars too: they stay numpy scalars at run time, as in eager)."""
    if type(value) in _NUMBERS:
        return type(value)
    if _numpy_random() is not None and hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        return {"f": float, "i": int, "u": int, "b": bool}.get(value.dtype.kind)
    return None


def call_source(fn, name: str, args: tuple, kwargs: dict):
    """Record `fn(*args, **kwargs)` as a line that runs on every call; its number result as a proxy."""
    what = f"{name}()"
    if name in _REFUSED or not _plain_args((args, kwargs)):
        raise UnsupportedError("per-call value", f"{what} changes on every call and its arguments or result are "
                               "not plain numbers, so it cannot run as part of the compiled program", hint=_HINT)
    value = _sample(fn, args, kwargs)
    ptype = _number_type(value)
    if value is not None and ptype is None:
        raise UnsupportedError("per-call value", f"{what} returns a {type(value).__name__} that changes on every "
                               "call; only numbers (and calls that return None) can be computed per call",
                               hint=_HINT + "; for random tensors use torch.rand/torch.randn (traced)")
    out = None
    if ptype is not None:
        out = {bool: BoolProxy, int: IntegerProxy, float: FloatProxy}[ptype](value)
        out.expr = None
        if ptype is bool:
            out.cmp = None
        arith.note_per_call(out, what)
    get_tracectx().record(BoundSymbol(per_call_value, (fn, tuple(args), dict(kwargs)), {}, out))
    return out


def source_lookaside(fn):
    """A replacement for `fn` when it is a per-call source, else None."""
    name = source_name(fn)
    if name is not None:
        return lambda *args, **kwargs: call_source(fn, name, args, kwargs)
    if (isinstance(fn, type) and fn in _generator_classes()) or fn is getattr(_numpy_random(), "default_rng", 0):
        return _refuse_new_generator(f"{fn.__module__}.{fn.__name__}")
    name = _unbound_name(fn)
    if name is None:
        return None

    def bound(owner, *args, **kwargs):
        if _owner_state(owner) is None:
            return fn(owner, *args, **kwargs)
        return call_source(fn.__get__(owner, type(owner)), name, args, kwargs)

    return bound



def record_print(*args, **kwargs):
    """print(...) inside a jitted function: a line that prints the real values on every call."""
    if any(_holds_proxy(x) for x in (*args, *kwargs.values())):
        raise UnsupportedError("print", "print() of an object holding traced tensors or numbers (its text would "
                               "show their names, not their values)",
                               hint="print the tensors themselves, or print outside the jitted function")
    print_(*args, **kwargs)


def lookaside(fn, from_user=lambda: True):
    """The replacement of `fn` while tracing when it is print() or a per-call source, else None.

    from_user(): whether the caller is user code; library code reading a clock for itself (logging's
    timestamps) keeps doing so natively, at trace time."""
    if fn is builtins.print:
        return record_print
    replacement = source_lookaside(fn)
    return replacement if replacement is not None and from_user() else None


def _holds_proxy(obj) -> bool:
    """An object other than a proxy or a builtin container whose attributes hold proxies."""
    if isinstance(obj, (tuple, list)):
        return any(_holds_proxy(x) for x in obj)
    if isinstance(obj, dict):
        return any(_holds_proxy(x) for x in (*obj.keys(), *obj.values()))
    d = getattr(obj, "__dict__", None)
    return not isinstance(obj, Proxy) and isinstance(d, dict) and any(isinstance(v, Proxy) for v in d.values())
