"""Fuzzer statement class `runtime_size_function` (issue 38 item 8): a size known only at run time (the count of a
selection) asked about after a user's autograd.Function (whose effect a failed run-time check could not take back):
functionalization asks about the count at `_Cube.apply(s)`; the check goes before the Function's line where what it
reads is made there (jitcore/ops/size_checks.py; tests/test_runtime_size_function.py).
"""
from __future__ import annotations

import torch

from tests.fuzz_classes import statement_class

_SELECTIONS = ("{v}[{v} > 0]", "torch.masked_select({v}, {v} < 0)", "{v}[{v}.abs() > 0.5]")


@statement_class("runtime_size_function", 1)
def runtime_size_function(gen) -> list[str] | None:
    v = gen.var(lambda t: t.dim() >= 1 and t.dtype in (torch.float32, torch.float64))
    if v is None:
        return None
    rng = gen.rng
    s, c, u, out = gen.fresh(), gen.fresh(), gen.fresh(), gen.fresh()
    fn = rng.choice(("_Cube", "_Ste"))
    w = gen.fresh()
    lines = [f"{w} = {v} * 1", f"{w}.add_(1)"]  # (a write: functionalization runs, and asks about the count)
    lines += [f"{s} = " + rng.choice(_SELECTIONS).format(v=rng.choice((v, w))), f"{c} = {fn}.apply({s})",
              f"{u} = {c}.shape[0]"]
    cond = rng.choice(("{u} > 2", "{u} // 2 == 1", "min({u}, 3) == 3", "{u} == 0"))
    lines += [f"if {cond.format(u=u)}:", f"    {out} = {c}.sum() + {w}", "else:", f"    {out} = {w} * 2"]
    return lines if gen.try_lines(lines) else None
