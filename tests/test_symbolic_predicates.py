"""cache="symbolic values" records only the predicates an op's meta or a Python branch needs: sizes that merely
coincide on the first call (batch 16 and hidden 16) are not tied, comparisons the sizes' lower bounds decide
(`i0 * i1 >= 0`) are not checked, a predicate that really fails is a miss whose reason names it with this call's
values, and every result equals eager's."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore

SYM = "symbolic values"
sizes = st.integers(min_value=2, max_value=24)
size_lists = st.lists(sizes, min_size=1, max_size=4)


def predicates(jfn) -> list[str]:
    """The predicates the latest prologue checks (`if not (<predicate>): return None`)."""
    lines = str(jitcore.last_prologue_traces(jfn)[-1]).splitlines()
    return [ln.strip()[len("if not ("):-len("): return None")] for ln in lines if ln.strip().startswith("if not (")]


def run_all(jfn, fn, calls):
    for args in calls:
        torch.testing.assert_close(jfn(*args), fn(*args))


@settings(max_examples=10, deadline=None)
@given(size_lists)
def test_linear_module_batch_equal_to_hidden_then_other_batches_hit(batches):
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    jl = jitcore.jit(lin, cache=SYM)
    with torch.no_grad():
        run_all(jl, lin, [(torch.randn(b, 16),) for b in [16] + batches])
    assert jitcore.cache_misses(jl) == 1, jitcore.cache_miss_reasons(jl)
    assert predicates(jl) == ["16 == i1"]  # the weight's size meets the input's last size; the batch meets nothing


@settings(max_examples=10, deadline=None)
@given(size_lists, size_lists)
def test_matmul_plus_one_ties_only_the_contracted_sizes(batches, outs):
    def f(x, w):
        return x @ w + 1

    jf = jitcore.jit(f, cache=SYM)
    calls = [(torch.randn(16, 16), torch.randn(16, 16))]
    calls += [(torch.randn(b, 16), torch.randn(16, o)) for b, o in zip(batches, outs)]
    run_all(jf, f, calls)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    assert predicates(jf) == ["i1 == i2"]  # x's columns meet w's rows; nothing else is tied


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(sizes, sizes, sizes), min_size=1, max_size=4))
def test_sizes_that_never_meet_in_one_op_are_not_tied(shapes):
    def f(x, y, z):
        return x.sum(0) * y.shape[0] + z.mean(), torch.cat([x.flatten(), y, z.t().flatten()])

    jf = jitcore.jit(f, cache=SYM)
    calls = [(torch.randn(16, 16), torch.randn(16), torch.randn(16, 16))]
    calls += [(torch.randn(a, b), torch.randn(c), torch.randn(c, a)) for a, b, c in shapes]
    run_all(jf, f, calls)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    assert predicates(jf) == []


@settings(max_examples=10, deadline=None)
@given(size_lists)
def test_elementwise_between_inputs_records_the_real_equality(ns):
    def f(x, y):
        return x * y + x

    jf = jitcore.jit(f, cache=SYM)
    calls = [(torch.randn(16, 16), torch.randn(16, 16))] + [(torch.randn(n, 16), torch.randn(n, 16)) for n in ns]
    run_all(jf, f, calls)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    assert sorted(predicates(jf)) == ["i0 == i2", "i1 == i3"]  # broadcasting between two symbolic sizes


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(sizes, sizes), min_size=1, max_size=5))
def test_a_branch_that_flips_misses_with_the_predicate_and_its_values(pairs):
    def f(x, y):
        if x.shape[0] > y.shape[0]:
            return x.sum() * 2
        return y.sum() - 1

    jf = jitcore.jit(f, cache=SYM)
    calls = [(torch.randn(16), torch.randn(16))] + [(torch.randn(a), torch.randn(b)) for a, b in pairs]
    run_all(jf, f, calls)
    outcomes = [x.shape[0] > y.shape[0] for x, y in calls]
    assert jitcore.cache_misses(jf) == len(set(outcomes)), jitcore.cache_miss_reasons(jf)
    if len(set(outcomes)) == 2:
        i = outcomes.index(True)  # the first call that took the other branch missed on the predicate
        reason = jitcore.cache_miss_reasons(jf)[-1]
        assert f"predicate not (i0 > i1) (i0={calls[i][0].shape[0]}, i1={calls[i][1].shape[0]})" in reason, reason


def test_a_size_pinned_by_a_weight_misses_with_the_predicate():
    lin = torch.nn.Linear(16, 4)
    jl = jitcore.jit(lin, cache=SYM)
    with torch.no_grad():
        jl(torch.randn(16, 16))
        with pytest.raises(RuntimeError, match="cannot be multiplied"):  # eager refuses too (its type): 16 inputs
            jl(torch.randn(16, 8))
    assert "predicate 16 == i1 (i1=8)" in jitcore.cache_miss_reasons(jl)[-1]


def bounded(x):
    """Comparisons the lower bound 2 of every size decides (not recorded) next to ones it does not (recorded):
    the result depends on each, so a wrong decision shows as a difference from eager."""
    a, b = x.shape
    decided = [a * b >= 0, a != a * b, a * 4 != 0, (a * b) // (a * 2) >= 0, -(-a // 2) > 0, (a + 1) - 1 == a,
               (a * b) % 1 == 0, a * a - 2 * a >= 0, a // 2 >= 1, b % 3 < 3]
    open_ = [a // 2 > 1, a * b > 8, (a - b) * (a - b) > 0, b % 3 == 0, a - 2 * b >= 0, -(-b // 4) == 2]
    out = x
    for k, c in enumerate(decided + open_):
        out = out + (k + 1) if c else out * 0.5
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 9), st.integers(2, 9)), min_size=1, max_size=6))
def test_comparisons_the_lower_bounds_decide_are_not_predicates_and_stay_right(shapes):
    jf = jitcore.jit(bounded, cache=SYM)
    run_all(jf, bounded, [(torch.randn(a, b),) for a, b in shapes])
    preds = " ".join(predicates(jf))
    for text in ("(i0 * i1) >= 0", "i0 != i0 * i1", "4 * i0", "% 1", "== i0", "(i0 * i0 - 2 * i0) >= 0", ">= 1", "< 3"):
        assert text not in preds, (text, preds)
    assert len(predicates(jf)) == 6, predicates(jf)  # one per open comparison
    # the undecided ones are all checked, so the number of compiles is the number of distinct outcomes
    keys = set()
    for a, b in shapes:
        keys.add((a // 2 > 1, a * b > 8, (a - b) * (a - b) > 0, b % 3 == 0, a - 2 * b >= 0, -(-b // 4) == 2))
    assert jitcore.cache_misses(jf) <= len(keys), jitcore.cache_miss_reasons(jf)


def test_trivially_true_size_checks_leave_the_prologue():
    for f in (lambda x: x.reshape(-1) * 2, lambda x: x.flatten() + 1, lambda x: torch.softmax(x, -1)):
        jf = jitcore.jit(f, cache=SYM)
        run_all(jf, f, [(torch.randn(16, 16),), (torch.randn(8, 5),), (torch.randn(3, 7),)])
        assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
        assert predicates(jf) == []


def test_number_inputs_have_no_bound():
    def f(x, n, r):  # n is any int, r any float (nan: `r - r == 0` fails): both stay predicates
        return x * 2 if n > 0 and r - r == 0 else x - 1

    jf = jitcore.jit(f, cache=SYM)
    run_all(jf, f, [(torch.randn(4), 3, 1.5), (torch.randn(4), 5, 2.5), (torch.randn(4), 4, float("nan"))])
    assert jitcore.cache_misses(jf) == 2, jitcore.cache_miss_reasons(jf)
    run_all(jf, f, [(torch.randn(4), -2, 1.0)])
    assert jitcore.cache_misses(jf) == 3
    assert "> 0" in jitcore.cache_miss_reasons(jf)[-1] and "=-2)" in jitcore.cache_miss_reasons(jf)[-1]


def test_layer_norm_model_with_batch_equal_to_hidden_then_other_batches_hit():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 16))
    jm = jitcore.jit(m, cache=SYM)
    with torch.no_grad():
        run_all(jm, m, [(torch.randn(b, 16),) for b in (16, 8, 5, 32)])
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


def test_view_with_a_constant_and_minus_one_hits_when_the_last_size_is_the_constant():
    def f(x):
        return x.view(x.shape[0], 4, -1).sum(-1)

    jf = jitcore.jit(f, cache=SYM)
    run_all(jf, f, [(torch.randn(16, 16),), (torch.randn(8, 16),), (torch.randn(8, 4),), (torch.randn(5, 12),)])
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
