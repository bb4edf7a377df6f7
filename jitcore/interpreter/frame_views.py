"""Interpreter stage: what code asking for its caller's frame or module sees (lookasides, keyed by the builtin's id).
Interpreted frames are not Python frames: library code reading its caller (namedtuple, enum, typing, dataclasses via
`sys._getframe(n).f_globals` or `sys._getframemodulename`) gets a FrameView of the interpreted frame; a class made by
type.__new__ gets the calling interpreted frame's module as `__module__`, as eager's (frame.with_caller_module).
"""
from __future__ import annotations

import inspect
import sys
import traceback
import types
import typing

from jitcore.errors import UnsupportedError
from jitcore.interpreter.frame import frame_locals, with_caller_module
from jitcore.interpreter.run import LOOKASIDES, is_user_file


class FrameView:
    """A read-only stand-in for the Python frame of an interpreted Frame: f_globals, f_builtins, f_code, f_lineno,
    f_locals (a snapshot), f_back (None past the outermost interpreted frame)."""

    __slots__ = ("_frame",)

    def __init__(self, frame):
        self._frame = frame

    @property
    def f_globals(self):
        return self._frame.globals

    @property
    def f_builtins(self):
        return self._frame.builtins

    @property
    def f_code(self):
        return self._frame.code

    @property
    def f_lineno(self):
        return self._frame.lineno()

    @property
    def f_locals(self):
        return dict(frame_locals(self._frame))

    @property
    def f_back(self):
        parent = self._frame.parent
        return None if parent is None else FrameView(parent)

    def __repr__(self):
        code = self._frame.code
        return f"<interpreted frame, file {code.co_filename!r}, line {self.f_lineno}, code {code.co_name}>"


def _frame_at(rt, depth: int):
    """The interpreted frame `depth` calls above the one running (0: the frame making the call); None past them."""
    frame = rt.frame
    for _ in range(depth):
        if frame is None:
            break
        frame = frame.parent
    return frame


def _depth(fn_name: str, args, kwargs, default: int) -> int:
    if len(args) > 1 or set(kwargs) - {"depth"}:
        raise TypeError(f"{fn_name}() takes at most 1 argument ({len(args) + len(kwargs)} given)")
    depth = args[0] if args else kwargs.get("depth", default)
    if not isinstance(depth, int):
        raise TypeError(f"'{type(depth).__name__}' object cannot be interpreted as an integer")
    return depth


def _refuse(name):
    raise UnsupportedError("callable", f"{name}() inside a jitted function: interpreted code has no Python frames (it "
                           "would see the interpreter's own)",
                           hint="read frames or stacks outside the jitted function, or pass in what you need from "
                                "them as an argument")


def _from_user(rt) -> bool:
    return rt.frame is None or is_user_file(rt.frame.code.co_filename)


def _getframe(rt, args, kwargs):
    """sys._getframe(depth): refused in user code; library code gets the interpreted caller's FrameView (past the
    outermost interpreted frame, the native answer, as before)."""
    if _from_user(rt):
        _refuse("sys._getframe")
    frame = _frame_at(rt, _depth("_getframe", args, kwargs, 0))
    return sys._getframe(*args, **kwargs) if frame is None else FrameView(frame)


def _currentframe(rt, args, kwargs):
    if _from_user(rt):
        _refuse("inspect.currentframe")
    return inspect.currentframe(*args, **kwargs) if args or kwargs or rt.frame is None else FrameView(rt.frame)


def _stack_reader(fn):
    """inspect.stack/trace and traceback's stack functions: refused in user code; library code keeps the native
    answer (it lists the interpreter's frames: those readers build real frame records)."""
    name = f"{fn.__module__}.{fn.__name__}"

    def look(rt, args, kwargs):
        if _from_user(rt):
            _refuse(name)
        return fn(*args, **kwargs)

    return look


def _module_of(frame):
    """The module eager's C code names for a frame: its function's `__module__`, else its globals' `__name__`."""
    module = getattr(frame.fn, "__module__", None) if frame.fn is not None else None
    return module if module is not None else frame.globals.get("__name__")


def _getframemodulename(rt, args, kwargs):
    """sys._getframemodulename(depth) (3.12+): the module of the interpreted function `depth` calls up, None past the
    outermost interpreted frame, as eager's."""
    frame = _frame_at(rt, _depth("_getframemodulename", args, kwargs, 0))
    return None if frame is None else _module_of(frame)


def _named_by_caller(cls):
    """typing's TypeVar, ParamSpec, TypeVarTuple in C (3.12+) name their caller's module in `__module__`: the
    interpreted caller's here (their Python versions, 3.11's, read sys._getframe and are interpreted)."""
    def look(rt, args, kwargs):
        obj = cls(*args, **kwargs)
        module = None if rt.frame is None else _module_of(rt.frame)
        if module is not None:
            obj.__module__ = module
        return obj

    return look


LOOKASIDES[id(sys._getframe)] = _getframe
LOOKASIDES[id(inspect.currentframe)] = _currentframe
for _fn in (inspect.stack, inspect.trace, traceback.extract_stack, traceback.format_stack, traceback.print_stack,
            traceback.walk_stack):
    LOOKASIDES[id(_fn)] = _stack_reader(_fn)
if hasattr(sys, "_getframemodulename"):
    LOOKASIDES[id(sys._getframemodulename)] = _getframemodulename
for _cls in (typing.TypeVar, typing.ParamSpec, typing.TypeVarTuple):
    if not isinstance(_cls.__dict__.get("__init__"), types.FunctionType):
        LOOKASIDES[id(_cls)] = _named_by_caller(_cls)


# -- classes made by type.__new__ from an interpreted metaclass's __new__ (type(...) itself: lookasides._type) --------
def _type_new(rt, args, kwargs):
    """type.__new__(metaclass, name, bases, ns): __module__ is the calling frame's module, as eager's type_new sets."""
    if len(args) == 4:
        args = (*args[:3], with_caller_module(rt.frame, args[0], args[2], args[3]))
    return type.__new__(*args, **kwargs)


LOOKASIDES[id(type.__new__)] = _type_new
