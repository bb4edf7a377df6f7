"""Caching and guards: hit/miss counts per cache mode, and a guard for every kind of input the trace depends on
(a miss retraces and the new value is used)."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

import jitcore
from jitcore.guards import cache as cache_mod


def _add(a, b):
    return a + b


def _counts(jfn):
    return jitcore.cache_hits(jfn), jitcore.cache_misses(jfn)


def test_unknown_cache_option_lists_valid_ones():
    with pytest.raises(ValueError, match="'constant values', 'symbolic values', 'no caching'"):
        jitcore.jit(_add, cache="sometimes")


@pytest.mark.parametrize("mode,expected", [
    ("constant values", (2, 3)),  # (2,2) miss, hit, (3,2) miss, (2,2) hit, float64 miss
    ("symbolic values", (3, 2)),  # (2,2) miss, hit, (3,2) hit, (2,2) hit, float64 miss
    ("no caching", (0, 5)),
])
def test_hit_miss_sequence(mode, expected):
    jf = jitcore.jit(_add, cache=mode)
    calls = [(2, 2, torch.float32), (2, 2, torch.float32), (3, 2, torch.float32), (2, 2, torch.float32),
             (2, 2, torch.float64)]
    for n, m, dt in calls:
        a, b = torch.randn(n, m, dtype=dt), torch.randn(n, m, dtype=dt)
        torch.testing.assert_close(jf(a, b), a + b)
    assert _counts(jf) == expected
    reasons = jitcore.cache_miss_reasons(jf)
    assert len(reasons) == expected[1] and reasons[0] == ("first call: nothing cached yet" if mode != "no caching"
                                                          else "cache='no caching': every call is traced")
    if mode == "constant values":
        assert "expected a tensor cpu f32[2, 2]" in reasons[1]


def test_jit_with_options_only_is_a_decorator():
    """`@jitcore.jit(cache=...)` as torch.compile's users write it: the options are checked at once, the function
    comes next, and the result is the jitted function with those options."""
    @jitcore.jit(cache="symbolic values")
    def add(a, b):
        return a + b

    for n in (2, 3, 4):
        a = torch.randn(n, 2)
        torch.testing.assert_close(add(a, a), a + a)
    assert _counts(add) == (2, 1)
    with pytest.raises(ValueError, match="'constant values'"):
        jitcore.jit(cache="sometimes")
    module = jitcore.jit(executors=["torch"])(torch.nn.Linear(2, 2))
    assert isinstance(module, torch.nn.Module)


def test_options_give_separate_caches():
    j1, j2 = jitcore.jit(_add), jitcore.jit(_add, executors=["torch"])
    a = torch.randn(2, 2)
    j1(a, a)
    j1(a, a)
    j2(a, a)
    assert _counts(j1) == (1, 1) and _counts(j2) == (0, 1)


def test_global_int_change_misses_and_uses_new_value():
    global SCALE
    SCALE = 2

    def f(x):
        return x * SCALE

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert jf(x).tolist() == [2.0, 2.0]
    assert jf(x).tolist() == [2.0, 2.0]
    SCALE = 3
    assert jf(x).tolist() == [3.0, 3.0]
    assert _counts(jf) == (1, 2)
    assert "SCALE" in jitcore.cache_miss_reasons(jf)[-1]


SCALE = 2


def test_closure_cell_change():
    k = 2

    def f(x):
        return x + k

    jf = jitcore.jit(f)
    x = torch.zeros(1)
    assert jf(x).item() == 2
    k = 5
    assert jf(x).item() == 5
    assert jitcore.cache_misses(jf) == 2


def test_module_attribute_change():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    m = M()
    jm = jitcore.jit(m)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jm(x), m(x))
    jm(x)
    m.scale = 0.5
    torch.testing.assert_close(jm(x), m(x))
    assert _counts(jm) == (1, 2)


def test_parameter_replaced_or_frozen():
    m = torch.nn.Linear(2, 2)
    jm = jitcore.jit(m)
    x = torch.randn(3, 2)
    jm(x)
    m.weight = torch.nn.Parameter(torch.randn(2, 2))  # a new object: fetched again, same trace
    torch.testing.assert_close(jm(x), m(x))
    m.weight.requires_grad_(False)
    out = jm(x)
    out.sum().backward()
    assert m.weight.grad is None and m.bias.grad is not None
    with torch.no_grad():
        m.double()
    torch.testing.assert_close(jm(x.double()), m(x.double()))


def test_grad_mode_and_default_dtype():
    def f(x):
        return x * 2 + torch.ones(2)

    jf = jitcore.jit(f)
    x = torch.ones(2, requires_grad=True)
    assert jf(x).requires_grad
    with torch.no_grad():
        assert not jf(x).requires_grad
    assert jitcore.cache_misses(jf) == 2
    torch.set_default_dtype(torch.float64)
    try:
        out = jf(torch.ones(2, dtype=torch.float64))
        assert out.dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert jitcore.cache_misses(jf) == 3


def test_autocast_state_is_guarded():
    jf = jitcore.jit(_add)
    a = torch.randn(2, 2)
    jf(a, a)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        jf(a, a)
    assert jitcore.cache_misses(jf) == 2
    assert "autocast" in jitcore.cache_miss_reasons(jf)[-1]


def test_int_where_float_was_traced():
    def f(x, s):
        return x * s

    for mode in ("constant values", "symbolic values"):
        jf = jitcore.jit(f, cache=mode)
        x = torch.ones(2, dtype=torch.int64)
        assert jf(x, 2.0).dtype == torch.float32
        out = jf(x, 2)
        assert out.dtype == torch.int64 and out.tolist() == [2, 2]
        assert jitcore.cache_misses(jf) == 2


def test_list_that_grows():
    def f(xs):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total

    def g(xs):
        return sum(xs[i] for i in range(len(xs)))

    for fn in (f, g):
        jf = jitcore.jit(fn)
        xs = [torch.ones(2), torch.ones(2)]
        assert jf(xs).tolist() == [2.0, 2.0]
        xs.append(torch.ones(2))
        assert jf(xs).tolist() == [3.0, 3.0]
        assert jitcore.cache_misses(jf) == 2


def test_module_list_grows():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    m = M()
    jm = jitcore.jit(m)
    x = torch.randn(1, 2)
    jm(x)
    m.layers.append(torch.nn.Linear(2, 2))
    torch.testing.assert_close(jm(x), m(x))
    m.layers.insert(0, torch.nn.Linear(2, 2))
    torch.testing.assert_close(jm(x), m(x))
    assert jitcore.cache_misses(jm) == 3


def test_global_function_rebound():
    global HELPER
    jf = jitcore.jit(lambda x: HELPER(x))
    x = torch.randn(3)
    HELPER = torch.sin
    torch.testing.assert_close(jf(x), torch.sin(x))
    HELPER = torch.cos
    torch.testing.assert_close(jf(x), torch.cos(x))


HELPER = torch.sin


def test_entry_limit_warning_suggests_symbolic_values_at_the_users_call_site(monkeypatch):
    monkeypatch.setattr(cache_mod, "ENTRY_WARN_LIMIT", 3)
    jf = jitcore.jit(_add)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(2, 7):
            a = torch.randn(n)
            jf(a, a)
            line = sys._getframe().f_lineno - 1
    found = [w for w in caught if "jitcore" in str(w.message)]
    texts = [str(w.message) for w in found]
    assert len(texts) == 1 and "symbolic values" in texts[0] and "expected a tensor" in texts[0]
    assert found[0].filename == __file__ and found[0].lineno == line  # the user's line, not jitcore's


def test_many_entries_select_by_key():
    jf = jitcore.jit(_add)
    for _ in range(2):
        for n in range(1, 6):
            a = torch.randn(n)
            torch.testing.assert_close(jf(a, a), a + a)
    assert _counts(jf) == (5, 5)


def test_prologue_trace_is_printed_and_runnable():
    jf = jitcore.jit(_add)
    a = torch.randn(2, 2)
    jf(a, a)
    hot, full = jitcore.last_prologue_traces(jf)
    assert "a.shape" not in str(hot) and "t0.shape != (2, 2)" in str(full)
    assert full.python_callable()(_add, (a, a), {})[0] is a
    assert full.python_callable()(_add, (torch.randn(3), a), {}) is None


def test_tensors_inside_an_argument_list_are_inputs_and_the_list_length_is_guarded():
    def f(xs, d):
        return torch.cat(xs, 0) * 2 + torch.stack(list(d.values())).sum()

    jf = jitcore.jit(f)
    d = {"a": torch.randn(3), "b": torch.randn(3)}
    for xs in ([torch.randn(2, 3), torch.randn(1, 3)], [torch.randn(2, 3), torch.randn(1, 3)],
               [torch.randn(2, 3), torch.randn(1, 3), torch.randn(4, 3)]):
        torch.testing.assert_close(jf(xs, d), f(xs, d))
    assert jitcore.cache_misses(jf) == 2
