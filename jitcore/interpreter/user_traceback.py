"""Interpreter stage: the user's frames in the traceback of an exception raised while interpreting.

run_frame records each interpreted frame an exception leaves (`record`); interpret() then gives the exception a
traceback made of those frames, outermost first, as eager's would read (`file:line, in function` and the source
line), followed by the native frames it was raised in below them (torch's Python code, say), without the
interpreter's own machinery (`rebuild`). The frames are stand-ins: code objects compiled under the user's file
name and function name, run to the user's line.
"""
from __future__ import annotations

import os
import re
import types

_OWN = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), d) + os.sep
             for d in ("jitcore", "executors", "transforms"))


_STAND_IN = "__jitcore_user_frame__"  # the __name__ of a stand-in frame's globals


class _Here(Exception):
    """Raised by a stand-in frame to capture it."""


def _stop():
    raise _Here


def arrived(frame, inst, exc):
    """`exc` is raised at `inst` of `frame`. Its line there is where it first arrived, as in CPython's traceback: a
    re-raise (the end of an except clause that did not match, a cleanup, a bare `raise`) keeps it; `raise exc`
    moves it."""
    seen = frame.arrival
    if seen is None or seen[0] is not exc or (inst.opname == "RAISE_VARARGS" and inst.arg):
        frame.arrival = (exc, inst)


def record(rt, frame, exc):
    """`exc` leaves the interpreted `frame` (no handler there): remember where it arrived, innermost first."""
    if not isinstance(exc, Exception) or frame.arrival is None or frame.arrival[0] is not exc:
        return
    inst = frame.arrival[1]
    entry = rt.unwound.get(id(exc))
    if entry is None or entry[0] is not exc:
        entry = rt.unwound[id(exc)] = (exc, [])
    code = frame.code
    entry[1].append((code.co_filename, inst.lineno, code.co_name, code.co_qualname, _columns(code, inst)))


def _columns(code, inst):
    """(start, end) columns of the instruction on its line, when it spans one line; else None."""
    offset = getattr(inst, "offset", None)
    if offset is None:
        return None
    for i, pos in enumerate(code.co_positions()):
        if i == offset // 2:
            line, end_line, col, end_col = pos
            ok = line == end_line == inst.lineno and col is not None and end_col is not None
            return (col, end_col) if ok and end_col - col >= 3 else None
    return None


def rebuild(rt, exc):
    """Give `exc` (and the exceptions chained to it) the user's frames as their traceback, where recorded."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        entry = rt.unwound.get(id(exc))
        if entry is not None and entry[0] is exc:
            tb = _native_tail(exc.__traceback__)
            for where in entry[1]:  # innermost first: each frame goes in front of the ones it called
                tb = _stand_in(tb, *where)
            exc.__traceback__ = tb
        exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__


def _native_tail(tb):
    """The frames below the last of jitcore's own (where a natively called function raised), or None."""
    tail = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_OWN):
            tail = None
        elif tail is None:
            tail = tb
        tb = tb.tb_next
    return tail


def _stand_in(tb_next, filename: str, lineno: int, name: str, qualname: str, columns):
    """A traceback entry reading `File filename, line lineno, in name`, with carets under `columns` of the line:
    the stand-in's code calls a function whose call expression spans exactly those columns."""
    col, end = columns if columns is not None else (0, 3)
    stub = "_" * (end - col - 2)
    line = f"{stub}()" if col == 0 else "(" + " " * (col - 1) + f"{stub}())"
    try:
        code = compile("\n" * (lineno - 1) + line, filename, "exec").replace(co_name=name, co_qualname=qualname)
        exec(code, {"__name__": _STAND_IN, stub: _stop})
    except _Here as e:
        tb = e.__traceback__.tb_next
        lasti = tb.tb_lasti if columns is not None else -1
        return types.TracebackType(tb_next, tb.tb_frame, lasti, lineno)
    except (SyntaxError, ValueError):
        pass
    return tb_next


def user_frames_first(exc):
    """Drop jitcore's frames above the user's stand-in frames from exc's traceback (compiling a call that raised in
    user code): the traceback reads the caller's line, then the user's frames."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == _STAND_IN:
            exc.__traceback__ = tb
            return
        tb = tb.tb_next


def at_user_line(exc, trace) -> None:
    """`exc` was raised while a compiled program ran (an index out of range on a later call): give it, below the
    caller's frames, the user's frames of the line of `trace` (the interpreter's, whose lines carry the frames they
    were recorded in) that the failing line of the program computes, then the native frames it was raised in."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<jitcore "):
        tb = tb.tb_next
    if tb is None:
        return
    fn = tb.tb_frame.f_globals.get(tb.tb_frame.f_code.co_name)
    source = getattr(fn, "__jitcore_source__", "").splitlines()
    line = source[tb.tb_lineno - 1] if 0 < tb.tb_lineno <= len(source) else ""
    names = re.findall(r"\w+", line.split("=", 1)[0]) if "=" in line else []
    stacks = _stacks_by_name(trace)
    stack = next((stacks[n] for n in names if n in stacks), None)
    if stack is None:
        return
    new = _native_tail(tb.tb_next)
    for code, inst in reversed(stack):  # innermost first: each frame goes in front of the ones it called
        new = _stand_in(new, code.co_filename, inst.lineno, code.co_name, code.co_qualname, _columns(code, inst))
    exc.__traceback__ = new


def _stacks_by_name(trace) -> dict:
    """Output name -> the user's frames of the top-level line that made it (its decomposition's outputs too)."""
    out: dict = {}

    def visit(bsym, stack):
        for o in bsym.flat_proxy_outs():
            out.setdefault(o.name, stack)
        for sub in bsym.subsymbols:
            visit(sub, stack)

    for b in trace.bound_symbols:
        stack = b.user_stack
        if stack:
            visit(b, stack)
    return out
