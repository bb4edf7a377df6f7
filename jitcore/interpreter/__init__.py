"""Interpreter stage (frontend): run a Python function's CPython bytecode (3.11-3.14) opcode by opcode.

`interpret(fn, args, kwargs, ctx)` runs `fn` and everything it calls in the interpreter, reporting every value
that enters from outside to `ctx.on_external_value` (with its provenance) and logging, then undoing, every
write to external objects. See context.py for the hooks and DESIGN.md for where this sits in the pipeline.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from jitcore.errors import JitError, UnsupportedError
from jitcore.interpreter import (  # noqa: F401  (importing registers the opcode handlers)
    access,
    lookasides,
    ops_build,
    ops_call,
    ops_control,
    ops_exceptions,
    ops_generators,
    ops_intrinsics,
    ops_load_store,
    ops_stack,
    user_traceback,
)
from jitcore.interpreter.generators import InterpGenerator
from jitcore.interpreter.protocol import DefaultContext, InterpreterHooks
from jitcore.interpreter.provenance import (
    Arg,
    Attr,
    Closure,
    DictView,
    Fn,
    Global,
    Item,
    Kwarg,
    Module,
    Provenance,
    Roots,
    SliceKey,
)
from jitcore.interpreter.run import CONTAINER_METHODS, MAX_DEPTH, RECURSION_LIMIT, Runtime
from jitcore.interpreter.side_effects import SideEffect

access.install(CONTAINER_METHODS)

__all__ = [
    "MAX_DEPTH",
    "Arg",
    "Attr",
    "Closure",
    "DefaultContext",
    "DictView",
    "Fn",
    "Global",
    "InterpGenerator",
    "InterpreterHooks",
    "InterpreterResult",
    "Item",
    "Kwarg",
    "Module",
    "Provenance",
    "Roots",
    "SideEffect",
    "SliceKey",
    "interpret",
]


@dataclass
class InterpreterResult:
    output: Any
    side_effects: list = field(default_factory=list)  # SideEffect records, in program order
    external: dict = field(default_factory=dict)  # id(obj) -> provenance for external values seen


def interpret(fn, args: tuple = (), kwargs: dict | None = None, ctx=None) -> InterpreterResult:
    """Run `fn(*args, **kwargs)` in the interpreter and return its output, side effects and external values.

    Arguments are reported as Arg(i)/Kwarg(name) and `fn` itself as Fn() before anything runs. Side effects on
    external objects are undone before this returns (or raises); exceptions from user code escape unchanged,
    jitcore errors carry the innermost user source line.
    """
    ctx = DefaultContext() if ctx is None else ctx
    if not isinstance(ctx, InterpreterHooks):
        raise TypeError(f"interpret(): the context must be an InterpreterHooks (jitcore/interpreter/protocol.py), "
                        f"got {type(ctx).__name__}")
    kwargs = {} if kwargs is None else kwargs
    rt = Runtime(ctx)
    old_limit = sys.getrecursionlimit()
    if old_limit < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        args = tuple(rt.report(a, Arg(i)) for i, a in enumerate(args))
        kwargs = {k: rt.report(v, Kwarg(k)) for k, v in kwargs.items()}
        fn = rt.report(fn, Fn())
        rt.set_root(fn)
        output = rt.call(fn, args, kwargs)
        if not ctx.returns_generators:
            _refuse_generators(output, fn)
    except JitError as e:
        if getattr(e, "where", "") is None and rt.fallback_where is not None:
            e.with_where(rt.fallback_where)
        user_traceback.rebuild(rt, e)
        raise
    except Exception as e:  # the user's frames in its traceback, as eager's would show them
        user_traceback.rebuild(rt, e)
        raise
    finally:
        try:
            rt.effects.undo()
        finally:
            sys.setrecursionlimit(old_limit)
    return InterpreterResult(output, rt.effects.log, rt.external)


def _refuse_generators(output, fn, depth: int = 0):
    """A generator the function returns (or returns inside a tuple, list or dict) would run its steps after the
    trace is over: refused clearly."""
    if isinstance(output, InterpGenerator):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise UnsupportedError("output", f"{name} returned a generator: its steps would run after the traced call, "
                               "outside the compiled program",
                               hint="return a tuple or list of the values (e.g. `tuple(x * i for i in range(n))`)")
    if depth < 8 and type(output) in (tuple, list, dict):
        for v in (output.values() if type(output) is dict else output):
            _refuse_generators(v, fn, depth + 1)
