"""Ops: in-place metadata changes (`x.unsqueeze_(0)`, `squeeze_`, `t_`, `transpose_`, `swapdims_`/`swapaxes_`,
`as_strided_`, `resize_`/`resize_as_`). Each records the view eager's tensor becomes (unsqueeze, transpose, as_strided,
a view of the first elements for resize_) and asks the frontend to make the user's tensor object that view
(`services().rebind_tensor`): later reads and writes of that object are of the view, an argument's caller sees the
change after the call (the epilogue replays it on the caller's tensor). Eager's refusals are raised as eager's.
"""
from __future__ import annotations

import math
from itertools import pairwise

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir.arith import value_of
from jitcore.ir.context import get_tracectx, services
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import is_eager_view, view_path, viewed_tensor
from jitcore.ir.views import MULTI_OUTPUT_VIEW_OPS
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_complex as tcx

# the in-place methods (and torch functions) this module runs
SHAPE_METHODS = frozenset({"squeeze_", "unsqueeze_", "transpose_", "t_", "swapaxes_", "swapdims_", "resize_",
                           "resize_as_", "as_strided_"})


def _functional(name: str):
    """self, args -> the view eager's tensor becomes, as ops on proxies (the out-of-place method)."""
    plain = {"unsqueeze_": "unsqueeze", "squeeze_": "squeeze", "t_": "t", "transpose_": "transpose",
             "swapaxes_": "transpose", "swapdims_": "transpose"}.get(name)
    if name == "as_strided_":
        return _as_strided
    if plain is not None:
        return lambda self, *args, **kwargs: getattr(self, plain)(*args, **kwargs)
    if name == "resize_as_":
        return lambda self, other, memory_format=None: _resized(self, tuple(other.shape), memory_format, name)
    return lambda self, *sizes, memory_format=None: _resized(self, _sizes(sizes), memory_format, name)


def _sizes(sizes) -> tuple:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    for s in sizes:
        if not isinstance(s, (int, NumberProxy)) or isinstance(s, bool):
            raise TypeError(f"resize_(): argument 'size' must be tuple of ints, but found element of type "
                            f"{type(s).__name__}")
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(sizes)}")
    return tuple(sizes)


def _resized(self: TensorProxy, sizes: tuple, memory_format, name: str):
    """resize_ to at most self's number of elements: eager keeps the storage and its offset and lays the new sizes
    out contiguously over it. A contiguous self: a view of its first elements (writes through it are followed);
    another layout: as_strided over its memory. More elements than self has are refused (eager's new elements are
    uninitialized memory, or other tensors' data). To the sizes self has: self, as it is (eager's keeps its strides,
    fuzz seed 256)."""
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        raise UnsupportedError("in-place metadata change", f"Tensor.{name} with memory_format={memory_format}",
                               hint="resize_ without memory_format, then permute the result")
    if len(sizes) == self.ndim and all(a is b or bool(a == b) for a, b in zip(sizes, self._shape)):
        return self  # the sizes it has: eager leaves it as it is, strides too (a transposed tensor stays transposed;
        # a run-time-sized one, whose layout is not known here, needs none: fuzz seed 734)
    n = math.prod(sizes) if sizes else 1
    have = self.numel()
    if n > have:
        raise UnsupportedError(
            "in-place metadata change", f"Tensor.{name} to {n} elements grows a tensor of {have}: eager's new "
            "elements are uninitialized memory (or other tensors' data), which a traced program cannot reproduce",
            hint="resize_ to at most as many elements, or make a new tensor (`torch.zeros(shape)`) and copy into it")
    meta = self.eager_layout()
    if meta is not None and meta.is_contiguous():
        flat = self.view(-1) if self.ndim != 1 else self
        if n != have:
            flat = flat.narrow(0, 0, n)
        return flat.view(sizes)
    sizes = tuple(s if type(s) is int else int(s) for s in sizes)
    strides, step = [], 1
    for s in reversed(sizes):
        strides.append(step)
        step *= s
    return _as_strided(self, sizes, tuple(reversed(strides)))


def _as_strided(self: TensorProxy, size, stride, storage_offset=None):
    """self.as_strided(size, stride): as view ops where the strides nest (each a multiple of the next, past its extent)
    and the elements lie within a contiguous tensor, self or the one it views (writes through the result are then
    followed: the fuzzer's `x.as_strided_((2, 2), (1, 2))`, resize_ of a transposed view); else the opaque as_strided
    over self's memory."""
    size, stride = tuple(size), tuple(stride)
    if len(size) == len(stride) and all(type(n) is int and n > 0 for n in size) and \
            all(type(s) is int and s > 0 for s in stride):
        dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -stride[d])
        nested = all(stride[a] % stride[b] == 0 and stride[a] >= size[b] * stride[b] for a, b in pairwise(dims))
        block = size[dims[0]] * stride[dims[0]] if dims else 1
        meta = self.eager_layout() if nested and storage_offset is None else None
        if meta is not None and meta.is_contiguous() and block <= self.numel():
            return _nested_view(self, size, stride, dims, block)
        found = _within_root(self, block, storage_offset) if nested else None
        if found is not None:
            return _nested_view(found[0], size, stride, dims, block, found[1])
    if len(size) == len(stride) and all(type(n) is int and n > 0 for n in size) and \
            all(type(s) is int and s >= 0 for s in stride) and (storage_offset is None or type(storage_offset) is int):
        found = _in_memory(self, size, stride, storage_offset)
        if found is not None:  # any strides (places may repeat) over memory laid out contiguously in eager
            return ps.as_strided(found[0], size, stride, found[1], found[2])
    return self.as_strided(size, stride, storage_offset)


def _in_memory(self, size, stride, storage_offset):
    """(a tensor laid out contiguously in eager whose memory holds the view's places: self, or the one it views (a
    complex one as view_as_real, where self is its real or imaginary part), or either with its dims permuted into
    memory order where it is laid out densely in another order; where in it the view starts) when the view's places
    lie within it, and a gradient through the view reaches only self's elements (the view's places are all self's,
    or self requires none, or where they are not, the gradient kept to self's places: grad_within); else None."""
    smeta = self.eager_layout("exact")
    if smeta is None:
        return None
    extent = 1 + sum((n - 1) * s for n, s in zip(size, stride))
    first = smeta.storage_offset() if storage_offset is None else storage_offset
    root = view_path(_makers(), self)[1]
    for t, meta in _holders(self, smeta, root):
        order = _memory_order(meta) if meta is not None and t.dtype == self.dtype else None
        start = None if order is None else first - meta.storage_offset()
        if start is None or not (0 <= start and start + extent <= t.numel()):
            continue
        within = None  # (eager's as_strided backward drops what falls outside self's places: fuzz seed 1123)
        if t is not self and self.requires_grad and not _places_of_self(smeta, size, stride, first):
            within = (tuple(smeta.shape), tuple(smeta.stride()), smeta.storage_offset() - meta.storage_offset(), True)
        return (t if order == tuple(range(t.ndim)) else t.permute(order)), start, within
    return None


def _holders(self, smeta, root):
    """The tensors whose memory may hold the view's places, with their eager layouts: self, the tensor it views, and
    a complex one's view_as_real (made only when asked: it records a line)."""
    yield self, smeta
    if root is self:
        return
    rmeta = root.eager_layout("exact")
    yield root, rmeta
    if rmeta is not None and root.dtype.is_complex and self.dtype == root.dtype.to_real() and \
            not (services().records_user_code and tcx.lazy_bits(root)[0]):  # (eager's view_as_real refuses a conj bit)
        yield tcx.view_as_real(root), torch.view_as_real(rmeta)


def _places_of_self(smeta, size, stride, offset) -> bool:
    """Whether every place of the view (size, stride, offset) is one of self's (laid out as smeta): eager's as_strided
    backward then drops nothing, and what it sends each place (divided among self's elements there where they repeat,
    summed again by self's own backward) is what a gradient through the tensor self views sends it."""
    ends = [offset + sum((n - 1) * s for n, s in zip(size, stride)),
            smeta.storage_offset() + sum((n - 1) * s for n, s in zip(smeta.shape, smeta.stride()))]
    if max(ends) >= 1 << 24:
        return False
    places = torch.arange(max(ends) + 1)
    mine = places.as_strided(tuple(smeta.shape), smeta.stride(), smeta.storage_offset()).reshape(-1)
    return bool(torch.isin(places.as_strided(size, stride, offset).reshape(-1), mine).all())


def _memory_order(meta) -> tuple | None:
    """The permutation of meta's dims that lays it out contiguously (outermost first), or None when none does."""
    order = tuple(sorted(range(meta.ndim), key=lambda d: (-meta.stride(d), d)))
    return order if meta.permute(order).is_contiguous() else None


def _within_root(self, block, storage_offset):
    """(the contiguous tensor self views, where in it the storage offset is) when `block` elements from there lie
    within it; else None."""
    root = view_path(_makers(), self)[1]
    if root is self:
        return None
    rmeta, smeta = root.eager_layout("exact"), self.eager_layout("exact")
    if rmeta is None or smeta is None or not rmeta.is_contiguous():
        return None
    start = (smeta.storage_offset() if storage_offset is None else storage_offset) - rmeta.storage_offset()
    return (root, start) if 0 <= start and start + block <= root.numel() else None


def _nested_view(self, size, stride, dims, block, start=0):
    """The as_strided view of a contiguous self with nested strides: `block` elements of it from `start` viewed as
    (n1, s1 / s2, ..., s_k), each split dim narrowed to its size, the last taken at 0, permuted into place."""
    flat = self.reshape(-1).narrow(0, start, block)
    if not dims:
        return flat.reshape(size)
    shape = [size[dims[0]]] + [stride[a] // stride[b] for a, b in pairwise(dims)] + [stride[dims[-1]]]
    t = flat.view(shape).select(-1, 0)
    for k, d in enumerate(dims[1:], start=1):
        t = t.narrow(k, 0, size[d])
    order = sorted(range(len(dims)), key=lambda k: dims[k])  # (the dims of t in place order)
    t = t.permute(order)
    for d in range(len(size)):
        if size[d] == 1:
            t = t.unsqueeze(d)
    return t


def _makers() -> dict:
    return {o.name: b for scope in get_tracectx()._scopes for b in scope for o in b.flat_proxy_outs()}


def _base_of_views(x: TensorProxy) -> bool:
    """Whether other tensors view x (in the lines recorded so far) and x is no view itself (or an input, which may be
    a view or not in the caller's hands)."""
    makers = _makers()
    if not any(is_eager_view(b) and viewed_tensor(b) is x for b in makers.values()):
        return False
    return not view_path(makers, x)[0] or services().leaf_input(x) is not None


def _views_through_new_strides(self: TensorProxy, size, stride, storage_offset=None) -> list:
    """self.as_strided_(size, stride) of a tensor that requires grad and that other tensors view: eager's autograd
    then replays each of those views over self's new strides, so its gradient reaches only the places of the new
    view (each place once: eager divides among the view's repeats what its own backward sums again). [(each such view,
    its remake: prims.as_strided of self's memory with grad_within the new view)] where a view reaches places outside
    it; refused clearly where the layouts are not known."""
    if not (self.requires_grad and torch.is_grad_enabled() and _base_of_views(self)):
        return []
    makers = _makers()
    outs = {o.name: o for b in makers.values() for o in b.flat_proxy_outs() if isinstance(o, TensorProxy)}
    views = {n: o for n, o in outs.items() if o is not self and view_path(makers, o)[1] is self}
    if not views:
        return []
    refusal = UnsupportedError(
        "in-place metadata change", "Tensor.as_strided_ of a tensor that requires grad and is the base of other views "
        "laid out in a way not known here: eager's autograd then sends the gradients of those views through the new "
        "strides (losing those of the elements left out)", hint="use `y = y.as_strided(...)`, or clone() the tensor "
        "before as_strided_")
    bmeta = self.eager_layout("exact")
    order = None if bmeta is None else _memory_order(bmeta)
    size, stride = tuple(size), tuple(stride)
    if order is None or not all(type(n) is int for n in (*size, *stride)) or \
            not (storage_offset is None or type(storage_offset) is int):
        raise refusal
    base = self if order == tuple(range(self.ndim)) else self.permute(order)
    within = (size, stride, (bmeta.storage_offset() if storage_offset is None else storage_offset) -
              bmeta.storage_offset(), "places" if bmeta.is_contiguous() and bmeta.storage_offset() == 0 else False)
    # (writes into those views: at the new view's places only, transforms/functionalize.py)
    extent = within[2] + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if not (within[2] >= 0 and extent <= self.numel() and len(size) == len(stride) and all(n > 0 for n in size)
            and all(s >= 0 for s in stride)):
        raise refusal
    new_view = torch.empty((extent,), device="meta").as_strided(size, stride, within[2])
    found = []
    for v in views.values():
        vmeta = v.eager_layout("exact")
        if not v.requires_grad:
            raise UnsupportedError(
                "in-place metadata change", "Tensor.as_strided_ of a tensor that requires grad and that a view made "
                "under no_grad views: eager refuses reads of that view after it", hint="clone() the view first")
        if vmeta is None or v.dtype != self.dtype:
            raise refusal
        if _multi_view_of(v) is not None:  # (eager refuses a read of it after: a change of the base it shares)
            raise UnsupportedError(
                "in-place metadata change", f"Tensor.as_strided_ of a tensor that requires grad and that a view made "
                f"by {_multi_view_of(v)} views: eager refuses reads of that view after it (its base changed in place)",
                hint="clone() the pieces before as_strided_")
        vsize, vstride = tuple(vmeta.shape), tuple(vmeta.stride())
        voff = vmeta.storage_offset() - bmeta.storage_offset()
        if _places_of_self(new_view, vsize, vstride, voff):
            continue  # (all its places are the new view's: eager's gradient is the one it has)
        found.append((v, ps.as_strided(base, vsize, vstride, voff, within)))
    return found


def _multi_view_of(x: TensorProxy) -> str | None:
    """The view op whose pieces eager marks as outputs of a multi-output view (split, unbind, ...) x comes from
    through views, if any."""
    makers = _makers()
    lines, _ = view_path(makers, x)
    made = [b for b, _out in lines] + [b for b in (makers.get(x.name),) if b is not None]
    return next((b.sym.id.removeprefix("ltorch.") for b in made if b.sym.id in MULTI_OUTPUT_VIEW_OPS), None)


def _eager_multi_view_error(x: TensorProxy, op: str) -> RuntimeError:
    """Eager's own error for an in-place change of x, a view of a piece of `op`: x's views replayed from its root on
    meta tensors (eager's message names the last view's autograd node, whose name differs between torch releases)."""
    lines, root = view_path(_makers(), x)
    try:
        env = {root.name: torch.empty(tuple(value_of(n) for n in root._shape), dtype=root.dtype, device="meta",
                                      requires_grad=True) * 1}
        for b, out in reversed(lines):
            flat, spec = tree_flatten((b.args, b.kwargs))
            vals = [env[a.name] if isinstance(a, TensorProxy) else value_of(a) if isinstance(a, NumberProxy) else a
                    for a in flat]
            margs, mkwargs = tree_unflatten(spec, vals)
            outs = tree_flatten(b.sym.torch_fn(*margs, **mkwargs))[0]
            env[out.name] = outs[[o.name for o in b.flat_proxy_outs()].index(out.name)]
        env[x.name].unsqueeze_(0)
    except RuntimeError as e:
        if "is a view and is being modified inplace" in str(e):
            return RuntimeError(str(e))
    except Exception:  # (an op with no meta kernel or torch function: the message below, with eager's wording)
        pass
    return RuntimeError(f"Output 0 of {op.capitalize()} is a view and is being modified inplace. This view is the "
                        "output of a function that returns multiple views. Such functions do not allow the output "
                        "views to be modified inplace. You should replace the inplace operation by an out-of-place "
                        "one.")


def _eager_refusals(name: str, self: TensorProxy):
    """The calls eager refuses (raised as eager raises them) and those jitcore cannot follow (refused clearly)."""
    if name in ("resize_", "resize_as_") and self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if not self.requires_grad:
        return
    if not torch.is_grad_enabled():
        raise UnsupportedError(
            "in-place metadata change", f"Tensor.{name} under no_grad of a tensor that requires grad: eager changes "
            "its shape without recording it, so its gradient no longer fits it", hint=f"use `y = y.{name[:-1]}(...)`")
    if self.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    _, root = view_path(_makers(), self)
    if root is not self and root.requires_grad and root.is_leaf:  # (`x[1:].unsqueeze_(0)`, x a leaf argument)
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    multi = _multi_view_of(self)
    if multi is not None:
        raise _eager_multi_view_error(self, multi)


def metadata_method(name: str):
    """The Tensor method `name` (one of SHAPE_METHODS) on proxies: eager's refusals, then the view the tensor becomes,
    made the tensor's own (the same object, new sizes and strides)."""
    functional = _functional(name)

    def call(self, *args, **kwargs):
        if not isinstance(self, TensorProxy):
            raise TypeError(f"Tensor.{name}: expected a tensor, got {type(self).__name__}")
        _eager_refusals(name, self)
        stale = _views_through_new_strides(self, *args, **kwargs) if name == "as_strided_" else ()
        new = functional(self, *args, **kwargs)
        if new is not self:
            if not isinstance(new, TensorProxy) or new.dtype != self.dtype:
                raise UnsupportedError("in-place metadata change", f"Tensor.{name} made no view of the tensor")
            change = (name, args, kwargs)
            if name == "resize_as_":  # (the epilogue replays it on the caller's tensor: with the sizes, not a tensor)
                change = ("resize_", (tuple(new.shape),), kwargs)
            services().rebind_tensor(self, new, (*change, torch.is_grad_enabled()))
        for view, masked in stale:  # (not a change of their own: eager's version counter moved once, above)
            line = next((b for b in reversed(get_tracectx()._scopes[-1]) if any(o is masked for o in b.flat_outs())),
                        None)
            services().rebind_tensor(view, masked, (name, (), {}, torch.is_grad_enabled()))
            if line is not None:
                line.moves_version = False
        return self

    call.__name__ = name
    return call


def metadata_function(fn):
    """torch.as_strided_(x, ...) / torch.resize_as_(x, y): the method on x."""
    method = metadata_method(fn.__name__)

    def call(self, *args, **kwargs):
        return method(self, *args, **kwargs)

    return call
