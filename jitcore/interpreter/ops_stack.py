"""Interpreter stage: stack, constant, unary/binary operator, comparison and f-string opcodes (3.11-3.14).

Operators run natively through the `operator` module (a TensorProxy's operators record ops themselves);
the operator function of BINARY_OP / COMPARE_OP is picked once when the code object is decoded, from this Python's
own tables (bytecode.py). 3.13 adds TO_BOOL, COMPARE_OP's to-bool bit and FORMAT_SIMPLE/FORMAT_WITH_SPEC/CONVERT_VALUE;
3.14 LOAD_SMALL_INT, LOAD_COMMON_CONSTANT, NOT_TAKEN, POP_ITER and BINARY_OP's subscript.
"""
from __future__ import annotations

import operator
import sys

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access, bytecode, dunders
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.ops_load_store import BINARY_SUBSCR
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
BINARY_OPS = [_SYMBOL_OPS.get(sym) for sym in bytecode.BINARY_OP_SYMBOLS]  # (None: an operator without a row)
COMPARE_OPS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
               ">=": operator.ge}


def _nop(frame, inst):
    return None


for _name in ("NOP", "RESUME", "CACHE", "EXTENDED_ARG"):
    handler(_name)(_nop)
handler("PRECALL", until=(3, 12))(_nop)
handler("NOT_TAKEN", since=(3, 14))(_nop)  # (a branch hint for CPython's monitoring)


def _never_in_code(frame, inst):
    raise UnsupportedError("opcode", f"{inst.opname} is CPython's own (instrumentation, the JIT's executors, the "
                           "interpreter's exit) and never appears in a code object's co_code", where=frame.where(inst))


handler("INTERPRETER_EXIT", since=(3, 12))(_never_in_code)
handler("RESERVED", since=(3, 12))(_never_in_code)
handler("ENTER_EXECUTOR", since=(3, 13))(_never_in_code)
handler("EXIT_INIT_CHECK", since=(3, 13))(_never_in_code)
for _name in bytecode.OPMAP:  # (this Python's own: their set changes with every version)
    if _name.startswith("INSTRUMENTED_") and bytecode.OPMAP[_name] < 256:
        handler(_name, since=bytecode.VERSION, until=bytecode.VERSION[:1] + (bytecode.VERSION[1] + 1,))(_never_in_code)


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


def _prepare_common_constant(inst, code, insts):
    inst.aux = bytecode.COMMON_CONSTANTS[inst.arg]  # AssertionError, NotImplementedError, tuple, all, any (3.14)


@handler("LOAD_COMMON_CONSTANT", since=(3, 14), prepare=_prepare_common_constant)
def LOAD_COMMON_CONSTANT(frame, inst):
    frame.stack.append(inst.aux)  # (the builtins themselves: `tuple(genexp)` compares the global with it, IS_OP)


@handler("UNARY_POSITIVE", until=(3, 12))  # (3.12+: CALL_INTRINSIC_1 INTRINSIC_UNARY_POSITIVE)
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


def _prepare_binary(inst, code, insts):
    inst.aux = BINARY_OPS[inst.arg]
    if inst.aux is None:
        inst.fn = _unknown_binary
    elif inst.aux is operator.getitem:  # 3.14's `a[b]`: an item read with provenance, as BINARY_SUBSCR was
        inst.fn = BINARY_SUBSCR


def _unknown_binary(frame, inst):
    raise UnsupportedError("opcode", f"BINARY_OP {inst.arg} ({bytecode.BINARY_OP_SYMBOLS[inst.arg]!r}) has no operator "
                           f"in the jitcore interpreter on Python {bytecode.VERSION[0]}.{bytecode.VERSION[1]}",
                           where=frame.where(inst))


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


def _prepare_compare(inst, code, insts):
    inst.aux = COMPARE_OPS[inst.argval]


@handler("COMPARE_OP", until=(3, 13), prepare=_prepare_compare)  # (3.12: the operator is oparg >> 4, bytecode.py)
def COMPARE_OP(frame, inst):
    stack = frame.stack
    b = stack.pop()
    if type(b) in _CONTAINERS or type(stack[-1]) in _CONTAINERS:  # `shape == [1, 2]`: compared whole, natively
        frame.rt.read_whole(stack[-1], b)
    r = dunders.compare(frame.rt, inst.aux, stack[-1], b)
    stack[-1] = inst.aux(stack[-1], b) if r is dunders.NATIVE else r


def _prepare_compare_313(inst, code, insts):
    _prepare_compare(inst, code, insts)
    if not inst.arg & bytecode.COMPARE_TO_BOOL:
        inst.fn = COMPARE_OP


@handler("COMPARE_OP", since=(3, 13), prepare=_prepare_compare_313)
def COMPARE_OP_TO_BOOL(frame, inst):
    """3.13: the operator is oparg >> 5; oparg & 16 asks for the result as a bool (`if a < b:` has no TO_BOOL), else
    COMPARE_OP's handler is picked when decoded."""
    COMPARE_OP(frame, inst)
    frame.stack[-1] = access.truth(frame.rt, frame.stack[-1])


@handler("TO_BOOL", since=(3, 13))
def TO_BOOL(frame, inst):
    v = frame.stack[-1]
    if type(v) is not bool:
        frame.stack[-1] = access.truth(frame.rt, v)


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


@handler("PRINT_EXPR", until=(3, 12))  # (3.12+: CALL_INTRINSIC_1 INTRINSIC_PRINT)
def PRINT_EXPR(frame, inst):
    print_expr(frame.stack.pop())


def print_expr(value):
    hook = getattr(sys, "displayhook", None)
    if hook is None:
        raise RuntimeError("lost sys.displayhook")
    hook(value)


_CONVERSIONS = {1: str, 2: repr, 3: ascii}


def _convert(rt, value, conv):
    """str/repr/ascii of an f-string's `!s`/`!r`/`!a`."""
    r = dunders.to_text(rt, _CONVERSIONS[conv], value) if conv != 3 else dunders.NATIVE
    return as_user(_CONVERSIONS[conv], value) if r is dunders.NATIVE else r


def _format(rt, value, spec):
    if type(value) is str and not spec:
        return value
    r = dunders.to_text(rt, format, value, spec)
    return as_user(format, value, spec) if r is dunders.NATIVE else r


@handler("FORMAT_VALUE", until=(3, 13))
def FORMAT_VALUE(frame, inst):
    stack = frame.stack
    flags = inst.arg
    spec = stack.pop() if flags & 0x04 else ""
    value = stack[-1]
    conv = flags & 0x03
    if conv:
        value = _convert(frame.rt, value, conv)
    stack[-1] = _format(frame.rt, value, spec)


@handler("CONVERT_VALUE", since=(3, 13))
def CONVERT_VALUE(frame, inst):
    frame.stack[-1] = _convert(frame.rt, frame.stack[-1], inst.arg)


@handler("FORMAT_SIMPLE", since=(3, 13))
def FORMAT_SIMPLE(frame, inst):
    frame.stack[-1] = _format(frame.rt, frame.stack[-1], "")


@handler("FORMAT_WITH_SPEC", since=(3, 13))
def FORMAT_WITH_SPEC(frame, inst):
    stack = frame.stack
    spec = stack.pop()
    stack[-1] = _format(frame.rt, stack[-1], spec)


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
