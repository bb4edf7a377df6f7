"""Interpreter stage: generator opcodes (RETURN_GENERATOR, YIELD_VALUE, SEND, GET_YIELD_FROM_ITER) and the
async opcodes, which are refused with UnsupportedError (coroutines are not interpreted).
"""
from __future__ import annotations

import types

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access
from jitcore.interpreter.generators import InterpGenerator
from jitcore.interpreter.registry import handler
from jitcore.interpreter.run import GENERATOR, YIELDED


@handler("RETURN_GENERATOR")
def RETURN_GENERATOR(frame, inst):
    return GENERATOR


@handler("YIELD_VALUE")
def YIELD_VALUE(frame, inst):
    frame.yielded = frame.stack.pop()
    return YIELDED


@handler("SEND")
def SEND(frame, inst):
    stack = frame.stack
    v = stack.pop()
    receiver = stack[-1]
    try:
        if v is None and hasattr(type(receiver), "__next__"):
            r = type(receiver).__next__(receiver)
        else:
            r = receiver.send(v)
    except StopIteration as e:
        stack[-1] = e.value
        frame.ip = inst.target
        return
    stack.append(r)
    return


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


for _name in ("GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH", "END_ASYNC_FOR", "ASYNC_GEN_WRAP"):
    handler(_name)(_async_refused)
