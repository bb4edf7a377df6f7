"""Guards stage: the cache. CacheEntry (prologue, computation, backward, epilogue and their traces) and the
per-function Cache, which owns the one lookup of a call (`Cache.lookup`), its hit/miss counters and readable miss
reasons. A miss logs its reason and the user's call site (topic "recompiles" of jitcore/logs.py).
"""
from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from jitcore import logs
from jitcore.ir.pytree import tree_unflatten

CACHE_MODES = ("constant values", "symbolic values", "no caching")
ENTRY_WARN_LIMIT = 16


@dataclass(frozen=True)
class Compiled:
    """What runs a call once its prologue fetched the inputs: the computation, the epilogue, the output structure."""

    computation: Callable  # (*inputs) -> flat outputs
    epilogue: Callable | None  # (fn, args, kwargs, flat) -> flat, replaying the side effects; None when there are none
    output_spec: Any
    n_outputs: int  # the user's flat outputs come first; values stored by side effects follow
    mutated_inputs: tuple = ()  # positions of the inputs the program writes into (aliasing is checked per call)


@dataclass
class EntryRecord:
    """What an entry keeps for reading (inspection, explain, packages, verify); nothing per call reads it."""

    traces: list  # computation traces, in the order the passes made them
    backward_traces: list = field(default_factory=list)
    epilogue_traces: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # compile-time breakdown per stage, in seconds
    value_dependent: str = ""  # why the program depends on tensor values ("" if it does not; guards/input_storage.py)
    input_spec: Any = None  # input_storage.InputSpec of the call it was compiled for
    external_effect: str = ""  # (verify) why an eager re-run would write outside the arguments and module, if it would


class CacheEntry:
    """One compiled call, from three groups: `guards` (guards/prologue.py's Prologues: the checks a call passes to
    reuse it), `compiled` (what runs the call) and `record` (the printable programs and the bookkeeping). What a call
    reads is copied flat onto the entry, so the hot path (Cache.lookup, JitFunction.__call__) pays one attribute
    lookup each: prologue, check, module_state, mutated_inputs, key, computation, epilogue, unflatten. The other
    names (traces, stats, explain, ...) read the groups."""

    def __init__(self, guards, compiled: Compiled, record: EntryRecord):
        self.guards, self.compiled, self.record = guards, compiled, record
        self.prologue: Callable = guards.hot  # (fn, args, kwargs) -> tuple of inputs | None, after the key matched
        self.check: Callable = guards.full  # every check: tried first for the most recently used entry
        self.module_state = guards.state  # module_state.ModuleGuardState: when the module-rooted guards last passed
        self.mutated_inputs = compiled.mutated_inputs
        self.key = None  # the signature key of the call it was compiled for (set by Cache.add)
        self.computation, self.epilogue = compiled.computation, compiled.epilogue
        spec, n = compiled.output_spec, compiled.n_outputs  # flat outputs -> the user's output structure
        if spec is not None and spec.num_leaves == 1 and spec.num_nodes == 1 and n == 1:
            self.unflatten = _first
        else:
            self.unflatten = lambda flat: tree_unflatten(spec, list(flat[:n]))

    traces = property(lambda self: self.record.traces, doc="computation traces, in the order the passes made them")
    backward_traces = property(lambda self: self.record.backward_traces)
    prologue_traces = property(lambda self: self.guards.traces, doc="[hot, full] or [hot, module-rooted part, full]")
    epilogue_traces = property(lambda self: self.record.epilogue_traces)
    explain = property(lambda self: self.guards.explain, doc="(fn, args, kwargs) -> None or the first failed check")
    stats = property(lambda self: self.record.stats)
    value_dependent = property(lambda self: self.record.value_dependent)
    external_effect = property(lambda self: self.record.external_effect)
    output_spec = property(lambda self: self.compiled.output_spec)
    n_outputs = property(lambda self: self.compiled.n_outputs)

    @property
    def input_spec(self):
        return self.record.input_spec

    @input_spec.setter
    def input_spec(self, spec):
        self.record.input_spec = spec


def _first(flat):
    return flat[0]


def storage_address(t: torch.Tensor) -> int | None:
    """The address of a tensor's storage (None when it has no elements): what two aliasing inputs share."""
    if t.numel() == 0:
        return None
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensors with no storage (meta, subclasses)
        return id(t)


def inputs_overlap(inputs, mutated) -> bool:
    """Whether a written input shares storage with another input of this call (the program assumed not)."""
    addresses = [storage_address(t) if isinstance(t, torch.Tensor) else None for t in inputs]
    written = {addresses[i] for i in mutated} - {None}
    if not written:
        return False
    counts = Counter(a for a in addresses if a in written)  # (linear: a model writes hundreds of buffers)
    return any(counts[addresses[i]] > 1 for i in mutated if addresses[i] is not None)


# -- the signature key -------------------------------------------------------------------------------------------
_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
KEY_VALUE_TYPES = frozenset({int, float, bool, str, complex, type(None), torch.dtype, torch.device})
SYMBOLIC_VALUE_TYPES = KEY_VALUE_TYPES - {int, float}
_KW = object()


def key_constant(args, kwargs):
    """Per argument: (type, sizes, dtype, device, requires_grad) for tensors, (type, value) for scalars, else type.
    (A float zero or NaN by its bits: -0.0 is keyed apart from 0.0, and each call's new float('nan') finds the
    entry traced for a NaN.)"""
    k = tuple([(t, a.shape, a.dtype, a.device, a.requires_grad) if (t := type(a)) in _TENSORS
               else (t, a if t is not float or (a == a and a) else a.hex()) if t in KEY_VALUE_TYPES else t
               for a in args])
    if kwargs:
        k += (_KW, *[(name, key_constant((v,), None)) for name, v in kwargs.items()])
    return k


def key_symbolic(args, kwargs):
    """Like key_constant with the rank instead of the sizes, and the type only of ints and floats."""
    k = tuple([(t, a.dim(), a.dtype, a.device, a.requires_grad) if (t := type(a)) in _TENSORS
               else (t, a) if t in SYMBOLIC_VALUE_TYPES else t for a in args])
    if kwargs:
        k += (_KW, *[(name, key_symbolic((v,), None)) for name, v in kwargs.items()])
    return k


class Cache:
    """The compiled entries of one jitted function (one per compile options: the JitFunction owns it).

    A lookup first runs the full prologue of the most recently used entry (straight-line checks of everything:
    the common steady state costs one generated function call); otherwise it computes a cheap signature key from
    the call's arguments (per top-level argument: its type; for tensors dtype, device, requires_grad and sizes,
    or only the rank under "symbolic values"; the value of a scalar), which picks the candidate entries from a
    dict; each candidate's hot prologue (straight-line generated code that leaves out what the key checked)
    returns the inputs or None. An entry that writes into an input is used only when that input shares no
    storage with another input of the call. A miss is a None (the generated prologues return None for a value
    they can no longer fetch), never an exception.
    """

    def __init__(self, mode: str):
        if mode not in CACHE_MODES:
            raise ValueError(f"unknown cache option {mode!r}; valid options are {', '.join(map(repr, CACHE_MODES))}")
        self.mode = mode
        self.key = key_symbolic if mode == "symbolic values" else key_constant
        self.entries: list[CacheEntry] = []  # newest first
        self.by_key: dict = {}  # signature key -> entries compiled for it, newest first
        self.mru: CacheEntry | None = None  # the entry the last hit used
        self.hits = 0
        self.misses = 0
        self.miss_reasons: list[str] = []
        self._warned = False

    def module_guard_runs(self) -> int:
        """How many times the entries' module-rooted guards ran (jitted modules; a hit that skipped them because
        no module state changed does not count): the fast path's hits are hits minus these."""
        return sum(e.module_state.runs for e in self.entries if e.module_state is not None)

    def lookup(self, fn, args, kwargs):
        """The one lookup of a call: (entry, inputs) for the most recently used entry if its full prologue accepts
        this call, else for the first entry under this call's signature key whose hot prologue does; else None (a
        miss: the caller compiles, after record_miss). Counts the hit."""
        entry = self.mru
        if entry is not None:
            inputs = entry.check(fn, args, kwargs)
            if inputs is not None and not (entry.mutated_inputs and inputs_overlap(inputs, entry.mutated_inputs)):
                self.hits += 1
                return entry, inputs
        for entry in self.by_key.get(self.key(args, kwargs), ()):
            if entry is self.mru:  # its full prologue just said no
                continue
            inputs = entry.prologue(fn, args, kwargs)
            if inputs is not None and not (entry.mutated_inputs and inputs_overlap(inputs, entry.mutated_inputs)):
                self.hits += 1
                self.mru = entry
                return entry, inputs
        return None

    def lookup_other(self, fn, args, kwargs, failed: list):
        """After a check the program runs failed (jitcore/ops/size_checks.py): (entry, inputs) for another entry under
        this call's signature key whose full prologue accepts the call, none of `failed`; else None. Counts the
        hit."""
        for entry in self.by_key.get(self.key(args, kwargs), ()):
            if any(entry is f for f in failed):
                continue
            inputs = entry.check(fn, args, kwargs)
            if inputs is not None and not (entry.mutated_inputs and inputs_overlap(inputs, entry.mutated_inputs)):
                self.hits += 1
                self.mru = entry
                return entry, inputs
        return None

    def record_miss(self, fn, args, kwargs, reason: str | None = None):
        """Count a miss (lookup returned None) and say why: the first failed check of the entry it came closest
        to (or `reason`)."""
        self.misses += 1
        if reason is not None:
            pass
        elif self.mode == "no caching":
            reason = "cache='no caching': every call is traced"
        elif not self.entries:
            reason = "first call: nothing cached yet"
        else:
            same = self.by_key.get(self.key(args, kwargs))
            entry = same[0] if same else self.entries[0]
            label = "the entry for this signature" if same else "the last entry (the call's signature differs)"
            reason = f"{label}: {self._explain(entry, fn, args, kwargs)}"
        self.miss_reasons.append(reason)
        if logs.enabled("recompiles"):
            name = getattr(fn, "__qualname__", type(fn).__name__)
            verb = "compiling" if self.misses == 1 else f"recompiling (miss {self.misses})"
            logs.log("recompiles", "%s %s at %s: %s", verb, name, logs.call_site(), reason)

    @staticmethod
    def _explain(entry, fn, args, kwargs) -> str:
        why = entry.explain(fn, args, kwargs)  # (a value it can no longer fetch is a reason too, not an exception)
        if why is None and entry.mutated_inputs:
            inputs = entry.check(fn, args, kwargs)
            if inputs is not None and inputs_overlap(inputs, entry.mutated_inputs):
                return "a written input shares storage with another input"
        return why or "no check failed (the signature key differs)"

    def add(self, entry: CacheEntry, args, kwargs):
        if self.mode == "no caching":
            return
        key = entry.key = self.key(args, kwargs)
        self.mru = entry
        self.entries.insert(0, entry)
        self.by_key.setdefault(key, []).insert(0, entry)
        if len(self.entries) > ENTRY_WARN_LIMIT and not self._warned:
            self._warned = True
            advice = (" If sizes or numbers change from call to call, use jitcore.jit(fn, cache='symbolic values')."
                      if self.mode == "constant values" else "")
            site, level = logs.user_frame()
            where = f" at {site.f_code.co_filename}:{site.f_lineno}" if site is not None else ""
            warnings.warn(
                f"jitcore: this function has been compiled {len(self.entries)} times (cache={self.mode!r}), called"
                f"{where}; the last miss: {self.miss_reasons[-1]}.{advice}",
                stacklevel=level,  # the user's call of the jitted function
            )
