"""Guards: the prologue Trace. From the inputs' provenance and the values the computation baked in, it builds a
straight-line program `prologue(fn, args, kwargs)` that fetches every tensor input and checks what the
computation assumed; it returns the inputs, or None on a miss. An explain variant returns the failed check's text.
"""
from __future__ import annotations

import torch

from jitcore.proxies import Proxy
from jitcore.symbol import BoundSymbol, Symbol, Tag
from jitcore.trace import Timer, Trace



def provenance_expr(prov, printer) -> str:
    """The Python expression that fetches `prov` from a call's (fn, args, kwargs) in generated code."""
    from jitcore.interpreter import provenance as P

    t = type(prov)
    if t is P.Arg:
        return f"args[{prov.index}]"
    if t is P.Kwarg:
        return f"kwargs[{prov.name!r}]"
    if t is P.Fn:
        return "fn"
    if t is P.Attr:
        base = provenance_expr(prov.parent, printer)
        return f"{base}.{prov.name}" if prov.name.isidentifier() else f"getattr({base}, {prov.name!r})"
    if t is P.Item and not isinstance(prov.key, P.SliceKey):
        return f"{provenance_expr(prov.parent, printer)}[{printer.value(prov.key)}]"
    if t is P.Global and prov.module != "builtins":
        import sys

        mod = sys.modules.get(prov.module)
        if mod is not None:
            return f"{printer.const(mod.__dict__)}[{prov.name!r}]"
    if t is P.Module:
        import sys

        return printer.const(sys.modules[prov.name])
    return f"{printer.const(prov)}.load({printer.const(P.Roots)}(args, kwargs, fn))"


def _fail(bsym, reason: str) -> str:
    return repr(reason) if bsym.kwargs.get("explain") else "None"


def _print_unpack(bsym, printer):
    name, prov = bsym.args
    return f"{name} = {provenance_expr(prov, printer)}"


def _print_check_tensor(bsym, printer):
    name, t = bsym.args[0], bsym.args[1]
    shape = printer.value(tuple(t.shape))
    cond = (f"not isinstance({name}, torch.Tensor) or {name}.shape != {shape} or {name}.dtype is not {t.dtype} "
            f"or {name}.device != {printer.value(t.device)} or {name}.requires_grad is not {t.requires_grad}")
    reason = f"{bsym.args[2]}: expected a tensor {t.type_string()} requires_grad={t.requires_grad}"
    return f"if {cond}: return {_fail(bsym, reason)}"


def _print_check_value(bsym, printer):
    prov, value, where = bsym.args
    expr = provenance_expr(prov, printer)
    if value is None or isinstance(value, (bool, torch.dtype)):
        cond = f"{expr} is not {printer.value(value)}"
    else:
        cond = f"type({expr}) is not {type(value).__name__} or {expr} != {printer.value(value)}"
    return f"if {cond}: return {_fail(bsym, f'{where}: expected {value!r}')}"


def _print_check_global(bsym, printer):
    expr, value, where = bsym.args
    return f"if {expr} is not {value}: return {_fail(bsym, f'{where}: expected {value}')}"


def _sym(name, printer):
    return Symbol(f"prologue.{name}", name, meta=lambda *a, **k: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                  printer=printer)


unpack = _sym("unpack", _print_unpack)
check_tensor = _sym("check_tensor", _print_check_tensor)
check_value = _sym("check_value", _print_check_value)
check_state = _sym("check_state", _print_check_global)


def build_prologue(inputs, guards, explain: bool = False) -> Trace:
    """The prologue trace for a computation whose tensor inputs are `inputs` (TracedInput) and whose baked-in
    non-tensor values are `guards` [(provenance, value)]."""
    with Timer() as t:
        trace = Trace("prologue")
        trace.args = ["fn", "args", "kwargs"]
        kw = {"explain": True} if explain else {}
        b = trace.bound_symbols
        b.append(BoundSymbol(check_state, ("torch.is_grad_enabled()", torch.is_grad_enabled(), "grad mode"), kw, None))
        dd = torch.get_default_dtype()
        b.append(BoundSymbol(check_state, ("torch.get_default_dtype()", dd, "default dtype"), kw, None))
        seen = set()
        for prov, value in guards:
            if (prov, repr(value)) in seen:
                continue
            seen.add((prov, repr(value)))
            b.append(BoundSymbol(check_value, (prov, value, str(prov)), kw, None))
        for inp in inputs:
            name = inp.proxy.name
            b.append(BoundSymbol(unpack, (name, inp.provenance), {}, None))
            b.append(BoundSymbol(check_tensor, (name, inp.proxy, str(inp.provenance)), kw, None))
        trace.output = tuple(_Name(i.proxy.name) for i in inputs)
    return trace.set_provenance("Prologue construction (guards)", t.seconds)


class _Name(Proxy):
    """A bare name in generated code (the prologue's unpacked inputs are not proxies of the prologue)."""

    prefix = "n"
