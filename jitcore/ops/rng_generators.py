"""Ops: torch.Generator objects in a jitted function. A generator from outside (an argument, a global, an attribute)
is an input of the program, a GeneratorProxy: random ops given generator= draw from the caller's generator object
when the program runs (advancing it as eager does, leaving the global generator alone), and its methods
(manual_seed, seed, initial_seed, get_state, set_state) are lines that run then, in program order. torch.Generator()
inside the function makes a new generator on every call, as eager does.
"""
from __future__ import annotations

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir import devices
from jitcore.ir.proxies import IntegerProxy, Proxy, TensorProxy
from jitcore.ir.symbol import EAGER_KERNELS, BoundSymbol, Symbol, Tag
from jitcore.ir.trace import get_tracectx
from jitcore.ops.utils import check

# lines that read or change a generator's state: never merged, moved, dropped or recomputed (RANDOM, DONT_DCE)
_TAGS = (Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE, Tag.RANDOM)
METHODS = ("manual_seed", "seed", "initial_seed", "get_state", "set_state")


class GeneratorProxy(Proxy):
    """A torch.Generator the program draws from: an input (found through its provenance on every call) or one the
    program makes. `device`: the generator's device (checked by the prologue for an input)."""

    __slots__ = ("device", "state_size")
    prefix = "gen"

    def __init__(self, device, state_size: int, name=None):
        super().__init__(name)
        self.device, self.state_size = devices.to_device(device), state_size

    def replace_name(self, name):
        return GeneratorProxy(self.device, self.state_size, name=name)

    def type_string(self) -> str:
        return f"Generator({self.device})"

    def manual_seed(self, seed):
        _record("manual_seed", self, (seed,), None)
        return self

    def set_state(self, new_state):
        if not isinstance(new_state, (TensorProxy, torch.Tensor)):
            raise TypeError(f"expected a torch.ByteTensor, but got {type(new_state).__name__}")
        _record("set_state", self, (new_state,), None)
        return self

    def seed(self):
        return _record("seed", self, (), _number("seed"))

    def initial_seed(self):
        return _record("initial_seed", self, (), _number("initial_seed"))

    def get_state(self):
        return _record("get_state", self, (), TensorProxy((self.state_size,), torch.uint8, devices.to_device("cpu"),
                                                          False))

    def __getattr__(self, name):  # (an AttributeError: passes probe attributes with getattr(x, name, default))
        raise AttributeError(f"torch.Generator.{name} is not supported inside a jitted function (its methods "
                             f"{', '.join(METHODS)} and .device run with the program); call it outside")


def _number(what: str) -> IntegerProxy:
    """A number known only when the program runs (no expression: Python control flow on it is refused)."""
    out = IntegerProxy(0)
    out.expr = None
    get_tracectx().extra.setdefault("per_call", {})[out.name] = f"generator.{what}()"
    return out


def _record(method: str, gen, args: tuple, out):
    get_tracectx().record(BoundSymbol(generator_call, (method, gen, *args), {}, out))
    return out


def _call_printer(bsym, printer):
    method, gen, *args = bsym.args
    call = f"{printer.value(gen)}.{method}({', '.join(printer.value(a) for a in args)})"
    return call if bsym.output is None else f"{bsym.output.name} = {call}"


def _call_meta(*args):
    raise AssertionError("generator_call is recorded by GeneratorProxy's methods")


def _run_call(method, gen, *args):
    return getattr(gen, method)(*args)


generator_call = Symbol("generators.call", "generator_call", meta=_call_meta, tags=_TAGS, module="",
                        printer=_call_printer)
EAGER_KERNELS[generator_call.id] = _run_call


def _new_printer(bsym, printer):
    return f"{bsym.output.name} = {printer.const(torch.Generator)}({printer.value(bsym.args[0])})"


def _new_meta(device):
    raise AssertionError("new_generator is recorded by new_generator_line")


new_generator = Symbol("generators.new", "new_generator", meta=_new_meta, tags=_TAGS, module="",
                       printer=_new_printer)
EAGER_KERNELS[new_generator.id] = torch.Generator


def new_generator_line(device="cpu"):
    """torch.Generator(device) inside the function: a new generator on every call (seeded from the clock by torch, as
    eager's is, until the program seeds it)."""
    if isinstance(device, Proxy):
        raise UnsupportedError("torch.Generator", "torch.Generator(device) with a device the program computed",
                               hint="pass a constant device")
    device = devices.to_device(device)
    out = GeneratorProxy(device, _state_size(torch.Generator(device)))
    get_tracectx().record(BoundSymbol(new_generator, (device,), {}, out))
    return out


def _state_size(gen) -> int:
    return int(gen.get_state().numel())


def generator_input(gen: torch.Generator) -> GeneratorProxy:
    """The proxy of a generator from outside (the frontend makes it an input)."""
    return GeneratorProxy(gen.device, _state_size(gen))


def gen_kwargs(generator) -> dict:
    """{"generator": g} for a random prim's line when the user gave one, else {} (the global generator)."""
    if generator is None:
        return {}
    check(isinstance(generator, GeneratorProxy), lambda: f"generator={generator!r}: expected a torch.Generator the "
                                                         "program draws from (found through the jitted function)")
    return {"generator": generator}
