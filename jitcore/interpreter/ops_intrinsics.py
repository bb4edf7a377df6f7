"""Interpreter stage: CALL_INTRINSIC_1 / CALL_INTRINSIC_2 (3.12+), the opcodes that took over PRINT_EXPR, IMPORT_STAR,
UNARY_POSITIVE, LIST_TO_TUPLE, PREP_RERAISE_STAR and a generator's StopIteration check.

The oparg names an intrinsic in this Python's own table (`dis._intrinsic_1_descs`, read by bytecode.py); each name
has a row here, picked once when the code object is decoded. PEP 695's type-parameter intrinsics are refused.
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.interpreter import bytecode, dunders
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.ops_exceptions import prep_reraise_star
from jitcore.interpreter.ops_load_store import import_star
from jitcore.interpreter.ops_stack import print_expr

_CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x80, 0x200


def _print(frame, value):
    print_expr(value)


def _import_star(frame, module):
    import_star(frame, module)


def _stopiteration_error(frame, exc):
    """A generator's body raised `exc`: a StopIteration (or an async generator's StopAsyncIteration) becomes
    RuntimeError, as PEP 479 says; anything else is raised as it is."""
    flags = frame.code.co_flags
    msg = None
    if isinstance(exc, StopIteration):
        msg = "async generator" if flags & _CO_ASYNC_GENERATOR else (
            "coroutine" if flags & _CO_COROUTINE else "generator")
        msg += " raised StopIteration"
    elif flags & _CO_ASYNC_GENERATOR and isinstance(exc, StopAsyncIteration):
        msg = "async generator raised StopAsyncIteration"
    if msg is None:
        return exc
    error = RuntimeError(msg)
    error.__cause__ = exc
    error.__context__ = exc
    return error


def _unary_positive(frame, value):
    r = dunders.unary(frame.rt, "__pos__", value)
    return +value if r is dunders.NATIVE else r


def _list_to_tuple(frame, value):
    return tuple(value)


def _prep_reraise_star(frame, orig, excs):
    return prep_reraise_star(orig, excs)


INTRINSICS_1 = {
    "INTRINSIC_PRINT": _print,
    "INTRINSIC_IMPORT_STAR": _import_star,
    "INTRINSIC_STOPITERATION_ERROR": _stopiteration_error,
    "INTRINSIC_UNARY_POSITIVE": _unary_positive,
    "INTRINSIC_LIST_TO_TUPLE": _list_to_tuple,
}
INTRINSICS_2 = {"INTRINSIC_PREP_RERAISE_STAR": _prep_reraise_star}
# intrinsics refused with a reason (the rest of the table: PEP 695's type parameters)
_REASONS = {"INTRINSIC_ASYNC_GEN_WRAP": "async generators are not interpreted"}


def _refuse(frame, inst, name):
    reason = _REASONS.get(name, "type parameter syntax (PEP 695: `def f[T]`, `class C[T]`, `type X = ...`) is not "
                                "interpreted")
    raise UnsupportedError("opcode", f"{inst.opname} {name}: {reason}", hint="define it outside the jitted function",
                           where=frame.where(inst))


def _prepare(rows, names):
    def prepare(inst, code, insts):
        name = names[inst.arg] if inst.arg < len(names) else f"#{inst.arg}"
        inst.aux = rows.get(name)
        if inst.aux is None:
            inst.fn = lambda frame, inst: _refuse(frame, inst, name)

    return prepare


@handler("CALL_INTRINSIC_1", since=(3, 12), prepare=_prepare(INTRINSICS_1, bytecode.INTRINSIC_1))
def CALL_INTRINSIC_1(frame, inst):
    frame.stack[-1] = inst.aux(frame, frame.stack[-1])


@handler("CALL_INTRINSIC_2", since=(3, 12), prepare=_prepare(INTRINSICS_2, bytecode.INTRINSIC_2))
def CALL_INTRINSIC_2(frame, inst):
    stack = frame.stack
    b = stack.pop()
    stack[-1] = inst.aux(frame, stack[-1], b)
