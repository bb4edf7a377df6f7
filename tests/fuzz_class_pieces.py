"""Fuzzer statement class (tests/fuzz_classes.py): a piece of a view op returning several tensors (tensor_split,
h/v/dsplit, split, chunk, unbind) written in place or changed in metadata, then the piece and its source read. Eager
refuses such writes into the pieces of split/chunk/unbind when grad is recorded (the shadow run drops those lines) and
runs them on the pieces of tensor_split and h/v/dsplit, slices of the source: the write must reach the source.
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

_PIECES = ("{v}.tensor_split(2)[{k}]", "{v}.tensor_split([1], dim=-1)[{k}]", "torch.hsplit({v}, [1])[{k}]",
           "torch.vsplit({v}, [1])[{k}]", "{v}.split(1)[{k}]", "{v}.chunk(2)[{k}]", "{v}.unbind(0)[{k}]",
           "torch.dsplit({v}, [1])[{k}]")
_CHANGES = ("{p}.mul_(s0)", "{p}.add_(1)", "{p}[0] = 2", "{p}.t_()", "{p}.unsqueeze_(0)", "{p}.transpose_(0, -1)",
            "{p}.copy_({p} * 3)")
_READS = ("{n} = {p} * 2", "{n} = {v}.sin()", "{n} = {v}.sum(0) + 1", "{n} = {p}.reshape(-1)[:2] * 1")


@statement_class("pieces", 2)
def pieces(gen) -> list[str] | None:
    rng = gen.rng
    v = gen.var(lambda t: t.dim() > 0 and t.numel() > 0 and t.shape[0] > 1)
    if v is None:
        return None
    p = gen.fresh()
    if not gen.try_lines([f"{p} = {rng.choice(_PIECES).format(v=v, k=rng.choice((0, -1)))}"]):
        return None
    made = [p]
    for _ in range(rng.choice((1, 2))):
        gen.try_lines([rng.choice(_CHANGES).format(p=p)])
    for _ in range(rng.choice((1, 2))):
        n = gen.fresh()
        if gen.try_lines([rng.choice(_READS).format(n=n, p=p, v=v)]):
            made.append(n)
    return made
