"""Interpreter: each Python's opcode table against its own `dis` (every opcode the compiler emits has a handler or a
named refusal), the decoder against `dis.get_instructions`, and the Python-version policy."""
from __future__ import annotations

import dis
import sys
import types
import warnings

import pytest

from jitcore.errors import UnsupportedError
from jitcore.interpreter import bytecode, versions
from jitcore.interpreter.frame import _unsupported, code_info, decode
from jitcore.interpreter.handlers import table_for

# The opcodes of CPython 3.12 (Lib/opcode.py of 3.12, no interpreter of which is reachable here), pseudo-ops and
# instrumented forms aside: the table for 3.12 must have a row for each, and none for the 3.11 ones it removed.
OPCODES_312 = """
CACHE POP_TOP PUSH_NULL INTERPRETER_EXIT END_FOR END_SEND NOP UNARY_NEGATIVE UNARY_NOT UNARY_INVERT RESERVED
BINARY_SUBSCR BINARY_SLICE STORE_SLICE GET_LEN MATCH_MAPPING MATCH_SEQUENCE MATCH_KEYS PUSH_EXC_INFO CHECK_EXC_MATCH
CHECK_EG_MATCH WITH_EXCEPT_START GET_AITER GET_ANEXT BEFORE_ASYNC_WITH BEFORE_WITH END_ASYNC_FOR CLEANUP_THROW
STORE_SUBSCR DELETE_SUBSCR GET_ITER GET_YIELD_FROM_ITER LOAD_BUILD_CLASS LOAD_ASSERTION_ERROR RETURN_GENERATOR
RETURN_VALUE SETUP_ANNOTATIONS LOAD_LOCALS POP_EXCEPT STORE_NAME DELETE_NAME UNPACK_SEQUENCE FOR_ITER UNPACK_EX
STORE_ATTR DELETE_ATTR STORE_GLOBAL DELETE_GLOBAL SWAP LOAD_CONST LOAD_NAME BUILD_TUPLE BUILD_LIST BUILD_SET BUILD_MAP
LOAD_ATTR COMPARE_OP IMPORT_NAME IMPORT_FROM JUMP_FORWARD POP_JUMP_IF_FALSE POP_JUMP_IF_TRUE LOAD_GLOBAL IS_OP
CONTAINS_OP RERAISE COPY RETURN_CONST BINARY_OP SEND LOAD_FAST STORE_FAST DELETE_FAST LOAD_FAST_CHECK
POP_JUMP_IF_NOT_NONE POP_JUMP_IF_NONE RAISE_VARARGS GET_AWAITABLE MAKE_FUNCTION BUILD_SLICE JUMP_BACKWARD_NO_INTERRUPT
MAKE_CELL LOAD_CLOSURE LOAD_DEREF STORE_DEREF DELETE_DEREF JUMP_BACKWARD LOAD_SUPER_ATTR CALL_FUNCTION_EX
LOAD_FAST_AND_CLEAR EXTENDED_ARG LIST_APPEND SET_ADD MAP_ADD COPY_FREE_VARS YIELD_VALUE RESUME MATCH_CLASS
FORMAT_VALUE BUILD_CONST_KEY_MAP BUILD_STRING LIST_EXTEND SET_UPDATE DICT_MERGE DICT_UPDATE CALL KW_NAMES
CALL_INTRINSIC_1 CALL_INTRINSIC_2 LOAD_FROM_DICT_OR_GLOBALS LOAD_FROM_DICT_OR_DEREF
""".split()
REMOVED_IN_312 = """PRECALL LOAD_METHOD LOAD_CLASSDEREF UNARY_POSITIVE PRINT_EXPR IMPORT_STAR LIST_TO_TUPLE
ASYNC_GEN_WRAP PREP_RERAISE_STAR JUMP_IF_TRUE_OR_POP JUMP_IF_FALSE_OR_POP POP_JUMP_FORWARD_IF_TRUE
POP_JUMP_BACKWARD_IF_NONE""".split()
ADDED_IN_313 = """TO_BOOL CALL_KW FORMAT_SIMPLE FORMAT_WITH_SPEC CONVERT_VALUE LOAD_FAST_LOAD_FAST STORE_FAST_LOAD_FAST
STORE_FAST_STORE_FAST SET_FUNCTION_ATTRIBUTE""".split()


def _codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _corpus():
    """Code objects of real programs: torch.nn's Module and functional, a few standard-library modules, this file."""
    import collections
    import inspect
    import json.decoder

    import torch.nn.functional
    import torch.nn.modules.module

    mods = (torch.nn.modules.module, torch.nn.functional, collections, json.decoder, inspect, sys.modules[__name__])
    for mod in mods:
        with open(mod.__file__) as f:
            yield from _codes(compile(f.read(), mod.__file__, "exec"))


def test_every_opcode_of_this_python_has_a_handler_or_a_named_refusal():
    table = table_for()
    real = {name for name, op in dis.opmap.items() if op < 256}  # (256+: pseudo-ops, never in co_code)
    assert sorted(real - set(table)) == []
    assert sorted(set(table) - set(dis.opmap)) == []  # (a row for an opcode this Python lacks: a wrong since/until)


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_one_handler_per_opcode_in_each_version(version):
    table_for(version)  # raises when two rows of one opcode cover one version


def test_the_312_table_follows_312s_opcodes():
    table = table_for((3, 12))
    assert sorted(set(OPCODES_312) - set(table)) == []
    assert sorted(set(REMOVED_IN_312) & set(table)) == []
    assert sorted(set(ADDED_IN_313) & set(table)) == []
    # the handlers that differ from 3.13's where 3.12 differs (NULL order, COMPARE_OP, END_FOR, MAKE_FUNCTION's flags)
    t313 = table_for((3, 13))
    for name in ("LOAD_GLOBAL", "LOAD_ATTR", "CALL", "COMPARE_OP", "END_FOR", "MAKE_FUNCTION"):
        assert table[name][0] is not t313[name][0], name


def test_decoder_agrees_with_dis():
    """Offsets, opnames, opargs and resolved arguments (names, locals and their pairs, constants, comparisons, jump
    targets with this version's caches) as `dis` gives them, over real code."""
    n = 0
    for co in _corpus():
        ours = decode(co)
        theirs = [i for i in dis.get_instructions(co) if i.opname != "CACHE"]
        assert len(ours) == len(theirs), co
        for a, b in zip(ours, theirs):
            assert (a.opname, a.offset, a.arg) == (b.opname, b.offset, b.arg), (co, a, b)
            if b.opname not in ("KW_NAMES", "FORMAT_VALUE", "CONVERT_VALUE"):  # (dis shows these for reading)
                assert a.argval == b.argval, (co, a, b)
            n += 1
    assert n > 10000


def test_compiled_code_decodes_to_handlers():
    """Every instruction of the corpus has a handler on this Python (no `not supported` waiting at run time)."""
    missing = set()
    for co in _corpus():
        for ins in code_info(co).insts:
            if ins.fn is _unsupported:
                missing.add(ins.opname)
    assert sorted(missing) == []


def _varints(data):
    i = 0
    while i < len(data):
        b = data[i]
        val = b & 63
        i += 1
        while b & 64:
            b = data[i]
            i += 1
            val = (val << 6) | (b & 63)
        yield val


def test_exception_table_as_its_format_says():
    """co_exceptiontable's entries (start, length, target, depth << 1 | lasti: varints in code units), read here by
    hand, are what the decoder routes exceptions by (end exclusive)."""
    for co in _codes(_sample.__code__):
        v = list(_varints(co.co_exceptiontable))
        want = [(v[i] * 2, (v[i] + v[i + 1]) * 2, v[i + 2] * 2, v[i + 3] >> 1, bool(v[i + 3] & 1))
                for i in range(0, len(v), 4)]
        assert bytecode.exception_entries(co) == want
    assert len(bytecode.exception_entries(_sample.__code__)) >= 3


def _sample(x):
    try:
        return [y for y in x if y]
    except (TypeError, ValueError) as e:
        return str(e)
    finally:
        x = None


def test_versions_outside_the_supported_ones_are_refused_naming_them():
    for v in ((3, 10), (3, 15)):
        msg = versions.refusal(v, threaded=False)
        assert msg is not None and "3.11, 3.12, 3.13, 3.14" in msg and f"{v[0]}.{v[1]}" in msg
    for v in versions.SUPPORTED:
        assert versions.refusal(v, threaded=False) is None


def test_free_threaded_builds_are_refused():
    msg = versions.refusal((3, 13), threaded=True)
    assert msg is not None and "free-threaded" in msg and "3.13" in msg


def test_jit_refuses_a_free_threaded_build(monkeypatch):
    import jitcore

    monkeypatch.setattr(versions, "free_threaded", lambda: True)
    with pytest.raises(UnsupportedError, match="free-threaded"):
        jitcore.jit(lambda x: x)


def test_untested_version_warns_once_at_jit(monkeypatch):
    import jitcore

    monkeypatch.setitem(versions.UNTESTED, tuple(sys.version_info[:2]), "a test says so")
    monkeypatch.setattr(versions, "_warned", False)
    with pytest.warns(RuntimeWarning, match="untested: a test says so"):
        jitcore.jit(lambda x: x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jitcore.jit(lambda x: x)


class _Holder:
    def __init__(self, arr):
        self.arr = arr


def test_pending_callables_sees_the_call_a_value_is_loaded_for():
    """What the next call instruction calls, asked while its last argument is being loaded (arrays.py: an array going
    straight into torch.from_numpy): a global, an attribute (its owner still on the stack), a method's argument."""
    import numpy as np
    import torch

    from jitcore.interpreter import DefaultContext, interpret
    from jitcore.interpreter.frame import pending_callables

    seen = []

    class Ctx(DefaultContext):
        def attach_runtime(self, rt):
            self.rt = rt

        def on_external_value(self, value, prov):
            if isinstance(value, np.ndarray) and self.rt.frame is not None:
                seen.append(pending_callables(self.rt.frame, 1))
            return value

    holder = _Holder(np.ones(3, dtype=np.float32))
    interpret(lambda h: torch.from_numpy(h.arr), (holder,), {}, Ctx())
    interpret(lambda h: torch.as_tensor(h.arr), (holder,), {}, Ctx())
    interpret(lambda h: torch.as_tensor(h.arr, dtype=torch.float64), (holder,), {}, Ctx())
    interpret(lambda h: torch.add(torch.ones(3), torch.from_numpy(h.arr)), (holder,), {}, Ctx())
    interpret(lambda: torch.from_numpy(_ARRAY), (), {}, Ctx())
    interpret(lambda h: h.arr.sum(), (holder,), {}, Ctx())
    assert [any(c is torch.from_numpy for c in s) for s in seen] == [True, False, False, True, True, False]
    assert any(c is torch.as_tensor for c in seen[1]) and not any(c is torch.as_tensor for c in seen[2])


_ARRAY = __import__("numpy").zeros(2)
