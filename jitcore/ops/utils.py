"""Ops: shared checks and metadata helpers for metas (shapes, dims, devices, requires_grad).

Errors here read like torch's own messages and name the op, so a user sees which call was wrong.
"""
from __future__ import annotations

from numbers import Number

import torch

from jitcore.errors import MetaError
from jitcore.ir.proxies import IntegerProxy, NumberProxy, TensorProxy, _prod, canonical_dim, ir_op


def check(cond: bool, msg):
    """Raise MetaError(msg) when cond is False; msg may be a callable to build the text lazily."""
    if not cond:
        raise MetaError(msg() if callable(msg) else msg)


def type_name(dtype) -> str:
    """torch's own name of dtype in its messages (Float, Long, ComplexFloat, ...)."""
    try:
        return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")
    except (TypeError, RuntimeError):
        return str(dtype)


def is_tensor(x) -> bool:
    return isinstance(x, TensorProxy)


def is_number(x) -> bool:
    return isinstance(x, (Number, NumberProxy)) and not isinstance(x, torch.Tensor)


def tensors_of(*args) -> list[TensorProxy]:
    return [a for a in args if isinstance(a, TensorProxy)]


def requires_grad(*inputs) -> bool:
    """Outputs require grad when grad mode is on and some tensor input does."""
    return torch.is_grad_enabled() and any(isinstance(a, TensorProxy) and a.requires_grad for a in inputs)


def same_device(op: str, *tensors) -> torch.device:
    ts = [t for t in tensors if isinstance(t, TensorProxy)]
    devs = {t.device for t in ts if t.ndim > 0} or {t.device for t in ts}
    check(len(devs) <= 1, lambda: f"{op}: expected all tensors on the same device, got {sorted(map(str, devs))}")
    return next(iter(devs)) if devs else torch.device("cpu")


def static_numbers(x):
    """An argument that shapes the program (a dim, a correction, a kernel size, stride, padding or output size: a
    number, or a list or tuple of numbers and None) with each number passed in under cache="symbolic values" made
    this call's value, guarded: a call with another value gets its own program."""
    if isinstance(x, NumberProxy):
        return x.python_type(x)
    if type(x) in (list, tuple) and any(isinstance(v, NumberProxy) for v in x):
        return type(x)(v.python_type(v) if isinstance(v, NumberProxy) else v for v in x)
    return x


def canonical_dims(dims, rank: int) -> tuple[int, ...]:
    if is_int(dims):
        dims = (dims,)
    return tuple(canonical_dim(d, rank) for d in dims)


def broadcast_shapes(op: str, *shapes) -> tuple:
    """torch's broadcasting of several shapes, with torch's error text on a mismatch."""
    if len(shapes) == 1:  # nothing to compare (and no predicate to record on a symbolic size)
        return tuple(shapes[0])
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for i in range(rank):  # a dim where every size is 1 or one same size needs no comparison (a run-time size
        sizes = _distinct(s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0)  # `u0` may be 1: then
        if len(sizes) == 1:  # the result is u0 either way)
            out[i] = sizes[0]
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            if same_size(out[i], d) or d == 1:
                continue
            if out[i] == 1:
                out[i] = d
            elif out[i] != d:
                raise MetaError(
                    f"{op}: the size of tensor a ({out[i]}) must match the size of tensor b ({d}) at non-singleton "
                    f"dimension {i - rank}; shapes {[tuple(x) for x in shapes]}"
                )
    return tuple(out)


def _distinct(sizes) -> list:
    """The sizes other than a literal 1, one of each (the same proxy, or the same expression, counts once)."""
    out = []
    for d in sizes:
        if type(d) is int and d == 1:
            continue
        if not any(same_size(d, o) for o in out):
            out.append(d)
    return out


def same_size(a, b) -> bool:
    """The same size for every call: equal ints, or the same proxy or expression (no predicate needed)."""
    if type(a) is int and type(b) is int:
        return a == b
    return a is b or (isinstance(a, NumberProxy) and isinstance(b, NumberProxy) and a.expr is not None
                      and a.expr == b.expr)


def numel(shape) -> int:
    """The product of sizes; with IntegerProxy sizes the arithmetic is recorded (symbolic values)."""
    return _prod(shape)


def slice_indices(k: slice, n) -> tuple:
    """`k.indices(n)` for step > 0, written in Python so symbolic bounds and sizes stay symbolic (the comparisons
    record predicates) instead of being specialised by slice.indices' __index__ calls."""
    if isinstance(k.start, TensorProxy) or isinstance(k.stop, TensorProxy):  # (`x[:t]`: its value, as an index)
        k = slice(*(v.__index__() if isinstance(v, TensorProxy) else v for v in (k.start, k.stop, k.step)))
    step = 1 if k.step is None else int(k.step)
    if step <= 0 or not any(isinstance(v, NumberProxy) for v in (k.start, k.stop, n)):
        return k.indices(n)

    def clamp(v, default):  # only the sign of a bound is a predicate; the clamps are recorded max()/min()
        if v is None:
            return default
        if v < 0:
            v = v + n
            return _extreme("max", v, 0)
        return _extreme("min", n, v)

    return clamp(k.start, 0), clamp(k.stop, n), step


def _extreme(name, a, b):
    if isinstance(a, IntegerProxy) or isinstance(b, IntegerProxy):
        return ir_op("number_op")(name, a, b)
    return (max if name == "max" else min)(a, b)


def is_int(x) -> bool:
    """An int or an IntegerProxy (a symbolic size), not a bool."""
    return isinstance(x, (int, IntegerProxy)) and not isinstance(x, bool)


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def prim_dims(op, a, dims) -> tuple[int, ...]:
    """dims as canonical, distinct dims of a for prim `op` (rank 0 accepts 0 and -1, like torch)."""
    check(isinstance(dims, (tuple, list)) and all(isinstance(d, int) for d in dims),
          lambda: f"prims.{op}: expected a tuple of ints for dims, got {dims!r}")
    try:
        out = canonical_dims(tuple(dims), a.ndim)
    except IndexError as e:
        raise MetaError(f"prims.{op}: {e} for a tensor of shape {tuple(a.shape)}") from None
    check(len(set(out)) == len(out), lambda: f"prims.{op}: dim {out} appears multiple times in the list of dims")
    return out
