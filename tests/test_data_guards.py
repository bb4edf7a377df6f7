"""Data-dependent Python values (`if mask.all():`, `x.item()`): computed from the call's inputs, guarded, and a
different value retraces; random or in-place sources are refused with the user's line."""
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
