"""Frontend: the interpreter's entry to numpy on tensors (JitContext.lookaside asks `lookaside(fn, ...)`).

`t.numpy()` and `np.asarray(t)` give arrays backed by the tensor (jitcore/frontend/ndarrays.py); numpy functions called
on them go to the table (numpy_table.py, numpy_shapes.py); torch.from_numpy / as_tensor / tensor / asarray of them give
tensors back (from_numpy and as_tensor share the data: a view; the result never requires grad).
"""
from __future__ import annotations

import numpy as np
import torch

from jitcore.frontend import numpy_shapes
from jitcore.frontend.ndarrays import IMPLS, NdarrayProxy, call_numpy, has_array, has_tensor, tensor_numpy, tensor_of
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import torch_map


def _from_numpy(a):
    if a.scalar:
        raise TypeError(f"expected np.ndarray (got numpy.{a.dtype})")
    return tensor_of(a)


def _as_tensor(a, dtype=None, device=None):
    t = tensor_of(a) if not a.scalar else a.tensor.clone()
    if device is not None and torch.device(device) != t.device:
        t = t.to(device)
    return t if dtype is None or dtype == t.dtype else t.to(dtype)


def _tensor(a, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.tensor(a): a copy (torch.tensor of a tensor's data: the ops table's row)."""
    return torch_map.lookup(torch.tensor)(a.tensor, dtype=dtype, device=device, requires_grad=requires_grad)


def _asarray(a, *, dtype=None, device=None, copy=None, requires_grad=False):
    if copy or requires_grad:
        return _tensor(a, dtype=dtype, device=device, requires_grad=requires_grad)
    return _as_tensor(a, dtype, device)


_TORCH_CONVERSIONS = {torch.from_numpy: _from_numpy, torch.as_tensor: _as_tensor, torch.tensor: _tensor,
                      torch.asarray: _asarray}
_TENSOR_NUMPY = (torch.Tensor.numpy, torch._C.TensorBase.numpy, TensorProxy.numpy)


_OF_TENSORS = {np.asarray: numpy_shapes.asarray, np.asanyarray: numpy_shapes.asarray, np.array: numpy_shapes.array,
               np.ascontiguousarray: numpy_shapes.ascontiguousarray}


def _from_tensor(fn, native):
    """np.asarray(t) / np.array(t) of a tensor: numpy reads the tensor's memory (t.numpy()): asarray shares it."""
    impl = _OF_TENSORS[fn]

    def call(*args, **kwargs):
        if args and isinstance(args[0], TensorProxy) and not has_array(args[1:]) and not has_array(kwargs):
            return impl(tensor_numpy(args[0]), *args[1:], **kwargs)
        return native(*args, **kwargs)
    return call


def lookaside(fn, op, on_call_native):
    """What the interpreter calls for `fn` (op: what it would call otherwise, None for fn natively): numpy functions
    of the table on arguments holding arrays made from tensors, `t.numpy()`, and torch's conversions of such arrays
    (from_numpy, as_tensor, tensor, asarray). None where fn is none of those."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, TensorProxy) and getattr(fn, "__name__", None) == "numpy":
        return lambda *args, **kwargs: tensor_numpy(owner, *args, **kwargs)
    try:
        convert = _TORCH_CONVERSIONS.get(fn)
        known = convert is not None or fn in IMPLS or fn in _TENSOR_NUMPY
    except TypeError:  # (unhashable)
        return None
    if not known:
        return None

    def native(*args, **kwargs):
        if op is not None:
            return op(*args, **kwargs)
        on_call_native(fn, args, kwargs)
        return fn(*args, **kwargs)

    if fn in _TENSOR_NUMPY:
        return lambda t, *args, **kwargs: tensor_numpy(t, *args, **kwargs) if isinstance(t, TensorProxy) else \
            native(t, *args, **kwargs)
    if convert is not None:
        return lambda *args, **kwargs: convert(*args, **kwargs) if args and isinstance(args[0], NdarrayProxy) else \
            native(*args, **kwargs)
    def call(*args, **kwargs):  # (a tensor handed to a numpy function is refused by call_numpy, naming it)
        if has_array((args, kwargs)) or has_tensor((args, kwargs)):
            return call_numpy(fn, args, kwargs)
        return native(*args, **kwargs)

    return _from_tensor(fn, call) if fn in _OF_TENSORS else call
