"""Guards stage (symbolic values): the predicates recorded while compiling one cache entry. The IR's number
proxies add the comparisons Python needed (jitcore/ir/arith.py) to the active sink; the prologue checks them all.
"""
from __future__ import annotations

import contextlib

from jitcore.ir import arith


class Predicates:
    """The predicates recorded while compiling one entry, in order, without duplicates; `lower`: symbol name ->
    the lower bound the prologue checks (jitcore/ir/arith.py declare_lower), so comparisons those bounds decide
    (`i0 * i1 >= 0`, `i0 != i0 * i1`) need no predicate."""

    def __init__(self):
        self.items: list[str] = []
        self._seen: set[str] = set()
        self.lower: dict[str, int] = {}
        self.run_time: dict = {}  # expression over run-time sizes -> its value (guarded by a data guard)
        self.same: dict[str, str] = {}  # run-time size -> the one a guarded equality says it equals

    def add(self, text: str):
        if text not in self._seen:
            self._seen.add(text)
            self.items.append(text)


@contextlib.contextmanager
def recording(preds: Predicates):
    token = arith.SINK.set(preds)
    try:
        yield preds
    finally:
        arith.SINK.reset(token)
