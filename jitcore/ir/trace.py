"""IR programs: a Trace is a list of BoundSymbols over proxies with a signature and a provenance header.

`str(trace)` is runnable Python (see jitcore/ir/codegen.py) and `trace.python_callable()` compiles that same text.
Traces are values: passes make new traces with `from_trace(old)` and leave the old one untouched. The active-trace
context (get_tracectx, tracectx, detached) lives in jitcore/ir/context.py and is re-exported here.
"""
from __future__ import annotations

import contextlib
import time

from jitcore.ir.codegen import compile_trace, trace_source
from jitcore.ir.context import detached, get_tracectx, tracectx
from jitcore.ir.ranges import RangeList

__all__ = ["Timer", "Trace", "detached", "from_trace", "get_tracectx", "snapshot", "source_html", "tracectx"]


class Trace:
    """A program: `fn_name(*args) -> output` made of `bound_symbols`.

    args: the input proxies, in signature order; output: a pytree of proxies and constants.
    provenance: the pass that built it and how long it took, printed as the header.
    """

    def __init__(self, fn_name: str = "computation"):
        self.fn_name = fn_name
        self.args: list = []
        self.kwargs_names: list = []
        self.bound_symbols: list = []
        self.output = None
        self.provenance: str = ""
        self.names: set[str] = set()
        self._counters: dict[str, int] = {}
        self._scopes: list[list] = [self.bound_symbols]
        self._callable = None
        self.extra: dict = {}

    # -- names ----------------------------------------------------------------------------------------------
    def make_name(self, prefix: str) -> str:
        n = self._counters.get(prefix, 0)
        while f"{prefix}{n}" in self.names:
            n += 1
        name = f"{prefix}{n}"
        self._counters[prefix] = n + 1
        self.names.add(name)
        return name

    def add_name(self, name: str):
        if name in self.names:
            raise ValueError(f"the name {name!r} is already used in this trace")
        self.names.add(name)

    # -- recording --------------------------------------------------------------------------------------------
    def record(self, bsym):
        """Append bsym to the current scope, with a snapshot of its arguments and outputs (see `snapshot`)."""
        bsym.args, bsym.kwargs, bsym.output = snapshot(bsym.args), _snapshot_kwargs(bsym.kwargs), snapshot(bsym.output)
        stack = self.extra.get("user_stack")
        if stack is not None and len(self._scopes) == 1:  # the user's frames a line comes from (the interpreter's)
            bsym.extra[USER_STACK] = stack()
        self._scopes[-1].append(bsym)

    def at_top_level(self) -> bool:
        """Whether a line recorded now is a line of the trace itself, not a subsymbol of one."""
        return len(self._scopes) == 1

    @contextlib.contextmanager
    def subsymbol_scope(self):
        scope: list = []
        self._scopes.append(scope)
        try:
            yield scope
        finally:
            self._scopes.pop()

    # -- passes ----------------------------------------------------------------------------------------------
    def set_provenance(self, pass_name: str, seconds: float | None = None):
        took = "" if seconds is None else f" (took {seconds * 1000:.2f} ms)"
        self.provenance = f"Constructed by {pass_name}{took}"
        return self

    def __str__(self) -> str:
        return trace_source(self)

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}\n```"

    def _repr_html_(self) -> str:
        """Syntax-highlighted Python in Jupyter (pygments when installed, else a plain <pre>)."""
        return source_html(str(self))

    def python_callable(self):
        """The program as a Python function, compiled from exactly the text str(self) shows."""
        if self._callable is None:
            self._callable = compile_trace(self)
        return self._callable

    def __call__(self, *args):
        return self.python_callable()(*args)


USER_STACK = "user_stack"  # BoundSymbol.extra key: ((code, instruction), ...) of the user's frames, outermost first


def source_html(text: str) -> str:
    """Python source as HTML: highlighted by pygments (inline styles, no stylesheet needed) or escaped in <pre>."""
    try:  # optional dependency
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        import html

        return f'<pre style="line-height:125%">{html.escape(text)}</pre>'
    return highlight(text, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))


def from_trace(trace: Trace, fn_name: str | None = None) -> Trace:
    """A new empty trace with `trace`'s signature and names (a pass fills its bound_symbols)."""
    t = Trace(fn_name or trace.fn_name)
    t.args = list(trace.args)
    t.kwargs_names = list(trace.kwargs_names)
    t.output = trace.output
    t.names = set(trace.names)
    t._counters = dict(trace._counters)
    t.extra = dict(trace.extra)
    return t


class Timer:
    """`with Timer() as t: ...; t.seconds`."""

    def __enter__(self):
        self.start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        self.seconds = (time.perf_counter_ns() - self.start) / 1e9


def snapshot(value):
    """`value` with every list and dict in it (at any depth, through tuples) copied, so the line an op records
    keeps the arguments it was called with when the caller later changes its containers (`feats.append(z)` after
    `torch.cat(feats)`). Lists stay lists and dicts stay dicts (the line prints the same); a tuple with no list or
    dict inside is returned as it is."""
    t = type(value)
    if t is tuple:
        return tuple([snapshot(v) for v in value]) if _holds_mutable(value) else value
    if t is list or t is RangeList:  # (a RangeList an op reads is pinned already: a plain list of its values)
        return [snapshot(v) for v in value]
    if t is dict:
        return {k: snapshot(v) for k, v in value.items()}
    return value


def _holds_mutable(items) -> bool:
    for v in items:
        t = type(v)
        if t is list or t is dict or t is RangeList or (t is tuple and _holds_mutable(v)):
            return True
    return False


def _snapshot_kwargs(kwargs: dict) -> dict:
    """A BoundSymbol's kwargs dict is its own copy already: only the values need a snapshot."""
    return {k: snapshot(v) for k, v in kwargs.items()} if _holds_mutable(kwargs.values()) else kwargs
