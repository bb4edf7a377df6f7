"""`y.as_strided_(...)` of a tensor that requires grad while other tensors view it (issue 38; fuzz seeds 659, 748,
1261, 1389): eager's autograd then replays each of those views over y's new strides, so a view read after sends its
gradient only to the places of y's new view (each once). jitcore remakes each such view as prims.as_strided of y's
memory with grad_within the new view; writes into those views at places the new view holds once each (y laid out
contiguously) are followed; other writes into them, views made under no_grad and pieces of split/unbind are refused
clearly. Compared with eager over call sequences in every cache mode: outputs, arguments after the call (values,
layout, `_version`), gradients.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_1C52E7A
from tests.test_inplace_metadata import _randn, check

GRAD = [_randn(3, 4, grad=True), _randn(3, 4, grad=True), _randn(5, 6, grad=True), _randn(4, 3, t=True, grad=True),
        _randn(3, 4)]


def _whole_view_read_after(x):
    """t[:] has 12 places, the new view 3 (0, 1, 1, 2): only those get t[:]'s gradient (fuzz seed 659)."""
    t = x * 1
    v = t[:]
    t.as_strided_((2, 2), (1, 1))
    return v.reshape(-1)[:2] * 1, t * torch.arange(4.0).reshape(2, 2), v * 2


def _slice_then_write_base(x):
    """a slice read after a write through the new strides: the write shows, the gradient reaches places 4, 5 only."""
    t = x.sin()
    v = t[1:]
    t.as_strided_((2, 2), (4, 1))
    t.mul_(3)
    return v * 1, t * 1


def _flat_and_zero(x):
    """the view read before and after a zero_ through the new strides (fuzz seed 748)."""
    t = x * 2
    flat = t.reshape(-1)
    early = flat * 1
    t.as_strided_((2, 2), (1, 2), 1)
    t.zero_()
    return early, flat * 1, t.reshape(-1)[:2] * 1


def _views_of_views(x):
    """v and a view of v, both made before (fuzz seed 1389: a view of the transposed memory)."""
    t = x - 1
    v = t.view(t.shape)
    w = v[:, 1]
    t.as_strided_((2, 2), (1, 2))
    t.swapaxes_(0, 1)
    return v * 1, w * 3, t.reshape(-1)[:2] * 1


def _inside_the_new_view(x):
    """a view whose places are all the new view's: its gradient is the one it had."""
    t = x * 3
    v = t.reshape(-1)[1:3]
    t.as_strided_((2, 2), (1, 1))
    return v * 1, t * 1


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_whole_view_read_after, _slice_then_write_base, _flat_and_zero, _views_of_views,
                                _inside_the_new_view])
def test_views_read_after(fn, cache):
    check(fn, GRAD, cache)


def _argument(x):
    """(a read of x itself after is refused by another rule: tests/test_inplace_metadata.py)"""
    v = x[1:]
    x.as_strided_((2, 3), (1, 2))
    return v * 2


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_argument_that_requires_grad(cache):
    """x a non-leaf argument that requires grad: the caller sees the new strides and eager's version counter."""
    check(_argument, [_randn(3, 4, nonleaf=True), _randn(3, 4, nonleaf=True), _randn(5, 6, nonleaf=True)], cache)
    jfn = jitcore.jit(_argument, cache=cache)
    for make in (_randn(3, 4, nonleaf=True), _randn(4, 4, nonleaf=True)):
        (a,), (b,) = make(), make()
        _argument(a), jfn(b)
        assert (b.shape, b.stride(), b._version) == (a.shape, a.stride(), a._version)


def _write_into_old_view(x):
    """place 5 is not one of the new view's (0-3): eager's backward replays the write over the new strides."""
    t = x.cos()
    v = t.reshape(-1)
    t.as_strided_((2, 2), (1, 2))
    v[5] = 3
    return v * 2


def _writes_within(x):
    """writes through views made before, at places the new view holds once each (fuzz seed 1261: `v[0] = 3`):
    their gradients are eager's."""
    t = x * 2
    v = t.reshape(-1)
    w = v[:2]
    t.as_strided_((2, 2), (1, 2))
    v[:4].mul_(x.reshape(-1)[:4] + 1)
    w.zero_()
    v[3] = x[0, 0] * 7
    return v * 1, t * 1, w * 1


def _write_with_gaps(x):
    """new strides (4, 1) from 1 (places 1, 2, 5, 6): a write into places 1, 2 of a row made before, and a copy into
    a transposed view's corner (of a tensor laid out transposed, eager's backward fails: refused)."""
    t = x.sin()
    v = t[0:2]
    u = t.t()
    t.as_strided_((2, 2), (4, 1), 1)
    v[0, 1:3].add_(x[0, :2] * 3)
    u[1:3, 0].copy_(x[1, 1:3].exp())
    return v * 1, t * 1, u * 2


def _split_piece(x):
    t = x * 2
    a, _b = t.split(2, 1)
    t.as_strided_((2, 2), (1, 2))
    return a * 1, t * 1


def _no_grad_view(x):
    t = x * 2
    with torch.no_grad():
        v = t[1:]
    t.as_strided_((2, 2), (1, 2))
    return v * 1, t * 1


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_writes_into_views_made_before(cache):
    """(of x laid out transposed, _writes_within's reshape is a copy: nothing views t)"""
    check(_writes_within, GRAD, cache)
    check(_write_with_gaps, GRAD[:3], cache)
    with pytest.raises(UnsupportedError, match="a write into a view made before"):
        jitcore.jit(_write_with_gaps, cache=cache)(GRAD[3]()[0])


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize(("fn", "match"), [(_write_into_old_view, "a write into a view made before"),
                                           (_split_piece, "made by split"), (_no_grad_view, "under no_grad")])
def test_refused_clearly(fn, match, cache):
    """A write into a view made before at places the new view does not hold (eager's backward replays it there),
    a piece of split and a view made under no_grad (eager refuses reads of them after): refused, naming why; without
    gradients they run as eager."""
    with pytest.raises(UnsupportedError, match=match):
        jitcore.jit(fn, cache=cache)(torch.randn(3, 4, requires_grad=True))
    check(fn, [_randn(3, 4), _randn(3, 4)], cache)


def test_inductor():
    check(_slice_then_write_base, GRAD[:2], "constant values", executors=["inductor"])


@pytest.mark.parametrize("seed", [659, 1261, 1389])
def test_fuzz_programs(seed):
    """Fuzz programs that were refused before agree with eager in every cache mode."""
    prog = generate(seed, classes=CLASSES_1C52E7A)
    assert ".as_strided_(" in prog.source
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems and report.refused is None, report.text(prog) + f"\nrefused: {report.refused}"
