"""Caching: CacheEntry (prologue, computation, backward, epilogue and their traces) and the per-function cache
with hit/miss counters and readable miss reasons. A lookup runs each candidate's prologue: a miss is a None,
never an exception reaching the user.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

CACHE_MODES = ("constant values", "symbolic values", "no caching")
ENTRY_WARN_LIMIT = 16


@dataclass
class CacheEntry:
    prologue: Callable  # (fn, args, kwargs) -> tuple of inputs | None
    computation: Callable  # (*inputs) -> flat outputs
    output_spec: Any
    n_outputs: int  # the user's flat outputs come first; values stored by side effects follow
    traces: list  # computation traces, in the order the passes made them
    prologue_traces: list
    explain: Callable  # (fn, args, kwargs) -> None or the text of the first failed check
    backward_traces: list = field(default_factory=list)
    epilogue: Callable | None = None
    epilogue_traces: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # compile-time breakdown per stage, in seconds


class Cache:
    def __init__(self, mode: str):
        if mode not in CACHE_MODES:
            raise ValueError(f"unknown cache option {mode!r}; valid options are {', '.join(map(repr, CACHE_MODES))}")
        self.mode = mode
        self.entries: list[CacheEntry] = []
        self.hits = 0
        self.misses = 0
        self.miss_reasons: list[str] = []
        self._warned = False

    def lookup(self, fn, args, kwargs):
        """(entry, inputs) for the first entry whose prologue accepts this call, else None."""
        if self.mode == "no caching":
            return None
        for entry in self.entries:
            try:
                inputs = entry.prologue(fn, args, kwargs)
            except Exception:  # a provenance chain that no longer resolves is a miss
                inputs = None
            if inputs is not None:
                self.hits += 1
                return entry, inputs
        return None

    def record_miss(self, fn, args, kwargs):
        self.misses += 1
        if not self.entries:
            self.miss_reasons.append("first call: nothing cached yet")
            return
        reasons = []
        for i, entry in enumerate(self.entries):
            try:
                why = entry.explain(fn, args, kwargs)
            except Exception as e:
                why = f"the inputs could not be fetched ({type(e).__name__}: {e})"
            reasons.append(f"entry {i}: {why}")
        self.miss_reasons.append("; ".join(reasons))

    def add(self, entry: CacheEntry):
        if self.mode == "no caching":
            return
        self.entries.insert(0, entry)
        if len(self.entries) > ENTRY_WARN_LIMIT and not self._warned:
            self._warned = True
            warnings.warn(
                f"jitcore: this function has been compiled {len(self.entries)} times; the last miss: "
                f"{self.miss_reasons[-1]}. If a size changes on every call, use cache='symbolic values'.",
                stacklevel=3,
            )
