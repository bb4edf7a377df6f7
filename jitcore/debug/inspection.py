"""Inspection stage: `jitcore.examine(fn, *args)` (jitcore/api.py resolves the executors) traces fn once without
running it and reports, for each op it uses, whether it is supported, which executor would run it (or that it
decomposes), and which torch calls fell back to opaque ops. And the accessors of a jitted function's last call and
cache: `last_traces`, `last_backward_traces`, `last_prologue_traces`, `last_epilogue_traces`, `last_compile_stats`,
`cache_hits`, `cache_misses`, `cache_miss_reasons`, `input_specs`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from executors.regions import COMPILE_EVENTS, COMPILE_LOG, REGION_STAGES
from jitcore.frontend.tracing import trace_function
from jitcore.guards.cache import CacheEntry
from jitcore.guards.input_storage import InputSpec
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.runtime import autograd


@dataclass
class OpReport:
    op: str
    count: int
    executor: str  # the executor that claims it, or "decomposed" when its subsymbols are claimed instead
    opaque: bool


@dataclass
class ExamineReport:
    ops: list = field(default_factory=list)
    error: str | None = None

    @property
    def opaque_ops(self) -> list[str]:
        return [r.op for r in self.ops if r.opaque]

    def by_executor(self) -> Counter:
        c: Counter = Counter()
        for r in self.ops:
            c[r.executor] += r.count
        return c

    def __str__(self) -> str:
        if self.error:
            return f"jitcore.examine: tracing failed: {self.error}"
        lines = [f"{'op':40s} {'count':>5s}  executor", "-" * 64]
        for r in self.ops:
            lines.append(f"{r.op:40s} {r.count:5d}  {r.executor}{'  (opaque torch call)' if r.opaque else ''}")
        n = sum(r.count for r in self.ops)
        n_opaque = sum(r.count for r in self.ops if r.opaque)
        lines.append(f"{len(self.ops)} distinct ops, {n} calls; {n_opaque} opaque ({self.opaque_ops or 'none'})")
        return "\n".join(lines)

    _repr_pretty_ = None

    def __repr__(self):
        return str(self)


def _claimer(bsym, executors) -> str:
    for ex in executors:
        if ex.can_execute(bsym):
            return ex.name
    return "decomposed" if bsym.subsymbols else "UNSUPPORTED"


def examine_call(fn, args: tuple, kwargs: dict, executors: tuple) -> ExamineReport:
    """Trace fn(*args, **kwargs) and report each op and which of `executors` (in priority order) would run it."""
    report = ExamineReport()
    try:
        traced = trace_function(fn, args, kwargs)
    except Exception as e:  # the report says why instead of raising
        report.error = f"{type(e).__name__}: {e}"
        return report
    counts: Counter = Counter()
    info = {}
    for bsym in traced.trace.bound_symbols:
        counts[bsym.sym.id] += 1
        info.setdefault(bsym.sym.id, (_claimer(bsym, executors), Tag.OPAQUE in bsym.sym.tags))
    report.ops = [OpReport(op, n, *info[op]) for op, n in counts.most_common()]
    return report


# -- the accessors of a jitted function's last call and cache (jitcore.last_traces, ...) ----------------------------
# Each reads what the JitFunction (or the JitModule wrapping one) keeps: `_last_entry`, `_cache`, `_events_at_call`.
# The examples assume `import torch, jitcore`; tests/test_docs.py runs them.
def _entry(jfn) -> CacheEntry:
    entry = getattr(jfn, "_last_entry", None)
    if entry is None:
        raise ValueError("this function has not been called yet (or is not a jitcore.jit function)")
    return entry


def last_traces(jfn) -> list:
    """The computation traces of the last call, one per pass, in order (the last is what ran).

    >>> jf = jitcore.jit(lambda x: x * 2)
    >>> _ = jf(torch.ones(2))
    >>> print(jitcore.last_traces(jf)[-1])
    # Constructed by Delete Last Used (free tensors after their last use) (took 0.01 ms)
    import torch
    def computation(t0):
      # t0: "cpu f32[2]"
      t1 = torch.mul(t0, 2)  # t1: "cpu f32[2]"
        # t1 = ltorch.mul(t0, 2)
        # t1 = prims.mul(t0, 2.0)
      return (t1,)
    <BLANKLINE>
    """
    return list(_entry(jfn).traces)


def last_backward_traces(jfn) -> list:
    """The backward traces of the last call's entry (empty when no input required grad); when its last backward got
    None for some outputs' gradients (outputs the loss does not reach), followed by the traces of the backward that
    ran instead.

    >>> jf = jitcore.jit(lambda x: x * 2)
    >>> jf(torch.ones(2, requires_grad=True)).sum().backward()
    >>> print(jitcore.last_backward_traces(jf)[-1])
    # Constructed by Delete Last Used (free tensors after their last use) (took 0.02 ms)
    import torch
    def backward(saved, cotangents):
      # t2: "cpu f32[2]"
      (t2,) = cotangents
      cotangents.clear()
      t3 = torch.mul(t2, 2.0)  # t3: "cpu f32[2]"
        # t3 = ltorch.mul(t2, 2.0)
        # t3 = prims.mul(t2, 2.0)
      return (t3,)
    <BLANKLINE>
    """
    entry = _entry(jfn)
    program = entry.computation
    ran = getattr(program, "last_without", None)
    return list(entry.backward_traces) + (program.without_traces(ran) if ran is not None else [])


def last_prologue_traces(jfn) -> list:
    """The guards of the last call's entry as programs: [hot, full] ([hot, module_guards, full] for a module). The
    full prologue checks everything the program assumed and returns its inputs; None is a cache miss.

    >>> jf = jitcore.jit(lambda x: x + 1)
    >>> _ = jf(torch.ones(2))
    >>> print(jitcore.last_prologue_traces(jf)[-1])
    # Constructed by Prologue construction (guards) (took 0.04 ms)
    import torch
    ...
    def prologue(fn, args, kwargs):
      if len(args) != 1 or kwargs: return None
      if _c0() is not True or _c1() is not _c2 or _c3(): return None
      try:  # a provenance chain that no longer resolves is a miss (FETCH_ERRORS), not an error
        g0 = fn.__code__
        if g0 is not _c4: return None
        t0 = args[0]
        if type(t0) is not _c5 or t0.shape != (2,) or t0.dtype is not _c2 or not t0.is_cpu or t0.requires_grad: ...
      except (AttributeError, KeyError, IndexError, TypeError, ValueError): return None
      return (t0,)
    <BLANKLINE>
    """
    return list(_entry(jfn).prologue_traces)


def last_epilogue_traces(jfn) -> list:
    """The side-effect replay of the last call's entry (empty when the function wrote nothing outside), last; before
    it, the forward and backward of each tail the epilogue runs (what reads the new value of an input written with a
    value that requires grad runs on the caller's tensor after its writeback: transforms/written_tails.py).

    >>> def inc(x):
    ...     x.add_(1)
    ...     return x * 2
    >>> jf = jitcore.jit(inc)
    >>> _ = jf(torch.ones(2))
    >>> print(jitcore.last_epilogue_traces(jf)[-1])
    # Constructed by Epilogue construction (side effects, escaping objects) (took 0.01 ms)
    import torch
    def epilogue(fn, args, kwargs, outs):
      args[0].copy_(outs[1])
      return outs
    <BLANKLINE>
    """
    return list(_entry(jfn).epilogue_traces)


def last_compile_stats(jfn) -> dict:
    """Seconds spent per stage compiling the last call's entry, in pipeline order (see `compile_entry`): interpret
    (bytecode -> computation trace), transforms (functionalize, dce, cse, autodiff), claim (executors take the ops),
    memory (buffer reuse, del-last-used), codegen (the callables that run, the autograd wrapper), guards (prologues,
    epilogue). The stage seconds are the entry's (a cache hit reports the compile that made it).

    Then two counts of the last call itself, from its start until now (read them after the backward to include
    the backward's): "region_compiles", the fusion regions (Inductor's) compiled: a region compiles lazily at its
    first run, a static region again for new input strides, a dynamic region again for a call its guards reject
    (a new size that only changes a symbol's value reuses the code: 0); and "regions_reused", the regions the
    call's compile took ready-made from the cross-function cache of compiled regions (the same region text in this
    or another function), from the cache on disk or from a loaded package; "cpp_builds", the runs of the C++
    compiler. These count process-wide: compiles of another jitted function called in between count too.

    Then where the region compiles' seconds went: "region_stages" sums them per stage over the call's compiles --
    graph (tracing the region to an aten graph), lowering and codegen (Inductor's), cpp_build (the compiler runs, a
    build in a background thread included: with builds side by side they add up to more than the time they took),
    load (loading the module, or awaiting a build left in the background) -- and "region_log" lists them per compile.

    >>> jf = jitcore.jit(lambda x: x + 1)
    >>> _ = jf(torch.ones(2))
    >>> list(jitcore.last_compile_stats(jf))  # doctest: +NORMALIZE_WHITESPACE
    ['interpret', 'transforms', 'claim', 'memory', 'codegen', 'guards', 'region_compiles', 'regions_reused',
     'cpp_builds', 'region_stages', 'region_log']
    """
    stats = dict(_entry(jfn).stats)
    start = tuple(getattr(jfn, "_jfn", jfn)._events_at_call) + (0, 0)
    stats["region_compiles"] = COMPILE_EVENTS[0] - start[0]
    stats["regions_reused"] = COMPILE_EVENTS[1] - start[1]
    stats["cpp_builds"] = COMPILE_EVENTS[2] - start[2]
    log = [dict(r) for r in COMPILE_LOG[start[3]:]]
    stats["region_stages"] = {k: sum(r[k] for r in log) for k in REGION_STAGES}
    stats["region_log"] = log
    return stats


def _cache_of(jfn):
    cache = getattr(jfn, "_cache", None)
    if cache is None:
        raise ValueError("not a jitcore.jit function")
    return cache


def cache_hits(jfn) -> int:
    """How many calls reused a compiled entry (their guards held).

    >>> jf = jitcore.jit(lambda x: x + 1)
    >>> _ = jf(torch.ones(2)), jf(torch.ones(2)), jf(torch.ones(3))
    >>> jitcore.cache_hits(jf), jitcore.cache_misses(jf)
    (1, 2)
    """
    return _cache_of(jfn).hits


def cache_misses(jfn) -> int:
    """How many calls compiled a new entry (the first call included); `cache_miss_reasons` says why each did.

    >>> jf = jitcore.jit(lambda x: x + 1, cache="symbolic values")
    >>> _ = jf(torch.ones(2)), jf(torch.ones(3)), jf(torch.ones(4))   # one program for every size
    >>> jitcore.cache_misses(jf)
    1
    """
    return _cache_of(jfn).misses


def cache_miss_reasons(jfn) -> list[str]:
    """For each miss, in order, why the call could not reuse an entry: the first guard that failed.

    >>> jf = jitcore.jit(lambda x: x + 1)
    >>> _ = jf(torch.ones(2)), jf(torch.ones(3))
    >>> for reason in jitcore.cache_miss_reasons(jf):
    ...     print(reason)
    first call: nothing cached yet
    the last entry (the call's signature differs): args[0]: expected a tensor cpu f32[2]
    """
    return list(_cache_of(jfn).miss_reasons)


def input_specs(jfn) -> list[InputSpec]:
    """One description per cache entry (in the order they were compiled) of the call it was compiled for: tensors
    as metadata and, per the jit option keep_inputs, values; other arguments as they were. `spec.materialize()`
    rebuilds (args, kwargs) to call the function with, e.g. to compile ahead of a real call:

        args, kwargs = jitcore.input_specs(jfn)[0].materialize()
        jfn(*args, **kwargs)

    Under cache="no caching" it is the last call's. See jitcore/guards/input_storage.py.

    >>> jf = jitcore.jit(lambda x, n: x * n)
    >>> _ = jf(torch.ones(2, 3), 4)
    >>> jitcore.input_specs(jf)
    [InputSpec(Tensor(shape=[2, 3], stride=[3, 1], dtype=torch.float32, device='cpu'; metadata only), 4)]
    >>> args, kwargs = jitcore.input_specs(jf)[0].materialize()
    >>> args[0].shape, args[1], kwargs
    (torch.Size([2, 3]), 4, {})
    """
    _cache_of(jfn)  # (a clear error for what is not a jitted function)
    inner = getattr(jfn, "_jfn", jfn)  # a JitModule's JitFunction
    return [e.input_spec for e in inner.entries() if e.input_spec is not None]


def saved_tensor_bytes(call) -> autograd.SavedTensors:
    """What a forward saves for backward. A jitted function or module (not called here): what the forward of its
    last call's entry plans to save (the tensors the backward program takes as saved, at the sizes the entry was
    traced with; nbytes == distinct_nbytes, since views are not told apart before they run; zeros when that call
    needed no backward). Any other callable: call() (a forward under grad mode: eager, torch.compile'd or jitted)
    runs once and what autograd saves is counted (runtime/autograd.py).

    >>> jf = jitcore.jit(lambda x: x.sin())
    >>> x = torch.ones(4, requires_grad=True)
    >>> _ = jf(x)
    >>> jitcore.saved_tensor_bytes(jf)
    SavedTensors(nbytes=16, distinct_nbytes=16, count=1)
    >>> jitcore.saved_tensor_bytes(lambda: jf(x))
    SavedTensors(nbytes=16, distinct_nbytes=16, count=1)
    """
    if hasattr(call, "_last_entry"):  # (a JitFunction, or a JitModule wrapping one)
        return planned_saved(call)
    return autograd.saved_tensor_bytes(call)


def planned_saved(jfn) -> autograd.SavedTensors:
    entry = jfn._last_entry
    if entry is None:
        raise ValueError("saved_tensor_bytes: this jitted function has not been called yet")
    if not entry.backward_traces:
        return autograd.SavedTensors(0, 0, 0)
    bw = entry.backward_traces[-1]
    saved = [p for p in bw.args[:dict(bw.arg_groups or ()).get("saved", 0)] if isinstance(p, TensorProxy)]
    total = sum(_traced_nbytes(p) for p in saved)
    return autograd.SavedTensors(total, total, len(saved))


def _traced_nbytes(p: TensorProxy) -> int:
    n = p.dtype.itemsize
    for s in p.shape:  # (a symbolic size at the value it was traced with)
        n *= s.value if isinstance(s, IntegerProxy) else int(s)
    return n
