"""Fuzzer statement class `foreach_scalar` (issue 38): torch's `_foreach_*_` functions (no op of jitcore's: an opaque
in-place call) with the program's Python number arguments (`k`, `s0`), which are symbolic under cache="symbolic
values" (jitcore/ops/torch_map.py with_number_proxies; tests/test_foreach_scalar.py).
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

_CALLS = ("torch._foreach_mul_({ts}, {k})", "torch._foreach_add_({ts}, {k})", "torch._foreach_add_({ts}, {ts}, "
          "alpha={k})", "torch._foreach_div_({ts}, {k})", "torch._foreach_sub_({ts}, {k})")


@statement_class("foreach_scalar", 1)
def foreach_scalar(gen) -> list[str] | None:
    v = gen.var(lambda t: t.is_floating_point())
    if v is None:
        return None
    rng = gen.rng
    a, b, out = gen.fresh(), gen.fresh(), gen.fresh()
    k = rng.choice(("k", "s0", "k * 0.5", "s0 + 1"))
    lines = [f"{a} = {v} * 1", f"{b} = {v}.abs() + 1",
             rng.choice(_CALLS).format(ts=f"[{a}, {b}]", k=k), f"{out} = {a} + {b}"]
    return lines if gen.try_lines(lines) else None
