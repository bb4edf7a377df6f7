"""IR: the active trace. Ops called while a trace is active record into it (`tracectx(trace)`); with none active
they run eagerly. The lowest IR module: proxies, symbols and number arithmetic ask it for the trace they record
into, and jitcore/ir/trace.py re-exports it (`from jitcore.ir.trace import get_tracectx` keeps working).
"""
from __future__ import annotations

import contextlib
import contextvars

_tracectx: contextvars.ContextVar = contextvars.ContextVar("jitcore_trace", default=None)


def get_tracectx():
    return _tracectx.get()


@contextlib.contextmanager
def tracectx(trace):
    """Make `trace` the active trace: ops called inside record into it."""
    token = _tracectx.set(trace)
    try:
        yield trace
    finally:
        _tracectx.reset(token)


@contextlib.contextmanager
def detached():
    """No active trace inside (run symbols eagerly, e.g. to compute metadata)."""
    token = _tracectx.set(None)
    try:
        yield
    finally:
        _tracectx.reset(token)
