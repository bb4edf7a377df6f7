"""Values written back into inputs, computed in those inputs' own memory (transforms/memory.write_into_inputs):
BatchNorm's running stats updated by aten's kernel as in eager, counters by out= lines; and the cases where the
program must keep copying (the old value still read or saved, the new value returned). Eager is the oracle."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import jitcore

CACHES = ["constant values", "symbolic values", "no caching"]


def _epilogue(jm) -> str:
    return "\n".join(str(t) for t in jitcore.last_epilogue_traces(jm))


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("momentum", [0.1, 0.3])
def test_batch_norm_updates_running_stats_in_place_like_eager(cache, momentum):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6, momentum=momentum),
                          nn.ReLU(inplace=True), nn.Conv2d(6, 4, 1), nn.BatchNorm2d(4, momentum=momentum))
    twin = copy.deepcopy(model)
    jm = jitcore.jit(twin, cache=cache)
    stats = list(twin.buffers())
    addresses = [b.data_ptr() for b in stats]
    for step, (n, grad) in enumerate([(4, True), (4, True), (3, False), (5, True), (4, True)]):
        x = torch.randn(n, 3, 8, 8)
        with torch.set_grad_enabled(grad):
            e, j = model(x), jm(x)
        assert torch.equal(e, j), step
        if grad:
            e.square().sum().backward()
            j.square().sum().backward()
            for p, q in zip(model.parameters(), twin.parameters()):
                assert torch.equal(p.grad, q.grad), step
        for a, b in zip(model.buffers(), twin.buffers()):
            assert torch.equal(a, b), step
    assert [b.data_ptr() for b in twin.buffers()] == addresses  # the module's own tensors, updated
    assert all(a is b for a, b in zip(stats, twin.buffers()))
    assert "batch_norm_train_update(" in str(jitcore.last_traces(jm)[-1])
    assert "running_mean" not in _epilogue(jm) and "num_batches_tracked" not in _epilogue(jm)
    twin.eval()
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(jm(x), model(x))  # (eval mode runs the decomposition: close, not bitwise)
    for a, b in zip(model.buffers(), twin.buffers()):
        assert torch.equal(a, b)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.calls.add_(1)
        self.total.add_(x.detach().sum(0))
        return self.lin(x) * self.calls


@pytest.mark.parametrize("cache", CACHES)
def test_counters_written_by_out_lines(cache):
    torch.manual_seed(0)
    model = Counter()
    twin = copy.deepcopy(model)
    jm = jitcore.jit(twin, cache=cache)
    for n in (2, 2, 5):
        x = torch.randn(n, 3)
        e, j = model(x), jm(x)
        torch.testing.assert_close(j, e)
        e.sum().backward()
        j.sum().backward()
        torch.testing.assert_close(twin.lin.weight.grad, model.lin.weight.grad)
        assert twin.calls.item() == model.calls.item()
        torch.testing.assert_close(twin.total, model.total)
    fwd = str(jitcore.last_traces(jm)[-1])
    # total is computed into its buffer; calls is read after its increment, so that value stays a fresh tensor
    assert "out=t" in fwd and "total" not in _epilogue(jm) and "calls" in _epilogue(jm)


def _copy_saved(x, buf):
    y = x * buf.clone()
    buf.mul_(2)
    return y


def _product_saved(x, buf):
    y = x * (buf * 1)
    buf.mul_(2)
    return y.sin() * buf


@pytest.mark.parametrize("f", [_copy_saved, _product_saved])
def test_old_value_saved_for_backward_is_not_overwritten(f):
    """The gradient reads the buffer's value before the write (eager saves a copy of it)."""

    x = torch.randn(4, requires_grad=True)
    buf_e = torch.randn(4)
    buf_j = buf_e.clone()
    jf = jitcore.jit(f)
    for _ in range(3):
        xe, xj = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
        e, j = f(xe, buf_e), jf(xj, buf_j)
        torch.testing.assert_close(j, e)
        e.sum().backward()
        j.sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad)
        torch.testing.assert_close(buf_j, buf_e)


@pytest.mark.parametrize("cache", CACHES)
def test_written_input_returned_or_viewed(cache):
    def returned(x, buf):
        buf.add_(x)
        return buf, buf * 2

    def viewed(x, buf):
        v = buf.view(2, 2)
        buf.add_(x)
        return v * 3, buf.sum()

    def read_after(x, buf):
        old = buf.clone()
        buf.copy_(x * 2)
        return old + buf

    for fn in (returned, viewed, read_after):
        jf = jitcore.jit(fn, cache=cache)
        buf_e = torch.randn(4)
        buf_j = buf_e.clone()
        for _ in range(3):
            x = torch.randn(4)
            for e, j in zip(fn(x, buf_e), jf(x, buf_j)) if fn is not read_after else [(fn(x, buf_e), jf(x, buf_j))]:
                torch.testing.assert_close(j, e)
            torch.testing.assert_close(buf_j, buf_e)


def test_input_written_twice_in_one_call():
    """Two BatchNorm calls of one module in a forward: the second update reads the first's result."""
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(3)
    twin = copy.deepcopy(bn)
    jm = jitcore.jit(lambda x: twin(twin(x) * 2))
    for _ in range(3):
        x = torch.randn(5, 3)
        torch.testing.assert_close(jm(x), bn(bn(x) * 2))
        for a, b in zip(bn.buffers(), twin.buffers()):
            torch.testing.assert_close(b, a)


@pytest.mark.parametrize("cache", CACHES)
def test_write_that_carries_a_gradient_keeps_its_history(cache):
    """buf.add_(x) with x requiring grad: eager's buf then requires grad and has history; the epilogue's copy gives
    the caller's tensor that history, so this write is not done inside the program."""
    def f(x, buf):
        buf.add_(x)
        return (x * 2).sum()

    jf = jitcore.jit(f, cache=cache)
    for n in (3, 3, 4):
        x = torch.randn(n)
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        be = torch.randn(n)
        bj = be.clone()
        e, j = f(xe, be), jf(xj, bj)
        assert bj.requires_grad and bj.grad_fn is not None
        (e + (be * be).sum()).backward()
        (j + (bj * bj).sum()).backward()
        torch.testing.assert_close(bj, be)
        torch.testing.assert_close(xj.grad, xe.grad)


@pytest.mark.parametrize("cache", CACHES)
def test_non_contiguous_input_written_then_read(cache):
    """A transposed input written and then read again: the caller's tensor after the call, and the result, as
    eager's."""
    def f(x, buf):
        buf.mul_(2)
        return buf.reshape(-1) + x

    jf = jitcore.jit(f, cache=cache)
    for _ in range(3):
        x = torch.randn(6)
        be = torch.randn(3, 2).t()
        bj = be.t().clone().t()  # the same values, transposed like be
        torch.testing.assert_close(jf(x, bj), f(x, be))
        torch.testing.assert_close(bj, be)
        assert bj.stride() == be.stride()
