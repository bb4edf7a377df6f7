"""Data-dependent Python values (`if mask.all():`, `x.item()`): computed from the call's inputs, guarded, and a
different value retraces; random or in-place sources are refused with the user's line."""
import math
import operator
import random

import pytest
import torch

import jitcore


def branch_on_mask(x, mask):
    if mask.all():
        return x * 2
    return x * mask


def test_branch_on_tensor_data_matches_eager_and_retraces_when_the_value_changes():
    jf = jitcore.jit(branch_on_mask)
    x = torch.randn(4)
    for m in (torch.ones(4), torch.ones(4), torch.tensor([1.0, 0, 1, 1]), torch.ones(4), torch.zeros(4)):
        torch.testing.assert_close(jf(x, m), branch_on_mask(x, m))
    assert jitcore.cache_misses(jf) == 2
    assert any("data:" in r for r in jitcore.cache_miss_reasons(jf))
    assert "data_guard" in str(jitcore.last_prologue_traces(jf)[-1])


def test_item_is_baked_in_and_guarded():
    def f(x):
        return x * x.sum().item()

    jf = jitcore.jit(f)
    for x in (torch.ones(3), torch.ones(3), torch.full((3,), 2.0)):
        torch.testing.assert_close(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 2


def test_gradients_flow_through_the_branch_taken():
    x = torch.randn(5, requires_grad=True)
    mask = torch.ones(5)
    jitcore.jit(branch_on_mask)(x, mask).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 2.0))


def test_values_from_random_ops_are_refused_with_the_users_line():
    def f(x):
        if torch.rand(()) > 0.5:
            return x
        return -x

    with pytest.raises(jitcore.DataDependentError, match="random"):
        jitcore.jit(f)(torch.randn(3))


def test_multi_element_bool_raises_like_eager():
    def f(x):
        return x if x > 0 else -x

    with pytest.raises(RuntimeError, match="ambiguous"):
        jitcore.jit(f)(torch.randn(3))


def test_examine_traces_through_a_data_dependent_branch():
    report = jitcore.examine(branch_on_mask, torch.randn(4), torch.ones(4))
    assert report.error is None
    assert "ltorch.all" in [r.op for r in report.ops]


def test_data_guard_reads_a_symbolic_size():
    """Under symbolic values a tensor made from a size (transformers' masking code compares such tensors) is a data
    guard over the size symbol: one compile per branch outcome, eager's results, never a stale branch."""
    def f(x):
        n = torch.tensor(x.shape[1])
        if n > 3:
            return x * 2
        return x - 1

    jf = jitcore.jit(f, cache="symbolic values")
    for cols, misses in [(5, 1), (6, 1), (3, 2), (7, 2), (2, 2)]:
        x = torch.randn(2, cols)
        torch.testing.assert_close(jf(x), f(x))
        assert jitcore.cache_misses(jf) == misses, jitcore.cache_miss_reasons(jf)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_data_guard_over_a_tensor_and_its_symbolic_numel(cache):
    """transformers' `fast_all(mask)` is `mask.sum() == mask.numel()`: a data guard reading a tensor argument and a
    size expression. Collecting its free values compared proxies with `==` (recording ops, then asking for the bool
    of a mask) instead of by name."""
    def f(x, mask):
        if mask.sum() == mask.numel():
            return x + 1
        return x - 1

    jf = jitcore.jit(f, cache=cache)
    for rows, cols, hole in [(2, 6, False), (2, 6, True), (3, 4, False), (3, 5, True)]:
        mask = torch.ones(rows, cols, dtype=torch.bool)
        mask[0, 0] = not hole
        x = torch.randn(2)
        torch.testing.assert_close(jf(x, mask), f(x, mask))


def packed_positions(x):
    """transformers' packed-sequence check (masking_utils, `use_cache=False`): positions from arange over the length,
    expanded to a batch size read back from a reshape (a size computed from the symbols), tested with `.all()`."""
    t = x.shape[1]
    n = x.reshape(-1, t).shape[0]
    pos = torch.arange(t).unsqueeze(0).expand(n, -1)
    starts = (pos[:, 1:] - pos[:, :-1] != 1).cumsum(-1)[:, -1]
    if (starts == 0).all():
        return x * 2 + pos
    return x - 1


@pytest.mark.parametrize("sizes", [[(2, 5), (3, 4), (4, 4), (6, 3)], [(4, 4), (2, 5), (3, 3), (5, 7)]],
                         ids=["distinct-first", "equal-first"])
def test_data_guard_reads_sizes_computed_from_the_symbols(sizes):
    """Under symbolic values a data guard reads the numbers its program needs by their expressions over the size
    symbols, and names them apart without comparing their values: batch == length (4x4, first or later) is no
    predicate and no recompile, and every call gives eager's result."""
    jf = jitcore.jit(packed_positions, cache="symbolic values")
    for shape in sizes:
        x = torch.randn(shape)
        torch.testing.assert_close(jf(x), packed_positions(x))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    prologue = str(jitcore.last_prologue_traces(jf)[-1])
    assert "i0 != i1" not in prologue and "i0 == i1" not in prologue, prologue


def test_data_guard_over_a_computed_size_retraces_when_its_value_changes():
    """The guard's program recomputes its value from this call's sizes: a branch decided by a size computed from the
    symbols (`b * t // t`) follows the call, one compile per outcome."""
    def f(x):
        n = x.reshape(-1, x.shape[1]).shape[0]
        if torch.ones(n).expand(x.shape[1], -1).sum() > 4 * x.shape[1]:
            return x * 2
        return x - 1

    jf = jitcore.jit(f, cache="symbolic values")
    for rows, misses in [(2, 1), (3, 1), (5, 2), (6, 2), (4, 2), (7, 2)]:
        x = torch.randn(rows, 3)
        torch.testing.assert_close(jf(x), f(x))
        assert jitcore.cache_misses(jf) == misses, jitcore.cache_miss_reasons(jf)


# -- values written in place before Python reads them: the guard's program replays the writes ---------------------
# Each write puts data from x into a tensor the function made, by a route users take (an index, a slice, a view, a
# method); a later branch reads that tensor. A guard that left the write out would see the tensor as it was made
# and take the branch of another call (this happened: the guard recomputed zeros).
_WRITES = [
    lambda y, x: y.__setitem__(0, x.sum()),
    lambda y, x: y[1:].copy_(x[:2]),
    lambda y, x: y.view(3, 1)[2].add_(x.max()),
    lambda y, x: y.narrow(0, 0, 2).mul_(x[0]),
    lambda y, x: y.__setitem__(y < 0, x.min()),
    lambda y, x: y.add_(x[:3]),
    lambda y, x: y.T.sub_(x[1:]) if y.ndim == 2 else y.sub_(x[1:]),
    lambda y, x: y.unsqueeze(0)[0, 1].fill_(x.mean()),
]
_READS = [
    lambda y: y[0] > 0,
    lambda y: y.sum() > 0,
    lambda y: (y > 0).any(),
    lambda y: y.max() > 0.5,
]


def _written_program(writes, read, start):
    def f(x):
        y = torch.zeros(3) if start == "zeros" else x[:3].clone()
        for w in writes:
            w(y, x)
        if read(y):
            return x * 2 + y.sum()
        return x - 1

    return f


@pytest.mark.parametrize("seed", range(24))
def test_data_guard_replays_writes_before_the_read(seed):
    import random
    rng = random.Random(seed)
    writes = rng.sample(_WRITES, rng.randint(1, 3))
    f = _written_program(writes, rng.choice(_READS), rng.choice(["zeros", "clone"]))
    jf = jitcore.jit(f, cache=("constant values", "symbolic values", "no caching")[seed % 3])
    for call in range(6):
        torch.manual_seed(seed * 10 + call)
        x = torch.randn(4) * (1 if call % 2 else -1)
        torch.testing.assert_close(jf(x), f(x), msg=f"seed {seed}, call {call}")


def test_data_guard_refuses_a_value_written_into_an_input():
    """Recomputing it in the prologue would write into the caller's tensor: refused, never run twice."""
    def f(x):
        x.add_(1)
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(jitcore.DataDependentError, match="in-place writes"):
        jitcore.jit(f)(torch.randn(3))


# Python conversions of a tensor read from its value: each a conversion of the call's tensor, which varies over the
# sequence in dtype and size. A list indexed by a float tensor (`xs[t]`, `range(t)`, `hex(t)`) raises TypeError in
# eager; jitcore truncated the value and answered. int()/float()/complex() of a tensor of several elements raise
# ValueError in eager (a RuntimeError here before), and __index__ of one a TypeError.
_CONVERSIONS = {
    "xs[t]": lambda x, t: x * [1.0, 2.0, 3.0, 4.0][t],
    "range(t)": lambda x, t: x * len(range(t)),
    "operator.index(t)": lambda x, t: x * operator.index(t),
    "x[:t]": lambda x, t: x[:t].sum() + x,
    "int(t)": lambda x, t: x * int(t),
    "float(t)": lambda x, t: x * float(t),
    "complex(t)": lambda x, t: x * complex(t).real,
    "bool(t)": lambda x, t: x * 2 if t else x,
    "t.item()": lambda x, t: x * t.item(),
    "torch.equal(t, t)": lambda x, t: x * 2 if torch.equal(t, t) else x,
    "torch.equal(t, t + 0)": lambda x, t: x * 2 if torch.equal(t, t + 0) else x,
}
_CONVERTED = (torch.tensor([1]), torch.tensor([1.5]), torch.tensor(2), torch.tensor([1, 2]), torch.tensor(True),
              torch.zeros(0), torch.tensor([[3]], dtype=torch.uint8), torch.tensor(float("nan")), torch.tensor(0.0))


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # (eager's errors: the same type expected)
        return type(e).__name__


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("conversion", sorted(_CONVERSIONS))
def test_conversions_of_a_tensor_raise_and_answer_as_eager(conversion, mode):
    fn = _CONVERSIONS[conversion]
    jf = jitcore.jit(fn, cache=mode)
    order = random.Random(conversion).sample(_CONVERTED, len(_CONVERTED))
    for i, t in enumerate(order * 2):
        x = torch.arange(4.0)
        want, got = _outcome(fn, x, t), _outcome(jf, x, t)
        where = f"{conversion} of {t!r} ({t.dtype}), call {i}"
        if isinstance(want, str) or isinstance(got, str):
            assert got == want, f"{where}: {got}, eager {want}"
        else:
            torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m, where=where: f"{where}: {m}")


# A NaN read as a Python value (`math.nan`, `torch.nan` or a global NaN in a masked_fill, a float argument that is
# NaN, `t.item()` of a NaN) was guarded with `!=`, which never finds NaN equal to itself: the first call failed with
# "a fresh prologue rejected its own call", or each later call missed. Under symbolic values a float argument's
# `v != v` was decided as False without a predicate (a later NaN took the finite value's branch, and the reverse),
# and a predicate over a non-finite value printed `inf` or `nan`, names the prologue does not have (NameError).
NAN_HOLDER = {"value": math.nan}
_NAN_READS = {
    "argument": lambda x, v: x.masked_fill(x > 1, v),
    "math.nan": lambda x, v: x.masked_fill(x > 1, math.nan) + v,
    "torch.nan": lambda x, v: torch.full_like(x, torch.nan) * v,
    "global": lambda x, v: x * NAN_HOLDER["value"] + v,
    "tuple argument": lambda x, v: x * (1.0, v)[1],
    "item": lambda x, v: x * torch.tensor(v).item(),
    "tolist": lambda x, v: x * torch.tensor([v, 1.0]).tolist()[0],
    "v != v": lambda x, v: x * 2 if v != v else x * 3,
    "v <= v": lambda x, v: x * 2 if v <= v else x * 3,
    "math.isnan": lambda x, v: x * 2 if math.isnan(v) else x * 3,
    "math.isinf": lambda x, v: x * 2 if math.isinf(v) else x - 1,
    "v == inf": lambda x, v: x * 2 if v == math.inf else x * 3,
    "v - v": lambda x, v: x * (v - v),
}


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("read", sorted(_NAN_READS))
def test_nan_values_are_read_as_in_eager(read, mode):
    fn = _NAN_READS[read]
    values = [math.nan, float("nan"), 1.5, math.inf, float("nan"), -0.0, math.nan, -math.inf, 2.5, float("nan")]
    for start in (0, 2):  # (traced first with a NaN, then with a finite value)
        jf = jitcore.jit(fn, cache=mode)
        for i, v in enumerate(values[start:] + values[:start]):
            NAN_HOLDER["value"] = (math.nan, float("nan"), 2.0)[i % 3]
            x = torch.arange(4.0)
            torch.testing.assert_close(jf(x, v), fn(x, v), equal_nan=True,
                                       msg=lambda m, i=i, v=v: f"call {i} ({v}): {m}")
        if mode == "constant values":  # a NaN call finds the entry a NaN call made (each a new float object)
            kinds = {(v if v == v else "nan", i % 3 == 2) for i, v in enumerate(values[start:] + values[:start])}
            assert jitcore.cache_misses(jf) <= len(kinds), jitcore.cache_misses(jf)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
def test_a_float_read_after_writes_into_an_input_is_read_per_call_and_never_branched_on(mode):
    """float(t) after the program writes into t: read when the program runs, for arithmetic (each call's value);
    a branch on it is refused naming the user's line, never decided by the first call's value."""
    def scale(t, x):
        t.add_(1)
        return x * (1.0 / float(t))

    def branch(t, x):
        t.add_(1)
        return x * 2 if float(t) > 2 else x

    js = jitcore.jit(scale, cache=mode)
    te, tj = torch.zeros(()), torch.zeros(())
    for _ in range(4):
        torch.testing.assert_close(js(tj, torch.ones(3)), scale(te, torch.ones(3)))
        assert tj.item() == te.item()
    assert mode == "no caching" or jitcore.cache_misses(js) == 1
    with pytest.raises(jitcore.UnsupportedError, match="changes on every call"):
        jitcore.jit(branch, cache=mode)(torch.zeros(()), torch.ones(2))
