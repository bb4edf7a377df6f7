"""Decoding with a KV cache: HuggingFace causal LMs under cache="symbolic values" compile once for the prefill and
once for the decode step, however many tokens they generate, and give eager's tokens.

The cache (transformers' DynamicCache) is made by the prefill call and handed back; each decode call reads it from
`past_key_values`, grows it and hands it back again (tests/test_escapes.py covers the mechanism).
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.guards.cache import CACHE_MODES

pytest.importorskip("transformers")
from tests.test_models import BUILDERS

MODELS = ["llama", "gpt2", "qwen2"]


def _model(name):
    torch.manual_seed(0)
    model = BUILDERS[name]()[0]
    return model.eval()


def _next(logits):
    return logits[:, -1:].argmax(-1)


# every cache mode for one model; the others under symbolic values (constant values recompile per step: slow)
DECODE_CASES = [("llama", c) for c in CACHE_MODES] + [(m, "symbolic values") for m in MODELS if m != "llama"]


@pytest.mark.parametrize(("name", "cache"), DECODE_CASES)
def test_decode_loop_with_past_key_values(name, cache):
    model = _model(name)
    jm = jitcore.jit(model, cache=cache)
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        ours, ref = jm(ids, use_cache=True), model(ids, use_cache=True)
        for _ in range(6):
            torch.testing.assert_close(ours.logits, ref.logits)
            assert ours.past_key_values is not ref.past_key_values
            ours = jm(_next(ours.logits), past_key_values=ours.past_key_values, use_cache=True)
            ref = model(_next(ref.logits), past_key_values=ref.past_key_values, use_cache=True)
    torch.testing.assert_close(ours.logits, ref.logits)
    assert ours.past_key_values.get_seq_length() == ref.past_key_values.get_seq_length() == 11
    if cache == "symbolic values":
        assert jitcore.cache_misses(jm) == 2, jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("name", MODELS)
def test_generate_compiles_prefill_and_decode_once(name):
    model = _model(name)
    ids = torch.randint(1, 50, (2, 6))  # no pad token (0): generate then passes no attention_mask, both times
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
        jitted = jitcore.jit(model.forward, cache="symbolic values")
        model.forward = jitted  # generate calls model(...), which runs the jitted forward
        ours = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
        assert torch.equal(ours, ref)
        assert jitcore.cache_misses(jitted) == 2, jitcore.cache_miss_reasons(jitted)
        longer = model.generate(torch.randint(1, 50, (3, 4)), max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert longer.shape == (3, 9)
    assert jitcore.cache_misses(jitted) == 2  # another batch size and prompt length: still the same two programs


@pytest.mark.parametrize("name", MODELS)
def test_jitted_model_generate_runs_compiled(name):
    """`jitcore.jit(model).generate(...)`: generate's own calls of the model run the jitted forward (prefill and
    decode: two programs), with eager's tokens; the model is as before afterwards."""
    model = _model(name)
    jm = jitcore.jit(model, cache="symbolic values")
    ids = torch.randint(1, 50, (2, 6))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        ours = jm.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        again = jm.generate(torch.randint(1, 50, (3, 5)), max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(ours, ref)
    assert again.shape == (3, 9)
    assert jitcore.cache_misses(jm.jitted_forward) == 2, jitcore.cache_miss_reasons(jm.jitted_forward)
    assert "forward" not in model.__dict__
