"""Input storage (jitcore/guards/input_storage.py): each cache entry describes the call it was compiled for, keeps
integer and boolean tensor values by default, and `materialize()` rebuilds a call that the entry accepts (a cache hit)
or that compiles the same entry in a fresh jitted function (warm-up). Eager is the oracle where values are kept."""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.guards.input_storage import TensorSpec

CACHES = ["constant values", "symbolic values"]


def _f(x, idx, *, scale=2.0, mask=None):
    y = x[idx] * scale
    return y.masked_fill(mask, 0.0) if mask is not None else y


def _call():
    x = torch.randn(6, 4).t()  # non-contiguous strides
    idx = torch.tensor([3, 0, 2])
    mask = torch.tensor([[True, False, True, False, True, False]]).t()[:3]
    return (x.requires_grad_(), idx), {"scale": 3.0, "mask": mask}


def _called(cache):
    """(the jitted _f after one call, the call's args and kwargs, the entry's InputSpec)."""
    jf = jitcore.jit(_f, cache=cache)
    args, kwargs = _call()
    jf(*args, **kwargs)
    (spec,) = jitcore.input_specs(jf)
    return jf, args, kwargs, spec


@pytest.mark.parametrize("cache", CACHES)
def test_spec_describes_the_call_and_keeps_integer_and_bool_values(cache):
    _, args, kwargs, spec = _called(cache)
    x, idx = spec.args
    assert isinstance(x, TensorSpec) and x.shape == (4, 6) and x.stride == (1, 4) and x.requires_grad
    assert x.value is None and x.dtype is torch.float32 and x.device == torch.device("cpu")
    assert torch.equal(idx.value, args[1]) and idx.dtype is torch.int64
    assert spec.kwargs["scale"] == 3.0 and torch.equal(spec.kwargs["mask"].value, kwargs["mask"])
    assert spec.dropped == ["args[0]"] and "metadata only" in repr(spec) and "values kept" in repr(spec)


@pytest.mark.parametrize("cache", CACHES)
def test_materialized_call_hits_the_entry_and_warms_a_fresh_function(cache):
    jf, args, kwargs, spec = _called(cache)
    m_args, m_kwargs = spec.materialize()
    assert m_args[0].stride() == args[0].stride() and m_args[0].requires_grad
    assert torch.equal(m_args[0], torch.ones(4, 6)) and torch.equal(m_args[1], args[1])
    jf(*m_args, **m_kwargs)
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1), jitcore.cache_miss_reasons(jf)
    fresh = jitcore.jit(_f, cache=cache)  # warm-up: compile from the description, then the real call hits
    fresh(*m_args, **m_kwargs)
    out = fresh(*args, **kwargs)
    torch.testing.assert_close(out, _f(*args, **kwargs))
    assert (jitcore.cache_misses(fresh), jitcore.cache_hits(fresh)) == (1, 1), jitcore.cache_miss_reasons(fresh)


def test_keep_inputs_all_and_none():
    x, idx = torch.randn(3, 2), torch.tensor([1, 0])
    everything = jitcore.jit(_f, keep_inputs="all")
    everything(x, idx)
    a, i = jitcore.input_specs(everything)[0].materialize()[0]
    assert torch.equal(a, x) and torch.equal(i, idx)
    nothing = jitcore.jit(_f, keep_inputs="none")
    nothing(x, idx)
    spec = jitcore.input_specs(nothing)[0]
    assert [t.value for t in spec.tensors()] == [None, None] and spec.dropped == ["args[0]", "args[1]"]
    a, i = spec.materialize()[0]
    assert torch.equal(i, torch.zeros(2, dtype=torch.int64))  # zeros: valid indices
    with pytest.raises(ValueError, match="keep_inputs"):
        jitcore.jit(_f, keep_inputs="ints")


def test_one_spec_per_entry_in_compile_order_and_nested_arguments():
    def g(xs, n):
        return sum(x * n for x in xs)

    jf = jitcore.jit(g)
    for k in (2, 3):
        jf([torch.randn(2) for _ in range(k)], k)
    specs = jitcore.input_specs(jf)
    assert [len(s.args[0]) for s in specs] == [2, 3] and [s.args[1] for s in specs] == [2, 3]
    xs, n = specs[1].materialize()[0]
    assert len(xs) == 3 and all(t.shape == (2,) for t in xs) and n == 3
    assert "(tensor 1 inside)" in specs[1].dropped[1]


def test_module_call_keeps_token_ids_and_parameters_stay_the_modules():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2))
    jm = jitcore.jit(model)
    ids = torch.tensor([[1, 7, 3]])
    want = model(ids)
    jm(ids)
    (m_ids,), _ = jitcore.input_specs(jm)[0].materialize()
    torch.testing.assert_close(jm(m_ids), want)
    assert (jitcore.cache_misses(jm), jitcore.cache_hits(jm)) == (1, 1)


def test_parameter_argument_is_rebuilt_as_a_parameter():
    w = torch.nn.Parameter(torch.randn(3))
    jf = jitcore.jit(lambda w: w * 2)
    jf(w)
    (m,), _ = jitcore.input_specs(jf)[0].materialize()
    assert type(m) is torch.nn.Parameter and m.requires_grad


@pytest.mark.parametrize("program", ["mask select", "branch"])
def test_value_dependent_program_refuses_dummy_values(program):
    def f(x):
        if program == "mask select":
            return x[x > 0] * 2
        return x * 2 if x.sum() > 0 else x - 1

    x = torch.randn(8)
    jf = jitcore.jit(f)
    jf(x)
    spec = jitcore.input_specs(jf)[0]
    assert spec.value_dependent
    with pytest.raises(jitcore.JitError, match="keep_inputs='all'"):
        spec.materialize()
    kept = jitcore.jit(f, keep_inputs="all")
    kept(x)
    (m,), _ = jitcore.input_specs(kept)[0].materialize()
    torch.testing.assert_close(kept(m), f(x))
    assert jitcore.cache_misses(kept) == 1


def test_no_caching_describes_the_last_call():
    jf = jitcore.jit(lambda x: x + 1, cache="no caching")
    jf(torch.randn(2))
    jf(torch.randn(5))
    (spec,) = jitcore.input_specs(jf)
    assert spec.args[0].shape == (5,)


def test_metadata_guards_do_not_make_a_program_value_dependent():
    """Strides, contiguity and is_leaf are checked per call like data guards, but they read no tensor values: an
    attention block (which has them) stays restorable from metadata alone."""
    from benchmarks.models import Block, GPTConfig

    torch.manual_seed(0)
    jm = jitcore.jit(Block(GPTConfig(n_embd=32, n_head=4, block_size=16, vocab_size=64, n_layer=1)))
    with torch.no_grad():
        jm(torch.randn(2, 8, 32))
    spec = jitcore.input_specs(jm)[0]
    assert spec.value_dependent == "", spec.value_dependent
    (x,), _ = spec.materialize()
    with torch.no_grad():
        jm(x)
    assert (jitcore.cache_misses(jm), jitcore.cache_hits(jm)) == (1, 1)
