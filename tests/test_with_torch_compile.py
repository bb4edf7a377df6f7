"""jitcore next to torch.compile in one process: module state that code compiled by torch.compile changes reaches
the jitted module's next call (jitcore's module-state epoch must see it: skipping its bump while Dynamo traces left a
jitted entry stale)."""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore import compat
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


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_module_state_changed_by_compiled_code_reaches_the_jitted_module(mode, backend):
    torch.manual_seed(0)
    m = _Scale()
    jm = jitcore.jit(m, cache=mode)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    compiled = torch.compile(_set, backend=backend)
    for v in (3.0, 5.0, 1.0, 4.0):
        compiled(m, v, x)
        assert m.k == v
        torch.testing.assert_close(jm(x), m(x))
    torch.compile(_swap, backend=backend)(m, x)
    torch.testing.assert_close(jm(x), m(x))
    with torch.inference_mode():  # (the compiled code's in-place add still counts there)
        compiled(m, 6.0, x)
    torch.testing.assert_close(jm(x), m(x))


class _Sliced(torch.nn.Module):
    """Llama's forward slices its ModuleList: a new ModuleList each call, which registers modules."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers[:2]:
            x = layer(x)
        return x


def test_torch_compile_does_not_recompile_for_jitcores_module_state_epoch():
    """Module state changed inside code Dynamo traces bumps an epoch Dynamo does not guard on (an in-place add to a
    tensor, jitcore/guards/module_state.py): torch.compile of a model slicing its ModuleList compiles once in a
    process where jitcore watches module state (it recompiled at every call up to its limit, then ran eagerly)."""
    jitcore.jit(_Sliced())(torch.randn(2, 4))  # (installs jitcore's module-state hooks)
    counter = compat.compile_counter()
    m = _Sliced()
    compiled = torch.compile(m, backend=counter)
    for _ in range(4):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), m(x))
    assert counter.frame_count == 1
