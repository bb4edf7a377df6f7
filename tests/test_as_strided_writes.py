"""Writes through `as_strided_` (issue 38): a tensor the program owns (or a contiguous argument) given any sizes and
strides over its memory is the view prims.as_strided of the tensor laid out contiguously in eager that holds that
memory; writes through it are as_strided_scatters into that tensor, and reads of it (or of other views of it) after
are eager's. Where the view's places repeat (overlapping strides), only writes of one value everywhere are followed
(fill_, zero_, `v[...] = c`); a computed value is refused clearly and counted as deliberate by tests/fuzz_long.py:
eager writes its elements one after another, so its answer depends on the order its kernel visits them. Compared
with eager over call sequences in every cache mode: outputs, the arguments after the call, gradients.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_1C52E7A
from tests.fuzz_long import deliberate
from tests.test_inplace_metadata import _randn, check

SHAPES = [_randn(3, 4), _randn(3, 4), _randn(5, 6), _randn(2, 6), _randn(4, 3, t=True)]
GRAD = [_randn(3, 4, grad=True), _randn(3, 4, grad=True), _randn(5, 6, grad=True), _randn(4, 3, t=True, grad=True)]


def _overlap_fill(x):
    """places 0, 1, 1, 2 of y; the other views of y see the fill."""
    y = x + 1
    flat = y.view(-1)
    y.as_strided_((2, 2), (1, 1))
    y.zero_()
    return flat * 1, y * 1, y.stride()


def _overlap_offset_setitem(x):
    y = x * 2
    rows = y[1:]
    torch.as_strided_(y, (2, 3), (1, 1), 2)
    y.fill_(5)
    y[0] = -1
    y[:, 1] = 7.5
    return rows * 1, y.sum(), y.storage_offset()


def _skewed_write(x):
    """strides (2, 3): no place repeats, but they do not nest (no view ops make them)."""
    y = x - 1
    other = y.t()
    y.as_strided_((2, 2), (2, 3))
    y.mul_(3)
    y[1, 0] += 10
    return other * 1, y.clone()


def _view_of_transposed(x):
    """as_strided_ of a view (y.t()) whose elements are all of y's memory: the view of y's memory."""
    y = x * 2
    v = y.t()
    v.as_strided_((3, 2), (1, 3), 1)
    v.sub_(1)
    return y, v * 1


def _transposed_resize(x):
    """resize_ of a tensor laid out transposed in eager (x * 2 of a transposed x): as_strided over its memory, which
    is its transpose's (fuzz seed 205)."""
    y = (x * 2).detach()
    y.resize_(y.shape[0])
    y.mul_(3)
    return y * 1, x


def _transposed_skewed(x):
    y = x + 1
    y.as_strided_((2, 2), (2, 3), 1)
    y.add_(y.detach())
    return y.clone()


def _argument_skewed(x):
    x.as_strided_((2, 2), (2, 3))
    x.add_(1)
    return x * 2


def _argument_overlap_fill(x):
    x.as_strided_((2, 3), (2, 1), 1)
    x[:, 1:] = 0
    return x.sum(0)


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_overlap_fill, _overlap_offset_setitem, _skewed_write, _view_of_transposed,
                                _transposed_resize, _transposed_skewed, _argument_skewed, _argument_overlap_fill])
def test_writes_through_as_strided(fn, cache):
    check(fn, SHAPES, cache)


def _grad_skewed(x):
    y = x * 2
    y.as_strided_((2, 2), (2, 3))
    y.mul_(y.detach() + 1)
    return y * 1


def _grad_overlap_read(x):
    """places repeat: each element of x gets the sum of the cotangents of its places."""
    y = x.sin()
    y.as_strided_((3, 3), (1, 2), 1)
    return y * torch.arange(9.0).reshape(3, 3)


def _grad_overlap_zero(x):
    y = x * 3
    flat = y.view(-1)
    y = y[:]
    y.as_strided_((2, 2), (1, 1))
    y.zero_()
    return flat * 1, y + 1


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_grad_skewed, _grad_overlap_read, _grad_overlap_zero])
def test_gradients(fn, cache):
    check(fn, GRAD, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_computed_write_into_repeating_places_is_refused(cache):
    """`y.add_(1)` through places 0, 1, 1, 2: eager adds twice at place 1 (one element after the other); jitcore
    refuses it, naming why, and the long fuzz run counts it as deliberate."""
    def f(x):
        y = x * 1
        y.as_strided_((2, 2), (1, 1))
        y.add_(1)
        return y

    with pytest.raises(UnsupportedError, match="depends on the order its kernel visits them") as info:
        jitcore.jit(f, cache=cache)(torch.randn(3, 4))
    assert deliberate(str(info.value))


def test_inductor():
    check(_skewed_write, SHAPES[:2], "constant values", executors=["inductor"])


@pytest.mark.parametrize("seed", [176, 205, 935, 1123])
def test_fuzz_programs_with_as_strided(seed):
    """Fuzz programs that were refused before (a write after as_strided_, seed 176; after resize_ of a transposed
    tensor, 205; of the real part of a complex tensor, 935; of a slice of a transposed tensor with gradients, 1123)
    agree with eager in every cache mode."""
    prog = generate(seed, classes=CLASSES_1C52E7A)
    assert ".as_strided_(" in prog.source or ".resize_(" in prog.source
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems and report.refused is None, report.text(prog) + f"\nrefused: {report.refused}"


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_arguments_jitcore_does_not_lay_out(cache):
    """An argument's memory beyond its elements (the caller passes `base[2:]`, as_strided_ from offset 0 of the
    storage) or laid out with gaps (`base[:, ::2]`): reads through the view are eager's (the caller's memory, read at
    run time), a write through it is refused clearly."""
    def read(x):
        x.as_strided_((2, 3), (3, 1), 0)
        return x * 2

    def write(x):
        x.as_strided_((2, 3), (3, 1), 0)
        x.add_(1)
        return x

    def gaps(x):
        x.as_strided_((2, 2), (1, 1))
        x.zero_()
        return x

    beyond = [lambda: (torch.arange(12.0)[2:],), lambda: (torch.arange(20.0)[5:],)]
    check(read, beyond, cache)
    with pytest.raises(UnsupportedError, match="as_strided"):
        jitcore.jit(write, cache=cache)(torch.arange(12.0)[2:])
    with pytest.raises(UnsupportedError, match="as_strided"):
        jitcore.jit(gaps, cache=cache)(torch.arange(24.0).reshape(4, 6)[:, ::2])


# -- memory laid out where only a replay finds it (issue 38: fuzz seeds 412, 935, 1123) -----------------------------
def _masked_rows(x):
    """x[mask]'s layout (it follows x's strides: a slice of rows, a transposed x) is replayed as x[i0, ...]."""
    rows = x[::2]
    y = rows[(rows > 0).flatten(1).any(-1)]
    y.as_strided_((2, 2), (1, 1))
    y.zero_()
    y[0, 0] = 3
    return y * 1, rows * 1


def _real_part(x):
    """the real part of a complex tensor: as_strided over view_as_real of it (places 0, 1, 2 are real, imaginary,
    real); the complex tensor sees the writes. (With a gradient eager's own backward fails: a refusal here.)"""
    z = torch.view_as_complex(torch.stack((x, x * 0.5), -1))
    r = (z * z.conj()).real
    r.as_strided_((2, 2), (1, 1))
    r.zero_()
    r[1, 1] = 2
    return r * 1, torch.view_as_real(z) * 1


def _slice_of_transposed_twice(x):
    """a slice of a tensor laid out transposed, as_strided_ twice (the second of a view whose places repeat): the
    view's places are all the slice's, so gradients through it are eager's."""
    t = (x * 2).t() * 1
    s = t[:, 1:]
    s.as_strided_((2, 2), (1, 1))
    s.as_strided_((2, 2), (1, 1))
    out = s * torch.arange(4.0).reshape(2, 2)
    s.zero_()
    return t * 1, out


def _slice_reaches_beyond(x):
    """with a gradient: the view's places go past the slice's (places 0-2 of t[1:, :2], which holds 4, 5, 8, 9, ...);
    eager's as_strided backward drops those, and so does prims.as_strided's with grad_within the slice."""
    t = x * 2
    s = t[1:, :2]
    s.as_strided_((2, 2), (1, 1))
    return s * 1


def _transposed_slice_beyond(x):
    """a slice of a tensor laid out transposed, whose new view reaches place 3 (not the slice's): read, written with
    one value, read again (fuzz seed 1123)."""
    t = x.t() * 2
    s = t[1:]
    s.as_strided_((2, 2), (1, 1))
    r = s * torch.arange(4.0).reshape(2, 2)
    s.zero_()
    return r, t * 1


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_masked_rows, _real_part, _slice_of_transposed_twice])
def test_layouts_found_by_replay(fn, cache):
    calls = [_randn(6, 3), _randn(6, 3), _randn(6, 4, t=True), _randn(6, 3, grad=True), _randn(6, 4, t=True, grad=True)]
    if fn is _real_part:
        calls = calls[:3]
    if fn is _masked_rows:
        calls = [c for c in calls if (lambda x: (x[::2] > 0).flatten(1).any(-1).sum() * x.shape[1] >= 3)(c()[0])]
    check(fn, calls, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_view_beyond_a_slice_with_grad(cache):
    check(_slice_reaches_beyond, [_randn(3, 4), _randn(3, 4, grad=True), _randn(3, 4, grad=True)], cache)
    check(_transposed_slice_beyond, [_randn(4, 3), _randn(4, 3, grad=True), _randn(5, 3, grad=True),
                                     _randn(4, 3, t=True, grad=True)], cache)
