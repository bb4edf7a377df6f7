"""Interpreter stage: the context object interpret() asks at a few points.

jitcore subclasses DefaultContext to turn external tensors into proxies, to replace torch callables by ops
and to answer isinstance for proxies. Every method has a no-op default, so DefaultContext() runs a function
exactly as CPython would.
"""
from __future__ import annotations


class DefaultContext:
    """The hooks of the interpreter, with defaults that change nothing."""

    # whether interpret() may return a generator (its steps then run later, when the caller iterates it); a context
    # whose result is one traced program sets False: such an output is refused (UnsupportedError)
    returns_generators = True

    def lookaside(self, fn):
        """A replacement callable for `fn`, called natively instead of `fn` (not interpreted), or None.

        Asked first, before any other call policy, for every call the interpreted code makes.
        """
        return

    def should_inline(self, fn) -> bool:
        """Whether to interpret the Python function `fn` (True) or call it natively (False)."""
        return True

    def on_external_value(self, value, provenance):
        """Called each time a value from outside is loaded; returns the value the program should see.

        `provenance` (see provenance.py) says where it came from. The same object may be reported several
        times (each load); caching (e.g. one proxy per tensor) is the context's job.
        """
        return value

    def isinstance_hook(self, obj, cls):
        """`isinstance(obj, cls)` as the interpreted program should see it, or NotImplemented for the builtin."""
        return NotImplemented

    def issubclass_hook(self, cls, classinfo):
        """`issubclass(cls, classinfo)`, or NotImplemented for the builtin."""
        return NotImplemented

    def type_hook(self, obj):
        """`type(obj)` as the interpreted program should see it (the class eager's object has, for a stand-in the
        context made), or NotImplemented for the builtin."""
        return NotImplemented

    def on_attr_presence(self, provenance, present: bool):
        """Notification: the program depends on whether the attribute `provenance` (an Attr) of an external object
        exists (`hasattr(o, "k")`; reading it raised AttributeError), not on its value."""

    def proxy_attr(self, proxy, name):
        """`proxy.name` for an attribute the proxy does not model (a Python attribute set on the tensor it stands
        for): the value the program should see, or AttributeError."""
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")

    def on_call_native(self, fn, args, kwargs):
        """Notification: `fn(*args, **kwargs)` is about to be called natively (not interpreted)."""

    def referent(self, obj):
        """What a weak reference called inside the function hands back for `obj` (a tensor the program already reads
        as an input: that input)."""
        return obj

    def attach_runtime(self, rt):
        """Called once when an interpretation starts with its Runtime (`rt.frame` is the frame running now)."""
