"""Ops: number arithmetic and comparisons on NumberProxy (cache="symbolic values"). Each op prints as the
Python it runs (`i2 = i0 * i1`, `b0 = i0 > 2`), is run by the python executor, and returns a proxy carrying the
concrete value and its expression over the input symbols (for the prologue's predicates). `call` is the IR's
"number_op" (jitcore/ir/proxies.py IR_OPS): number proxies' operators record through it.
"""
from __future__ import annotations

import math

from jitcore.ir import arith
from jitcore.ir.codegen import register_namespace_import
from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import BoolProxy, FloatProxy, IntegerProxy, register_ir_op
from jitcore.ir.symbol import Symbol, Tag

PYTHON_OPS: dict[str, Symbol] = {}
_TAGS = (Tag.PYTHON, Tag.NON_DIFFERENTIABLE)


def _result_proxy(value, expr, cmp=None):
    if type(value) is bool:
        p = BoolProxy(value)
        p.cmp = cmp
    elif type(value) is int:
        p = IntegerProxy(value)
    elif type(value) is float:
        p = FloatProxy(value)
    else:
        return value  # complex and friends: a constant (the inputs' predicates already pin it down)
    p.expr = expr
    return p


def _make(name: str, fn, fmt: str, arity: int, compare: str | None = None, call_ctx=None):
    def meta(*args):
        same = arith.identity(name, args)
        if same is not None:
            return same
        value = fn(*(arith.value_of(a) for a in args))
        if arith.unknown_expr(args):  # computed from a per-call value: no expression, never a predicate
            out = _result_proxy(value, None, None)
            if out is value:  # a complex number would be baked in as a constant
                arith.refuse(next(a for a in args if getattr(a, "expr", "") is None))
            arith.inherit_origin(out, args)
            return out
        expr = arith.expression("(" + fmt.format(*(arith.expr_of(a) for a in args)) + ")")
        out = _result_proxy(value, expr, (compare, *args) if compare else None)
        if out is not value:
            out.runtime = any(getattr(a, "runtime", False) for a in args)
        if compare is not None and out is not value:
            out.implied = arith.implied(compare, *args) is not None
        return out

    def printer(bsym, printer):
        text = fmt.format(*(printer.value(a) for a in bsym.args))
        out = bsym.output
        return f"{out.name} = {text}" if hasattr(out, "name") else text

    sym = Symbol(f"python.{name}", name, meta=meta, tags=_TAGS, module="", printer=printer, call_ctx=call_ctx,
                 kernel=fn)
    PYTHON_OPS[name] = sym
    return sym


for _name, (_fn, _fmt) in arith.BINARY.items():
    _make(_name, _fn, _fmt, 2)
for _name, (_fn, _sym) in arith.COMPARE.items():
    _make(_name, _fn, "{} " + _sym + " {}", 2, compare=_sym)
for _name, (_fn, _fmt) in arith.UNARY.items():
    _make(_name, _fn, _fmt, 1)
for _name, (_fn, _fmt) in arith.MATH.items():
    _make(_name, _fn, _fmt, _fmt.count("{}"), call_ctx={"math": math})
del _name, _fn, _fmt, _sym
register_namespace_import("math", "import math")


def call(name: str, *args):
    """Run python op `name` on args: recorded in the active trace, or computed directly when none is active."""
    sym = PYTHON_OPS[name]
    same = arith.identity(name, args)
    if same is not None:
        return same
    if get_tracectx() is None:  # outside tracing: a plain value, pinned down by specialisation
        return sym.kernel(*(arith.concretize(a) if hasattr(a, "expr") else a for a in args))
    fmt = (arith.BINARY.get(name) or arith.UNARY.get(name) or (None, None))[1]
    folded = None if fmt is None else arith.fold(name, args, fmt, sym.kernel)
    return sym(*args) if folded is None else folded


register_ir_op("number_op", call)


def math_call(name: str, *args):
    """A math-module function (arith.MATH) of numbers: a recorded op when a symbolic number flows in (`1 / math.sqrt(d)`
    of a symbolic head size stays symbolic instead of pinning d), else the function itself."""
    if any(isinstance(a, arith.SymbolicNumber) and not isinstance(a, bool) for a in args):
        return call(name, *args)
    return arith.MATH[name][0](*args)


def sqrt(x):
    return math_call("sqrt", x)
