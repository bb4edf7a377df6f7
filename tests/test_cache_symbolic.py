"""cache="symbolic values": one trace serves many shapes, and it is never wrong. A property test runs
size-dependent functions over random shapes (0 and 1 included) with one jitted function each and compares every
result with eager; unit tests check the traces stay compact and the predicates read well."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore


def branch(x, n):
    if x.shape[0] > 3:
        return x * 2
    return x - 1


def broadcast(x, n):
    y = x[:1] if n % 2 else x  # a size that flips between 1 and x.shape[0]
    return x + y


def reshape_from_sizes(x, n):
    flat = x.reshape(x.shape[0] * x.shape[1])
    return flat.reshape(x.shape[1], x.shape[0]) * 2


def half_slice(x, n):
    return x[: x.shape[0] // 2] + 1


def int_dim_and_repeat(x, n):
    return x.sum(n % 2) * 1.5, x.repeat(n, 1)


def view_minus_one(x, n):
    cols = x.shape[1]
    if cols == 0:  # eager refuses view(-1, 0)
        return x + n
    return x.view(-1, cols).t() + n


def arithmetic(x, n):
    k = min(x.shape[0], n + 1)
    return x[:k, : max(x.shape[1] - n, 0)] * (n + 1) / x.numel() if x.numel() else x


def loop_over_rows(x, n):
    out = x.new_zeros(x.shape[1:])
    for i in range(x.shape[0]):
        out = out + x[i] * i
    return out


def unsqueeze_add(x, n):
    return (x.unsqueeze(1) + x.unsqueeze(0)).sum(-1)


def cat_and_mean(x, n):
    y = torch.cat([x, x * n], dim=0)
    return y.mean(dim=0, keepdim=True) - y


FUNCTIONS = [branch, broadcast, reshape_from_sizes, half_slice, int_dim_and_repeat, view_minus_one, arithmetic,
             loop_over_rows, unsqueeze_add, cat_and_mean]
_JITTED = {}


def _jitted(fn):
    if fn not in _JITTED:
        _JITTED[fn] = jitcore.jit(fn, cache="symbolic values")
    return _JITTED[fn]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(0, 6), cols=st.integers(0, 6), n=st.integers(1, 4))
def test_symbolic_values_never_wrong(fn, rows, cols, n):
    x = torch.randn(rows, cols)
    expected = fn(x, n)
    got = _jitted(fn)(x, n)
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_symbolic_entries_are_shared():
    for fn in (reshape_from_sizes, unsqueeze_add, cat_and_mean, half_slice):
        jf = jitcore.jit(fn, cache="symbolic values")
        for rows, cols, n in [(2, 3, 1), (4, 5, 1), (7, 2, 1), (3, 3, 1)]:
            x = torch.randn(rows, cols)
            torch.testing.assert_close(jf(x, n), fn(x, n))
        assert jitcore.cache_misses(jf) == 1, (fn.__name__, jitcore.cache_miss_reasons(jf))


def test_branch_records_predicate_and_misses_when_it_flips():
    jf = jitcore.jit(branch, cache="symbolic values")
    for rows in (5, 6, 9):
        torch.testing.assert_close(jf(torch.ones(rows, 2), 1), torch.ones(rows, 2) * 2)
    assert jitcore.cache_misses(jf) == 1
    assert any("not (i0 > 3)" in str(t) for t in jitcore.last_prologue_traces(jf))  # the prologue checks it
    torch.testing.assert_close(jf(torch.ones(3, 2), 1), torch.zeros(3, 2))
    assert jitcore.cache_misses(jf) == 2
    assert "predicate i0 > 3" in jitcore.cache_miss_reasons(jf)[-1]


def test_size_read_many_times_appears_once():
    def f(x):
        return x.reshape(x.shape[0] * x.shape[1]) + x.shape[0] * x.shape[1] + x.reshape(-1).shape[0]

    jf = jitcore.jit(f, cache="symbolic values")
    for shape in [(2, 3), (4, 5)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(jf(x), f(x))
    lines = [x for x in str(jitcore.last_traces(jf)[-1]).splitlines() if not x.strip().startswith("#")]
    assert sum("shape(t0)" in x for x in lines) == 1, lines
    assert jitcore.cache_misses(jf) == 1


def test_int_and_float_arguments_are_symbols():
    def f(x, n, s):
        return x.repeat(n, 1) * s

    jf = jitcore.jit(f, cache="symbolic values")
    for n, s in [(2, 0.5), (3, 1.5), (5, -2.0)]:
        x = torch.randn(2, 3)
        torch.testing.assert_close(jf(x, n, s), f(x, n, s))
    assert jitcore.cache_misses(jf) == 1
    trace = str(jitcore.last_traces(jf)[-1])
    assert "f0" in trace and "i" in trace


def test_autodiff_one_trace_for_many_shapes():
    def foo(a, b):
        a = a.unsqueeze(1)
        return a + b

    jf = jitcore.jit(foo, cache="symbolic values")
    for n, m in [(3, 4), (5, 6), (2, 7), (8, 3)]:
        a = torch.randn(n, m, requires_grad=True)
        b = torch.randn(n, 1, m, requires_grad=True)
        out = jf(a, b)
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, (a, b), g)
        want = torch.autograd.grad(foo(a, b), (a, b), g)
        torch.testing.assert_close(out, foo(a, b))
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y)
    assert jitcore.cache_misses(jf) == 1
    assert "prims.shape" not in str(jitcore.last_backward_traces(jf)[-1])


def test_sizes_zero_and_one_are_specialised():
    jf = jitcore.jit(lambda x: x * 2, cache="symbolic values")
    for rows in (0, 1, 2, 3):
        torch.testing.assert_close(jf(torch.ones(rows, 3)), torch.ones(rows, 3) * 2)
    assert jitcore.cache_misses(jf) == 3  # 0, 1, then one entry for every size >= 2
