"""In-place writes through chains of views (issue 14, classes 4 and 5), with eager PyTorch as the oracle.

Class 4: every view op chained up to depth 3, an in-place op or setitem at the end, on an input or on an
intermediate, in every cache mode: outputs, inputs after the call and gradients match eager (or, where eager
raises, the jitted call raises too). Class 5: after a call that writes a value with a gradient into an input
without grad, the input joins the graph like eager's (requires_grad, grad_fn, gradients of later uses).
"""
from __future__ import annotations

import contextlib
import itertools
import random

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES

MODES = ("constant values", "symbolic values", "no caching")
SHAPES = ((4, 6), (2, 4, 6))

VIEWS = {  # name -> a view of t (eager raising on a shape means the link is not valid there)
    "int": lambda t: t[1],
    "int_neg": lambda t: t[-1],
    "slice": lambda t: t[1:],
    "step": lambda t: t[::2],
    "slice_d1": lambda t: t[:, 1:3],
    "int_slice": lambda t: t[0, 1:],
    "ellipsis": lambda t: t[..., 1],
    "select": lambda t: t.select(-1, 1),
    "narrow": lambda t: t.narrow(0, 1, 2),
    "view": lambda t: t.view(-1),
    "view2": lambda t: t.view(2, -1),
    "reshape": lambda t: t.reshape(-1),
    "permute": lambda t: t.permute(*reversed(range(t.ndim))),
    "transpose": lambda t: t.transpose(0, -1),
    "t": lambda t: t.t(),
    "diagonal": lambda t: t.diagonal(),
    "expand_same": lambda t: t.expand(*t.shape),
    "expand_new": lambda t: t.unsqueeze(0).expand(2, *t.shape),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t.unsqueeze(0).squeeze(0),
    "unflatten": lambda t: t.unflatten(0, (2, -1)),
    "unbind": lambda t: t.unbind(0)[1],
    "split": lambda t: t.split(2, dim=0)[1],
    "chunk": lambda t: t.chunk(2, dim=-1)[0],
    "chunk_whole": lambda t: t.chunk(1)[0],
    "split_wide": lambda t: t.split(100, dim=-1)[0],
    "detach": lambda t: t.detach(),
    "as_strided": lambda t: t.as_strided((2,), (2,), 1),
}
# views jitcore may refuse (UnsupportedError) instead of computing: never a silent wrong answer either way
MAY_REFUSE = {"as_strided"}

WRITES = {  # name -> an in-place write into v (w: a 0-d tensor)
    "add_": lambda v, w: v.add_(1),
    "mul_": lambda v, w: v.mul_(2),
    "zero_": lambda v, w: v.zero_(),
    "fill_": lambda v, w: v.fill_(3),
    "copy_": lambda v, w: v.copy_(w),
    "add_w": lambda v, w: v.add_(w),
    "clamp_": lambda v, w: v.clamp_(-0.5, 0.5),
    "setitem_int": lambda v, w: v.__setitem__(0, 5),
    "setitem_slice": lambda v, w: v.__setitem__(slice(1, None), w * 2),
}


def _chain(names):
    def view(t):
        for n in names:
            t = VIEWS[n](t)
        return t

    return view


def _program(names, write, where):
    view, wr = _chain(names), WRITES[write]
    if where == "input":
        def f(x, w):
            v = view(x)
            wr(v, w)
            return x * 1, v * 1
    else:
        def f(x, w):
            t = x * 2
            v = view(t)
            wr(v, w)
            return t * 1, v * 1
    return f


def _valid(shape, names) -> bool:
    try:
        v = _chain(names)(torch.zeros(shape))
    except (RuntimeError, IndexError, TypeError):
        return False
    return v.ndim > 0 and v.numel() > 1


def _inputs(shape, where, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    w = torch.randn((), generator=g)
    return x.requires_grad_(where == "intermediate"), w.requires_grad_(True)


def _clone(t):
    return t.detach().clone().requires_grad_(t.requires_grad)


def _run(fn, x, w):
    """(outputs, x after the call, grads of x and w) or the exception it raised."""
    x, w = _clone(x), _clone(w)
    try:
        outs = fn(x, w)
    except (RuntimeError, UnsupportedError) as e:
        return e
    loss = sum((o * (i + 2)).sum() for i, o in enumerate(outs) if o.requires_grad)
    try:
        if isinstance(loss, torch.Tensor):
            loss.backward()
    except RuntimeError:  # eager's backward refuses some writes into expanded tensors: no gradients to compare
        return [o.detach() for o in outs], x.detach(), NO_GRAD, NO_GRAD
    return [o.detach() for o in outs], x.detach(), x.grad if x.is_leaf else None, w.grad


NO_GRAD = "backward raised"


def _close(a, b) -> bool:
    if a is NO_GRAD:  # jitcore's backward raised where eager's did not
        return False
    if a is None or b is None:  # no gradient reached it: eager may give zeros where jitcore gives None
        other = b if a is None else a
        return other is None or not other.any()
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(p, q) for p, q in zip(a, b))
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5, equal_nan=True)


def check_case(shape, names, write, where, mode, seed=0):
    """First call, then a second call of the same jitted function at other sizes (a cache hit under symbolic
    values) where the chain is valid there, each against eager."""
    fn = _program(names, write, where)
    jfn = jitcore.jit(fn, cache=mode)
    bigger = tuple(2 * d for d in shape)
    for s in (shape, bigger) if _valid(bigger, names) else (shape,):
        _check_call(fn, jfn, s, f"{'.'.join(names)} {write} on {where} {s} [{mode}]", MAY_REFUSE & set(names), seed)


def _check_call(fn, jfn, shape, label, may_refuse, seed):
    x, w = _inputs(shape, "intermediate" if " intermediate " in label else "input", seed)
    expected = _run(fn, x, w)
    got = _run(jfn, x, w)
    if isinstance(got, UnsupportedError) and (isinstance(expected, Exception) or may_refuse):
        return
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"{label}: eager raised ({expected}), jitcore did not"
        return
    assert not isinstance(got, Exception), f"{label}: jitcore raised {type(got).__name__}: {got}"
    for part, a, b in zip(("outputs", "input after the call", "x.grad", "w.grad"), got, expected):
        assert b is NO_GRAD or _close(a, b), f"{label}: {part} differ from eager"


def all_cases(max_depth=3):
    for depth in range(1, max_depth + 1):
        for names in itertools.product(VIEWS, repeat=depth):
            for shape in SHAPES:
                if _valid(shape, names):
                    yield shape, names


def sample_cases(n, seed=0, depth=3):
    """n deterministic cases: every view op alone, then random valid chains of depth 2..depth; writes, places and
    modes spread over them."""
    rng = random.Random(seed)
    cases, seen = list(all_cases(1)), set()
    while len(cases) < n:
        shape, names = rng.choice(SHAPES), tuple(rng.choices(list(VIEWS), k=rng.randint(2, depth)))
        if (shape, names) not in seen and _valid(shape, names):
            seen.add((shape, names))
            cases.append((shape, names))
    return [(s, names, rng.choice(list(WRITES)), rng.choice(("input", "intermediate")), MODES[i % 3])
            for i, (s, names) in enumerate(cases)]


@pytest.mark.parametrize("case", sample_cases(120), ids=lambda c: f"{'.'.join(c[1])}-{c[2]}-{c[3]}-{c[4][:3]}")
def test_view_chain_writes_match_eager(case):
    check_case(*case)


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("mode", MODES)
def test_every_write_through_select_and_int_index(write, mode):
    for names in (("int",), ("select",), ("t", "int"), ("view2", "int"), ("diagonal",), ("slice",)):
        for where in ("input", "intermediate"):
            check_case((4, 6), names, write, where, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ("input", "intermediate"))
def test_view_chain_writes_exhaustive(mode, where):
    for shape, names in all_cases(2):
        for write in WRITES:
            check_case(shape, names, write, where, mode)


@pytest.mark.slow
def test_view_chain_writes_depth3_large_sample():
    for case in sample_cases(3000, seed=1):
        check_case(*case)


# -- class 5: an input written with a value that carries a gradient joins the graph, as in eager -------------------
INPUT_WRITES = {  # name -> f(x, w) writing into input x a value computed from w (w: shape (3,), requires grad)
    "setitem_step": lambda x, w: x.__setitem__(slice(None, None, 2), w * 2),
    "setitem_int": lambda x, w: x.__setitem__(1, w.sin()),
    "setitem_cols": lambda x, w: x.__setitem__((slice(None), slice(1, 3)), w[:2] * 3),
    "index_put_": lambda x, w: x.index_put_((torch.tensor([0, 3]),), w * 2),
    "copy_select": lambda x, w: x.select(0, 2).copy_(w),
    "copy_t_view": lambda x, w: x.t()[1].copy_(w[:1].expand(4)),
    "add_": lambda x, w: x.add_(w),
    "add_narrow": lambda x, w: x.narrow(0, 1, 2).add_(w),
    "mul_": lambda x, w: x.mul_(w),
}
SOURCES = {  # name -> the input x (given its eager-side base) and whether eager refuses the write
    "plain": lambda base: base.clone(),
    "non_leaf": lambda base: base.clone().requires_grad_(True) * 1,
    "leaf_requires_grad": lambda base: base.clone().requires_grad_(True),
}


def _input_write_run(fn, write, source, seed):
    g = torch.Generator().manual_seed(seed)
    base, w = torch.randn(4, 3, generator=g), torch.randn(3, generator=g).requires_grad_(True)
    x = SOURCES[source](base)
    try:
        out = fn(x, w)
    except (RuntimeError, UnsupportedError) as e:
        return e
    state = (x.requires_grad, x.grad_fn is not None, x.detach().clone(), out.detach())
    (x * torch.arange(12.0).view(4, 3)).sum().backward()  # a use of x after the call
    return state, w.grad


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("write", list(INPUT_WRITES))
def test_input_written_with_grad_joins_the_graph(write, source, mode):
    def f(x, w):
        INPUT_WRITES[write](x, w)
        return x.sum() * 2

    expected = _input_write_run(f, write, source, seed=1)
    got = _input_write_run(jitcore.jit(f, cache=mode), write, source, seed=1)
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"{write} on {source}: eager raised ({expected}), jitcore did not"
        return
    assert not isinstance(got, Exception), f"{write} on {source}: jitcore raised {got}"
    (rg, has_fn, x_after, out), w_grad = expected
    (rg2, has_fn2, x_after2, out2), w_grad2 = got
    assert (rg2, has_fn2) == (rg, has_fn), f"{write} on {source}: x.requires_grad, grad_fn: {(rg2, has_fn2)}"
    assert torch.allclose(x_after2, x_after) and torch.allclose(out2, out)
    assert _close(w_grad2, w_grad), f"{write} on {source}: w.grad after a later use of x differs from eager"


COMPLEX_VIEWS = {"real": torch.real, "imag": torch.imag, "view_as_real": torch.view_as_real}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("view", list(COMPLEX_VIEWS))
@pytest.mark.parametrize("write", ["add_", "setitem_int"])
def test_complex_views_written_match_eager_or_refuse(view, write, mode):
    """real/imag/view_as_real views (functionalization follows writes through them: tests/test_complex_views.py): a
    write through them, or a read of them after a write into their base, is either right or refused, never lost."""
    def f(x, w):
        v = COMPLEX_VIEWS[view](x)
        WRITES[write](v, w)
        return x * 1

    def g(x, w):
        v = COMPLEX_VIEWS[view](x)
        x.mul_(2)
        return v * 1

    for fn in (f, g):
        x = torch.randn(3, 4, dtype=torch.complex64)
        a, b = x.clone(), x.clone()
        expected = fn(a, None)
        try:
            got = jitcore.jit(fn, cache=mode)(b, None)
        except UnsupportedError:
            assert torch.equal(b, x), "refused, but the input was changed"
            continue
        assert torch.equal(got, expected) and torch.equal(b, a)


def _view_inputs():
    """Inputs whose views made under no_grad differ in requires_grad in eager: a leaf that requires grad, a transposed
    leaf (a view of a tensor without grad, made to require grad), a view with history of a leaf, a tensor with
    history, a tensor without grad."""
    b = torch.randn(3, 5)
    return {"leaf": torch.randn(5, 3, requires_grad=True), "transposed leaf": b.t().requires_grad_(),
            "view of a leaf": torch.randn(3, 5, requires_grad=True).t(),
            "computed": torch.randn(5, 3, requires_grad=True) * 2, "no grad": torch.randn(5, 3)}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("inside", [False, True], ids=["no_grad around the call", "no_grad inside"])
def test_views_made_under_no_grad_require_grad_as_their_root_base(mode, inside):
    """Under no_grad, a view's requires_grad is its root base's: a transposed leaf (x = base.t().requires_grad_(),
    itself a view of a tensor without grad) gives views that do not require grad (fuzz seed 18054); the views of a
    view with history do. Every input kind in turn, through one jitted function (one entry per kind)."""
    def views(x):
        first = x.split(2, 0)[0]
        return first, x[0, 1:], x.t(), first[1:], x.narrow(1, 0, 2).unsqueeze(0)

    def f(x):
        if inside:
            with torch.no_grad():
                v = views(x)
            return (*v, x * 2)
        return views(x)

    jfn = jitcore.jit(f, cache=mode)
    for _ in range(2):
        for name, x in _view_inputs().items():
            with torch.no_grad() if not inside else contextlib.nullcontext():
                expected, got = f(x), jfn(x)
            assert [t.requires_grad for t in got] == [t.requires_grad for t in expected], name
            assert [t.grad_fn is None for t in got] == [t.grad_fn is None for t in expected], name
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e)
