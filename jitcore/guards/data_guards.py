"""Guards stage: Python values that depend on tensor data (`if mask.all():`, `x.item()`). While tracing, jitcore
has the call's real inputs, so it computes such a value from them with the part of the trace that produces it,
bakes the value into the trace, and guards it: the prologue recomputes that small program on each call's inputs and
a different value is a miss (the function is traced again and takes the other branch). Never a wrong answer.
"""
from __future__ import annotations

import ast
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
    """program(*inputs) recomputes the value; `inputs` are the computation's input names it reads."""

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
    made = {o.name for b in lines for o in b.flat_proxy_outs()}
    free, seen = [], set()
    for b in lines:
        for a in b.flat_proxy_args():
            if a.name not in made and a.name not in seen:  # by name: `in` on number proxies would compare values
                free.append(a)
                seen.add(a.name)
    if proxy.name not in made:
        free = [proxy]
    symbols = _symbol_values(ctx)
    reads = {}  # free number -> its expression over the prologue's symbols, compiled
    for a in free:
        if isinstance(a, NumberProxy):  # a size or number argument, or arithmetic on them: the check computes it
            names = _names_in(a.expr)  # from the symbols the prologue binds (by name, as predicates read them)
            if names is None or any(n not in symbols for n in names):
                raise DataDependentError(f"converting a tensor to {what} needs its value, which depends on "
                                         f"something other than the function's tensor arguments ({a.name})")
            reads[a.name] = compile(a.expr, f"<size {a.name}>", "eval")
            continue
        entry = real.get(a.name)
        if entry is None or not ctx.is_argument_input(entry[0]):
            raise DataDependentError(f"converting a tensor to {what} needs its value, which depends on something "
                                     f"other than the function's tensor arguments ({a.name})")
    inputs = [a.name for a in free if a.name not in reads]
    inputs += sorted({n for a in free if a.name in reads for n in _names_in(a.expr)} - set(inputs))
    program = Trace("data_guard")
    program.args, program.bound_symbols, program.output = free, lines, proxy
    program.names = set(ctx.trace.names)
    convert = _CONVERT[kind]
    fn = program.python_callable()

    def recompute(*values):
        env = dict(zip(inputs, values))
        args = [eval(reads[a.name], _BUILTINS, env) if a.name in reads else env[a.name] for a in free]
        with torch.no_grad():
            return convert(fn(*args))

    recompute.__qualname__ = recompute.__name__ = f"data_guard[{_describe(program, kind)}]"
    recompute.trace = program  # the program that recomputes the value, printable
    with detached():
        value = recompute(*[real[n][1] if n in real and n not in symbols else symbols[n] for n in inputs])
    ctx.guards.data.append(DataGuard(recompute, tuple(inputs), value, _describe(program, kind)))
    return value


# what number expressions call (jitcore/ir/arith.py prints max, min, abs, int, float, round): nothing else
_BUILTINS = {"__builtins__": {}, "max": max, "min": min, "abs": abs, "int": int, "float": float, "round": round}


def _names_in(expr: str | None) -> set | None:
    """The symbols a number's expression reads (None: it has none, a value computed from data or drawn per call)."""
    if expr is None:
        return None
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)} - set(_BUILTINS)


def _symbol_values(ctx) -> dict:
    """The symbols the prologue binds (the inputs' symbolic sizes, number arguments) and their values in this call."""
    values = {}
    for i, v in zip(ctx.inputs, ctx._values):
        if isinstance(i.proxy, NumberProxy) and i.proxy.expr == i.proxy.name:
            values.setdefault(i.proxy.name, v)
        elif isinstance(i.proxy, TensorProxy) and isinstance(v, torch.Tensor):
            for s, n in zip(i.proxy.shape, v.shape):
                if isinstance(s, NumberProxy) and s.expr == s.name:
                    values.setdefault(s.name, int(n))
    return values


def _describe(program: Trace, kind: str) -> str:
    ops = [b.sym.name for b in program.bound_symbols]
    return f"{kind}({' -> '.join(ops) or program.output.name})"


__all__ = ["DataGuard", "Proxy", "concrete_value"]
