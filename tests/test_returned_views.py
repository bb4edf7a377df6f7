"""Views of written inputs handed back: `x.add_(1); return x[0]` returns, in eager, a view sharing x's memory, and a
write through it reaches x. Generated: a write into the input (in place, through a view, by copy from a tensor of
another layout, of a broadcast or strided value), then views of the input returned, over input layouts (contiguous,
transposed, a strided slice of a larger tensor), in every cache mode and with Inductor regions; after each call the
caller writes through every output, and the input and outputs must be eager's.
"""
from __future__ import annotations

import random

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES

WRITES = {
    "add_": lambda x, y: x.add_(1),
    "mul_ then clamp_": lambda x, y: x.mul_(2).clamp_(min=-1),
    "copy_ from contiguous": lambda x, y: x.copy_(y),
    "setitem slice": lambda x, y: x.__setitem__((slice(1, None), slice(None)), 5.0),
    "through a view": lambda x, y: x[0].mul_(3),
    "masked fill": lambda x, y: x.masked_fill_(x > 0, 0.5),
    "zero_": lambda x, y: x.zero_(),
    "two writes": lambda x, y: (x.sub_(y), x[:, 1].fill_(2.0)),
    # values whose memory repeats or skips: no view of it says which view of x an output is
    "setitem a computed number": lambda x, y: x.__setitem__(slice(None), y.sum()),
    "setitem a broadcast row": lambda x, y: x.__setitem__(slice(None), y.sum(0)),
    "copy_ from an expand": lambda x, y: x.copy_(y[:1].expand_as(x)),
    "copy_ from a strided slice": lambda x, y: x.copy_(torch.cat([y, y], 1)[:, ::2]),
}
VIEWS = {
    "row": lambda x: x[0],
    "column": lambda x: x[:, 1],
    "t": lambda x: x.t(),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "narrow then t": lambda x: x.narrow(0, 1, 2).t(),
    "split": lambda x: x.split(2, 1)[1],
    "strided slice": lambda x: x[::2, 1:],
    "expand": lambda x: x[0:1].expand(3, x.shape[1]),
    "select then unsqueeze": lambda x: x.select(1, 2).unsqueeze(1),
    "diagonal": lambda x: x.diagonal(),
    "diagonal of the top rows": lambda x: x[:3].t().diagonal(),
}
LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t().contiguous().t(),
    "slice of a larger tensor": lambda t: torch.cat([t, t], 1)[:, ::2],
}


def _program(rng: random.Random):
    writes = rng.sample(sorted(WRITES), 1 + (rng.random() < 0.3))
    views = rng.sample(sorted(VIEWS), rng.randint(1, 3))
    keep_value = rng.random() < 0.3  # the function also returns something computed from x (a new tensor)
    # a view written through: taken before the writes (and seeing them), or after them, as the last write
    through = rng.choice([None, "first", "last"])
    fill = rng.random() < 0.5  # ... with a value of its own (fill_), or from what it held (add_)

    def f(x, y):
        if through == "first":
            outs = [VIEWS[v](x) for v in views]
            outs[0].fill_(0.25) if fill else outs[0].add_(0.25)
        for w in writes:
            WRITES[w](x, y)
        if through != "first":
            outs = [VIEWS[v](x) for v in views]
        if through == "last":
            outs[0].fill_(0.25) if fill else outs[0].add_(0.25)
        return (*outs, x.sum(1)) if keep_value else tuple(outs)

    return f, f"writes {writes}, views {views}, computed {keep_value}, view written {through} (fill {fill})"


def _call(fn, x, y):
    try:
        return fn(x, y), None
    except Exception as e:  # (eager's RuntimeError; jitcore says UnsupportedError where it refuses as eager does)
        return None, e


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("executors", [None, ["inductor", "torch"]], ids=["torch", "inductor"])
@pytest.mark.parametrize("seed", range(12))
def test_writes_through_returned_views_of_written_inputs_reach_them(seed, executors, mode):
    rng = random.Random(seed)
    f, what = _program(rng)
    jf = jitcore.jit(f, cache=mode, **({"executors": executors} if executors else {}))
    for call, layout in enumerate(rng.sample(sorted(LAYOUTS), 3) * 2):
        shape = (4, 3 + call % 2) if mode != "constant values" else (4, 3)
        base = torch.randn(shape, generator=torch.Generator().manual_seed(seed * 10 + call))
        y = torch.randn(shape)
        x, xe = LAYOUTS[layout](base.clone()), LAYOUTS[layout](base.clone())
        expected, eager_error = _call(f, xe, y)
        got, error = _call(jf, x, y)
        where = f"seed {seed}, call {call}, {layout}: {what}"
        assert (error is None) == (eager_error is None), f"{where}: eager {eager_error!r}, jit {error!r}"
        if error is not None:
            continue
        assert len(got) == len(expected)
        for k, (g, e) in enumerate(zip(got, expected)):  # the caller writes through each output in turn
            wrote, eager_wrote = _write(g, k), _write(e, k)  # (an expanded view refuses writes in eager)
            assert (wrote is None) == (eager_wrote is None), f"{where}: eager {eager_wrote!r}, jit {wrote!r}"
            assert torch.allclose(x, xe), f"{where}, after writing output {k}:\n{x}\n{xe}"
        for g, e in zip(got, expected):
            assert torch.allclose(g, e), f"{where}:\n{g}\n{e}"


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_views_of_an_input_that_requires_grad_share_its_memory(view, mode):
    """A view of an input that requires grad, returned: the forward the autodiff split makes must still compute it
    as a view (fuzz seed 100869: with symbolic sizes, the backward read sizes made inside x.diagonal()'s
    decomposition, and the forward ran that decomposition, whose reshape copies a transposed x). A write through
    the output (under no_grad) reaches x exactly where eager's does, and the gradients are eager's."""
    def f(x):
        return VIEWS[view](x)

    jf = jitcore.jit(f, cache=mode)
    for call, layout in enumerate(["contiguous", "contiguous", "transposed", "slice of a larger tensor"]):
        shape = (4, 3 + call % 2) if mode != "constant values" else (4, 3)
        base = torch.randn(shape, generator=torch.Generator().manual_seed(call))
        x, xe = (LAYOUTS[layout](base.clone()).requires_grad_() for _ in range(2))
        got, want = jf(x), f(xe)
        where = f"call {call}, {layout}"
        assert (got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
            (want.untyped_storage().data_ptr() == xe.untyped_storage().data_ptr()), f"{where}: aliasing differs"
        weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(9))
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        torch.testing.assert_close(x.grad, xe.grad, msg=lambda m, where=where: f"{where}: {m}")
        if view == "expand":  # (eager refuses writes into an expanded view)
            continue
        with torch.no_grad():
            got.mul_(10)
            want.mul_(10)
        torch.testing.assert_close(x, xe, msg=lambda m, where=where: f"{where}, after writing the output: {m}")


def _write(t, k):
    try:
        t.mul_(10).add_(k)
    except RuntimeError as e:
        return e
    return None


def test_the_epilogue_prints_the_views_it_makes_of_the_caller_tensor():
    def f(x):
        x.add_(1)
        return x[0]

    jf = jitcore.jit(f)
    x = torch.zeros(3, 4)
    out = jf(x)
    assert out._base is x and out.data_ptr() == x.data_ptr()
    assert "view_of_written" in str(jitcore.last_epilogue_traces(jf)[-1])


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(8))
def test_views_of_written_inputs_with_history_give_eager_gradients(seed, mode):
    """The input has history (a leaf times one): the returned views have it too, and a loss over them and the input
    gives the leaf eager's gradient."""
    rng = random.Random(1000 + seed)
    f, what = _program(rng)
    jf = jitcore.jit(f, cache=mode)
    for call, layout in enumerate(rng.sample(sorted(LAYOUTS), 2) * 2):
        base = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed * 10 + call))
        y = torch.randn(4, 3)
        grads, results = [], []
        for fn in (f, jf):
            leaf = base.clone().requires_grad_()
            x = LAYOUTS[layout](leaf * 1)
            out, error = _call(fn, x, y)
            results.append((out, error, x))
            if error is None:
                loss = sum((o * (k + 1)).sum() for k, o in enumerate(out)) + (x * x).sum()
                try:  # (eager's backward may refuse a write made through an expanded view: not compared)
                    loss.backward()
                except RuntimeError:
                    if fn is f:
                        break
            grads.append(leaf.grad)
        else:
            _compare(results, grads, f"seed {seed}, call {call}, {layout}: {what}")


def _compare(results, grads, where):
    (eo, ee, ex), (jo, je, jx) = results
    assert (ee is None) == (je is None), f"{where}: eager {ee!r}, jit {je!r}"
    if ee is None:
        assert all(torch.allclose(a, b) for a, b in zip(jo, eo)) and torch.allclose(jx, ex), where
        assert [o.requires_grad for o in jo] == [o.requires_grad for o in eo], where
        assert torch.allclose(grads[1], grads[0]), f"{where}:\n{grads[1]}\n{grads[0]}"


def test_the_diagonal_of_a_written_transposed_input_shares_its_memory():
    """diagonal's decomposition reshapes, which copies a value laid out as a transposed tensor: the returned view is
    made again from the input's final value by the op the user called."""
    def f(x):
        x.add_(1)
        return x.diagonal()

    x = torch.randn(4, 3).t().contiguous().t()
    out = jitcore.jit(f)(x)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


# -- views through detach() of a written input (fuzz s173): eager's share the caller's memory, without history ------
def _masked_then_detached_view(x, w):
    x.transpose(0, -1)[x.transpose(0, -1) > 0] = 0.5
    return x.detach().reshape(4, -1).view(4, -1), x * w


def _detach_after_add(x, w):
    x.add_(w)
    return x.detach(), x.data[0], x.detach()[1:].t()


def _detach_before_add(x, w):
    d = x.detach()
    x.add_(w)
    return d[1], d.t(), x * 2


def _write_through_detach(x, w):
    x.t().detach()[0].fill_(3)
    return x.detach()[:, 1], (x * w).sum(0)


DETACHED = [_masked_then_detached_view, _detach_after_add, _detach_before_add, _write_through_detach]


def _detached_call(fn, grad, seed):
    torch.manual_seed(seed)
    base, w = torch.randn(5, 4), torch.randn(4, requires_grad=grad)
    leaf = base.clone().requires_grad_(grad)
    x = leaf * 1 if grad else leaf
    outs = fn(x, w)
    shared = [(o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(),
               o.storage_offset() - x.storage_offset(), o.stride(), o.requires_grad, o.grad_fn is None) for o in outs]
    loss = sum(o.sum() * (k + 1) for k, o in enumerate(outs) if o.requires_grad)
    grads = torch.autograd.grad(loss, [leaf, w], allow_unused=True) if torch.is_tensor(loss) else None
    values = [o.detach().clone() for o in outs]
    for k, o in enumerate(outs):  # the caller writes through the outputs without history: eager's reach x
        if not o.requires_grad:
            o.mul_(10).add_(k)
    return shared, values, x.detach().clone(), grads


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("fn", DETACHED)
def test_views_through_detach_of_written_inputs_share_its_memory(fn, grad, mode):
    """A view of x.detach() (or x.data) handed back after a write into x is, in eager, a view of the caller's x (a
    write through it reaches x) with no history; jitcore returned a tensor of its own (fuzz s173)."""
    jf = jitcore.jit(fn, cache=mode)
    for seed in (0, 1, 2):
        (es, ev, ex, eg), (js, jv, jx, jg) = _detached_call(fn, grad, seed), _detached_call(jf, grad, seed)
        assert js == es, f"seed {seed}: sharing, offset, strides, requires_grad, no grad_fn: {js} vs eager {es}"
        for g, e in zip([*jv, jx], [*ev, ex]):
            torch.testing.assert_close(g, e)
        assert (jg is None) == (eg is None)
        for g, e in zip(jg or (), eg or ()):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e)


def test_view_through_detach_of_written_input_with_inductor():
    fn = _masked_then_detached_view
    jf = jitcore.jit(fn, executors=["inductor", "torch"])
    for seed in (0, 1):
        assert _detached_call(jf, True, seed)[0] == _detached_call(fn, True, seed)[0]


def _detach_written_with_grad(x, w):
    d = x.detach()
    d.mul_(w)
    return d, d[0]


def _written_then_detach_written_with_grad(x, w):
    x.add_(1)
    d = x.detach()
    d.mul_(w)
    return d, d[0]


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_detach_of_a_written_argument_written_with_a_gradient_is_refused(mode):
    """jitcore gave w a wrong gradient here (the backward got the cotangents of d[0] and of x's writeback, not d's):
    refused clearly."""
    leaf, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    with pytest.raises(jitcore.UnsupportedError, match="through detach"):
        jitcore.jit(_written_then_detach_written_with_grad, cache=mode)(leaf * 1, w)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("f", [_detach_written_with_grad])
def test_detach_written_with_a_gradient_keeps_its_history(f, mode):
    """A detach() of a written input, then written with a gradient: eager's has a history of its own (requires grad),
    and so has jitcore's (not made a view without history of the caller's tensor)."""
    jf = jitcore.jit(f, cache=mode)
    for seed in (0, 1):
        results = []
        for fn in (f, jf):
            torch.manual_seed(seed)
            leaf, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
            x = leaf * 1
            outs = fn(x, w)
            (gw,) = torch.autograd.grad(sum(o.sum() for o in outs), [w])
            results.append(([(o.detach().clone(), o.requires_grad, o.grad_fn is None) for o in outs],
                            x.detach().clone(), gw))
        (eo, ex, eg), (jo, jx, jg) = results
        for (a, *ra), (b, *rb) in zip(jo, eo):
            assert ra == rb
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(jx, ex)
        torch.testing.assert_close(jg, eg)
