"""Transforms: the memory budget, `jit(fn, memory_budget=b)` (torch.compile's activation_memory_budget for jitcore).
Takes the grad transform's Split and chooses what the forward saves between two plans: the default one
(transforms/rematerialize.py, the fastest: b=1) and the minimal one (b=0: the fewest bytes, with every pure line
recomputable, matmuls, reductions and norms included); for 0 < b < 1 the plan of least estimated recompute time whose
saved bytes fit `minimal + b * (default - minimal)`. Returns a new Split whose programs list the saved set.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from jitcore import compat
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Timer, Trace
from jitcore.ops.opaque import is_pure_wrapper
from jitcore.ops.sharding import SCOPED_OUTPUTS
from transforms.autodiff import Split
from transforms.dce import draws_random
from transforms.rematerialize import (
    _NEVER,
    VIEW_PRIMS,
    _Cut,
    _pure,
    _size,
    compared_exactly,
    leaf_ids,
    line_time,
    nbytes,
    noted,
    plan,
    reads,
    recompute_in_backward,
    tags_deep,
)

# the weight of recompute time against saved bytes (bytes per ns) whose minimum cut is the fastest plan, and how many
# cuts the search of the trade curve's corners may make (each a max-flow over the forward: most of the compile time)
HEAVY, MAX_CUTS = 2.0 ** 20, 24
MAX_PLANS = 400  # plans evaluated between corners (greedy, by time per byte); a bound on the compile time it adds


def check_memory_budget(value) -> float | None:
    """jit()'s memory_budget option: None (the default plan) or a number 0 <= b <= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"jit(memory_budget=...): expected None or a number from 0 to 1 (1: the default, fastest "
                         f"plan; 0: recompute everything that can be recomputed), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Plan:
    lines: frozenset  # the forward lines the backward recomputes (those still read)
    nbytes: int  # of the tensors the forward saves
    ns: float  # estimated time of the recomputation


def budget_recomputable(bsym) -> bool:
    """What the minimal plan may recompute: any line that may run again with the same result (no random draw, write
    or effect; tensors out), matmuls, reductions and kernels with residuals (layer_norm, sdpa) included; an opaque
    torch call only where it is known pure and bitwise deterministic (`_pure_opaque`); checkpointed lines as
    rematerialization recomputes them."""
    if bsym.checkpointed:
        return _pure(bsym, checkpointed=True)
    if draws_random(bsym) or tags_deep(bsym) & (_NEVER - {Tag.OPAQUE}) or not _pure_opaque(bsym):
        return False
    outs = bsym.flat_proxy_outs()
    return bool(outs) and all(isinstance(o, TensorProxy) for o in outs)


def _pure_opaque(bsym) -> bool:
    """Whether every opaque call in the line (at any depth) runs a function known to write nothing, draw nothing and
    give the same bits each run: jitcore's registered pure wrappers (the CPU flash attention's), or an aten overload
    whose schema mutates nothing and whose tags say neither nondeterministic_seeded nor nondeterministic_bitwise."""
    if Tag.OPAQUE in bsym.sym.tags:
        fn = getattr(bsym.sym, "torch_fn", None)
        if not is_pure_wrapper(fn) and not (isinstance(fn, compat.OpOverload) and not fn._schema.is_mutable
                                            and not set(fn.tags) & _NONDETERMINISTIC):
            return False
    return all(_pure_opaque(s) for s in bsym.subsymbols)


_NONDETERMINISTIC = {torch.Tag.nondeterministic_seeded, torch.Tag.nondeterministic_bitwise}


class _Plans:
    """Evaluates sets of recomputed lines (which the backward still reads, what the forward then saves, the bytes
    and the estimated time) without building the programs."""

    def __init__(self, split: Split, times: dict):
        lines = split.forward.bound_symbols
        self.times, self.reads = times, [reads(b) for b in lines]
        self.outs = [[o.name for o in b.flat_proxy_outs()] for b in lines]
        self.needed = {p.name: p for p in split.saved}
        self.unsavable = set(split.forward.inference_inputs)  # autograd refuses to save those
        self.seen: dict = {}

    def __call__(self, chosen) -> Plan | None:
        made = {n: i for i in chosen for n in self.outs[i]}
        alive, stack = set(), [made[n] for n in self.needed if n in made]
        while stack:
            i = stack.pop()
            if i not in alive:
                alive.add(i)
                stack += [made[n] for n in self.reads[i] if n in made]
        alive = frozenset(alive)
        if alive in self.seen:
            return self.seen[alive]
        saved = {n: p for n, p in self.needed.items() if n not in made}
        for i in alive:
            saved.update((n, p) for n, p in self.reads[i].items() if n not in made)
        ok = not (self.unsavable & saved.keys())
        p = Plan(alive, sum(nbytes(x) for x in saved.values()), sum(self.times[i] for i in alive)) if ok else None
        self.seen[alive] = p
        return p


def trade_curve(split: Split, fused: bool, default: set) -> tuple[Plan, list[Plan]]:
    """(the default plan, the plans to choose from): a minimum cut per weight of WEIGHTS (the corners of the curve
    of saved bytes against recompute time), and between each two neighbouring corners the plans on the way from the
    slower to the faster one, taking back one recomputed line at a time, the most time per byte first."""
    fw = split.forward
    lines = fw.bound_symbols
    scoped = {o.name for b in lines if b.sym.id in SCOPED_OUTPUTS for o in b.flat_proxy_outs()}
    compared = compared_exactly(split.backward)
    times = {i: line_time(b, fused) for i, b in enumerate(lines)
             if (i in default or budget_recomputable(b))
             and not (scoped and any(a.name in scoped for a in b.flat_proxy_args()))
             and not any(o.name in compared for o in b.flat_proxy_outs())}
    free = {i for i in times if lines[i].checkpointed or leaf_ids(lines[i]) <= VIEW_PRIMS}
    evaluate = _Plans(split, times)
    base = evaluate(default) or Plan(frozenset(default), 1 << 62, 0.0)
    cut = _Cut(fw, split.saved, set(times), input_save=1.0)  # (bytes as saved_tensor_bytes counts them)

    def at(weight: float) -> Plan | None:
        return evaluate(cut.recomputed({i: 1 if i in free else int(weight * 8 * t) + 1 for i, t in times.items()}))

    corners = {base} | corners_between(at)
    front = _front(corners)
    plans, budget = set(corners), MAX_PLANS
    for fast, slow in itertools.pairwise(front):
        extra = sorted(slow.lines - fast.lines, key=lambda i: -times[i] / max(1, _out_bytes(lines[i])))
        chosen = set(slow.lines)
        for i in extra[:budget]:
            chosen.discard(i)
            p = evaluate(chosen)
            if p is not None:
                plans.add(p)
        budget -= len(extra)
    return base, sorted(plans, key=lambda p: (p.ns, p.nbytes, sorted(p.lines)))


def corners_between(at) -> set:
    """The corners of the lower convex hull of (recompute time, saved bytes) over all plans, as minimum cuts find them
    (`at(weight)`: the plan minimizing bytes + weight * ns): from the fewest bytes (weight 0) and the fastest plan
    (HEAVY), each two neighbours' tie weight finds the corner between them, if any (at most MAX_CUTS cuts)."""
    slowest, fastest = at(0.0), at(HEAVY)
    found = {p for p in (slowest, fastest) if p is not None}
    todo, cuts = ([(fastest, slowest)] if slowest is not None and fastest is not None else []), 2
    while todo and cuts < MAX_CUTS:
        fast, slow = todo.pop()
        if slow.ns <= fast.ns or slow.nbytes >= fast.nbytes:
            continue
        mid = at((fast.nbytes - slow.nbytes) / (slow.ns - fast.ns))
        cuts += 1
        if mid is not None and mid not in found:
            found.add(mid)
            todo += [(fast, mid), (mid, slow)]
    return found


def _out_bytes(bsym) -> int:
    return sum(nbytes(o) for o in bsym.flat_proxy_outs())


def _front(plans) -> list[Plan]:
    """The plans no other beats in both bytes and time, fastest first."""
    front = []
    for p in sorted(plans, key=lambda p: (p.ns, p.nbytes)):
        if not front or p.nbytes < front[-1].nbytes:
            front.append(p)
    return front


def choose(base: Plan, plans: list[Plan], budget: float) -> tuple[Plan, int, int, float]:
    """(the plan, minimal bytes, default bytes, the byte limit): the least recompute time among the plans saving at
    most minimal + budget * (default - minimal) bytes (fewer bytes on a tie); the default plan where it saves no more
    than the minimal one."""
    least = min(p.nbytes for p in plans)
    if base.nbytes <= least:
        return base, least, base.nbytes, float(base.nbytes)
    limit = least + budget * (base.nbytes - least)
    fits = [p for p in plans if p.nbytes <= limit]
    return min(fits, key=lambda p: (p.ns, p.nbytes)), least, base.nbytes, limit


def within_budget(split: Split, fused: bool, budget: float, remat: float | None) -> tuple[Split, Trace, Trace]:
    """The split whose forward saves what memory_budget=`budget` allows (0 <= budget < 1; remat: the default plan's
    step-time fraction, as transforms/rematerialize.py's `rematerialize` takes it). Both programs list the saved set
    and its bytes in comments atop them."""
    with Timer() as t:
        fw, bw = split.forward, split.backward
        default = plan(fw, bw, split.saved, fused, remat, split.n_outputs)
        base, plans = trade_curve(split, fused, default)
        chosen, least, most, limit = choose(base, plans, budget)
        new = recompute_in_backward(split, set(chosen.lines) if chosen is not base else default)
    comments = saved_comments(new.saved, budget, least, most, limit)
    new.forward.comments = (*new.forward.comments, *comments)
    new.backward.comments = (*new.backward.comments, *comments)
    return noted(split, new, f"Rematerialization within memory_budget={budget:g}", t.seconds)


def saved_comments(saved: list, budget: float, least: int, most: int, limit: float, width: int = 116) -> list[str]:
    """The comment lines atop both programs: the bytes saved against the budget's limit, then the saved tensors."""
    total = sum(nbytes(p) for p in saved)
    tensors = [p for p in saved if isinstance(p, TensorProxy)]
    head = (f"memory_budget={budget:g}: saves {len(tensors)} tensors, {total} bytes ({_size(total)}); limit "
            f"{int(limit)} bytes = minimal {least} + {budget:g} * (default {most} - minimal {least})")
    out, line = [head], "saved:"
    for p in tensors:
        item = f" {p.name} {str(p.dtype).removeprefix('torch.')}{list(p.shape)} {nbytes(p)}"
        if len(line) + len(item) + 1 > width:
            out.append(line)
            line = "saved:"
        line += item + ","
    if tensors:
        out.append(line.rstrip(","))
    return out
