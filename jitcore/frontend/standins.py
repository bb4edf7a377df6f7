"""Frontend: stand-ins for what user code calls inside a jitted function, which the frontend's context hands the
interpreter in place of the real callable (JitContext._lookaside): torch.Tensor's unbound methods called on proxies,
random draws with no tensor argument, torch.Size of symbolic sizes, ops given RangeLists, refusals of what cannot
run inside a traced program (optimizers, gradient computations, files opened by user code), and nn.Module's
backward-hook machinery.
"""
from __future__ import annotations

import builtins
import io
import pathlib

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir import ranges
from jitcore.ir.proxies import TensorProxy, as_size
from jitcore.ir.pytree import tree_flatten
from jitcore.ops import rng_generators, torch_map
from jitcore.ops.opaque import draws_random, opaque_symbol


def unbound_tensor_method(fn):
    name = fn.__name__

    def call(self, *args, **kwargs):
        if isinstance(self, TensorProxy):
            return getattr(self, name)(*args, **kwargs)
        return fn(self, *args, **kwargs)

    return call


def draws_random_torch(fn) -> bool:
    return torch_map.is_torch_callable(fn) and draws_random(fn)


def tensorless_draw(fn):
    """A torch callable that draws random numbers: called with no tensor argument (torch.randperm(n)), or with a
    generator the program draws from (which torch's argument parser would refuse), it is recorded as its opaque op,
    which the torch executor runs on every call; with tensors it runs natively, and their __torch_function__ records
    it as before."""

    def call(*args, **kwargs):
        leaves = tree_flatten((args, kwargs))[0]
        if any(isinstance(a, (torch.Tensor, TensorProxy)) for a in leaves) and \
                not any(isinstance(a, rng_generators.GeneratorProxy) for a in leaves):
            return fn(*args, **kwargs)
        return opaque_symbol(fn)(*args, **kwargs)

    return call


A_SIZE = torch.Size()


def size(*args, **kwargs):
    if len(args) == 1 and not kwargs and isinstance(args[0], (tuple, list)):
        return as_size(args[0])
    return torch.Size(*args, **kwargs)


def range_lists_pinned(op, takes_ranges: bool):
    """op, called with the RangeLists among its arguments pinned; an op that takes ranges (torch.tensor) gets its data
    argument's range instead, which it records symbolically."""
    def call(*args, **kwargs):
        if takes_ranges:
            args, kwargs = ranges.range_data(args, kwargs)
        ranges.pin_within((args, kwargs))
        return op(*args, **kwargs)

    return call


def refused_inside(fn, from_user=lambda: True):
    """A stand-in raising UnsupportedError for what cannot run inside a traced program, or None: the methods of an
    optimizer, an LR scheduler or a grad scaler (run natively, they would update the real parameters once, while
    tracing, and the program would do nothing on later calls), in-place gradient clipping (likewise), gradient
    computations (the program's backward is made after it is traced), and files opened by user code (from_user():
    the caller is user code; read once while tracing, a file's contents were baked into the program, and writes
    happened once)."""
    mod = getattr(fn, "__module__", None) or ""
    if _is_file_call(fn) and from_user():
        what, hint = (f"{getattr(fn, '__qualname__', fn)}() inside a jitted function: the file would be read or "
                      "written once, while the function is traced, and later calls would reuse what was read then"), \
            "read or write the file outside the jitted function and pass what you read in as an argument"
    elif mod.startswith(("torch.optim", "torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler")):
        what, hint = (f"{getattr(fn, '__qualname__', fn)} ({mod}) inside a jitted function: an optimizer, scheduler "
                      "or grad scaler reads and updates the real parameters and its own state, which a traced "
                      "program cannot replay"), "call opt.step(), opt.zero_grad(), scheduler.step() and the grad " \
                                                "scaler outside the jitted function; jit the model or the loss"
    elif mod.startswith("torch.nn.utils.clip_grad") and getattr(fn, "__name__", "").endswith("_"):
        what, hint = (f"{getattr(fn, '__qualname__', fn)} ({mod}) inside a jitted function: gradient clipping reads "
                      "and rescales the parameters' real .grad tensors, which a traced program cannot replay"), \
            "clip after loss.backward(), outside the jitted function (before opt.step())"
    elif fn in _GRADIENT_CALLS:
        what, hint = (f"{getattr(fn, '__qualname__', fn)} inside a jitted function: the program's backward is built "
                      "from the whole program, after it is traced"), "return the loss and call loss.backward() (or " \
                                                                    "torch.autograd.grad) outside the jitted function"
    else:
        return None

    def refuse(*args, **kwargs):
        raise UnsupportedError("callable", what, hint=hint)

    return refuse


_GRADIENT_CALLS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
_FILE_CALLS = frozenset({builtins.open, io.open, pathlib.Path.open, pathlib.Path.read_text, pathlib.Path.read_bytes,
                         pathlib.Path.write_text, pathlib.Path.write_bytes})


def _is_file_call(fn) -> bool:
    try:
        return fn in _FILE_CALLS or getattr(fn, "__func__", None) in _FILE_CALLS
    except TypeError:  # (an unhashable callable)
        return False


class BackwardHookStandIn:
    """What nn.Module's call gets for torch.utils.hooks.BackwardHook inside a jitted function. The hooks of a module
    with backward hooks (register_full_backward_hook, register_full_backward_pre_hook) need the gradients of the
    module's own inputs and outputs, which the compiled backward (one autograd node for the program) does not hand
    out: where eager would attach them (grad mode on, a tensor that requires grad), they are refused, not
    dropped; elsewhere they never run in eager either."""

    def __init__(self, module, *args, **kwargs):
        self.module = module

    def _unused(self, args):
        leaves = tree_flatten(args)[0]
        if torch.is_grad_enabled() and any(isinstance(a, TensorProxy) and a.requires_grad for a in leaves):
            raise UnsupportedError(
                "module backward hooks", f"{type(self.module).__name__} has backward hooks (register_full_backward_"
                "hook or register_full_backward_pre_hook); a jitted program's backward is one autograd node, so they "
                "would never run",
                hint="register hooks on the output tensors instead (`y.register_hook(...)` outside the jitted call), "
                     "jit the module's children rather than the module, or remove the hooks")
        return args

    def setup_input_hook(self, args):
        return self._unused(args)

    def setup_output_hook(self, args):
        return self._unused(args)
