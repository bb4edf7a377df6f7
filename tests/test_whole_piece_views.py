"""The piece a view op of several outputs returns whole (`x.chunk(1)[0]`, `x.split(n)[0]` with n at least x's size,
`x.tensor_split(1)[0]`) is x itself in eager: returned after a write into an argument x, it shares the caller's
tensor's memory (fuzz seed 2932: `t1 = x.unsqueeze(0); x.zero_(); return t1.split(2, 0)[0]` gave a tensor of its
own). Checked over call sequences (sizes where the piece is whole and where it is a slice, grad modes) in every
cache mode against eager: values, memory shared with the argument, the argument after the call, gradients.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


def split_after_zero(x, w):
    t = x.unsqueeze(0)
    x.zero_()
    return t.split(2, 0)[0], w * 2


def split_wider_after_add(x, w):
    x.add_(w.sum())
    return x.split(4, 0)[0]


def chunk_one_after_mul(x, w):
    x.mul_(w.mean())
    return x.chunk(1, 0)[0] * 1, x.chunk(1, 0)[0]


def tensor_split_one_of_a_view(x, w):
    v = x.t()
    x.sub_(w.sum())
    return v.tensor_split(1, 1)[0]


PROGRAMS = [split_after_zero, split_wider_after_add, chunk_one_after_mul, tensor_split_one_of_a_view]


def _shares(out, x) -> bool:
    return out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_whole_piece_returned_after_a_write_shares_the_argument(f, cache):
    jf = jitcore.jit(f, cache=cache)
    for rows, grad in ((3, True), (3, False), (4, True), (6, True)):  # (6: split(4)'s piece is a slice)
        g = torch.Generator().manual_seed(rows)
        x0, w0 = torch.randn(rows, 2, generator=g), torch.randn(rows, 2, generator=g)
        we, wj = w0.clone().requires_grad_(grad), w0.clone().requires_grad_(grad)
        xe, xj = x0.clone(), x0.clone()
        with torch.set_grad_enabled(grad):
            want, got = f(xe, we), jf(xj, wj)
        want, got = (want,) if isinstance(want, torch.Tensor) else want, (got,) if isinstance(got, torch.Tensor) \
            else got
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w)
            assert _shares(o, xj) == _shares(w, xe), f"rows {rows}: memory shared with x: eager {_shares(w, xe)}"
        torch.testing.assert_close(xj, xe)
        if grad and any(w.requires_grad for w in want):
            cots = [torch.randn(w.shape, generator=g) for w in want]
            sum((w * c).sum() for w, c in zip(want, cots) if w.requires_grad).backward()
            sum((o * c).sum() for o, c in zip(got, cots) if o.requires_grad).backward()
            torch.testing.assert_close(wj.grad, we.grad)
