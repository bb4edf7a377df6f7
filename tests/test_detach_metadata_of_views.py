"""In-place metadata changes made through detach() (or another view) of an argument or of a view of it
(`t1 = x.select(0, 1); t1.detach().squeeze_(0)`, fuzz seed 2063) against eager, over call sequences in every cache
mode: outputs, gradients, the arguments' values and version counters after the call. Eager moves the version counter
the detached alias shares with x; where x is itself a view that requires grad, that move makes the grad_fn of x and of
every view of it anew from x's base (for a leaf view of a base without grad, the views made before the change lose
their gradient), which jitcore refuses to imitate: an UnsupportedError at the user's line, on every call of that kind.
A view's own change (`x[1:].unsqueeze_(0)`) on a leaf that requires grad raises eager's error, as eager does.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


def seed_2063(x):  # the fuzzer's program, minimised
    t1 = x.select(0, 1)
    t1.detach().squeeze_(0)
    return torch.maximum(t1, x)


def own_detach(x):  # the detached alias of x itself
    x.detach().unsqueeze_(0)
    return (x * 2).sum(0)


def chained(x):  # back through two views and a detach
    v = x[1:].transpose(0, 1)
    d = v.detach()
    d.t_()
    d.unsqueeze_(-1)
    return v.sin() + 1, x.exp()


def through_data(x):  # x.data has a counter of its own: eager moves nothing
    v = x.select(0, 0)
    v.data.unsqueeze_(0)
    return torch.maximum(v, x)


def view_change(x):  # a view's own change (no detach): eager raises on a view of a leaf that requires grad
    v = x[1:]
    v.unsqueeze_(0)
    return v * 2, x.sum(0)


def returned_views(x):  # views made before the change, handed back (fuzz seed 2204): eager's regenerate their grad_fn
    t = x.select(0, 1)
    d = x[1:].detach()
    d.t_()
    return t, d, x[0] * 2


FNS = [seed_2063, own_detach, chained, through_data, view_change, returned_views]
# the argument: a leaf, a tensor with history, a view that needs no grad, and (refused where the function changes
# the metadata of a detach of it) a leaf view of a base without grad (the fuzzer's transposed inputs) and a view with
# history; "laid out view": a leaf view laid out as a leaf is (only the guard on being a view tells it from one)
KINDS = ["leaf", "nonleaf", "view without grad", "leaf view", "view with history", "laid out view"]
REFUSED = {"leaf view", "view with history", "laid out view"}


def make(kind: str, seed: int, n: int = 3):
    """(the argument, the tensors whose gradients are compared, its base or None)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n + 1, 3, generator=g, dtype=torch.float64)
    if kind == "leaf":
        x = a.t().contiguous().requires_grad_()
        return x, [x], None
    if kind == "nonleaf":
        p = a.t().contiguous().requires_grad_()
        return p * 2, [p], None
    if kind == "view without grad":
        return a.t(), [], a
    if kind == "leaf view":
        x = a.t().requires_grad_()
        return x, [x], a
    if kind == "laid out view":
        b = a.t().contiguous()
        x = b[:].requires_grad_()
        return x, [x], b
    p = a.clone().requires_grad_()
    return (p * 2).t(), [p], None


def observe(fn, kind: str, seed: int, n: int = 3):
    """fn on a fresh argument: (outputs, the argument's value and version moves, its base's, gradients)."""
    x, leaves, base = make(kind, seed, n)
    v0, b0 = x._version, None if base is None else base._version
    out = fn(x)
    outs = out if isinstance(out, tuple) else (out,)
    seen = (x._version - v0, None if base is None else base._version - b0, tuple(x.shape))
    grads = []
    if leaves:
        g = torch.Generator().manual_seed(seed + 7)
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs if o.requires_grad)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    views = [(o._base is not None, o.requires_grad, type(o.grad_fn).__name__ if o._base is not None else None)
             for o in outs]  # (a view's grad_fn: eager's made anew from the base after the move, AsStridedBackward0)
    return (*seen, views), [o.detach().clone() for o in outs], x.detach().clone(), grads


def _compare(got, exp, what):
    assert got[0] == exp[0], f"{what}: (version moves of x, of its base, x's shape, the outputs' (being a view, " \
                             f"requires_grad, grad_fn)) {got[0]} vs eager {exp[0]}"
    for g, e in zip((*got[1], got[2]), (*exp[1], exp[2])):
        torch.testing.assert_close(g, e)
    assert len(got[3]) == len(exp[3])
    for g, e in zip(got[3], exp[3]):
        assert (g is None) == (e is None), what
        if e is not None:
            torch.testing.assert_close(g, e)


def _refuses(fn, kind) -> bool:
    return kind in REFUSED and fn is not through_data


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
def test_against_eager(fn, kind, cache):
    jf = jitcore.jit(fn, cache=cache)
    for seed, n in ((0, 3), (1, 3), (2, 5)):  # a call sequence (a cached entry from the second call; new sizes)
        try:
            exp = observe(fn, kind, seed, n)
        except RuntimeError as e:  # (view_change of a leaf's view) eager's error, raised by jitcore as eager raises it
            with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
                observe(jf, kind, seed, n)
            assert fn is view_change and "a view of a leaf Variable" in str(e)
            continue
        if _refuses(fn, kind):
            with pytest.raises(jitcore.UnsupportedError, match=r"through detach.*itself a view that requires") as e:
                observe(jf, kind, seed, n)
            assert e.value.hint and __file__ in e.value.where and "_(" in e.value.where  # (the user's line)
            continue
        _compare(observe(jf, kind, seed, n), exp, f"{fn.__name__}, x {kind}, call {seed}")


def test_eager_drops_the_gradient_of_a_leaf_views_earlier_views():
    """What jitcore refuses to imitate: on a leaf view of a base without grad, eager's gradient through t1 (a view
    made before the change) is lost, on a plain leaf it is not; the version counter moves once either way."""
    for kind, lost in (("leaf view", True), ("leaf", False)):
        x, _, _ = make(kind, 0)
        v0 = x._version
        grad, = torch.autograd.grad(seed_2063(x).sum(), x)
        assert x._version - v0 == 1
        y = x.detach().clone().requires_grad_()
        full, = torch.autograd.grad(torch.maximum(y.select(0, 1), y).sum(), y)
        assert torch.equal(grad, full) != lost, kind


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_sequence_mixing_kinds(cache):
    """One jitted function called with a leaf, then a leaf view laid out as the leaf (refused: the entry's guard says it
    is another call), then a leaf again (the cached entry runs, eager's answer), then other views."""
    jf = jitcore.jit(seed_2063, cache=cache)
    kinds = ["leaf", "laid out view", "leaf", "leaf view", "view with history", "view without grad", "leaf"]
    for seed, kind in enumerate(kinds):
        exp = observe(seed_2063, kind, seed)
        if kind in REFUSED:
            with pytest.raises(jitcore.UnsupportedError, match="in-place metadata change"):
                observe(jf, kind, seed)
            continue
        _compare(observe(jf, kind, seed), exp, f"{kind}, call {seed}")


def test_inductor():
    jf = jitcore.jit(chained, cache="symbolic values", executors=["inductor"])
    for seed, kind in enumerate(["leaf", "leaf", "leaf view", "nonleaf"]):
        exp = observe(chained, kind, seed)
        if kind in REFUSED:
            with pytest.raises(jitcore.UnsupportedError, match="in-place metadata change"):
                observe(jf, kind, seed)
            continue
        _compare(observe(jf, kind, seed), exp, f"{kind}, call {seed}")



def test_a_saved_package(tmp_path):
    """jitcore.load rebuilds an entry from its input description: the rebuilt argument is no view (a view would be
    refused), and the loaded entry keeps the guard."""
    jf = jitcore.jit(seed_2063)
    x, _, _ = make("leaf", 0)
    jf(x)
    jitcore.save(jf, tmp_path)
    loaded = jitcore.load(tmp_path, seed_2063)
    _compare(observe(loaded, "leaf", 1), observe(seed_2063, "leaf", 1), "loaded, leaf")
    assert jitcore.cache_misses(loaded) == 0
    with pytest.raises(jitcore.UnsupportedError, match="in-place metadata change"):
        observe(loaded, "laid out view", 2)
