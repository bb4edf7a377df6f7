"""A module that writes its own attributes (a Python counter, a position, a flag), its buffers (in place or rebound)
and reads its buffers and parameters in any order, called several times: each call like eager's. Before, a
buffer read after the call set any plain attribute (`self.pos += n`) came back as the real tensor of the first
call, baked into the program as a constant (a KV cache read back its first contents forever). A seeded generator
orders such statements at random."""
from __future__ import annotations

import copy
import random

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES

STATEMENTS = [
    "self.pos += x.shape[0]",
    "self.flag = not self.flag",
    "self.calls.append(1)",
    "self.buf.add_(x.sum(0))",
    "self.buf = self.buf * 0.5",
    "out = out + self.buf.sum()",
    "out = out + self.lin(x).sum() * (2 if self.flag else 1)",
    "out = out + self.lin.weight.sum() * self.pos",
    "out = out + len(self.calls)",
    "self.hist[:, self.pos % 4] = x.sum()",
    "out = out + self.hist.sum()",
]


def _module(seed: int):
    r = random.Random(seed)
    body = r.sample(STATEMENTS, k=6)
    source = "def forward(self, x):\n    out = x.sum() * 0\n" + "".join(f"    {s}\n" for s in body) + "    return out\n"
    scope: dict = {}
    exec(compile(source, f"<module program {seed}>", "exec"), scope)

    class Generated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.register_buffer("buf", torch.zeros(3))
            self.register_buffer("hist", torch.zeros(1, 4))
            self.pos, self.flag, self.calls = 0, False, []

        forward = scope["forward"]

    return Generated, source


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(12))
def test_module_writing_its_attributes_and_buffers(seed, mode):
    cls, source = _module(seed)
    torch.manual_seed(seed)
    eager = cls()
    twin = copy.deepcopy(eager)
    jm = jitcore.jit(twin, cache=mode)
    with torch.no_grad():
        for step in range(4):
            x = torch.full((1 + step % 2, 3), float(step + 1))
            torch.testing.assert_close(jm(x), eager(x), msg=lambda m, s=step: f"{source}call {s}: {m}")
            torch.testing.assert_close(twin.buf, eager.buf)
            torch.testing.assert_close(twin.hist, eager.hist)
            assert (twin.pos, twin.flag, twin.calls) == (eager.pos, eager.flag, eager.calls)
