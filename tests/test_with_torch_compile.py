"""jitcore next to torch.compile in one process: module state that code compiled by torch.compile changes reaches
the jitted module's next call (jitcore's module-state epoch must see it: skipping its bump while Dynamo traces left a
jitted entry stale)."""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 2.0
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.k if self.training else self.lin(x) - self.k


def _set(mod, v, x):
    mod.k = v
    mod.train(v > 2)
    return x * 2


def _swap(mod, x):
    mod.lin = torch.nn.Linear(4, 4)
    return x + 1


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_module_state_changed_by_compiled_code_reaches_the_jitted_module(mode):
    torch.manual_seed(0)
    m = _Scale()
    jm = jitcore.jit(m, cache=mode)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    compiled = torch.compile(_set, backend="eager")
    for v in (3.0, 5.0, 1.0, 4.0):
        compiled(m, v, x)
        assert m.k == v
        torch.testing.assert_close(jm(x), m(x))
    torch.compile(_swap, backend="eager")(m, x)
    torch.testing.assert_close(jm(x), m(x))
