"""Random module programs against eager: seeded stacks of Linear / Conv1d / BatchNorm / LayerNorm / GroupNorm /
Dropout / in-place activations / residual adds, trained a few SGD steps with the mode (train, eval), the grad mode
(on, no_grad, inference_mode) and the batch size changing between calls, in every cache mode. Each step compares
outputs, parameter gradients, parameters after the step and every buffer (BatchNorm's running stats and counter)
with eager's; dropout draws from the same seeded generator in both.
"""
from __future__ import annotations

import contextlib
import copy
import random

import pytest
import torch
from torch import nn

import jitcore

CACHE_MODES = ("constant values", "symbolic values", "no caching")


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class Channels(nn.Module):
    """(N, F) -> (N, C, L) -> a 1-d conv block -> (N, F): BatchNorm1d/GroupNorm over channels."""

    def __init__(self, r, width):
        super().__init__()
        self.c = 4 if width % 4 == 0 else 2
        norm = r.choice([nn.BatchNorm1d(self.c), nn.GroupNorm(2, self.c), nn.Identity()])
        self.conv = nn.Conv1d(self.c, self.c, 3, padding=1, bias=not isinstance(norm, nn.BatchNorm1d))
        self.norm, self.act = norm, r.choice([nn.ReLU(inplace=True), nn.SiLU(), nn.Hardswish()])

    def forward(self, x):
        n = x.shape[0]
        y = self.act(self.norm(self.conv(x.reshape(n, self.c, -1))))
        return y.reshape(n, -1)


def _layer(r, width):
    kind = r.choice(["linear", "bn", "ln", "dropout", "act", "residual", "channels"])
    if kind == "linear":
        return nn.Linear(width, width, bias=r.random() < 0.7)
    if kind == "bn":
        return nn.BatchNorm1d(width, momentum=r.choice([0.1, 0.5, None]), affine=r.random() < 0.8)
    if kind == "ln":
        return nn.LayerNorm(width, elementwise_affine=r.random() < 0.8)
    if kind == "dropout":
        return nn.Dropout(r.choice([0.0, 0.2, 0.5]))
    if kind == "act":
        return r.choice([nn.ReLU(inplace=True), nn.GELU(), nn.Tanh(), nn.LeakyReLU(0.1, inplace=True), nn.ELU()])
    if kind == "residual":
        return Residual(nn.Sequential(nn.Linear(width, width), r.choice([nn.ReLU(), nn.GELU()])))
    return Channels(r, width)


def _model(seed):
    r = random.Random(seed)
    width = r.choice([8, 12, 16])
    torch.manual_seed(seed)
    layers = []
    for _ in range(r.randint(3, 7)):
        layer = _layer(r, width)
        if getattr(layer, "inplace", False) and layers and getattr(layers[-1], "inplace", False):
            layer = nn.GELU()  # (an in-place activation over another's output: eager's backward refuses it)
        layers.append(layer)
    return nn.Sequential(*layers, nn.Linear(width, 3)), width, r


def _grad_mode(name):
    return {"grad": contextlib.nullcontext(), "no_grad": torch.no_grad(),
            "inference": torch.inference_mode()}[name]


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(12))
def test_random_module_programs_train_like_eager(seed, mode):
    model, width, r = _model(seed)
    twin = copy.deepcopy(model)
    jitted = jitcore.jit(twin, cache=mode)
    opt_e = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_j = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    for step in range(6):
        training = r.random() < 0.7
        grad = "grad" if training or r.random() < 0.5 else r.choice(["no_grad", "inference"])
        model.train(training)
        twin.train(training)
        x = torch.randn(r.choice([4, 6, 9]), width)
        outs = []
        for call, opt in ((model, opt_e), (jitted, opt_j)):
            opt.zero_grad(set_to_none=True)
            torch.manual_seed(1000 * seed + step)  # (dropout: the same masks)
            with _grad_mode(grad):
                out = call(x)
            if grad == "grad":
                (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
                opt.step()
            outs.append(out)
        where = f"seed {seed} step {step} ({'train' if training else 'eval'}, {grad})"
        # (norms decomposed where eager runs one kernel round differently, SGD steps carry that on, and a bias
        # before a norm has a gradient that mostly cancels: 1e-4)
        _close(outs[1], outs[0], f"{where}: output")
        assert outs[1].requires_grad == outs[0].requires_grad, where
        for (name, a), b in zip(model.named_parameters(), twin.parameters()):
            _close(b, a, f"{where}: parameter {name}")
            if a.grad is not None or b.grad is not None:
                _close(b.grad, a.grad, f"{where}: grad {name}")
        for (name, a), b in zip(model.named_buffers(), twin.buffers()):
            _close(b, a, f"{where}: buffer {name}")


def _close(got, want, what):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")
