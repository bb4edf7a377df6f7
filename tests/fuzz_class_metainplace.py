"""Fuzzer statement class (tests/fuzz_classes.py): in-place metadata changes, `x.unsqueeze_(d)`, `squeeze_`, `t_`,
`transpose_`, `swapdims_`/`swapaxes_`, `as_strided_`, `resize_`/`resize_as_` (to at most as many elements), on
intermediates, on named views and on arguments, followed by reads and by writes through the changed tensor and
through other aliases of its memory (eager's aliasing after the change is the point). resize_ never grows: eager's
new elements would be uninitialized memory, which jitcore refuses.
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class


def _ops(gen, v: str) -> list[str]:
    """The metadata changes eager may accept on v (the shadow run keeps those it does)."""
    t = gen.env[v]
    n = t.dim()
    d = gen.rng.randrange(-n - 1, n + 1)
    ops = [f"{v}.unsqueeze_({d})", f"{v}.squeeze_()", f"{v}.resize_({v}.shape[0])",
           f"{v}.as_strided_((2, 2), (1, {gen.rng.choice((1, 2))}))"]
    if n >= 1:
        ops += [f"{v}.squeeze_({gen.rng.randrange(-n, n)})", f"{v}.resize_as_({v}[0])"]
    if n <= 2:
        ops.append(f"{v}.t_()")
    if n >= 2:
        a, b = gen.rng.sample(range(n), 2)
        ops += [f"{v}.{gen.rng.choice(('transpose_', 'swapdims_', 'swapaxes_'))}({a}, {b})",
                f"{v}.resize_({v}.shape[-1], {v}.shape[0])", f"{v}.unsqueeze_(0).squeeze_(1)"]
    return ops


_READS = ("{n} = {v} * 2 + 1", "{n} = {v}.sum(0)", "{n} = {v}.reshape(-1)[:2] * 1", "{n} = torch.tanh({v})")
_WRITES = ("{v}.add_(1)", "{v}.mul_(s0)", "{v}[0] = 3", "{v}.zero_()")


@statement_class("metainplace", 4)
def metadata_inplace(gen) -> list[str] | None:
    rng = gen.rng
    v = gen.var(lambda t: t.dim() > 0 and t.numel() > 0)
    if v is None:
        return None
    made = []
    form = rng.choice(("self", "self", "view", "alias"))
    target, other = v, None
    if form == "view":  # a named view of v changes its metadata; v keeps its own
        target = gen.fresh()
        view = rng.choice(("{v}[1:]", "{v}.view(-1)", "{v}.transpose(0, -1)", "{v}.unsqueeze(0)", "{v}.detach()"))
        if not gen.try_lines([f"{target} = {view.format(v=v)}"]):
            return None
        made.append(target)
        other = v
    elif form == "alias":  # an alias made before the change sees v's memory through its own metadata
        other = gen.fresh()
        alias = rng.choice(("{v}.view({v}.shape)", "{v}[:]", "{v}.reshape(-1)"))
        if not gen.try_lines([f"{other} = {alias.format(v=v)}"]):
            return None
        made.append(other)
    for _ in range(rng.choice((1, 1, 2))):
        if not gen.try_lines([rng.choice(_ops(gen, target))]):
            break
    else:
        made.append(target)
    for _ in range(rng.choice((1, 2, 2))):
        who = other if other is not None and rng.random() < 0.4 else target
        if rng.random() < 0.5:
            n = gen.fresh()
            if gen.try_lines([rng.choice(_READS).format(n=n, v=who)]):
                made.append(n)
        else:
            gen.try_lines([rng.choice(_WRITES).format(v=who)])
    return made or None
