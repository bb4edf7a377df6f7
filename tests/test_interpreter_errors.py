"""Interpreter: errors name the user's file and line; refused constructs raise UnsupportedError."""
from __future__ import annotations

import dis
import inspect
import types

import pytest
import torch

from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.interpreter import DefaultContext, interpret
from jitcore.interpreter.registry import registered_names
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.trace import Trace, tracectx


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def test_every_311_opcode_has_a_handler():
    assert set(dis.opmap) <= registered_names()


def inner_branch(x):
    if x:  # the line the error must name
        return 1
    return 0


def middle(x):
    return inner_branch(x) + 1


def test_data_dependent_error_carries_innermost_user_line():
    with tracectx(Trace()):
        p = TensorProxy((2,), torch.float32, "cpu")

        def f(x):
            return middle(x)

        with pytest.raises(DataDependentError) as info:
            interpret(f, (p,), {}, DefaultContext())
    where = info.value.where
    assert where is not None
    assert where.startswith(f"{__file__}:{_line_of(inner_branch, 'if x:')}:")
    assert "if x:  # the line the error must name" in where
    assert "if x:" in str(info.value)


def test_jit_error_from_native_code_names_calling_line():
    def raiser():
        raise UnsupportedError("op", "something unsupported")

    def f(x):
        y = x + 1
        return raiser() + y

    with pytest.raises(UnsupportedError) as info:
        interpret(f, (1,), {}, DefaultContext())
    assert f"{__file__}:{_line_of(raiser, 'raise UnsupportedError')}" in info.value.where


def test_async_opcode_refused_with_file_and_line():
    async def coro(x):
        return await x

    # strip the coroutine flags so that the function is interpreted as a plain generator and GET_AWAITABLE runs
    code = coro.__code__.replace(co_flags=coro.__code__.co_flags & ~0x380 | 0x20)
    fake = types.FunctionType(code, globals(), "coro")

    def f(x):
        return next(fake(x))

    with pytest.raises(UnsupportedError) as info:
        interpret(f, (1,), {}, DefaultContext())
    err = info.value
    assert err.kind == "opcode" and "GET_AWAITABLE" in err.detail
    assert err.where.startswith(f"{__file__}:{_line_of(coro, 'return await x')}:")


def test_async_function_call_refused():
    async def coro(x):
        return x

    def f(x):
        return coro(x)

    with pytest.raises(UnsupportedError, match="async function"):
        interpret(f, (1,), {}, DefaultContext())


def test_breakpoint_and_input_refused():
    def f(x):
        return input("? ")

    with pytest.raises(UnsupportedError, match="input"):
        interpret(f, (1,), {}, DefaultContext())


def test_user_exception_escapes_as_itself():
    class Boom(Exception):
        pass

    err = Boom("x")

    def f(x):
        raise err

    with pytest.raises(Boom) as info:
        interpret(f, (1,), {}, DefaultContext())
    assert info.value is err


def test_exceptions_from_c_functions_caught_by_interpreted_except():
    def f(x):
        try:
            return [1, 2][x]
        except IndexError as e:
            return ("caught", str(e))

    assert interpret(f, (5,), {}, DefaultContext()).output == f(5)


def test_recursion_beyond_limit_is_recursion_error():
    def down(n):
        return down(n + 1)

    with pytest.raises(RecursionError):
        interpret(down, (0,), {}, DefaultContext())
