"""Interpreter stage: call opcodes (KW_NAMES, CALL, CALL_KW, CALL_FUNCTION_EX), MAKE_FUNCTION and the returns.

Every call goes through Runtime.call (run.py), which applies the call policy: lookaside, native call,
or interpretation of the callee in a new frame. The slots below a call's arguments are (NULL, callable) or
(function, self) before 3.13, (callable, NULL or self) since; 3.13 also replaced KW_NAMES + CALL by CALL_KW and
MAKE_FUNCTION's flags by SET_FUNCTION_ATTRIBUTE.
"""
from __future__ import annotations

import types

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access, bytecode
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.run import RETURNED


@handler("KW_NAMES", until=(3, 13))
def KW_NAMES(frame, inst):
    frame.kw_names = frame.code.co_consts[inst.arg]


@handler("CALL", until=(3, 13))
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


@handler("CALL", since=(3, 13))
def CALL_313(frame, inst):
    stack = frame.stack
    base = len(stack) - inst.arg
    fn, self_ = stack[base - 2], stack[base - 1]
    args = tuple(stack[base:]) if self_ is NULL else tuple(stack[base - 1:])
    del stack[base - 2:]
    stack.append(frame.rt.call(fn, args, {}))


@handler("CALL_KW", since=(3, 13))
def CALL_KW(frame, inst):
    """3.13: (callable, NULL or self, arguments, the tuple of keyword names); oparg counts the arguments."""
    stack = frame.stack
    names = stack.pop()
    base = len(stack) - inst.arg
    fn, self_ = stack[base - 2], stack[base - 1]
    args = stack[base:] if self_ is NULL else stack[base - 1:]
    del stack[base - 2:]
    nkw = len(names)
    kwargs = dict(zip(names, args[len(args) - nkw:])) if nkw else {}
    stack.append(frame.rt.call(fn, tuple(args[:len(args) - nkw]), kwargs))


def func_str(fn) -> str:
    """How CPython names a callable in call errors (`_PyObject_FunctionStr`): `module.qualname()`."""
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        return str(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


_CALLABLE_FIRST = bytecode.CALLABLE_FIRST


@handler("CALL_FUNCTION_EX")
def CALL_FUNCTION_EX(frame, inst):
    stack = frame.stack
    if inst.arg is None:  # 3.14: no oparg; the slot of the ** mapping is always there (NULL without one)
        kwargs = stack.pop()
        kwargs = {} if kwargs is NULL else kwargs
    else:
        kwargs = stack.pop() if inst.arg & 1 else {}
    callargs = stack.pop()
    if _CALLABLE_FIRST:
        stack.pop()  # NULL
        fn = stack.pop()
    else:
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


@handler("MAKE_FUNCTION", until=(3, 13))
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


def _prepare_make_function(inst, code, insts):
    nxt = insts[inst.idx + 1] if inst.idx + 1 < len(insts) else None
    inst.aux = nxt is not None and nxt.opname == "SET_FUNCTION_ATTRIBUTE" and nxt.arg == 0x08


@handler("MAKE_FUNCTION", since=(3, 13), prepare=_prepare_make_function)
def MAKE_FUNCTION_313(frame, inst):
    """3.13: the function from its code alone; SET_FUNCTION_ATTRIBUTE then sets defaults, annotations... A closure
    cannot be set after creation: it is taken here from below the code, where the next SET_FUNCTION_ATTRIBUTE 8
    finds it (the compiler pushes the closure last, so its setter comes first)."""
    stack = frame.stack
    code = stack.pop()
    if code.co_freevars and not inst.aux:
        raise UnsupportedError("opcode", f"MAKE_FUNCTION of {code.co_qualname} with free variables and no closure "
                               "after it", where=frame.where(inst))
    fn = types.FunctionType(code, frame.globals, code.co_name, None, stack[-1] if inst.aux else None)
    fn.__qualname__ = code.co_qualname
    rt = frame.rt
    rt.created_fns.add(id(fn))
    rt.keepalive.append(fn)
    stack.append(fn)


@handler("SET_FUNCTION_ATTRIBUTE", since=(3, 13))
def SET_FUNCTION_ATTRIBUTE(frame, inst):
    stack = frame.stack
    fn = stack.pop()
    value = stack.pop()
    flag = inst.arg
    if flag == 0x01:
        fn.__defaults__ = value
    elif flag == 0x02:
        fn.__kwdefaults__ = value
    elif flag == 0x04:
        fn.__annotations__ = dict(zip(value[::2], value[1::2])) if isinstance(value, tuple) else value
    elif flag == 0x10:  # 3.14 (PEP 649): the function computing the annotations when they are first read
        fn.__annotate__ = value
        frame.rt.lazy_annotations[id(fn)] = value  # (read through access.get_attr: computed interpreted)
    elif flag == 0x08:
        if fn.__closure__ is not value:  # (given at creation: MAKE_FUNCTION_313)
            raise SystemError(f"closure of {fn.__qualname__} differs from the one it was made with")
    else:
        raise UnsupportedError("opcode", f"SET_FUNCTION_ATTRIBUTE {flag} on Python {bytecode.VERSION[0]}."
                               f"{bytecode.VERSION[1]}", where=frame.where(inst))
    stack.append(fn)


@handler("RETURN_VALUE")
def RETURN_VALUE(frame, inst):
    frame.retval = frame.stack.pop()
    return RETURNED


@handler("RETURN_CONST", since=(3, 12), until=(3, 14))  # (3.14: LOAD_CONST + RETURN_VALUE)
def RETURN_CONST(frame, inst):
    frame.retval = inst.argval
    return RETURNED


