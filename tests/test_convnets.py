"""Convolutional networks trained with the torch executor against eager: the ports of benchmarks/convnet_models.py
over SGD steps (losses, gradients, parameters, BatchNorm running stats), BatchNorm's modes, in-place activations,
and the gradient ops whose torch executor kernel is aten's backward kernel: their torch-level bodies (what a fusion
executor fuses) equal the kernels.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import jitcore
from benchmarks.convnet_models import CONVNETS
from jitcore.ops import ltorch
from tests.helpers import assert_matches_torch

aten = torch.ops.aten


def _sgd_steps(model, call, batches, lr=0.05):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out = []
    for i, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(100 + i)  # dropout draws
        loss = F.cross_entropy(call(x), y)
        loss.backward()
        out.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        opt.step()
    return out


@pytest.mark.parametrize("name", list(CONVNETS))
def test_convnet_training_steps_match_eager(name):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (big models on a shared machine: threads only contend)
    try:
        _training_steps_match_eager(name)
    finally:
        torch.set_num_threads(threads)


def _training_steps_match_eager(name):
    torch.manual_seed(0)
    model = CONVNETS[name](num_classes=10).double()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64), torch.randint(0, 10, (2,), generator=g))
               for _ in range(2)]
    jm = jitcore.jit(twin)
    expected, got = _sgd_steps(model, model, batches), _sgd_steps(twin, jm, batches)
    for (le, ge), (lj, gj) in zip(expected, got):
        torch.testing.assert_close(lj, le, rtol=1e-9, atol=1e-9)
        for a, b in zip(gj, ge):
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)
    for a, b in zip(twin.state_dict().values(), model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert jitcore.cache_misses(jm) == 1


def test_float32_batch_norm_runs_eagers_kernels_bitwise():
    """Same kernels as eager (native_batch_norm, its backward, threshold_backward, max_pool2d_with_indices): the
    same bits, and the printed programs name them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                          nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 4, 1))
    twin = copy.deepcopy(model)
    jm = jitcore.jit(twin)
    x = torch.randn(4, 3, 16, 16)
    for _ in range(2):
        e, j = model(x), jm(x)
        e.square().sum().backward()
        j.square().sum().backward()
        assert torch.equal(e, j)
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p.grad, q.grad)
        for a, b in zip(model.buffers(), twin.buffers()):
            assert torch.equal(a, b)
    fwd, bwd = str(jitcore.last_traces(jm)[-1]), str(jitcore.last_backward_traces(jm)[-1])
    # the kernel updates the module's running stats itself, as eager's does: nothing is copied back after the call
    assert "torchex.batch_norm_train_update(" in fwd and "max_pool2d_with_indices" in fwd
    assert not jitcore.last_epilogue_traces(jm)
    for kernel in ("native_batch_norm_backward(", "threshold_backward(", "max_pool2d_backward("):
        assert kernel in bwd


def _close(got, expected, reference):
    """float32/64: got equals expected (eager) closely. bfloat16: eager's own rounding differs, so got must be at
    least about as close to the float64 reference as eager is."""
    if got.dtype != torch.bfloat16:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        return
    err_got, err_eager = (got.double() - reference).abs(), (expected.double() - reference).abs()
    scale = reference.abs().max().item() + 1.0
    assert err_got.max().item() <= 2 * err_eager.max().item() + 0.01 * scale, (got, expected, reference)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", ["train", "eval", "no_running_stats", "no_affine", "1d", "no_grad"])
def test_batch_norm_modes_against_eager(kind, dtype):
    torch.manual_seed(0)
    shape = (6, 5) if kind == "1d" else (4, 5, 3, 3)
    cls = nn.BatchNorm1d if kind == "1d" else nn.BatchNorm2d
    bn = cls(5, affine=kind != "no_affine", track_running_stats=kind != "no_running_stats").to(dtype)
    if bn.affine:
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    bn.train(kind != "eval")
    twin, ref = copy.deepcopy(bn), copy.deepcopy(bn).double()
    jm = jitcore.jit(twin)
    for step in range(3):
        x = (torch.randn(shape) * (step + 1) + step).to(dtype)
        xs = [x.clone().double() if m is ref else x.clone() for m in (bn, jm, ref)]
        with torch.set_grad_enabled(kind != "no_grad"):
            outs = [m(xi.requires_grad_(kind != "no_grad")) for m, xi in zip((bn, jm, ref), xs)]
        if kind != "no_grad":
            for o in outs:
                o.mul(torch.arange(o.numel(), dtype=o.dtype).reshape(o.shape)).sum().backward()
            _close(xs[1].grad, xs[0].grad, xs[2].grad)
            for p, q, r in zip(bn.parameters(), twin.parameters(), ref.parameters()):
                _close(q.grad, p.grad, r.grad)
        _close(outs[1], outs[0], outs[2])
        for a, b, r in zip(bn.buffers(), twin.buffers(), ref.buffers()):
            _close(b, a, r)


@pytest.mark.parametrize("act", ["relu", "silu", "hardswish", "hardsigmoid"])
def test_inplace_activation_of_an_argument(act):
    """F.<act>(x, inplace=True) on an argument: the caller's tensor holds the result after the call, as in eager,
    and the gradient is the activation's own."""
    fn = getattr(F, act)

    def f(w, x):
        fn(x, inplace=True)
        y = x * w
        fn(y, inplace=True)
        return y.sum() + x.sum()

    jf = jitcore.jit(f)
    base = torch.tensor([-4.0, -3.0, -1.0, 0.0, 0.5, 3.0, 4.0])
    for scale in (1.0, 2.0):
        we, wj = torch.full((7,), scale, requires_grad=True), torch.full((7,), scale, requires_grad=True)
        xe, xj = base.clone(), base.clone()
        oe, oj = f(we, xe), jf(wj, xj)
        oe.backward()
        oj.backward()
        torch.testing.assert_close(oj, oe)
        torch.testing.assert_close(xj, xe)
        torch.testing.assert_close(wj.grad, we.grad)


# -- the torch-level bodies of the gradient ops equal aten's kernels ------------------------------------------------
_X = torch.tensor([[-4.0, -3.0, -2.5, -0.0], [0.0, 1e-3, 2.9, 3.0], [3.5, float("nan"), -1.0, 7.0]])
_G = torch.linspace(-2.0, 2.0, 12).reshape(3, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["silu_backward", "hardswish_backward", "hardsigmoid_backward"])
def test_elementwise_grad_op_bodies_equal_aten(name, dtype):
    g, x = _G.to(dtype), _X.to(dtype)
    assert_matches_torch(getattr(ltorch, name), getattr(aten, name), g, x)


@pytest.mark.parametrize("threshold", [0, 0.5])
def test_threshold_backward_body_equals_aten(threshold):
    assert_matches_torch(lambda g, x: ltorch.threshold_backward(g, x, threshold),
                         lambda g, x: aten.threshold_backward(g, x, threshold), _G, _X)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, True)])
def test_batch_norm_backward_body_equals_aten(mask, dtype):
    torch.manual_seed(0)
    x, g, w = torch.randn(4, 3, 5, 5, dtype=dtype), torch.randn(4, 3, 5, 5, dtype=dtype), torch.rand(3, dtype=dtype)
    _, mean, rstd = torch.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)

    def expected(g, x, w, mean, rstd):
        return aten.native_batch_norm_backward(g, x, w, None, None, mean, rstd, True, 1e-5, list(mask))

    assert_matches_torch(lambda g, x, w, mean, rstd: ltorch.batch_norm_backward(g, x, w, mean, rstd, list(mask)),
                         expected, g, x, w, mean, rstd)


def test_batch_norm_train_body_equals_native_batch_norm():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 5, dtype=torch.float64), torch.rand(3, dtype=torch.float64), torch.randn(3).double()
    rm, rv = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64)

    def expected(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        return (*torch.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5), rm, rv)

    assert_matches_torch(lambda *a: ltorch.batch_norm_train(*a, 0.1, 1e-5), expected, x, w, b, rm, rv)


@pytest.mark.parametrize("args", [(3, 2, 1, 1, False), (2, 2, 0, 1, True), (3, 1, 1, 2, False)])
def test_max_pool2d_backward_body_equals_aten(args):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9)
    out, idx = aten.max_pool2d_with_indices(x, *args)
    g = torch.randn(out.shape)
    assert_matches_torch(lambda g, x, idx: ltorch.max_pool2d_backward(g, x, *args, idx),
                         lambda g, x, idx: aten.max_pool2d_with_indices_backward(g, x, *args, idx), g, x, idx)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("output_size", [1, (1, 1), (None, 1), 2])
def test_adaptive_avg_pool2d_gradient_like_eager(output_size, dtype, cache):
    """Global average pooling's gradient is eager's mean backward (expand, divide by the count): the same bits; a
    squeeze-excite gate over it and other output sizes (the decomposition) close to eager."""
    def f(x):
        s = F.adaptive_avg_pool2d(x, output_size)
        return x * torch.sigmoid(s) if s.shape[-2:] == (1, 1) else s.sin()

    jf = jitcore.jit(f, cache=cache)
    for shape in ((2, 3, 4, 5), (3, 6, 6), (2, 3, 7, 5)):
        x = torch.randn(*shape, dtype=dtype, requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        e, j = f(x), jf(xj)
        g = torch.randn_like(e)
        e.backward(g)
        j.backward(g)
        if output_size in (1, (1, 1)):
            gx = jitcore.jit(lambda x: F.adaptive_avg_pool2d(x, output_size), cache=cache)
            xe, xg = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
            ge = torch.randn(*shape[:-2], 1, 1, dtype=dtype)
            F.adaptive_avg_pool2d(xe, output_size).backward(ge)
            gx(xg).backward(ge)
            assert torch.equal(xg.grad, xe.grad)
            lines = [ln for ln in str(jitcore.last_backward_traces(gx)[-1]).splitlines() if " = " in ln
                     and not ln.lstrip().startswith("#")]
            assert not any("reshape" in ln for ln in lines) and sum("torch.div(" in ln for ln in lines) == 1
        tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(j, e, **tol)
        torch.testing.assert_close(xj.grad, x.grad, **tol)


# -- max pooling through a channels-last copy (executors/torchex_pool.py) ------------------------------------------
def _pool_input(rng, shape, dtype, kind, layout):
    x = torch.randn(shape, generator=rng)
    if kind == "ties":  # relu'd (many zeros) and small integers: windows with equal maxima
        x = torch.where(x > 0, torch.round(x * 2), torch.zeros(()))
    elif kind == "nonfinite":
        x = torch.where(x > 1.2, float("nan"), torch.where(x < -1.4, float("-inf"), x))
    x = x.to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    return x


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
def test_max_pool2d_through_channels_last_is_bitwise_eager(mode):
    """Seeded call sequences of max pooling (with and without indices, grad on and off, ties, NaN and -inf, dtypes,
    layouts, window shapes): outputs, indices, strides and input gradients equal eager's bit for bit, and the trace
    names the channels-last kernel exactly where the input's sizes make it pay."""
    from executors.torchex_pool import _pays

    rng = torch.Generator().manual_seed(7)
    shapes = [(8, 16, 16, 16), (4, 8, 32, 32), (2, 3, 64, 64), (2, 32, 4, 4), (8, 24, 12, 20)]
    windows = [(3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 1, 1, 2, True), (2, 3, 1, 1, True)]

    def fn(x, k, s, p, d, ceil, indices):
        y = x * 1.5
        if indices:
            out, idx = F.max_pool2d(y, k, s, p, d, ceil, return_indices=True)
            return out, idx
        return F.max_pool2d(y, k, s, p, d, ceil) + 1

    jfn = jitcore.jit(fn, cache=mode)
    for call in range(24):
        shape = shapes[call % len(shapes)]
        dtype = (torch.float32, torch.bfloat16, torch.float64, torch.float16)[call % 4]
        layout = ("contiguous", "contiguous", "channels_last", "transposed")[call // 6 % 4]
        x = _pool_input(rng, shape, dtype, ("randn", "ties", "nonfinite")[call % 3], layout)
        window, indices, grad = windows[call % 4], call % 5 == 0, call % 2 == 0
        xe, xj = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
        expected, got = fn(xe, *window, indices), jfn(xj, *window, indices)
        expected, got = (expected, got) if indices else ((expected,), (got,))
        for e, g in zip(expected, got):
            assert e.dtype == g.dtype and e.stride() == g.stride(), (call, e.stride(), g.stride())
            assert torch.equal(e.nan_to_num(9.0), g.nan_to_num(9.0)), call
        if grad:
            seed = torch.randn(expected[0].shape, generator=rng).to(dtype)
            (ge,), (gj,) = torch.autograd.grad(expected[0], xe, seed), torch.autograd.grad(got[0], xj, seed)
            assert torch.equal(ge, gj) and ge.stride() == gj.stride(), call
        named = "_channels_last(" in str(jitcore.last_traces(jfn)[-1])
        # chosen by the input's sizes (static ones only); on another layout the kernel runs eager's call as given
        assert named == (_pays(x) and mode != "symbolic values"), (call, shape, dtype)
