"""Errors a user can hit, across every stage.

Each error says what went wrong, where (the user's source line when the interpreter knows it) and what to do.
"""
from __future__ import annotations

from typing import ClassVar


class JitError(Exception):
    """Base of every jitcore error: catch it to catch them all. The interpreter adds the user's source line (the
    message's `at file:line: source` line) with `with_where`.

    >>> issubclass(jitcore.UnsupportedError, jitcore.JitError), issubclass(jitcore.VerificationError, jitcore.JitError)
    (True, True)
    """

    where: str | None = None

    def with_where(self, where: str) -> JitError:
        """The same error annotated with the user's source location (the innermost frame's wins)."""
        if self.where is None:
            self.where = where
            first = self.args[0] if self.args else ""
            self.args = (f"{first}\n  at {where}", *self.args[1:])
        return self


class UnsupportedError(JitError):
    """Something jitcore cannot handle: an opcode, a callable, a construct, an op on an executor list. Raised while
    tracing, at the user's line; nothing has run. The message is `kind: detail`, then `at where`, then `hint:`.

    kind: a short category ("opcode", "callable", "data-dependent control flow", "op", ...)
    detail: what exactly; hint: what the user can do; where: "file:line" plus the source line, when known.

    >>> try:
    ...     jitcore.jit(lambda x: x.untyped_storage())(torch.ones(1))
    ... except jitcore.UnsupportedError as e:
    ...     print(e.kind, "|", e.hint)
    tensor memory | read storages (and their data_ptr) outside the jitted function
    """

    def __init__(self, kind: str, detail: str, hint: str | None = None, where: str | None = None):
        self.kind, self.detail, self.hint, self.where = kind, detail, hint, where
        super().__init__(self._message())

    def _message(self) -> str:
        msg = f"{self.kind}: {self.detail}"
        if self.where:
            msg += f"\n  at {self.where}"
        if self.hint:
            msg += f"\n  hint: {self.hint}"
        return msg

    def with_where(self, where: str) -> UnsupportedError:
        """Return the same error annotated with the user's source location (innermost wins)."""
        if self.where is None:
            self.where = where
            self.args = (self._message(),)
        return self


class DataDependentError(UnsupportedError):
    """An UnsupportedError: Python needed a tensor's data that the traced program cannot give it (formatting a
    tensor's value, `tensor.numpy()`, `one_hot` without `num_classes`). Branches on tensor values (`if x.sum() > 0:`)
    are not refused: the prologue checks them on every call (data guards).

    >>> try:
    ...     jitcore.jit(lambda x: f"{x.sum()}")(torch.ones(2))
    ... except jitcore.DataDependentError as e:
    ...     print(e.detail)
    formatting a tensor's value (f-string or format) needs its data
    """

    def __init__(self, detail: str, where: str | None = None):
        super().__init__(
            "data-dependent control flow",
            detail,
            hint="the value of a tensor is not known while tracing; express the choice with tensor ops "
            "(e.g. torch.where(cond, a, b)) or move the decision out of the jitted function",
            where=where,
        )


class RunTimeCheckFailed(JitError):
    """A check the compiled program runs failed: what Python assumed about a size known only at run time (`u0 > 3`,
    from a count of random draws) does not hold for this call. The jitted function catches it and runs the entry
    for this call's answer (compiling it if there is none): users see it only where no retry can run (a backward)."""


class MetaError(JitError):
    """An op was called with inputs it cannot take (shape mismatch, bad dtype); raised while tracing.

    The interpreter turns it into `MetaError.like(T)`, an instance of eager's exception type T too (RuntimeError,
    IndexError, TypeError, ValueError: what torch raises for the same call), so the user's `except` clauses see what
    they see in eager. `op_call`: (symbol, args, kwargs) of the outermost op call it left, when known.

    >>> try:
    ...     jitcore.jit(lambda x: x.view(3))(torch.ones(2))
    ... except RuntimeError as e:                     # eager's type: an `except RuntimeError` still catches it
    ...     print(isinstance(e, jitcore.MetaError), str(e).splitlines()[0])
    True shape '[3]' is invalid for input of size 2
    """

    op_call = None
    _kinds: ClassVar[dict] = {}

    @classmethod
    def like(cls, eager_type: type) -> type:
        """The MetaError class that is also an `eager_type` (a builtin exception class)."""
        kind = cls._kinds.get(eager_type)
        if kind is None:
            kind = cls._kinds[eager_type] = type(f"Meta{eager_type.__name__}", (MetaError, eager_type),
                                                 {"__module__": __name__, "eager_type": eager_type})
        return kind


class GuardFailure(JitError):
    """A prologue check failed where a miss cannot fall back to retracing."""


class VerificationError(JitError):
    """A jitted call whose results differ from eager's, found by jit(fn, verify=True) (jitcore/debug/verify.py). Its
    message names what differs (an output, a gradient, an argument after the call), the first program line whose
    value differs from torch's with the user's source line, and a repro folder (`python .../repro.py`).

    >>> from executors import OperatorExecutor
    >>> from jitcore.ops import ltorch
    >>> wrong = OperatorExecutor("wrong")
    >>> _ = wrong.register_implementation(ltorch.sin, torch.cos)
    >>> try:
    ...     jitcore.jit(torch.sin, executors=[wrong], verify=True)(torch.ones(3))
    ... except jitcore.VerificationError as e:
    ...     print(str(e).splitlines()[0])
    the jitted call differs from eager:
    """

