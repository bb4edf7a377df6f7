"""Interpreter stage: stack, constant, unary/binary operator and comparison opcodes (3.11).

Operators run natively through the `operator` module (a TensorProxy's operators record ops themselves);
the operator function of BINARY_OP / COMPARE_OP is picked once when the code object is decoded.
"""
from __future__ import annotations

import dis
import operator
import sys

from jitcore.interpreter import access, dunders
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.ops_load_store import BINARY_SUBSCR
from jitcore.interpreter.registry import handler
from jitcore.ir.arith import as_user

_SYMBOL_OPS = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift, "@": operator.matmul,
    "*": operator.mul, "%": operator.mod, "|": operator.or_, "**": operator.pow, ">>": operator.rshift,
    "-": operator.sub, "/": operator.truediv, "^": operator.xor,
    "+=": operator.iadd, "&=": operator.iand, "//=": operator.ifloordiv, "<<=": operator.ilshift,
    "@=": operator.imatmul, "*=": operator.imul, "%=": operator.imod, "|=": operator.ior, "**=": operator.ipow,
    ">>=": operator.irshift, "-=": operator.isub, "/=": operator.itruediv, "^=": operator.ixor,
    "[]": operator.getitem,  # 3.14: NB_SUBSCR, what BINARY_SUBSCR was (its instructions run BINARY_SUBSCR's handler)
}
BINARY_OPS = [_SYMBOL_OPS[sym] for _, sym in dis._nb_ops]
COMPARE_OPS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
               ">=": operator.ge}


def _nop(frame, inst):
    return None


for _name in ("NOP", "RESUME", "CACHE", "EXTENDED_ARG", "PRECALL"):
    handler(_name)(_nop)
handler("NOT_TAKEN", since=(3, 14))(_nop)  # (a branch hint for CPython's monitoring)


@handler("POP_TOP")
@handler("POP_ITER", since=(3, 14))  # (the iterator left by an exhausted FOR_ITER; a plain pop here)
def POP_TOP(frame, inst):
    frame.stack.pop()


@handler("PUSH_NULL")
def PUSH_NULL(frame, inst):
    frame.stack.append(NULL)


@handler("COPY")
def COPY(frame, inst):
    frame.stack.append(frame.stack[-inst.arg])


@handler("SWAP")
def SWAP(frame, inst):
    s = frame.stack
    i = -inst.arg
    s[i], s[-1] = s[-1], s[i]


@handler("LOAD_CONST")
def LOAD_CONST(frame, inst):
    frame.stack.append(inst.argval)


@handler("LOAD_SMALL_INT", since=(3, 14))
def LOAD_SMALL_INT(frame, inst):
    frame.stack.append(inst.arg)


def _prepare_common_constant(inst, code, insts=None):
    inst.aux = dis._common_constants[inst.arg]  # AssertionError, NotImplementedError, tuple, all, any (3.14)


@handler("LOAD_COMMON_CONSTANT", since=(3, 14), prepare=_prepare_common_constant)
def LOAD_COMMON_CONSTANT(frame, inst):
    frame.stack.append(inst.aux)  # (the builtins themselves: `tuple(genexp)` compares the global with it, IS_OP)


@handler("UNARY_POSITIVE")
def UNARY_POSITIVE(frame, inst):
    r = dunders.unary(frame.rt, "__pos__", frame.stack[-1])
    frame.stack[-1] = +frame.stack[-1] if r is dunders.NATIVE else r


@handler("UNARY_NEGATIVE")
def UNARY_NEGATIVE(frame, inst):
    r = dunders.unary(frame.rt, "__neg__", frame.stack[-1])
    frame.stack[-1] = -frame.stack[-1] if r is dunders.NATIVE else r


@handler("UNARY_NOT")
def UNARY_NOT(frame, inst):
    frame.stack[-1] = not access.truth(frame.rt, frame.stack[-1])


@handler("UNARY_INVERT")
def UNARY_INVERT(frame, inst):
    r = dunders.unary(frame.rt, "__invert__", frame.stack[-1])
    frame.stack[-1] = ~frame.stack[-1] if r is dunders.NATIVE else r


def _prepare_binary(inst, code, insts=None):
    inst.aux = BINARY_OPS[inst.arg]
    if inst.aux is operator.getitem:  # 3.14's `a[b]`: an item read with provenance, as BINARY_SUBSCR was
        inst.fn = BINARY_SUBSCR


# in-place operators that change a builtin container: on an external one (`out += feats`) they go through the
# container's method, so the write is recorded and replayed like out.extend(feats) (it changed the caller's list
# during tracing only)
_INPLACE_DUNDERS = {operator.iadd: "__iadd__", operator.imul: "__imul__", operator.ior: "__ior__",
                    operator.iand: "__iand__", operator.isub: "__isub__", operator.ixor: "__ixor__"}
_MUTABLE_BUILTINS = (list, dict, set, bytearray)


_CONTAINERS = (list, tuple, dict)


@handler("BINARY_OP", prepare=_prepare_binary)
def BINARY_OP(frame, inst):
    stack = frame.stack
    b = stack.pop()
    a = stack[-1]
    if type(a) in _MUTABLE_BUILTINS and inst.aux in _INPLACE_DUNDERS and id(a) in frame.rt.external:
        stack[-1] = frame.rt.call_native(getattr(type(a), _INPLACE_DUNDERS[inst.aux]), (a, b), {})
        return
    if type(a) in _CONTAINERS or type(b) in _CONTAINERS:  # `shape + [1]`, `shape * 2`: read whole, natively
        frame.rt.read_whole(a, b)
    r = dunders.binary(frame.rt, inst.aux, a, b)  # (a user class's Python __add__ ...: interpreted)
    if r is not dunders.NATIVE:
        stack[-1] = r
        return
    stack[-1] = as_user(inst.aux, a, b) if type(a) is str else inst.aux(a, b)  # (`"%s" % n`: the value's text)


def _prepare_compare(inst, code):
    inst.aux = COMPARE_OPS[inst.argval]


@handler("COMPARE_OP", prepare=_prepare_compare)
def COMPARE_OP(frame, inst):
    stack = frame.stack
    b = stack.pop()
    if type(b) in _CONTAINERS or type(stack[-1]) in _CONTAINERS:  # `shape == [1, 2]`: compared whole, natively
        frame.rt.read_whole(stack[-1], b)
    r = dunders.compare(frame.rt, inst.aux, stack[-1], b)
    stack[-1] = inst.aux(stack[-1], b) if r is dunders.NATIVE else r


@handler("IS_OP")
def IS_OP(frame, inst):
    stack = frame.stack
    b = stack.pop()
    a = stack[-1]
    if a is not b and frame.rt.on_is is not None:  # the answer depends on the call's objects: the context guards it
        frame.rt.on_is(a, b)
    stack[-1] = (a is b) != bool(inst.arg)


@handler("CONTAINS_OP")
def CONTAINS_OP(frame, inst):
    stack = frame.stack
    b = stack.pop()
    if type(b) in _CONTAINERS:  # `3 in dims`: searched natively
        frame.rt.read_whole(b)
    stack[-1] = access.contains(frame.rt, stack[-1], b) != bool(inst.arg)


@handler("GET_LEN")
def GET_LEN(frame, inst):
    frame.stack.append(access.length(frame.rt, frame.stack[-1]))


@handler("PRINT_EXPR")
def PRINT_EXPR(frame, inst):
    value = frame.stack.pop()
    hook = getattr(sys, "displayhook", None)
    if hook is None:
        raise RuntimeError("lost sys.displayhook")
    hook(value)


_CONVERSIONS = {1: str, 2: repr, 3: ascii}


@handler("FORMAT_VALUE")
def FORMAT_VALUE(frame, inst):
    stack = frame.stack
    flags = inst.arg
    spec = stack.pop() if flags & 0x04 else ""
    value = stack[-1]
    conv = flags & 0x03
    if conv:
        r = dunders.to_text(frame.rt, _CONVERSIONS[conv], value) if conv != 3 else dunders.NATIVE
        value = as_user(_CONVERSIONS[conv], value) if r is dunders.NATIVE else r
    if type(value) is not str or spec:
        r = dunders.to_text(frame.rt, format, value, spec)
        value = as_user(format, value, spec) if r is dunders.NATIVE else r
    stack[-1] = value


@handler("BUILD_STRING")
def BUILD_STRING(frame, inst):
    stack = frame.stack
    n = inst.arg
    if n == 0:
        stack.append("")
        return
    s = "".join(stack[-n:])
    del stack[-n:]
    stack.append(s)
