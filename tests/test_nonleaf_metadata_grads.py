"""An argument that requires grad and is no leaf (x = w * 2 made by the caller), whose metadata the jitted function
changes in place (`x.unsqueeze_(0)`, `x.t_()`, ...): eager's reads of x after the change hang off the caller's x as it
becomes, so `autograd.grad(loss, x)` (x after the call) counts them. Reads after the change with a result that requires
grad are refused at trace time (issue 38: jitcore's reads ran on the input before the epilogue's replay, and that
gradient missed them or raised); every other case (reads before the change only, without grad, under no_grad, of an
argument that does not require grad) matches eager: outputs, x's shape and values after the call, and the gradients
with respect to x after the call and to the leaf w, over call sequences in every cache mode.
"""
import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES

CHANGES = {
    "unsqueeze_": (lambda x: x.unsqueeze_(0)),
    "t_": (lambda x: x.t_()),
    "transpose_": (lambda x: x.transpose_(0, 1)),
    "squeeze_": (lambda x: x.squeeze_()),
    "as_strided_": (lambda x: x.as_strided_((x.shape[1], x.shape[0]), (1, x.shape[1]))),
    "swapdims_": (lambda x: x.swapdims_(0, 1)),
}


def _shapes(name):
    return ((3, 1, 4), (3, 1, 4), (5, 1, 6)) if name == "squeeze_" else ((3, 4), (3, 4), (5, 6))


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_read_after_change_refused(cache, name):
    """The case that differed (12.0 against eager's 16.8, or autograd.grad raising): refused, naming the op, the
    argument and why."""
    change = CHANGES[name]

    def f(x):
        change(x)
        return (x * x).sum() + x.sin().sum()

    jf = jitcore.jit(f, cache=cache)
    for shape in _shapes(name):
        w = torch.randn(*shape, requires_grad=True)
        x = w * 2
        with pytest.raises(jitcore.UnsupportedError, match=rf"Tensor\.{name} of argument args\[0\].*not a leaf.*"
                                                           r"gradient with respect to the argument after the call"):
            jf(x)
        assert x.shape == w.shape  # (refused before anything ran)


def _check(f, make, cache, **options):
    jf = jitcore.jit(f, cache=cache, **options)
    for shape in make:
        torch.manual_seed(sum(shape))
        w = torch.randn(*shape, requires_grad=True)
        xe, xj = w * 2, w * 2
        oe, oj = f(xe), jf(xj)
        torch.testing.assert_close(oj, oe)
        assert xj.shape == xe.shape and xj.stride() == xe.stride()
        torch.testing.assert_close(xj, xe)
        if not oe.requires_grad:
            assert not oj.requires_grad
            continue
        loss_e = oe.sum() + (xe * 3).sum()
        loss_j = oj.sum() + (xj * 3).sum()
        ge = torch.autograd.grad(loss_e, xe, retain_graph=True)[0]
        gj = torch.autograd.grad(loss_j, xj, retain_graph=True)[0]
        torch.testing.assert_close(gj, ge)
        torch.testing.assert_close(torch.autograd.grad(loss_j, w)[0], torch.autograd.grad(loss_e, w)[0])


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_reads_before_change_only(cache, name):
    change = CHANGES[name]

    def f(x):
        y = (x * 2).sin() + x
        change(x)
        return y * 2

    _check(f, _shapes(name), cache)


def test_reads_before_change_only_inductor():
    def f(x):
        y = (x * 2).sin() + x
        x.unsqueeze_(0)
        return y * 2

    _check(f, ((3, 4), (3, 4)), "constant values", executors=["inductor"])


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_reads_after_change_without_grad(cache):
    def f(x):
        y = x * 2
        x.t_()
        with torch.no_grad():
            z = x.sum()
        return y + z + x.detach().sum()

    _check(f, ((3, 4), (3, 4), (5, 6)), cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_argument_without_grad_and_leaf_then_non_leaf(cache):
    """An argument that does not require grad runs (reads after the change included); the same function called then
    with a non-leaf that requires grad is refused, not served from the first call's entry."""
    def f(x, w):
        x.unsqueeze_(0)
        return (x * w).sum() + x.sin().sum()

    jf = jitcore.jit(f, cache=cache)
    for shape in ((3, 4), (3, 4), (5, 6)):
        torch.manual_seed(shape[0])
        w = torch.randn(shape[1], requires_grad=True)
        xe, xj = torch.randn(*shape), None
        xj = xe.clone()
        oe, oj = f(xe, w), jf(xj, w)
        torch.testing.assert_close(oj, oe)
        assert xj.shape == xe.shape
        torch.testing.assert_close(torch.autograd.grad(oj, w)[0], torch.autograd.grad(oe, w)[0])
    v = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(jitcore.UnsupportedError, match=r"Tensor\.unsqueeze_ of argument args\[0\]"):
        jf(v * 2, torch.randn(4, requires_grad=True))
