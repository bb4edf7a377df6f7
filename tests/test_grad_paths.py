"""Gradient paths that carry zeros: eager keeps a tensor in the graph (requires_grad True, a zero .grad, not None)
after ops whose derivative is 0 (sign, floor, ...) and after writes that overwrite every element of a tensor that
requires grad with values that do not (fill_, zero_, t[:] = k, copy_ of a constant). Both are compared with eager:
the outputs' requires_grad, their values, and every input's .grad (None or a tensor, and its values).
"""
from __future__ import annotations

import itertools

import pytest
import torch

import jitcore

CACHES = ("constant values", "symbolic values", "no caching")

ZERO_DERIVATIVE = {
    "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
}
# how the zero-derivative result is used: alone, mixed with a real path, through a view, reduced
USES = {
    "alone": lambda x, z: (z * 3,),
    "mixed": lambda x, z: (z * x.exp(),),
    "view": lambda x, z: (z.t().reshape(-1),),
    "reduced": lambda x, z: (z.sum(0), z.std(correction=0)),
}


def _compare(f, make_inputs, cache):
    eager_in, jit_in = make_inputs(), make_inputs()
    want, got = f(*eager_in), jitcore.jit(f, cache=cache)(*jit_in)
    assert [w.requires_grad for w in want] == [g.requires_grad for g in got]
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True)
    weights = [torch.rand_like(w) for w in want]
    for outs in (want, got):
        live = [(o * k).sum() for o, k in zip(outs, weights) if o.requires_grad]
        if live:
            torch.autograd.backward(live)
    for a, b in zip(eager_in, jit_in):
        assert (a.grad is None) == (b.grad is None), f"grad None: eager {a.grad is None}, jit {b.grad is None}"
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, equal_nan=True)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("op,use", list(itertools.product(ZERO_DERIVATIVE, USES)))
def test_zero_derivative_ops_give_zero_grads(op, use, cache):
    fn, how = ZERO_DERIVATIVE[op], USES[use]

    def f(x):
        return how(x, fn(x * 2.5))

    _compare(f, lambda: [torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()], cache)


# writes that replace every element of their destination with values that need no gradient
OVERWRITES = {
    "fill_": lambda t: t.fill_(2.0),
    "zero_": lambda t: t.zero_(),
    "setitem_all": lambda t: t.__setitem__(slice(None), 3.0),
    "setitem_ellipsis": lambda t: t.__setitem__(Ellipsis, -1.0),
    "copy_scalar_tensor": lambda t: t.copy_(torch.tensor(1.5)),
    "copy_full": lambda t: t.copy_(torch.ones(3, 4)),
    "mul_zero_then_fill": lambda t: t.mul_(0).fill_(4.0),
}
# where the overwritten tensor comes from (ops whose backward does not read their output: eager refuses a backward
# through a saved output written in place), and what else reads the same input
SOURCES = {
    "neg": lambda x: (x.neg(), None),
    "scaled_with_reader": lambda x: (x * 2, x.mean(0)),
    "shifted_with_view_before": lambda x: (x + 1, x.t()[0]),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("write,source", list(itertools.product(OVERWRITES, SOURCES)))
def test_full_overwrite_keeps_requires_grad(write, source, cache):
    wfn, sfn = OVERWRITES[write], SOURCES[source]

    def f(x):
        t, other = sfn(x)
        wfn(t)
        return (t,) if other is None else (t, other)

    _compare(f, lambda: [torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()], cache)


# in-place ops whose new value is computed from the old one: the old value gets its gradient through them
SELF_WRITES = {
    "relu_": lambda t: t.relu_(), "add_": lambda t: t.add_(1.0), "mul_": lambda t: t.mul_(2.0),
    "sigmoid_": lambda t: t.sigmoid_(), "copy_of_self": lambda t: t.copy_(t + 1), "clamp_": lambda t: t.clamp_(min=0.1),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("write", SELF_WRITES)
def test_write_computed_from_the_old_value_adds_no_mask(write, cache):
    """An in-place op on an intermediate in the graph (a conv net's `ReLU(inplace=True)`) is the op's own result:
    no `where(full(True), new, old)` sending zeros to the old value (it cost conv nets 3-20% of a training step),
    and the gradients are eager's."""
    wfn = SELF_WRITES[write]

    def f(x):
        t = x * 2
        wfn(t)
        return (t * x,)

    _compare(f, lambda: [torch.randn(3, 4, generator=torch.Generator().manual_seed(3)).requires_grad_()], cache)
    jf = jitcore.jit(f, cache=cache)
    jf(torch.randn(3, 4, requires_grad=True))[0].sum().backward()
    ids = [b.sym.id for b in jitcore.last_traces(jf)[-1].bound_symbols]
    assert not any(i.endswith(".full") for i in ids), ids


@pytest.mark.parametrize("cache", CACHES)
def test_overwrite_under_no_grad_still_drops_gradient(cache):
    def f(x):
        t = x * 3
        with torch.no_grad():
            t.fill_(1.0)
        return (t * x,)

    _compare(f, lambda: [torch.randn(3, 4, generator=torch.Generator().manual_seed(2)).requires_grad_()], cache)


# writes into an input that requires grad, made under no_grad: the input is copied back without autograd, so it
# gets no gradient from them (None where nothing else reads it), in every cache mode (symbolic sizes passed zeros)
NO_GRAD_WRITES = {
    "slice_add_": lambda x: x[1:].add_(3),
    "select_fill_": lambda x: x.select(1, 0).fill_(2.0),
    "whole_mul_": lambda x: x.mul_(2),
    "setitem": lambda x: x.__setitem__(0, 1.0),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("write", NO_GRAD_WRITES)
@pytest.mark.parametrize("read_after", [False, True])
def test_no_grad_write_into_input(write, read_after, cache):
    wfn = NO_GRAD_WRITES[write]

    def f(a, x):
        out = a * a
        with torch.no_grad():
            wfn(x)
        return (out, x.sum(0) * 2) if read_after else (out,)

    def make():
        g = torch.Generator().manual_seed(3)
        return [torch.randn(3, generator=g).requires_grad_(), torch.randn(4, 2, generator=g).requires_grad_()]

    _compare(f, make, cache)


# F.linear's rare forms (a 1-D weight, a 0-d result) are pulled back by torch.autograd at run time
LINEAR_FORMS = {
    "1d_1d": ((3,), (3,), None),
    "2d_1d": ((4, 3), (3,), None),
    "1d_1d_bias": ((3,), (3,), ()),
    "3d_1d_bias": ((2, 4, 3), (3,), ()),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("form", LINEAR_FORMS)
def test_linear_rare_forms_gradients(form, cache):
    xs, ws, bs = LINEAR_FORMS[form]

    def make():
        g = torch.Generator().manual_seed(4)
        out = [torch.randn(xs, generator=g).requires_grad_(), torch.randn(ws, generator=g).requires_grad_()]
        return out + ([torch.randn(bs, generator=g).requires_grad_()] if bs is not None else [])

    _compare(lambda *t: (torch.nn.functional.linear(*t),), make, cache)


# a view of a tensor that requires grad, overwritten by values without a gradient and returned: eager's view is in
# the graph (requires_grad, its gradient reaching the base), as is the base
PARTIAL_VIEWS = {
    "narrow": lambda t: t.narrow(0, 0, 2),
    "select": lambda t: t.select(1, 2),
    "slice_step": lambda t: t[::2],
    "t_row": lambda t: t.t()[1],
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("write", ["fill_", "zero_", "setitem_all"])
@pytest.mark.parametrize("view", PARTIAL_VIEWS)
def test_overwritten_view_stays_in_graph(view, write, cache):
    vfn, wfn = PARTIAL_VIEWS[view], OVERWRITES[write]

    def f(x):
        t = x * 2
        v = vfn(t)
        wfn(v)
        return v, t

    _compare(f, lambda: [torch.randn(4, 5, generator=torch.Generator().manual_seed(5)).requires_grad_()], cache)


# a path from x to the loss through an empty tensor: eager's .grad is a tensor of zeros, not None, even when the
# loss leaves out another output that depends on x (autograd passes None for its cotangent)
EMPTY_PATHS = {
    "slice_past_end": lambda x: x[5:] * 2,
    "narrow_0": lambda x: x.narrow(0, 1, 0).exp(),
    "keepdim_mean_slice": lambda x: x.mean(0, keepdim=True)[1:],
    "column_slice": lambda x: x[:, 4:].sum(0),
    "empty_index": lambda x: x[torch.tensor([], dtype=torch.long)] + 1,
}


def _setitem_every_other(w, v):
    w[::2] = v


LEFT_OUT = {
    "output": lambda x, w: (x.sum() * 2).expand(2),
    "written_input": lambda x, w: _setitem_every_other(w, x.sum() * 2),
    "written_input_add_": lambda x, w: w.add_(x),
    "output_and_write": lambda x, w: (w.mul_(x.cos()), x.sin())[1],
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("path,left_out", list(itertools.product(EMPTY_PATHS, LEFT_OUT)))
def test_grad_through_empty_tensor_with_a_cotangent_left_out(path, left_out, cache):
    def f(x, w):
        other = LEFT_OUT[left_out](x, w)
        return EMPTY_PATHS[path](x), other

    def run(fn):
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(3, 4, generator=g).requires_grad_(), torch.randn(3, 4, generator=g)
        loss, other = fn(x, w)
        (loss.float().sum() * 3).backward()  # the other output and the written input get no cotangent
        return x, w, loss, other

    xe, we, le, oe = run(f)
    xj, wj, lj, oj = run(jitcore.jit(f, cache=cache))
    torch.testing.assert_close(lj, le)
    torch.testing.assert_close(oj, oe)
    torch.testing.assert_close(wj.detach(), we.detach())
    assert (xj.grad is None) == (xe.grad is None), f"grad None: eager {xe.grad is None}, jit {xj.grad is None}"
    torch.testing.assert_close(xj.grad, xe.grad)
