"""Interpreter: errors name the user's file and line; refused constructs raise UnsupportedError."""
from __future__ import annotations

import inspect
import types

import pytest
import torch

import jitcore
from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.interpreter import DefaultContext, interpret
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.trace import Trace, tracectx


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


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


def _opt_step(opt):
    opt.step()


def _train_step(model, x):
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss


def _grads(model, x):
    return torch.autograd.grad(model(x).sum(), list(model.parameters()))


@pytest.mark.parametrize("call", ["optimizer step", "scheduler step", "grad scaler", "tensor.backward",
                                  "autograd.grad", "clip_grad_norm_", "clip_grad_value_"])
def test_what_a_traced_program_cannot_replay_is_refused(call):
    """An optimizer called inside a jitted function ran natively while tracing: it updated the real parameters
    once and later calls did nothing (with momentum, silently wrong from the second step)."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in model.parameters()]
    fn, args = {"optimizer step": (_opt_step, (opt,)),
                "scheduler step": (lambda s: s.step(), (torch.optim.lr_scheduler.StepLR(opt, 1),)),
                "grad scaler": (lambda s, x: s.scale(x.sum()), (torch.amp.GradScaler("cpu"), torch.ones(3))),
                "tensor.backward": (_train_step, (model, torch.randn(3, 4))),
                "autograd.grad": (_grads, (model, torch.randn(3, 4))),
                # (failed inside torch with a TypeError about _group_tensors_by_device_and_dtype)
                "clip_grad_norm_": (lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5), (model,)),
                "clip_grad_value_": (lambda m: torch.nn.utils.clip_grad_value_(m.parameters(), 0.5), (model,))}[call]
    with pytest.raises(jitcore.UnsupportedError, match=r"outside the jitted function|the grad scaler outside"):
        jitcore.jit(fn)(*args)
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach(), b)


def _hook_inside(x):
    y = x * 2
    y.register_hook(lambda g: g * 3)  # (the line the error names)
    return y.sum()


def _retain_inside(x):
    y = x.sin()
    y.retain_grad()  # (the line the error names)
    return y.sum()


def _hook_without_grad(x):
    with torch.no_grad():
        y = x * 2
    torch.Tensor.register_hook(y, lambda g: g)
    return y


@pytest.mark.parametrize("fn,text", [(_hook_inside, "y.register_hook"), (_retain_inside, "y.retain_grad()")])
def test_tensor_hooks_inside_are_refused_naming_the_line(fn, text):
    """A hook or retain_grad on a tensor inside would never run (the program's backward is one autograd node): refused
    with the user's line, never silently dropped; eager's RuntimeError where eager raises one."""
    with pytest.raises(UnsupportedError, match="inside a jitted function") as info:
        jitcore.jit(fn)(torch.randn(3, requires_grad=True))
    assert f":{_line_of(fn, text)}" in str(info.value)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        _hook_without_grad(torch.randn(3, requires_grad=True))
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        jitcore.jit(_hook_without_grad)(torch.randn(3, requires_grad=True))


@pytest.mark.parametrize("how", ["open read", "open append", "Path.read_text", "Path.write_text"])
def test_files_opened_inside_are_refused(how, tmp_path):
    """A file read inside a jitted function was read once, while tracing, and its contents baked into the program
    (later calls returned them after the file changed); a write happened once. Refused at the user's line; the file is
    left as it was."""
    import pathlib

    path = tmp_path / "value.txt"
    path.write_text("1.5")

    def read(x):
        with open(path) as fh:
            return x + float(fh.read())

    def append(x):
        with open(path, "a") as fh:
            fh.write("more")
        return x + 1

    fn = {"open read": read, "open append": append,
          "Path.read_text": lambda x: x + float(pathlib.Path(path).read_text()),
          "Path.write_text": lambda x: (pathlib.Path(path).write_text("9"), x * 2)[1]}[how]
    with pytest.raises(UnsupportedError, match="read or written once"):
        jitcore.jit(fn)(torch.zeros(2))
    assert path.read_text() == "1.5"
