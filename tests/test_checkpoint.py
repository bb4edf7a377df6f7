"""Activation checkpointing written by the user (torch.utils.checkpoint.checkpoint / checkpoint_sequential with
use_reentrant=False) inside a jitted program: the block is interpreted inline, its lines marked, and the backward
recomputes them (transforms/rematerialize.py) with eager's outputs and gradients; random draws inside give eager's
masks; the bytes saved for backward drop; the reentrant variant is refused by name."""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import jitcore
from executors import inductor_ex

CACHES = ("constant values", "symbolic values")


class Net(torch.nn.Module):
    def __init__(self, ckpt=True, nested=False, p=0.0, width=16):
        super().__init__()
        self.a, self.b = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        self.ckpt, self.nested, self.p = ckpt, nested, p

    def block(self, x):
        h = torch.tanh(self.a(x))
        if self.p:
            h = torch.nn.functional.dropout(h, p=self.p, training=True)
        if self.nested:
            h = checkpoint(torch.nn.functional.gelu, h, use_reentrant=False)
        return self.b(h) * 0.5 + x

    def forward(self, x):
        y = checkpoint(self.block, x, use_reentrant=False) if self.ckpt else self.block(x)
        return torch.sin(y).sum()


def _run(model, x, seed):
    torch.manual_seed(seed)
    model.zero_grad()
    xr = x.detach().clone().requires_grad_()
    out = model(xr)
    out.backward()
    return out, [xr.grad, *[p.grad.clone() for p in model.parameters()]]


def _like_eager(make, shapes, cache="constant values", exact=True, **jit_options):
    torch.manual_seed(0)
    model = make()
    jm = jitcore.jit(model, cache=cache, **jit_options)
    for i, shape in enumerate(shapes):
        x = torch.randn(*shape)
        want, wgrads = _run(model, x, seed=i)
        got, jgrads = _run(jm, x, seed=i)
        tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
        torch.testing.assert_close(got, want, **tol)
        for g, w in zip(jgrads, wgrads):
            torch.testing.assert_close(g, w, **tol)
    return jm


def _recomputed(jm) -> int:
    header = str(jitcore.last_backward_traces(jm)[1]).splitlines()[0]
    assert "Rematerialization" in header, header
    return int(header.split("; ")[1].split()[0])


@pytest.mark.parametrize("cache", CACHES)
def test_checkpointed_block_is_recomputed_with_eagers_gradients(cache):
    jm = _like_eager(Net, [(4, 16), (6, 16), (4, 16)], cache)
    assert _recomputed(jm) >= 3  # the block's linear, tanh and linear run again in the backward


@pytest.mark.parametrize("cache", CACHES)
def test_dropout_inside_gives_eagers_masks(cache):
    jm = _like_eager(lambda: Net(p=0.4), [(8, 16), (8, 16), (5, 16)], cache)
    bw = jitcore.last_backward_traces(jm)[-1]
    assert "bernoulli" not in str(bw) and "uniform" not in str(bw)  # the mask is saved, never drawn again


def test_nested_checkpoints():
    _like_eager(lambda: Net(nested=True, p=0.2), [(4, 16), (4, 16)])


def test_checkpoint_sequential():
    def make():
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.GELU(),
                                   torch.nn.Linear(8, 8), torch.nn.Sigmoid())

    class Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = make()

        def forward(self, x):
            return checkpoint_sequential(self.seq, 2, x, use_reentrant=False).sum()

    jm = _like_eager(Seq, [(3, 8), (5, 8)])
    assert _recomputed(jm) >= 3


def test_bytes_saved_for_backward_drop():
    torch.manual_seed(0)
    plain, ckpt = Net(ckpt=False, width=64), Net(width=64)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(32, 64, requires_grad=True)
    saved = {name: jitcore.saved_tensor_bytes(lambda m=m: m(x)).nbytes for name, m in
             [("eager", plain), ("jit", jitcore.jit(plain, rematerialize=False)), ("ckpt", jitcore.jit(ckpt))]}
    assert saved["ckpt"] < saved["jit"] <= saved["eager"]


@pytest.mark.parametrize("cache", CACHES)
def test_checkpointed_transformer_blocks_recompute_norms_and_attention(cache):
    from benchmarks.models import Block, GPTConfig

    class Blocks(torch.nn.Module):
        def __init__(self, ckpt=True):
            super().__init__()
            config = GPTConfig(n_embd=32, n_head=2, block_size=16)
            self.blocks, self.ckpt = torch.nn.ModuleList([Block(config) for _ in range(2)]), ckpt

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
            return x.sum()

    jm = _like_eager(Blocks, [(2, 16, 32), (3, 16, 32)], cache)
    x = torch.randn(2, 16, 32)
    torch.manual_seed(0)
    plain = jitcore.jit(Blocks(ckpt=False), rematerialize=False)
    with_ckpt, without = (jitcore.saved_tensor_bytes(lambda m=m: m(x)).nbytes for m in (jm, plain))
    assert with_ckpt < without / 2


def test_rematerialize_false_still_recomputes_the_users_checkpoints():
    jm = _like_eager(Net, [(4, 16)], rematerialize=False)
    assert _recomputed(jm) >= 3


@pytest.mark.parametrize("reentrant", [True, None])
def test_reentrant_checkpoint_is_refused_by_name(reentrant):
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        return checkpoint(lin, x, use_reentrant=reentrant).sum()

    with pytest.raises(jitcore.UnsupportedError, match="use_reentrant=False"):
        jitcore.jit(fn)(torch.randn(2, 4, requires_grad=True))


def test_checkpoint_under_inductor():
    _like_eager(lambda: Net(p=0.3), [(8, 16), (8, 16)], exact=False, executors=[inductor_ex])
