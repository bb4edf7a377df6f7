"""Transforms: rematerialization. Takes the grad transform's Split (forward, backward, saved) and chooses what the
forward saves by cost instead of saving whatever the backward reads: a minimum cut over the forward's values (cost of
saving a value: its bytes; cost of recomputing a line in the backward: its estimated time, weighed against bytes)
picks the saved set, the one saving fewest bytes whose recomputation adds at most BUDGET of the step's estimated
time; the backward gets copies of the recomputed forward lines, each just before its first use. Returns a new
Split.

Only cheap, pure lines are recomputed (elementwise, views, dtype conversions, fills): never matmul, convolution,
reduction, random draws, opaque torch calls or lines with effects, nor lines reading values whose memory a later
line frees (jitcore.ops.sharding.SCOPED_OUTPUTS: FSDP2's unsharded parameters). Lines a user checkpointed
(torch.utils.checkpoint, marked `checkpointed`) are recomputed whatever they compute (matmuls, opaque
kernels, norms with their residuals) except random draws and effects: a draw's outputs are saved, so the recompute
sees the forward's masks, as eager's preserve_rng_state does.
"""
from __future__ import annotations

from collections import deque

from jitcore.ir.proxies import IntegerProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.registry import PRIMS
from jitcore.ops.sharding import SCOPED_OUTPUTS
from transforms.autodiff import Split, free_proxies
from transforms.dce import dce, draws_random

# prims whose lines only view, move or relabel data: recomputing them costs (almost) nothing with any executor
VIEW_PRIMS = frozenset(f"prims.{n}" for n in ("broadcast_in_dim", "reshape", "transpose", "squeeze", "slice",
                                              "stop_gradient", "shape"))
# what may be recomputed at all: elementwise prims (not device transfers), the views above, conversions and fills
RECOMPUTABLE_PRIMS = VIEW_PRIMS | frozenset(
    s.id for s in PRIMS.values() if Tag.ELEMENTWISE in s.tags and s.id != "prims.device_put") | frozenset(
    f"prims.{n}" for n in ("where", "convert_element_type", "full", "iota"))
# elementwise prims whose time is memory traffic (a fused recompute is nearly free); the others (exp, sin, tanh,
# pow, erf, ...) cost compute of their own
CHEAP_PRIMS = VIEW_PRIMS | frozenset(f"prims.{n}" for n in (
    "abs", "add", "sub", "mul", "div", "neg", "reciprocal", "maximum", "minimum", "where", "convert_element_type",
    "full", "iota", "eq", "ne", "lt", "le", "gt", "ge", "isfinite", "sign", "signbit", "copysign", "ceil", "floor",
    "round", "trunc", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
    "bitwise_right_shift"))

# A rough time model (nanoseconds on one CPU core; it only has to rank cuts and compare them with the step). On a GPU,
# fused elementwise math is bound by memory, so a fused recompute of any elementwise prim costs as a cheap one
# (_on_accelerator), which is the assumption torch.compile's partitioner makes there:
NS_CHEAP = 0.05  # per element of a cheap elementwise prim
NS_COMPUTE, NS_COMPUTE_UNFUSED = 0.9, 2.0  # per element of a compute elementwise prim: fused, or as a torch kernel
NS_FLOP = 0.012  # per matmul flop
NS_OTHER = 0.5  # per element in and out of any other op (reductions, opaque kernels): an underestimate
NS_BYTE, NS_KERNEL = 0.02, 3000.0  # unfused: memory traffic per byte (torch.mul of a 1 MiB f32 tensor on one core:
# 28 us), and a kernel call
NS_LINE = 1000.0  # what any line of the step costs beyond its work (a call, an allocation); a fused recompute adds none
BUDGET = 0.05  # recomputation may add this fraction of the estimated step time
# saving a program input costs this fraction of its bytes: the caller holds it during the call, and during the
# backward too when it is a parameter or a leaf (autograd's AccumulateGrad node holds it)
INPUT_SAVE = 0.25
LADDER = (0.0, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0)  # weights of recompute time against saved bytes, tried in order
_MATMULS = frozenset({"prims.matmul", "prims.linear"})
_NEVER = frozenset({Tag.RANDOM, Tag.INPLACE, Tag.OPAQUE, Tag.EFFECTS, Tag.DONT_DCE})  # at any depth of a line
INF = 1 << 62


def leaf_ids(bsym) -> set:
    """The op ids at the bottom of a line's decomposition (the line itself when it has none)."""
    if not bsym.subsymbols:
        return {bsym.sym.id}
    return {i for s in bsym.subsymbols for i in leaf_ids(s)}


def _pure(bsym, checkpointed: bool = False) -> bool:
    """No random draw, no write, no effect, tensors out: the line may run again. Opaque kernels and augmented
    forwards (a kernel with its residuals) only where the user checkpointed them."""
    never = _NEVER - {Tag.OPAQUE} if checkpointed else _NEVER
    if (bsym.vjp is not None and not checkpointed) or draws_random(bsym) or tags_deep(bsym) & never:
        return False
    outs = bsym.flat_proxy_outs()
    return bool(outs) and all(isinstance(o, TensorProxy) for o in outs)


def tags_deep(bsym) -> set:
    """The tags of a line and of every line of its decomposition."""
    tags = set(bsym.sym.tags)
    for s in bsym.subsymbols:
        tags |= tags_deep(s)
    return tags


def recomputable(bsym) -> bool:
    if bsym.checkpointed:
        return _pure(bsym, checkpointed=True)
    return _pure(bsym) and Tag.PYTHON not in bsym.sym.tags and leaf_ids(bsym) <= RECOMPUTABLE_PRIMS


def nbytes(p) -> int:
    if not isinstance(p, TensorProxy):
        return 0
    n = p.dtype.itemsize
    for s in p.shape:
        n *= s.value if isinstance(s, IntegerProxy) else int(s)
    return n


def reads(bsym) -> dict:
    """name -> proxy of every value a line reads, its decomposition's included (sizes a claimed decomposition
    reads), less those made inside it."""
    found, made = {}, set()

    def walk(b):
        for a in b.flat_args():
            if isinstance(a, Proxy) and a.name not in made:
                found.setdefault(a.name, a)
        for s in b.subsymbols:
            walk(s)
            made.update(o.name for o in s.flat_proxy_outs())

    walk(bsym)
    for name in made | {o.name for o in bsym.flat_proxy_outs()}:
        found.pop(name, None)
    return found


class _Flow:
    """A small max-flow (Dinic, iterative) over integer capacities; `source_side()` after `run()` is the source side
    of a minimum cut."""

    def __init__(self):
        self.adj: dict = {}
        self.to: list = []
        self.cap: list = []  # capacity left; edge i^1 is edge i's reverse

    def add(self, u, v, cap: int):
        for a, b, c in ((u, v, cap), (v, u, 0)):
            self.adj.setdefault(a, []).append(len(self.to))
            self.to.append(b)
            self.cap.append(c)

    def _levels(self, s, t) -> dict | None:
        level, queue = {s: 0}, deque([s])
        while queue:
            u = queue.popleft()
            for i in self.adj.get(u, ()):
                v = self.to[i]
                if self.cap[i] > 0 and v not in level:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if t in level else None

    def _augment(self, s, t, level: dict, it: dict) -> int:
        """One augmenting path along the levels (iterative depth-first search); 0 when none is left."""
        path, u = [], s
        while u != t:
            edges = self.adj.get(u, ())
            while it[u] < len(edges):
                i = edges[it[u]]
                if self.cap[i] > 0 and level.get(self.to[i], -1) == level[u] + 1:
                    break
                it[u] += 1
            else:  # a dead end: never enter it again in this phase, and step back
                level[u] = -1
                if not path:
                    return 0
                u = self.to[path.pop() ^ 1]
                it[u] += 1
                continue
            path.append(edges[it[u]])
            u = self.to[path[-1]]
        f = min(self.cap[i] for i in path)
        if f >= INF:
            raise AssertionError("rematerialize: no finite cut (a value the backward reads cannot be saved)")
        for i in path:
            self.cap[i] -= f
            self.cap[i ^ 1] += f
        return f

    def run(self, s, t) -> int:
        """Dinic: phases of shortest augmenting paths."""
        total = 0
        while (level := self._levels(s, t)) is not None:
            it = dict.fromkeys(self.adj, 0)
            while f := self._augment(s, t, level, it):
                total += f
        return total

    def source_side(self, s) -> set:
        seen, queue = {s}, deque([s])
        while queue:
            u = queue.popleft()
            for i in self.adj.get(u, ()):
                v = self.to[i]
                if self.cap[i] > 0 and v not in seen:
                    seen.add(v)
                    queue.append(v)
        return seen


def _leaves(bsym) -> list:
    if not bsym.subsymbols:
        return [bsym.sym.id]
    return [i for s in bsym.subsymbols for i in _leaves(s)]


def _numel(p) -> int:
    return nbytes(p) // p.dtype.itemsize if isinstance(p, TensorProxy) else 0


def _leaf_time(b, fused: bool) -> float:
    outs = sum(_numel(o) for o in b.flat_proxy_outs())
    if b.sym.id in _MATMULS:
        a = next((x for x in b.flat_proxy_args() if isinstance(x, TensorProxy)), None)
        k = a.shape[-1] if a is not None and a.shape else 1
        return 2 * NS_FLOP * outs * (k.value if isinstance(k, IntegerProxy) else int(k))
    if b.sym.id in VIEW_PRIMS or Tag.PYTHON in b.sym.tags:
        return 0.0
    if b.sym.id in CHEAP_PRIMS:
        return NS_CHEAP * outs
    if b.sym.id in RECOMPUTABLE_PRIMS:
        if fused and _on_accelerator(b):  # a GPU's fused kernel waits on memory: its math (exp, sin, ...) is free
            return NS_CHEAP * outs
        return (NS_COMPUTE if fused else NS_COMPUTE_UNFUSED) * outs
    return NS_OTHER * (outs + sum(_numel(x) for x in b.flat_proxy_args()))


def _on_accelerator(b) -> bool:
    """Whether the line computes on a GPU (or another accelerator): not on the CPU, whose cores spend real time on
    transcendental math (sin/tanh chains recomputed on CPU cost 35-77% of the step; see NS_COMPUTE)."""
    return any(isinstance(o, TensorProxy) and o.device.type not in ("cpu", "meta") for o in b.flat_proxy_outs())


def _walk_leaves(bsym):
    if not bsym.subsymbols:
        yield bsym
    for s in bsym.subsymbols:
        yield from _walk_leaves(s)


def line_time(bsym, fused: bool) -> float:
    """Estimated nanoseconds of a line; unfused, each line is a kernel call that reads and writes memory."""
    t = sum(_leaf_time(b, fused) for b in _walk_leaves(bsym))
    if not fused and not set(leaf_ids(bsym)) <= VIEW_PRIMS:
        moved = sum(nbytes(x) for x in bsym.flat_proxy_args() + bsym.flat_proxy_outs())
        t += NS_BYTE * moved + NS_KERNEL
    return t


def checkpointed(trace: Trace) -> bool:
    """Whether any line of the trace ran inside torch.utils.checkpoint."""
    return any(b.checkpointed for b in trace.bound_symbols)


class _Cut:
    """The flow network of a forward program, built once, cut for several sets of recompute costs. Nodes: a line
    that may run again (source edge: its recompute cost) and each value, split in/out by an edge of its save cost; a
    recomputed line needs its inputs in the backward; a line that is not recomputed makes its outputs available to the
    backward only by saving them; the values the backward reads go to the sink."""

    def __init__(self, forward: Trace, needed: list, candidates: set, input_save: float = INPUT_SAVE):
        self.n_lines, self.edges = len(forward.bound_symbols), []  # (u, v, capacity); None: the line's cost
        add, made = self.edges.append, set()
        for i, b in enumerate(forward.bound_symbols):
            if i in candidates:
                add(("source", ("line", i), None))
                self.edges += [(("out", name), ("line", i), INF) for name in reads(b)]
            forced = b.checkpointed and i in candidates  # checkpointed: saving its outputs is a last resort
            for o in b.flat_proxy_outs():
                if o.name not in made:
                    made.add(o.name)
                    add((("line", i) if i in candidates else "source", ("in", o.name), INF))
                    add((("in", o.name), ("out", o.name), INF // 4 if forced else nbytes(o) * 8))
        roots = [a for a in forward.args if isinstance(a, Proxy)]
        roots += [p for b in forward.bound_symbols for p in reads(b).values()]
        inference = forward.inference_inputs  # (autograd refuses to save one: `x * w.exp()` with
        for p in roots:  # inputs, and sizes the forward defines from its inputs' shapes: computed in the forward
            if p.name not in made:  # an inference w saves exp's result, as eager does, never w)
                made.add(p.name)
                add(("source", ("in", p.name), INF))
                add((("in", p.name), ("out", p.name),
                     INF // 4 if p.name in inference else int(nbytes(p) * 8 * input_save)))
        for p in needed:
            if p.name in made:  # (one made nowhere is left to the caller's check)
                add((("out", p.name), "sink", INF))

    def recomputed(self, caps: dict) -> set:
        """The lines recomputed by a minimum cut, for `caps`: line index -> recompute cost (the candidates)."""
        g = _Flow()
        for u, v, c in self.edges:
            g.add(u, v, caps[v[1]] if c is None else c)
        g.run("source", "sink")
        side = g.source_side("source")
        return {i for i in caps if ("line", i) not in side}


def plan(forward: Trace, backward: Trace, needed: list, fused: bool, budget: float | None, n_outputs: int = 0) -> set:
    """The forward lines to recompute: the cut that saves fewest bytes among those whose recomputation adds at most
    `budget` of the step's estimated time (the recompute time weighed against bytes more heavily, rung by rung of
    LADDER, until one fits, less the memory traffic a fused program no longer spends on them: `traffic_saved`);
    views and checkpointed lines are recomputed at no cost (n_outputs: how many of the forward's outputs are the
    user's). budget None: checkpointed lines only."""
    lines = forward.bound_symbols
    scoped = {o.name for b in lines if b.sym.id in SCOPED_OUTPUTS for o in b.flat_proxy_outs()}
    compared = compared_exactly(backward)
    times = {i: line_time(b, fused) for i, b in enumerate(lines)
             if recomputable(b) and not (scoped and any(a.name in scoped for a in b.flat_proxy_args()))
             and not any(o.name in compared for o in b.flat_proxy_outs())}
    free = {i for i in times if lines[i].checkpointed or leaf_ids(lines[i]) <= VIEW_PRIMS}
    if budget is None:
        free = {i for i in free if lines[i].checkpointed}
        return _Cut(forward, needed, free).recomputed(dict.fromkeys(free, 1))
    cut = _Cut(forward, needed, set(times))
    step = sum(line_time(b, fused) + NS_LINE for b in [*lines, *backward.bound_symbols])
    for weight in LADDER:
        chosen = cut.recomputed({i: 1 if i in free else int(weight * 8 * t) + 1 for i, t in times.items()})
        spent = sum(times[i] for i in chosen - free) - traffic_saved(forward, n_outputs, needed, chosen, fused)
        if spent <= budget * step:
            return chosen
    return _Cut(forward, needed, free).recomputed(dict.fromkeys(free, 1))


def compared_exactly(backward: Trace) -> set:
    """Names of the values the backward tests for equality (prims.eq/ne at any depth of a line: amax's gradient
    goes where `x == amax(x)`): they are saved as the forward computed them, never recomputed, since a recompute by
    another kernel (Inductor's exp against torch's) can differ in the last bit, and then no element of a row equals
    its saved maximum (a count of 0: a NaN gradient)."""
    names = set()
    for b in backward.bound_symbols:
        if leaf_ids(b) & _EXACT:
            names.update(reads(b))
    return names


_EXACT = frozenset({"prims.eq", "prims.ne"})


def traffic_saved(forward: Trace, n_outputs: int, needed: list, chosen: set, fused: bool) -> float:
    """Estimated nanoseconds a fused program no longer spends on the values the backward read and now recomputes:
    the forward's region need not write one out (nor allocate it) when only fused lines read it and it is no
    output, and the backward does not read it back. Unfused, each line writes its result anyway: 0."""
    if not fused:
        return 0.0
    lines = forward.bound_symbols
    made = {o.name: i for i in chosen for o in lines[i].flat_proxy_outs()}
    outputs = {p.name for p in tree_leaves(forward.output[:n_outputs]) if isinstance(p, Proxy)}
    still = set()  # what the backward reads of the forward after the cut
    for p in needed:
        if p.name not in made:
            still.add(p.name)
    for i in chosen:
        still.update(n for n in reads(lines[i]) if n not in made)
    dropped = {p.name: p for p in needed if p.name in made and p.name not in still}
    for b in lines:  # a value an unfused line reads (matmul) is written out anyway
        if not recomputable(b) or b.checkpointed:
            for n in reads(b):
                dropped.pop(n, None)
    return 2 * NS_BYTE * sum(nbytes(p) for n, p in dropped.items() if n not in outputs)


def rematerialize(split: Split, fused: bool, budget: float | None = BUDGET) -> tuple[Split, Trace, Trace]:
    """The split with the saved set chosen by cost: (new split, its forward, its backward), both traces new. fused:
    whether a fusion executor will fuse the recomputed lines into the backward's regions (see line_time); budget:
    the fraction of the step's estimated time recomputation may add (inf: fewest bytes saved; None: recompute the
    lines the user checkpointed, nothing else)."""
    with Timer() as t:
        recomputed = plan(split.forward, split.backward, split.saved, fused, budget, split.n_outputs)
        new = recompute_in_backward(split, recomputed)
    return noted(split, new, "Rematerialization", t.seconds)


def recompute_in_backward(split: Split, recomputed: set) -> Split:
    """The split whose backward recomputes the forward lines `recomputed` (indices) and whose forward saves what the
    backward then reads."""
    fw, bw = split.forward, split.backward
    n_cts = dict(bw.arg_groups)["cotangents"]
    cts = bw.args[len(bw.args) - n_cts:] if n_cts else []
    new_bw = from_trace(bw)
    new_bw.bound_symbols = before_first_use([b for i, b in enumerate(fw.bound_symbols) if i in recomputed],
                                            bw.bound_symbols)
    new_bw = dce(new_bw)
    saved = free_proxies(new_bw, {c.name for c in cts})
    new_bw.args = saved + list(cts)
    new_bw.arg_groups = [("saved", len(saved)), ("cotangents", len(cts))]
    new_fw = from_trace(fw)
    new_fw.bound_symbols = list(fw.bound_symbols)
    new_fw.output = tuple(fw.output[: split.n_outputs]) + tuple(saved)
    new_fw = dce(new_fw)
    _check_available(new_fw, saved)
    return Split(new_fw, new_bw, split.n_outputs, saved, split.output_requires_grad)


def noted(split: Split, new: Split, what: str, seconds: float) -> tuple[Split, Trace, Trace]:
    """(new, its forward, its backward), both with a header saying what the pass saved instead of split's set."""
    before, after = saved_bytes(split.saved), saved_bytes(new.saved)
    n_re = sum(1 for b in new.backward.bound_symbols if any(b is f for f in split.forward.bound_symbols))
    note = (f"{what} (saved {len(new.saved)} values, {_size(after)}, instead of {len(split.saved)}, "
            f"{_size(before)}; {n_re} forward lines recomputed in the backward)")
    new.forward.set_provenance(note, seconds)
    new.backward.set_provenance(note, seconds)
    return new, new.forward, new.backward


def before_first_use(recomputed: list, lines) -> list:
    """The backward's lines with each recomputed forward line (in the forward's order) just before the first line
    that reads its value, so that the recomputed tensor lives only from there (the ones no line reads at the end)."""
    made = {o.name: i for i, b in enumerate(recomputed) for o in b.flat_proxy_outs()}
    needs = [{made[n] for n in reads(b) if n in made} for b in recomputed]
    out, emitted = [], set()

    def emit(i):
        if i not in emitted:
            emitted.add(i)
            for j in sorted(needs[i]):
                emit(j)
            out.append(recomputed[i])

    for b in lines:
        for i in sorted({made[n] for n in reads(b) if n in made}):
            emit(i)
        out.append(b)
    for i in range(len(recomputed)):
        emit(i)
    return out


def saved_bytes(saved) -> int:
    """Bytes of the tensors a saved-for-backward list holds (number values count 0; symbolic sizes at the values
    they were traced with)."""
    return sum(nbytes(p) for p in saved)


def _size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB" if n >= 2**10 else f"{n} B"


def _check_available(forward: Trace, saved: list):
    known = {a.name for a in forward.args if isinstance(a, Proxy)}
    for b in forward.bound_symbols:
        known.update(o.name for o in b.flat_proxy_outs())
    known |= {p.name for b in forward.bound_symbols for p in reads(b).values()}  # sizes defined from shapes
    missing = [p.name for p in saved if p.name not in known and not isinstance(p, IntegerProxy)]
    if missing:
        raise AssertionError(f"rematerialize: the backward reads {missing}, which the forward does not make")
    for o in tree_leaves(forward.output):
        if isinstance(o, Proxy) and o.name not in known and not isinstance(o, IntegerProxy):
            raise AssertionError(f"rematerialize: the forward returns {o.name}, which it does not make")
