"""IR programs: a Trace is a list of BoundSymbols over proxies with a signature and a provenance header.

`str(trace)` is runnable Python (see jitcore/ir/codegen.py) and `trace.python_callable()` compiles that same text.
Traces are values: passes make new traces with `from_trace(old)` and leave the old one untouched. The active-trace
context (get_tracectx, tracectx, detached) lives in jitcore/ir/context.py and is re-exported here.
"""
from __future__ import annotations

import contextlib
import time

from jitcore.ir.codegen import compile_trace, trace_source
from jitcore.ir.context import detached, get_tracectx, services, tracectx
from jitcore.ir.ranges import RangeList

__all__ = ["EXTRA_KEYS", "Notes", "Timer", "Trace", "detached", "from_trace", "get_tracectx", "services", "snapshot",
           "source_html", "tracectx"]

# The keys `Trace.extra` may hold: notes of one stage about the trace being recorded, read by that stage only, never a
# callable (tests/test_architecture.py checks the source uses no other). Facts other stages read are Trace fields.
EXTRA_KEYS = frozenset({
    "range_lists",  # jitcore/ir/ranges.py: the RangeLists of the trace being recorded that nothing has read yet
    "nonzero_counts",  # jitcore/ops/prims_index.py: tensor name -> the run-time size of its nonzero count
    "nested_masks",  # jitcore/ops/torch_misc.py: the dense stand-ins of nested batches (TensorProxy.is_nested)
    "autocast_casts",  # jitcore/ops/autocast.py: the cast cache of the autocast region being recorded
})


class Notes(dict):
    """Trace.extra: a dict that takes only the declared EXTRA_KEYS, and no callable (services are not notes: they
    are handed down with the trace context, jitcore/ir/services.py)."""

    __slots__ = ()

    def __setitem__(self, key, value):
        _check_note(key, value)
        dict.__setitem__(self, key, value)

    def setdefault(self, key, default=None):
        if key not in self:
            _check_note(key, default)
        return dict.setdefault(self, key, default)

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v


def _check_note(key, value):
    if key not in EXTRA_KEYS:
        raise KeyError(f"Trace.extra takes only the declared notes {sorted(EXTRA_KEYS)}, not {key!r} (a fact other "
                       "stages read is a Trace field: jitcore/ir/trace.py)")
    if callable(value):
        raise TypeError(f"Trace.extra[{key!r}]: a callable is a service, handed down with the trace context "
                        "(jitcore/ir/services.py), not a note")


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
        # -- facts that outlive tracing (from_trace copies each; None/empty: not set) --------------------------------
        # run-time size name (u0, ...) -> its lower bound (jitcore/ir/proxies.py run_time_size; arith's bounds)
        self.run_time_sizes: dict | None = None
        # number proxy name -> the per-call source it comes from (`random.random()`), for refusals (jitcore/ir/arith.py)
        self.per_call: dict | None = None
        # a backward's arguments in groups, [(name, count), ...] (transforms/autodiff.py; jitcore/ir/codegen.py)
        self.arg_groups: list | None = None
        # lines printed as `# ...` comments atop the program (what runs around it: jitcore/runtime/fsdp_units.py)
        self.comments: list | tuple = ()
        # the interpreter's trace: the code objects it entered (jitcore/packages.py checks them)
        self.entered_code: list = []
        # the interpreter's trace: the layout replays it asked (jitcore/frontend/layouts.py; a package carries them)
        self.meta_results: list = []
        # the names of the program's inputs that are inference tensors (guarded): never saved for backward
        self.inference_inputs: frozenset = frozenset()
        # a backward whose None gradients were dropped: the runtime gives zeros for them (jitcore/runtime/autograd.py)
        self.zeros_from_runtime: bool = False
        # notes of one stage about this trace, only the declared EXTRA_KEYS (see Notes)
        self.extra: Notes = Notes()

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
    def record(self, bsym, outermost: bool = False):
        """Append bsym to the current scope (outermost: to the trace itself, before the op being recorded), with a
        snapshot of its arguments and outputs (see `snapshot`)."""
        bsym.args, bsym.kwargs, bsym.output = snapshot(bsym.args), _snapshot_kwargs(bsym.kwargs), snapshot(bsym.output)
        if len(self._scopes) == 1 or outermost:  # the user's frames a line comes from (the interpreter's; () for a
            stack = services().user_stack()  # pass's)
            if stack:
                bsym.user_stack = stack
        self._scopes[0 if outermost else -1].append(bsym)

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
    t.run_time_sizes, t.per_call, t.arg_groups, t.comments = (trace.run_time_sizes, trace.per_call, trace.arg_groups,
                                                              trace.comments)
    t.entered_code, t.meta_results, t.inference_inputs = trace.entered_code, trace.meta_results, trace.inference_inputs
    t.zeros_from_runtime = trace.zeros_from_runtime
    t.extra = Notes(trace.extra)
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
