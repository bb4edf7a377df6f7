"""Fuzzer statement classes (tests/fuzz_classes.py): an argument written in place with a value computed from an input
that requires grad (issue 38 item 4), then read again, so that the caller's tensor carries the write's autograd
history and the function's later uses of it hang off that history; and a view of it made before the write read
after it (argument_stale_view). The fuzzer (tests/fuzz.py run_once) then
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


# a view of the argument made before its write ({v}), read after it: eager remakes the view's grad_fn from the
# caller's base, so when the argument is itself a view (a transposed input), the view's uses do not reach it
VIEWS = ("{v} = {x}[1:]", "{v} = {x}[..., :1]", "{v} = {x}[0]", "{v} = {x}.unsqueeze(0)")
STALE_WRITES = (
    "{x}.mul_({w}.mean().sigmoid())",
    "{x}[0] = {w}.sum()",
    "{v}.add_({w}.mean())",
    "{x}.add_({w}.sum())\n{x}.mul_(2)",
    "with torch.no_grad():\n    {x}.add_({w}.mean())",
)
STALE_READS = ("{t} = {v} * 2", "{t} = {v}", "{u} = {v}[..., :1]\n{t} = {u} + {x}.sum()",
               "{t} = ({v} * {x}.mean()).sin()")


@statement_class("argument_stale_view", 1)
def argument_stale_view(gen) -> list[str] | None:
    """`v = x[1:]; x.mul_(w.mean()); t = v * 2`: x an argument without grad, w requiring grad."""
    args = [n for n in gen.tensors(lambda t: t.dim() > 0 and not t.requires_grad and t.dtype.is_floating_point)
            if n.startswith("x")]
    w = gen.var(lambda t: t.requires_grad and t.dtype.is_floating_point)
    if not args or w is None:
        return None
    x, v, u, t = gen.rng.choice(args), gen.fresh(), gen.fresh(), gen.fresh()
    names = {"x": x, "w": w, "v": v, "u": u, "t": t}
    lines = [gen.rng.choice(VIEWS).format(**names)]
    for choice in (STALE_WRITES, STALE_READS):
        lines += gen.rng.choice(choice).format(**names).split("\n")
    return [t] if gen.try_lines(lines) else None
