"""Interpreter stage: call opcodes (KW_NAMES, CALL, CALL_FUNCTION_EX), MAKE_FUNCTION and RETURN_VALUE.

Every call goes through Runtime.call (run.py), which applies the call policy: lookaside, native call,
or interpretation of the callee in a new frame.
"""
from __future__ import annotations

import types

from jitcore.interpreter import access
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.registry import handler
from jitcore.interpreter.run import RETURNED


@handler("KW_NAMES")
def KW_NAMES(frame, inst):
    frame.kw_names = frame.code.co_consts[inst.arg]


@handler("CALL")
def CALL(frame, inst):
    stack = frame.stack
    argc = inst.arg
    base = len(stack) - argc
    if stack[base - 2] is NULL:
        fn = stack[base - 1]
        args = stack[base:]
    else:
        fn = stack[base - 2]
        args = stack[base - 1:]
    del stack[base - 2:]
    kw = frame.kw_names
    if kw:
        frame.kw_names = None
        nkw = len(kw)
        kwargs = dict(zip(kw, args[-nkw:]))
        args = args[:-nkw]
    else:
        kwargs = {}
    stack.append(frame.rt.call(fn, tuple(args), kwargs))


def func_str(fn) -> str:
    """How CPython names a callable in call errors (`_PyObject_FunctionStr`): `module.qualname()`."""
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        return str(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


@handler("CALL_FUNCTION_EX")
def CALL_FUNCTION_EX(frame, inst):
    stack = frame.stack
    kwargs = stack.pop() if inst.arg & 1 else {}
    callargs = stack.pop()
    fn = stack.pop()
    stack.pop()  # NULL
    rt = frame.rt
    if type(kwargs) is not dict or id(kwargs) in rt.external:  # (an external dict's values: read with provenance)
        if not hasattr(kwargs, "keys"):
            raise TypeError(f"{func_str(fn)} argument after ** must be a mapping, not {type(kwargs).__name__}")
        kwargs = {k: access.get_item(rt, kwargs, k) for k in kwargs.keys()}
    if id(callargs) in rt.external and type(callargs) in (tuple, list):  # `f(*shape)` of an argument: its items
        callargs = tuple(access.get_iter(rt, callargs))  # are read with provenance (guarded), not natively
    elif type(callargs) is not tuple:
        if not hasattr(type(callargs), "__iter__") and not hasattr(type(callargs), "__getitem__"):
            raise TypeError(f"{func_str(fn)} argument after * must be an iterable, not {type(callargs).__name__}")
        callargs = tuple(access.get_iter(rt, callargs))  # (a Python __iter__ interpreted: what it reads is guarded)
    stack.append(rt.call(fn, callargs, kwargs))


@handler("MAKE_FUNCTION")
def MAKE_FUNCTION(frame, inst):
    stack = frame.stack
    flags = inst.arg
    code = stack.pop()
    closure = stack.pop() if flags & 0x08 else None
    annotations = stack.pop() if flags & 0x04 else None
    kwdefaults = stack.pop() if flags & 0x02 else None
    defaults = stack.pop() if flags & 0x01 else None
    fn = types.FunctionType(code, frame.globals, code.co_name, defaults, closure)
    fn.__qualname__ = code.co_qualname
    if kwdefaults is not None:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        if isinstance(annotations, tuple):
            annotations = dict(zip(annotations[::2], annotations[1::2]))
        fn.__annotations__ = annotations
    rt = frame.rt
    rt.created_fns.add(id(fn))
    rt.keepalive.append(fn)
    stack.append(fn)


@handler("RETURN_VALUE")
def RETURN_VALUE(frame, inst):
    frame.retval = frame.stack.pop()
    return RETURNED


