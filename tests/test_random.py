"""Randomness under jitcore.jit: eager's distributions, torch.manual_seed reproducibility, and dropout's backward
using the forward's mask (random draws are never recomputed)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from tests.fuzz import CACHE_MODES

RANDOM_FNS = {
    "rand": lambda x: torch.rand(4000) + x.sum() * 0,
    "randn": lambda x: torch.randn(40, 100) + x.sum() * 0,
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "uniform_": lambda x: torch.empty(4000).uniform_(-2, 3),
    "normal_": lambda x: x.clone().normal_(1.0, 2.0),
    "bernoulli": lambda x: torch.bernoulli(torch.full((4000,), 0.3)),
    "dropout": lambda x: F.dropout(torch.ones(4000), 0.25),
    "randint": lambda x: torch.randint(0, 10, (4000,)).float(),
}
# (mean, std) of each distribution
MOMENTS = {"rand": (0.5, 0.2887), "randn": (0.0, 1.0), "rand_like": (0.5, 0.2887), "randn_like": (0.0, 1.0),
           "uniform_": (0.5, 1.4434), "normal_": (1.0, 2.0), "bernoulli": (0.3, 0.4583),
           "dropout": (1.0, 0.5774), "randint": (4.5, 2.872)}


@pytest.mark.parametrize("name", sorted(RANDOM_FNS))
def test_distribution_and_seed(name):
    fn = RANDOM_FNS[name]
    x = torch.zeros(50, 80)
    jfn = jitcore.jit(fn)
    torch.manual_seed(123)
    a = jfn(x)
    torch.manual_seed(123)
    b = jfn(x)
    c = jfn(x)
    torch.testing.assert_close(a, b)  # the same seed gives the same values
    assert not torch.equal(b, c)  # and the next call draws new ones
    mean, std = MOMENTS[name]
    assert abs(a.float().mean().item() - mean) < 0.1 * max(std, 1), (name, a.mean())
    assert abs(a.float().std().item() - std) < 0.1 * max(std, 1), (name, a.std())


def test_dropout_backward_uses_the_forward_mask():
    x = torch.randn(64, 32, requires_grad=True)
    jf = jitcore.jit(lambda x: F.dropout(x * 1.0, 0.4, training=True))
    out = jf(x)
    out.backward(torch.ones_like(out))
    kept = out != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.6)
    assert 0.5 < kept.float().mean().item() < 0.7
    bw = "\n".join(str(t) for t in jitcore.last_backward_traces(jf))
    assert "uniform" not in bw and "rand" not in bw  # the mask is saved, not drawn again


def test_dropout_module_training_step_reproducible():
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
        jm = jitcore.jit(model)
        out = jm(torch.ones(4, 8))
        out.sum().backward()
        return out.detach(), model[0].weight.grad.clone()

    (o1, g1), (o2, g2) = run(), run()
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(g1, g2)


def test_dropout_eval_is_identity():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5)).eval()
    x = torch.randn(3, 4)
    torch.testing.assert_close(jitcore.jit(model)(x), x)


def _randn_like_of_selected(x, w):
    m = x[x > 100]  # (empty for the first calls, at run time)
    return torch.randn_like(m), torch.randn(x.shape[0]) * w, torch.randn(m.shape, dtype=m.dtype)


def _randn_like_of_empty_int(x, w):
    e = x[:0]
    return torch.randn_like(e), torch.randn_like(w) * w, torch.randn(0, 3, dtype=torch.bool)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", [_randn_like_of_selected, _randn_like_of_empty_int])
def test_normal_draws_of_an_empty_int_tensor_are_eagers(fn, mode):
    """randn_like / randn in an integer dtype: an empty result, nothing drawn (the draws after it match eager's), and
    eager's NotImplementedError for a call where the tensor is not empty."""
    jfn = jitcore.jit(fn, cache=mode)
    for n in (4, 4, 5, 200):
        x = torch.arange(n)
        w = torch.randn(n, requires_grad=True)
        jw = w.detach().clone().requires_grad_()
        torch.manual_seed(n)
        try:
            expected = fn(x, w)
        except NotImplementedError as e:
            with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
                torch.manual_seed(n)
                jfn(x, jw)
            assert "normal_kernel" in str(e)
            continue
        torch.manual_seed(n)
        got = jfn(x, jw)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(torch.autograd.grad(got[1].sum(), jw), torch.autograd.grad(expected[1].sum(), w))
        torch.testing.assert_close(torch.randn(3), (torch.manual_seed(n), fn(x, w), torch.randn(3))[2])
