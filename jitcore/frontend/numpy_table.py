"""Frontend: the table of numpy functions on arrays made from tensors (IMPLS of jitcore/frontend/ndarrays.py).

One row per numpy function: what torch ops it records. NumPy's semantics come from numpy itself: every row first
calls the numpy function on small stand-in arrays (ones of the same dtype and rank) with the same arguments, which
gives the result dtype of NumPy's promotion rules and NumPy's own errors (a bad axis, a cast `+=` refuses); the torch
ops then compute in that dtype. Functions with no row are refused by name (ndarrays.call_numpy).
"""
from __future__ import annotations

import inspect

import numpy as np
import torch

from jitcore.errors import UnsupportedError
from jitcore.frontend.ndarrays import (
    NdarrayProxy,
    as_tensor_of,
    check_write,
    constant_tensor,
    has_array,
    implements,
    numpy_dtype,
    torch_dtype,
    wrap,
)
from jitcore.ir.proxies import NumberProxy, TensorProxy


# -- stand-ins: numpy's answer for the dtype (and its errors) -------------------------------------------------------
def standin(x):
    """What numpy is given in place of x to find the result's dtype: ones of x's dtype and rank for an array."""
    if isinstance(x, NdarrayProxy):
        return x.dtype.type(1) if x.scalar else np.ones((1,) * x.ndim, x.dtype)
    if isinstance(x, NumberProxy):
        return type(x.value)(1)
    if isinstance(x, TensorProxy):
        return np.ones((1,) * x.ndim, numpy_dtype(x.dtype))
    if isinstance(x, np.ndarray):  # (a constant: its rank and dtype, so that shapes always agree)
        return np.ones((1,) * x.ndim, x.dtype)
    if type(x) in (list, tuple):
        return type(x)(standin(i) for i in x)
    return x


def numpy_result(fn, *args, **kwargs):
    """fn on stand-ins: numpy's result (its dtype is the answer), or numpy's error for these arguments."""
    with np.errstate(all="ignore"):
        return fn(*standin(args), **{k: standin(v) for k, v in kwargs.items()})


def result_dtype(fn, *args, **kwargs) -> torch.dtype:
    return torch_dtype(np.asarray(numpy_result(fn, *args, **kwargs)).dtype)


def _refuse(what: str):
    raise UnsupportedError("numpy", f"{what} on an array made from a tensor inside a jitted function is not "
                           "supported by jitcore", hint="compute it with torch ops on the tensor, or outside the "
                                                        "jitted function")


def _device(*xs):
    for x in xs:
        if isinstance(x, NdarrayProxy):
            return x.tensor.device
        if type(x) in (list, tuple):
            found = _device(*x)
            if found is not None:
                return found
    return None


def array_of(x, dtype=None) -> NdarrayProxy:
    """x (an array, a nested list holding arrays, a numpy or Python scalar) as an NdarrayProxy (np.asarray)."""
    if isinstance(x, NdarrayProxy):
        return x if dtype is None or x.tensor.dtype == dtype else wrap(x.tensor.to(dtype), scalar=False)
    if dtype is None:
        dtype = result_dtype(np.asarray, x)
    if type(x) in (list, tuple) and has_array(x):  # np.array([a, b]): stacked in their common dtype
        return wrap(torch.stack([array_of(i, dtype).tensor for i in x]), scalar=False)
    return wrap(as_tensor_of(x, dtype, None) if not isinstance(x, np.ndarray) else constant_tensor(x).to(dtype),
                scalar=False)


def _tensor(x, dtype, device):
    return as_tensor_of(x, dtype, device)


# -- ufuncs ---------------------------------------------------------------------------------------------------------
def _dtype_key(x):
    if isinstance(x, (NdarrayProxy, np.ndarray, np.generic)):
        return x.dtype
    v = x.value if isinstance(x, NumberProxy) else x
    if isinstance(v, bool):
        return np.dtype(bool)
    if isinstance(v, (int, float, complex)):
        return type(v)
    return np.asarray(v).dtype


def _loop(ufunc, inputs):
    """The dtypes numpy's loop takes its inputs in and gives its output in. resolve_dtypes takes a Python number's
    type as the default int/float (bool array ** 2 would be int64): the result's dtype (numpy's, from stand-ins)
    replaces the loop's output dtype wherever it appears."""
    loop = ufunc.resolve_dtypes(tuple(_dtype_key(x) for x in inputs) + (None,) * ufunc.nout)
    actual = np.asarray(numpy_result(ufunc, *inputs)).dtype if ufunc.nout == 1 else loop[-1]
    if actual == loop[ufunc.nin]:
        return loop
    return tuple(actual if d == loop[ufunc.nin] else d for d in loop)


# ufuncs torch's kernels lack for bool that numpy computes on 0/1 (a bool result: 2 -> True, as numpy's loops give)
_BOOL_AS_INT = {np.absolute, np.floor, np.ceil, np.trunc, np.rint, np.square, np.sign, np.maximum, np.minimum, np.fmax,
                np.fmin, np.add, np.multiply, np.positive, np.power}


def _computed(ufunc, dtype: torch.dtype) -> torch.dtype:
    """The dtype the torch op computes in: float16 loops in float32 (rounded back, as numpy's float16 loops do;
    torch's CPU lacks some float16 kernels), bool loops of arithmetic in uint8."""
    if dtype == torch.float16:
        return torch.float32
    return torch.uint8 if dtype == torch.bool and ufunc in _BOOL_AS_INT else dtype


def _ufunc(ufunc, torch_fn):
    def impl(*inputs, out=None, **kwargs):
        if kwargs:
            _refuse(f"numpy.{ufunc.__name__} with {', '.join(kwargs)}=")
        if type(out) is tuple:
            out = out[0] if len(out) == 1 else _refuse(f"numpy.{ufunc.__name__} with several out= arrays")
        if out is not None and not isinstance(out, NdarrayProxy):
            _refuse(f"numpy.{ufunc.__name__} with out= an array from outside")
        if out is not None and out.scalar:
            raise TypeError("return arrays must be of ArrayType")
        if out is not None:
            check_write(out)
        numpy_result(ufunc, *inputs, **({"out": out} if out is not None else {}))
        loop = _loop(ufunc, inputs)
        device = _device(*inputs, out)
        # (float16 loops compute in float32 and round, as numpy's do: torch's CPU lacks some float16 kernels)
        tensors = [_tensor(x, _computed(ufunc, torch_dtype(d)), device) for x, d in zip(inputs, loop)]
        res = torch_fn(*tensors)
        want = torch_dtype(loop[ufunc.nin])
        res = res if res.dtype == want else res.to(want)
        if out is not None:
            out.tensor.copy_(res if res.dtype == out.tensor.dtype else res.to(out.tensor.dtype))
            return out
        return wrap(res)
    implements(ufunc)(impl)


def _positive(t):
    return t.clone()


_UFUNCS = {
    np.add: torch.add, np.subtract: torch.sub, np.multiply: torch.mul, np.true_divide: torch.true_divide,
    np.floor_divide: torch.floor_divide, np.remainder: torch.remainder, np.fmod: torch.fmod, np.power: torch.pow,
    np.float_power: torch.pow, np.negative: torch.neg, np.positive: _positive, np.absolute: torch.abs,
    np.sign: torch.sign, np.sqrt: torch.sqrt, np.square: torch.square, np.reciprocal: torch.reciprocal,
    np.exp: torch.exp, np.exp2: torch.exp2, np.expm1: torch.expm1, np.log: torch.log, np.log2: torch.log2,
    np.log10: torch.log10, np.log1p: torch.log1p, np.logaddexp: torch.logaddexp, np.logaddexp2: torch.logaddexp2,
    np.sin: torch.sin, np.cos: torch.cos, np.tan: torch.tan, np.arcsin: torch.asin, np.arccos: torch.acos,
    np.arctan: torch.atan, np.arctan2: torch.atan2, np.sinh: torch.sinh, np.cosh: torch.cosh, np.tanh: torch.tanh,
    np.arcsinh: torch.asinh, np.arccosh: torch.acosh, np.arctanh: torch.atanh, np.hypot: torch.hypot,
    np.deg2rad: torch.deg2rad, np.rad2deg: torch.rad2deg, np.floor: torch.floor, np.ceil: torch.ceil,
    np.trunc: torch.trunc, np.rint: torch.round, np.copysign: torch.copysign, np.heaviside: torch.heaviside,
    np.maximum: torch.maximum, np.minimum: torch.minimum, np.fmax: torch.fmax, np.fmin: torch.fmin,
    np.isnan: torch.isnan, np.isinf: torch.isinf, np.isfinite: torch.isfinite, np.signbit: torch.signbit,
    np.logical_and: torch.logical_and, np.logical_or: torch.logical_or, np.logical_xor: torch.logical_xor,
    np.logical_not: torch.logical_not, np.bitwise_and: torch.bitwise_and, np.bitwise_or: torch.bitwise_or,
    np.bitwise_xor: torch.bitwise_xor, np.invert: torch.bitwise_not, np.left_shift: torch.bitwise_left_shift,
    np.right_shift: torch.bitwise_right_shift, np.equal: torch.eq, np.not_equal: torch.ne, np.less: torch.lt,
    np.less_equal: torch.le, np.greater: torch.gt, np.greater_equal: torch.ge, np.conjugate: torch.conj_physical,
}
for _u, _t in _UFUNCS.items():
    _ufunc(_u, _t)
del _u, _t


# -- reductions -----------------------------------------------------------------------------------------------------
def _axes(axis, ndim):
    """numpy's axis= as a tuple of dims (None: every dim)."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(int(a) % max(ndim, 1) for a in axes)


def _bound(fn, args, kwargs):
    params = inspect.signature(fn).bind(*args, **kwargs)
    return {k: v for k, v in params.arguments.items() if v is not np._NoValue}


def _reduction(fns, method, reduce, cast=True, refused=("out", "where", "initial")):
    """A numpy reduction: `reduce(t, dims, keepdims, **rest)` on the array's tensor (cast to the result dtype when
    `cast`), dims the tuple of axes reduced (never empty: axis=() is refused)."""
    np_fn = fns[0]

    def impl(*args, **kwargs):
        bound = _bound(np_fn, args, kwargs)
        for name in refused:
            if bound.get(name) is not None:
                _refuse(f"numpy.{np_fn.__name__} with {name}=")
        a = array_of(bound.pop("a"))
        dtype = result_dtype(np_fn, a, **bound)
        keepdims = bool(bound.pop("keepdims", False))
        axis = bound.pop("axis", None)
        bound.pop("dtype", None)
        dims = _axes(axis, a.ndim)
        if not dims and a.ndim:
            _refuse(f"numpy.{np_fn.__name__} with axis=()")
        t = a.tensor.to(dtype) if cast and a.tensor.dtype != dtype else a.tensor
        res = reduce(t, dims if a.ndim else None, keepdims, **bound)
        return wrap(res if res.dtype == dtype else res.to(dtype))
    implements(*fns, method=method)(impl)


def _sum(t, dims, keepdims):
    return torch.sum(t, dim=dims, keepdim=keepdims) if dims is not None else t.clone()


def _mean(t, dims, keepdims):
    return torch.mean(t, dim=dims, keepdim=keepdims) if dims is not None else t.clone()


def _prod(t, dims, keepdims):
    if dims is None:
        return t.clone()
    for d in sorted(dims, reverse=True):
        t = torch.prod(t, dim=d, keepdim=True)
    return t if keepdims else t.reshape([s for i, s in enumerate(t.shape) if i not in dims])


def _extreme(fn):
    return lambda t, dims, keepdims: fn(t, dim=dims, keepdim=keepdims) if dims is not None else t.clone()


def _moment(fn):
    def reduce(t, dims, keepdims, ddof=0, correction=None):
        c = correction if correction is not None else ddof
        return fn(t, dim=dims, correction=c, keepdim=keepdims) if dims is not None else fn(t.reshape(1), correction=c)
    return reduce


def _logical(fn):
    return lambda t, dims, keepdims: fn(t, dim=dims, keepdim=keepdims) if dims is not None else t.to(torch.bool)


_reduction((np.sum,), "sum", _sum)
_reduction((np.mean,), "mean", _mean)
_reduction((np.prod,), "prod", _prod)
_reduction((np.max, np.amax), "max", _extreme(torch.amax))
_reduction((np.min, np.amin), "min", _extreme(torch.amin))
_reduction((np.std,), "std", _moment(torch.std), refused=("out", "where", "mean"))
_reduction((np.var,), "var", _moment(torch.var), refused=("out", "where", "mean"))
_reduction((np.any,), "any", _logical(torch.any), cast=False)
_reduction((np.all,), "all", _logical(torch.all), cast=False)


def _arg_extreme(np_fn, torch_fn, method):
    def impl(a, axis=None, out=None, *, keepdims=False):
        if out is not None:
            _refuse(f"numpy.{np_fn.__name__} with out=")
        a = array_of(a)
        numpy_result(np_fn, a, axis=axis, keepdims=keepdims)
        if a.tensor.dtype == torch.bool:  # (torch's argmax/argmin take no bool: False < True as 0 < 1)
            a = wrap(a.tensor.to(torch.uint8), scalar=False)
        if axis is None:
            res = torch_fn(a.tensor.reshape(-1), dim=0)
            return wrap(res.reshape((1,) * a.ndim) if keepdims else res)
        return wrap(torch_fn(a.tensor, dim=axis, keepdim=bool(keepdims)))
    implements(np_fn, method=method)(impl)


_arg_extreme(np.argmax, torch.argmax, "argmax")
_arg_extreme(np.argmin, torch.argmin, "argmin")


def _cumulative(np_fn, torch_fn, method):
    def impl(a, axis=None, dtype=None, out=None):
        if out is not None:
            _refuse(f"numpy.{np_fn.__name__} with out=")
        a = array_of(a)
        want = result_dtype(np_fn, a, axis=axis, dtype=dtype)
        t = a.tensor.reshape(-1) if axis is None or a.ndim == 0 else a.tensor
        return wrap(torch_fn(t.to(want), dim=0 if axis is None else axis), scalar=False)
    implements(np_fn, method=method)(impl)


_cumulative(np.cumsum, torch.cumsum, "cumsum")
_cumulative(np.cumprod, torch.cumprod, "cumprod")
