"""Fuzzer statement class (tests/fuzz_classes.py): sizes known only at run time in comparisons and Python control
flow (issue 38 item 8). A selection by a mask (`v[v > 0]`, masked_select, nonzero; sometimes a mask of random draws,
or of a tensor written just before) has a count `u` that changes from call to call with the inputs' values; the
statement branches on a comparison of it with the tensor's sizes (`min(n, u) == n`, `u // n == n`, `u % n < 2`,
`u <= v.numel()`) or uses it in size arithmetic, so the calls of a program take different answers.
"""
from __future__ import annotations

import torch

from tests.fuzz_classes import statement_class

# how the selection is made: {v} the tensor; its count is `u`
SELECTIONS = (
    "{s} = {v}[{v} > 0]",
    "{s} = torch.masked_select({v}, {v} < 0)",
    "{s} = torch.nonzero({v} > 0.5)",
    "{s} = {v}[{v}.abs() > 1]",
    "{s} = {v}[torch.rand_like({v}, dtype=torch.float32) < 0.5]",  # a count of random draws
)
# comparisons of the count u with a size n of the tensor (and its numel); some the bounds decide
CONDITIONS = (
    "min({n}, {u}) == {n}", "{u} // {n} == {n}", "{u} // {n} >= 1", "{u} % {n} < 2", "{u} > 0", "{u} == 0",
    "{u} <= {v}.numel()", "{u} >= 0", "{u} * 2 > {v}.numel()", "max({u}, {n}) == {u}", "{u} - {n} < 3",
    "len({s}) > {n}", "{u} != {n}", "not {u}",
)
# what each branch computes (of the tensor v, its selection s, the count u)
BRANCHES = (
    ("{v} * 2", "{v} - 1"),
    ("{v} + {u}", "{v} * {u}"),
    ("{v}.sum() + {s}.float().sum()", "{v}.mean() - {u}"),
    ("{v}.flatten()[:min({u}, {n})] * 2", "{v}.flatten()[:{n}] + 1"),
)


@statement_class("runtime_size_compare", 3)
def runtime_size_compare(gen) -> list[str] | None:
    v = gen.var(lambda t: t.dim() >= 1 and t.dtype in (torch.float32, torch.float64))
    if v is None:
        return None
    rng = gen.rng
    s, u, out = gen.fresh(), gen.fresh(), gen.fresh()
    dim = rng.randrange(gen.env[v].dim())
    n = f"{v}.shape[{dim}]"
    lines = []
    if rng.random() < 0.2:  # the count from values written just before (the prologue cannot compute it)
        lines.append(f"{v} = {v} * 1")
        lines.append(f"{v}.mul_(-1)" if rng.random() < 0.5 else f"{v}.add_(0.5)")
    lines.append(rng.choice(SELECTIONS).format(s=s, v=v))
    lines.append(f"{u} = {s}.shape[0]")
    cond = rng.choice(CONDITIONS).format(n=n, u=u, v=v, s=s)
    yes, no = rng.choice(BRANCHES)
    fmt = {"v": v, "s": s, "u": u, "n": n}
    if rng.random() < 0.25:
        lines.append(f"{out} = ({yes}) if {cond} else ({no})".format(**fmt))
    else:
        lines += [f"if {cond}:", f"    {out} = {yes}".format(**fmt), "else:", f"    {out} = {no}".format(**fmt)]
    return lines if gen.try_lines(lines) else None
