"""The benchmark runner's shape-sequence suite (benchmarks/shape_suite.py): its plumbing on a tiny function in quick
mode, without torch.compile: each variant in its own process, compiles counted, times and ratios filled in, eager's
answers checked, the dashboard's section written."""
from __future__ import annotations

import pytest
import torch

from benchmarks import dashboard, shape_suite
from benchmarks.measure import SYMBOLIC

TINY = "tiny gelu mlp over batch, train"


def test_shape_suite_runs_a_tiny_function_in_fresh_processes():
    lines = []
    results = shape_suite.run_suite(quick=True, variants=["eager", SYMBOLIC], names=[TINY], threads=1,
                                    timeout=120, repeat=3, log=lines.append)
    assert [(r["workload"], r["variant"]) for r in results] == [(TINY, "eager"), (TINY, SYMBOLIC)], lines
    eager, jit = results
    assert eager["status"] == jit["status"] == "pass", (eager["error"], jit["error"], jit["extra"].get("traceback"))
    assert (eager["compiles"], jit["compiles"]) == (0, 1)  # three batch sizes, one symbolic compile
    assert jit["extra"]["first_shape_compiles"] == 1 and jit["extra"]["mode"] == "train"
    for r in results:
        x = r["extra"]
        assert x["shapes"] == [[16], [64], [32]]
        assert 0 < r["first_call_ms"] <= x["total_ms"] and x["steady_ms"] == r["fwdbwd_ms"] > 0
    assert jit["extra"]["compiling_ms"] == jit["first_call_ms"] and eager["extra"]["compiling_ms"] == 0
    assert jit["extra"]["steady_vs_eager"] == pytest.approx(jit["extra"]["steady_ms"] / eager["extra"]["steady_ms"])
    md = dashboard.markdown(results, {"date": "-", "command": "-", "machine": "-", "versions": "-",
                                      "memory_method": "-"})
    assert "## Shape sequences" in md and f"| {TINY} | {SYMBOLIC} | pass | 1 | 0 |" in md


def test_shape_suite_check_refuses_a_wrong_answer():
    t = torch.randn(3, 4)
    shape_suite.check([t.clone(), None], [t, None], 1e-4, "ok")
    with pytest.raises(AssertionError, match="shape"):
        shape_suite.check([t + 1e-2], [t], 1e-4, "shape (3, 4)")
    with pytest.raises(AssertionError, match="missing"):
        shape_suite.check([None], [t], 1e-4, "grads")
