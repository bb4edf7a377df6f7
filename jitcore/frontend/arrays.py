"""Frontend helper: numpy arrays from outside handed to torch.from_numpy / torch.as_tensor inside a jitted function,
and numpy arrays passed as arguments (`argument_array`: an NdarrayProxy over such a tensor input).

Eager's tensor shares the array's memory: here it is a tensor input fetched per call (`Converted` provenance:
`torch.from_numpy(<the array>)` in the prologue), so the program reads the array's values as they are at the call and
its in-place writes into the tensor reach the array through the epilogue.
"""
from __future__ import annotations

import torch

from jitcore.errors import UnsupportedError
from jitcore.frontend.ndarrays import NdarrayProxy, has_array
from jitcore.guards.values import is_ndarray
from jitcore.interpreter.frame import pending_callables
from jitcore.interpreter.provenance import Converted
from jitcore.ops import torch_map

CONVERSIONS = (torch.from_numpy, torch.as_tensor)


def shares_memory(arr):
    """torch.from_numpy(arr) (a tensor sharing its memory), or None where torch cannot take it that way."""
    try:
        return torch.from_numpy(arr)
    except (TypeError, ValueError, RuntimeError):
        return None


def _dtype_of(arr):
    t = shares_memory(arr.reshape(-1)[:0])
    return None if t is None else t.dtype


def converted_next(frame, arr) -> bool:
    """Whether the array being loaded is the one argument of the torch.from_numpy / torch.as_tensor call the next
    instruction of `frame` makes (`torch.from_numpy(self.buf)`): its values are then read through that tensor, an
    input fetched per call, not natively (its contents need no guard)."""
    if frame is None or not any(x is c for x in pending_callables(frame, 1) for c in CONVERSIONS):
        return False
    return shares_memory(arr) is not None


def array_tensor(ctx, fn, runtime):
    """What the program calls for torch.from_numpy / torch.as_tensor (fn): of an array from outside (as_tensor: with
    no other dtype or device), the tensor input sharing its memory, one per array (ctx._arrays); else the op."""
    op = torch_map.lookup(fn)

    def call(*args, **kwargs):
        data = args[0] if args else kwargs.get("data")
        prov = runtime.external.get(id(data)) if is_ndarray(data) else None
        plain = prov is not None and (len(args) + len(kwargs) == 1 or (
            fn is torch.as_tensor and kwargs.get("device") in (None, "cpu") and
            kwargs.get("dtype") in (None, _dtype_of(data))))
        tensor = shares_memory(data) if plain else None
        if tensor is None:
            return op(*args, **kwargs)
        known = ctx._arrays.get(id(data))
        if known is None:
            known = ctx._arrays[id(data)] = ctx._tensor_input(tensor, Converted(prov, torch.from_numpy))
        return known

    return call


def argument_array(ctx, arr, prov):
    """A numpy array passed as an argument: an array over a tensor input sharing its memory (fetched per call as
    `torch.from_numpy(<the argument>)`, guarded on dtype and shape like a tensor; writes through it reach the array),
    so numpy functions on it are traced like those on `x.numpy()`. None for an array torch cannot share (a dtype
    torch lacks, negative strides, read-only): it is then read natively, guarded by its contents."""
    tensor = shares_memory(arr) if arr.flags.writeable else None
    if tensor is None:
        return None
    known = ctx._arrays.get(id(arr))
    if known is None:
        known = ctx._arrays[id(arr)] = ctx._tensor_input(tensor, Converted(prov, torch.from_numpy))
        ctx._arrays[id(known)] = arr  # (given_arrays: returned, it is the caller's array)
    # a numpy function with no torch row reads the caller's array natively, its contents guarded (as before)
    return NdarrayProxy(known, origin=(arr, lambda: ctx.guards.values.setdefault(prov, arr.copy())))


def given_arrays(output, known: dict):
    """The function's output with each array argument it returns as the argument itself (eager returns the caller's
    object; the epilogue fetches it again on every call), not a new array over the same memory."""
    if type(output) is NdarrayProxy and not output.scalar and is_ndarray(known.get(id(output.tensor))):
        return known[id(output.tensor)]
    if type(output) in (tuple, list):
        items = [given_arrays(x, known) for x in output]
        return output if all(a is b for a, b in zip(items, output)) else type(output)(items)
    if type(output) is dict:
        items = {k: given_arrays(v, known) for k, v in output.items()}
        return output if all(items[k] is v for k, v in output.items()) else items
    return output


def refuse_stored_arrays(side_effects):
    """An array made from a tensor stored outside the function (`self.cache = x.numpy()`, a global, an append to a
    list from outside) is refused: the epilogue hands back tensors and Python values, not arrays over them."""
    for e in side_effects:
        if has_array((e.value, e.args, e.kwargs)):
            raise UnsupportedError("numpy", f"a numpy array made from a tensor inside a jitted function stored outside "
                                   f"it ({e.kind} {e.key!r} of {e.target})",
                                   hint="return the array (returned arrays reach the caller as numpy arrays), or "
                                        "store torch.from_numpy(a) instead")
