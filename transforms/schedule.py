"""Transforms: memory-aware scheduling. Takes an execution trace (after claim, before buffer reuse and del-last-used)
and returns one with the same lines in an order that frees memory sooner and allocates it later: among the lines
whose inputs are ready, first those that free more bytes than they allocate (a weight gradient that reads a saved
activation for the last time), then those that allocate nothing (views, number arithmetic), then the others in
their original order.

Only pure lines move, and none crosses a line that writes, draws random numbers or has effects (a barrier keeps its
place and the order on each side of it). The bytes are estimated from the proxies (a view shares its base's bytes).
"""
from __future__ import annotations

import heapq

from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Timer, Trace, from_trace
from transforms.dce import draws_random
from transforms.memory import claimed_by
from transforms.rematerialize import nbytes, reads, tags_deep

_FIXED = frozenset({Tag.RANDOM, Tag.INPLACE, Tag.EFFECTS, Tag.DONT_DCE})


def _barrier(bsym) -> bool:
    """A line that keeps its place: it writes, draws random numbers, has effects, or gives no value."""
    return bool(tags_deep(bsym) & _FIXED) or draws_random(bsym) or not bsym.flat_proxy_outs()


class _Memory:
    """Bytes per buffer (a view's outputs share their input's buffer) and the lines yet to run that read each one."""

    def __init__(self, trace: Trace, args: list):
        self.root, self.size, self.readers = {}, {}, {}
        for a in trace.args:
            if isinstance(a, TensorProxy):
                self.root[a.name], self.size[a.name] = a.name, nbytes(a)
        self.alloc = []
        for i, b in enumerate(trace.bound_symbols):
            view = claimed_by(b).is_view_line(b)
            base = next((self.root.get(n) for n in args[i] if n in self.root), None) if view else None
            made = 0
            for o in b.flat_proxy_outs():
                if not isinstance(o, TensorProxy):
                    continue
                if base is not None:
                    self.root[o.name] = base
                else:
                    self.root[o.name], self.size[o.name] = o.name, nbytes(o)
                    made += nbytes(o)
            self.alloc.append(made)
            for n in args[i]:
                if n in self.root:
                    self.readers.setdefault(self.root[n], set()).add(i)
        self.pinned = {self.root[p.name] for p in tree_leaves(trace.output)
                       if isinstance(p, Proxy) and p.name in self.root}

    def frees(self, i: int, roots: set) -> int:
        return sum(self.size[r] for r in roots if r not in self.pinned and self.readers[r] == {i})


def schedule(trace: Trace) -> Trace:
    """The trace with its lines reordered to lower peak memory (see the module's docstring); the trace itself when
    the order does not change."""
    with Timer() as t:
        lines = trace.bound_symbols
        args = [list(reads(b)) for b in lines]
        mem = _Memory(trace, args)
        roots = [{mem.root[n] for n in a if n in mem.root} for a in args]
        order, start = [], 0
        for end in [i for i, b in enumerate(lines) if _barrier(b)] + [len(lines)]:
            order += _segment(lines, args, mem, roots, start, end)
            if end < len(lines):
                order.append(end)
                _ran(end, roots, mem)
            start = end + 1
        if order == list(range(len(lines))):
            return trace
        new = from_trace(trace)
        new.bound_symbols = [lines[i] for i in order]
    return new.set_provenance("Schedule for memory (free early, allocate late)", t.seconds)


def _ran(i: int, roots: list, mem: _Memory) -> list:
    """Marks line i as run; the buffers it was the last but one reader of."""
    last = []
    for r in roots[i]:
        mem.readers[r].discard(i)
        if len(mem.readers[r]) == 1:
            last.append(r)
    return last


def _segment(lines, args, mem: _Memory, roots: list, start: int, end: int) -> list:
    """The order of lines start..end-1 (no barrier among them): a list schedule, the ready line first that frees more
    than it allocates, then one that allocates nothing, then the others (each kind in the original order)."""
    producer, readers = {}, {}  # name -> the line that last gave it, and the lines that read it since
    waits, users = {}, {i: [] for i in range(start, end)}
    for i in range(start, end):
        preds = {producer[n] for n in args[i] if n in producer}
        for o in lines[i].flat_proxy_outs():  # a name given again (sizes unpacked twice): after its readers so far
            preds.update(readers.get(o.name, ()))
            if o.name in producer:
                preds.add(producer[o.name])
        preds.discard(i)
        for n in args[i]:
            readers.setdefault(n, []).append(i)
        for o in lines[i].flat_proxy_outs():
            producer[o.name], readers[o.name] = i, []
        waits[i] = len(preds)
        for p in preds:
            users[p].append(i)

    def key(i):
        if mem.alloc[i] == 0:
            return (1, i)
        return (0 if mem.frees(i, roots[i]) > mem.alloc[i] else 2, i)

    heap = [key(i) for i in range(start, end) if waits[i] == 0]
    heapq.heapify(heap)
    done, order = set(), []
    while heap:
        k = heapq.heappop(heap)
        i = k[1]
        if i in done:
            continue
        now = key(i)
        if now != k:  # (it frees more now than when it was queued)
            heapq.heappush(heap, now)
            continue
        done.add(i)
        order.append(i)
        for r in _ran(i, roots, mem):
            (j,) = mem.readers[r]
            if start <= j < end and j not in done and waits[j] == 0:
                heapq.heappush(heap, key(j))
        for u in users[i]:
            waits[u] -= 1
            if waits[u] == 0:
                heapq.heappush(heap, key(u))
    if len(order) != end - start:
        raise AssertionError("schedule: the lines' dependencies have a cycle")
    return order
