"""Ops: torch-level tensor creation (zeros/ones/full/empty and their _like/new_ forms, arange/linspace/logspace/eye,
rand/randn/randint, tensor/as_tensor/scalar_tensor, tril_indices/triu_indices, bernoulli, normal). Sizes, dtypes
(torch.get_default_dtype(), arange's int/float inference) and devices are resolved here; the creation prims make the
values. requires_grad=True on a float result makes it require grad.
"""
from __future__ import annotations

import math

import torch

from jitcore.errors import MetaError, UnsupportedError
from jitcore.ir import devices, dtypes
from jitcore.ir.proxies import IntegerProxy, NumberProxy, TensorProxy
from jitcore.ir.ranges import range_length
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import services
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_python, torch_shape
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.registry import torchsymbol
from jitcore.ops.rng_generators import gen_kwargs
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_map import TORCH_MAP
from jitcore.ops.torch_shape import copy, shape_arg, stack
from jitcore.ops.utils import check, is_int, is_number, type_name

T = torch.Tensor
CREATION = (Tag.CREATION,)
RANDOM = (Tag.CREATION, Tag.RANDOM)


# -- helpers -----------------------------------------------------------------------------------------------------------
def _device(device, like=None):
    if device is not None:
        return devices.to_device(device)
    if like is not None:
        return like.device
    default = torch.get_default_device()
    services().note_default_device(default)  # (torch.set_default_device between calls: the prologue checks it)
    return devices.to_device(default)


def _size(op, size, kwargs=None) -> tuple:
    if kwargs and "size" in kwargs:
        size = (kwargs.pop("size"),)
    check(not kwargs, lambda: f"{op}() got unexpected keyword arguments {sorted(kwargs)}")
    shape = shape_arg(size)
    check(all(is_int(s) for s in shape), lambda: f"{op}(): size must be a tuple of ints, got {shape!r}")
    check(all(s >= 0 for s in shape), lambda: f"Trying to create tensor with negative dimension "
                                              f"{next(s for s in shape if s < 0)}: {list(shape)}")
    return shape


def _grad(out, requires_grad):
    if requires_grad:
        check(dtypes.is_inexact(out.dtype), "Only Tensors of floating point and complex dtype can require gradients")
        out.requires_grad = True
    return out


def _fill(shape, value, dtype, device, requires_grad):
    if isinstance(value, NumberProxy) and value.python_type is float and dtypes.category(dtype) == 1:
        value = prims_python.call("int", value)  # a symbolic float into an integer dtype: truncated, kept symbolic
    return _grad(pc.full(tuple(shape), to_dtype(value, dtype), device=device, dtype=dtype), requires_grad)


def number_dtype(*values) -> torch.dtype:
    """The dtype torch.full/torch.tensor infer for Python numbers: bool, int64, the default float, or complex."""
    return dtypes.default_for(max((dtypes.category(dtypes.python_type_of(v)) for v in values), default=2))


# -- filled tensors --------------------------------------------------------------------------------------------------
def _filled(op_id, value):
    name = op_id.removeprefix("ltorch.")

    def body(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False, **kwargs):
        check(out is None, lambda: f"{name}: out= is not supported")
        shape = _size(name, size, kwargs)
        dtype = dtype or torch.get_default_dtype()
        if value is None:
            return _grad(pc.empty(shape, device=_device(device), dtype=dtype), requires_grad)
        return _fill(shape, value, dtype, _device(device), requires_grad)

    body.__name__ = name
    return torchsymbol(getattr(torch, name), id=op_id, tags=CREATION)(body)


zeros = _filled("ltorch.zeros", 0)
ones = _filled("ltorch.ones", 1)
empty = _filled("ltorch.empty", None)


@torchsymbol(torch.full, tags=CREATION, id="ltorch.full")
def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    shape = _size("full", (size,))
    if isinstance(fill_value, TensorProxy):
        check(fill_value.ndim == 0, "full(): fill_value must be a number or a 0-d tensor")
        v = to_dtype(fill_value, dtype or fill_value.dtype)
        return _grad(copy(te.expand_to(v, shape)) if shape else copy(v), requires_grad)
    return _fill(shape, fill_value, dtype or number_dtype(fill_value), _device(device), requires_grad)


@torchsymbol(torch.scalar_tensor, tags=CREATION, id="ltorch.scalar_tensor")
def scalar_tensor(s, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    return _fill((), s, dtype or torch.get_default_dtype(), _device(device), requires_grad)


def _like(op_id, value):
    name = op_id.removeprefix("ltorch.")

    def body(input, *, dtype=None, layout=None, device=None, requires_grad=False,
             memory_format=torch.preserve_format):
        dtype = dtype or input.dtype
        if value is None:
            return _grad(pc.empty(tuple(input.shape), device=_device(device, input), dtype=dtype), requires_grad)
        return _fill(input.shape, value, dtype, _device(device, input), requires_grad)

    body.__name__ = name
    return torchsymbol(getattr(torch, name), id=op_id, tags=CREATION)(body)


zeros_like = _like("ltorch.zeros_like", 0)
ones_like = _like("ltorch.ones_like", 1)
empty_like = _like("ltorch.empty_like", None)


@torchsymbol(torch.full_like, tags=CREATION, id="ltorch.full_like")
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=torch.preserve_format):
    return _fill(input.shape, fill_value, dtype or input.dtype, _device(device, input), requires_grad)


def _new(op_id, value):
    name = op_id.removeprefix("ltorch.")

    def body(self, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False, **kwargs):
        shape = _size(name, size, kwargs)
        dtype = dtype or self.dtype
        if value is None:
            return _grad(pc.empty(shape, device=_device(device, self), dtype=dtype), requires_grad)
        return _fill(shape, value, dtype, _device(device, self), requires_grad)

    body.__name__ = name
    return torchsymbol(getattr(T, name), method=name, id=op_id, tags=CREATION)(body)


new_zeros = _new("ltorch.new_zeros", 0)
new_ones = _new("ltorch.new_ones", 1)
new_empty = _new("ltorch.new_empty", None)


@torchsymbol(T.new_full, method="new_full", tags=CREATION, id="ltorch.new_full")
def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    return _fill(_size("new_full", (size,)), fill_value, dtype or self.dtype, _device(device, self), requires_grad)


# -- ranges ---------------------------------------------------------------------------------------------------------
def _arange_length(start, end, step, all_int):
    """ceil((end - start) / step), as eager computes it; a recorded expression when an argument is symbolic."""
    if not any(isinstance(v, NumberProxy) for v in (start, end, step)):
        return -((start - end) // step) if all_int else math.ceil((end - start) / step)
    if all_int:  # exact integer ceil; `(i1 - 0 + 0) // 1` simplifies to i1
        return (end - start + (step - 1)) // step if step > 0 else (start - end + (-step - 1)) // -step
    q = (end - start) / step  # eager: std::ceil(double(end - start) / step)
    return prims_python.call("int", -(-q // 1))  # ceil of a float: -floor(-q) (exact), then int


@torchsymbol(torch.arange, tags=CREATION, id="ltorch.arange")
def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None, requires_grad=False,
           pin_memory=False):
    if end is None:
        start, end = 0, start
    bad = [v for v in (start, end, step) if not is_number(v)]
    check(not bad, lambda: f"arange(): start, end and step must be numbers, got {bad[0]!r}")
    check(step != 0, "step must be nonzero")
    check((step > 0 and end >= start) or (step < 0 and end <= start),
          "upper bound and larger bound inconsistent with step sign")
    all_int = all(is_int(v) for v in (start, end, step))  # an IntegerProxy (a symbolic size) counts as an int
    dtype = dtype or (torch.int64 if all_int else torch.get_default_dtype())
    out = pc.iota(_arange_length(start, end, step, all_int), start=start, step=step, device=_device(device),
                  dtype=dtype)
    return _grad(out, requires_grad)


def _linspace_values(start, end, steps, dtype, device):
    """torch's CPU linspace: start + step*i for the first half, end - step*(steps-1-i) for the second."""
    compute = dtype if dtypes.is_float(dtype) and dtype not in dtypes.low_precision else torch.float64
    idx = pc.iota(steps, start=0, step=1, device=device, dtype=compute)
    step = (end - start) / (steps - 1)
    lo = te.add(te.mul(idx, step), start)
    hi = te.sub(end, te.mul(te.sub(steps - 1, idx), step))
    return te.where(te.lt(idx, steps // 2), lo, hi)


@torchsymbol(torch.linspace, tags=CREATION, id="ltorch.linspace")
def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    check(is_int(steps) and steps >= 0, "linspace(): number of steps must be non-negative")
    dtype, device = dtype or torch.get_default_dtype(), _device(device)
    if steps <= 1:
        out = _filled(steps, start, dtype, device)
    else:
        out = to_dtype(_linspace_values(start, end, steps, dtype, device), dtype)
    return _grad(out, requires_grad)


def _filled(steps, value, dtype, device):
    """(steps,) of value, a number or a 0-dim tensor (linspace's start given as a tensor)."""
    if not isinstance(value, TensorProxy):
        return pc.full((steps,), to_dtype(value, dtype), device=device, dtype=dtype)
    return te.expand_to(ps.reshape(to_dtype(value, dtype), (1,)), (steps,))


@torchsymbol(torch.logspace, tags=CREATION, id="ltorch.logspace")
def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    check(is_int(steps) and steps >= 0, "logspace(): number of steps must be non-negative")
    dtype, device = dtype or torch.get_default_dtype(), _device(device)
    if steps <= 1:
        out = _filled(steps, te.pow(float(base), start) if isinstance(start, TensorProxy) else base ** start, dtype,
                      device)
    else:
        exps = _linspace_values(start, end, steps, torch.float64, device)
        out = to_dtype(te.pow(float(base), exps), dtype)
    return _grad(out, requires_grad)


@torchsymbol(torch.eye, tags=CREATION, id="ltorch.eye")
def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    m = n if m is None else m
    check(n >= 0 and m >= 0, lambda: f"n and m must be greater or equal to 0, got {n}, {m}")
    device = _device(device)
    rows = ps.reshape(pc.iota(n, start=0, step=1, device=device, dtype=torch.int64), (n, 1))
    cols = ps.reshape(pc.iota(m, start=0, step=1, device=device, dtype=torch.int64), (1, m))
    return _grad(to_dtype(te.eq(rows, cols), dtype or torch.get_default_dtype()), requires_grad)


def _tri_indices(op, row, col, offset, dtype, device, lower):
    pairs = [(i, j) for i in range(row) for j in range(col) if (j - i <= offset if lower else j - i >= offset)]
    data = [[p[0] for p in pairs], [p[1] for p in pairs]]
    return pc.tensor_from_sequence(data, dtype=dtype, device=_device(device))


@torchsymbol(torch.tril_indices, tags=CREATION, id="ltorch.tril_indices")
def tril_indices(row, col, offset=0, *, dtype=torch.long, device=None, layout=None):
    return _tri_indices("tril_indices", row, col, offset, dtype, device, True)


@torchsymbol(torch.triu_indices, tags=CREATION, id="ltorch.triu_indices")
def triu_indices(row, col, offset=0, *, dtype=torch.long, device=None, layout=None):
    return _tri_indices("triu_indices", row, col, offset, dtype, device, False)


# -- random -----------------------------------------------------------------------------------------------------------
def _random(op_id, draw):
    name = op_id.removeprefix("ltorch.")

    def body(*size, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False, **kwargs):
        shape = _size(name, size, kwargs)
        return _grad(draw(shape, dtype or torch.get_default_dtype(), _device(device), gen_kwargs(generator)),
                     requires_grad)

    body.__name__ = name
    return torchsymbol(getattr(torch, name), id=op_id, tags=RANDOM)(body)


def _uniform(shape, dtype, device, gen=None):
    return pc.uniform(tuple(shape), 0.0, 1.0, device=device, dtype=dtype, **(gen or {}))


def _normal(shape, dtype, device, gen=None):
    if not (dtype.is_floating_point or dtype.is_complex):
        return _no_draws(shape, dtype, device)
    return pc.normal(tuple(shape), 0.0, 1.0, device=device, dtype=dtype, **(gen or {}))


def _serial_normal(shape, dtype, device, gen=None):
    """eager's CPU normal_ on a non-contiguous tensor: one draw per element in memory order (not batched)."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return _no_draws(shape, dtype, device)
    return pc.normal_serial(tuple(shape), 0.0, 1.0, device=device, dtype=dtype, **(gen or {}))


def _no_draws(shape, dtype, device):
    """Normal draws in an integer or bool dtype: eager's kernel has none, but an empty tensor needs no kernel (it is
    returned, nothing drawn: randn_like of an int tensor empty at run time, fuzz seed 331). Whether it is empty is a
    predicate (a run-time size's answer guarded)."""
    if any(d == 0 for d in shape):
        return pc.empty(tuple(shape), device=device, dtype=dtype)
    raise MetaError.like(NotImplementedError)(
        f'"normal_kernel_{torch.device(device).type}" not implemented for \'{type_name(dtype)}\'')


rand = _random("ltorch.rand", _uniform)
randn = _random("ltorch.randn", _normal)


def eager_memory_order(input):
    """The dims of `input` from outermost to innermost as eager's torch.empty_like(input) lays them out (a
    permutation of a dense input keeps its strides), or None when that is the contiguous order or the layout is not
    known. Eager's random *_like draws fill that tensor in memory order; the input's layout is guarded."""
    if not isinstance(input, TensorProxy) or input.ndim < 2:
        return None
    meta = input.eager_layout()
    if meta is None:
        return None
    like = torch.empty_like(meta)
    if like.is_contiguous():
        return None
    strides = like.stride()
    return tuple(sorted(range(input.ndim), key=lambda d: (-strides[d], d)))


_FORMAT_ORDERS = {torch.channels_last: (0, 2, 3, 1), torch.channels_last_3d: (0, 2, 3, 4, 1)}


def like_order(op: str, input, memory_format):
    """The memory order of eager's torch.empty_like(input, memory_format=memory_format), for draw_like: the input's
    own (preserve_format), () for contiguous_format, or the order a channels-last format lays out."""
    if memory_format is None or memory_format is torch.preserve_format:
        return eager_memory_order(input) or ()
    if memory_format is torch.contiguous_format:
        return ()
    order = _FORMAT_ORDERS.get(memory_format)
    check(order is not None and len(order) == input.ndim,
          lambda: f"{op}(): memory_format {memory_format} does not apply to a {input.ndim}-d tensor")
    return order


def fill_order(self):
    """The dims of `self` from outermost to innermost in memory, as eager's in-place random fills (x.normal_(),
    x.uniform_()) visit them (TensorIterator orders dims by stride), or None when that is the contiguous order or
    the layout is not known; self's layout is guarded. Unlike eager_memory_order this holds for a view with gaps
    (x.t()[1:]), whose own memory the fill walks."""
    if not isinstance(self, TensorProxy) or self.ndim < 2:
        return None
    meta = self.eager_layout()
    if meta is None or meta.is_contiguous():
        return None
    strides, sizes = meta.stride(), meta.shape
    order = tuple(sorted(range(self.ndim), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d)))
    return order if order != tuple(range(self.ndim)) else None


def draw_like(input, draw, order=None):
    """draw(shape) laid out as eager's empty_like(input) and filled in its memory order: drawn contiguous in the
    permuted shape, then permuted back. order: eager_memory_order(input) when the caller has it already (() for
    the contiguous order)."""
    order = eager_memory_order(input) if order is None else order
    if not order:  # () from a caller: the contiguous order
        return draw(tuple(input.shape))
    out = draw(tuple(input.shape[d] for d in order))
    return ps.transpose(out, tuple(order.index(d) for d in range(input.ndim)))


def _random_like(op_id, draw):
    name = op_id.removeprefix("ltorch.")

    def body(input, *, dtype=None, layout=None, device=None, requires_grad=False,
             memory_format=torch.preserve_format):
        dtype, device = dtype or input.dtype, _device(device, input)
        order = like_order(name, input, memory_format)
        how = _serial_normal if order and name == "randn_like" and device.type == "cpu" else draw
        return _grad(draw_like(input, lambda shape: how(shape, dtype, device), order), requires_grad)

    body.__name__ = name
    return torchsymbol(getattr(torch, name), id=op_id, tags=RANDOM)(body)


rand_like = _random_like("ltorch.rand_like", _uniform)
randn_like = _random_like("ltorch.randn_like", _normal)


@torchsymbol(torch.randint, tags=RANDOM, id="ltorch.randint")
def randint(low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad=False, pin_memory=False):
    if size is None:
        low, high, size = 0, low, high
    check(high is not None and size is not None, "randint(): expected high and size")
    out = pc.randint(low, high, _size("randint", (size,)), device=_device(device), dtype=dtype or torch.int64,
                     **gen_kwargs(generator))
    return _grad(out, requires_grad)


@torchsymbol(torch.randint_like, tags=RANDOM, id="ltorch.randint_like")
def randint_like(input, low=0, high=None, *, dtype=None, layout=None, device=None, requires_grad=False,
                 memory_format=torch.preserve_format):
    if high is None:
        low, high = 0, low
    out = draw_like(input, lambda shape: pc.randint(low, high, shape, device=_device(device, input),
                                                    dtype=dtype or input.dtype),
                    like_order("randint_like", input, memory_format))
    return _grad(out, requires_grad)


@torchsymbol(torch.bernoulli, T.bernoulli, method="bernoulli", tags=(Tag.RANDOM,),
             id="ltorch.bernoulli")  # differentiable: zeros
def bernoulli(input, p=None, *, generator=None):
    """1 with probability p (the input's values, or the float p), else 0; in the input's dtype. Eager's draws:
    empty_like(input).bernoulli_(input) or .bernoulli_(p)."""
    gen = gen_kwargs(generator)
    if p is None:
        return pc.bernoulli_tensor(input, tuple(input.shape), dtype=input.dtype, **gen)
    check(is_number(p), lambda: f"bernoulli(): p must be a number, got {p!r}")
    return pc.bernoulli(tuple(input.shape), float(p), device=input.device, dtype=input.dtype, **gen)


@torchsymbol(torch.normal, tags=RANDOM, id="ltorch.normal")
def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
           requires_grad=False, pin_memory=False):
    gen = gen_kwargs(generator)
    if not isinstance(mean, TensorProxy) and not isinstance(std, TensorProxy):
        check(size is not None, "normal(): with float mean and std, size= is required")
        out = pc.normal(_size("normal", (size,)), mean, std, device=_device(device), dtype=dtype or
                        torch.get_default_dtype(), **gen)
        return _grad(out, requires_grad)
    return _normal_tensor(mean, std, gen)


def _normal_tensor(mean, std, gen=None):
    """Eager's normal with a tensor mean or std (DistributionTemplates.h normal_out_impl): a draw in the result's
    dtype, N(0, std) for a float std, else N(0, 1) times std, then plus mean."""
    ref = mean if isinstance(mean, TensorProxy) else std
    both = isinstance(mean, TensorProxy) and isinstance(std, TensorProxy)
    shape = tuple(te.broadcast(mean, std)[0].shape) if both else tuple(ref.shape)
    dtype = ref.dtype  # eager's result takes mean's options, or std's for a float mean; mul_/add_ keep it
    if not isinstance(std, TensorProxy):
        check(std >= 0.0, lambda: f"normal expects std >= 0.0, but found std {std}")
        return to_dtype(te.add(pc.normal(shape, 0.0, float(std), device=ref.device, dtype=dtype, **(gen or {})),
                               mean), dtype)
    z = pc.normal(shape, 0.0, 1.0, device=ref.device, dtype=dtype, **(gen or {}))
    return to_dtype(te.add(to_dtype(te.mul(z, std), dtype), mean), dtype)


# -- from data ---------------------------------------------------------------------------------------------------------
def _leaves(data):
    if isinstance(data, (list, tuple)):
        for d in data:
            yield from _leaves(d)
    else:
        yield data


def _from_range(op, data, dtype, device, requires_grad):
    """torch.tensor(range(...)): the values start, start + step, ... of the range's length (symbolic for a range of
    sizes: jitcore/ir/ranges.py), int64 as eager infers it, or, for an empty range, the default float dtype."""
    start, step = data.start, data.step
    length = range_length(start, data.stop, step)
    dtype = dtype or (torch.int64 if length > 0 else torch.get_default_dtype())
    narrow = not (dtype.is_floating_point or dtype.is_complex or dtype in (torch.bool, torch.int64))
    if narrow and length > 0:  # narrower ints: eager refuses a value that overflows (unsigned ones wrap from -max)
        info = torch.iinfo(dtype)
        low = info.min if info.min < 0 else -info.max
        for v in (start, start + (length - 1) * step):
            check(low <= v <= info.max, lambda: f"value cannot be converted to type "
                                                f"{str(dtype).removeprefix('torch.')} without overflow")
    return _grad(pc.iota(length, start=start, step=step, device=_device(device), dtype=dtype), requires_grad)


def _from_data(op, data, dtype, device, requires_grad):
    if type(data).__name__ == "ndarray" and type(data).__module__ == "numpy" and not data.dtype.hasobject:
        # a numpy array's values, as constants (one read from outside is guarded by its contents: frontend.py)
        dtype = dtype or torch.from_numpy(data.reshape(-1)[:0]).dtype
        data = data.tolist()
    if isinstance(data, range):  # a builtin range, or a SymbolicRange (jitcore/ir/ranges.py), whose class says range
        return _from_range(op, data, dtype, device, requires_grad)
    if isinstance(data, TensorProxy):
        out = pm.stop_gradient(data) if data.requires_grad else data
        out = to_dtype(out, dtype or data.dtype)
        if device is not None and devices.to_device(device) != out.device:
            out = pe.device_put(out, devices.to_device(device))
        return _grad(copy(out) if out is data else out, requires_grad)
    leaves = list(_leaves(data))
    if leaves and all(isinstance(v, TensorProxy) for v in leaves):
        dtype = dtype or leaves[0].dtype
        return _grad(stack([_from_data(op, d, dtype, device, False) for d in data]), requires_grad)
    check(all(is_number(v) for v in leaves), lambda: f"{op}(): could not infer dtype of "
                                                      f"{type(next(v for v in leaves if not is_number(v))).__name__}")
    dtype = dtype or number_dtype(*leaves)
    out = pc.tensor_from_sequence(data if not isinstance(data, tuple) else list(data), dtype=dtype,
                                  device=_device(device))
    return _grad(out, requires_grad)


@torchsymbol(torch.tensor, tags=CREATION, id="ltorch.tensor")
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    return _from_data("tensor", data, dtype, device, requires_grad)


@torchsymbol(torch.as_tensor, tags=CREATION, id="ltorch.as_tensor")
def as_tensor(data, *, dtype=None, device=None):
    if isinstance(data, TensorProxy):
        out = to_dtype(data, dtype or data.dtype)
        if device is not None and devices.to_device(device) != out.device:
            out = pe.device_put(out, devices.to_device(device))
        return out
    return _from_data("as_tensor", data, dtype, device, False)


@torchsymbol(torch.asarray, tags=CREATION, id="ltorch.asarray")
def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """torch.asarray: a tensor is the same tensor (as_tensor), or a copy laid out as it where copy=True or a dtype or
    device change needs one (copy=False then raises eager's error, asked of eager on an empty tensor); other data as
    torch.tensor."""
    if not isinstance(obj, TensorProxy):
        return _from_data("asarray", obj, dtype, device, requires_grad)
    if requires_grad:
        raise UnsupportedError("asarray", "torch.asarray(tensor, requires_grad=True) inside a jitted function: eager "
                               "sets requires_grad on the tensor it is given (or returns a copy that is no leaf)",
                               hint="use x.detach().clone().requires_grad_() outside the function")
    if copy is False and ((dtype is not None and dtype != obj.dtype) or (device is not None
                          and devices.to_device(device) != obj.device)):
        torch.asarray(torch.empty(0, dtype=obj.dtype, device="meta"), dtype=dtype, copy=False)  # (eager's error)
    out = as_tensor(obj, dtype=dtype, device=device)
    return torch_shape.copy(out) if copy and out is obj else out


@torchsymbol(torch.from_numpy, tags=CREATION, id="ltorch.from_numpy")
def from_numpy(data):
    """The array's values as a tensor (eager's shares the array's memory: a write into it inside a jitted function
    does not reach the array)."""
    return _from_data("from_numpy", data, None, None, False)


@torchsymbol(T.new_tensor, method="new_tensor", tags=CREATION, id="ltorch.new_tensor")
def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    if isinstance(data, TensorProxy):
        return _from_data("new_tensor", data, dtype, device, requires_grad)
    return _from_data("new_tensor", data, dtype or self.dtype, device or self.device, requires_grad)


# the legacy constructors (torch.Tensor(range(n)), torch.LongTensor(...)) and their dtypes: None is the default dtype
_LEGACY = {torch.Tensor: None, torch.FloatTensor: torch.float32, torch.DoubleTensor: torch.float64,
           torch.HalfTensor: torch.float16, torch.BFloat16Tensor: torch.bfloat16, torch.ByteTensor: torch.uint8,
           torch.CharTensor: torch.int8, torch.ShortTensor: torch.int16, torch.IntTensor: torch.int32,
           torch.LongTensor: torch.int64, torch.BoolTensor: torch.bool}


def _legacy_constructor(cls, dtype):
    """torch.LongTensor(data) of a range, list or tuple is torch.tensor(data, dtype=torch.int64) (the default dtype for
    torch.Tensor): a tensor made on every call, of a range of sizes too; of sizes (`torch.Tensor(2, n)`, a
    torch.Size, nothing) it is torch.empty of them, also a new tensor on every call (run while tracing, it was one
    tensor every call returned). Another tensor runs the constructor as before."""
    def construct(*args, **kwargs):
        if not set(kwargs) <= {"device"}:
            return cls(*args, **kwargs)
        make = {"dtype": dtype or torch.get_default_dtype(), "device": kwargs.get("device")}
        if len(args) == 1 and (isinstance(args[0], range) or type(args[0]) in (list, tuple)):
            return tensor(args[0], **make)
        sizes = tuple(args[0]) if len(args) == 1 and type(args[0]) is torch.Size else args
        if all(type(a) is int or isinstance(a, IntegerProxy) for a in sizes):
            return empty(sizes if sizes else (0,), **make)
        return cls(*args, **kwargs)

    return construct


for _cls, _dtype in _LEGACY.items():
    TORCH_MAP[_cls] = _legacy_constructor(_cls, _dtype)
del _cls, _dtype
# the ops whose data argument may be list(range(n)) unread (jitcore/ir/ranges.py RangeList): the frontend hands them its
# range (they record it symbolically); other ops get it pinned to this call's values
TAKE_RANGES = frozenset({tensor, as_tensor, *(TORCH_MAP[c] for c in _LEGACY)})


def takes_ranges(op) -> bool:
    return getattr(op, "op", op) in TAKE_RANGES


# -- the global generator's state: refused inside a jitted function ------------------------------------------------
def _generator_state_call(name: str):
    def refuse(*args, **kwargs):
        raise UnsupportedError(
            "random generator state", f"{name}() inside a jitted function: it would run once, while tracing, and "
                                      "the compiled program's draws (in eager's order) would not see it on later calls",
            hint="seed, save or restore the generator outside the jitted function (torch.manual_seed before the "
                 "call reproduces eager's draws)")

    return refuse


def _register_generator_state_calls():
    names = ["manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state"]
    for name in names:
        TORCH_MAP[getattr(torch.random, name)] = _generator_state_call(f"torch.{name}")
    TORCH_MAP[torch.random.fork_rng] = _generator_state_call("torch.random.fork_rng")
    for name in names + ["manual_seed_all", "seed_all", "get_rng_state_all", "set_rng_state_all"]:
        fn = getattr(torch.cuda, name, None)
        if fn is not None:
            TORCH_MAP[fn] = _generator_state_call(f"torch.cuda.{name}")


_register_generator_state_calls()
