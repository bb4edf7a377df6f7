"""The compile pipeline (jitcore/pipeline.py): the transforms stage runs the rows of its pass table whose condition
holds, in order, and the table is where a pass is added; the stages are timed under their names."""
import pytest
import torch

import jitcore
from jitcore import pipeline
from jitcore.ir.trace import from_trace


def _headers(traces) -> list[str]:
    return [str(t).splitlines()[0] for t in traces]


def test_the_pass_table_lists_each_pass_once_in_order():
    names = [row.name for row in pipeline.PASSES]
    assert names == ["fsdp blocks", "functionalize", "dce", "cse", "written-input tails", "autodiff", "rematerialize",
                     "save written inputs",
                     "backward cse", "saved-tensor hooks", "fsdp backward order", "ddp early gradients"]


def _ran_rows(monkeypatch, fn, *args):
    """The names of the rows that ran for a call of jit(fn)."""
    ran = []

    def recorded(row):
        def run(p):
            ran.append(row.name)
            row.run(p)
        return pipeline.PassRow(row.name, row.applies, run)

    monkeypatch.setattr(pipeline, "PASSES", tuple(recorded(r) for r in pipeline.PASSES))
    jitcore.jit(fn)(*args)
    return ran


def test_without_a_gradient_only_the_computation_rows_run(monkeypatch):
    assert _ran_rows(monkeypatch, lambda x: x.exp() + 1, torch.randn(3)) == ["fsdp blocks", "functionalize", "dce",
                                                                             "cse"]


def test_with_a_gradient_the_autodiff_rows_run(monkeypatch):
    ran = _ran_rows(monkeypatch, lambda x: x.exp().sin(), torch.randn(3, requires_grad=True))
    assert ran == ["fsdp blocks", "functionalize", "dce", "cse", "autodiff", "rematerialize", "backward cse"]


def test_a_written_input_with_a_gradient_is_saved_by_copy(monkeypatch):
    def f(x, buf):
        buf.add_(1)
        return x * buf

    ran = _ran_rows(monkeypatch, f, torch.randn(3, requires_grad=True), torch.zeros(3))
    assert "save written inputs" in ran and "saved-tensor hooks" not in ran


def test_saved_tensor_hooks_contribute_their_row(monkeypatch):
    ran = _ran_rows(monkeypatch, lambda x: x.exp().sin(), torch.randn(3, requires_grad=True))
    assert "saved-tensor hooks" not in ran
    ran.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        ran = _ran_rows(monkeypatch, lambda x: x.exp().sin(), torch.randn(3, requires_grad=True))
    assert ran[-1] == "saved-tensor hooks"


def test_a_row_added_to_the_table_is_a_pass_of_every_compile(monkeypatch):
    """A pass is a row: inserted after cse, its trace is in the history and the program it returns is what runs."""
    def marked(p):
        new = from_trace(p.traces[-1])
        new.bound_symbols = list(p.traces[-1].bound_symbols)
        p.traces.append(new.set_provenance("Marking pass"))

    at = [r.name for r in pipeline.PASSES].index("cse") + 1
    rows = (*pipeline.PASSES[:at], pipeline.PassRow("mark", lambda p: True, marked), *pipeline.PASSES[at:])
    monkeypatch.setattr(pipeline, "PASSES", rows)
    x = torch.randn(3)
    jf = jitcore.jit(lambda x: x.exp() + 1)
    torch.testing.assert_close(jf(x), x.exp() + 1)
    headers = _headers(jitcore.last_traces(jf))
    assert any("Marking pass" in h for h in headers)
    assert headers.index(next(h for h in headers if "Marking pass" in h)) == 3  # interpreted, dce, cse, mark, ...


@pytest.mark.parametrize("requires_grad", [False, True])
def test_the_stages_are_timed_in_order(requires_grad):
    jf = jitcore.jit(lambda x: x.exp() + 1)
    jf(torch.randn(3, requires_grad=requires_grad))
    counts = ("region_compiles", "regions_reused", "cpp_builds", "region_stages", "region_log")
    stages = [k for k in jitcore.last_compile_stats(jf) if k not in counts]
    assert stages == ["interpret", "transforms", "claim", "memory", "codegen", "guards"]
