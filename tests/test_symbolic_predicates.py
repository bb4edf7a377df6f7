"""cache="symbolic values" records only the predicates an op's meta or a Python branch needs: sizes that merely
coincide on the first call (batch 16 and hidden 16) are not tied, comparisons the sizes' lower bounds and the
predicates already recorded decide (`i0 * i1 >= 0`, a slice's clamps, `i1 * 2 == 18` after `i1 == 9`) are not
checked, a predicate that really fails is a miss whose reason names it with this call's values, and every result
equals eager's. The bounds analysis itself (jitcore/ir/bounds.py) is checked on expressions against a grid of sizes."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore
from jitcore.ir import bounds

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


# -- the bounds analysis (jitcore/ir/bounds.py) on expressions: what it decides holds on every size it allows, what
# it leaves open really is open; a grid of sizes >= 2 (and an int number input of either sign) is the oracle --------
GRID = [{"i0": a, "i1": b, "n": n} for a in range(2, 10) for b in range(2, 10) for n in range(-5, 6)]


def _values(expr: str):
    """expr's value at each grid point (None where Python raises, as on a division by zero)."""
    code = compile(expr, "<expr>", "eval")
    out = []
    for point in GRID:
        try:
            out.append(eval(code, {}, dict(point)))
        except ZeroDivisionError:
            out.append(None)
    return out


def _outcomes(a, op, b) -> set:
    cmp = bounds.COMPARE[op]
    return {cmp(x, y) for x, y in zip(_values(str(a)), _values(str(b))) if x is not None and y is not None}


def _facts(**learned):
    return bounds.Facts({"i0": 2, "i1": 2}, ints={"n"}, **learned)


@pytest.mark.parametrize("a, op, b, want", [
    # floor division and remainder: a constant divisor of the variable part, a common factor, a constant quotient
    ("(i0 * 48) % (i0 * 6)", "==", 0, True),  # the -1 of a reshape (B, N, 3, H, -1): numel // known
    ("(i0 * 48) // (i0 * 6)", "==", 8, True),
    ("(2 * i0 + 1) // 2", "==", "i0", True),
    ("(2 * i0 + 1) % 2", "==", 1, True),
    ("(i0 * i1) // (i0 * 2)", "==", "i1 // 2", True),
    ("(i0 * i1) // i1", "==", "i0", True),
    ("0 % (i1 + 1)", "==", 0, True),  # a slice start 0 % n
    ("(i1 - 1) % i1", "==", "i1 - 1", True),  # x[:, n - 1]
    ("(i0 // 3) * 3", "<=", "i0", True),
    ("(i0 // 3) * 3", ">", "i0 - 3", True),
    ("2 * ((i1 - 2) // 2)", ">", "i1 - 2", False),  # a pooled size
    ("(n // 4) * 4", "<=", "n", True),
    # max / min / abs: decided by the bounds, or bounded by what they are of
    ("min(i0 + 1, 1)", "==", 1, True),  # slice clamps of a constant bound: sizes are >= 2
    ("max(min(i0, 1), i0)", "==", "i0", True),
    ("min(i0, i1)", "<=", "i0", True),
    ("max(i0, i1) - min(i0, i1)", ">=", 0, True),
    ("min(i1, max(0, i0 - 3))", ">=", 0, True),  # a slice length is in [0, size]
    ("min(i1, max(0, i0 - 3))", "<=", "i1", True),
    ("min(i1, n)", "<=", "i1", True),
    ("abs(i0 - i1)", ">=", "i1 - i0", True),
    ("abs(n) + 1", "!=", 0, True),
])
def test_bounds_decide_what_every_allowed_size_satisfies(a, op, b, want):
    assert bounds.decide(op, a, b, _facts()) is want
    assert _outcomes(a, op, b) == {want}  # (the oracle agrees: it is implied)


@pytest.mark.parametrize("a, op, b", [
    ("max(i0, i1)", "==", "i0"),  # which one is larger differs between calls: a predicate
    ("min(i0, 3)", "==", 3),
    ("max(i0 - 3, 0)", "==", 0),
    ("min(i0, i1) - 2", ">", 0),
    ("(i0 * i1) % (i0 * 2)", "==", 0),
    ("2 * (i1 // 2)", "==", "i1"),
    ("(i0 + i1) % 3", "==", 0),
    ("i0 // 2", ">", 1),
    ("abs(i0 - i1)", ">", 0),
    ("min(i1, n)", ">=", 0),  # a number input has no bound of its own
    ("n % i0", "==", "n"),
])
def test_bounds_keep_what_some_allowed_size_breaks(a, op, b):
    assert bounds.decide(op, a, b, _facts()) is None
    assert _outcomes(a, op, b) == {True, False}  # (the oracle agrees: it is open)


@pytest.mark.parametrize("expr, text", [
    ("((i0 - (i0 - 1)) - 1) + i0", "i0"),
    ("(i0 * 48) // (i0 * 6)", "8"),
    ("(1 + i1) - min(1 + i1, 1)", "i1"),
    ("max(i1, i0)", "max(i0, i1)"),
    ("(i0 * i1) % (i0 * 2)", "((i1 % 2) * i0)"),
    ("(i0 * (i1 + 1) * 3) * 2", "(6 * i0 * i1 + 6 * i0)"),
])
def test_simplified_expressions_are_exact(expr, text):
    assert bounds.simplify(expr, _facts())[0] == text
    assert _values(text) == _values(expr)


def test_recorded_predicates_are_facts_for_what_follows():
    facts = _facts()
    bounds.learn("==", "(1 + i1) - 1", 9, facts, facts)  # a size pinned by a weight: i1 is 9
    assert bounds.simplify("(i0 * (1 + i1) * 48) // ((i0 * (1 + i1) * 3) * 2)", facts) == ("8", 8)
    assert bounds.decide("==", "i1 * 2", 18, facts) is True
    assert bounds.decide("==", "i0 * 2", 18, facts) is None  # the other size is still any size
    bounds.learn(">", "i0", 4, facts, facts)  # a branch: i0 >= 5
    assert bounds.decide(">", "i0", 2, facts) is True and bounds.decide(">", "i0", 6, facts) is None
    bounds.learn("<=", "i0 - 1", 6, facts, facts)  # and i0 <= 7
    assert bounds.decide("<", "i0", 8, facts) is True and bounds.decide("<", "i0", 7, facts) is None
    bounds.learn("==", "((i0 * i1) // 2) % 3", 0, facts, facts)  # a sub-expression, by its text
    assert bounds.decide("==", "(((i0 * i1) // 2) % 3) * 5", 0, facts) is True
    bounds.learn("==", "n", "i0", facts, facts)  # two symbols: n reads as i0
    assert bounds.decide(">=", "n", 5, facts) is True


_LEAVES = st.sampled_from(["i0", "i1", "n", "0", "1", "2", "3", "-1"])


def _combine(children):
    binary = st.sampled_from(["+", "-", "*", "//", "%"])
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["max", "min"]), children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        children.map(lambda c: f"abs({c})"))


_EXPRS = st.recursive(_LEAVES, _combine, max_leaves=7)


@settings(max_examples=150, deadline=None)
@given(_EXPRS, st.sampled_from(sorted(bounds.COMPARE)), _EXPRS)
def test_random_size_arithmetic_is_never_decided_wrong(a, op, b):
    """Whatever the analysis says of random expressions holds at every grid point: a decided comparison has that
    outcome, and a simplified expression has the value of the original (where the original has one)."""
    answer = bounds.decide(op, a, b, _facts())
    if answer is not None:
        assert _outcomes(a, op, b) <= {answer}, (a, op, b, answer)
    text, value = bounds.simplify(a, _facts())
    if text is not None:
        want = _values(a)
        got = _values(text)
        assert all(w is None or w == g for w, g in zip(want, got)), (a, text)
        assert value is None or {w for w in want if w is not None} <= {value}, (a, value)


# -- end to end: predicates the analysis drops leave the prologue, the ones it keeps still recompile ----------------
def max_decides_a_branch(x, y):
    a, b = x.shape[0], y.shape[0]
    out = torch.zeros(max(a, b))  # a recorded max(i0, i1): no predicate
    out[:a] += x
    out[:b] += y
    if max(a, b) == a:  # which one won differs between calls: a predicate
        return out * 2
    return out - 1


def test_a_max_whose_outcome_differs_is_a_predicate_and_recompiles():
    jf = jitcore.jit(max_decides_a_branch, cache=SYM)
    calls = [(torch.randn(a), torch.randn(b)) for a, b in [(5, 3), (7, 2), (3, 6), (4, 9), (6, 6), (9, 8)]]
    run_all(jf, max_decides_a_branch, calls)
    assert jitcore.cache_misses(jf) == 2, jitcore.cache_miss_reasons(jf)
    assert "predicate i0 == max(i0, i1) (i0=3, i1=6)" in jitcore.cache_miss_reasons(jf)[-1]


def nested_branches(x):
    n = x.shape[0]
    out = x * 1
    if n > 4:
        out = out + 1
    if n > 2:  # decided where n > 4 held
        out = out * 3
    if n > 6:  # decided where n > 4 did not hold
        out = out - 5
    return out


def test_a_branch_that_held_bounds_the_size_for_later_branches():
    jf = jitcore.jit(nested_branches, cache=SYM)
    sizes = (5, 9, 7, 3, 2, 12, 6, 4, 8)
    run_all(jf, nested_branches, [(torch.randn(n),) for n in sizes])
    assert jitcore.cache_misses(jf) == 4, jitcore.cache_miss_reasons(jf)  # n = 2, 3..4, 5..6, >= 7
    jf(torch.randn(5))
    assert predicates(jf) == ["i0 > 4", "not (i0 > 6)"]


def slices_by_a_number(x, k):
    return x[:, :k] * 2, x[:, k:].sum(1), x[:, 1:k + 1].shape[1]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 9), st.integers(-12, 12)), min_size=1, max_size=6))
def test_slices_by_a_number_are_eager_and_record_only_its_sign(calls):
    jf = jitcore.jit(slices_by_a_number, cache=SYM)
    run_all(jf, slices_by_a_number, [(torch.randn(3, n), k) for n, k in [(8, 5)] + calls])
    jf(torch.randn(3, 8), 5)
    # the clamps min(i1, i2), max(0, ...) are in [0, i1]: only the sign of the bounds is a predicate
    assert predicates(jf) == ["not (i2 < 0)"]


class PinnedTokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(9, 1))

    def forward(self, x):
        b, n, c = x.shape
        x = x + self.pos  # pins n to 9: later arithmetic on n is numbers
        heads = x.reshape(b, 3, n // 3, c).transpose(1, 2).reshape(b, n // 3, -1)
        return heads[:, 1:n // 3].sum(-1)


def test_a_size_pinned_by_a_predicate_leaves_no_other_predicate():
    torch.manual_seed(0)
    m = PinnedTokens()
    jm = jitcore.jit(m, cache=SYM)
    with torch.no_grad():
        run_all(jm, m, [(torch.randn(b, 9, c),) for b, c in [(2, 4), (3, 4), (5, 7), (4, 2)]])
        assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)
        assert predicates(jm) == ["9 == i1"]
        with pytest.raises(RuntimeError):  # eager's error for another token count (a miss, then eager's check)
            jm(torch.randn(2, 6, 4))
    assert "predicate 9 == i1 (i1=6)" in jitcore.cache_miss_reasons(jm)[-1]


# branches on a float passed in, true or false for NaN and the infinities where they are for finite values
FLOAT_BRANCHES = {
    "self_equal": lambda s: s == s, "self_unequal": lambda s: s != s, "self_ge": lambda s: s >= s,
    "plus_one_greater": lambda s: s + 1 > s, "times_zero": lambda s: s * 0 == 0, "minus_self": lambda s: s - s == 0,
    "not_inf": lambda s: s != float("inf"), "below_inf": lambda s: s < float("inf"), "isnan": lambda s: math.isnan(s),
    "square": lambda s: s * s >= 0, "sign_bit": lambda s: math.copysign(1.0, s) > 0,
    "text": lambda s: str(s).startswith("-"),
}
NON_FINITE = (float("nan"), float("inf"), float("-inf"))


@pytest.mark.parametrize("mode", [SYM, "constant values", "no caching"])
@pytest.mark.parametrize("name", sorted(FLOAT_BRANCHES))
def test_float_branches_with_nan_and_infinities_take_eager_s_path(name, mode):
    """A float passed in may be NaN or infinite: a comparison of an expression with itself is not decided without
    its value (`s == s` is False for NaN), the prologue names inf as `float('inf')`, and a value it specialises on
    is checked by its bits where == cannot tell (NaN, -0.0 against 0.0). Sequences starting at each of NaN, inf,
    -inf and a finite value. Under "constant values" the value check and the signature key tell -0.0 from 0.0 and
    find a NaN's entry again (one compile per value, not one per NaN call)."""
    branch = FLOAT_BRANCHES[name]

    def fn(x, s):
        return x * 3 if branch(s) else x * 2

    x = torch.tensor([1.0, -2.0])
    for first in (*NON_FINITE, 1.5):
        jfn = jitcore.jit(fn, cache=mode)
        values = (first, *NON_FINITE, 2.0, 0.0, -0.0, -0.5, float("nan"), 0.0, -0.0)
        for s in values:
            assert torch.equal(jfn(x, s), fn(x, s)), (first, s)
        if mode == "constant values":
            assert jitcore.cache_misses(jfn) == len({v.hex() for v in values})
