"""Gradients through an argument written in place (issue 38 item 4), against eager: a function writes a value that
requires grad into an argument (`x[-1] = x[-1] + w.mean()`), the caller then differentiates through the function's
outputs and through x as it is after the call: with respect to x itself, to w, and to the caller's upstream tensors
(x = a * 2). A matrix of argument kinds x write kinds x ways of differentiating, in every cache mode, over call
sequences (a second call reuses the entry), plus an Inductor case.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


# -- the writes: each function takes (x, w), writes into x a value computed from w (which requires grad) -------------
def setitem_last(x, w):
    x[-1] = x[-1] + w.mean()
    return (x * 2).sum()


def add_whole(x, w):
    x.add_(w * 2)
    return (x * x).sum()


def mul_through_select(x, w):
    x[0].mul_(w)
    return x.sum() * 3


def flat_view_slice(x, w):
    x.view(-1)[:2] = w[:2] * 3
    return x.exp().sum()


def named_view(x, w):
    v = x[1:]
    v.add_(w.sin())
    return (x.cos() * w).sum(), v.sum()


def write_after_use(x, w):
    y = (x * w).sum()
    x.mul_(w)
    return y


def two_writes(x, w):
    x.add_(w)
    y = x.sin()
    x.mul_(2)
    return y.sum() + (x * w).sum()


def head_value_in_tail(x, w):
    h = w.exp()
    x.add_(h)
    return (x * h).sum()


def returns_written(x, w):
    x.add_(w)
    return x


def returns_view_of_written(x, w):
    x.add_(w)
    return x[1], (x * 3).sum()


def no_grad_write(x, w):
    with torch.no_grad():
        x[0] = w * 2
    return (x * w).sum()


def write_then_reduce_many(x, w):
    x[:, 0] = w[0] * x[:, 1]
    m = x.mean(0)
    return m, (m * w).sum(), x.max()


def view_before_write(x, w):  # (fuzz seed 590: the value written back is a dense copy of the new value)
    t = x.view(-1)
    x.view(-1)[:2] = w[:2] * 2
    return t, (x * 2).sin()


def write_through_detach(x, w):  # (recorded on d; x keeps its own history, or none)
    d = x.detach()
    d.copy_(w * 2 + d)
    return (x * 3).sum() + (d * 1).sum()


def stale_view_read(x, w):  # v made before the write: eager remakes its grad_fn from x's base (past a view x)
    v = x[1:]
    x.mul_(w)
    return (v * 3).sum() + x.sum()


def stale_view_returned(x, w):
    v = x[1:]
    x.add_(w)
    return v


def view_of_stale_view(x, w):  # u made after the write, but from v, made before it
    v = x[1:]
    x.mul_(w)
    u = v[0]
    return (u * 3).sum(), u


def fresh_view_after_write(x, w):  # made after the write: through x's own node
    x.mul_(w)
    v = x[1:]
    return (v * 3).sum(), v


def overwritten_by_a_value_read_elsewhere(x, w):  # (fuzz seed 477: x's new value was w's own proxy, so w's other
    y = w * 3  # reads ran on the caller's x)
    x[:] = y
    return (y.sin() * 2).sum() + x.sum()


WRITES = [setitem_last, add_whole, mul_through_select, flat_view_slice, named_view, write_after_use, two_writes,
          head_value_in_tail, returns_written, returns_view_of_written, no_grad_write, write_then_reduce_many,
          view_before_write, write_through_detach, stale_view_read, stale_view_returned, view_of_stale_view,
          fresh_view_after_write, overwritten_by_a_value_read_elsewhere]


# -- the arguments: x as the caller makes it; a (upstream of x) and w require grad ----------------------------------
def make(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 5 if kind.endswith("view") else 4, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(4, generator=g, dtype=torch.float64).requires_grad_()
    if kind == "plain":  # no grad
        x = a.detach().clone()
    elif kind == "nonleaf":  # requires grad, made by the caller
        x = a * 2
    elif kind == "leaf":  # a leaf that requires grad: eager refuses to write into it
        x = a.detach().clone().requires_grad_()
    elif kind == "nonleaf view":  # a strided view of a tensor the caller made (the write rebases its base too)
        x = (a * 2)[:, 1:]
    elif kind == "plain view":
        x = a.detach().clone()[:, 1:]
    else:
        raise ValueError(kind)
    return a, w, x


# -- how the caller differentiates -----------------------------------------------------------------------------------
def _flat(out):
    return [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]


def _loss(out, x, after: bool):
    g = torch.Generator().manual_seed(7)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in _flat(out) if o.requires_grad)
    if after:  # x after the call, as the caller uses it
        loss = loss + (x.sin() * torch.randn(x.shape, generator=g, dtype=x.dtype)).sum()
    return loss


def _grads(loss, targets):
    if not torch.is_tensor(loss) or not loss.requires_grad:
        return "no graph"
    try:
        return torch.autograd.grad(loss, targets, allow_unused=True)
    except RuntimeError as e:  # (eager's refusals are compared by type)
        return type(e)


HOWS = {
    "outputs wrt x": lambda out, a, w, x: _grads(_loss(out, x, False), [x]),
    "outputs and x wrt x": lambda out, a, w, x: _grads(_loss(out, x, True), [x]),
    "outputs wrt a, w": lambda out, a, w, x: _grads(_loss(out, x, False), [a, w]),
    "outputs and x wrt a, w, x": lambda out, a, w, x: _grads(_loss(out, x, True), [a, w, x]),
    "outputs and x wrt x, its base": lambda out, a, w, x: _grads(_loss(out, x, True), [x, x._base]) if
    x._base is not None else "no base",
    "backward": lambda out, a, w, x: _backward(_loss(out, x, True), a, w),
}


def _backward(loss, a, w):
    if not torch.is_tensor(loss) or not loss.requires_grad:
        return "no graph"
    try:
        loss.backward()
    except RuntimeError as e:
        return type(e)
    return a.grad, w.grad


def run(fn, kind: str, how: str, seed: int):
    """What the caller observes: the outputs, x after the call (value, requires_grad, whether it has history, whether
    its version moved) and the gradients; an error's type when the call raises."""
    a, w, x = make(kind, seed)
    v0 = x._version
    try:
        out = fn(x, w)
    except RuntimeError as e:
        return ("raised", type(e).__name__, "leaf Variable" in str(e))
    seen = (x.detach().clone(), x.requires_grad, x.grad_fn is None, x._version > v0)
    outs = [o.detach().clone() for o in _flat(out)]
    return ("ran", outs, seen, HOWS[how](out, a, w, x))


def assert_same(got, exp, where: str):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {got!r} where eager has a tensor"
        torch.testing.assert_close(got, exp, msg=lambda m: f"{where}: {m}")
    elif isinstance(exp, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(exp), f"{where}: {got!r} vs eager {exp!r}"
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, f"{where}[{i}]")
    elif isinstance(exp, type) and issubclass(exp, RuntimeError):
        # eager's backward refused (a value it saved was written afterwards); jitcore's saved a copy before the
        # write and answers, as everywhere (tests/fuzz.py compares gradients only where eager's backward ran)
        return
    else:
        assert got == exp, f"{where}: {got!r} vs eager {exp!r}"


def check(jfn, fn, kind: str, how: str, calls: int = 2):
    for seed in range(calls):  # a call sequence: the second call reuses the entry (or retraces: no caching)
        assert_same(run(jfn, kind, how, seed), run(fn, kind, how, seed), f"{fn.__name__}, x {kind}, {how}, "
                                                                            f"call {seed}")


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("kind", ["plain", "nonleaf", "leaf", "nonleaf view", "plain view"])
@pytest.mark.parametrize("fn", WRITES, ids=lambda f: f.__name__)
def test_matrix(fn, kind, cache):
    for how in HOWS:
        check(jitcore.jit(fn, cache=cache), fn, kind, how)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_grad_wrt_written_argument(cache):
    """The issue's example: the function's own use of x after the write reaches x's gradient."""
    def f(x, w):
        x[-1] = x[-1] + w.mean()
        return (x * 2).sum()

    jf = jitcore.jit(f, cache=cache)
    for _ in range(2):
        x, w = torch.zeros(3, 4), torch.randn(4, requires_grad=True)
        out = jf(x, w)
        assert x.requires_grad and x.grad_fn is not None
        (gx,) = torch.autograd.grad(out, x)
        assert torch.equal(gx, torch.full((3, 4), 2.0))


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_sizes_change(cache):
    """A second shape: the tail is guarded and run like the rest (symbolic values: the same entry)."""
    def f(x, w):
        x[1:] = x[1:] + w.sum()
        return x.softmax(-1).sum(0) * w[0]

    jf = jitcore.jit(f, cache=cache)
    for n in (3, 5, 4):
        def call(fn, n=n):
            a = torch.arange(n * 4.0).reshape(n, 4).requires_grad_()
            w = torch.linspace(-1, 1, 4).requires_grad_()
            x = a * 0.5
            out = fn(x, w)
            return [out.detach(), x.detach(), *torch.autograd.grad((out.sum() + x.sum() * 2), [x, a, w])]

        for g, e in zip(call(jf), call(f)):
            torch.testing.assert_close(g, e)


def test_two_written_arguments():
    def f(x, y, w):
        x.add_(w)
        y.mul_(w)
        return (x * y).sum()

    def call(fn):
        w = torch.randn(4, requires_grad=True, generator=torch.Generator().manual_seed(0))
        x, y = torch.ones(2, 4), torch.full((2, 4), 2.0)
        out = fn(x, y, w)
        return [out.detach(), *torch.autograd.grad(out + (x * y * 3).sum(), [x, y, w])]

    for g, e in zip(call(jitcore.jit(f)), call(f)):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_written_from_another_written_then_read(cache):
    """x's new value written into y, then y read (and x, and z from y): eager's graph runs through x, then y, then z
    (three tails, each on the callers' tensors written before it)."""
    def f(x, y, z, w):
        x.add_(w)
        y.copy_(x * 2)
        h = y.sin() + x
        z[1:] = y[1:] * w[1:]
        return (h * z).sum(), z.cos()

    def call(fn):
        torch.manual_seed(0)
        x, y, z, w = torch.zeros(4), torch.zeros(4), torch.ones(4), torch.randn(4, requires_grad=True)
        out, c = fn(x, y, z, w)
        loss = out + (c * torch.arange(4.0)).sum() + (x * y * z).sum()
        return [out.detach(), c.detach(), x, y, z, *torch.autograd.grad(loss, [x, y, z, w])]

    jf = jitcore.jit(f, cache=cache)
    for _ in range(2):
        for g, e in zip(call(jf), call(f)):
            torch.testing.assert_close(g, e)


def test_written_from_another_written_not_read():
    def f(x, y, w):
        x.add_(w)
        y.copy_(x * 2)
        return w.sum()

    def call(fn):
        x, y, w = torch.zeros(4), torch.zeros(4), torch.arange(4.0, requires_grad=True)
        fn(x, y, w)
        return [x.detach(), y.detach(), *torch.autograd.grad((x * y).sum() + y.sum(), [x, y, w])]

    for g, e in zip(call(jitcore.jit(f)), call(f)):
        torch.testing.assert_close(g, e)


def test_random_tail_keeps_eager_draws():
    """A tail that draws random numbers (dropout of the written x) and a later draw the head would make: both run in
    the tail, in eager's order."""
    def f(x, w):
        x.add_(w)
        d = torch.nn.functional.dropout(x, 0.5)
        r = torch.rand(4)
        return (d * 2).sum(), r

    def call(fn):
        torch.manual_seed(0)
        x, w = torch.ones(3, 4), torch.arange(4.0, requires_grad=True)
        out, r = fn(x, w)
        return [out.detach(), r, *torch.autograd.grad(out + x.sum(), [x, w])]

    for g, e in zip(call(jitcore.jit(f)), call(f)):
        torch.testing.assert_close(g, e)


def test_tail_shown_in_epilogue_traces():
    def f(x, w):
        x.add_(w)
        return (x * 2).sum()

    jf = jitcore.jit(f)
    jf(torch.zeros(4), torch.ones(4, requires_grad=True))
    texts = [str(t) for t in jitcore.last_epilogue_traces(jf)]  # the tail's forward and backward, the epilogue
    assert "outs = " in texts[-1] and "args[0].copy_(outs[1])" in texts[-1]
    assert "def forward" in texts[0] and "def backward" in texts[1]


def test_inductor():
    from executors import inductor_ex
    jf = jitcore.jit(head_value_in_tail, executors=[inductor_ex])
    for how in ("outputs and x wrt a, w, x", "backward"):
        check(jf, head_value_in_tail, "nonleaf", how)
    jf = jitcore.jit(stale_view_read, executors=[inductor_ex])  # (the tail reads x remade from its base)
    check(jf, stale_view_read, "nonleaf view", "outputs and x wrt x, its base")


class _Running(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 4))
        self.register_buffer("state", torch.zeros(4))

    def forward(self, x):
        self.state.add_(self.w * x.mean())
        return (self.state * x).sum()


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_module_buffer(cache):
    """A buffer written with a value from a parameter, then read: the buffer after the call carries the write's
    history, and the forward's own use of it reaches its gradient."""
    def call(model, fn, step):
        x = torch.arange(4.0) + step
        out = fn(x)
        loss = out + (model.state ** 2).sum()
        gs, gw = torch.autograd.grad(loss, [model.state, model.w])
        return [out.detach(), model.state.detach().clone(), gs, gw]

    eager, jitted = _Running(), _Running()
    jm = jitcore.jit(jitted, cache=cache)
    for step in range(3):
        for g, e in zip(call(jitted, jm, step), call(eager, eager, step)):
            torch.testing.assert_close(g, e)
        eager.state.detach_(), jitted.state.detach_()  # (the next step starts from the values, as a training loop)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_view_of_input_written_in_a_later_tail(cache):
    """A view of y returned, y written through it with a value from x's new value (fuzz seed 147): the view is made
    by the tail that computes y's new value, so it is the same view of the caller's y, as eager's."""
    def f(x, y, w):
        x.mul_(w.exp().mean())
        v = y[1:]
        v.add_(x.mean())
        return v, (y * 2).sin()

    def call(fn):
        x, y, w = torch.ones(3), torch.zeros(4), torch.linspace(-1, 1, 3).requires_grad_()
        v, t = fn(x, y, w)
        assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        grads = torch.autograd.grad(v.sum() * 3 + (t * torch.arange(4.0)).sum() + (y * x.sum()).sum(), [x, y, w])
        with torch.no_grad():
            v[0] = 7.0  # (reaches y)
        return [v.detach(), t.detach(), x, y, *grads]

    jf = jitcore.jit(f, cache=cache)
    for _ in range(2):
        for g, e in zip(call(jf), call(f)):
            torch.testing.assert_close(g, e)
