"""Frontend: numpy arrays made from tensors inside a jitted function (`x.numpy()`, `np.asarray(t)`).

Such an array is an `NdarrayProxy`: a value of the interpreter wrapping the TensorProxy that holds its data (the same
proxy or a view of it, so writes through the array reach the tensor as in eager, where they share memory). NumPy
calls on it go to the table of jitcore/frontend/numpy_table.py (IMPLS, keyed by numpy function), which records the
equivalent torch ops with NumPy's dtypes; a returned array reaches the caller as a real numpy.ndarray (pytree node).
"""
from __future__ import annotations

import operator
import weakref

import numpy as np
import optree
import torch

from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import NAMESPACE
from jitcore.ir.symbol import Tag, recorded_without_grad, register_array_argument
from jitcore.ir.views import VIEW_OPS
from jitcore.ops import torch_layout, torch_map

IMPLS: dict = {}  # numpy function (ufunc, dispatcher) -> implementation over NdarrayProxy (numpy_table.py fills it)
METHODS: dict = {}  # ndarray method name -> implementation taking the array first


def implements(*fns, method: str | None = None):
    """Register an implementation for numpy functions `fns` (and the ndarray method `method`)."""
    def register(impl):
        for fn in fns:
            IMPLS[fn] = impl
        if method is not None:
            METHODS[method] = impl
        return impl
    return register


# -- dtypes --------------------------------------------------------------------------------------------------------
_TO_TORCH: dict = {}
_TO_NUMPY: dict = {}


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (anything np.dtype takes: np.float32, 'int64', float); refuses the others."""
    d = np.dtype(dtype)
    found = _TO_TORCH.get(d)
    if found is None:
        try:
            found = _TO_TORCH[d] = torch.from_numpy(np.empty(0, d)).dtype
        except TypeError:
            raise UnsupportedError("numpy", f"numpy arrays of dtype {d} inside a jitted function: torch has no such "
                                   "dtype", hint="convert to a numeric dtype, or compute this outside") from None
    return found


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    found = _TO_NUMPY.get(dtype)
    if found is None:
        found = _TO_NUMPY[dtype] = torch.empty(0, dtype=dtype).numpy().dtype
    return found


# -- the array value ------------------------------------------------------------------------------------------------
class NdarrayProxy:
    """A numpy array (scalar=False) or numpy scalar (scalar=True: np.float32(...), what reductions over every axis
    give) whose data is `tensor`. Its dtype is numpy's; ops follow NumPy's promotion rules, not torch's."""

    __slots__ = ("origin", "scalar", "tensor")
    __array_priority__ = 1e6  # ndarray's operators give way to ours (`np.ones(3) + a`)
    __hash__ = None  # arrays are unhashable

    def __init__(self, tensor: TensorProxy, scalar: bool = False, origin=None):
        # origin: for an array argument, (the caller's array, a callable guarding its contents): see _unmapped
        self.tensor, self.scalar, self.origin = tensor, scalar and tensor.ndim == 0, origin

    # -- metadata
    @property
    def eager_type(self) -> type:
        """The class eager's value has (type(a), isinstance)."""
        return self.dtype.type if self.scalar else np.ndarray

    @property
    def shape(self):
        return tuple(self.tensor.shape)

    @property
    def ndim(self) -> int:
        return self.tensor.ndim

    @property
    def dtype(self):
        return numpy_dtype(self.tensor.dtype)

    @property
    def size(self):
        return self.tensor.numel()

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.itemsize

    @property
    def T(self):
        return call_numpy(np.transpose, (self,), {})

    @property
    def real(self):
        return self if not self.dtype.kind == "c" else wrap(self.tensor.real)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.tensor.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self)))

    def __getattr__(self, name: str):
        impl = METHODS.get(name)
        if impl is None:
            if name.startswith("__") or not hasattr(np.ndarray, name):
                raise AttributeError(f"'numpy.ndarray' object has no attribute '{name}'")
            raise UnsupportedError("numpy", f"ndarray.{name} on an array made from a tensor inside a jitted function "
                                   "has no torch equivalent in jitcore", hint=_HINT)
        return lambda *args, **kwargs: impl(self, *args, **kwargs)

    # -- values Python needs now (read from the call's real data and guarded, as for tensors)
    def __bool__(self):
        if self.size != 1:
            raise ValueError("The truth value of an array with more than one element is ambiguous. Use a.any() or "
                             "a.all()")
        return bool(self.tensor.reshape(()))

    def __float__(self):
        return float(self._one("float"))

    def __int__(self):
        return int(self._one("int"))

    def __index__(self):
        if self.ndim != 0 or self.dtype.kind not in "iub":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return operator.index(self.tensor)

    def _one(self, what):
        if self.size != 1:
            raise TypeError(f"only length-1 arrays can be converted to Python scalars ({what})")
        return self.tensor.reshape(())

    def item(self, *args):
        t = self.tensor if not args else self[args if len(args) > 1 else args[0]].tensor
        return t.item()

    def tolist(self):
        return self.tensor.tolist()

    def __repr__(self):
        if self.origin is not None and not _written(self.tensor):
            return repr(_native(self))
        raise DataDependentError("converting a numpy array made from a tensor to text needs its data")

    def __str__(self):
        if self.origin is not None and not _written(self.tensor):
            return str(_native(self))
        raise DataDependentError("converting a numpy array made from a tensor to text needs its data")

    def __format__(self, spec):
        raise DataDependentError("formatting a numpy array made from a tensor needs its data")

    def __array__(self, *args, **kwargs):
        raise DataDependentError("numpy needs the data of an array made from a tensor here (e.g. writing it into an "
                                 "array made inside the function with np.zeros, or a numpy function jitcore does not "
                                 "map to torch); make such arrays from the tensor's array (np.zeros_like(a), "
                                 "np.concatenate) or use torch ops")

    # -- numpy's protocols: functions called on it natively (np.sin(a), np.sum(a)) come here
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            raise UnsupportedError("numpy", f"numpy.{ufunc.__name__}.{method} on an array made from a tensor inside a "
                                   "jitted function", hint=_HINT)
        return call_numpy(ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return call_numpy(func, args, kwargs)

    # -- indexing (basic indexing gives views, as in numpy; a single element is a scalar, a copy)
    def __getitem__(self, idx):
        out = self.tensor[to_torch_index(idx)]
        if out.ndim == 0 and not _has_ellipsis(idx):
            return NdarrayProxy(out.clone(), scalar=True)
        return NdarrayProxy(out)

    def __setitem__(self, idx, value):
        if self.scalar:
            raise TypeError(f"'numpy.{self.dtype}' object does not support item assignment")
        check_write(self)
        value = as_tensor_of(value, self.tensor.dtype, self.tensor.device)
        self.tensor[to_torch_index(idx)] = value

    def __abs__(self):
        return call_numpy(np.absolute, (self,), {})

    def __neg__(self):
        return call_numpy(np.negative, (self,), {})

    def __pos__(self):
        return call_numpy(np.positive, (self,), {})

    def __invert__(self):
        return call_numpy(np.invert, (self,), {})

    def __matmul__(self, other):
        return call_numpy(np.matmul, (self, other), {})

    def __rmatmul__(self, other):
        return call_numpy(np.matmul, (other, self), {})


_HINT = "compute it with torch ops on the tensor (torch.* has most of numpy), or outside the jitted function"

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
           "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "lshift": np.left_shift, "rshift": np.right_shift}
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal}


def _with_tensor(self, other, ufunc):
    """`a + x` with x a tensor: a numpy scalar gives way to the tensor's operator (eager's result is a tensor); an
    array refuses, as eager's does."""
    if self.scalar:
        return NotImplemented
    raise TypeError(f"unsupported operand type(s) for {ufunc.__name__}: 'numpy.ndarray' and 'Tensor'")


def _binary(ufunc):
    return lambda self, other: _with_tensor(self, other, ufunc) if isinstance(other, TensorProxy) else \
        call_numpy(ufunc, (self, other), {})


def _reflected(ufunc):
    return lambda self, other: _with_tensor(self, other, ufunc) if isinstance(other, TensorProxy) else \
        call_numpy(ufunc, (other, self), {})


def _inplace(ufunc):
    def method(self, other):
        if isinstance(other, TensorProxy):
            return _with_tensor(self, other, ufunc)
        call_numpy(ufunc, (self, other), {"out": self})
        return self
    return method


for _name, _ufunc in _BINARY.items():
    setattr(NdarrayProxy, f"__{_name}__", _binary(_ufunc))
    setattr(NdarrayProxy, f"__r{_name}__", _reflected(_ufunc))
    setattr(NdarrayProxy, f"__i{_name}__", _inplace(_ufunc))
for _name, _ufunc in _COMPARE.items():
    setattr(NdarrayProxy, f"__{_name}__", _binary(_ufunc))
NdarrayProxy.__imatmul__ = _inplace(np.matmul)


def _pow(self, other):
    """numpy's `a ** 2` is np.square(a) (a bool array's square is int8, its np.power(a, 2) int64)."""
    if type(other) is int and other == 2:
        return call_numpy(np.square, (self,), {})
    return _binary(np.power)(self, other)


def _ipow(self, other):
    if type(other) is int and other == 2:
        call_numpy(np.square, (self,), {"out": self})
        return self
    return _inplace(np.power)(self, other)


NdarrayProxy.__pow__, NdarrayProxy.__ipow__ = _pow, _ipow
del _name, _ufunc


def wrap(tensor: TensorProxy, scalar: bool | None = None) -> NdarrayProxy:
    """An array (or, for a 0-d result when scalar is None, a numpy scalar) holding `tensor`."""
    return NdarrayProxy(tensor, tensor.ndim == 0 if scalar is None else scalar)


def _has_ellipsis(idx) -> bool:
    return idx is Ellipsis or (type(idx) is tuple and any(i is Ellipsis for i in idx))


def to_torch_index(idx):
    """An index into an array, as a tensor index: arrays inside it become their tensors (bool masks, int arrays)."""
    if type(idx) is tuple:
        return tuple(to_torch_index(i) for i in idx)
    if type(idx) is slice and idx.step is not None and not isinstance(idx.step, NumberProxy) and idx.step < 0:
        raise UnsupportedError("numpy", "a negative step (a[::-1]) into an array made from a tensor: numpy's result is "
                               "a view, which torch cannot make",
                               hint="flip with torch: torch.flip(torch.from_numpy(a), dims)")
    if isinstance(idx, NdarrayProxy):
        return idx.tensor
    if isinstance(idx, np.ndarray):
        return constant_tensor(idx)
    if type(idx) is list:
        return constant_tensor(np.asarray(idx))
    return idx


def constant_tensor(arr, device=None):
    """A numpy array (or scalar) from outside the trace, as a tensor constant of the trace (its numpy dtype)."""
    arr = np.asarray(arr)
    return torch_map.lookup(torch.tensor)(arr.tolist(), dtype=torch_dtype(arr.dtype), device=device)


def as_tensor_of(value, dtype, device):
    """`value` (array, numpy or Python scalar, list) as a tensor of `dtype`, cast as numpy's assignment casts."""
    if isinstance(value, NdarrayProxy):
        t = value.tensor
    elif isinstance(value, TensorProxy):
        t = value
    elif isinstance(value, NumberProxy) or isinstance(value, (bool, int, float, complex)):
        return torch_map.lookup(torch.full)((), value, dtype=dtype, device=device)
    else:
        t = constant_tensor(value, device)
    return t if t.dtype == dtype else t.to(dtype)


def has_array(tree) -> bool:
    """Whether an NdarrayProxy is among `tree`'s items (arguments, lists of arrays)."""
    if isinstance(tree, NdarrayProxy):
        return True
    if type(tree) in (tuple, list):
        return any(has_array(x) for x in tree)
    if type(tree) is dict:
        return any(has_array(x) for x in tree.values())
    return False


def has_tensor(tree) -> bool:
    if isinstance(tree, TensorProxy):
        return True
    if type(tree) in (tuple, list):
        return any(has_tensor(x) for x in tree)
    if type(tree) is dict:
        return any(has_tensor(x) for x in tree.values())
    return False


def _grad_root(t: TensorProxy, lines=None):
    """The tensor that requires grad t is (a view of, through views and detach), or None."""
    lines = get_tracectx().bound_symbols if lines is None else lines
    makers = {o.name: b for b in lines for o in b.flat_proxy_outs()}
    cur = t
    while cur is not None and not cur.requires_grad:
        b = makers.get(cur.name)
        cur = next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None) \
            if b is not None and b.sym.id in VIEW_OPS else None
    return cur


def _first_tensor(b):
    return next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None)


def _read_for_grad(t: TensorProxy, lines) -> bool:
    """Whether a line of `lines` other than a view reads t's memory (t, the tensor it views, or another view of that)
    together with a tensor that requires grad: eager's autograd may have saved it, and its backward would read what a
    numpy write puts there (numpy's writes bypass the version counter that makes torch's own writes an error)."""
    makers = {o.name: b for b in lines for o in b.flat_proxy_outs()}
    root = t
    while (b := makers.get(root.name)) is not None and b.sym.id in VIEW_OPS and _first_tensor(b) is not None:
        root = _first_tensor(b)
    aliases = {root.name}
    for b in lines:
        first = _first_tensor(b)
        if first is None:
            continue
        if b.sym.id in VIEW_OPS:
            if first.name in aliases:
                aliases.update(o.name for o in b.flat_proxy_outs())
            continue
        args = [a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)]
        if any(a.name in aliases for a in args) and any(a.requires_grad for a in args):
            return True
    return False


def refuse_grad_aliased_writes(trace) -> None:
    """After tracing: an in-place write into a tensor torch.from_numpy gave (or a view of it) whose array is over a
    tensor that requires grad (`torch.from_numpy(x.detach().numpy()).add_(1)`) is refused, as numpy's own writes are
    (check_write): eager's autograd does not see it."""
    made = {ref().name for ref, tid in list(_FROM_NUMPY.values()) if tid == id(trace) and ref() is not None}
    if not made:
        return
    lines = trace.bound_symbols
    makers = {o.name: b for b in lines for o in b.flat_proxy_outs()}
    for b in lines:
        if Tag.INPLACE not in b.sym.tags and not b.sym.id.endswith("_"):
            continue
        cur = next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None)
        while cur is not None and cur.name not in made:
            m = makers.get(cur.name)
            cur = next((a for a in m.flat_proxy_args() if isinstance(a, TensorProxy)), None) \
                if m is not None and m.sym.id in VIEW_OPS else None
        if cur is not None and not recorded_without_grad(b) and \
                any(isinstance(a, TensorProxy) and a.requires_grad for a in b.flat_proxy_args()[1:]):
            raise UnsupportedError("numpy", f"{b.sym.name}: an in-place write of values that require grad into "
                                   "torch.from_numpy's tensor (eager records it on that tensor's own autograd history, "
                                   "which jitcore does not model for memory shared with numpy)",
                                   hint="write into torch.from_numpy(a).clone(), or write values under torch.no_grad()")
        if cur is not None and (_grad_root(cur, lines) is not None or _read_for_grad(cur, lines[:lines.index(b)])):
            raise UnsupportedError("numpy", f"{b.sym.name}: an in-place write into torch.from_numpy of an array over a "
                                   "tensor that requires grad (through .detach()): eager's autograd does not see it, "
                                   "so its gradients would use the written values",
                                   hint="write into a copy, or with torch ops on the tensor under torch.no_grad()")


def check_write(arr: NdarrayProxy) -> None:
    """Refuse a write through an array that eager's autograd would not see: one over (a view of) a tensor that
    requires grad (`x.detach().numpy()`: numpy writes bypass the version counter, so eager's backward silently uses the
    written values), or one whose elements share memory (an expanded tensor: numpy writes, torch refuses)."""
    t = arr.tensor
    cur = _grad_root(t)
    if cur is None and _read_for_grad(t, get_tracectx().bound_symbols):
        raise UnsupportedError("numpy", f"a write through a numpy array into {t.name} after an op that requires grad "
                               "read it: eager's autograd does not see numpy's writes, so its backward would use the "
                               "written values", hint="write into a copy (np.array(a)), or before the tensor is used")
    if cur is not None:
        raise UnsupportedError("numpy", f"a write through a numpy array into {cur.name}, a tensor that requires grad "
                               "(through .detach()): eager's autograd does not see numpy's writes, so its gradients "
                               "would use the written values", hint="write into a copy (a = x.detach().numpy().copy()) "
                                                                    "or with torch ops under torch.no_grad()")
    try:
        strides = t.stride()
    except UnsupportedError:  # (a layout not known here: torch's own error, if any, comes when the program runs)
        return
    if any(st == 0 and sz != 1 for st, sz in zip(strides, t.shape)):
        raise UnsupportedError("numpy", "a write through a numpy array whose elements share memory (made from an "
                               "expanded tensor)", hint="write into a copy: np.array(a)")


def _written(t: TensorProxy) -> bool:
    """Whether the trace so far writes into tensor t or a view of it (an in-place op on it or on a view)."""
    names = {t.name}
    for b in get_tracectx().bound_symbols:
        first = next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None)
        if first is None or first.name not in names:
            continue
        if b.sym.id in VIEW_OPS:
            names.update(o.name for o in b.flat_proxy_outs())
        elif Tag.INPLACE in b.sym.tags or b.sym.id.endswith("_"):
            return True
    return False


def _native(a: NdarrayProxy):
    """The caller's array an argument array stands for, its contents guarded (the call then reads them as constants,
    as numpy arrays from outside are read natively)."""
    arr, guard = a.origin
    guard()
    return arr


def _all_unwritten_arguments(tree) -> bool:
    """Whether the arrays in `tree` are all array arguments the function has not written into (so far)."""
    found = []

    def visit(x):
        if isinstance(x, NdarrayProxy):
            found.append(x)
        elif type(x) in (tuple, list):
            for i in x:
                visit(i)
        elif type(x) is dict:
            for i in x.values():
                visit(i)
    visit(tree)
    return bool(found) and all(a.origin is not None and not _written(a.tensor) for a in found)


def _natives(tree):
    if isinstance(tree, NdarrayProxy):
        return _native(tree)
    if type(tree) in (tuple, list):
        return type(tree)(_natives(x) for x in tree)
    if type(tree) is dict:
        return {k: _natives(v) for k, v in tree.items()}
    return tree


def call_numpy(fn, args, kwargs):
    """Call numpy function `fn` on arguments holding NdarrayProxy values: its implementation, or a clear refusal."""
    impl = IMPLS.get(fn)
    if has_tensor((args, kwargs)):
        raise UnsupportedError("numpy", f"numpy.{getattr(fn, '__name__', fn)} given a tensor inside a jitted function "
                               "(eager's answer depends on numpy's conversion protocols)",
                               hint="convert the tensor first: x.numpy() (or x.detach().numpy())")
    if impl is None and _all_unwritten_arguments((args, kwargs)):
        return fn(*_natives(args), **{k: _natives(v) for k, v in kwargs.items()})
    if impl is None:
        name = getattr(fn, "__name__", repr(fn))
        mod = getattr(fn, "__module__", None) or "numpy"
        raise UnsupportedError("numpy", f"{mod}.{name} on an array made from a tensor inside a jitted function has no "
                               "torch equivalent in jitcore", hint=_HINT)
    return impl(*args, **kwargs)


# -- from tensors to arrays and back --------------------------------------------------------------------------------
def tensor_numpy(t: TensorProxy, *, force: bool = False) -> NdarrayProxy:
    """`t.numpy()`: eager's errors (a tensor that requires grad, on another device, of a dtype numpy lacks), else an
    array sharing the tensor's data (the same proxy)."""
    if force:  # (detached, on the CPU; a complex tensor's lazy conjugate bit is not modelled here)
        if t.dtype.is_complex:
            raise UnsupportedError("numpy", "tensor.numpy(force=True) of a complex tensor inside a jitted function",
                                   hint="call .resolve_conj().numpy() on it")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
    if t.requires_grad:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    if t.device.type != "cpu":
        raise TypeError(f"can't convert {t.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")
    numpy_dtype(t.dtype)  # (eager's TypeError for bfloat16 and the other dtypes numpy lacks)
    # x.data's alias: numpy's writes through the array move no version counter of x's (eager's: numpy writes memory)
    return NdarrayProxy(torch_layout.data(t))


def tensor_of(arr: NdarrayProxy) -> TensorProxy:
    """`torch.from_numpy(arr)`: a tensor sharing the array's data (a view of it: writes reach the array), which
    never requires grad. Returned, it is eager's tensor of its own storage over that memory (FromNumpy)."""
    t = arr.tensor
    out = torch_layout.data(t)  # memory shared, no grad, a version counter of its own (eager's from_numpy tensor)
    if len(_FROM_NUMPY) > 256:  # (entries of finished traces whose proxies are gone)
        for k in [k for k, (ref, _) in _FROM_NUMPY.items() if ref() is None]:
            del _FROM_NUMPY[k]
    _FROM_NUMPY[id(out)] = (weakref.ref(out), id(get_tracectx()))
    return out


# id -> (weak reference, id of its trace) of the tensors torch.from_numpy gave while tracing
_FROM_NUMPY: dict = {}


class FromNumpy:
    """An output the function returns straight from torch.from_numpy: at run time `torch.from_numpy(t.numpy())`, a
    tensor with a storage of its own starting at the array's first element (as eager's: storage_offset 0), over the
    same memory as the computed view."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def from_numpy_outputs(output):
    """The function's output with each tensor torch.from_numpy made marked FromNumpy (tuples, lists, dicts)."""
    if isinstance(output, TensorProxy):
        ref, _ = _FROM_NUMPY.get(id(output), (None, None))
        return FromNumpy(output) if ref is not None and ref() is output else output
    if type(output) in (tuple, list):
        items = [from_numpy_outputs(x) for x in output]
        return output if all(a is b for a, b in zip(items, output)) else type(output)(items)
    if type(output) is dict:
        items = {k: from_numpy_outputs(v) for k, v in output.items()}
        return output if all(items[k] is v for k, v in output.items()) else items
    return output


def _own_storage(_, children):
    (t,) = children
    return torch.from_numpy(t.detach().numpy()) if isinstance(t, torch.Tensor) else t


optree.register_pytree_node(FromNumpy, lambda o: ((o.tensor,), None, None), _own_storage, namespace=NAMESPACE)


def _flatten(arr: NdarrayProxy):
    return (arr.tensor,), arr.scalar, None


def _unflatten(scalar, children):
    """At run time: the computed tensor as the caller's ndarray (sharing its memory, as eager's x.numpy() does), or
    the numpy scalar."""
    (t,) = children
    if not isinstance(t, torch.Tensor):  # (a proxy while tracing: the array value itself)
        return NdarrayProxy(t, scalar)
    arr = t.detach().numpy()
    return arr[()] if scalar else arr


optree.register_pytree_node(NdarrayProxy, _flatten, _unflatten, namespace=NAMESPACE)



_WRAPPED_KIND = {"b": True, "i": 1, "u": 1, "f": 1.0, "c": 1j}


def _op_argument(a: NdarrayProxy, args):
    """A numpy scalar handed to a torch op (`x * np.sum(a)`) is taken as the Python number it is: its tensor cast to
    the dtype a Python number of its kind would give with the op's first tensor (0-d, it then promotes like the
    number). An array is refused: eager computes `x + a` through numpy (x.__array__, numpy's promotion, the result
    wrapped back into a tensor that has no autograd history), which is not what the torch op would record."""
    if not a.scalar:
        raise UnsupportedError("numpy", "a numpy array made from a tensor handed to a torch operation (`x + a`): "
                               "eager computes it through numpy, with numpy's dtypes and no gradient",
                               hint="convert it first: torch.from_numpy(a)")
    t = a.tensor.clone()
    other = next((x for x in args if isinstance(x, TensorProxy)), None)
    if a.scalar and other is not None:
        want = torch.result_type(torch.empty((1,), dtype=other.dtype), _WRAPPED_KIND[a.dtype.kind])
        t = t if want == t.dtype else t.to(want)
    return t


register_array_argument(NdarrayProxy, _op_argument)
