"""Interpreter stage: an op's refusal (MetaError) raised as eager's exception type, where it enters user code.

Torch itself is asked: the op's torch function is run on zeros (small) or meta tensors shaped like the proxies it
was given; the exception torch raises gives the type (and eager's message, jitcore's own kept as a note). When
torch cannot be asked (no torch function, devices the meta tensors do not keep apart), the message decides
(`_GUESSES`), else RuntimeError, torch's usual type.
"""
from __future__ import annotations

import builtins
import math
import re
import warnings

import torch

from jitcore.errors import MetaError
from jitcore.ir.data_ptr import address_error, address_in
from jitcore.ir.proxies import NumberProxy, SymbolicSize, TensorProxy

_GUESSES = (  # (pattern of the message, eager's type)
    (re.compile(r"out of range|out of bounds|too many indices|index -?\d+ is out of"), IndexError),
    (re.compile(r"argument must be|must be Tensor, not|unsupported operand|unexpected keyword|positional argument"),
     TypeError),
)
_SMALL = 1 << 16  # elements: up to this many, torch is asked on the CPU with real zeros
_STANDARD = (IndexError, TypeError, ValueError, KeyError, NotImplementedError, RuntimeError)


def as_eager(e: MetaError) -> MetaError:
    """`e` as an instance of eager's exception type too (e itself when it is one already)."""
    if type(e) is not MetaError:
        return e
    address = address_in(e.op_call[1:]) if e.op_call is not None else None
    if address is not None:  # (`x * x.data_ptr()`: an address given to an op, where eager has a number)
        sym = e.op_call[0]
        return address_error(address.name, f"passing to {getattr(sym, 'name', sym)}()")
    eager = _ask_torch(e.op_call)
    if eager is not None:
        kind, message = _builtin_base(type(eager)), str(eager)
    else:
        text = str(e)
        kind = next((t for pattern, t in _GUESSES if pattern.search(text)), RuntimeError)
        message = None
    new = MetaError.like(kind)(message if message is not None else (e.args[0] if e.args else ""), *e.args[1:])
    if message is not None and e.args and message not in str(e.args[0]):
        new.add_note(f"jitcore: {e.args[0]}")
    new.where, new.op_call = e.where, e.op_call
    new.__cause__, new.__context__, new.__suppress_context__ = e.__cause__, e.__context__, e.__suppress_context__
    return new


def _builtin_base(t: type) -> type:
    """The first builtin exception class of t's MRO (torch's _LinAlgError is a RuntimeError)."""
    for k in t.__mro__:
        if k in _STANDARD or (k.__module__ == "builtins" and getattr(builtins, k.__name__, None) is k):
            return k
    return RuntimeError


def _ask_torch(op_call):
    """The exception torch raises for the same call on meta tensors, or None (it raised nothing, or cannot run)."""
    if op_call is None:
        return None
    sym, args, kwargs = op_call
    fn = sym.torch_fn  # (an op's torch function takes the op's arguments; a look-alike by name may not)
    if fn is None:
        return None
    try:
        small = _numel(args) + _numel(kwargs) <= _SMALL
        margs, mkwargs = _meta(args, small), _meta(kwargs, small)
    except Exception:  # a size proxy with no value: not asked
        return None
    if not _same_device(op_call):
        return None  # meta tensors do not keep devices apart: eager's device errors are not seen this way
    try:
        with torch.no_grad(), warnings.catch_warnings(), torch.random.fork_rng(devices=[]):  # (draws restored)
            warnings.simplefilter("ignore")
            fn(*margs, **mkwargs)
    except Exception as eager:
        return eager
    return None


def _shape(x: TensorProxy) -> tuple:
    return tuple(int(d.value) if isinstance(d, NumberProxy) else d for d in x.shape)


def _numel(x) -> int:
    if isinstance(x, TensorProxy):
        return math.prod(_shape(x))
    if type(x) in (list, tuple):
        return sum(_numel(v) for v in x)
    if type(x) is dict:
        return sum(_numel(v) for v in x.values())
    return 0


def _meta(x, small: bool):
    """Stand-ins for the op's arguments: zeros on the CPU when they are small (eager's kernels, eager's messages),
    else meta tensors (torch's meta kernels: the same types, messages sometimes worded otherwise)."""
    if isinstance(x, TensorProxy):
        return torch.zeros(_shape(x), dtype=x.dtype, device="cpu" if small else "meta")
    if isinstance(x, NumberProxy):
        if x.value is None:
            raise ValueError("no value")
        return x.value
    if type(x) in (list, tuple):
        return type(x)(_meta(v, small) for v in x)
    if type(x) is SymbolicSize:
        return torch.Size(_meta(v, small) for v in x)
    if type(x) is dict:
        return {k: _meta(v, small) for k, v in x.items()}
    return x


def _same_device(op_call) -> bool:
    devices = set()

    def visit(x):
        if isinstance(x, TensorProxy):
            devices.add(x.device)
        elif type(x) in (list, tuple):
            for v in x:
                visit(v)
        elif type(x) is dict:
            for v in x.values():
                visit(v)

    visit(op_call[1])
    visit(op_call[2])
    return len(devices) <= 1
