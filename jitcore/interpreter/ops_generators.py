"""Interpreter stage: generator opcodes (RETURN_GENERATOR, YIELD_VALUE, SEND, GET_YIELD_FROM_ITER; 3.12+: END_SEND,
CLEANUP_THROW) and the async opcodes, which are refused with UnsupportedError (coroutines are not interpreted).
"""
from __future__ import annotations

import types

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access
from jitcore.interpreter.generators import InterpGenerator
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.run import GENERATOR, YIELDED


@handler("RETURN_GENERATOR")
def RETURN_GENERATOR(frame, inst):
    return GENERATOR


@handler("YIELD_VALUE")
def YIELD_VALUE(frame, inst):
    frame.yielded = frame.stack.pop()
    return YIELDED


def _send(receiver, v):
    """One step of `yield from` / `await`: (True, the value yielded) or (False, the receiver's return value)."""
    try:
        if v is None and hasattr(type(receiver), "__next__"):
            return True, type(receiver).__next__(receiver)
        return True, receiver.send(v)
    except StopIteration as e:
        return False, e.value


@handler("SEND", until=(3, 12))
def SEND(frame, inst):
    stack = frame.stack
    v = stack.pop()
    going, r = _send(stack[-1], v)
    if going:
        stack.append(r)
    else:
        stack[-1] = r
        frame.ip = inst.target


@handler("SEND", since=(3, 12))
def SEND_312(frame, inst):
    """3.12+: a finished receiver leaves (receiver, its return value) and jumps to END_SEND, which drops the
    receiver."""
    stack = frame.stack
    going, stack[-1] = _send(stack[-2], stack[-1])
    if not going:
        frame.ip = inst.target


@handler("END_SEND", since=(3, 12))
def END_SEND(frame, inst):
    del frame.stack[-2]


@handler("CLEANUP_THROW", since=(3, 12))
def CLEANUP_THROW(frame, inst):
    """An exception thrown into a `yield from` (InterpGenerator.throw): a StopIteration ends it with its value; any
    other is raised on. Stack: (receiver, last sent value, exception) -> (None, value)."""
    stack = frame.stack
    exc = stack[-1]
    if not isinstance(exc, StopIteration):
        raise exc
    del stack[-3:]
    stack += (None, exc.value)


@handler("GET_YIELD_FROM_ITER")
def GET_YIELD_FROM_ITER(frame, inst):
    obj = frame.stack[-1]
    if isinstance(obj, types.CoroutineType):
        raise TypeError("cannot 'yield from' a coroutine object in a non-coroutine generator")
    if not isinstance(obj, (types.GeneratorType, InterpGenerator)):
        frame.stack[-1] = access.get_iter(frame.rt, obj)


def _async_refused(frame, inst):
    raise UnsupportedError(
        "opcode",
        f"{inst.opname} (async/await) is not supported: coroutines are not interpreted",
        hint="move the async code out of the jitted function",
        where=frame.where(inst),
    )


for _name in ("GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR"):
    handler(_name)(_async_refused)
handler("BEFORE_ASYNC_WITH", until=(3, 14))(_async_refused)  # (3.14: LOAD_SPECIAL __aenter__/__aexit__)
handler("ASYNC_GEN_WRAP", until=(3, 12))(_async_refused)  # (3.12+: CALL_INTRINSIC_1 INTRINSIC_ASYNC_GEN_WRAP)
