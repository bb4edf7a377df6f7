"""In-place metadata changes (`x.unsqueeze_(0)`, `squeeze_`, `t_`, `transpose_`, `swapdims_`/`swapaxes_`,
`as_strided_`, `resize_`/`resize_as_`) against eager, over call sequences in every cache mode (and one Inductor case):
outputs (values, sizes, strides, identity of a returned argument), the arguments after the call (sizes, strides,
offset, values, autograd state) and gradients. On an intermediate the tensor becomes the view, with eager's aliasing
(`y = x.view(-1); x.t_(); y.add_(1)`); on an argument the caller's tensor changes the same way. A resize_ that grows
is refused (eager's new elements are uninitialized memory).
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check


def _snapshot(t, layout=False):
    """What is compared of a tensor: values, sizes, autograd state, and of an argument its strides and storage offset
    (an output the program computes has memory of its own, laid out as the executor makes it)."""
    return (t.detach().clone(), t.shape, (t.stride(), t.storage_offset()) if layout else None, t.requires_grad,
            t.grad_fn is None)


def _run(fn, args):
    """fn(*args) (outputs, the arguments as they are after, the leaves' gradients), or the exception it raised."""
    try:
        out = fn(*args)
    except Exception as e:  # compared with the other side's
        return e
    outs = out if isinstance(out, tuple) else (out,)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]
    grads = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if grads and leaves:
        sum((o * torch.linspace(-1, 2, o.numel()).reshape(o.shape)).sum() for o in grads).backward()
    returned = [[o is a for a in args] for o in outs]
    return ([_snapshot(o) if isinstance(o, torch.Tensor) else o for o in outs], returned,
            [_snapshot(a, True) for a in args if isinstance(a, torch.Tensor)], [a.grad for a in leaves])


def _same(got, exp):
    if isinstance(exp, tuple) and exp and isinstance(exp[0], torch.Tensor):
        assert got[1:] == exp[1:], f"{got[1:]} vs eager {exp[1:]}"
        torch.testing.assert_close(got[0], exp[0])
    elif isinstance(exp, torch.Tensor):
        torch.testing.assert_close(got, exp)
    elif isinstance(exp, list):
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            _same(g, e)
    else:
        assert got == exp


def check(fn, calls, cache, executors=None):
    """fn jitted and eager on each call's arguments (made twice by calls[i]()), compared; returns the jitted fn."""
    jfn = jitcore.jit(fn, cache=cache, **({"executors": executors} if executors else {}))
    for make in calls:
        exp, got = _run(fn, make()), _run(jfn, make())
        if isinstance(exp, Exception):
            assert isinstance(got, type(exp)), f"eager raised {exp!r}, jit gave {got!r}"
            assert str(got).splitlines()[0] == str(exp).splitlines()[0]
            continue
        assert not isinstance(got, Exception), f"jit raised {got!r}, eager gave a result"
        for g, e in zip(got, exp):
            _same(g, e)
    return jfn


def _randn(*shape, t=False, grad=False, nonleaf=False):
    def make():
        torch.manual_seed(sum(shape) + 7 * t)
        x = torch.randn(*(shape[::-1] if t else shape))
        x = x.t() if t else x
        if nonleaf:
            return (x.requires_grad_() * 1,)
        return (x.requires_grad_(grad),)
    return make


SHAPES = [_randn(3, 4), _randn(3, 4), _randn(5, 6), _randn(4, 3, t=True), _randn(1, 6), _randn(6, 1)]


# -- on intermediates: the name rebinds to the view, aliases see eager's memory ---------------------------------------
def _aliases(x):
    y = x * 2
    v = y.view(-1)
    y.t_()
    v.add_(1)
    y.mul_(torch.arange(y.shape[1], dtype=y.dtype))
    return y, v, y.stride(), y.is_contiguous()


def _chain(x):
    y = x + 1
    w = y[1:]
    y.unsqueeze_(0).squeeze_(0).transpose_(0, 1)
    y.swapdims_(1, 0).swapaxes_(0, 1)
    w.zero_()
    y.unsqueeze_(-1)
    return y * 1, w, y.shape


def _view_of_view(x):
    y = x.clone()
    z = y[:, 1:]
    z.t_()
    z.add_(3)
    return y, z, z.stride()


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_aliases, _chain, _view_of_view])
def test_intermediates(fn, cache):
    check(fn, SHAPES, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_intermediates_grad(cache):
    def f(x, w):
        y = x * w
        v = y[0]
        y.t_()
        y.unsqueeze_(1)
        v.add_(w.sum())
        return y * 2, v

    def make(n, m):
        def args():
            torch.manual_seed(n * m)
            return torch.randn(n, m, requires_grad=True), torch.randn(m, requires_grad=True)
        return args

    check(f, [make(3, 4), make(3, 4), make(5, 6)], cache)


# -- on arguments: the caller's tensor gets the new sizes and strides (and keeps its identity) ------------------------
def _unsqueeze(x):
    x.unsqueeze_(1)
    x.add_(1)
    return x * 2, x


def _squeeze(x):
    x.squeeze_()
    return x.sum(0), x


def _squeeze_dim(x):
    x.squeeze_(-1)
    x.mul_(2)
    return x


def _t(x):
    x.t_()
    return x.clone(), x.stride()


def _transpose(x):
    y = x[1:]
    x.transpose_(0, 1)
    y.mul_(-1)
    return x + 0, x


def _swap(x):
    x.swapdims_(0, 1)
    x.swapaxes_(1, 0)
    x.swapaxes_(-1, 0)
    return x.reshape(-1) * 1


def _as_strided(x):
    x.as_strided_((2, 2), (1, 2))
    return x * 1, x


def _as_strided_offset(x):
    torch.as_strided_(x, (2, 3), (1, 1), 2)
    return x * 1


def _resize_smaller(x):
    x.resize_(x.shape[0])
    return x * 1, x


def _resize_then_write(x):
    x.resize_(x.shape[0])
    x.add_(1)
    return x * 1, x


def _resize_same(x):
    x.resize_(x.shape[1], x.shape[0])
    return x.clone(), x


def _resize_as(x):
    x.resize_as_(x[0])
    return x * 1, x.stride()


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_unsqueeze, _squeeze, _squeeze_dim, _t, _transpose, _swap, _as_strided,
                                _as_strided_offset, _resize_smaller, _resize_same, _resize_as])
def test_arguments(fn, cache):
    check(fn, SHAPES, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_resize_then_write(cache):
    """A write after resize_ of a contiguous tensor (a view of its first elements) is followed; of a transposed one
    too (prims.as_strided over its memory in memory order: tests/test_as_strided_writes.py)."""
    check(_resize_then_write, [_randn(3, 4), _randn(3, 4), _randn(5, 6), _randn(1, 6), _randn(4, 3, t=True)], cache)


def _resize_view(x):
    y = x * 2
    v = y.t()
    v.resize_(v.shape[0])
    v.add_(1)
    return y, v, v.stride()


def _as_strided_view(x):
    y = x * 2
    v = y[1:].t()
    v.as_strided_((2, 2), (1, 2))
    y.mul_(3)
    return y, v * 1, v.storage_offset()


def _resize_transposed_input(x):
    y = x.t()
    y.resize_(2, 2)
    y.zero_()
    return y * 1


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_resize_view, _as_strided_view, _resize_transposed_input])
def test_strided_views_of_contiguous_memory(fn, cache):
    """resize_ / as_strided_ of a non-contiguous view whose memory is a contiguous tensor's: view ops of that tensor
    (writes through either reach the other, as in eager). (x * 2 of a transposed x is laid out transposed, as in
    eager: then as_strided_ of its view is the opaque as_strided, and the write after it is refused.)"""
    transposed = [] if fn is _as_strided_view else [_randn(4, 3, t=True)]
    check(fn, [_randn(3, 4), _randn(3, 4), _randn(5, 6), *transposed], cache)


def _resize_same_select(x, w):
    t1 = x.select(-1, 1)
    t1.resize_(t1.shape[0])
    t5 = t1 * 2 + w
    t1[0] = 3
    return t5, t1 * w, t1.stride(), t1.masked_fill(t1 > 0, 0.5).sin()


def _resize_same_transposed(x, w):
    y = x.t()
    y.resize_(y.shape)
    y[0] = 2
    return y * w, y.stride(), x.stride()


def _with_w(make):
    def both():
        (x,) = make()
        torch.manual_seed(x.shape[1])
        return x, torch.randn(x.shape[0], requires_grad=True)
    return both


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_resize_same_select, _resize_same_transposed])
def test_resize_to_own_sizes_keeps_strides(fn, cache):
    """resize_ of a strided view to the sizes it has changes nothing in eager (its strides stay): the write after it
    reaches the places of the view, in the argument (fuzz seed 256: jitcore laid the sizes out contiguously)."""
    calls = [_randn(5, 4), _randn(5, 4), _randn(6, 3), _randn(4, 5, t=True)]
    if fn is _resize_same_transposed:
        calls = [_randn(4, 5), _randn(4, 5), _randn(3, 6), _randn(4, 5, t=True)]
    check(fn, [_with_w(c) for c in calls], cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_argument_non_leaf_grad(cache):
    """A non-leaf argument that requires grad: eager records the change in its history (x.grad_fn after the call);
    the gradients reaching its leaf, through the output and through x after the call, are eager's. (Reads of x after
    the change with a result that requires grad are refused: tests/test_nonleaf_metadata_grads.py.)"""
    def f(x, w):
        y = x * 2 + w  # (x * w would save x for backward: eager's then fails on its version)
        x.unsqueeze_(0)
        return y

    def make(n, m):
        def args():
            torch.manual_seed(n * m)
            return torch.randn(n, m, requires_grad=True), torch.randn(m, requires_grad=True)
        return args

    jf = jitcore.jit(f, cache=cache)
    for n, m in ((3, 4), (3, 4), (5, 6)):
        (a, w), (b, v) = make(n, m)(), make(n, m)()
        xa, xb = a * 1, b * 1
        ea, eb = f(xa, w), jf(xb, v)
        assert xb.shape == xa.shape and xb.stride() == xa.stride() and xb.grad_fn is not None
        torch.testing.assert_close(eb, ea)
        ((ea * 2).sum() + (xa * 3).sum()).backward()
        ((eb * 2).sum() + (xb * 3).sum()).backward()
        torch.testing.assert_close(b.grad, a.grad)
        torch.testing.assert_close(v.grad, w.grad)


def test_returned_argument_is_the_callers_tensor():
    def f(x):
        x.t_()
        return x

    x = torch.randn(3, 4)
    out = jitcore.jit(f)(x)
    assert out is x and x.shape == (4, 3) and x.stride() == (1, 4)


# -- eager's refusals, and jitcore's own ----------------------------------------------------------------------------
@pytest.mark.parametrize("cache", CACHE_MODES)
def test_eager_refusals(cache):
    def leaf(x):
        x.unsqueeze_(0)
        return x

    def resize_grad(x):
        y = x * 2
        y.resize_(2)
        return y

    def piece(x):
        p = (x * 1).unbind(0)[0]
        p.t_()
        return p

    grad = [_randn(3, 4, grad=True)]
    for fn in (leaf, resize_grad, piece):
        check(fn, grad, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_as_strided_grad(cache):
    """as_strided_ of a tensor that requires grad: values and gradients as eager's where no other view shares its
    memory or where it is a view itself (as view ops where the strides nest, else prims.as_strided); where it is the
    base of other views too (eager's autograd then drops the gradients of the other views' elements that the new
    strides leave out: tests/test_as_strided_base_views.py)."""
    def alone(x):
        y = x * 2
        y.as_strided_((2, 2), (1, 2))
        y.mul_(2)
        return y * 1

    def overlapping(x):
        y = x * 2
        y.as_strided_((2, 2), (1, 1))
        return y * 1

    def with_views(x):
        y = x * 2
        v = y.view(-1)
        y.as_strided_((2, 2), (1, 2))
        return v, y

    def a_view(x):
        y = x * 2
        v = y[1:]
        w = y.view(-1)
        u = v.view(-1)
        v.as_strided_((2, 2), (1, 2))
        v.mul_(3)
        return w, v, u

    shapes = [_randn(3, 4, grad=True), _randn(3, 4, grad=True), _randn(5, 6, grad=True)]
    check(alone, shapes, cache)
    check(overlapping, shapes, cache)
    check(a_view, shapes, cache)
    check(with_views, shapes, cache)


def test_refused_growth_and_no_grad():
    def grow(x):
        x.resize_(x.numel() + 1)
        return x

    def no_grad_change(x):
        y = x * 1
        with torch.no_grad():
            y.unsqueeze_(0)
        return y

    with pytest.raises(UnsupportedError, match="uninitialized"):
        jitcore.jit(grow)(torch.randn(3, 4))
    with pytest.raises(UnsupportedError, match="no_grad"):
        jitcore.jit(no_grad_change)(torch.randn(3, 4, requires_grad=True))


# -- cache guards: other strides or sizes never reuse a program made for others --------------------------------------
@pytest.mark.parametrize("cache", CACHE_MODES)
def test_strides_decide(cache):
    def f(x):
        x.t_()
        return x.view(-1) * 1, x.stride(), x.is_contiguous()

    check(f, [_randn(3, 4, t=True), _randn(3, 4), _randn(4, 3, t=True), _randn(5, 6, t=True), _randn(5, 6)], cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_sizes_decide(cache):
    def f(x):
        x.squeeze_(0)
        x.unsqueeze_(-1)
        return x.sum(-1) * 1, x.shape

    check(f, [_randn(1, 4), _randn(1, 4), _randn(3, 4), _randn(1, 5), _randn(5, 1), _randn(1, 1)], cache)


# -- Inductor ---------------------------------------------------------------------------------------------------------
def test_inductor():
    def f(x, w):
        x.unsqueeze_(0)
        y = (x[0] * w).sin()
        v = y.view(-1)
        y.t_()
        v.add_(1)
        return y.exp() + 1, x * 2

    def make(n, m):
        def args():
            torch.manual_seed(n + m)
            return torch.randn(n, m), torch.randn(m, requires_grad=True)
        return args

    check(f, [make(3, 4), make(3, 4), make(5, 6)], "symbolic values", executors=["inductor"])


# -- the fuzzer's class generates these statements --------------------------------------------------------------------
def test_fuzz_class_programs():
    """Programs of the fuzzer with statements of the metainplace class agree with eager in every cache mode."""
    ops = ("unsqueeze_", "squeeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "as_strided_", "resize_")
    progs = [p for p in map(generate, range(40)) if any(f".{op}(" in p.source for op in ops)]
    assert len(progs) >= 5
    for prog in progs[:5]:
        for cache in CACHE_MODES:
            report = fuzz_check(prog, cache)
            assert not report.problems, report.text(prog)


def _resize_to_its_sizes_transposed(x):
    y = (x * 2).t()
    y.resize_(y.shape[0], y.shape[1])  # (its own sizes: eager leaves it transposed)
    y.add_(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape))
    x.resize_(x.shape)
    x.mul_(torch.arange(x.shape[1], dtype=x.dtype))
    return y * 1, y.stride(), x * 1


def _resize_to_its_sizes_run_time(x):
    t = torch.where(x > 0)[0].float()  # (sizes known only at run time: its layout is not known while tracing)
    t.resize_(t.shape[0])
    t.t_()
    t.zero_()
    return t + 1, t.shape


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_resize_to_its_sizes_transposed, _resize_to_its_sizes_run_time])
def test_resize_to_the_sizes_it_has_changes_nothing(fn, cache):
    """Eager's resize_ to a tensor's own sizes leaves it as it is, strides too (before: a contiguous as_strided over
    a transposed tensor's memory, a silent difference; an opaque as_strided of a run-time-sized one, its writes
    refused: fuzz seed 734)."""
    check(fn, SHAPES, cache)
