"""Fuzzer statement class (tests/fuzz_classes.py): complex views. A complex tensor made from a float variable
(torch.complex, torch.polar, view_as_complex of a stack or of the variable's own pairs, which views its memory, rfft,
a product with 1j), then reads and writes through z.real, z.imag, z.conj(), z.H / z.mH, torch.view_as_real, and a real
result read from it (parts, modulus, irfft). The complex temporary is deleted at the end of the statement, so the
core templates never see a complex variable; gradients reach the float variable through every view.
"""
from __future__ import annotations

import torch

from tests.fuzz_classes import statement_class

_MAKE = ("{z} = torch.complex({v}, {v}.sin())", "{z} = torch.polar({v}.abs() + 0.5, {v})",
         "{z} = torch.view_as_complex(torch.stack(({v}, {v} * 0.5), -1))",
         "{z} = torch.view_as_complex({v}.unflatten(-1, (-1, 2)))", "{z} = torch.fft.rfft({v})", "{z} = {v} * 1j",
         "{z} = torch.view_as_complex({v}.float().reshape(*{v}.shape[:-1], -1, 2))")
_STEPS = ("{z}.real.mul_({s})", "{z}.imag[0] = 1", "{z}.real += {o}", "{z}.imag = {z}.real * 2",
          "torch.view_as_real({z})[..., 0].add_(1)", "{z}.conj().imag.mul_(2)", "{z}.mul_(1j)", "{z}.conj().mul_(2)",
          "{z} = {z} * {z}.conj()", "{z} = {z}.mH * 2", "{z} = {z}.H", "{z} = {z}.conj()", "{z}.imag.add_({o})",
          "{z} = {z} * torch.polar(torch.ones_like({z}.real), {z}.real)", "{z} = {z}.conj().mT.resolve_conj()")
_READS = ("{n} = {z}.real * 2", "{n} = {z}.imag + 0", "{n} = {z}.abs()", "{n} = torch.view_as_real({z}).flatten(-2)",
          "{n} = ({z} * {z}.conj()).real", "{n} = torch.view_as_real({z}.resolve_conj()).sum(-1)",
          "{n} = torch.fft.irfft({z}, n={v}.shape[-1])", "{n} = {z}.real.sum() + {z}.imag.mean()",
          "{n} = {z}.conj().imag * {s}")
_SCALARS = ("2", "s0", "-0.5")


@statement_class("complexviews", 4)
def complex_views(gen) -> list[str] | None:
    rng = gen.rng
    v = gen.var(lambda t: t.dtype in (torch.float32, torch.float64) and t.dim() > 0 and t.numel() > 0)
    if v is None:
        return None
    z = gen.fresh()
    if not gen.try_lines([rng.choice(_MAKE).format(z=z, v=v)]):
        return None
    for _ in range(rng.choice((1, 2, 2, 3))):
        step = rng.choice(_STEPS).format(z=z, s=rng.choice(_SCALARS), o=gen.operand(v))
        gen.try_lines([step])
    made = []
    for _ in range(rng.choice((1, 1, 2))):
        n = gen.fresh()
        if gen.try_lines([rng.choice(_READS).format(n=n, z=z, v=v, s=rng.choice(_SCALARS))]):
            made.append(n)
    gen.try_lines([f"del {z}"])
    return made or None
