"""Inspection API: last_traces (every pass, in order, with headers), prologue/backward traces, cache counters and
miss reasons, examine, the compile-time breakdown, trace rendering (HTML in Jupyter, plain text elsewhere), and the
round trip: every printed trace, exec'd as text and called on the same inputs, gives the jitted call's outputs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitcore

HEADER = re.compile(r"^# Constructed by (.+?) \(took \d+\.\d+ ms\)$")


def foo(a, b):
    a = a.unsqueeze(1)
    return a + b


def chain(x, y):
    z = torch.sin(x) * y + 1.0
    return torch.tanh(z).sum(dim=-1)


def softmax_mlp(x, w):
    return torch.nn.functional.softmax(x @ w, dim=-1) * 2


def small_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def passes(traces) -> list[str]:
    names = []
    for t in traces:
        first = str(t).splitlines()[0]
        m = HEADER.match(first)
        assert m, f"trace without a provenance header: {first!r}"
        names.append(m.group(1))
    return names


# -- last_traces and friends ------------------------------------------------------------------------------------
def test_last_traces_lists_every_pass_in_order_without_grad():
    jfoo = jitcore.jit(foo)
    jfoo(torch.randn(3, 4), torch.randn(3, 1, 4))
    names = passes(jitcore.last_traces(jfoo))
    assert names[0].startswith("Interpretation")
    assert names[1] == "Dead Code Elimination"
    assert any("claim" in n for n in names)
    assert names[-1].startswith("Delete Last Used")
    assert jitcore.last_backward_traces(jfoo) == []
    last = str(jitcore.last_traces(jfoo)[-1])
    assert "torch.unsqueeze(" in last and "torch.add(" in last and "del " in last


def test_grad_transform_traces_forward_and_backward():
    jfoo = jitcore.jit(foo)
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 1, 4, requires_grad=True)
    jfoo(a, b).sum().backward()
    fw_names = passes(jitcore.last_traces(jfoo))
    assert any("Forward pass of the grad transform" in n for n in fw_names)
    assert fw_names.index("Dead Code Elimination") < fw_names.index("Forward pass of the grad transform")
    bw = jitcore.last_backward_traces(jfoo)
    bw_names = passes(bw)
    assert bw_names[0] == "Backward pass of the grad transform"
    assert bw_names[-1].startswith("Delete Last Used")
    assert "def backward(" in str(bw[-1])
    torch.testing.assert_close(a.grad, torch.ones(3, 4))
    torch.testing.assert_close(b.grad, torch.ones(3, 1, 4) * 1)


def test_prologue_trace_is_the_guard_and_runs():
    jfoo = jitcore.jit(foo)
    a, b = torch.randn(3, 4), torch.randn(3, 1, 4)
    jfoo(a, b)
    (prologue,) = jitcore.last_prologue_traces(jfoo)[-1:]
    text = str(prologue)
    assert passes([prologue])[0].startswith("Prologue")
    assert "def prologue(fn, args, kwargs):" in text and "return None" in text
    inputs = prologue(foo, (a, b), {})
    assert inputs is not None and inputs[0] is a and inputs[1] is b
    assert prologue(foo, (torch.randn(5, 4), b), {}) is None  # another shape fails a guard: a miss, no exception


def test_cache_hits_misses_and_reasons():
    jfoo = jitcore.jit(foo)
    a, b = torch.randn(3, 4), torch.randn(3, 1, 4)
    jfoo(a, b)
    jfoo(a, b)
    jfoo(torch.randn(3, 4), torch.randn(3, 1, 4))
    assert (jitcore.cache_hits(jfoo), jitcore.cache_misses(jfoo)) == (2, 1)
    jfoo(torch.randn(5, 6), torch.randn(5, 1, 6))
    assert jitcore.cache_misses(jfoo) == 2
    reasons = jitcore.cache_miss_reasons(jfoo)
    assert len(reasons) == 2
    assert "first call" in reasons[0]
    assert "args[0]" in reasons[1] and "[3, 4]" in reasons[1]


def test_compile_stats_breakdown():
    jfn = jitcore.jit(chain)
    jfn(torch.randn(4, 5), torch.randn(4, 5))
    stats = jitcore.last_compile_stats(jfn)
    stages = ["interpret", "transforms", "claim", "memory", "codegen", "guards"]  # in pipeline order
    assert list(stats) == [*stages, "region_compiles", "regions_reused", "cpp_builds", "region_stages", "region_log"]
    assert all(isinstance(stats[k], float) and stats[k] >= 0 for k in stages)
    assert sum(stats[k] for k in stages) > 0
    assert stats["region_compiles"] == stats["regions_reused"] == stats["cpp_builds"] == 0  # the torch executor: no
    assert not stats["region_log"]  # fusion regions, no builds


def test_examine_lists_ops_executors_and_opaque_calls():
    def fn(x):
        return torch.special.bessel_j0(torch.sin(x) + 1)

    report = jitcore.examine(fn, torch.randn(4))
    text = str(report)
    assert "ltorch.sin" in text and "ltorch.add" in text
    assert "torch" in {r.executor for r in report.ops}
    assert len(report.opaque_ops) == 1 and "bessel_j0" in report.opaque_ops[0]
    assert "opaque" in text and "bessel_j0" in text
    assert report.by_executor()["torch"] >= 3


def test_examine_reports_a_tracing_failure_instead_of_raising():
    def bad(x):
        return x.untyped_storage()

    report = jitcore.examine(bad, torch.randn(3))
    assert "tracing failed" in str(report) or report.opaque_ops  # either is a report, never an exception


@pytest.mark.parametrize("first", ["jitcore.debug.inspection", "jitcore.api", "executors"])
def test_jitcore_examine_is_the_function_whichever_module_loads_first(first):
    # the inspection stage lives in jitcore/debug/inspection.py, so no module shadows the function jitcore.examine
    code = (f"import {first}\nimport jitcore.debug.inspection, jitcore.api, jitcore, torch\n"
            "assert jitcore.examine.__module__ == 'jitcore.api', jitcore.examine\n"
            "assert jitcore.examine(torch.sin, torch.randn(2)).ops[0].op == 'ltorch.sin'\n")
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, env={**os.environ, "PYTHONPATH": str(root)})


def test_inspection_of_an_uncalled_function_says_so():
    jfn = jitcore.jit(foo)
    with pytest.raises(ValueError, match="not been called"):
        jitcore.last_traces(jfn)


def test_traces_render_as_highlighted_html_and_plain_text():
    jfoo = jitcore.jit(foo)
    jfoo(torch.randn(3, 4), torch.randn(3, 1, 4))
    trace = jitcore.last_traces(jfoo)[-1]
    plain = str(trace)
    assert repr(trace) == plain and "<" not in plain.splitlines()[0]
    html = trace._repr_html_()
    assert "<pre" in html and "computation" in html
    pytest.importorskip("pygments")
    assert "<span" in html  # highlighted
    assert trace._repr_markdown_().startswith("```python\n")


def test_html_falls_back_to_plain_pre_without_pygments(monkeypatch):
    import builtins

    from jitcore.ir.trace import source_html

    real_import = builtins.__import__

    def no_pygments(name, *args, **kwargs):
        if name.startswith("pygments"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pygments)
    assert source_html("a = 1 < 2\n") == '<pre style="line-height:125%">a = 1 &lt; 2\n</pre>'


# -- round trip: printed text -> exec -> same outputs -----------------------------------------------------------
def run_text(trace, *inputs):
    """exec str(trace) (with the namespaces and constants its header names) and call it on inputs."""
    namespace = dict(trace.python_callable().__globals__)
    namespace.pop(trace.fn_name, None)
    exec(compile(str(trace), f"<printed {trace.fn_name}>", "exec"), namespace)
    return namespace[trace.fn_name](*inputs)


def flat_tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_tensors(o)]
    return []


CASES = {
    "foo": (foo, lambda: (torch.randn(3, 4), torch.randn(3, 1, 4))),
    "chain": (chain, lambda: (torch.randn(4, 5), torch.randn(4, 5))),
    "softmax_mlp": (softmax_mlp, lambda: (torch.randn(4, 8), torch.randn(8, 6))),
    "module": (small_mlp(), lambda: (torch.randn(5, 8),)),
}


def is_execution_trace(trace) -> bool:
    """After the claim pass every line names an executor's kernel (torch.*, torchex.*, fusion regions)."""
    return any(k in passes([trace])[0] for k in ("claim", "Delete Last Used"))


def check_rerun(fn, args, *, execution: bool):
    jfn = jitcore.jit(fn)
    expected = flat_tensors(jfn(*args))
    inputs = run_text(jitcore.last_prologue_traces(jfn)[-1], fn, args, {})
    assert inputs is not None
    traces = [t for t in jitcore.last_traces(jfn) if is_execution_trace(t) == execution]
    assert traces
    with torch.no_grad():
        for trace in traces:
            got = flat_tensors(run_text(trace, *inputs))[: len(expected)]
            assert len(got) == len(expected), passes([trace])
            where = passes([trace])[0]
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e, msg=lambda m, where=where: f"{where}: {m}")


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_printed_execution_trace_reruns_to_the_same_outputs(case, grad):
    fn, make = CASES[case]
    torch.manual_seed(0)
    check_rerun(fn, tuple(a.requires_grad_(grad) for a in make()), execution=True)


@pytest.mark.parametrize("case", ["foo", "chain", "softmax_mlp"])
def test_every_printed_torch_level_trace_reruns_to_the_same_outputs(case):
    fn, make = CASES[case]
    torch.manual_seed(0)
    check_rerun(fn, make(), execution=False)


def test_every_printed_torch_level_trace_compiles():
    jfn = jitcore.jit(chain)
    jfn(torch.randn(4, 5), torch.randn(4, 5))
    for trace in jitcore.last_traces(jfn):
        namespace: dict = {}
        exec(compile(str(trace), "<printed>", "exec"), namespace)
        assert callable(namespace[trace.fn_name])


@pytest.mark.parametrize("case", list(CASES))
def test_printed_backward_trace_reruns_to_torch_gradients(case):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = tuple(a.requires_grad_(True) for a in make())
    jfn = jitcore.jit(fn)
    out = jfn(*args)
    prologue = jitcore.last_prologue_traces(jfn)[-1]
    inputs = run_text(prologue, fn, args, {})
    forward, backward = jitcore.last_traces(jfn)[-1], jitcore.last_backward_traces(jfn)[-1]
    with torch.no_grad():
        results = run_text(forward, *inputs)
        n = len(flat_tensors(out))
        saved = list(results[n:])
        cotangent = torch.randn_like(out)
        grads = run_text(backward, saved, [cotangent])
    diff_inputs = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    expected = torch.autograd.grad(fn(*args), diff_inputs, cotangent)
    got = [g for g, x in zip(grads, inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
