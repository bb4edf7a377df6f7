"""Interpreter: torch nn.Module forwards on real tensors match eager (Module.__call__ and torch's Python code)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from jitcore.interpreter import DefaultContext, interpret


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(2)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(d, 3), "b": torch.nn.Linear(d, 3)})
        self.drop = torch.nn.Dropout(0.5)
        self.seq = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU())
        self.register_buffer("scale", torch.full((d,), 0.5))

    def forward(self, x, mode="a"):
        h = self.norm(x)
        for layer in self.layers:
            h = F.gelu(layer(h)) + h
        h = self.drop(self.seq(h)) * self.scale
        with torch.no_grad():
            _ = h.sum()
        outs = {k: head(h) for k, head in self.heads.items()}
        return outs[mode] + self.heads[mode](h), self.layers[0].weight.shape


@pytest.fixture
def block():
    torch.manual_seed(0)
    return Block(8).eval()


def test_module_forward_matches_eager(block):
    x = torch.randn(4, 8)
    expected = block(x, mode="b")
    res = interpret(block, (x,), {"mode": "b"}, DefaultContext())
    torch.testing.assert_close(res.output[0], expected[0])
    assert res.output[1] == expected[1]
    assert res.side_effects == []


class NativeTorch(DefaultContext):
    """Call everything from torch natively: only the user's own code is interpreted."""

    def __init__(self):
        self.native = []

    def should_inline(self, fn):
        if (fn.__module__ or "").startswith("torch"):
            self.native.append(fn.__qualname__)
            return False
        return True


def test_module_forward_with_torch_called_natively(block):
    x = torch.randn(4, 8)
    ctx = NativeTorch()
    res = interpret(block, (x,), {}, ctx)
    torch.testing.assert_close(res.output[0], block(x)[0])
    assert "Module._wrapped_call_impl" in ctx.native


def test_provenance_of_parameters(block):
    seen = {}

    class Rec(DefaultContext):
        def on_external_value(self, value, provenance):
            if isinstance(value, torch.Tensor):
                seen[str(provenance)] = value
            return value

    x = torch.randn(2, 8)
    interpret(block, (x,), {}, Rec())
    assert seen["args[0]"] is x
    assert seen["fn.norm.weight"] is block.norm.weight
    assert seen["fn.layers._modules['0'].weight"] is block.layers[0].weight
    assert seen["fn.scale"] is block.scale


def test_functional_code_and_training_dropout_shape():
    def f(x, w):
        y = F.linear(x, w).relu()
        y = F.layer_norm(y, y.shape[-1:])
        return F.softmax(y, dim=-1).sum(-1)

    x, w = torch.randn(3, 5), torch.randn(4, 5)
    torch.testing.assert_close(interpret(f, (x, w), {}, DefaultContext()).output, f(x, w))
