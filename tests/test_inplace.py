"""In-place ops and views under jitcore.jit: results, the caller's mutated tensors and gradients match eager's."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore.errors import JitError


def _clone(args):
    """Copies with the same strides (so non-contiguous inputs stay non-contiguous)."""
    return [torch.empty_strided(a.shape, a.stride()).copy_(a.detach()).requires_grad_(a.requires_grad)
            if isinstance(a, torch.Tensor) else a for a in args]


def check_like_eager(fn, *args, grad=False, atol=1e-5):
    """fn under jit vs eager on clones of args: outputs, every input after the call, and (grad) input gradients."""
    eager_args, jit_args = _clone(args), _clone(args)
    jfn = jitcore.jit(fn)
    for _ in range(2):  # the second call runs the cached program
        e_in, j_in = _clone(eager_args), _clone(jit_args)
        expected, got = fn(*e_in), jfn(*j_in)
        flat_e = expected if isinstance(expected, (tuple, list)) else (expected,)
        flat_g = got if isinstance(got, (tuple, list)) else (got,)
        for e, g in zip(flat_e, flat_g):
            torch.testing.assert_close(g, e, atol=atol, rtol=1e-5)
        for e, g in zip(e_in, j_in):
            if isinstance(e, torch.Tensor) and not e.requires_grad:
                torch.testing.assert_close(g, e, atol=atol, rtol=1e-5)
        if grad:
            leaves_e = [a for a in e_in if isinstance(a, torch.Tensor) and a.requires_grad]
            leaves_g = [a for a in j_in if isinstance(a, torch.Tensor) and a.requires_grad]
            sum(o.sum() for o in flat_e if o.requires_grad).backward()
            sum(o.sum() for o in flat_g if o.requires_grad).backward()
            for e, g in zip(leaves_e, leaves_g):
                torch.testing.assert_close(g.grad, e.grad, atol=atol, rtol=1e-5)
    return jfn


def _x(*shape):
    return torch.randn(*shape)


def f_add_(x, y):
    x.add_(y, alpha=2)
    return x * 3


def f_ret_alias(x, y):
    z = x.mul_(y)
    return z + x


def f_iadd(x, y):
    x += y
    x -= 1
    x *= y
    x /= 2
    return x


def f_local(x, y):
    z = x * 1
    z += y
    return z + x


def f_setitem_local(x, y):
    z = x.clone()
    z[0] = 3
    z[:, 1] = y[:, 0]
    z[1:3, ::2] = -1.0
    return z


def f_setitem_input(x, y):
    x[1:3] = y[0:2]
    x[-1, 2] = 7
    return x.sum(0)


def f_setitem_mask(x, y):
    x[y > 0] = 0.0
    return x + 1


def f_setitem_tensor_index(x, y):
    x[torch.tensor([0, 2])] = y[:2]
    return x


def f_view_write(x, y):
    v = x.view(20)
    v.mul_(2)
    return x + 1, v


def f_two_views(x, y):
    a = x[0]
    b = x.t()
    a.fill_(5.0)
    return b * 1, a * 1


def f_nested_views(x, y):
    v = x.view(2, 2, 5)[1].transpose(0, 1)  # [5, 2]
    v[1:4].zero_()
    return x.clone(), v + 0


def f_chunks(x, y):
    a, b = x.chunk(2, dim=1)
    a.add_(1)
    b.sub_(1)
    return x * 1


def f_unbind(x, y):
    rows = x.unbind(0)
    rows[2].mul_(0)
    return x.sum(1)


def f_copy(x, y):
    x.copy_(y[0])  # broadcasts
    return x


def f_zero_fill(x, y):
    x.zero_()
    y.fill_(2.5)
    return x + y


def f_clamp_masked(x, y):
    x.clamp_(-0.5, 0.5)
    x.masked_fill_(y > 1, 9.0)
    return x


def f_index_copy(x, y):
    x.index_copy_(0, torch.tensor([3, 1]), y[:2])
    return x * 1


def f_relu_inplace(x, y):
    h = x * 2
    F.relu(h, inplace=True)
    torch.relu_(y)
    return h + y


def f_int_cast(x, y):
    i = torch.zeros(4, 5, dtype=torch.int64)
    i += 3
    x += i
    return x, i


def f_write_then_read_old_alias(x, y):
    s = x[:, :2]
    x.mul_(10)
    return s + 0  # s sees the write (a view of x)


def f_reshape_copy_not_view(x, y):
    r = x.t().reshape(20)  # a copy in eager: writes into r do not reach x
    r.fill_(0)
    return x + 0, r


CASES = [f_add_, f_ret_alias, f_iadd, f_local, f_setitem_local, f_setitem_input, f_setitem_mask,
         f_setitem_tensor_index, f_view_write, f_two_views, f_nested_views, f_chunks, f_unbind, f_copy, f_zero_fill,
         f_clamp_masked, f_index_copy, f_relu_inplace, f_int_cast, f_write_then_read_old_alias,
         f_reshape_copy_not_view]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_inplace_matches_eager(fn):
    check_like_eager(fn, _x(4, 5), _x(4, 5))


def test_noncontiguous_input_view_write():
    base = _x(5, 4)

    def f(x):
        x[0].add_(1)
        r = x.reshape(20)  # a copy: x is not contiguous
        r.zero_()
        return x * 1, r

    check_like_eager(f, base.t())


def test_trace_is_functional():
    jf = jitcore.jit(f_two_views)
    jf(_x(4, 5), _x(4, 5))
    text = str(jitcore.last_traces(jf)[-1])
    assert "copy_" not in text and "fill_" not in text
    assert "copy_" in str(jitcore.last_epilogue_traces(jf)[-1])


# -- gradients ------------------------------------------------------------------------------------------------------
def g_build_by_slices(x, w):
    out = torch.zeros(4, 3)
    for i in range(3):
        out[:, i] = (x * w[i]).sum(1)
    return out.tanh()


def g_inplace_intermediate(x, w):
    h = x @ w
    h.mul_(2).add_(1)
    h[:, 0] = 0
    F.relu(h, inplace=True)
    return h


def g_view_of_intermediate(x, w):
    h = x * w.sum()
    v = h.view(-1)
    v[::2] = v[::2] * 3
    return h.exp()


def g_masked(x, w):
    h = x.clone()
    h.masked_fill_(x > 0.5, 0.0)
    h += w.sum()
    return h


@pytest.mark.parametrize("fn", [g_build_by_slices, g_inplace_intermediate, g_view_of_intermediate, g_masked],
                         ids=lambda f: f.__name__)
def test_inplace_gradients(fn):
    check_like_eager(fn, _x(4, 5).requires_grad_(), _x(5, 3).requires_grad_() if fn is g_inplace_intermediate
                     else _x(5).requires_grad_(), grad=True)


def test_leaf_requires_grad_inplace_is_an_error_like_eager():
    def f(x):
        x.add_(1)
        return x

    with pytest.raises(RuntimeError):
        f(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="leaf"):
        jitcore.jit(f)(torch.ones(2, requires_grad=True))


def test_nonleaf_input_mutation_rebases_history():
    def f(h):
        h.mul_(3)
        return h.sum()

    for run in (f, jitcore.jit(f)):
        x = torch.arange(3.0, requires_grad=True)
        h = x * 2
        run(h)
        (h * h).sum().backward()
        torch.testing.assert_close(x.grad, 2 * (x * 6) * 6)
        torch.testing.assert_close(h.detach(), x.detach() * 6)


def test_no_grad_write_to_buffer_stays_without_grad():
    buf = torch.zeros(3)

    def f(x):
        with torch.no_grad():
            buf.copy_(x * 2)
        return (x * buf).sum()

    x = torch.ones(3, requires_grad=True)
    jitcore.jit(f)(x).backward()
    assert not buf.requires_grad
    torch.testing.assert_close(buf, torch.full((3,), 2.0))
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


# writes autograd does not record (under no_grad, through .data or detach()): eager keeps the written tensor's autograd
# identity, so later uses of it still send gradients to it (and to what it was computed from)
def u_leaf_under_no_grad(x, p):
    y = (x * p).sum()
    with torch.no_grad():
        p.mul_(2)
    return y + (x * p).sum()


def u_nonleaf_under_no_grad(x, p):
    h = p * 3.0
    y = (x * h).sum()
    with torch.no_grad():
        h.add_(1)
    return y + (x * h.sin()).sum()


def u_through_data(x, p):
    y = (x * p).sum()
    p.data.mul_(2)
    return y + (x * p).sum()


def u_slice_through_detach(x, p):
    y = (x * p).sum()
    p.detach()[1:].mul_(2)
    return y + (x * p ** 2).sum()


def u_element_under_no_grad(x, p):
    with torch.no_grad():
        p[0] = 5.0
    return (x * p ** 2).sum()


def u_sgd_step(x, p):
    loss = (x * p).sum()
    with torch.no_grad():
        p -= 0.1 * x
    return loss, p * 1.0


@pytest.mark.parametrize("fn", [u_leaf_under_no_grad, u_nonleaf_under_no_grad, u_through_data, u_slice_through_detach,
                                u_element_under_no_grad, u_sgd_step], ids=lambda f: f.__name__)
def test_unrecorded_writes_keep_the_gradient_path(fn):
    """Results, the written parameter's values and its gradient, like eager (they used to lose the later uses' part
    of the gradient)."""
    grads, values = [], []
    for run in (fn, jitcore.jit(fn)):
        torch.manual_seed(0)
        x, p = torch.randn(3), torch.rand(3).add_(0.5).requires_grad_()
        out = run(x, p)
        sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
        grads.append(p.grad)
        values.append(p.detach().clone())
        assert p.is_leaf and p.requires_grad
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(values[1], values[0])


def test_nonleaf_input_written_under_no_grad_keeps_its_history():
    def f(h):
        with torch.no_grad():
            h.add_(1)
        return (h * h).sum()

    for run in (f, jitcore.jit(f)):
        x = torch.arange(3.0, requires_grad=True)
        h = x * 2
        run(h).backward()
        torch.testing.assert_close(x.grad, 2 * (x.detach() * 2 + 1) * 2)
        assert h.grad_fn is not None and h.grad_fn.name() == "MulBackward0"


def test_write_through_detach_reaches_the_tensor():
    def f(x):
        x.detach().mul_(2)
        return x + 1

    a, b = torch.ones(3), torch.ones(3)
    torch.testing.assert_close(jitcore.jit(f)(b), f(a))
    torch.testing.assert_close(b, a)


@pytest.mark.parametrize("x_requires_grad", [False, True])
def test_recorded_write_through_detach_leaves_the_tensors_gradient_alone(x_requires_grad):
    """d = x.detach(); d.copy_(y * 2): d gets y's gradient path, x gets d's values but keeps its own path."""
    def f(x, y):
        d = x.detach()
        d.copy_(y * 2)
        return (x * 3).sum() + (d * 1).sum()

    results = []
    for run in (f, jitcore.jit(f)):
        torch.manual_seed(0)
        x, y = torch.ones(3, requires_grad=x_requires_grad), torch.randn(3, requires_grad=True)
        out = run(x, y)
        out.backward()
        results.append((out.detach(), x.grad if x_requires_grad else torch.zeros(3), y.grad, x.detach().clone()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


def test_assigning_data_raises_at_the_users_line():
    def f(x, p):
        p.data = p.data * 2
        return x * p

    with pytest.raises(JitError, match=r"(?s)assigning `\.data`.*p\.data = p\.data \* 2.*hint"):
        jitcore.jit(f)(torch.randn(3), torch.ones(3, requires_grad=True))


# -- buffers, modules, KV cache --------------------------------------------------------------------------------------
def test_batchnorm_running_stats():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True))
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True))
    ref.load_state_dict(model.state_dict())
    jm = jitcore.jit(model)
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6)
        torch.testing.assert_close(jm(x), ref(x), atol=1e-5, rtol=1e-5)
    for (n, a), (_, b) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=n)
    assert model[1].num_batches_tracked.item() == 3


class KVCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.register_buffer("v", torch.zeros(1, 2, 8, 4))

    def forward(self, pos, k, v):
        self.k[:, :, pos:pos + k.shape[2]] = k
        self.v.index_copy_(2, torch.arange(pos, pos + v.shape[2]), v)
        q = k[:, :, -1:]
        att = (q @ self.k[:, :, :pos + k.shape[2]].transpose(-1, -2)).softmax(-1)
        return att @ self.v[:, :, :pos + k.shape[2]]


def test_kv_cache():
    eager, jm = KVCache(), jitcore.jit(KVCache())
    for pos, n in ((0, 3), (3, 1), (4, 1)):
        k, v = torch.randn(1, 2, n, 4), torch.randn(1, 2, n, 4)
        torch.testing.assert_close(jm(pos, k, v), eager(pos, k, v))
    torch.testing.assert_close(jm.k, eager.k)
    torch.testing.assert_close(jm.v, eager.v)


# -- aliasing -------------------------------------------------------------------------------------------------------
def test_same_tensor_twice():
    jf = jitcore.jit(lambda a, b: a + b)
    x, y = torch.ones(2), torch.zeros(2)
    torch.testing.assert_close(jf(x, x), torch.full((2,), 2.0))
    torch.testing.assert_close(jf(x, y), torch.ones(2))  # not the entry traced with a and b the same tensor


def test_same_tensor_twice_written():
    def f(a, b):
        a.add_(1)
        return b * 1

    x, e = torch.zeros(2), torch.zeros(2)
    out = jitcore.jit(f)(x, x)
    expected = f(e, e)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, e)


def test_overlapping_views_written_are_refused_or_correct():
    def f(a, b):
        a.add_(1)
        return b * 1

    jf = jitcore.jit(f)
    base = torch.zeros(4)
    jf(torch.zeros(2), torch.zeros(2))  # traced without aliasing
    with pytest.raises(JitError, match="shares its storage"):
        jf(base[:2], base[1:3])  # same shapes: the cached entry must not be used silently


def _unsqueeze_in_place(x):
    y = x * 2
    y.unsqueeze_(0)
    return y


def _t_in_place_unbound(x):
    y = x * 2
    torch.Tensor.t_(y)
    return y


def _detach_in_place(x):
    y = x * 2
    y.detach_()
    return y


def _requires_grad_in_place(x):
    y = x * 2
    y.requires_grad_()
    return y


@pytest.mark.parametrize("fn", [_unsqueeze_in_place, _t_in_place_unbound])
def test_in_place_shape_changes_run(fn):
    # the tensor keeps its identity and takes the new shape (tests/test_inplace_metadata.py has the rest)
    x = torch.randn(2, 3)
    got, exp = jitcore.jit(fn)(x), fn(x)
    assert got.shape == exp.shape and got.stride() == exp.stride()
    torch.testing.assert_close(got, exp)


@pytest.mark.parametrize("fn", [_detach_in_place, _requires_grad_in_place])
def test_in_place_metadata_changes_raise_at_the_users_line(fn):
    # the tensor keeps its identity but changes autograd state: never a silently stale result
    x = torch.randn(2, 3, requires_grad=fn is _detach_in_place)
    with pytest.raises(JitError, match="in place") as info:
        jitcore.jit(fn)(x)
    assert "hint:" in str(info.value) and "test_inplace.py" in str(info.value)


def test_in_place_metadata_calls_that_change_nothing_run():
    def f(x):
        y = x * 2
        y.squeeze_()  # no size-1 dims
        y.transpose_(1, 1)
        y.requires_grad_(False)  # already False under no_grad
        y.detach_()
        return y + torch.Tensor.cumsum(y, 0)

    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(jitcore.jit(f)(x), f(x))


def _std_after_copy(x):
    with torch.no_grad():
        x.copy_(x)  # (the values written are the leaf itself, detached: they share its storage and version)
    return x.std(-1, correction=0)


def _std_after_scaled_copy(x):
    with torch.no_grad():
        x.copy_(x * 0.5)
    return x.std(-1, correction=0)


def _sin_after_scale(x):
    with torch.no_grad():
        x.mul_(2)
    return x.sin() * x


def _square_after_row_write(x):
    with torch.no_grad():
        x[0].zero_()
    return (x * x).sum(0)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("fn", [_std_after_copy, _std_after_scaled_copy, _sin_after_scale, _square_after_row_write])
def test_leaf_written_under_no_grad_then_saved_for_backward(fn, cache):
    # the write reaches the leaf through the epilogue, after the forward saved it: what the backward reads must be
    # a copy, not the leaf (whose version the write bumps: "modified by an inplace operation" at backward)
    jfn = jitcore.jit(fn, cache=cache)
    for rows in (5, 5, 6):
        base = torch.randn(rows, 4, dtype=torch.float64)
        x, xe = base.clone().requires_grad_(), base.clone().requires_grad_()
        out, expected = jfn(x), fn(xe)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(x.detach(), xe.detach())


def _cat_of_written_then_view_written(x0, w):
    x0[::2] = w.sum()  # (x0's new value has a length of another name: the pad that writes every other element)
    t1 = torch.cat([x0, x0 * 2])
    with torch.no_grad():
        mask = t1 > 0
        torch.sin(t1[::2], out=t1[::2])  # (a view of the cat, whose length is a size of the first trace)
    return t1, mask.view(-1) * -2


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_a_write_through_a_view_of_a_tensor_made_from_a_written_input(cache):
    """Fuzz seed 28084: the write through `t1[::2]` read t1's length by the name it had before x0 was written, a
    size the program defined only later (UnboundLocalError at run time)."""
    jf = jitcore.jit(_cat_of_written_then_view_written, cache=cache)
    for n in (5, 6, 5):
        x, w = torch.randn(n), torch.randn(3, requires_grad=True)
        xe, we = x.clone(), w.detach().clone().requires_grad_()
        got, want = jf(x, w), _cat_of_written_then_view_written(xe, we)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
        torch.testing.assert_close(x, xe)
        got[0].sum().backward()
        want[0].sum().backward()
        torch.testing.assert_close(w.grad, we.grad)


# tensors whose length only a decomposition computes (a reshape's product, a cat's sum), written element by element
# through views in a loop (a running sum, a scan), with and without grad
SIZED = {"reshape": lambda x: x.reshape(-1) * 1, "flatten_t": lambda x: x.t().flatten() + 0.5,
         "cat": lambda x: torch.cat([x[0], x[1]]) * 2}
STEPS = {"copy_scan": lambda t, i: t.select(0, i).copy_(t.select(0, i - 1) * 0.5 + t.select(0, i)),
         "add_prev": lambda t, i: t[i].add_(t[i - 1]),
         "setitem": lambda t, i: t.__setitem__(i, t[i - 1].tanh())}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("sized,step", [(s, k) for s in SIZED for k in STEPS])
@pytest.mark.parametrize("no_grad", [True, False])
def test_writes_in_a_loop_into_a_tensor_whose_size_a_decomposition_computes(sized, step, no_grad, cache):
    """Fuzz seed 36: the checks the loop's writes recorded (`i3 >= 2`, a reshape's size i3 = i1 * i2) came before
    the line computing that size (the trace read a name not yet defined)."""
    def f(x):
        t = SIZED[sized](x)
        for i in range(1, t.shape[0]):
            with torch.set_grad_enabled(not no_grad and torch.is_grad_enabled()):
                STEPS[step](t, i)
        return t

    jf = jitcore.jit(f, cache=cache)
    for rows, cols in ((2, 3), (2, 3), (2, 4)):
        x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = f(xe), jf(xj)
        torch.testing.assert_close(got, want)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad)


# a write through a view whose making pins the written tensor's size (unbind: one output per element), then a
# reduction whose decomposition divides by that size
PINNING_WRITES = {"unbind_add": lambda t: t.unbind(-1)[1].add_(0.5), "unbind_copy": lambda t: t.unbind(0)[0].copy_(
    t[1] * 2)}
SIZE_REDUCTIONS = {"mean": lambda t: t.mean(0, keepdim=True), "var": lambda t: t.var(0), "std": lambda t: t.std()}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("write,reduce", [(w, r) for w in PINNING_WRITES for r in SIZE_REDUCTIONS])
@pytest.mark.parametrize("no_grad", [True, False])
def test_a_reduction_after_a_write_that_pinned_the_size_it_divides_by(write, reduce, no_grad, cache):
    """Fuzz seed 31372: the reduction's line read the written tensor's new value, whose size is the number the
    unbind pinned, while its decomposition still divided by the old size's name (which no input of the line
    had, so the trace checker refused the trace)."""
    def f(x):
        t = x * 2
        PINNING_WRITES[write](t)
        with torch.set_grad_enabled(not no_grad and torch.is_grad_enabled()):
            r = SIZE_REDUCTIONS[reduce](t)
        return t * 1, r

    jf = jitcore.jit(f, cache=cache)
    for n in (3, 3, 5):  # (x without grad: eager refuses a write into an unbind output that requires grad)
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        want, got = f(x.clone()), jf(x.clone())
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
