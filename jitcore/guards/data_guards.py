"""Guards stage: Python values that depend on tensor data (`if mask.all():`, `x.item()`). While tracing, jitcore
has the call's real inputs, so it computes such a value from them with the part of the trace that produces it,
bakes the value into the trace, and guards it: the prologue recomputes that small program on each call's inputs and
a different value is a miss (the function is traced again and takes the other branch). Never a wrong answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from jitcore.errors import DataDependentError
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Trace, detached

_REFUSED = frozenset({Tag.RANDOM, Tag.INPLACE})
_CONVERT = {"bool": bool, "int": int, "float": float, "index": int, "item": lambda t: t.item(),
            "tolist": lambda t: t.tolist()}


@dataclass
class DataGuard:
    """program(*inputs) recomputes the value; `inputs` are the computation's input names it reads (or expressions
    over the prologue's size symbols)."""

    program: object
    inputs: tuple
    value: object
    text: str  # the value's program, for reason strings and inspection


def _needed(trace: Trace, target: TensorProxy) -> list:
    """The recorded lines (including those of composites still being recorded) that produce `target`."""
    lines = [b for scope in trace._scopes for b in scope]
    needed, kept = {target.name}, []
    for bsym in reversed(lines):
        if any(o.name in needed for o in bsym.flat_proxy_outs()):
            kept.append(bsym)
            needed.update(a.name for a in bsym.flat_proxy_args())
    return kept[::-1]


def _refused_tags(bsym) -> bool:
    return bool(bsym.sym.tags & _REFUSED) or any(_refused_tags(s) for s in bsym.subsymbols)


def concrete_value(ctx, proxy: TensorProxy, kind: str):
    """The Python value `kind` ("bool", "int", "float", "index", "item") of `proxy` for this call, guarded.

    Refused (DataDependentError, quoting the user's line): values that come from random ops or in-place writes, or
    that need inputs other than the function's arguments (or the symbols of their sizes and of number arguments, under
    symbolic values), or anything when no real inputs are at hand (examine())."""
    what = {"bool": "a Python bool (e.g. `if tensor:`)", "item": "tensor.item()", "tolist": "tensor.tolist()"}.get(
        kind, f"a Python {kind}")
    if kind not in ("item", "tolist") and proxy.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous" if kind == "bool" else
                           "only one element tensors can be converted to Python scalars")
    lines = _needed(ctx.trace, proxy)
    if any(_refused_tags(b) for b in lines):
        raise DataDependentError(f"converting a tensor to {what} needs its value, which comes from random or "
                                 "in-place ops here")
    real = {i.proxy.name: (i, v) for i, v in zip(ctx.inputs, ctx._values)}
    made, free, seen = set(), [], set()  # by name: `==` on proxies records an op
    for b in lines:  # in order: a line that hands back its input (broadcast_tensors) does not make it
        args = b.flat_proxy_args()
        for a in args:
            if a.name not in made and a.name not in seen:
                seen.add(a.name)
                free.append(a)
        made.update(o.name for o in b.flat_proxy_outs())
    if proxy.name not in made:
        free = [proxy]
    for a in free:
        if isinstance(a, NumberProxy) and a.expr is not None:  # a symbol the prologue binds (an input's size, a
            continue  # number argument) or an expression over them: the check reads it as predicates do
        entry = real.get(a.name)
        if isinstance(a, NumberProxy) or entry is None or not ctx.is_argument_input(entry[0]):
            raise DataDependentError(f"converting a tensor to {what} needs its value, which depends on something "
                                     f"other than the function's tensor arguments ({a.name})")
    program = Trace("data_guard")
    program.args, program.bound_symbols, program.output = free, lines, proxy
    program.names = set(ctx.trace.names)
    convert = _CONVERT[kind]
    fn = program.python_callable()

    def recompute(*tensors):
        with torch.no_grad():
            return convert(fn(*tensors))

    recompute.__qualname__ = recompute.__name__ = f"data_guard[{_describe(program, kind)}]"
    recompute.trace = program  # the program that recomputes the value, printable
    with detached():
        value = recompute(*[a.value if isinstance(a, NumberProxy) else real[a.name][1] for a in free])
    reads = tuple(a.name if not isinstance(a, NumberProxy) or a.expr == a.name else f"({a.expr})" for a in free)
    ctx.guards.data.append(DataGuard(recompute, reads, value, _describe(program, kind)))
    return value


def _describe(program: Trace, kind: str) -> str:
    ops = [b.sym.name for b in program.bound_symbols]
    return f"{kind}({' -> '.join(ops) or program.output.name})"


__all__ = ["DataGuard", "Proxy", "concrete_value"]
