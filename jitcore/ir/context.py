"""IR: the active trace. Ops called while a trace is active record into it (`tracectx(trace)`); with none active
they run eagerly. The lowest IR module: proxies, symbols and number arithmetic ask it for the trace they record
into, and for the services the frontend hands down with that trace (`services()`: jitcore/ir/services.py).
jitcore/ir/trace.py re-exports it (`from jitcore.ir.trace import get_tracectx` keeps working).
"""
from __future__ import annotations

import contextlib
import contextvars

from jitcore.ir.services import NO_SERVICES, TracingServices

_tracectx: contextvars.ContextVar = contextvars.ContextVar("jitcore_trace", default=None)
# (trace, services): the services handed down with `trace` by the tracectx that made it active with them
_services: contextvars.ContextVar = contextvars.ContextVar("jitcore_services", default=(None, NO_SERVICES))


def get_tracectx():
    return _tracectx.get()


def services() -> TracingServices:
    """The services of the trace being recorded: those handed down with it (`tracectx(trace, services)`, also in
    a nested `tracectx(trace)` of the same trace), else NO_SERVICES (no trace active, or another trace: a pass's)."""
    trace, found = _services.get()
    return found if trace is not None and trace is _tracectx.get() else NO_SERVICES


@contextlib.contextmanager
def tracectx(trace, services: TracingServices | None = None):
    """Make `trace` the active trace: ops called inside record into it. services: what the recording asks the
    frontend (jitcore/ir/services.py), for the block; without it, `trace` keeps the services it was given by an
    enclosing tracectx, if any."""
    token = _tracectx.set(trace)
    bound = None if services is None else _services.set((trace, services))
    try:
        yield trace
    finally:
        if bound is not None:
            _services.reset(bound)
        _tracectx.reset(token)


@contextlib.contextmanager
def detached():
    """No active trace inside (run symbols eagerly, e.g. to compute metadata)."""
    token = _tracectx.set(None)
    try:
        yield
    finally:
        _tracectx.reset(token)
