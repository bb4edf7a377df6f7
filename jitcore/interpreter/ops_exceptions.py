"""Interpreter stage: exception and context-manager opcodes (3.11-3.14).

RAISE_VARARGS/RERAISE raise natively and the run loop routes the exception through the exception table;
PUSH_EXC_INFO/POP_EXCEPT maintain the handled-exception state (Runtime.exc_stack) that bare `raise` and
implicit chaining use; CHECK_EG_MATCH/PREP_RERAISE_STAR implement except*; BEFORE_WITH/WITH_EXCEPT_START
call __enter__/__exit__ through the call policy (interpreted when written in Python); 3.14's LOAD_SPECIAL loads
them instead of BEFORE_WITH.
"""
from __future__ import annotations

import types

from jitcore.interpreter import bytecode
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.handlers import handler


def _instantiate(rt, exc, what):
    if isinstance(exc, type) and issubclass(exc, BaseException):
        value = rt.call(exc, (), {})
        if not isinstance(value, BaseException):
            raise TypeError(f"calling {exc!r} should have returned an instance of BaseException, "
                            f"not {type(value).__name__}")
        return value
    if isinstance(exc, BaseException):
        return exc
    raise TypeError(what)


@handler("RAISE_VARARGS")
def RAISE_VARARGS(frame, inst):
    stack, rt = frame.stack, frame.rt
    if inst.arg == 0:
        exc = rt.topmost_exc()
        if exc is None:
            raise RuntimeError("No active exception to reraise")
        raise exc
    cause = stack.pop() if inst.arg == 2 else NULL
    exc = _instantiate(rt, stack.pop(), "exceptions must derive from BaseException")
    if cause is not NULL:
        if cause is not None:
            cause = _instantiate(rt, cause, "exception causes must derive from BaseException")
        exc.__cause__ = cause
    raise exc


@handler("RERAISE")
def RERAISE(frame, inst):
    raise frame.stack.pop()


@handler("PUSH_EXC_INFO")
def PUSH_EXC_INFO(frame, inst):
    stack = frame.stack
    value = stack[-1]
    cell = frame.rt.exc_stack[-1]
    stack[-1] = cell[0]
    stack.append(value)
    cell[0] = value


@handler("POP_EXCEPT")
def POP_EXCEPT(frame, inst):
    frame.rt.exc_stack[-1][0] = frame.stack.pop()


def _check_catchable(right, star=False):
    classes = right if isinstance(right, tuple) else (right,)
    for c in classes:
        if not (isinstance(c, type) and issubclass(c, BaseException)):
            raise TypeError("catching classes that do not inherit from BaseException is not allowed")
        if star and issubclass(c, BaseExceptionGroup):
            raise TypeError("catching ExceptionGroup with except* is not allowed. Use except instead.")


def _matches(exc, right) -> bool:
    mro = type(exc).__mro__
    if isinstance(right, tuple):
        return any(c in mro for c in right)
    return right in mro


@handler("CHECK_EXC_MATCH")
def CHECK_EXC_MATCH(frame, inst):
    stack = frame.stack
    right = stack.pop()
    _check_catchable(right)
    stack.append(_matches(stack[-1], right))


@handler("CHECK_EG_MATCH")
def CHECK_EG_MATCH(frame, inst):
    stack = frame.stack
    match_type = stack.pop()
    _check_catchable(match_type, star=True)
    exc = stack[-1]
    if exc is None:
        match, rest = None, None
    elif _matches(exc, match_type):
        if isinstance(exc, BaseExceptionGroup):
            match = exc
        else:
            match = BaseExceptionGroup("", [exc]) if not isinstance(exc, Exception) else ExceptionGroup("", [exc])
            match.__traceback__ = exc.__traceback__
        rest = None
    elif isinstance(exc, BaseExceptionGroup):
        match, rest = exc.split(match_type)
    else:
        match, rest = None, exc
    if match is None:
        stack.append(None)
        return
    stack[-1] = rest
    stack.append(match)
    frame.rt.exc_stack[-1][0] = match


def _leaf_ids(exc, out):
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            _leaf_ids(e, out)
    else:
        out.add(id(exc))
    return out


def _same_metadata(a, b) -> bool:
    return (getattr(a, "__notes__", None) is getattr(b, "__notes__", None) and a.__traceback__ is b.__traceback__
            and a.__cause__ is b.__cause__ and a.__context__ is b.__context__)


@handler("PREP_RERAISE_STAR", until=(3, 12))  # (3.12+: CALL_INTRINSIC_2 INTRINSIC_PREP_RERAISE_STAR)
def PREP_RERAISE_STAR(frame, inst):
    stack = frame.stack
    excs = stack.pop()
    orig = stack.pop()
    stack.append(prep_reraise_star(orig, excs))


def prep_reraise_star(orig, excs):
    if not excs:
        return None
    if not isinstance(orig, BaseExceptionGroup):
        return excs[0]
    raised, reraised = [], []
    for e in excs:
        if e is None:
            continue
        (reraised if _same_metadata(e, orig) else raised).append(e)
    keep = set()
    for e in reraised:
        _leaf_ids(e, keep)
    reraised_eg = None
    if keep:
        reraised_eg = orig.split(lambda leaf: not isinstance(leaf, BaseExceptionGroup) and id(leaf) in keep)[0]
    if not raised:
        return reraised_eg
    if reraised_eg is not None:
        raised.append(reraised_eg)
    if len(raised) == 1:
        return raised[0]
    return BaseExceptionGroup("", raised)


# -- with -----------------------------------------------------------------------------------------------------
def _bind(rt, obj, name, fn):
    if type(fn) is types.FunctionType:
        return types.MethodType(fn, obj)
    get = getattr(type(fn), "__get__", None)
    return get(fn, obj, type(obj)) if get is not None else fn


@handler("BEFORE_WITH", until=(3, 14))
def BEFORE_WITH(frame, inst):
    stack, rt = frame.stack, frame.rt
    mgr = stack.pop()
    t = type(mgr)
    enter = rt.lookup(t, "__enter__")
    exit_ = rt.lookup(t, "__exit__")
    if enter is NULL or exit_ is NULL:
        raise TypeError(f"'{t.__name__}' object does not support the context manager protocol")
    stack.append(_bind(rt, mgr, "__exit__", exit_))
    stack.append(rt.call(_bind(rt, mgr, "__enter__", enter), (), {}))


@handler("WITH_EXCEPT_START", until=(3, 14))
def WITH_EXCEPT_START(frame, inst):
    stack = frame.stack
    val = stack[-1]
    exit_fn = stack[-4]
    stack.append(frame.rt.call(exit_fn, (type(val), val, val.__traceback__), {}))


# 3.14: `with` loads __exit__ and __enter__ with LOAD_SPECIAL (BEFORE_WITH is gone). CPython pushes the function and
# the object for a method; here, as BEFORE_WITH did, the bound method and NULL (what is called is then the bound
# method, which the context's lookasides recognise: torch.autocast's __exit__). The exit pair stays below the block:
# [exit, NULL, lasti, prev_exc, exc] when WITH_EXCEPT_START runs.
@handler("LOAD_SPECIAL", since=(3, 14))
def LOAD_SPECIAL(frame, inst):
    stack, rt = frame.stack, frame.rt
    owner = stack[-1]
    name = bytecode.SPECIAL_METHOD_NAMES[inst.arg]
    t = type(owner)
    fn = rt.lookup(t, name)
    if fn is NULL:
        protocol = "context manager" if name in ("__enter__", "__exit__") else "asynchronous context manager"
        raise TypeError(f"'{t.__name__}' object does not support the {protocol} protocol (missed {name} method)")
    stack[-1] = _bind(rt, owner, name, fn)
    stack.append(NULL)


@handler("WITH_EXCEPT_START", since=(3, 14))
def WITH_EXCEPT_START_314(frame, inst):
    stack = frame.stack
    val = stack[-1]
    exit_fn, exit_self = stack[-5], stack[-4]
    args = (type(val), val, val.__traceback__)
    stack.append(frame.rt.call(exit_fn, args if exit_self is NULL else (exit_self, *args), {}))
