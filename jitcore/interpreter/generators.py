"""Interpreter stage: generator objects whose frames the interpreter runs.

Calling an interpreted generator function gives an InterpGenerator. It implements the iterator and
generator protocols (__next__, send, throw, close), so native code (zip, list, sum, ...) can drive it and
each resumption continues the interpreted frame, with CPython's yield-from delegation rules (3.11 jumps over the SEND
loop itself when the delegate finishes during throw(); 3.12+ raise that in the frame, where CLEANUP_THROW ends it).
"""
from __future__ import annotations

from jitcore.interpreter import bytecode
from jitcore.interpreter.run import YIELDED, run_frame


def _make_exception(typ, val=None, tb=None):
    if isinstance(typ, BaseException):
        if val is not None:
            raise TypeError("instance exception may not have a separate value")
        exc = typ
    elif isinstance(typ, type) and issubclass(typ, BaseException):
        if val is None:
            exc = typ()
        elif isinstance(val, typ):
            exc = val
        else:
            exc = typ(*val) if isinstance(val, tuple) else typ(val)
    else:
        raise TypeError(
            f"exceptions must be classes or instances deriving from BaseException, not {type(typ).__name__}"
        )
    if tb is not None:
        exc = exc.with_traceback(tb)
    return exc


class InterpGenerator:
    """A generator object backed by an interpreted frame."""

    def __init__(self, rt, frame):
        self._rt = rt
        self._frame = frame
        self._running = False
        self._started = False
        self._done = False
        self._exc_cell = [None]
        self.gi_code = frame.code
        self.__name__ = frame.code.co_name
        self.__qualname__ = frame.code.co_qualname

    def __repr__(self):
        return f"<interpreted generator object {self.__qualname__} at {id(self):#x}>"

    def __iter__(self):
        return self

    def __next__(self):
        return self._resume(None, None)

    @property
    def gi_running(self):
        return self._running

    @property
    def gi_frame(self):
        return None if self._done else self._frame

    def send(self, value):
        if not self._started and value is not None and not self._done:
            raise TypeError("can't send non-None value to a just-started generator")
        return self._resume(value, None)

    def _yf(self):
        """The iterator this generator delegates to (inside `yield from`), or None."""
        if not self._started or self._done:
            return None
        frame = self._frame
        nxt = frame.insts[frame.ip] if frame.ip < len(frame.insts) else None
        if nxt is None or nxt.opname != "RESUME" or nxt.arg & 3 < 2:  # (its low bits: after yield from / await)
            return None
        return frame.stack[-1]

    def throw(self, typ, val=None, tb=None):
        exc = _make_exception(typ, val, tb)
        yf = self._yf()
        if yf is not None:
            if isinstance(exc, GeneratorExit):
                err = self._close_iter(yf)
                return self._resume(None, err if err is not None else exc)
            meth = getattr(yf, "throw", None)
            if meth is not None:
                self._running = True
                try:
                    return meth(exc)
                except StopIteration as e:
                    if bytecode.THROW_INTO_SEND:  # (3.12+: CLEANUP_THROW takes its value)
                        value, err = None, e
                    else:
                        value, err = e.value, None
                        self._leave_yield_from()
                except BaseException as e:
                    value, err = None, e
                    if not bytecode.THROW_INTO_SEND:
                        self._leave_yield_from()
                finally:
                    self._running = False
                return self._resume(value, err)
        return self._resume(None, exc)

    def _leave_yield_from(self):
        """The subiterator finished during throw(): pop it and continue after the SEND loop."""
        frame = self._frame
        frame.stack.pop()
        send = frame.insts[frame.ip - 2]  # SEND, YIELD_VALUE, RESUME: ip is at RESUME
        frame.ip = send.target

    @staticmethod
    def _close_iter(it):
        close = getattr(it, "close", None)
        if close is None:
            return None
        try:
            close()
        except BaseException as e:
            return e
        return None

    def close(self):
        if self._done:
            return
        if not self._started:
            self._done = True
            return
        try:
            self.throw(GeneratorExit)
        except (GeneratorExit, StopIteration):
            return
        raise RuntimeError("generator ignored GeneratorExit")

    def _resume(self, value, exc):
        if self._running:
            raise ValueError("generator already executing")
        if self._done:
            if exc is not None:
                raise exc
            raise StopIteration
        rt, frame = self._rt, self._frame
        self._running = True
        self._started = True
        rt.exc_stack.append(self._exc_cell)
        parent = rt.frame
        rt.frame = frame
        try:
            frame.stack.append(value)  # (also under a throw, as CPython: the handler's depth counts it)
            if exc is None:
                sig = run_frame(frame)
            else:
                sig = run_frame(frame, throw=exc)
        except StopIteration as e:
            self._done = True
            raise RuntimeError("generator raised StopIteration") from e
        except BaseException:
            self._done = True
            raise
        finally:
            self._running = False
            rt.exc_stack.pop()
            rt.frame = parent
        if sig == YIELDED:
            v = frame.yielded
            frame.yielded = None
            return v
        self._done = True
        rv = frame.retval
        frame.retval = None
        if rv is None:
            raise StopIteration
        raise StopIteration(rv)

