"""Fuzzer statement class `detach_metadata` (issue 38, fuzz seed 2063): an in-place metadata change made through
detach() of an argument or of a view of it (`t1 = x0.select(0, 1); t1.detach().squeeze_(0)`), then reads of the view
and of the argument. Eager moves the version counter the alias shares with the argument; on an argument that is a view
requiring grad (the fuzzer's transposed inputs) jitcore refuses (jitcore/runtime/view_arguments.py;
tests/test_detach_metadata_of_views.py).
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

_VIEWS = ("{x}", "{x}.select(0, 0)", "{x}[1:]", "{x}.transpose(0, -1)", "{x}.unsqueeze(0)")
_CHANGES = ("unsqueeze_(0)", "squeeze_()", "squeeze_(0)", "t_()", "transpose_(0, -1)", "resize_({d}.numel())")
_READS = ("{n} = torch.maximum({v}, {x})", "{n} = ({v} * 2).sum() + {x}.sum()", "{n} = {v}.sin() + 1",
          "{n} = {x} * 2 + {v}.sum()")


@statement_class("detach_metadata", 1)
def detach_metadata(gen) -> list[str] | None:
    rng = gen.rng
    args = [n for n in gen.tensors(lambda t: t.dim() >= 1 and t.numel() > 0) if n.startswith("x")]
    if not args:
        return None
    x = rng.choice(args)
    v, d, n = gen.fresh(), gen.fresh(), gen.fresh()
    change = rng.choice(_CHANGES)
    lines = [f"{v} = {rng.choice(_VIEWS).format(x=x)}"]
    if rng.random() < 0.5:
        lines += [f"{d} = {v}.detach()", f"{d}.{change.format(d=d)}"]
    else:
        lines.append(f"{v}.detach().{change.format(d=v)}")
    lines.append(rng.choice(_READS).format(n=n, v=v, x=x))
    return [v, n] if gen.try_lines(lines) else None
