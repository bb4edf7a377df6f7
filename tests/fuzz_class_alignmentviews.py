"""Fuzzer statement class `alignment_views` (issue 38): `data_ptr()` residues of views into tensors whose sizes are
known only at run time (a selection by a mask, a column of `torch.where(m)` made a new tensor, then sliced) and of the
views eager makes of complex tensors that jitcore computes (view_as_real, real, imag, conj, mH, unfold), in a value or
a branch (jitcore/frontend/alignment.py; tests/test_alignment_views.py).
"""
from __future__ import annotations

import torch

from tests.fuzz_classes import statement_class

# the tensor whose address is read, from a float variable v (i: a small offset)
_RUN_TIME = ("({v}[{v} > 0] * 2).flatten()[{i}:]", "{v}[{v} > 0][{i}:]", "torch.where({v} > 0)[0].float()[{i}:]",
             "torch.masked_select({v}, {v} < 0).exp()[{i}:]")
_COMPLEX = ("torch.view_as_real({z})", "torch.view_as_real({z}).flatten()[{i}:]", "{z}.real[{i}:]", "{z}.imag",
            "({z} * 2).imag.flatten()[{i}:]", "{z}.conj()[{i}:]", "{z}.mH", "torch.view_as_real({z}).unfold(0, 1, 1)")
_TESTS = ("{p} % {k} == 0", "{p} % {k}", "{p} & {m}")


@statement_class("alignment_views", 1)
def alignment_views(gen) -> list[str] | None:
    v = gen.var(lambda t: t.dim() >= 1 and t.dtype in (torch.float32, torch.float64))
    if v is None:
        return None
    rng = gen.rng
    i = rng.randrange(1, 4)
    lines = []
    if rng.random() < 0.5:
        tensor = rng.choice(_RUN_TIME).format(v=v, i=i)
    else:
        z = gen.fresh()
        lines.append(f"{z} = torch.complex({v}.float(), {v}.float().cos())")
        tensor = rng.choice(_COMPLEX).format(z=z, i=i)
    k = rng.choice((4, 8, 16, 64))
    test = rng.choice(_TESTS).format(p=f"{tensor}.data_ptr()", k=k, m=k - 1)
    name = gen.fresh()
    if rng.random() < 0.5:
        lines.append(f"{name} = {v} * ({test})")
    else:
        lines += [f"if {test}:", f"    {name} = {v} * 2", "else:", f"    {name} = {v} - 1"]
    return lines if gen.try_lines(lines) else None
