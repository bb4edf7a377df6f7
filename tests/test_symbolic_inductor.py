"""Executors (inductor) under cache="symbolic values": fusion regions with symbolic sizes compile once for dynamic
shapes (executors/inductorex.py, `compile_symbolic`), a call their guards reject compiles a guarded variant, and
`jitcore.last_compile_stats` counts the region compiles each call caused. Eager is the oracle: outputs, gradients.
"""
from __future__ import annotations

import copy

import pytest
import torch

import jitcore
from executors import inductor_ex, inductorex, torch_ex
from executors.inductorex import CompiledRegion

pytestmark = pytest.mark.skipif(not inductor_ex.is_available()[0], reason="inductor is not available here")
EXECUTORS = [inductor_ex, torch_ex]


@pytest.fixture(autouse=True)
def _no_region_falls_back_to_eager():
    """A region whose compile failed runs eagerly (right answer, with a warning): here that is a failure."""
    before = inductorex.STATS["fallbacks"]
    yield
    assert inductorex.STATS["fallbacks"] == before, "a fusion region failed to compile (see the warning)"


def _regions(trace) -> list[CompiledRegion]:
    return [b.sym.call_ctx[b.sym.name] for b in trace.bound_symbols if b.region_trace is not None]


def _region_counts(jfn) -> tuple[int, int]:
    stats = jitcore.last_compile_stats(jfn)
    return stats["region_compiles"], stats["regions_reused"]


def _backward_matches(loss, want_loss, model, ref, atol=1e-4, rtol=1e-3):
    """Backward through both losses; every parameter's gradient equals eager's; the gradients are cleared."""
    loss.backward()
    want_loss.backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=atol, rtol=rtol, msg=n)
    model.zero_grad()
    ref.zero_grad()


def _grads(fn, *args):
    leaves = [a.detach().clone().requires_grad_(True) for a in args]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.float().pow(2).sum() for o in outs).backward()
    return outs, [a.grad for a in leaves]


def test_dynamic_region_compiles_once_over_sizes_and_counts_its_compiles():
    def f(x, w):
        h = torch.nn.functional.gelu(x @ w) * 2 + x.shape[0]
        return torch.softmax(h, -1).reshape(x.shape[0] * x.shape[1], -1) - 1

    jfn = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    w = torch.randn(8, 8)
    counts = []
    for b, t in [(2, 5), (3, 7), (4, 2), (6, 9)]:
        x = torch.randn(b, t, 8)
        got, got_grads = _grads(jfn, x, w)
        want, want_grads = _grads(f, x, w)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_grads, want_grads, atol=1e-4, rtol=1e-4)
        counts.append(_region_counts(jfn))  # read after the backward: its regions count too
    assert jitcore.cache_misses(jfn) == 1, jitcore.cache_miss_reasons(jfn)
    assert counts[0][0] >= 2, counts  # forward and backward regions, compiled lazily at their first run
    assert [c for c, _ in counts[1:]] == [0, 0, 0], counts
    fwd = _regions(jitcore.last_traces(jfn)[-1])
    bwd = _regions(jitcore.last_backward_traces(jfn)[-1])
    assert fwd and bwd and all(r.dynamic and len(r.guarded) == 1 for r in fwd + bwd)
    assert all(r.guarded[0][1] is not r.eager_fn for r in fwd + bwd)  # compiled, not fallen back to eager


def test_sizes_equal_at_the_first_call_are_not_assumed_equal_later():
    # batch == length == heads at the first call: no duck sizing, so the sizes stay separate symbols
    def f(x, y):
        return (x.transpose(0, 1) * 3 + y).sin().sum(0), (x + 1).exp()

    jfn = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    counts = []
    for a, b in [(4, 4), (3, 5), (6, 2)]:
        x, y = torch.randn(a, b, 4), torch.randn(b, a, 4)
        torch.testing.assert_close(jfn(x, y), f(x, y))
        counts.append(_region_counts(jfn)[0])
    assert counts[0] > 0 and counts[1:] == [0, 0], counts
    assert jitcore.cache_misses(jfn) == 1, jitcore.cache_miss_reasons(jfn)


def test_a_call_the_region_guards_reject_compiles_a_variant_with_eagers_answer():
    # the compiled code assumes its inputs' strides: a transposed input of the same sizes needs another variant
    def f(x, y):
        return (x * 2 + y).tanh() * x.shape[0]

    jfn = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    x, y = torch.randn(6, 6), torch.randn(6, 6)
    torch.testing.assert_close(jfn(x, y), f(x, y))
    region = _regions(jitcore.last_traces(jfn)[-1])[0]
    assert region.dynamic and len(region.guarded) == 1
    xt, y7 = torch.randn(7, 7).t(), torch.randn(7, 7)
    torch.testing.assert_close(jfn(xt, y7), f(xt, y7))
    assert jitcore.cache_misses(jfn) == 1, jitcore.cache_miss_reasons(jfn)
    assert _region_counts(jfn)[0] == 1 and len(region.guarded) == 2  # the region's guards rejected the strides
    x9, y9 = torch.randn(9, 9), torch.randn(9, 9)
    torch.testing.assert_close(jfn(x9, y9), f(x9, y9))
    assert _region_counts(jfn)[0] == 0  # a contiguous input of a new size: the first variant


def test_past_the_variant_limit_a_dynamic_region_runs_eagerly(monkeypatch):
    monkeypatch.setattr(inductorex, "MAX_DYNAMIC_VARIANTS", 1)

    def f(x, y):
        return (x * 3 - y).sigmoid() + x.shape[1]

    jfn = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    x, y = torch.randn(5, 5), torch.randn(5, 5)
    torch.testing.assert_close(jfn(x, y), f(x, y))
    xt, y6 = torch.randn(6, 6).t(), torch.randn(6, 6)
    with pytest.warns(UserWarning, match="run eagerly"):
        torch.testing.assert_close(jfn(xt, y6), f(xt, y6))
    region = _regions(jitcore.last_traces(jfn)[-1])[0]
    assert region.guarded[-1][1] is region.eager_fn and _region_counts(jfn)[0] == 0
    x7, y7 = torch.randn(7, 7), torch.randn(7, 7)
    torch.testing.assert_close(jfn(x7, y7), f(x7, y7))  # the compiled variant still serves what its guards accept
    assert jitcore.cache_misses(jfn) == 1, jitcore.cache_miss_reasons(jfn)


def test_regions_reused_across_functions_are_counted():
    def f(x):
        return (x.sin() * 2).exp().sum(-1)

    def g(x):
        return f(x)

    jf, jg = (jitcore.jit(fn, executors=EXECUTORS, cache="symbolic values") for fn in (f, g))
    x = torch.randn(3, 5)
    torch.testing.assert_close(jf(x), f(x))
    torch.testing.assert_close(jg(x), f(x))
    assert _region_counts(jg) == (0, 1)  # the same region text: the compiled code of jf's call


def test_attention_block_is_one_region_forward_and_one_backward():
    """Size arithmetic (`B * T`, `C // n_head`) goes before the region that needs it instead of cutting it, and the
    CPU flash-attention kernels the sdpa VJP swaps in are pure (jitcore.ops.opaque.PURE_WRAPPERS): Inductor compiles
    them with their neighbours. A GPT-2 style block is one region each way (it was 2 forward, 5 backward)."""
    from benchmarks.models import Block, GPTConfig

    torch.manual_seed(0)
    block = Block(GPTConfig(n_embd=32, n_head=4, block_size=32, vocab_size=64, n_layer=1))
    ref = copy.deepcopy(block)
    jm = jitcore.jit(block, executors=EXECUTORS, cache="symbolic values")
    for b, t in [(2, 8), (3, 12)]:
        x = torch.randn(b, t, 32)
        out, want = jm(x), ref(x)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
        out.pow(2).mean().backward()
        want.pow(2).mean().backward()
        for (n, p), (_, q) in zip(block.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=n)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)
    fwd, bwd = jitcore.last_traces(jm)[-1], jitcore.last_backward_traces(jm)[-1]
    assert len(_regions(fwd)) == 1 and len(_regions(bwd)) == 1, (str(fwd), str(bwd))
    for trace in (fwd, bwd):
        region = next(b for b in trace.bound_symbols if b.region_trace is not None)
        assert any("sdpa_flash_cpu" in s.sym.id for s in region.subsymbols), str(trace)


MODELS = [pytest.param(name, train, id=f"{name}-{'training' if train else 'inference'}",
                       marks=() if (name, train) == ("nanogpt", False) else pytest.mark.slow)
          for name in ("nanogpt", "gpt2", "llama", "bert") for train in (False, True)]


@pytest.mark.parametrize("name, train", MODELS)
def test_models_compile_once_with_no_region_compile_after_the_first_shape(name, train):
    """tests/test_models.py's models under [inductor, torch]: one jitcore compile and no region compile after the
    first (batch, length) shape; eager's logits, loss and every parameter's gradient at each step."""
    from tests.test_models import BUILDERS, VOCAB

    torch.manual_seed(0)
    model, *_ = BUILDERS[name]()
    model.train(train)
    ref = copy.deepcopy(model)
    jm = jitcore.jit(model, executors=EXECUTORS, cache="symbolic values")
    for i, (b, t) in enumerate([(2, 8), (3, 12), (2, 16)]):
        ids = torch.randint(0, VOCAB, (b, t))
        kw = {"labels": ids} if train and name != "nanogpt" else {}
        with torch.set_grad_enabled(train):
            out, want = jm(ids, **kw), ref(ids, **kw)
        logits, want_logits = (out.logits, want.logits) if hasattr(want, "logits") else (out, want)
        torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
        if train:
            loss = out.loss if kw else out.float().pow(2).mean()
            want_loss = want.loss if kw else want.float().pow(2).mean()
            torch.testing.assert_close(loss, want_loss, atol=1e-4, rtol=1e-4)
            _backward_matches(loss, want_loss, model, ref)
        compiles, _ = _region_counts(jm)
        assert (compiles > 0) if i == 0 else (compiles == 0), (b, t, compiles)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_cnn_with_batchnorm_trains_like_eager(cache):
    """tests/test_models.py's CNN (conv, BatchNorm in training mode, in-place ReLU, max-pool, adaptive pooling,
    cross-entropy) under [inductor, torch]: eager's loss and every gradient over batch sizes. With max-pool's
    backward (aten.unfold_backward) fused into an Inductor region, the backward crashed the process or gave wrong
    convolution gradients; that operator now runs as the torch kernel (inductorex._MISCOMPILED)."""
    from tests.test_models import SmallCNN

    torch.manual_seed(0)
    model = SmallCNN().train()
    ref = copy.deepcopy(model)
    jm = jitcore.jit(model, executors=EXECUTORS, cache=cache)
    for b in (4, 5, 3):
        x, y = torch.randn(b, 3, 16, 16), torch.randint(0, 10, (b,))
        (logits, loss), (want_logits, want_loss) = jm(x, y), ref(x, y)
        torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
        _backward_matches(loss, want_loss, model, ref)
    assert jitcore.cache_misses(jm) == (1 if cache == "symbolic values" else 3), jitcore.cache_miss_reasons(jm)


def test_inductors_environment_variables_do_not_change_what_the_program_read(monkeypatch):
    # Inductor sets environment variables at its first compile; a program that read os.environ (transformers does)
    # must not see the environment change under it between its first and second call
    import os

    monkeypatch.delenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", raising=False)

    def f(x):
        scale = 2.0 if os.environ.get("JITCORE_TEST_UNSET_FLAG") is None else 3.0
        return (x * scale).sin().exp()

    jfn = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    for n in (3, 4):
        x = torch.randn(n, 5)
        torch.testing.assert_close(jfn(x), f(x))
    assert jitcore.cache_misses(jfn) == 1, jitcore.cache_miss_reasons(jfn)



def test_a_float_made_from_a_size_compiles_in_a_dynamic_region():
    """A region multiplying by a float made from a size symbol (fuzz seed 24219: x1.select(0, i) * i over the loop
    index): Inductor's pass that turns scalars into tensors asks for a restart that specializes the float, which
    Dynamo would catch; compile_symbolic retries, so the region compiles (no eager fallback: the fixture checks)
    and gives eager's answers over the fuzzer's calls."""
    from tests import fuzz

    report = fuzz.check_program(fuzz.generate(24219, classes=False), "symbolic values", (inductor_ex,))
    assert not report.problems and report.refused is None, report.text(fuzz.generate(24219, classes=False))


def test_a_region_whose_inputs_are_all_sizes_compiles():
    """A region made only from sizes (torch.full over the input's symbolic sizes, then views and a sum of it): no fake
    tensor among its inputs, so the graph is traced in the shape environment's own fake mode (it used to fail with
    "vr must not be None for symbol s34" and run eagerly: found by tests/test_returned_views.py)."""
    def f(x):
        x.masked_fill_(x > 0, 0.5)
        a = x.unsqueeze(0)
        a.fill_(0.25)
        return a, x[:, 1], x.sum(1)

    jf = jitcore.jit(f, executors=EXECUTORS, cache="symbolic values")
    for shape in ((4, 3), (5, 3), (4, 6)):
        t = torch.randn(shape)
        x, want = t.t().contiguous().t(), t.t().contiguous().t()
        got, exp = jf(x), f(want)
        for g, e in zip(got, exp):
            torch.testing.assert_close(g, e)
        torch.testing.assert_close(x, want)


ALIAS_VIEWS = {"mT": lambda x: x.mT, "slice": lambda x: x[1:], "unsqueeze": lambda x: x.unsqueeze(0)}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("view", sorted(ALIAS_VIEWS))
def test_a_region_output_that_views_an_input_requires_grad_as_in_eager(view, cache):
    """A region returning a view of an input, compiled in a call whose input required grad, then called without
    grad: the view follows this call's input (the wrapper Inductor's compile returns remade it with the
    requires_grad the input had when the region compiled)."""
    def f(x, y):
        return ALIAS_VIEWS[view](x), torch.linalg.vector_norm(y, dim=-1), (y.sin() * 2).exp()

    jf = jitcore.jit(f, cache=cache, executors=EXECUTORS)
    for i, (rg, grad) in enumerate(((True, True), (False, False), (False, True), (True, False), (True, True))):
        gen = torch.Generator().manual_seed(i)
        x, y = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen).double()
        with torch.set_grad_enabled(grad):
            want = f(x.clone().requires_grad_(rg), y.clone().requires_grad_(rg))
            got = jf(x.clone().requires_grad_(rg), y.clone().requires_grad_(rg))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
            assert g.requires_grad == w.requires_grad, (i, rg, grad, [o.requires_grad for o in got])
