"""Guards stage (symbolic values): the predicates recorded while compiling one cache entry. The IR's number
proxies add the comparisons Python needed (jitcore/ir/arith.py) to the active sink; the prologue checks them all.
"""
from __future__ import annotations

import contextlib

from jitcore.ir import arith, bounds


class Predicates:
    """The predicates recorded while compiling one entry, in order, without duplicates; `facts`: what the prologue
    checks of the size symbols (jitcore/ir/bounds.py Facts: lower bounds from jitcore/ir/arith.py declare_lower,
    and the values, bounds and equalities recorded predicates state), so comparisons they decide (`i0 * i1 >= 0`,
    `i0 != i0 * i1`, `i1 + 1 == 10` after `i1 == 9`) need no predicate."""

    def __init__(self):
        self.items: list[str] = []
        self._seen: set[str] = set()
        self.facts = bounds.Facts()
        self.run_time: dict = {}  # expression over run-time sizes -> its value (guarded by a data guard)

    @property
    def lower(self) -> dict:
        """symbol name -> the lower bound the prologue checks (facts.lower)."""
        return self.facts.lower

    @property
    def same(self) -> dict:
        """symbol name -> the symbol or int a guarded equality says it equals (facts.same)."""
        return self.facts.same

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
