"""Frontend: rows of the numpy table (ndarrays.IMPLS) for layout, combining, conversions and creation-like functions.

As in numpy_table.py, the result dtype is numpy's (from stand-ins), the work is torch ops. Views stay views where numpy
gives views (reshape, transpose, basic indexing: writes through them reach the tensor the array came from); numpy
views that torch can only copy (np.flip, negative steps) have no row, so they are refused rather than copied.
"""
from __future__ import annotations

import numpy as np
import torch

from jitcore.frontend.ndarrays import NdarrayProxy, as_tensor_of, check_write, implements, torch_dtype, wrap
from jitcore.frontend.numpy_table import _axes, _device, _refuse, array_of, numpy_result, result_dtype


def _shape_args(args):
    """a.reshape(2, 3) and a.reshape((2, 3)) alike."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


# -- layout ---------------------------------------------------------------------------------------------------------
@implements(np.reshape)
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order != "C" or copy:
        _refuse(f"numpy.reshape with order={order!r}, copy={copy!r}")
    shape = newshape if shape is None else shape
    return wrap(array_of(a).tensor.reshape(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)),
                scalar=False)


@implements(method="reshape")
def reshape_method(a, *shape, order="C"):
    return reshape(a, _shape_args(shape), order)


@implements(np.transpose)
def transpose(a, axes=None):
    a = array_of(a)
    axes = tuple(reversed(range(a.ndim))) if axes is None else tuple(axes)
    numpy_result(np.transpose, a, axes)
    return wrap(a.tensor.permute(axes), scalar=False)


@implements(method="transpose")
def transpose_method(a, *axes):
    return transpose(a, _shape_args(axes) if axes and axes != (None,) else None)


@implements(np.swapaxes, method="swapaxes")
def swapaxes(a, axis1, axis2):
    a = array_of(a)
    numpy_result(np.swapaxes, a, axis1, axis2)
    return wrap(a.tensor.transpose(axis1, axis2), scalar=False)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    a = array_of(a)
    numpy_result(np.moveaxis, a, source, destination)
    return wrap(torch.movedim(a.tensor, source, destination), scalar=False)


@implements(np.squeeze, method="squeeze")
def squeeze(a, axis=None):
    a = array_of(a)
    dims = [d for d, s in enumerate(a.shape) if s == 1] if axis is None else _axes(axis, a.ndim)
    if any(a.shape[d] != 1 for d in dims):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return wrap(a.tensor.squeeze(tuple(dims)) if dims else a.tensor.view(a.tensor.shape), scalar=False)


@implements(np.expand_dims)
def expand_dims(a, axis):
    a = array_of(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = a.ndim + len(axes)
    t = a.tensor
    for d in sorted(int(x) % out_ndim for x in axes):
        t = t.unsqueeze(d)
    return wrap(t, scalar=False)


@implements(np.ravel, method="ravel")
def ravel(a, order="C"):
    if order != "C":
        _refuse(f"numpy.ravel with order={order!r}")
    return wrap(array_of(a).tensor.reshape(-1), scalar=False)


@implements(method="flatten")
def flatten(a, order="C"):
    if order != "C":
        _refuse(f"ndarray.flatten with order={order!r}")
    return wrap(a.tensor.reshape(-1).clone(), scalar=False)


@implements(np.broadcast_to)
def broadcast_to(a, shape):
    return wrap(array_of(a).tensor.expand(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)),
                scalar=False)


@implements(np.ascontiguousarray)
def ascontiguousarray(a, dtype=None):
    a = array_of(a, None if dtype is None else torch_dtype(dtype))
    return wrap((a.tensor if a.ndim else a.tensor.reshape(1)).contiguous(), scalar=False)


# -- conversions and copies -----------------------------------------------------------------------------------------
@implements(np.asarray, np.asanyarray)
def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    if order not in (None, "C", "K", "A") or like is not None:
        _refuse("numpy.asarray with order= or like=")
    if isinstance(a, NdarrayProxy) and not a.scalar and (dtype is None or np.dtype(dtype) == a.dtype) and not copy:
        return a  # the same array, as numpy gives it back
    out = array_of(a, None if dtype is None else torch_dtype(dtype))
    if copy and out is a:
        return wrap(out.tensor.clone(), scalar=False)
    return out if not out.scalar else wrap(out.tensor.clone(), scalar=False)


@implements(np.array)
def array(obj, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    if ndmin or like is not None:
        _refuse("numpy.array with ndmin= or like=")
    out = asarray(obj, dtype)
    if copy and (out is obj or (isinstance(obj, NdarrayProxy) and out.tensor is obj.tensor)):
        return wrap(out.tensor.clone(), scalar=False)
    return out


@implements(np.copy, method="copy")
def copy(a, order="K", subok=False):
    return wrap(array_of(a).tensor.clone(), scalar=False) if not (isinstance(a, NdarrayProxy) and a.scalar) else a


@implements(method="astype")
def astype(a, dtype, order="K", casting="unsafe", subok=True, copy=True):
    if casting != "unsafe":
        np.ones(1, a.dtype).astype(dtype, casting=casting)  # (numpy's error for a cast it refuses)
    want = torch_dtype(dtype)
    if want == a.tensor.dtype:
        return wrap(a.tensor.clone(), scalar=False) if copy else a
    return wrap(a.tensor.to(want), scalar=a.scalar)


@implements(method="fill")
def fill(a, value):
    check_write(a)
    a.tensor.copy_(as_tensor_of(value, a.tensor.dtype, a.tensor.device).expand(a.tensor.shape))


@implements(np.shape)
def shape(a):
    return array_of(a).shape


@implements(np.ndim)
def ndim(a):
    return array_of(a).ndim


@implements(np.size)
def size(a, axis=None):
    a = array_of(a)
    return a.size if axis is None else a.shape[axis]


# -- combining ------------------------------------------------------------------------------------------------------
def _all_of(arrays, dtype):
    return [array_of(x, dtype).tensor for x in arrays]


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    if out is not None:
        _refuse("numpy.concatenate with out=")
    want = result_dtype(np.concatenate, arrays, axis=axis, dtype=dtype, casting=casting)
    tensors = _all_of(arrays, want)
    if axis is None:
        return wrap(torch.cat([t.reshape(-1) for t in tensors]), scalar=False)
    return wrap(torch.cat(tensors, dim=axis), scalar=False)


@implements(np.stack)
def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    if out is not None:
        _refuse("numpy.stack with out=")
    want = result_dtype(np.stack, arrays, axis=axis, dtype=dtype, casting=casting)
    return wrap(torch.stack(_all_of(arrays, want), dim=axis), scalar=False)


@implements(np.where)
def where(condition, x=None, y=None):
    if x is None and y is None:
        return nonzero(condition)
    want = result_dtype(np.where, condition, x, y)
    device = _device(condition, x, y)
    c, tx, ty = (as_tensor_of(condition, torch.bool, device), as_tensor_of(x, want, device),
                 as_tensor_of(y, want, device))
    return wrap(torch.where(c, tx, ty))


@implements(np.nonzero, method="nonzero")
def nonzero(a):
    a = array_of(a)
    if a.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead.")
    return tuple(wrap(i, scalar=False) for i in torch.nonzero(a.tensor, as_tuple=True))


@implements(np.clip, method="clip")
def clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue):
    if out is not None:
        _refuse("numpy.clip with out=")
    lo = None if (a_min is np._NoValue and min is np._NoValue) else (min if a_min is np._NoValue else a_min)
    hi = None if (a_max is np._NoValue and max is np._NoValue) else (max if a_max is np._NoValue else a_max)
    want = result_dtype(np.clip, a, lo, hi)
    a = array_of(a)
    device = a.tensor.device
    t = a.tensor.to(want)
    if lo is not None:
        t = torch.maximum(t, as_tensor_of(lo, want, device))
    if hi is not None:
        t = torch.minimum(t, as_tensor_of(hi, want, device))
    return wrap(t if t is not a.tensor else t.clone(), scalar=a.scalar)


# matrix products torch's CPU kernels lack: float16 computed in float32, bool (or of ands) in int64, then cast back
_PRODUCT_IN = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.int64}


def _product(fn, a, b, want):
    work = _PRODUCT_IN.get(want, want)
    return wrap(fn(a.tensor.to(work), b.tensor.to(work)).to(want))


@implements(np.matmul)
def matmul(x1, x2, out=None, **kwargs):
    if out is not None or kwargs:
        _refuse("numpy.matmul with out= or other keywords")
    want = result_dtype(np.matmul, x1, x2)
    a, b = array_of(x1, want), array_of(x2, want)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    return _product(torch.matmul, a, b, want)


@implements(np.dot, method="dot")
def dot(a, b, out=None):
    if out is not None:
        _refuse("numpy.dot with out=")
    want = result_dtype(np.dot, a, b)
    a, b = array_of(a, want), array_of(b, want)
    if a.ndim == 0 or b.ndim == 0:
        return _product(torch.mul, a, b, want)
    if a.ndim > 2 or b.ndim > 2:
        _refuse("numpy.dot of arrays of more than 2 dimensions")
    return _product(torch.matmul, a, b, want)


@implements(np.outer)
def outer(a, b, out=None):
    if out is not None:
        _refuse("numpy.outer with out=")
    want = result_dtype(np.outer, a, b)
    return wrap(torch.outer(array_of(a, want).tensor.reshape(-1), array_of(b, want).tensor.reshape(-1)))


@implements(np.einsum)
def einsum(subscripts, *operands, out=None, dtype=None, optimize=False, **kwargs):
    if not isinstance(subscripts, str) or out is not None or kwargs:
        _refuse("numpy.einsum other than einsum('subscripts', *arrays)")
    want = result_dtype(np.einsum, subscripts, *operands, dtype=dtype)
    return wrap(torch.einsum(subscripts, *[array_of(x, want).tensor for x in operands]))


# -- arrays like another --------------------------------------------------------------------------------------------
def _like(np_fn, fill):
    def impl(a, *args, dtype=None, order="K", subok=True, shape=None, device=None, **kwargs):
        a = array_of(a)
        value = fill if fill is not None else (args[0] if args else kwargs.pop("fill_value"))
        want = result_dtype(np_fn, a, *args, dtype=dtype, shape=shape)
        size = tuple(a.shape) if shape is None else (tuple(shape) if isinstance(shape, (tuple, list)) else (shape,))
        t = as_tensor_of(value, want, a.tensor.device)
        return wrap(t.expand(size).clone(), scalar=False)
    implements(np_fn)(impl)


_like(np.zeros_like, 0)
_like(np.ones_like, 1)
_like(np.empty_like, 0)  # (its values are whatever memory held: zeros are one answer)
_like(np.full_like, None)


@implements(np.round, np.around, method="round")
def round_(a, decimals=0, out=None):
    if out is not None:
        _refuse("numpy.round with out=")
    a = array_of(a)
    want = result_dtype(np.round, a, decimals)
    if a.dtype.kind in "iub":
        if decimals >= 0:
            return wrap(a.tensor.clone(), scalar=a.scalar)
        _refuse("numpy.round of integers to negative decimals")
    return wrap(torch.round(a.tensor, decimals=decimals).to(want), scalar=a.scalar)


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, stable=None):
    if order is not None:
        _refuse("numpy.sort with order=")
    a = array_of(a)
    t = a.tensor.reshape(-1) if axis is None else a.tensor
    return wrap(torch.sort(t, dim=-1 if axis is None else axis).values, scalar=False)
