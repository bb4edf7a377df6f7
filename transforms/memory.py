"""Transforms: memory. Passes over an execution trace (after claim), run in this order: `densify_broadcast_inputs`,
`reuse_buffers`, `write_into_inputs` (the forward of a program that writes into its inputs), `del_last_used`. Which
lines write into a buffer, make fresh memory, read densely or only view is the executors' business: each pass asks
the executor that claimed the line (`MemoryAnswers`); it imports none.
"""
from __future__ import annotations

from collections import Counter
from typing import Protocol

from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten
from jitcore.ir.symbol import BoundSymbol
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.python_del import python_del
from transforms.cse import rename_args


class MemoryAnswers(Protocol):
    """What the memory passes ask the executor that claimed a line (see executors/base.py's Executor).

    The claim pass records that executor in the line's `extra["claimed_by"]`; executors/base.py's Executor gives
    always-safe defaults (the pass leaves the line alone) and the torch executor answers for its lines. A line no
    executor claimed (one a pass added) gets the same safe answers (`_Unclaimed`).
    """

    def out_form(self, bsym: BoundSymbol): ...  # None, or `buffer -> bsym computing into buffer`

    def makes_fresh(self, bsym: BoundSymbol) -> bool: ...  # results are new memory aliasing no input

    def reads_dense(self, bsym: BoundSymbol) -> bool: ...  # its kernel copies a broadcast input densely first

    def is_view_line(self, bsym: BoundSymbol) -> bool: ...  # only makes a view of its one tensor input

    def densify_line(self, a: TensorProxy, output: TensorProxy) -> BoundSymbol | None: ...  # output = dense a

    def boxed_form(self, bsym: BoundSymbol, dead: list) -> BoundSymbol | None: ...  # args in a list, dead deleted

    def write_form(self, bsym: BoundSymbol, targets: dict) -> BoundSymbol | None: ...  # results into given inputs


class _Unclaimed:
    """The answers for a line no executor claimed: the safe ones (the passes leave it alone)."""

    def out_form(self, bsym):
        return None

    def makes_fresh(self, bsym):
        return False

    def reads_dense(self, bsym):
        return False

    def is_view_line(self, bsym):
        return False

    def densify_line(self, a, output):
        return None

    def boxed_form(self, bsym, dead):
        return None

    def write_form(self, bsym, targets):
        return None


_UNCLAIMED = _Unclaimed()


def claimed_by(bsym: BoundSymbol) -> MemoryAnswers:
    """The executor that claimed the line (the claim pass records it), or the safe answers when none did."""
    return bsym.extra.get("claimed_by") or _UNCLAIMED


def del_last_used(trace: Trace) -> Trace:
    """A new trace with a `del` line after the last use of each tensor, so the generated program holds no tensor
    longer than needed (the inputs' references are dropped too). A line whose executor has a boxed form for it
    (`boxed_form`: a compiled fusion region) gets its arguments in a list it empties, the tensors it uses last
    deleted before the call, so the region frees each one after its last use inside it (even on the last line)."""
    with Timer() as t:
        keep = {p.name for p in tree_leaves(trace.output) if isinstance(p, Proxy)}
        seen = set(keep)
        out = []
        for i, bsym in enumerate(reversed(trace.bound_symbols)):
            dead = []
            for a in bsym.flat_proxy_args():
                if a.name not in seen:
                    seen.add(a.name)
                    dead.append(a)
            boxed = None
            if any(isinstance(a, TensorProxy) for a in dead):
                boxed = claimed_by(bsym).boxed_form(bsym, dead)
            if boxed is not None:
                bsym = boxed
            elif dead and i > 0:  # after the last line the function returns: its locals go anyway
                out.append(BoundSymbol(python_del, tuple(dead), {}, None))
            for o in bsym.flat_proxy_outs():
                seen.add(o.name)
            out.append(bsym)
        new = from_trace(trace)
        new.bound_symbols = out[::-1]
    return new.set_provenance("Delete Last Used (free tensors after their last use)", t.seconds)


def _same_layout_type(a: TensorProxy, o: TensorProxy) -> bool:
    """Same dtype, device and shape, compared without recording anything (sizes may be number proxies)."""
    if a.dtype != o.dtype or a.device != o.device or len(a._shape) != len(o._shape):
        return False
    return all(x is y or (type(x) is int and type(y) is int and x == y) for x, y in zip(a._shape, o._shape))


def reuse_buffers(trace: Trace) -> Trace:
    """A new trace where elementwise lines write into the memory of an input that dies there and was made by such
    a line (`t14 = torch.div(t13, 3.0, out=t13)`) instead of allocating. On CPU a fresh large tensor costs page
    faults; a backward chain of elementwise ops then runs in the memory of a few buffers.

    Asked of the executor that claimed each line: `out_form(bsym)`: None, or `buffer -> bsym computing into
    buffer` (an elementwise line that can); `makes_fresh(bsym)`: whether bsym's tensor results are new memory that
    aliases none of its inputs (matmul, an aten kernel whose schema returns no alias). A tensor's memory is reused
    only when nothing else can see it: it was made by such a line of this program, no line that reads it can have
    made a view of it, the reading line is its last use, it is neither an input nor an output of the program, and
    it has the result's dtype, device and shape.
    """
    with Timer() as t:
        bsyms = trace.bound_symbols
        protected = {p.name for p in tree_leaves((trace.args, trace.output)) if isinstance(p, Proxy)}
        forms = [claimed_by(b).out_form(b) for b in bsyms]
        fresh_lines = [f is not None or claimed_by(b).makes_fresh(b) for f, b in zip(forms, bsyms)]
        last_use: dict[str, int] = {}
        no_alias_readers: dict[str, bool] = {}
        for i, b in enumerate(bsyms):
            for a in b.flat_proxy_args():
                last_use[a.name] = i
                no_alias_readers[a.name] = no_alias_readers.get(a.name, True) and fresh_lines[i]
        fresh: set[str] = set()
        out, reused = [], 0
        for i, b in enumerate(bsyms):
            if forms[i] is not None:
                o = b.output
                for a in b.flat_proxy_args():
                    if (isinstance(a, TensorProxy) and a.name in fresh and a.name not in protected
                            and last_use[a.name] == i and no_alias_readers[a.name] and _same_layout_type(a, o)):
                        b = forms[i](a)
                        reused += 1
                        break
            if fresh_lines[i]:
                fresh.update(o.name for o in b.flat_proxy_outs())
            out.append(b)
        if not reused:
            return trace
        new = from_trace(trace)
        new.bound_symbols = out
    return new.set_provenance(f"Reuse buffers ({reused} results written into dead inputs)", t.seconds)


def densify_broadcast_inputs(trace: Trace) -> Trace:
    """A new trace where each tensor input that two or more lines read densely (their executor's `reads_dense`;
    directly or through lines its `is_view_line`) is first made dense by the line the first such reader's executor
    gives (`densify_line`: `t9 = torchex.densify(t4)`, a copy only when some stride is 0), and later lines read
    the dense tensor; the trace itself when no input qualifies. Matmul's BLAS call needs unit strides and copies a
    broadcast input each time: the cotangent of `loss.sum().backward()` is such an expanded tensor, which eager
    copies once per matmul."""
    with Timer() as t:
        root = {a.name: a.name for a in trace.args if isinstance(a, TensorProxy)}
        readers: Counter = Counter()
        densifier: dict[str, MemoryAnswers] = {}  # input name -> the executor of its first dense reader
        for b in trace.bound_symbols:
            sources = {root[p.name] for p in b.flat_proxy_args() if p.name in root}
            if not sources:
                continue
            ex = claimed_by(b)
            if ex.is_view_line(b) and len(sources) == 1:
                root.update((o.name, next(iter(sources))) for o in b.flat_proxy_outs())
            elif ex.reads_dense(b):
                readers.update(sources)
                for name in sources:
                    densifier.setdefault(name, ex)
        targets = [a for a in trace.args if isinstance(a, TensorProxy) and readers[a.name] >= 2]
        if not targets:
            return trace
        new = from_trace(trace)
        names, lines = {}, []
        for a in targets:
            dense = a.like(name=new.make_name("t"))
            line = densifier[a.name].densify_line(a, dense)
            if line is not None:
                names[a.name] = dense
                lines.append(line)
        if not lines:
            return trace
        new.bound_symbols += lines
        new.bound_symbols += [rename_args(b, names) for b in trace.bound_symbols]
        new.output = tree_map(lambda x: names.get(x.name, x) if isinstance(x, Proxy) else x, trace.output)
    return new.set_provenance(f"Densify broadcast inputs ({len(lines)} read by several matmuls)", t.seconds)


def write_into_inputs(trace: Trace, targets: list) -> tuple[Trace, frozenset]:
    """(a new trace whose lines compute the values written back into inputs in those inputs' own memory, the output
    positions so handled); (the trace itself, empty) when none qualifies.

    targets: (input proxy, flat output position) for each input the program writes into; the epilogue copies
    `outs[position]` into the caller's tensor. Where the line computing that value can write it into the input
    itself (its executor's `write_form(bsym, {k: input})`, k indexing the line's `flat_proxy_outs()`: aten's
    training batch norm updating the running stats it is given, `torch.add(t3, 1, out=t3)` for a counter), the
    line does so, as eager's kernel does, the position's output becomes None and the epilogue's copy is dropped.
    An input qualifies only when nothing else can tell: neither it nor the value written requires grad (the epilogue's
    copy is what gives the caller's tensor the value's history), the program does not return or
    save it (nor the value written, other than at its position), no line reads the value written (it has the input's
    strides then, which a view of it may not accept), every line that reads the input comes at or before the writing
    line, and every earlier reader makes fresh memory or no tensor (no view of it outlives the write).
    """
    with Timer() as t:
        bsyms = trace.bound_symbols
        out_leaves = tree_leaves(trace.output)
        out_count = Counter(p.name for p in out_leaves if isinstance(p, Proxy))
        producer = {o.name: i for i, b in enumerate(bsyms) for o in b.flat_proxy_outs()}
        readers: dict[str, list] = {}
        for i, b in enumerate(bsyms):
            for a in b.flat_proxy_args():
                readers.setdefault(a.name, []).append(i)
        plans: dict[int, dict] = {}  # line index -> {output index in flat_proxy_outs: input}
        positions: dict[int, list] = {}
        for a, position in targets:
            v = out_leaves[position] if position < len(out_leaves) else None
            if (not isinstance(a, TensorProxy) or a.requires_grad or out_count[a.name] or
                    not isinstance(v, TensorProxy) or v.requires_grad or out_count[v.name] != 1 or
                    v.name not in producer or v.name in readers or not _same_layout_type(a, v)):
                continue
            i = producer[v.name]
            if not all(j == i or (j < i and _no_alias_result(bsyms[j])) for j in readers.get(a.name, ())):
                continue
            k = [o.name for o in bsyms[i].flat_proxy_outs()].index(v.name)
            plans.setdefault(i, {})[k] = a
            positions.setdefault(i, []).append(position)
        out, done = list(bsyms), set()
        for i, plan in plans.items():
            line = claimed_by(bsyms[i]).write_form(bsyms[i], plan)
            if line is not None:
                out[i] = line
                done.update(positions[i])
        if not done:
            return trace, frozenset()
        new = from_trace(trace)
        new.bound_symbols = out
        flat, spec = tree_flatten(trace.output)
        new.output = tree_unflatten(spec, [None if n in done else x for n, x in enumerate(flat)])
    return (new.set_provenance(f"Write into inputs ({len(done)} written back by the lines computing them)",
                               t.seconds), frozenset(done))


def _no_alias_result(bsym: BoundSymbol) -> bool:
    """Whether no tensor result of the line can be a view of its inputs."""
    ex = claimed_by(bsym)
    return (not any(isinstance(o, TensorProxy) for o in bsym.flat_proxy_outs()) or ex.makes_fresh(bsym)
            or ex.out_form(bsym) is not None)
