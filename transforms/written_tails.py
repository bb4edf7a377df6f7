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
from jitcore.ir.trace import Timer, Trace, from_trace

# lines whose order against each other is part of their meaning (random draws, effects): a tail that runs one runs
# every later one too
_ORDERED = frozenset({Tag.RANDOM, Tag.EFFECTS})


@dataclass(frozen=True)
class Tail:
    """The program the epilogue runs after writing the new values of `cuts` into the caller's tensors.

    trace: tail(*new values, *boundary values) -> the outputs at `positions`. cuts: (arg index, output position of
    its new value) per written input whose new value the tail reads (the caller's tensor is passed for it).
    positions: the flat output positions the tail computes (None in the head's output). boundary: the head's output
    positions of the tail's other arguments (appended to the head's output, after its n_outputs)."""

    trace: Trace
    cuts: tuple
    positions: tuple
    boundary: tuple
    n_outputs: int


def _ordered(bsym) -> bool:
    return bool(_ORDERED & set(bsym.sym.tags))


def split_tail(trace: Trace, writebacks, keep_positions=()) -> tuple[Trace, Tail | None]:
    """(head, tail), or (trace, None) when no line reads the new value of a written input that requires grad.

    writebacks: transforms.functionalize's. keep_positions: output positions the head computes even where they read
    a new value (views of a written input: the epilogue makes them views of the caller's tensor). A value written
    under no_grad into an input that requires grad is a new value too: the caller's tensor keeps its history, and
    where it is a view, eager regenerates that view's grad_fn after the write; either way later reads go through
    the caller's tensor as it is then."""
    outs = list(trace.output) if isinstance(trace.output, (tuple, list)) else None
    if outs is None or any(isinstance(o, (list, tuple, dict)) for o in outs):  # (the computation's are flat)
        return trace, None
    cuts = []
    detached = {b.output.name: b.args[0] for b in trace.bound_symbols if b.sym.id == "prims.stop_gradient"}
    for w in writebacks:
        v = outs[w.output_index] if w.output_index < len(outs) else None
        if isinstance(v, TensorProxy) and not w.recorded and v.name in detached:  # (written back under no_grad)
            v = detached[v.name]
        if isinstance(v, TensorProxy) and v.requires_grad:
            cuts.append((w.arg_index, w.output_index, v))
    if not cuts:
        return trace, None
    with Timer() as t:
        cut_names = {v.name for _, _, v in cuts}
        tainted, tail_lines, in_tail, ordered = set(cut_names), [], set(), False
        for i, b in enumerate(trace.bound_symbols):
            reads = {a.name for a in b.flat_proxy_args()}
            if reads & tainted or (ordered and _ordered(b)):
                demoted = [o for o in b.flat_proxy_outs() if o.name in cut_names]
                if demoted:  # a written input's new value computed from another's: written back after the tail
                    _refuse_if_read(trace, i, demoted)
                    cut_names -= {o.name for o in demoted}
                    cuts = [c for c in cuts if c[2].name in cut_names]
                tail_lines.append(b)
                in_tail.add(i)
                tainted.update(o.name for o in b.flat_proxy_outs())
                ordered = ordered or _ordered(b)
        if not tail_lines:
            return trace, None
        made_in_tail = tainted - cut_names
        # (a cut's own writeback value stays in the head: a write under no_grad writes back its detached value)
        keep_positions = {*keep_positions, *(p for _, p, _ in cuts)}
        positions = tuple(i for i, o in enumerate(outs) if isinstance(o, Proxy) and o.name in made_in_tail and
                          i not in keep_positions)
        if not positions:  # (only views of the written inputs read them: the epilogue makes those)
            return trace, None
        boundary, seen = [], set()
        for b in tail_lines:
            for a in b.flat_proxy_args():
                if a.name not in tainted and a.name not in seen:
                    seen.add(a.name)
                    boundary.append(a)
        written_args = {trace.args[w.arg_index].name for w in writebacks}
        for a in boundary:
            if a.name in written_args:
                raise UnsupportedError("in-place write", f"a program that reads the new value of an input it wrote "
                                       f"(which requires grad) and, after that, the old value of {a.name} (written "
                                       "too)", hint="clone() the input before writing into it")
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
        head.bound_symbols = [b for i, b in enumerate(trace.bound_symbols) if keep[i]]
        head.output = tuple(None if i in positions else o for i, o in enumerate(outs)) + tuple(boundary)
        tail = Trace("tail")
        tail.names, tail._counters = set(trace.names), dict(trace._counters)
        tail.run_time_sizes, tail.per_call = trace.run_time_sizes, trace.per_call
        tail.args = [v for _, _, v in cuts] + boundary
        tail.bound_symbols = tail_lines
        tail.output = tuple(outs[i] for i in positions)
    head.set_provenance("Written-input tails (the head: what does not read a written input's new value)", t.seconds)
    tail.set_provenance("Written-input tails (the tail: run on the caller's tensors after the writeback)", t.seconds)
    return head, Tail(tail, tuple((a, p) for a, p, _ in cuts), positions,
                      tuple(range(len(outs), len(outs) + len(boundary))), len(outs))


def _refuse_if_read(trace: Trace, at: int, values):
    """A new value computed from another written input's new value (`x.add_(w); y.copy_(x)`) that a later line reads:
    eager's graph would run through both callers' tensors in turn, one tail after the other, which is not built."""
    names = {v.name for v in values}
    for b in trace.bound_symbols[at + 1:]:
        if any(a.name in names for a in b.flat_proxy_args()):
            raise UnsupportedError(
                "in-place write", "an input is written in place with a value computed from another written input's "
                "new value (which requires grad), and then read: the gradient through both callers' tensors in turn "
                "is not supported", hint="return the value instead of writing it into the input, or clone() it")
