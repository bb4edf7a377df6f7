"""Tests: the forward/backward split as eager autograd sees it (outputs and inputs with and without grad, unused
inputs, integer and non-tensor outputs, aliases, no_grad, detach, double backward), torch.autograd.gradcheck on
jitted functions, the DESIGN's `unsqueeze + add` case, and short AdamW training loops that must match eager.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import jitcore
from benchmarks.models import GPT, Block, GPTConfig, mlp
from jitcore import compat
from jitcore.errors import UnsupportedError
from tests.test_autodiff import grads_match, idx, t


# -- the split -------------------------------------------------------------------------------------------------
def test_unused_input_gets_none_like_eager():
    def fn(a, b):
        return a * 2

    a, b = t(3), t(3)
    jitcore.jit(fn)(a, b).sum().backward()
    assert a.grad is not None and b.grad is None


def _logits_loss_and_more(x, w):
    logits = x @ w
    return logits, logits.logsumexp(-1).mean(), (x * 2).sin()


@pytest.mark.parametrize("reached", ["loss", "logits", "third", "loss+third", "all"])
def test_outputs_the_loss_does_not_reach_get_no_zeros(reached):
    """autograd passes None for outputs the loss does not reach: the backward that runs drops them (no zeros made, no
    adds of zeros), and a parameter reached by none of the used outputs gets grad None, as in eager."""
    pick = {"loss": (1,), "logits": (0,), "third": (2,), "loss+third": (1, 2), "all": (0, 1, 2)}[reached]
    grads = []
    jfn = jitcore.jit(_logits_loss_and_more)
    x0, w0 = t(4, 5, grad=False), t(5, 3, grad=False)
    for run in (_logits_loss_and_more, jfn, jfn):  # the jitted one twice: the second backward reuses its program
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = run(x, w)
        sum(out[i].sum() for i in pick).backward()
        grads.append((x.grad, w.grad))
    for got in grads[1:]:
        for g, want in zip(got, grads[0]):
            assert (g is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(g, want)
    ran = str(jitcore.last_backward_traces(jfn)[-1])
    if reached != "all":
        assert any("Backward without cotangents" in str(tr).splitlines()[0] for tr in jitcore.last_backward_traces(jfn))
        assert "full(" not in ran and "zeros" not in ran


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_unreached_piece_of_a_split_reads_zeros(cache):
    """The backward of split is one cat of the pieces' cotangents: a piece the loss does not reach is zeros there
    (made in the program; under symbolic sizes autograd still passes them)."""
    def fn(x, w):
        a, b = (x @ w).split([2, 1], dim=1)
        return a * 2, b * 3

    jfn = jitcore.jit(fn, cache=cache)
    for n in (4, 6):
        x0, w0 = t(n, 5, grad=False), t(5, 3, grad=False)
        grads = []
        for run in (fn, jfn):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            run(x, w)[1].sum().backward()
            grads.append((x.grad, w.grad))
        for g, want in zip(*reversed(grads)):
            torch.testing.assert_close(g, want)


def test_outputs_without_grad_integer_and_non_tensor_outputs():
    def fn(a, b):
        return a * b, b.argmax(), a.shape[0], (b > 0), a.sum().item() if False else 3.5

    a, b = t(3), t(3, grad=False)
    out = jitcore.jit(fn)(a, b)
    assert out[0].requires_grad and not out[1].requires_grad and out[2] == 3 and out[4] == 3.5
    assert not out[3].requires_grad and out[3].dtype is torch.bool
    out[0].sum().backward()
    torch.testing.assert_close(a.grad, b)


def test_input_returned_unchanged_and_same_tensor_twice():
    def fn(a, b):
        c = a * b
        return a, c, c

    grads_match(fn, t(3), t(3))
    a = t(3)
    x, c1, c2 = jitcore.jit(fn)(a, t(3, grad=False))
    (x.sum() + c1.sum() + 2 * c2.sum()).backward()
    assert a.grad is not None


def test_multi_output_ops_whichever_outputs_are_used():
    cases = [
        lambda a: torch.max(a, 1)[0], lambda a: torch.max(a, 1), lambda a: torch.min(a, 0).values,
        lambda a: torch.var_mean(a, 1)[0], lambda a: torch.var_mean(a, 1)[1], lambda a: torch.topk(a, 2)[0],
        lambda a: torch.sort(a, 1)[0] * 2, lambda a: a.split(2, 1)[1], lambda a: a.chunk(2, 1)[0],
        lambda a: a.unbind(0)[2], lambda a: torch.std_mean(a, 0),
    ] + ([lambda a: torch.aminmax(a, dim=1)[1]] if compat.eager_has("aminmax gradient") else [])
    for fn in cases:
        grads_match(fn, t(3, 4))


def test_no_grad_around_the_call_runs_forward_only():
    a = t(3)
    jfn = jitcore.jit(lambda x: x.sin() * 2)
    with torch.no_grad():
        out = jfn(a)
    assert not out.requires_grad
    assert not jitcore.last_backward_traces(jfn)
    out = jfn(a)  # grad mode is part of the cache key: a new entry with a backward
    assert out.requires_grad and jitcore.last_backward_traces(jfn)


def test_no_grad_inside_the_function():
    def fn(a, b):
        with torch.no_grad():
            c = a * b
        return c * a + b.exp()

    grads_match(fn, t(3), t(3))


def test_detach_and_requires_grad_false_parameters():
    grads_match(lambda a, b: a.detach() * b + a.detach().sin(), t(3), t(3))
    model = torch.nn.Linear(4, 3)
    model.bias.requires_grad_(False)
    jm = jitcore.jit(model)
    jm(t(2, 4, dtype=torch.float32, grad=False)).sum().backward()
    assert model.weight.grad is not None and model.bias.grad is None


def test_double_backward_is_refused():
    a = t(3)
    out = jitcore.jit(lambda x: (x ** 3).sum())(a)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        torch.autograd.grad(out, a, create_graph=True)
    (g,) = torch.autograd.grad(out, a)  # first order still works after the refusal
    torch.testing.assert_close(g, 3 * a.detach() ** 2)


def test_jitted_function_composes_with_eager_autograd():
    a, w = t(3, 4), t(4, 2)
    y = a.exp()  # eager before and after the jitted part
    z = jitcore.jit(lambda y, w: torch.tanh(y @ w))(y, w)
    (z * 2).sum().backward()
    a2, w2 = a.detach().requires_grad_(), w.detach().requires_grad_()
    (torch.tanh(a2.exp() @ w2) * 2).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


# -- DESIGN's example --------------------------------------------------------------------------------------------
def foo(a, b):
    a = a.unsqueeze(1)
    return a + b


@pytest.mark.parametrize("n,m", [(3, 4), (5, 6), (1, 1), (2, 1)])
def test_design_unsqueeze_add(n, m):
    grads_match(foo, t(n, m), t(n, 1, m))


def test_design_unsqueeze_add_symbolic_values():
    jfn = jitcore.jit(foo, cache="symbolic values")
    for n, m in [(3, 4), (5, 6), (7, 2), (2, 9)]:
        a, b = t(n, m), t(n, 1, m)
        out = jfn(a, b)
        out.sum().backward()
        ga, gb = a.grad, b.grad
        a.grad = b.grad = None
        foo(a, b).sum().backward()
        torch.testing.assert_close(ga, a.grad)
        torch.testing.assert_close(gb, b.grad)
    assert jitcore.cache_misses(jfn) == 1
    forward, backward = str(jitcore.last_traces(jfn)[-1]), str(jitcore.last_backward_traces(jfn)[-1])
    assert "prims.shape" in forward or "shape(" in forward
    assert "prims.shape" not in backward


# -- gradcheck in float64 --------------------------------------------------------------------------------------------
def _conv(x, w):
    return F.conv2d(x, w, padding=1)


GRADCHECK = {
    "elementwise": (lambda a, b: torch.sigmoid(a) * b.tanh() + (a / (b.abs() + 1)).exp(), lambda: (t(2, 3), t(3))),
    "reductions": (lambda a: a.sum(0) + a.amax(0) + a.var(0) + a.logsumexp(0), lambda: (t(3, 4),)),
    "shape": (lambda a: a.t().reshape(2, 6).flip(0)[:, 1:5].unsqueeze(0).expand(2, 2, 4).permute(2, 0, 1),
              lambda: (t(3, 4),)),
    "indexing": (lambda a, i: a[i] + a.gather(1, i[:3].unsqueeze(1).expand(3, 4)).sum(), lambda: (t(3, 4), idx(3, 5))),
    "matmul_linear": (lambda a, w, b: F.linear(a, w, b) @ w, lambda: (t(2, 3), t(3, 3), t(3))),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: (t(3, 4), t(4), t(4))),
    "softmax": (lambda a: a.softmax(1) * a.log_softmax(0), lambda: (t(3, 4),)),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1), lambda: (t(4, 5), idx(5, 4))),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda: (t(1, 2, 3, 4), t(1, 2, 3, 4), t(1, 2, 3, 4))),
    "conv2d": (_conv, lambda: (t(1, 2, 4, 4), t(3, 2, 3, 3))),
    "embedding": (lambda i, w: F.embedding(i, w) * 2, lambda: (idx(4, 2, 3), t(4, 3))),
    "pooling": (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), lambda: (t(1, 2, 4, 4),)),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck(name):
    fn, make = GRADCHECK[name]
    assert torch.autograd.gradcheck(jitcore.jit(fn), make(), eps=1e-6, atol=1e-5)


# -- training loops -----------------------------------------------------------------------------------------------
def _train(model, batches, loss_fn, steps=5):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for i in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, *batches[i])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def _train_matches_eager(model, batches, loss_fn, tol):
    eager = copy.deepcopy(model)
    jitted = jitcore.jit(model)
    le = _train(eager, batches, loss_fn)
    lj = _train(jitted, batches, loss_fn)
    for a, b in zip(lj, le):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_mlp_adamw_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(16, 32), torch.randn(16, 32)) for _ in range(5)]
    _train_matches_eager(mlp(32, 2), batches, lambda m, x, y: F.mse_loss(m(x), y), 1e-5)


def test_block_adamw_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(2, 8, 32),) for _ in range(5)]
    _train_matches_eager(Block(GPTConfig(n_embd=32, n_head=2)), batches, lambda m, x: m(x).square().mean(), 1e-5)


def test_gpt_adamw_matches_eager():
    torch.manual_seed(0)
    cfg = GPTConfig(n_embd=32, n_head=2, n_layer=2, block_size=16, vocab_size=64)
    batches = []
    for _ in range(5):
        x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
        y[0, :3] = -1  # ignored positions
        batches.append((x, y))
    _train_matches_eager(GPT(cfg), batches, lambda m, x, y: m(x, y)[1], 1e-5)


def test_torch_func_transform_around_a_jitted_function_is_refused_clearly():
    jfn = jitcore.jit(lambda y: (y.sin() * 2).sum())
    with pytest.raises(UnsupportedError, match=r"torch\.func transform"):
        torch.func.grad(jfn)(torch.randn(3))
    with pytest.raises(UnsupportedError, match=r"torch\.func transform"), torch.no_grad():
        torch.vmap(jfn)(torch.randn(4, 3))
    torch.testing.assert_close(jfn(torch.ones(3)), (torch.ones(3).sin() * 2).sum())  # outside: runs
