"""Fuzzer statement class (tests/fuzz_classes.py): an argument written in place with a value computed from an input
that requires grad (issue 38 item 4), then read again, so that the caller's tensor carries the write's autograd
history and the function's later uses of it hang off that history. The fuzzer (tests/fuzz.py run_once) then
differentiates through the inputs as they are after the call, as well as through the outputs.
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

# the write: {x} the argument (no grad), {w} a tensor that requires grad
WRITES = (
    "{x}[-1] = {x}[-1] + {w}.mean()",
    "{x}.add_({w}.sum() * 0.5)",
    "{x}[0].mul_({w}.mean().sigmoid())",
    "{x}.view(-1)[:2] = {w}.reshape(-1)[:2] * 2",
    "{x}.copy_({x} * {w}.mean().tanh())",
    "{x}[..., :1] = {w}.sum()",
    "{x}.mul_({w}.exp().mean())",
    "{v} = {x}[1:]\n{v}.add_({w}.mean())",
    "with torch.no_grad():\n    {x}[0] = {w}.mean()",
)
# what reads the argument again afterwards (or a view of it taken before the write)
READS = (
    "{t} = ({x} * 2).sin()",
    "{t} = {x}.sum(-1)",
    "{t} = {x} * {w}.mean()",
    "{t} = {x}[0] + 1",
    "{t} = {x}.exp().mean()",
)


@statement_class("argument_write_grad", 2)
def argument_write_grad(gen) -> list[str] | None:
    """`x[-1] = x[-1] + w.mean()` into an argument x without grad, w requiring grad, then `t = (x * 2).sin()`."""
    args = gen.tensors(lambda t: t.dim() > 0 and not t.requires_grad and t.dtype.is_floating_point)
    args = [n for n in args if n.startswith("x")]  # (the function's arguments)
    w = gen.var(lambda t: t.requires_grad and t.dtype.is_floating_point)
    if not args or w is None:
        return None
    x, v, t = gen.rng.choice(args), gen.fresh(), gen.fresh()
    lines = gen.rng.choice(WRITES).format(x=x, w=w, v=v).split("\n")
    read = gen.rng.random() < 0.8
    if read:
        lines += gen.rng.choice(READS).format(x=x, w=w, t=t).split("\n")
    return ([t] if read else [x]) if gen.try_lines(lines) else None
