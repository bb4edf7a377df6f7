"""Epilogue stage: the epilogue Trace of side effects and escaping objects. What the traced function wrote outside
itself (attributes, globals, items of external containers, closure cells, mutating calls like list.append) is replayed
after every call with that call's real values, so a jitted call has eager's effects. Tensors computed by the trace reach
it as `outs[i]`. Objects the call hands back or stores that are not tensors or scalars escape the trace (`Escapes`):
one the function created (a KV cache, a result object) is built afresh on every call around that call's tensors; one
it was given (an argument returned, `return x, cache`) is fetched again from that call's arguments.
"""
from __future__ import annotations

import collections
import contextlib
import enum
import types
from dataclasses import dataclass, field

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.guards.prologue import provenance_expr
from jitcore.ir.data_ptr import Address, address_error
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_leaves, tree_unflatten
from jitcore.ir.ranges import RangeList, SymbolicRange
from jitcore.ir.symbol import (
    BoundSymbol,
    Symbol,
    Tag,
    is_eager_view,
    memory_path,
    recorded_without_grad,
    view_root,
    viewed_tensor,
)
from jitcore.ir.trace import Timer, Trace


class _Out(Proxy):
    """`outs[i]` in the epilogue's text: the i-th flat output of the computation."""

    prefix = "o"


def _print_effect(bsym, printer):
    effect, value = bsym.args
    kind, key = effect.kind, effect.key
    v = printer.value(value)
    if kind in ("setglobal", "delglobal", "setcell"):
        target = printer.const(effect.obj)
    else:
        target = provenance_expr(effect.target, printer)
    if kind == "setattr":
        return f"setattr({target}, {key!r}, {v})"
    if kind == "delattr":
        return f"delattr({target}, {key!r})"
    if kind in ("setitem", "setglobal"):
        return f"{target}[{printer.value(key)}] = {v}"
    if kind in ("delitem", "delglobal"):
        return f"del {target}[{printer.value(key)}]"
    if kind == "setcell":
        return f"{target}.cell_contents = {v}"
    args, kwargs = value
    return f"{target}.{key}({printer.call_args(args, kwargs)})"


replay = Symbol("epilogue.replay", "replay", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                printer=_print_effect)


def _print_writeback(bsym, printer):
    prov, value, no_grad, moved, sliced = bsym.args
    target = provenance_expr(prov, printer)
    if sliced:  # (CopySlices: a write through a view)
        target = f"{printer.const(whole_view)}({target})"
    if no_grad:
        line = f"{printer.const(copy_no_grad)}({target}, {printer.value(value)})"
    else:
        line = f"{target}.copy_({printer.value(value)})"
    return f"{printer.const(compat.move_version)}({line}, {moved})" if moved else line


def whole_view(x):
    """x[...], a view of all of x, for a writeback through a view (x's grad_fn then CopySlices, as after eager's
    `x[i] = v`); x itself when it is a view (the copy then makes its base's CopySlices already; a copy into x[...]
    would leave a view of a base without grad looking like a leaf to a later in-place op)."""
    return x if x._base is not None else x[...]


def copy_no_grad(dst, src):
    with torch.no_grad():
        return dst.copy_(src)


# an input the computation wrote into (x.add_(y), x[i] = v, running stats): the caller's tensor gets its new value,
# through a view where eager's last recorded write went through one (its grad_fn is CopySlices), and its version
# counter moves as eager's did (once per in-place op: `moved` more than the copy's own move)
writeback = Symbol("epilogue.writeback", "writeback", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE),
                   module="", printer=_print_writeback)


def _print_restride(bsym, printer):
    prov, changes = bsym.args
    return f"{printer.const(apply_metadata_changes)}({provenance_expr(prov, printer)}, {printer.value(changes)})"


def apply_metadata_changes(x, changes):
    """The caller's tensor x changed in place as the function changed it (`x.unsqueeze_(0)`, `x.t_()`, ...), by torch's
    own methods, in order, each in the grad mode it was made in (each moving its version counter as eager's did)."""
    for name, args, kwargs, grad in changes:
        with torch.set_grad_enabled(grad):
            getattr(x, name)(*args, **kwargs)


# an input the function changed the metadata of (sizes, strides): the caller's tensor gets the change
restride = Symbol("epilogue.restride", "restride", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                  printer=_print_restride)


def effect_proxies(side_effects, escapes: Escapes) -> list:
    """The proxies the side effects store (inside objects the call created too): the computation returns them."""
    out = []
    for e in side_effects:
        leaves, _ = tree_flatten((e.value, e.args, e.kwargs))
        for leaf in leaves:
            if isinstance(leaf, Proxy):
                out.append(leaf)
            else:
                escapes.template(leaf, _Stores(e))
    return out


class _Stores:
    """"`<side effect>` stores", for the error that names it: formatted only then (formatting reads the values stored,
    and a range of symbolic sizes printed for nothing would record the predicates that pin its bounds)."""

    def __init__(self, effect):
        self.effect = effect

    def __str__(self):
        return f"`{self.effect}` stores"


# -- escaping objects: built afresh (made by the call) or fetched again (given to it) on every call -----------------
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.memory_format,
          torch.layout, type(Ellipsis), slice, range)
_NOT_REBUILT = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
                torch.nn.Module, enum.Enum, torch.Tensor, Proxy)


_BASES = (collections.OrderedDict, dict, list, tuple, object)  # what a rebuilt object's state is kept in


def _rebuild_base(obj):
    """The builtin base whose state (with the instance __dict__) is an object's whole state, or None when it cannot
    be copied that way: a plain Python object (`object`), or a user subclass of dict, OrderedDict, list or tuple."""
    cls = type(obj)
    if isinstance(obj, _NOT_REBUILT) or cls.__module__ == "builtins" or cls in _BASES:
        return None
    if any(c.__dict__.get("__slots__") not in (None, (), []) for c in cls.__mro__ if c is not object):
        return None
    base = next((b for b in cls.__mro__ if b in _BASES), None)
    if not isinstance(getattr(obj, "__dict__", None), dict):  # a class defined in C (torch.Size) or with slots
        return None
    if base is object and cls.__new__ is not object.__new__:
        return None
    if any(c.__module__ == "builtins" and c not in _BASES for c in cls.__mro__):
        return None  # another C type's state (set, bytearray, ...) would be lost
    return base


@dataclass
class _Built:
    """An object the function made, as the epilogue builds it: `base.__new__(cls)`, then its items (container
    subclasses; a tuple's are given to __new__) and its attributes."""

    name: str
    cls: type
    base: type
    attrs: dict = field(default_factory=dict)
    items: object = None


def _holds_proxy(obj, seen=None, depth=0) -> bool:
    """Whether a value reaches a proxy through containers and attributes (a constant must not)."""
    if isinstance(obj, Proxy):
        return True
    if depth > 8 or isinstance(obj, _PLAIN) or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
        return False
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_holds_proxy(x, seen, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return any(_holds_proxy(x, seen, depth + 1) for x in obj.values())
    if isinstance(obj, torch.nn.Module):
        return False
    d = getattr(obj, "__dict__", None)
    values = list(d.values()) if isinstance(d, dict) else []
    if type(obj).__module__ == "string.templatelib":  # 3.14's t-strings: a Template's interpolations hold values
        values += list(getattr(obj, "interpolations", ())) + [getattr(obj, "value", None)]
    for c in type(obj).__mro__:
        slots = c.__dict__.get("__slots__", ())
        values += [getattr(obj, n, None) for n in ((slots,) if isinstance(slots, str) else slots)
                   if n not in ("__dict__", "__weakref__")]
    return any(_holds_proxy(x, seen, depth + 1) for x in values)


class Escapes:
    """The objects that leave a trace other than as tensors and scalars, and how each call gets them.

    external: id -> provenance of every object the call was given (the interpreter's record, which keeps them
    alive); pinned(provenance): whether the guards make a call's object there the traced one. An object the
    function created is rebuilt on every call (`built`, in creation order, with the template of its attributes);
    one it was given is fetched from the call's arguments (`fetched`), unless it is pinned (then a constant).
    `proxies` are the values inside rebuilt objects: the computation returns them after the side effects' values.
    """

    def __init__(self, external: dict, pinned):
        self.external, self.pinned = external, pinned
        self.built: dict = {}  # id -> _Built, in the order the epilogue makes them
        self.fetched: dict = {}  # id -> (local name, provenance)
        self.proxies: list = []
        self.outputs: dict = {}  # position in the flat outputs -> the template it gets

    def __bool__(self):
        return bool(self.built or self.fetched or self.outputs)

    def template(self, x, where):
        """x as the epilogue builds it: proxies stay, made objects and given objects become locals of the epilogue
        (`_Out`), plain lists/tuples/dicts are rebuilt around their items, anything else is a constant."""
        if isinstance(x, Proxy):
            if not isinstance(x, _Out):
                self.proxies.append(x)
            return x
        t = type(x)
        if t is Address:  # (eager's is a number; jitcore knows only its alignment)
            raise address_error(x.name, "returning" if where == "output" else f"{where}")
        if t is SymbolicRange:  # range(n) of a size: built from the call's sizes (the computation returns them)
            return SymbolicRange(*(self.template(v, where) for v in x.parts()))
        if t is RangeList:  # list(range(n)) (pinned when the interpretation ended): a new list on every call
            return [self.template(v, where) for v in x]
        if isinstance(x, _PLAIN):
            return x
        prov = self.external.get(id(x))
        if prov is not None:
            if self.pinned(prov):
                return x
            if id(x) not in self.fetched:
                self.fetched[id(x)] = (f"f{len(self.fetched)}", prov)
            return _Out(self.fetched[id(x)][0])
        if t is list or t is tuple:
            return t(self.template(e, where) for e in x)
        if t is dict:
            return {k: self.template(v, where) for k, v in x.items()}
        base = _rebuild_base(x)
        if base is not None:
            built = self.built.get(id(x))
            if built is None:
                built = _Built(f"b{len(self.built)}", t, base)
                if base is not tuple:  # made before its items: they may refer back to it
                    self.built[id(x)] = built
                if base in (dict, collections.OrderedDict):
                    built.items = {k: self.template(v, where) for k, v in base.items(x)}
                elif base is not object:
                    built.items = [self.template(v, where) for v in base.__iter__(x)]
                built.attrs = {k: self.template(v, where) for k, v in getattr(x, "__dict__", {}).items()}
                self.built[id(x)] = built
            return _Out(built.name)
        if _holds_proxy(x):
            raise UnsupportedError("output" if where == "output" else "side effect",
                                   f"{where} a {t.__name__} holding tensors, and jitcore cannot build a "
                                   f"{t.__name__} for every call (it is not a plain Python object)",
                                   hint="return or store tensors in tuples, lists, dicts, dataclasses or plain objects")
        return x

    @staticmethod
    def is_local(x) -> bool:
        return isinstance(x, _Out)

    def given_containers(self, tree):
        """The output with each list, tuple or dict the call was given (and not pinned) replaced by the epilogue's
        local that fetches it: eager hands back the caller's own container, with what the call wrote into it."""
        t = type(tree)
        if t is not list and t is not tuple and t is not dict:
            return tree
        prov = self.external.get(id(tree))
        if prov is not None and not self.pinned(prov):
            return self.template(tree, "output")
        items = tree.items() if t is dict else enumerate(tree)
        new = {k: self.given_containers(v) for k, v in items}
        if all(new[k] is v for k, v in (tree.items() if t is dict else enumerate(tree))):
            return tree
        return new if t is dict else t(new[i] for i in range(len(tree)))

    def output(self, position: int, leaf):
        """The flat output at `position` is an escaping object: None in the computation, set by the epilogue."""
        value = leaf if isinstance(leaf, _Out) else self.template(leaf, "output")
        if isinstance(value, _Out):
            self.outputs[position] = value
            return None
        return leaf


def _print_local(bsym, printer):
    kind, name, value = bsym.args
    if kind == "fetch":
        return f"{name} = {provenance_expr(value, printer)}"
    if kind == "new":
        base, cls, items = value
        new = f"{_base_name(base, printer)}.__new__({printer.const(cls)}"
        return f"{name} = {new})" if items is None else f"{name} = {new}, {printer.value(items)})"
    if kind == "items":
        base, items = value
        return f"{_base_name(base, printer)}.{'update' if isinstance(items, dict) else 'extend'}({name}, " \
               f"{printer.value(items)})"
    if kind == "fill":
        return f"{name}.__dict__.update({printer.value(value)})"
    if kind == "list":
        return "outs = list(outs)"
    if kind == "regenerated":
        return f"{name} = {printer.const(regenerated)}({printer.value(value)})"
    if kind == "move":
        return f"{printer.const(compat.move_version)}({provenance_expr(value, printer)}, {name})"
    if isinstance(value, _Viewed):
        return f"outs[{name}] = {printer.const(view_of_written)}({', '.join(printer.value(v) for v in value)})"
    return f"outs[{name}] = {printer.value(value)}"


class _Viewed(tuple):
    """(the caller's tensor, an output viewing the value written into it, that value): the output to hand back."""


def view_of_written(x, out, value, detached=False):
    """`out`, a view of `value` (the new value of the caller's tensor `x`, just copied into it), as the same view of
    `x`: eager's output shares x's memory, and writes through it reach x. A view the program made without history
    (under no_grad) is made so here, and requires grad as x's root base does, as eager's; one with history is made
    with it. Where no strided view of x is that view (a dtype view; eager's view would have failed), a tensor of its
    own: `out` itself when it has its own memory (an Inductor region computed it), else a copy (`value` may be
    another input: `x.copy_(y); return x[0]`). detached: out is a view through `x.detach()` (no autograd history and
    no grad required, as eager's)."""
    if detached and isinstance(out, torch.Tensor):
        if out.requires_grad:  # (a detach() written with a gradient: a history of its own, out as the program made it)
            return out
        made = view_of_written(x, out, value)
        return made.detach() if made is not out else out
    if out is None or value is None or out is x:
        return out
    if out.untyped_storage().data_ptr() != value.untyped_storage().data_ptr():
        return out
    complex_view = x.is_complex() or out.is_complex()
    if out.dtype == x.dtype and value.shape == x.shape and out.device == x.device and not complex_view:
        strides = _map_strides(value, x, out.stride(), out.storage_offset() - value.storage_offset(), out.shape)
        if strides is not None:
            with torch.no_grad() if out.grad_fn is None else contextlib.nullcontext():
                return x.as_strided(out.shape, strides[0], x.storage_offset() + strides[1])
    if complex_view and value.shape == x.shape and out.device == x.device and not out.is_neg():
        made = _complex_view_of(x, out, value)
        if made is not None:
            return made
    if out.grad_fn is None:
        return out.detach().clone().requires_grad_(out.requires_grad)
    return out.clone()


def _physical_real(t):
    """t's memory as a real tensor: a complex tensor as its (real, imaginary) pairs, its lazy conjugate bit aside."""
    if t.is_complex():
        return torch.view_as_real(t.conj() if t.is_conj() else t)
    return t


def _complex_view_of(x, out, value):
    """view_of_written's view where x or out is complex (z.imag, z.conj(), view_as_real(z), a complex view of a real
    x): the view mapped between their memories read as real pairs, then made complex and conjugated as `out` is."""
    xr, vr, outr = _physical_real(x), _physical_real(value), _physical_real(out)
    flip = x.is_complex() and value.is_complex() and x.is_conj() != value.is_conj()  # (x's memory holds conj(value))
    if outr.dtype != xr.dtype:
        return None
    strides = _map_strides(vr, xr, outr.stride(), outr.storage_offset() - vr.storage_offset(), outr.shape)
    if strides is None or (flip and not out.is_complex() and any(n % 2 for n in (*strides[0], strides[1]))):
        return None  # (real parts only, of an x whose memory holds conj(value): its imaginary parts are negated)
    with torch.no_grad() if out.grad_fn is None else contextlib.nullcontext():
        made = xr.as_strided(outr.shape, strides[0], xr.storage_offset() + strides[1])
        if out.is_complex():
            made = torch.view_as_complex(made)
            made = made.conj() if out.is_conj() != flip else made
    return made


def _map_strides(value, x, strides, offset, sizes):
    """(strides, offset) in x's memory of the view (strides, offset, sizes) of value's memory, or None. value has
    x's shape and no two of its elements share memory (it may have gaps: slice_scatter keeps a strided input's
    strides), so an offset in its memory is a position (one digit per dim, value's layout); the view maps when no
    step along it carries from one digit into the next. x may have any strides."""
    if value.stride() == x.stride():
        return tuple(strides), offset
    if not _non_overlapping(value):  # (an expanded value: the functional program writes back a copy instead)
        return None
    dims = sorted(range(value.dim()), key=lambda d: -value.stride(d))

    def digits(n):
        out = [0] * value.dim()
        for d in dims:
            if value.shape[d] > 1:
                out[d], n = divmod(n, value.stride(d))
        return out if n == 0 else None

    base = digits(offset)
    steps = [digits(s) if n > 1 else [0] * value.dim() for s, n in zip(strides, sizes)]
    if base is None or any(s is None for s in steps):
        return None
    for d in range(value.dim()):  # the largest index along the view stays inside dim d: no carry
        if base[d] + sum((n - 1) * s[d] for s, n in zip(steps, sizes) if n > 0) >= max(value.shape[d], 1):
            return None
    def place(ds):
        return sum(k * x.stride(d) for d, k in enumerate(ds))
    return [place(s) for s in steps], place(base)


def _non_overlapping(t) -> bool:
    """Whether no two of t's elements share memory, its dims nested in order of their strides (each stride past the
    span of the dims with smaller ones)."""
    span = 1
    for d in sorted(range(t.dim()), key=lambda d: t.stride(d)):
        if t.shape[d] == 1:
            continue
        if t.stride(d) < span:
            return False
        span += t.stride(d) * (t.shape[d] - 1)
    return True


def _base_name(base, printer) -> str:
    return base.__name__ if base.__module__ == "builtins" else printer.const(base)


# the epilogue's own locals: fetched arguments, objects built afresh, and the outputs they become
local = Symbol("epilogue.local", "local", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
               printer=_print_local)


def build_epilogue(side_effects, output_index: dict, writebacks=(), escapes: Escapes | None = None,
                   returned=(), inputs=None, views=(), tails: tuple = (), restrided=(), moved=()) -> Trace | None:
    """The epilogue trace `epilogue(fn, args, kwargs, outs) -> outs`, or None when the function wrote nothing outside
    and hands back no escaping object.

    output_index: proxy name -> its position in the computation's flat outputs. writebacks: (provenance of a
    mutated input tensor, its position in the flat outputs, whether to copy under no_grad), written back first.
    returned: (provenance of an input tensor, the flat output positions that are that tensor itself): those outputs
    become the caller's own tensor (after the writebacks), as eager returns it.
    escapes: the objects to fetch again and to build afresh (fetched before anything is written, so a given object
    is the one the call read; built before the side effects that store them). inputs: input tensor name -> its
    provenance: a side effect storing an input (`self.buf += x` stores the buffer it wrote into, `self.last = x`)
    stores the caller's tensor, fetched before the side effects replay, as eager stores that object.
    views: (provenance of an input tensor the program wrote into, the flat output position of its new value (None:
    the caller's tensor, views_of_moved), the flat output positions that are views of that value): after the
    writeback (and the moves) those outputs become the same views of the caller's tensor (view_of_written), so that
    writes through them reach it, as in eager.
    tails: the programs computing what reads written inputs' new values (transforms/written_tails.py), each run on
    the callers' tensors once their writebacks are done; the writebacks of values one computes follow it.
    restrided: (provenance of an input tensor, its in-place metadata changes): replayed on the caller's tensor after
    the writebacks and the views above (which read its layout as the program saw it).
    moved: (provenance of an input tensor, how far its version counter moves more), from version_moves.
    """
    if not side_effects and not writebacks and not escapes and not returned and not views and not restrided and \
            not moved:
        return None
    late = {prov for prov, value_at, *_ in views if value_at is None}  # (views_of_moved's: made before the move,
    moved, late = [m for m in moved if m[0] not in late], [m for m in moved if m[0] in late]  # as eager's were)
    with Timer() as t:
        trace = Trace("epilogue")
        trace.args = ["fn", "args", "kwargs", "outs"]

        def sub(x):
            return _Out(f"outs[{output_index[x.name]}]") if isinstance(x, Proxy) and not isinstance(x, _Out) else x

        def line(*args):
            trace.bound_symbols.append(BoundSymbol(local, args, {}, None))

        if escapes:
            for name, prov in escapes.fetched.values():
                line("fetch", name, prov)
        if tails:  # their values may be stored in the objects built below
            _writebacks_and_tails(trace, writebacks, tails, [BoundSymbol(local, ("move", by, prov), {}, None)
                                                              for prov, by in moved])
        if escapes:
            for b in escapes.built.values():
                line("new", b.name, (b.base, b.cls, None if b.base is not tuple else _map(tuple(b.items), sub)))
            for b in escapes.built.values():
                if b.base is not tuple and b.base is not object:
                    line("items", b.name, (b.base, _map(b.items, sub)))
                if b.attrs:
                    line("fill", b.name, _map(b.attrs, sub))
            if escapes.outputs:
                line("list", None, None)
            for position, value in escapes.outputs.items():
                line("output", position, value)
        if not tails:
            for prov, position, *how in writebacks:
                trace.bound_symbols.append(BoundSymbol(writeback, (prov, _Out(f"outs[{position}]"), *how), {}, None))
            for prov, by in moved:  # (after the writebacks: a counter moved before a copy into a view of x
                line("move", by, prov)  # would make autograd regenerate x's grad_fn from before the copy)
        if (returned or views) and not (escapes and escapes.outputs) and not tails:
            line("list", None, None)
        for k, (prov, positions) in enumerate(returned):  # `x.add_(1); return x`: the caller's own tensor
            line("fetch", f"r{k}", prov)
            for i in positions:
                line("output", i, _Out(f"r{k}"))
        for k, (prov, value_at, positions, stale, detached) in enumerate(views):  # `x.add_(1); return x[0]`:
            line("fetch", f"w{k}", prov)  # a view of the caller's tensor
            if stale:  # (made before the last write: eager regenerates it from the base, past x; `regenerated`)
                line("regenerated", f"u{k}", _Out(f"w{k}"))
            for i in positions:
                line("output", i, _Viewed((_Out(f"u{k}" if i in stale else f"w{k}"), _Out(f"outs[{i}]"),
                                           _Out(f"w{k}" if value_at is None else f"outs[{value_at}]"), i in detached)))
        for prov, by in late:
            line("move", by, prov)
        for prov, changes in restrided:  # `x.t_()`: the caller's tensor x changes as the function's did
            trace.bound_symbols.append(BoundSymbol(restride, (prov, changes), {}, None))
        stored = {}  # input tensor name -> the local the epilogue fetches it into
        for e in side_effects:
            for leaf in tree_flatten((e.value, e.args, e.kwargs))[0]:
                if isinstance(leaf, Proxy) and leaf.name in (inputs or {}) and leaf.name not in stored:
                    stored[leaf.name] = f"s{len(stored)}"
                    line("fetch", stored[leaf.name], inputs[leaf.name])
        if stored:
            plain = sub

            def sub(x):
                return _Out(stored[x.name]) if isinstance(x, Proxy) and x.name in stored else plain(x)

        for e in side_effects:
            if e.kind == "call":
                value = _map(escapes.template((e.args, e.kwargs), "") if escapes else (e.args, e.kwargs), sub)
            else:
                value = _map(escapes.template(e.value, "") if escapes else e.value, sub)
            trace.bound_symbols.append(BoundSymbol(replay, (e, value), {}, None))
        trace.output = _Out("outs")
    return trace.set_provenance("Epilogue construction (side effects, escaping objects)", t.seconds)


class TailRun:
    """Runs a program's tail (transforms/written_tails.py) in the epilogue: `targets` are the callers' tensors just
    written (the tail's first arguments, so that what it computes from them has their autograd history, as eager's
    has), then the head's boundary outputs; its results take the positions the head left None, and the boundary
    outputs are dropped."""

    def __init__(self, program, cuts: tuple, positions: tuple, boundary: tuple, n: int | None, standins: tuple = ()):
        self.program, self.cuts, self.positions, self.boundary, self.n = program, cuts, positions, boundary, n
        self.standins = standins  # (the targets read again as eager's regenerated views read them)
        self.size = max(positions) + 1

    def __call__(self, outs, targets):
        outs = list(outs)
        values = self.program(*targets, *[regenerated(targets[k]) for k in self.standins],
                              *[outs[b] for b in self.boundary])
        if len(outs) < self.size:  # (values a later tail reads)
            outs += [None] * (self.size - len(outs))
        for p, v in zip(self.positions, values):
            outs[p] = v
        if self.n is not None:  # the last tail: the values passed between them are dropped
            del outs[self.n:]
        return outs


def regenerated(x):
    """x as autograd remakes a view of a base written in place (a view made before the write, or written through):
    the same view made anew from x's base, its history going to the base without passing through x's own; x itself
    when it is no view (eager's regenerated views of x then go through x)."""
    return x if x._base is None else compat.view_again(x)


def _print_tail(bsym, printer):
    run, targets = bsym.args
    return f"outs = {printer.const(run)}(outs, ({''.join(provenance_expr(p, printer) + ', ' for p in targets)}))"


tail_run = Symbol("epilogue.tail", "tail", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                  printer=_print_tail)


def _writebacks_and_tails(trace: Trace, writebacks, tails: tuple, moves: list):
    """The writebacks of values the head computed, the version moves, then each tail on the tensors written so far,
    followed by the writebacks of the values it computed (that no later tail recomputes)."""
    targets = {position: prov for prov, position, *_ in writebacks}
    stage = {}  # writeback position -> the index of the last tail computing it (-1: the head)
    for k, tail in enumerate(tails):
        for p in tail.positions:
            stage[p] = k
    for k in range(-1, len(tails)):
        if k == 0:  # (before a tail saves a caller's tensor for its backward: at its final count, as eager's)
            trace.bound_symbols.extend(moves)
        if k >= 0:
            trace.bound_symbols.append(BoundSymbol(tail_run, (tails[k], [targets[p] for _, p in tails[k].cuts]), {},
                                                   None))
        for prov, position, *how in writebacks:
            if stage.get(position, -1) == k:
                trace.bound_symbols.append(BoundSymbol(writeback, (prov, _Out(f"outs[{position}]"), *how), {}, None))


def _map(tree, fn):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(spec, [fn(x) for x in leaves])


def writeback_specs(traced, writebacks) -> list:
    """(provenance, output position, under no_grad, version moves past the copy's, through a view) for each input
    the program wrote into."""
    out = []
    for w in writebacks:
        inp = traced.inputs[w.arg_index]
        out.append((inp.provenance, w.output_index, inp.proxy.requires_grad and not w.recorded, w.versions - 1,
                    w.sliced))
    return out


def version_moves(traced, written, copied=frozenset()) -> list:
    """(input position, moves, the line of the metadata change when the move would make a view's grad_fn anew) for
    each input whose version counter the epilogue moves besides its writeback: one the program itself wrote into
    (`written`: its transforms/memory.write_into_inputs writebacks), whose kernel moved it as eager's last write did
    (an out= form once, batch norm's running stats never), and one the function changed the metadata of a view of in
    place (`x[0].t_()`, `x.detach().resize_(n)`: eager moves the counter the view shares; not through x.data). copied:
    the positions of the inputs the epilogue writes back (their moves follow a copy: no grad_fn is made anew)."""
    lines = {}
    moves = metadata_moves(traced, lines)
    for w in written:
        moves[w.arg_index] = moves.get(w.arg_index, 0) + w.versions - int(w.last_counts)
    changed = {k for k, _, _ in traced.restrided}
    return [(k, n, lines.get(k) if k not in copied and k not in changed else None) for k, n in moves.items() if n]


def metadata_moves(traced, lines=None) -> dict:
    """{input position: how far its version counter moves} for the inputs the function changed the metadata of a view
    of in place: each change moves it once (a resize_ to the same sizes, none: the frontend marks none). Those of the
    input itself the epilogue makes on the caller's tensor (apply_metadata_changes), which moves it as eager's.
    lines, when given, gets {input position: the first such change's line}."""
    moves = {}
    args = {a.name: k for k, a in enumerate(traced.trace.args) if isinstance(a, TensorProxy)}
    makers = {o.name: b for b in traced.trace.bound_symbols for o in b.flat_proxy_outs()}
    for b in traced.trace.bound_symbols:
        t = b.flat_proxy_args()[0] if b.moves_version else None
        while t is not None and t.name not in args:  # (back through views, and detach(), which shares the counter)
            m = makers.get(t.name)
            t = viewed_tensor(m, t) if m is not None and (is_eager_view(m) or m.sym.id == "ltorch.detach") else None
        if t is not None:
            moves[args[t.name]] = moves.get(args[t.name], 0) + 1
            if lines is not None:
                lines.setdefault(args[t.name], b)
    return moves


def nograd_views_of(trace: Trace) -> tuple:
    """(output position, input position or None) of the outputs that are views made with grad mode off of a tensor
    that requires grad: eager's has no history (grad_fn None), whatever the autograd program says of the tensor it
    viewed, and requires grad as the root base of what it views does. The input position is that of the input the
    views lead back to (its root base is known only at the call), None when they lead to a tensor computed in the
    program (which requires grad)."""
    makers = {o.name: b for b in trace.bound_symbols for o in b.flat_proxy_outs()}
    inputs = {a.name: k for k, a in enumerate(trace.args) if isinstance(a, TensorProxy)}
    out = []
    for i, o in enumerate(tree_leaves(trace.output)):
        b = makers.get(o.name) if isinstance(o, TensorProxy) else None
        viewed = None if b is None or not is_eager_view(b) else viewed_tensor(b, o)
        if viewed is not None and recorded_without_grad(b) and viewed.requires_grad:
            # eager's view has its root base's requires_grad: an input's, when the views lead there
            out.append((i, inputs.get(view_root(makers, viewed, inputs).name)))
    return tuple(out)


def views_of_written(traced, writebacks) -> list:
    """(provenance, flat output position of the new value, flat output positions of views of it, those of them made
    before the input's last write, those of them made through a detach()) for each input the program wrote into that
    the function returns views of (`x.add_(1); return x[0]`, `x.detach()[0]`): in the traced program those outputs
    are views of the input; in the computation, views of its new value. Eager regenerates the grad_fn of a view made
    before the write from the caller's base."""
    written = {traced.trace.args[w.arg_index].name: (traced.inputs[w.arg_index].provenance, w.output_index)
               for w in writebacks}
    if not written:
        return []
    lines = traced.trace.bound_symbols
    makers = {o.name: b for b in lines for o in b.flat_proxy_outs()}
    position = {id(b): k for k, b in enumerate(lines)}
    last = {traced.trace.args[w.arg_index].name: position.get(id(w.last_write), -1) for w in writebacks}
    found: dict = {}
    stale: dict = {}
    detached: dict = {}
    changed = {name for _, name, _ in traced.restrided}  # (the caller's tensor itself: returned_inputs)
    for i, o in enumerate(tree_leaves(traced.trace.output)):
        path, root = memory_path(makers, o, written) if isinstance(o, TensorProxy) and o.name not in written and \
            o.name not in changed else ([], None)
        if root is not None and root.name in written:
            found.setdefault(root.name, []).append(i)
            if any(position[id(b)] < last[root.name] for b, _ in path):
                stale.setdefault(root.name, set()).add(i)
            if any(b.sym.id in _DETACHES for b, _ in path):
                detached.setdefault(root.name, set()).add(i)
    return [(*written[name], tuple(positions), frozenset(stale.get(name, ())), frozenset(detached.get(name, ())))
            for name, positions in found.items()]


def views_of_moved(traced, positions) -> list:
    """views_of_written's rows for the inputs at `positions`, written nowhere, whose version counter the epilogue moves
    for a metadata change made through a view or detach() of them (`t = x[0]; t.detach().squeeze_(0); return t`): the
    outputs viewing one become the same views of the caller's tensor, made just before the move (the epilogue moves
    it after them), whose grad_fn autograd then makes anew from the base, as eager's (the computation's own, views
    made inside an autograd.Function, would fail autograd's version check of their base). Their new value's position
    is None: the caller's tensor itself holds it."""
    names = {traced.trace.args[k].name: traced.inputs[k].provenance for k in positions}
    makers = {o.name: b for b in traced.trace.bound_symbols for o in b.flat_proxy_outs()}
    found: dict = {}
    detached: dict = {}
    for i, o in enumerate(tree_leaves(traced.trace.output) if names else ()):
        path, root = memory_path(makers, o, names) if isinstance(o, TensorProxy) and o.name not in names else ([], None)
        if root is not None and root.name in names:
            found.setdefault(root.name, []).append(i)
            if any(b.sym.id in _DETACHES for b, _ in path):
                detached.setdefault(root.name, set()).add(i)
    return [(names[name], None, tuple(found[name]), frozenset(), frozenset(detached.get(name, ()))) for name in found]


_DETACHES = frozenset({"ltorch.detach", "ltorch.data", "prims.stop_gradient"})


def returned_inputs(traced, writebacks, autodiff: bool) -> list:
    """(provenance, flat output positions) of the input tensors the function returns as they are: eager hands back
    the caller's own tensor. The computation returns a new tensor for one it wrote into (its new value) and, under
    autodiff, for any (autograd.Function's output is a view of the input); the epilogue fetches the input instead.
    So it does for an input whose metadata the function changed (`x.t_(); return x`): the program returns the view
    it became, the epilogue the caller's tensor (changed the same way)."""
    written = {traced.trace.args[w.arg_index].name: w for w in writebacks}
    out = _returned_restrided(traced)
    if not written and not autodiff:
        return out
    positions = {}
    for i, o in enumerate(tree_leaves(traced.trace.output)):
        if isinstance(o, TensorProxy):
            positions.setdefault(o.name, []).append(i)
    for inp in traced.inputs:
        p = inp.proxy
        if isinstance(p, TensorProxy) and p.name in positions and (autodiff or p.name in written):
            out.append((inp.provenance, tuple(positions[p.name])))
    return out


def _returned_restrided(traced) -> list:
    positions = {}
    for i, o in enumerate(tree_leaves(traced.trace.output)):
        if isinstance(o, TensorProxy):
            positions.setdefault(o.name, []).append(i)
    return [(traced.inputs[k].provenance, tuple(positions[name])) for k, name, _ in traced.restrided
            if name in positions]


def restrided_specs(traced) -> list:
    """(provenance, changes) for each input whose metadata the function changed in place."""
    return [(traced.inputs[k].provenance, changes) for k, _, changes in traced.restrided]
