"""Fuzzer statement class `same_place_write` (issue 38): a write of a view into itself through an expand()
(`e.unsqueeze(0).expand(2, *e.shape)[0] = e`, e an expand of a tensor): eager's copy_ leaves out a write whose source
is the very view written, overlapping or not (a write of other values there eager refuses). Without grad (under
no_grad, or of a detached tensor) jitcore runs it as eager; with grad it stays refused (eager's backward through it
raises) (transforms/functionalize.py; tests/test_same_place_write.py).
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class


@statement_class("same_place_write", 1)
def same_place_write(gen) -> list[str] | None:
    v = gen.var(lambda t: t.dim() >= 1 and t.is_floating_point())
    if v is None:
        return None
    rng = gen.rng
    base, e, out = gen.fresh(), gen.fresh(), gen.fresh()
    made = rng.choice(("{v}.sum(0)", "{v} * 2", "{v}.detach().clone()")).format(v=v)
    lines = [f"{base} = {made}", f"{e} = {base}.unsqueeze(0).expand(2, *{base}.shape)"]
    write = rng.choice(("{e}.unsqueeze(0).expand(2, *{e}.shape)[0] = {e}", "{e}[:] = {e}", "{e}.copy_({e})",
                        "{e}.unsqueeze(0).expand(3, *{e}.shape)[1].copy_({e})")).format(e=e)
    if rng.random() < 0.5:
        lines += ["with torch.no_grad():", f"    {write}"]
    else:
        lines += [f"{e} = {base}.detach().unsqueeze(0).expand(2, *{base}.shape)", write]
    lines.append(f"{out} = {base} * 2 + {e}.sum(0)")
    return lines if gen.try_lines(lines) else None
