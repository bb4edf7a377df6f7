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
    return guarded_value(ctx, [proxy], _CONVERT[kind], kind, f"converting a tensor to {what}")


def guarded_value(ctx, wanted: list, convert, kind: str, what: str):
    """convert(*values of `wanted` in this call), computed from the call's real inputs and guarded: the prologue
    recomputes it on every call, and a different value is a miss. Refused as concrete_value says."""
    lines = _lines_for(ctx.trace, wanted)
    if any(_refused_tags(b) for b in lines):
        raise DataDependentError(f"{what} needs its value, which comes from random or in-place ops here")
    real = {i.proxy.name: (i, v) for i, v in zip(ctx.inputs, ctx._values)}
    free = _free(lines, wanted)
    for a in free:
        if isinstance(a, NumberProxy) and a.expr is not None:  # a symbol the prologue binds (an input's size, a
            continue  # number argument) or an expression over them: the check reads it as predicates do
        entry = real.get(a.name)
        if isinstance(a, NumberProxy) or entry is None or not ctx.is_argument_input(entry[0]):
            raise DataDependentError(f"{what} needs its value, which depends on something other than the function's "
                                     f"tensor arguments ({a.name})")
    program = Trace("data_guard")
    program.args, program.bound_symbols = free, lines
    program.output = wanted[0] if len(wanted) == 1 else tuple(wanted)
    program.names = set(ctx.trace.names)
    fn = program.python_callable()
    single = len(wanted) == 1

    def recompute(*tensors):
        with torch.no_grad():
            return convert(fn(*tensors)) if single else convert(*fn(*tensors))

    recompute.__qualname__ = recompute.__name__ = f"data_guard[{_describe(program, kind)}]"
    recompute.trace = program  # the program that recomputes the value, printable
    with detached():
        value = recompute(*[a.value if isinstance(a, NumberProxy) else real[a.name][1] for a in free])
    reads = tuple(a.name if not isinstance(a, NumberProxy) or a.expr == a.name else f"({a.expr})" for a in free)
    ctx.guards.data.append(DataGuard(recompute, reads, value, _describe(program, kind)))
    return value


def _lines_for(trace, wanted) -> list:
    """The recorded lines that produce any of `wanted`, in program order."""
    lines, seen = [], set()
    for p in wanted:
        for b in _needed(trace, p):
            if id(b) not in seen:
                seen.add(id(b))
                lines.append(b)
    order = {id(b): i for i, b in enumerate(b for scope in trace._scopes for b in scope)}
    return sorted(lines, key=lambda b: order[id(b)])


def _free(lines, wanted) -> list:
    """The values the lines read and do not make (by name: `==` on proxies records an op), then the wanted values
    no line makes (a line handing back its input, broadcast_tensors, does not make it)."""
    made, free, seen = set(), [], set()
    for b in lines:
        for a in b.flat_proxy_args():
            if a.name not in made and a.name not in seen:
                seen.add(a.name)
                free.append(a)
        made.update(o.name for o in b.flat_proxy_outs())
    return free + [p for p in wanted if p.name not in made and p.name not in seen]


def real_values(ctx, wanted: list) -> list:
    """The values the tensors `wanted` hold in this call, computed from clones of its real inputs by the part of the
    trace that produces them (random draws and writes included: the RNG state is restored after). For what an op's
    outputs look like when it has no meta kernel (jitcore/ops/opaque.py): nothing is guarded here, so the caller
    uses only what does not depend on these values. None where an input is not at hand (examine(), or a value
    that comes from outside the arguments)."""
    lines = _lines_for(ctx.trace, wanted)
    real = {i.proxy.name: v for i, v in zip(ctx.inputs, ctx._values)}
    free = _free(lines, wanted)
    if any(not isinstance(a, NumberProxy) and a.name not in real for a in free):
        return None
    program = Trace("real_values")
    program.args, program.bound_symbols, program.output = free, lines, tuple(wanted)
    program.names = set(ctx.trace.names)
    fn = program.python_callable()
    inputs = [a.value if isinstance(a, NumberProxy) else real[a.name] for a in free]
    state = torch.get_rng_state()
    try:
        with detached(), torch.no_grad():
            return list(fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
    finally:
        torch.set_rng_state(state)


def _describe(program: Trace, kind: str) -> str:
    ops = [b.sym.name for b in program.bound_symbols]
    outs = program.output if isinstance(program.output, tuple) else (program.output,)
    return f"{kind}({' -> '.join(ops) or ', '.join(o.name for o in outs)})"


__all__ = ["DataGuard", "Proxy", "concrete_value", "guarded_value", "real_values"]
