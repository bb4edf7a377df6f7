"""Interpreter stage: the running Python's bytecode, as its own `dis` module describes it.

This is the one place that reads `dis`: opcode numbers and names, inline cache sizes (a list by opcode before 3.13,
a dict by name since), binary operators, intrinsics, jump directions and the exception table, plus the few argument
encodings `dis` keeps in code rather than in tables (rows keyed by version below). `decode(code)` gives the `Ins`
rows of a code object with `argval` resolved. Code outside the interpreter asks frame.py (`pending_callables`).
"""
from __future__ import annotations

import dis
import sys

from jitcore.interpreter import versions

versions.check_import()  # (before reading tables a version outside the supported ones may lack)
VERSION = sys.version_info[:2]

OPNAME = dis.opname
OPMAP = dis.opmap


def _cache_sizes() -> list[int]:
    """Inline cache entries (code units after the instruction) by opcode."""
    raw = dis._inline_cache_entries
    sizes = [0] * 256
    if isinstance(raw, dict):  # 3.13+: keyed by name
        for name, n in raw.items():
            op = OPMAP.get(name)
            if op is not None and op < 256:
                sizes[op] = n
    else:  # 3.11, 3.12: a list indexed by opcode
        sizes[:len(raw)] = raw
    return sizes


CACHES = _cache_sizes()
HAS_ARG = frozenset(dis.hasarg) if hasattr(dis, "hasarg") else frozenset(range(dis.HAVE_ARGUMENT, 256))
EXTENDED_ARG = OPMAP["EXTENDED_ARG"]
HASCONST, HASNAME = frozenset(dis.hasconst), frozenset(dis.hasname)
HASJREL, HASJABS = frozenset(dis.hasjrel), frozenset(dis.hasjabs)
JUMPS = HASJREL | HASJABS
BACKWARD = frozenset(op for op in HASJREL if dis._is_backward_jump(op))
HASLOCAL = frozenset(dis.haslocal) | frozenset(dis.hasfree)
HASCOMPARE = frozenset(dis.hascompare)
CMP_OP = dis.cmp_op

# `dis._nb_ops`: BINARY_OP's oparg -> operator symbol ("+", "+=", ...; 3.14 adds "[]", subscript)
BINARY_OP_SYMBOLS = tuple(sym for _, sym in dis._nb_ops)
# CALL_INTRINSIC_1/2's oparg -> the intrinsic's name (3.12+; "INTRINSIC_PRINT", ...)
INTRINSIC_1 = tuple(getattr(dis, "_intrinsic_1_descs", ()))
INTRINSIC_2 = tuple(getattr(dis, "_intrinsic_2_descs", ()))
# 3.14: LOAD_COMMON_CONSTANT's oparg -> the object (AssertionError, NotImplementedError, tuple, all, any);
# LOAD_SPECIAL's oparg -> the method's name (__enter__, __exit__, __aenter__, __aexit__)
COMMON_CONSTANTS = tuple(getattr(dis, "_common_constants", ()))
SPECIAL_METHOD_NAMES = tuple(getattr(dis, "_special_method_names", ()))

# -- argument encodings dis keeps in code, not tables: one row per version ---------------------------------------
# name index = oparg >> shift (the low bits are flags: LOAD_GLOBAL's push-NULL, LOAD_ATTR's method load,
# LOAD_SUPER_ATTR's method load and two-argument form)
_NAME_SHIFTS = {
    (3, 11): {"LOAD_GLOBAL": 1},
    (3, 12): {"LOAD_GLOBAL": 1, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2},
}
# COMPARE_OP: the operator is cmp_op[oparg >> shift]; `to_bool`: the bit asking for the result as a bool (3.13+)
_COMPARE = {(3, 11): (0, 0), (3, 12): (4, 0), (3, 13): (5, 16)}


def _row(table: dict):
    """The row of `table` for this version: its own, else the latest earlier one (a version changes only what its
    row says)."""
    return table[max(v for v in table if v <= VERSION)]


NAME_SHIFT = {OPMAP[n]: s for n, s in _row(_NAME_SHIFTS).items() if n in OPMAP}
COMPARE_SHIFT, COMPARE_TO_BOOL = _row(_COMPARE)
# two locals in one oparg (high nibble, low nibble): argval is the pair of names
LOCAL_PAIRS = frozenset(OPMAP[n] for n in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
                                          "LOAD_FAST_BORROW_LOAD_FAST_BORROW") if n in OPMAP)
# the instruction that calls with the callable and its arguments on the stack (3.11: PRECALL, then CALL)
CALL_OPNAME = "PRECALL" if "PRECALL" in OPMAP else "CALL"
# the two slots below a call's arguments: (NULL, callable) / (callable, self) before 3.13; (callable, NULL or self)
# since
CALLABLE_FIRST = VERSION >= (3, 13)
# 3.12+: an exception thrown into a generator delegating with `yield from` is raised in its frame, where
# CLEANUP_THROW takes a StopIteration's value; 3.11 jumps over the SEND loop itself
THROW_INTO_SEND = "CLEANUP_THROW" in OPMAP


class Ins:
    """One decoded instruction; `fn` is its handler, `target` the instruction index a jump goes to."""

    __slots__ = ("arg", "argval", "aux", "fn", "idx", "lineno", "offset", "opname", "target")

    def __repr__(self):
        return f"<{self.idx}: {self.opname} {self.argval!r}>"


def exception_entries(code) -> list[tuple[int, int, int, int, bool]]:
    """(start, end, target, depth, lasti) of `code`'s exception table, offsets in bytes, `end` exclusive."""
    return [(e.start, e.end, e.target, e.depth, e.lasti) for e in dis._parse_exception_table(code)]


def decode(code) -> list[Ins]:
    """The instructions of `code` (caches skipped; co_code gives the unspecialised, uninstrumented forms), with
    argval resolved as `dis` does: constant, name, jump target offset, variable name(s), comparison."""
    co = code.co_code
    positions = list(code.co_positions())
    consts, names, varname = code.co_consts, code.co_names, code._varname_from_oparg
    insts, ext, skip, line = [], 0, 0, code.co_firstlineno
    for i in range(0, len(co), 2):
        if skip:
            skip -= 1
            continue
        op = co[i]
        caches = skip = CACHES[op]
        if op in HAS_ARG:
            arg = co[i + 1] | ext
            ext = (arg << 8) if op == EXTENDED_ARG else 0
        else:
            arg, ext = None, 0
        argval = arg
        if arg is not None:
            if op in HASCONST:
                argval = consts[arg]
            elif op in HASNAME:
                argval = names[arg >> NAME_SHIFT.get(op, 0)]
            elif op in HASJREL:
                argval = i + 2 + 2 * caches + (-arg if op in BACKWARD else arg) * 2
            elif op in HASJABS:
                argval = arg * 2
            elif op in LOCAL_PAIRS:
                argval = (varname(arg >> 4), varname(arg & 15))
            elif op in HASLOCAL:
                argval = varname(arg)
            elif op in HASCOMPARE:
                argval = CMP_OP[arg >> COMPARE_SHIFT]
        ins = Ins()
        ins.opname, ins.arg, ins.argval, ins.offset = OPNAME[op], arg, argval, i
        ins.idx, ins.aux, ins.target = len(insts), None, -1
        pos_line = positions[i // 2][0]
        if pos_line is not None:
            line = pos_line
        ins.lineno = line
        insts.append(ins)
    return insts


def is_jump(opname: str) -> bool:
    return OPMAP.get(opname) in JUMPS

