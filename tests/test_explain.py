"""jitcore.explain (jitcore/explanation.py): one report of a jitted function, calling it only when no cached entry
accepts the call: its programs, the executor of each op, opaque fallbacks, the guards and their miss reasons,
compile time per stage and the cache's history; as text and as HTML.
"""
from __future__ import annotations

import pytest
import torch

import jitcore


def _scaled_erfcx(x, n):
    return torch.special.erfcx(x) * n


def test_a_first_explain_calls_the_function_and_reports_everything():
    jf = jitcore.jit(_scaled_erfcx)
    report = jitcore.explain(jf, torch.ones(3), 2)
    assert report.call == "called it: first call: nothing cached yet"
    assert (report.hits, report.misses, report.n_entries) == (0, 1, 1)
    assert [(r.op, r.executor, r.count) for r in report.ops] == [("opaque.torch.special.erfcx", "torch", 1),
                                                                ("ltorch.mul", "torch", 1)]
    assert report.opaque == ["torch.special.erfcx (1 call)"]
    assert list(report.stats) == ["interpret", "transforms", "claim", "memory", "codegen", "guards"]
    assert report.passes[0].startswith("Constructed by Interpretation")
    assert "def computation(t0):" in report.forward and report.backward == ""
    guards = {g.check: g.miss for g in report.guards}
    assert guards["t0.shape != (3,) or t0.dtype is not _c2"] == "args[0]: expected a tensor cpu f32[3]"
    assert guards["type(g0) is not int or g0 != 2"] == "args[1]: expected 2"
    text = str(report)
    for title in ("== function", "== cache", "== compile time", "== executors", "== opaque torch calls",
                  "== guards", "== passes", "== forward program", "== prologue (guards)"):
        assert title in text, title


def test_a_cached_call_is_not_run_again_and_counts_no_hit():
    jf = jitcore.jit(_scaled_erfcx)
    jf(torch.ones(3), 2)
    jf(torch.ones(4), 2)
    report = jitcore.explain(jf, torch.ones(3), 2)
    assert report.call == "not called: cached entry 1 of 2 accepts this call"
    assert jitcore.cache_hits(jf) == 0 and jitcore.cache_misses(jf) == 2
    assert report.against == ["accepts it", "args[0]: expected a tensor cpu f32[4]"]


def test_a_new_call_compiles_and_the_history_says_why():
    jf = jitcore.jit(_scaled_erfcx)
    jf(torch.ones(3), 2)
    report = jitcore.explain(jf, torch.ones(3), 5)
    assert report.call == "called it: the last entry (the call's signature differs): args[1]: expected 2"
    assert report.against == ["args[1]: expected 2"]
    assert report.miss_reasons == ["first call: nothing cached yet",
                                   "the last entry (the call's signature differs): args[1]: expected 2"]
    assert "miss 2: the last entry (the call's signature differs): args[1]: expected 2" in str(report)
    assert jitcore.last_traces(jf)[-1] is not None and report.n_entries == 2


def test_without_arguments_it_explains_the_last_call_of_a_module():
    model = torch.nn.Linear(2, 2)
    jm = jitcore.jit(model)
    jm(torch.ones(1, 2))
    report = jitcore.explain(jm)
    assert report.call == "the last call" and report.name == "Linear"
    assert ("ltorch.linear", "torch", 1) in [(r.op, r.executor, r.count) for r in report.ops]
    assert any(r.op.startswith("backward: ") for r in report.ops) and "def backward(" in report.backward


def test_symbolic_predicates_show_the_values_they_would_report():
    def f(a, b):
        return a.unsqueeze(1) + b

    jf = jitcore.jit(f, cache="symbolic values")
    report = jitcore.explain(jf, torch.ones(3, 4), torch.ones(3, 1, 4))
    guards = {g.check: g.miss for g in report.guards}
    assert guards["not (i0 == i2)"] == "predicate i0 == i2 (i0={repr(i0)}, i2={repr(i2)})"
    assert guards["i0 < 2"].endswith("expected >= 2 (sizes 0 and 1 are specialised)")


def test_html_for_jupyter():
    jf = jitcore.jit(_scaled_erfcx)
    page = jitcore.explain(jf, torch.ones(3), 2)._repr_html_()
    assert "<h3>jitcore.explain: _scaled_erfcx</h3>" in page and "<h4>guards" in page
    assert page.count("<details>") == 2  # the forward program and the prologue (no backward)
    assert "torch.special.erfcx (1 call)" in page


def test_what_it_refuses():
    with pytest.raises(TypeError, match=r"jitcore\.examine"):
        jitcore.explain(_scaled_erfcx, torch.ones(3), 2)
    with pytest.raises(ValueError, match="not been called yet"):
        jitcore.explain(jitcore.jit(_scaled_erfcx))


def _clamp_then_erfcx(x):
    return (torch.special.erfcx(x.clamp(0, 1)) * 2 + 1).sin().cos()  # (four loop ops: a region worth compiling)


def test_a_line_a_fusion_executor_leaves_out_of_its_regions_is_reported_as_torch():
    pytest.importorskip("torch._inductor")
    from executors import inductor_ex

    ok, why = inductor_ex.is_available()
    if not ok:
        pytest.skip(why)
    # the clamp is claimed by inductor but alone between the opaque call's neighbours: a region of one op is not
    # compiled, so it runs torch's kernel, and the report must say so (not "inductor")
    jf = jitcore.jit(_clamp_then_erfcx, executors=[inductor_ex])
    report = jitcore.explain(jf, torch.rand(8))
    assert "= torch.clamp(t0, 0, 1)  #" in report.forward
    rows = {r.op: r.executor for r in report.ops}
    assert rows["ltorch.clamp"] == "torch (unfused: inductor left it out of its regions)"
    assert rows["opaque.torch.special.erfcx"] == "torch"
    assert [r.executor for r in report.ops if r.op.startswith("inductor_fusion")] == ["inductor"]
