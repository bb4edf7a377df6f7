"""View ops that hand back their input itself where they view nothing (issue 38's long fuzz run, seed 885): eager's
`x.flatten()` of a 1-d x (and `flatten(x, d, d)`) is x, the same object, so a write into either is a write into both
and a returned one is the caller's own tensor. Compared with eager in every cache mode: identity of the outputs,
values, the arguments after the call and gradients.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_1C52E7A
from tests.test_inplace_metadata import check


def _flatten_1d(x):
    t = x.flatten()
    x.add_(t)
    return t, x * 1


def _flatten_same_dim(x):
    t = x.flatten(-1, -1)
    t.unsqueeze_(0)  # (x is t: its shape changes too)
    return x.shape, t * 2


def _make(*shape):
    def make():
        torch.manual_seed(sum(shape))
        return (torch.randn(*shape),)
    return make


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_flatten_gives_back_its_input(cache):
    check(_flatten_1d, [_make(4), _make(4), _make(6)], cache)
    check(_flatten_same_dim, [_make(2, 3), _make(2, 3), _make(4, 5)], cache)
    x = torch.randn(5)
    out = jitcore.jit(lambda x: x.flatten(), cache=cache)(x)
    assert out is x


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_flatten_under_no_grad_keeps_requiring_grad(cache):
    def f(w):
        with torch.no_grad():
            t = w.flatten()
        return t * 2

    w2 = torch.randn(3, requires_grad=True)
    exp = f(w2)
    got = jitcore.jit(f, cache=cache)(w2)
    torch.testing.assert_close(got, exp)
    exp.sum().backward()
    g = w2.grad.clone()
    w2.grad = None
    got.sum().backward()
    torch.testing.assert_close(w2.grad, g)


def test_fuzz_seed_885():
    prog = generate(885, classes=CLASSES_1C52E7A)
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems, report.text(prog)
