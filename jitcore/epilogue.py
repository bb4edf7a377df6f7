"""Epilogue stage: the epilogue Trace of side effects. What the traced function wrote outside itself (attributes,
globals, items of external containers, closure cells, mutating calls like list.append) is replayed after every call
with that call's real values, so a jitted call has eager's effects. Tensors computed by the trace reach it as
`outs[i]`.
"""
from __future__ import annotations

import torch

from jitcore.errors import UnsupportedError
from jitcore.guards.prologue import provenance_expr
from jitcore.ir.proxies import Proxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
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
    prov, value, no_grad = bsym.args
    target = provenance_expr(prov, printer)
    if no_grad:
        return f"{printer.const(copy_no_grad)}({target}, {printer.value(value)})"
    return f"{target}.copy_({printer.value(value)})"


def copy_no_grad(dst, src):
    with torch.no_grad():
        dst.copy_(src)


# an input the computation wrote into (x.add_(y), x[i] = v, running stats): the caller's tensor gets its new value
writeback = Symbol("epilogue.writeback", "writeback", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE),
                   module="", printer=_print_writeback)


def effect_proxies(side_effects) -> list:
    """The proxies the side effects store: the computation must return them too."""
    out = []
    for e in side_effects:
        leaves, _ = tree_flatten((e.value, e.args, e.kwargs))
        out += [x for x in leaves if isinstance(x, Proxy)]
        for leaf in leaves:
            if not isinstance(leaf, Proxy) and _hides_proxy(leaf):
                raise UnsupportedError("side effect", f"`{e}` stores a {type(leaf).__name__} holding tensors",
                                       hint="store tensors directly, or in tuples, lists or dicts")
    return out


def _hides_proxy(obj) -> bool:
    d = getattr(obj, "__dict__", None)
    return isinstance(d, dict) and any(isinstance(v, Proxy) for v in d.values())


def build_epilogue(side_effects, output_index: dict, writebacks=()) -> Trace | None:
    """The epilogue trace `epilogue(fn, args, kwargs, outs)`, or None when the function wrote nothing outside.

    output_index: proxy name -> its position in the computation's flat outputs. writebacks: (provenance of a
    mutated input tensor, its position in the flat outputs, whether to copy under no_grad), written back first.
    """
    if not side_effects and not writebacks:
        return None
    with Timer() as t:
        trace = Trace("epilogue")
        trace.args = ["fn", "args", "kwargs", "outs"]

        def sub(x):
            return _Out(f"outs[{output_index[x.name]}]") if isinstance(x, Proxy) else x

        for prov, position, no_grad in writebacks:
            trace.bound_symbols.append(BoundSymbol(writeback, (prov, _Out(f"outs[{position}]"), no_grad), {}, None))
        for e in side_effects:
            if e.kind == "call":
                value = _map((e.args, e.kwargs), sub)
            else:
                value = _map(e.value, sub)
            trace.bound_symbols.append(BoundSymbol(replay, (e, value), {}, None))
        trace.output = None
    return trace.set_provenance("Epilogue construction (side effects)", t.seconds)


def _map(tree, fn):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(spec, [fn(x) for x in leaves])
