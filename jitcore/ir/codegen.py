"""Codegen: Trace -> Python source -> callable. The text print() shows is exactly the text that runs.

Values print as literals where Python has one (numbers, dtypes, devices, slices, ranges, nested collections); any
other object becomes a named constant (`_c0`) bound in the function's globals and listed in the header.
"""
from __future__ import annotations

import itertools
import linecache
import math

import torch

from jitcore.ir import arith
from jitcore.ir.data_ptr import Address, address_error
from jitcore.ir.proxies import Proxy, SymbolicSize, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.ranges import SymbolicRange
from jitcore.ir.tables import enter

# namespace alias -> the line that imports it, for the printed header ("prims" -> "from jitcore.ops import prims");
# filled only through register_namespace_import
NAMESPACE_IMPORTS: dict[str, str] = {}


def register_namespace_import(alias: str, line: str, *, replace: bool = False) -> str:
    """A printed trace whose lines call `alias.<op>` gets `line` in its header (the import that binds alias, or a
    comment saying what it is). The same line again is a no-op; another line for a registered alias is an error
    unless `replace`."""
    if NAMESPACE_IMPORTS.get(alias) == line and isinstance(line, str):
        return line
    return enter(NAMESPACE_IMPORTS, "trace namespace", alias, line, replace=replace,
                 value_check=lambda v: isinstance(v, str) and bool(v), value_kind="a non-empty line of text")


def namespace_import(alias: str) -> str | None:
    """The header line registered for `alias`, or None."""
    return NAMESPACE_IMPORTS.get(alias)


register_namespace_import("torch", "import torch")
_compile_ids = itertools.count()


class Printer:
    """Turns argument values into Python expressions, collecting constants that need a global name."""

    def __init__(self):
        self.consts: dict[str, object] = {}
        self._const_ids: dict[int, str] = {}

    def const(self, obj) -> str:
        name = self._const_ids.get(id(obj))
        if name is None:
            if type(obj) is Address:  # (a program cannot hold `t.data_ptr()`: only its alignment is known)
                raise address_error(obj.name, "keeping in the program")
            name = f"_c{len(self.consts)}"
            self._const_ids[id(obj)] = name
            self.consts[name] = obj
        return name

    def value(self, x) -> str:
        if isinstance(x, Proxy):
            return x.name
        t = type(x)
        if x is None or t is bool or t is int or t is str:
            return repr(x)
        if t is float:
            return repr(x) if math.isfinite(x) else f"float('{x}')"
        if t is complex:
            return f"complex({self.value(x.real)}, {self.value(x.imag)})"
        if t is torch.dtype:
            return str(x)
        if t is torch.device:
            return f"torch.device({str(x)!r})"
        if t is tuple or t is torch.Size or t is SymbolicSize:
            inner = ", ".join(self.value(e) for e in x)
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        if t is list:
            return "[" + ", ".join(self.value(e) for e in x) + "]"
        if isinstance(x, tuple) and t.__module__ == "torch.return_types":  # (values, indices) of torch.max, sort...
            return f"torch.return_types.{t.__name__}(({', '.join(self.value(e) for e in x)}))"
        if t is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in x.items()) + "}"
        if t is slice:
            return f"slice({self.value(x.start)}, {self.value(x.stop)}, {self.value(x.step)})"
        if t is range or t is SymbolicRange:  # (a range of symbolic sizes prints its bounds: `range(0, i0, 1)`)
            return f"range({self.value(x.start)}, {self.value(x.stop)}, {self.value(x.step)})"
        if x is Ellipsis:
            return "..."
        if t is torch.memory_format or t is torch.layout:
            return str(x)
        if isinstance(x, (tuple, dict)) and _holds_proxy(x):  # a namedtuple or OrderedDict of values made at run time
            items = x.items() if isinstance(x, dict) else ((None, e) for e in x)
            inner = ", ".join(self.value(e) if k is None else f"{self.value(k)}: {self.value(e)}" for k, e in items)
            ctor = self.const(t)
            if isinstance(x, dict):
                return f"{ctor}({{{inner}}})"
            return f"{ctor}({inner})" if hasattr(x, "_fields") else f"{ctor}(({inner},))"
        return self.const(x)

    def call_args(self, args, kwargs) -> str:
        parts = [self.value(a) for a in args]
        parts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)


def _holds_proxy(x) -> bool:
    try:
        return any(isinstance(leaf, Proxy) for leaf in tree_leaves(x))
    except Exception:  # a container pytree cannot flatten holds no value of the trace
        return False


def lhs(output) -> str | None:
    """The assignment target for an output, or None when nothing needs binding."""
    if isinstance(output, Proxy):
        return output.name
    if isinstance(output, (tuple, list)):
        parts = [lhs(o) or "_" for o in output]
        if all(p == "_" for p in parts):
            return None
        if len(parts) == 1:
            return f"({parts[0]},)"
        return "(" + ", ".join(parts) + ")"
    return None


def type_comment(output) -> str:
    ts = [o for o in tree_leaves(output) if isinstance(o, TensorProxy)]
    if not ts:
        return ""
    return "  # " + ", ".join(f'{t.name}: "{t.type_string()}"' for t in ts)


def bsym_call(bsym, printer: Printer) -> str:
    if bsym.sym.printer is not None:
        return bsym.sym.printer(bsym, printer)
    return f"{bsym.sym.qualname}({printer.call_args(bsym.args, bsym.kwargs)})"


def bsym_lines(bsym, indent: int = 1, printer: Printer | None = None, comment: bool = False) -> list[str]:
    printer = printer or Printer()
    pad = "  " * indent
    call = bsym_call(bsym, printer)
    target = None if bsym.sym.printer is not None else lhs(bsym.output)
    text = f"{target} = {call}" if target else call
    if not comment:
        text += type_comment(bsym.output)
    lines = []
    if bsym.header:
        lines += [f"{pad}# {h}" for h in bsym.header.splitlines()]
    lines.append(f"{pad}# {text}" if comment else f"{pad}{text}")
    for sub in bsym.subsymbols:
        lines += bsym_lines(sub, indent + (0 if comment else 1), printer, comment=True)
    return lines


def _namespaces(trace) -> dict[str, object]:
    g: dict[str, object] = {"torch": torch}
    for bsym in trace.bound_symbols:
        sym = bsym.sym
        if sym.module:
            g.setdefault(sym.module.split(".")[0], sym.namespace)
        if sym.call_ctx:
            g.update(sym.call_ctx)
    return g


def _signature(trace) -> tuple[list[str], list[str]]:
    """(parameters, lines that bind the arguments). Plain: one parameter per argument. With
    trace.arg_groups = [(name, count), ...]: one list per group, unpacked and emptied on entry, so each value
    is freed after its last use (a positional argument stays referenced by the caller until the call returns)."""
    names = [a.name if isinstance(a, Proxy) else str(a) for a in trace.args]
    types = [f'  # {a.name}: "{a.type_string()}"' for a in trace.args if isinstance(a, Proxy)]
    groups = trace.arg_groups
    if not groups:
        return names, types
    body, start = [], 0
    for group, count in groups:
        part = names[start:start + count]
        start += count
        if part:
            target = f"{part[0]}," if len(part) == 1 else ", ".join(part)
            body += [f"  ({target}) = {group}", f"  {group}.clear()"]
    return [group for group, _ in groups], types + body


@arith.as_jitcore
def trace_source(trace) -> str:
    printer = Printer()
    params, body = _signature(trace)
    for bsym in trace.bound_symbols:
        body += bsym_lines(bsym, 1, printer)
    body.append(f"  return {printer.value(trace.output)}")
    header = []
    if trace.provenance:
        header.append(f"# {trace.provenance}")
    header += [f"# {line}" for line in trace.comments]  # (around it: jitcore/runtime/fsdp_units.py)
    names = _namespaces(trace)
    imports = [NAMESPACE_IMPORTS.get(n) for n in names]
    header += sorted({i for i in imports if i})
    for name, obj in printer.consts.items():
        header.append(f"# {name}: {_describe(obj)}")
    for name in names:
        if name not in NAMESPACE_IMPORTS and name != "torch":
            header.append(f"# {name}: {_describe(names[name])}")
    sig = f"def {trace.fn_name}({', '.join(params)}):"
    return "\n".join(header + [sig] + body) + "\n"


def _describe(obj) -> str:
    if isinstance(obj, (torch.dtype, torch.device)):
        return repr(obj)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, type) and name:  # a class's bound method (MyFunction.apply): the class's name, not the base's
        name = f"{owner.__qualname__}.{name.rpartition('.')[2]}"
    return f"{type(obj).__name__} {name}" if name else type(obj).__name__


@arith.as_jitcore
def compile_trace(trace):
    """Compile the trace's own text into a function whose globals are the namespaces and constants it names."""
    printer = Printer()
    source = trace_source(trace)
    # constants are collected by printing; print again with a fresh printer to get the same names
    for bsym in trace.bound_symbols:
        bsym_lines(bsym, 1, printer)
    printer.value(trace.output)
    g = _namespaces(trace)
    g.update(printer.consts)
    filename = f"<jitcore {trace.fn_name} {next(_compile_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), g)
    fn = g[trace.fn_name]
    fn.__jitcore_source__ = source
    return fn
