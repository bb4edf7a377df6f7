"""Transforms stage, before autodiff: the tail of a program that reads the new value of an input it wrote in place,
where that value requires grad (`x[-1] = x[-1] + w.mean(); return (x * 2).sum()`), split off into a program of its
own. In eager the write rebases the caller's x (its grad_fn the write's), and what is computed from x afterwards is
computed from that tensor: `autograd.grad(out, x)` reaches it. So the head program computes everything that does not
read the new value; the epilogue writes the new value into the caller's tensor, then runs the tail on that tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Timer, Trace, from_trace, tracectx
from jitcore.ops import ltorch
from transforms.cse import rename_args

# lines whose order against each other is part of their meaning (random draws, effects): a tail that runs one runs
# every later one too
_ORDERED = frozenset({Tag.RANDOM, Tag.EFFECTS})


@dataclass(frozen=True)
class Tail:
    """The program the epilogue runs after writing the new values of `cuts` into the caller's tensors.

    trace: tail(*new values, *boundary values) -> the outputs at `positions`. cuts: (arg index, output position of
    its new value) per written input whose new value the tail reads (the caller's tensor is passed for it).
    positions: the flat output positions the tail computes (None in the head's output; past the head's outputs: the
    arguments of a later tail). boundary: the output positions of the tail's other arguments (appended to the head's
    outputs, or a former tail's). n_outputs: the head's outputs before those, kept by the last tail (None: a tail
    that another follows). standins: the cuts (indices into `cuts`) whose caller's tensor the tail also reads as
    eager's regenerated views do (_with_standins): passed again after the cuts, remade from its base."""

    trace: Trace
    cuts: tuple
    positions: tuple
    boundary: tuple
    n_outputs: int | None
    standins: tuple = ()


def _ordered(bsym) -> bool:
    return bool(_ORDERED & set(bsym.sym.tags))


def split_tail(trace: Trace, writebacks, views=None) -> tuple[Trace, tuple]:
    """(head, tails): tails in the order they run, () (and the trace itself) when no line reads the new value of a
    written input that requires grad.

    writebacks: transforms.functionalize's. views: {output position: the output position of the new value it is a
    view of}: the program that computes that value computes the view too (the epilogue makes it the same view of
    the caller's tensor, which must share the value's memory). A value written
    under no_grad into an input that requires grad is a new value too: the caller's tensor keeps its history, and
    where it is a view, eager regenerates that view's grad_fn after the write; either way later reads go through
    the caller's tensor as it is then. A new value computed in a tail from another's (`x.add_(w); y.copy_(x * 2);
    return y.sum()`) is written back after that tail, and what reads it runs in a tail of its own after that."""
    outs = list(trace.output) if isinstance(trace.output, (tuple, list)) else None
    if outs is None or any(isinstance(o, (list, tuple, dict)) for o in outs):  # (the computation's are flat)
        return trace, ()
    cuts = []
    detached = {b.output.name: b.args[0] for b in trace.bound_symbols if b.sym.id == "prims.stop_gradient"}
    for w in writebacks:
        v = outs[w.output_index] if w.output_index < len(outs) else None
        if isinstance(v, TensorProxy) and not w.recorded and v.name in detached and \
                trace.args[w.arg_index].requires_grad:  # (written back under no_grad: it keeps its own history)
            v = detached[v.name]
        if w.copy_of is not None:  # (the value written back is a dense copy of the new value the program reads)
            v = w.copy_of
        if isinstance(v, TensorProxy) and v.requires_grad:
            cuts.append((w.arg_index, w.output_index, v))
    with Timer() as t:
        split = _split(trace, outs, cuts, dict(views or {}))
        if split is None:
            return trace, ()
        head, tail, positions, boundary, demoted = split
        written_args = {trace.args[w.arg_index].name for w in writebacks}
        boundary = _copies_of_written(head, tail, boundary, written_args, len(outs))
        n = len(outs)
        tails = _chain(tail, [(a, p) for a, p, v in cuts if v.name not in {d[2].name for d in demoted}], positions,
                       tuple(range(n, n + len(boundary))), n + len(boundary), demoted, n, dict(views or {}))
        regenerated = frozenset().union(*(w.regenerated for w in writebacks))
        tails = [_with_standins(tl, regenerated) for tl in tails]
    head.set_provenance("Written-input tails (the head: what does not read a written input's new value)", t.seconds)
    for k, tl in enumerate(tails):
        tl.trace.set_provenance(f"Written-input tails (tail {k}: run on the callers' tensors after their writeback)",
                                t.seconds)
    return head, tuple(tails)


def _with_standins(tail: Tail, regenerated: frozenset) -> Tail:
    """tail, its lines that remake a view of a written input from the input's new value (`regenerated`: the view was
    made before the write, or written through) reading a stand-in for the caller's tensor instead. Eager regenerates
    such a view's grad_fn from the base of the caller's tensor (AsStridedBackward0 of the base), so when that tensor
    is itself a view (x = b[:, 1:]) its uses reach b without passing through x: `autograd.grad(loss, x)` does not
    count them. The epilogue passes x remade from its base for the stand-in (x itself when it is no view)."""
    values = tail.trace.args[:len(tail.cuts)]
    renames, standins = {}, []
    for k, v in enumerate(values):
        if any(o.name in regenerated for b in tail.trace.bound_symbols if v.name in {a.name for a in
                                                                                      b.flat_proxy_args()}
               for o in b.flat_proxy_outs()):
            with tracectx(tail.trace):
                renames[v.name] = TensorProxy(v._shape, v.dtype, v.device, v.requires_grad)
            standins.append(k)
    if not standins:
        return tail
    t = tail.trace
    t.bound_symbols = [rename_args(b, renames) if any(o.name in regenerated for o in b.flat_proxy_outs()) else b
                       for b in t.bound_symbols]
    t.args = [*values, *renames.values(), *t.args[len(values):]]
    t.names |= {p.name for p in renames.values()}
    return Tail(t, tail.cuts, tail.positions, tail.boundary, tail.n_outputs, tuple(standins))


def _copies_of_written(head: Trace, tail: Trace, boundary: list, written: set, n: int) -> list:
    """The tail reads an input's value from before the call that the program writes (`z[1:] = y[1:] * w`, whose new
    value comes from a new value: `where(mask, z, ...)` in the tail): a copy the head makes, since the caller's
    tensor may be written before the tail runs (and is, before its backward)."""
    old = [a for a in boundary if a.name in written]
    if not old:
        return boundary
    with tracectx(head):
        copies = {a.name: ltorch.clone(a) for a in old}
    tail.names |= {c.name for c in copies.values()}
    tail.bound_symbols = [rename_args(b, copies) for b in tail.bound_symbols]
    tail.args = [copies.get(a.name, a) for a in tail.args]
    boundary = [copies.get(a.name, a) for a in boundary]
    head.output = tuple(head.output[:n]) + tuple(boundary)
    return boundary


def _chain(tail: Trace, cuts, positions, boundary, free: int, demoted, n: int, views: dict) -> list:
    """The tails, in the order they run, from a tail (its cuts, output positions and boundary positions in the
    head's numbering) whose lines compute other written inputs' new values (demoted: (arg index, output position,
    proxy)): split again at those, its own tail's values taking positions from `free` on. n: the head's outputs
    before any boundary value (the last tail drops the rest)."""
    outs = list(tail.output)
    local = [(a, positions.index(p), v) for a, p, v in demoted]
    inside = {positions.index(v): positions.index(r) for v, r in views.items() if v in positions and r in positions}
    split = _split(tail, outs, local, inside) if local else None
    if split is None:
        return [Tail(tail, tuple(cuts), tuple(positions), tuple(boundary), n)]
    first, rest, sub_positions, sub_boundary, sub_demoted = split
    extra = tuple(range(free, free + len(sub_boundary)))
    head = Tail(first, tuple(cuts), tuple(positions) + extra, tuple(boundary), None)
    rest_cuts = [(a, positions[i]) for a, i, v in local if v.name not in {d[2].name for d in sub_demoted}]
    later = [(a, positions[i], v) for a, i, v in sub_demoted]
    return [head, *_chain(rest, rest_cuts, [positions[i] for i in sub_positions], extra, free + len(sub_boundary),
                          later, n, views)]


def _split(trace: Trace, outs: list, cuts: list, views: dict):
    """(head, tail, the output positions the tail computes, the tail's other arguments (the head outputs them after
    `outs`), the cuts demoted: computed by the tail), or None when no output reads a cut. cuts: (key, output
    position of its writeback value, the new value's proxy); views: as split_tail's."""
    if not cuts:
        return None
    cut_names = {v.name for _, _, v in cuts}
    tainted, tail_lines, in_tail, ordered, demoted = set(cut_names), [], set(), False, []
    for i, b in enumerate(trace.bound_symbols):
        reads = {a.name for a in b.flat_proxy_args()}
        if reads & tainted or (ordered and _ordered(b)):
            made = {o.name for o in b.flat_proxy_outs()}
            if made & cut_names:  # a written input's new value computed from another's: written back after the tail
                demoted += [c for c in cuts if c[2].name in made]
                cut_names -= made
                cuts = [c for c in cuts if c[2].name in cut_names]
            tail_lines.append(b)
            in_tail.add(i)
            tainted |= made
            ordered = ordered or _ordered(b)
    made_in_tail = tainted - cut_names
    # a cut's own writeback value stays in the head (a write under no_grad writes back its detached value), and so
    # do the views of a new value the head computes
    keep_positions = {p for _, p, _ in cuts}
    keep_positions |= {v for v, r in views.items()
                       if r in keep_positions or not isinstance(outs[r], Proxy) or outs[r].name not in made_in_tail}
    positions = tuple(i for i, o in enumerate(outs) if isinstance(o, Proxy) and o.name in made_in_tail and
                      i not in keep_positions)
    if not positions:  # (only views of the written inputs read them: the epilogue makes those)
        return None
    boundary, seen = [], set()
    for b in tail_lines:
        for a in b.flat_proxy_args():
            if a.name not in tainted and a.name not in seen:
                seen.add(a.name)
                boundary.append(a)
    # the head: every line not in the tail, and the tail's lines the head's outputs need (views of written inputs)
    needed = {o.name for i, o in enumerate(outs) if isinstance(o, Proxy) and i not in positions}
    keep = [False] * len(trace.bound_symbols)
    for i in range(len(trace.bound_symbols) - 1, -1, -1):
        b = trace.bound_symbols[i]
        if i not in in_tail or any(o.name in needed for o in b.flat_proxy_outs()):
            keep[i] = True
            needed.update(a.name for a in b.flat_proxy_args())
    twice = [b for i, b in enumerate(trace.bound_symbols) if keep[i] and i in in_tail and _ordered(b)]
    if twice:
        raise UnsupportedError("in-place write", f"{twice[0].sym.id} draws random numbers (or has effects) on the "
                               "new value of a written input that requires grad, and a view of that input is "
                               "returned", hint="clone() the input before writing into it")
    head = from_trace(trace)
    head.bound_symbols.extend(b for i, b in enumerate(trace.bound_symbols) if keep[i])  # (the list it records into)
    head.output = tuple(None if i in positions else o for i, o in enumerate(outs)) + tuple(boundary)
    tail = Trace("tail")
    tail.names, tail._counters = set(trace.names), dict(trace._counters)
    tail.run_time_sizes, tail.per_call = trace.run_time_sizes, trace.per_call
    tail.args = [v for _, _, v in cuts] + boundary
    tail.bound_symbols = tail_lines
    tail.output = tuple(outs[i] for i in positions)
    return head, tail, positions, boundary, demoted
