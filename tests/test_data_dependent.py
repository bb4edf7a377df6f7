"""Data-dependent output sizes (issue 17 item 5): nonzero, masked_select, boolean masks, unique, argwhere, bincount,
tensor_split and repeat_interleave by a tensor. Their sizes are known only when the program runs (`u0`): one
program serves every count, in both cache modes, forward and backward, with eager's values; Python asking for such a
size goes through the data guards."""
from __future__ import annotations

import pytest
import torch

import jitcore
from executors import inductor_ex, torch_ex
from jitcore.guards.cache import CACHE_MODES
from jitcore.ir.pytree import tree_flatten

CACHES = list(CACHE_MODES)


def _same_mask(x, w):
    m = x > 0
    return x[m] * w[m] + x[m].sum()


def _set_mask(x, w):
    y = x * 1
    y[y > 0] = w[x > 0] * 3  # values counted by the same mask
    return y


CASES = {  # name -> (fn, differentiable)
    "mask_index": (lambda x, w: x[x > 0] * 2, True),
    "mask_rows": (lambda x, w: x[x[:, 0] > 0, 1:] + w[x[:, 0] > 0, 1:], True),
    "mask_cols": (lambda x, w: x[:, w[0] > 0].sum(0), True),
    "same_mask": (_same_mask, True),
    "masked_select": (lambda x, w: torch.masked_select(x, w > 0).pow(2), True),
    "masked_select_bcast": (lambda x, w: x.masked_select(w[0] > 0), True),
    "nonzero": (lambda x, w: torch.nonzero(x > 0), False),
    "nonzero_tuple": (lambda x, w: x.nonzero(as_tuple=True), False),
    "argwhere": (lambda x, w: torch.argwhere(x > w), False),
    "where_one_arg": (lambda x, w: torch.where(x > 0), False),
    "gather_by_nonzero": (lambda x, w: w.flatten()[torch.nonzero(x.flatten() > 0).squeeze(1)] * 2, True),
    "unique": (lambda x, w: torch.unique((x.detach() * 2).round()), False),
    "unique_all": (lambda x, w: torch.unique((x.detach() * 2).round(), return_inverse=True, return_counts=True), False),
    "unique_rows": (lambda x, w: torch.unique((x > 0).int(), dim=0, return_counts=True), False),  # an opaque op
    "unique_consecutive": (lambda x, w: torch.unique_consecutive((x > 0).long().flatten(), return_counts=True), False),
    "bincount": (lambda x, w: torch.bincount(((x.detach() + 3) * 2).clamp(min=0).long().flatten()), False),
    "bincount_weights": (lambda x, w: torch.bincount(((x.detach() + 3) * 2).clamp(min=0).long().flatten(),
                                                     weights=w.detach().flatten(), minlength=20), False),
    "repeat_interleave": (lambda x, w: torch.repeat_interleave(x, (w[:, 0] > 0).long() * 2 + (w[:, 1] > 0).long(),
                                                               dim=0) * 2, True),
    "repeat_interleave_flat": (lambda x, w: x.repeat_interleave((w.flatten() > 0).long() + 1), True),
    "repeat_interleave_counts": (lambda x, w: torch.repeat_interleave((x[:, 0] > 0).long() + 1), False),
    "tensor_split": (lambda x, w: torch.tensor_split(x, (w[:2, 0].abs() * 3).long().sort().values, dim=0), True),
    "setitem_mask": (_set_mask, True),
}


def _leaves(out):
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _check_calls(fn, grad, cache, executors=None, calls=4):
    jf = jitcore.jit(fn, cache=cache, **({"executors": executors} if executors else {}))
    for i in range(calls):
        torch.manual_seed(i)
        x, w = torch.randn(6, 5, requires_grad=grad), torch.randn(6, 5, requires_grad=grad)
        x2, w2 = (t.detach().clone().requires_grad_(grad) for t in (x, w))
        got, want = _leaves(jf(x, w)), _leaves(fn(x2, w2))
        assert len(got) == len(want)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype and g.shape == e.shape, (i, g.shape, e.shape)
            torch.testing.assert_close(g, e, equal_nan=True)
        if grad:
            sum(g.float().sum() for g in got if g.requires_grad).backward()
            sum(e.float().sum() for e in want if e.requires_grad).backward()
            for a, b in ((x, x2), (w, w2)):
                assert (a.grad is None) == (b.grad is None)
                if a.grad is not None:
                    torch.testing.assert_close(a.grad, b.grad)
    return jf


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_data_dependent_op(name, cache):
    fn, grad = CASES[name]
    jf = _check_calls(fn, grad, cache)
    if cache != "no caching":
        assert jitcore.cache_misses(jf) == 1, "a count that changes between calls must not recompile"


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name", ["same_mask", "masked_select", "repeat_interleave", "unique_all"])
def test_data_dependent_with_inductor(name, cache):
    fn, grad = CASES[name]
    jf = _check_calls(fn, grad, cache, executors=[inductor_ex, torch_ex])
    if cache != "no caching":
        assert jitcore.cache_misses(jf) == 1


def test_run_time_size_in_the_trace():
    jf = jitcore.jit(lambda x: x[x > 0] * 2)
    jf(torch.randn(4, 4))
    text = str(jitcore.last_traces(jf)[-1])
    assert "u0" in text  # the count: a size the program reads, not a constant
    assert "[u0]" in text


def test_python_reading_a_run_time_size_is_a_data_guard():
    """len() of a selection, or a branch on its size, is a Python value: guarded like `if x.sum() > 0:`, so a call
    whose count decides differently misses and is traced again (never a stale answer)."""
    def f(x):
        y = x[x > 0]
        return y * 2 if y.shape[0] > 8 else y - len(y)

    jf = jitcore.jit(f)
    for seed in range(6):
        torch.manual_seed(seed)
        x = torch.randn(4, 4)
        torch.testing.assert_close(jf(x), f(x))
    assert "data_guard" in str(jitcore.last_prologue_traces(jf)[-1])


def test_examine_reports_the_selection():
    report = str(jitcore.examine(lambda x: x[x > 0] * 2, torch.randn(4, 4)))
    assert "ltorch.getitem" in report and "0 opaque" in report


def test_no_run_time_size_without_its_values():
    """Tracing with no real inputs at hand (a bare trace): the count exists, but Python cannot read it."""
    from jitcore.ir.proxies import TensorProxy
    from jitcore.ir.trace import Trace, tracectx
    from jitcore.ops.torch_index import getitem

    with tracectx(Trace()):
        p = TensorProxy((4,), torch.float32, torch.device("cpu"))
        selected = getitem(p, p > 0)
        assert not isinstance(selected.shape[0], int)
        with pytest.raises(jitcore.DataDependentError, match="known only at run time"):
            bool(selected.shape[0] > 2)


# -- mixture of experts: HF Mixtral with random weights, both experts implementations ----------------------------
def _mixtral(implementation):
    tr = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tr.MixtralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=64)
    cfg._experts_implementation = implementation
    return tr.MixtralForCausalLM(cfg)


@pytest.mark.parametrize("implementation", ["grouped_mm", "eager"])
def test_mixtral_routing_counts_change_without_recompiles(implementation):
    """The routing sends a different number of tokens to each expert on every batch. grouped_mm (torch._grouped_mm
    by offsets; no meta kernel for float32 on CPU: its outputs learnt from a real run) has static sizes; the eager
    loop selects each expert's tokens (torch.where of its mask: a run-time size) and loops over the experts hit (a
    Python loop: guarded, the same while every expert gets tokens). Inference and a training step equal eager's,
    with one compile each for every batch."""
    model = _mixtral(implementation)
    jm = jitcore.jit(model)
    for seed in range(3):
        torch.manual_seed(seed)
        ids = torch.randint(0, 96, (2, 12))
        with torch.no_grad():
            torch.testing.assert_close(jm(ids).logits, model(ids).logits)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)
    for seed in range(2):
        torch.manual_seed(10 + seed)
        ids = torch.randint(0, 96, (2, 12))
        model.zero_grad()
        loss = jm(ids, labels=ids).loss
        loss.backward()
        got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        want = model(ids, labels=ids).loss
        want.backward()
        torch.testing.assert_close(loss, want)
        for n, p in model.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(got[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)
    assert jitcore.cache_misses(jm) == 2, jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("implementation", ["grouped_mm", "eager"])
def test_mixtral_symbolic_values_over_shapes(implementation):
    """cache="symbolic values" over batch sizes and sequence lengths: one program for every shape and routing."""
    model = _mixtral(implementation).eval()
    jm = jitcore.jit(model, cache="symbolic values")
    for b, t in [(2, 8), (3, 12), (2, 20), (4, 16)]:
        ids = torch.randint(0, 96, (b, t))
        with torch.no_grad():
            torch.testing.assert_close(jm(ids).logits, model(ids).logits)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


def test_learning_a_count_draws_no_python_random_numbers():
    """The count's value while tracing comes from running the program's lines on the real inputs; a per-call value
    among them (random.random()) is read as drawn, not drawn again: Python's generator state after the call is
    eager's (fuzz seed 601)."""
    import random

    def f(x):
        y = x * random.random()
        return x.cos(), torch.where(y > 0)[0]

    jf = jitcore.jit(f)
    for seed in range(3):
        x = torch.randn(3, 4)
        random.seed(seed)
        got = jf(x)
        after_jit = random.random()
        random.seed(seed)
        want = f(x)
        assert random.random() == after_jit
        torch.testing.assert_close(got[0], want[0])
        assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("cache", CACHES)
def test_selections_over_grad_modes_views_and_writes(cache):
    """A user's sequence: calls with and without grad, under no_grad, with other shapes and a keyword, selecting
    through a view and writing through a mask; outputs, requires_grad, gradients and the inputs after each call
    equal eager's."""
    def f(x, w, scale=1.0):
        m = x[:, 1:] > 0  # a mask of a view
        sel = x[:, 1:][m] * w[:, 1:][m] * scale
        y = x.detach().clone()
        y[y < 0] = 0.0  # a write through a mask
        idx = torch.nonzero(m)[:, 0]
        return sel, y, x[idx]  # x[index_tensor]: not a view in eager (no grad under no_grad)

    jf = jitcore.jit(f, cache=cache)
    calls = [((4, 5), True, {}), ((4, 5), False, {}), ((6, 3), True, {"scale": 2.0}), ((4, 5), True, {}),
             ((3, 4), False, {"scale": 0.5})]
    for i, (shape, grad, kw) in enumerate(calls):
        torch.manual_seed(i)
        x, w = torch.randn(*shape, requires_grad=True), torch.randn(*shape, requires_grad=True)
        x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
        with torch.set_grad_enabled(grad):
            got, want = jf(x, w, **kw), f(x2, w2, **kw)
        for g, e in zip(got, want):
            assert g.requires_grad == e.requires_grad, (i, g.requires_grad, e.requires_grad)
            torch.testing.assert_close(g, e)
        if grad:
            sum(g.sum() for g in got if g.requires_grad).backward()
            sum(e.sum() for e in want if e.requires_grad).backward()
            torch.testing.assert_close(x.grad, x2.grad)
            torch.testing.assert_close(w.grad, w2.grad)
        torch.testing.assert_close(x, x2)
