"""torch.autograd.Function subclasses written by the user, called inside a jitted function: the forward runs as eager
runs it and the gradient is the one the user's backward computes (jitcore/ops/opaque.py user_function_op), not the
derivative of the forward's ops. Eager is the oracle: outputs, requires_grad, gradients, over sequences of calls in
every cache mode."""
from __future__ import annotations

import pytest
import torch

import jitcore
from executors import inductor_ex, torch_ex
from tests.fuzz import CACHE_MODES


class ScaledSquare(torch.autograd.Function):
    """A backward that is not the forward's derivative (3x instead of 2x): only running the user's backward gives it."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x * ctx.k, None


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class DropoutTwice(torch.autograd.Function):
    """Draws a mask in its forward and reads it in its backward: recomputing the forward must draw the same mask."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask * 2

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask * 2


class SortWithIndices(torch.autograd.Function):
    """Two outputs, one of them marked non-differentiable (integer indices)."""

    @staticmethod
    def forward(ctx, x):
        values, idx = torch.sort(x, -1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, gv, gi):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(gv).scatter(-1, idx, gv) * 0.5


class SetupContextCube(torch.autograd.Function):
    """The forward/setup_context form (no ctx in forward)."""

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x  # (not 3x^2: the user's own)


def f_scaled(x, k):
    return ScaledSquare.apply(x, k).sum(0) + x.sum(0)


def f_ste(x):
    return (StraightThrough.apply(x * 4) / 4).tanh()


def f_dropout(x):
    return DropoutTwice.apply(x.sin()).cos()


def f_sort(x):
    values, idx = SortWithIndices.apply(x)
    return values * 2, idx


def f_setup(x):
    return SetupContextCube.apply(x).sum(-1)


CASES = {"scaled": (f_scaled, True), "ste": (f_ste, False), "dropout": (f_dropout, False),
         "sort": (f_sort, False), "setup_context": (f_setup, False)}


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


def _both(fn, jfn, args, jargs, seed):
    """Eager's and the jitted outputs from one random state, compared (values and requires_grad)."""
    torch.manual_seed(seed)
    want = _outputs(fn(*args))
    torch.manual_seed(seed)
    got = _outputs(jfn(*jargs))
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
        assert g.requires_grad == w.requires_grad, (seed, w.requires_grad, g.requires_grad)
    return want, got


def _check(fn, jfn, with_k: bool, calls=((3, 4), (3, 4), (5, 4), (3, 4))):
    for i, shape in enumerate(calls):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i), requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        args, jargs = ((x, 1.5 + i), (xj, 1.5 + i)) if with_k else ((x,), (xj,))
        want, got = _both(fn, jfn, args, jargs, 100 + i)
        loss_w = sum((w.float() * 1.25).sum() for w in want if w.requires_grad)
        loss_g = sum((g.float() * 1.25).sum() for g in got if g.requires_grad)
        loss_w.backward()
        loss_g.backward()
        torch.testing.assert_close(xj.grad, x.grad, msg=lambda m, i=i: f"call {i}: {m}")
        with torch.no_grad():  # (a call under no_grad between the training calls, on the same arguments)
            _, got = _both(fn, jfn, args, jargs, 200 + i)
        assert not any(g.requires_grad for g in got)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_users_backward_gives_the_gradient(case, mode):
    fn, with_k = CASES[case]
    _check(fn, jitcore.jit(fn, cache=mode), with_k)


@pytest.mark.parametrize("case", ["scaled", "dropout"])
def test_with_inductor_regions_around_it(case):
    fn, with_k = CASES[case]
    _check(fn, jitcore.jit(fn, executors=[inductor_ex, torch_ex]), with_k, calls=((3, 4), (3, 4)))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_without_grad_it_runs_forward_only(mode):
    jf = jitcore.jit(f_scaled, cache=mode)
    x = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        got, want = jf(x, 2.0), f_scaled(x, 2.0)
    torch.testing.assert_close(got, want)
    assert not got.requires_grad


def test_the_printed_program_calls_it_and_its_backward_recomputes_it():
    jf = jitcore.jit(f_scaled)
    jf(torch.randn(3, 4, requires_grad=True), 2.0)[0].sum().backward()
    forward, backward = str(jitcore.last_traces(jf)[-1]), str(jitcore.last_backward_traces(jf)[-1])
    assert "method ScaledSquare.apply" in forward and "with_rng_state(" in forward  # (its draws, for the replay)
    assert "opaque_vjp_replay(" in backward


class WithNumber(torch.autograd.Function):
    """Outputs a number beside its tensors."""

    @staticmethod
    def forward(ctx, x, n: int):
        ctx.n = n
        return x * n, x.sum(), n + 1

    @staticmethod
    def backward(ctx, g1, g2, g3):
        return g1 * ctx.n + g2 * 0.5, None


class WritesItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


def f_number(x):
    a, b, n = WithNumber.apply(x, 3)
    return a * n + b


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_a_number_among_its_outputs(mode):
    _check(f_number, jitcore.jit(f_number, cache=mode), False)


@pytest.mark.parametrize("mode", ["constant values", "no caching"])
def test_one_writing_its_input_is_refused_where_its_gradient_is_needed(mode):
    """ctx.mark_dirty: the backward would run it again on the written value, so it is refused, not differentiated
    wrongly; without grad it runs."""
    def f(x):
        return WritesItsInput.apply(x.clone()) * 3

    jf = jitcore.jit(f, cache=mode)
    with pytest.raises(jitcore.UnsupportedError, match="mark_dirty"):
        jf(torch.randn(2, 3, requires_grad=True))
    x = torch.randn(2, 3)
    torch.testing.assert_close(jf(x), f(x))


class _UsesGlobalLinear(torch.autograd.Function):
    """A Function whose forward reads a module from outside (its parameters are not apply()'s arguments)."""

    @staticmethod
    def forward(ctx, x):
        return _GLOBAL_LINEAR(x) * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


_GLOBAL_LINEAR = torch.nn.Linear(4, 4)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_function_reading_a_module_from_outside_under_autocast_is_refused_clearly(requires_grad):
    """Under autocast its outputs were inferred on fake tensors, which met the module's real parameters: an
    internal AssertionError from FakeTensorMode. Now a refusal naming the user's line and what to pass instead."""
    def f(x):
        return _UsesGlobalLinear.apply(x).sum()

    x = torch.randn(2, 4, requires_grad=requires_grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        f(x)  # (eager runs it)
        with pytest.raises(jitcore.UnsupportedError, match="apply") as info:
            jitcore.jit(f)(x)
    assert "test_custom_function.py" in str(info.value)
