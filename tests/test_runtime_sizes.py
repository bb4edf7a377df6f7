"""Sizes known only at run time (the count of a mask, of nonzero, masked_select; issue 38 item 8) in comparisons and
Python control flow: an answer the bounds decide (a count is >= 0 and at most the numel it counts) needs no guard; an
answer the prologue can compute is a data guard; one it cannot (the count comes from random draws or from values
written into the inputs first, or a pass after tracing asks) is checked by the program itself, and a call whose
answer differs runs (or compiles) the entry for its answer. Call sequences where the answer changes between calls,
in every cache mode, against eager: outputs, gradients, the arguments after the call, the random generators' state.
"""
from __future__ import annotations

import contextlib
import io
import random

import pytest
import torch

import jitcore
from executors import inductor_ex, torch_ex
from tests.fuzz import CACHE_MODES

# shifts of the inputs per call: the mask counts cross the thresholds below in both directions
SHIFTS = (3.0, -3.0, 0.0, 3.0, -3.0, 0.5)


def _min_eq(x, w):
    y = x[x > 0]
    n, u = x.shape[0], y.shape[0]
    return (y * w.sum() if min(n, u) == n else y - w.mean()), x * 2


def _floordiv_eq(x, w):
    y = x[x > 0]
    n, u = x.shape[1], y.shape[0]
    return y * w.sum() if u // n == 1 else y.sum() * w


def _mod_lt(x, w):
    y = torch.masked_select(x, x > 0)
    u = y.shape[0]
    return y * 3 if u % x.shape[1] < 2 else w * y.sum()


def _if_positive(x, w):
    y = x[x > 0]
    if y.shape[0] > 0:
        return y.mean() * w
    return w * 0 + 1


def _len_in_range(x, w):
    y = torch.nonzero(x > 0)
    total = 0
    for i in range(len(y)):  # pins the count: a data guard
        total = total + i
    return w * total + x.sum()


def _decided(x, w):
    y = x[x > 0]
    u = y.shape[0]
    ok = u >= 0 and u <= x.numel() and min(u, x.shape[0] * x.shape[1]) == u and not (u > x.numel())
    return (y * 2 if ok else y - 1), w * 2


def _random_count(x, w):
    m = torch.rand(x.shape) < 0.5  # the count comes from random draws: the program checks the answer
    y = x[m]
    return (y * w.sum() if y.shape[0] > x.numel() // 2 else y - w.mean()), torch.rand(2)


def _written_count(x, w):
    x.mul_(-1)  # the count comes from values written into the argument: the program checks the answer
    y = x[x > 0]
    return (w * y.sum() if y.shape[0] > x.numel() // 2 else w - y.sum()), y


def _pass_asks(x, w):
    t = torch.masked_select(x, x < 0) * 2  # (fuzz seed 3: functionalization asks about the run-time size)
    for i in range(1, t.shape[0]):
        with torch.no_grad():
            t.select(0, i).copy_(t.select(0, i - 1) * 0.5 + t.select(0, i))
    return t, w * 2


def _backward_asks(x, w):
    y = x[x > 2.5]  # none for some calls: the slice's gradient rule asks whether it is empty (checked in the forward)
    u = y.shape[0]
    return x.flatten()[:min(u, x.shape[0])] * w.sum()


def _python_random_first(x, w):
    r = random.random()  # a draw of Python's generator before the check: put back when the check fails
    y = x[torch.rand_like(x) < 0.5]
    return (x * r + w if y.shape[0] > x.numel() // 2 else x - r), random.random()


CASES = {"min_eq": _min_eq, "floordiv_eq": _floordiv_eq, "mod_lt": _mod_lt, "if_positive": _if_positive,
         "len_in_range": _len_in_range, "decided": _decided, "random_count": _random_count,
         "written_count": _written_count, "pass_asks": _pass_asks, "python_random_first": _python_random_first,
         "backward_asks": _backward_asks}


def _inputs(i, grad):
    g = torch.Generator().manual_seed(i)
    x = torch.randn(4, 5, generator=g) + SHIFTS[i % len(SHIFTS)]
    w = torch.randn(5, generator=g) if i % 2 else torch.randn(1, generator=g)
    return x.requires_grad_(grad), w.requires_grad_(grad)


def _leaves(out):
    return [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]


def _compare(fn, jf, i, grad):
    x, w = _inputs(i, grad)
    writes = fn is _written_count
    xe, we = (t.detach().clone().requires_grad_(grad) for t in (x, w))
    xj, wj = (t.detach().clone().requires_grad_(grad) for t in (x, w))
    args_e = (xe.clone() if writes else xe, we)  # (an argument written in place: a non-leaf, as eager needs)
    args_j = (xj.clone() if writes else xj, wj)
    torch.manual_seed(i)
    random.seed(i)
    want = _leaves(fn(*args_e))
    rng_e = torch.get_rng_state()
    torch.manual_seed(i)
    random.seed(i)
    got = _leaves(jf(*args_j))
    assert torch.equal(torch.get_rng_state(), rng_e), "the random generator's state after the call differs"
    assert len(got) == len(want)
    for g, e in zip(got, want):
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape)
        torch.testing.assert_close(g, e)
    for a, b in zip(args_j, args_e):
        torch.testing.assert_close(a, b)
    if grad:
        sum(t.sum() for t in got if t.requires_grad).backward()
        sum(t.sum() for t in want if t.requires_grad).backward()
        for a, b in ((xj, xe), (wj, we)):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_answers_that_change_between_calls(name, cache):
    fn = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    for i in range(len(SHIFTS) + 2):  # (written_count with grad: refused, below)
        _compare(fn, jf, i, grad=i % 3 != 2 and fn is not _written_count)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_count_of_a_written_argument_read_with_gradients_is_refused(cache):
    """The count comes from the argument's new value, which needs gradients: the program's reads of it run after the
    writeback, on the caller's tensor (transforms/written_tails.py), so a failed check could no longer run the call
    again; refused at the user's line rather than run with a stale answer."""
    jf = jitcore.jit(_written_count, cache=cache)
    x, w = _inputs(0, True)
    with pytest.raises(jitcore.UnsupportedError, match="data-dependent control flow") as info:
        jf(x.clone(), w)
    assert "test_runtime_sizes.py" in str(info.value) and "y.shape[0] > x.numel() // 2" in str(info.value)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_decided_comparisons_need_no_guard(cache):
    """`u >= 0`, `u <= x.numel()`, `min(u, i0 * i1) == u`: the bounds decide them (a count is at most the numel it
    counts), so the prologue recomputes nothing and the program checks nothing."""
    jf = jitcore.jit(_decided, cache=cache)
    for i in range(4):
        _compare(_decided, jf, i, grad=True)
    assert jitcore.cache_misses(jf) == 2  # (w's two shapes: 1 and 5; a size 1 is specialised in both modes)
    assert "data_guard" not in str(jitcore.last_prologue_traces(jf)[-1])
    assert "check_size" not in str(jitcore.last_traces(jf)[-1])


def test_a_failed_check_runs_the_entry_for_the_other_answer():
    """The program checks an answer the prologue cannot compute; a call with the other answer runs the other entry
    (compiled once), and alternating calls reuse both."""
    jf = jitcore.jit(_written_count, cache="symbolic values")
    for i in range(6):
        _compare(_written_count, jf, i, grad=False)
    assert "check_size" in str(jitcore.last_traces(jf)[-1])
    assert jitcore.cache_misses(jf) == 4  # (w's two shapes, 1 and 5, times the two answers)
    for i in range(6, 12):
        _compare(_written_count, jf, i, grad=False)
    assert jitcore.cache_misses(jf) == 4
    assert any("a check the program runs failed" in r for r in jf._cache.miss_reasons)


def test_prints_before_a_check_print_once():
    """A failed check lets another entry run the call from the start: the program's prints are written when it ends,
    so a call prints what eager prints, once, in order."""
    def f(x):
        print("first", x.shape[0])
        y = x[torch.rand_like(x) < 0.5]
        print("count", y.shape[0])
        return x * 2 if y.shape[0] > 10 else x - 1

    jf = jitcore.jit(f)
    for i in range(6):
        x = torch.randn(4, 5)
        printed = []
        for fn in (jf, f):
            out = io.StringIO()
            torch.manual_seed(i)
            with contextlib.redirect_stdout(out):
                result = fn(x)
            printed.append((out.getvalue(), result))
        assert printed[0][0] == printed[1][0]
        torch.testing.assert_close(printed[0][1], printed[1][1])
    assert any("a check the program runs failed" in r for r in jf._cache.miss_reasons)


def test_a_check_after_a_log_call_is_refused():
    """A logging call's handlers run when the program does: a failed check after one could not take it back, so the
    program is refused, naming the call (never a second record)."""
    import logging

    def f(x):
        logging.getLogger("jitcore.test").warning("hello")
        y = x[torch.rand_like(x) < 0.5]
        return x * 2 if y.shape[0] > 10 else x - 1

    with pytest.raises(jitcore.DataDependentError, match="after log_"):
        jitcore.jit(f)(torch.randn(4, 5))


def test_random_count_with_inductor():
    jf = jitcore.jit(_random_count, executors=[inductor_ex, torch_ex])
    for i in range(4):
        _compare(_random_count, jf, i, grad=True)


def test_no_check_without_a_compile():
    """Outside a compile (a bare trace, no real values) Python still cannot read a run-time size."""
    from jitcore.ir.proxies import TensorProxy
    from jitcore.ir.trace import Trace, tracectx
    from jitcore.ops.torch_index import getitem

    with tracectx(Trace()):
        p = TensorProxy((4,), torch.float32, torch.device("cpu"))
        selected = getitem(p, p > 0)
        with pytest.raises(jitcore.DataDependentError, match="known only at run time"):
            bool(selected.shape[0] > 2)
