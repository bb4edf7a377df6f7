"""Interpreter stage: the hooks interpret() asks of its context, declared in one place (InterpreterHooks).

Each hook has its one default here, which changes nothing: DefaultContext() runs a function exactly as CPython
would. jitcore's context (jitcore/frontend/tracing.py, JitContext) overrides them to turn external tensors into
proxies, replace torch callables by ops, answer isinstance for proxies and record what the guards check.
"""
from __future__ import annotations


class InterpreterHooks:
    """The protocol between the interpreter and its context: every hook interpret() calls, with its default.

    A context is an instance of a subclass (interpret() refuses anything else) that overrides the hooks it needs;
    the Runtime binds them once, without fallbacks. The notifications `on_is` and `on_call_native` are called only
    when a context overrides them (`listens`): the interpreter then skips preparing a call that would do nothing.
    """

    # whether interpret() may return a generator (its steps then run later, when the caller iterates it); a context
    # whose result is one traced program sets False: such an output is refused (UnsupportedError)
    returns_generators = True

    def attach_runtime(self, rt):
        """Called once when an interpretation starts with its Runtime (`rt.frame` is the frame running now)."""

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

    def on_is(self, a, b):
        """Notification: `a is b` was False (IS_OP) for two objects of the program; the answer depends on them."""

    def on_call_native(self, fn, args, kwargs):
        """Notification: `fn(*args, **kwargs)` is about to be called natively (not interpreted); fn None: native
        code is about to read the objects `args` whole (`shape == [1, 2]`)."""

    def referent(self, obj):
        """What a weak reference called inside the function hands back for `obj` (a tensor the program already reads
        as an input: that input)."""
        return obj


HOOKS = tuple(name for name, value in vars(InterpreterHooks).items() if callable(value) and not name.startswith("_"))


def listens(ctx: InterpreterHooks, hook: str) -> bool:
    """Whether the context's class overrides the notification `hook` (its default does nothing)."""
    return getattr(type(ctx), hook) is not getattr(InterpreterHooks, hook)


class DefaultContext(InterpreterHooks):
    """The context that changes nothing: every hook's default."""
