"""benchmarks/gpu_check.py, the prepared check for a lent GPU machine: its --dry-run (the same plan on CPU tensors,
tiny sizes) run as a user runs it, every section present in results.json and results.md and every check that ran
passing against eager; and the pieces that decide a verdict (the comparison, the failure record, the budget)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_cases, gpu_check

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", str(out), "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text(), proc.stdout


def test_dry_run_has_every_section_and_unit(dry_run):
    results, md, _ = dry_run
    sections = results["sections"]
    assert set(sections) == set(gpu_check.SECTIONS) and results["meta"]["dry_run"] is True
    env = sections["environment"]
    assert env["status"] == "pass" and env["jitcore_import"] == "ok" and env["torch"] == torch.__version__
    names = [r["name"] for r in sections["cases"]]
    expected = [f"{m} / {ph} / {pr} / {v}" for m, ph, pr in gpu_check.CASES for v in (*gpu_cases.VARIANTS,
                                                                                       gpu_cases.GRAPHED)]
    assert sorted(names) == sorted(expected)
    assert [r["variant"] for r in sections["dropout_rng"]] == list(gpu_cases.VARIANTS)
    assert [r["variant"] for r in sections["cache_shapes"]] == ["jitcore [torch]", gpu_cases.INDUCTOR]
    for heading in ("## cuda-marked tests", "## Cases", "## Failures\n\nnone", "## Dropout and the RNG",
                    "## Cache over shapes"):
        assert heading in md, heading
    assert "| block | train | bf16 | jitcore [torch] | pass |" in md


def test_dry_run_checks_pass_against_eager(dry_run):
    results, _, stdout = dry_run
    s = results["sections"]
    assert s["cuda_tests"]["status"] == "pass" and "tests/test_saved_tensor_hooks.py" in s["cuda_tests"]["files"]
    assert s["cuda_tests"]["counts"]["skipped"] >= 1  # no CUDA here: the marked tests skip, cleanly
    ran = {r["name"]: r for r in s["cases"] if not r["status"].startswith("skipped")}
    for m, ph, pr in gpu_check.CASES:  # eager and jitcore [torch] run in every case
        assert {f"{m} / {ph} / {pr} / eager", f"{m} / {ph} / {pr} / jitcore [torch]"} <= set(ran), stdout
    assert "block / forward / fp32 / jitcore [inductor, torch]" in ran
    for name, r in ran.items():
        assert r["status"] == "pass" and r["correct"], (name, r.get("error"), r.get("mismatch"))
        assert r["output_rel_err"] <= r["tolerance"] and r["grad_rel_err"] <= r["tolerance"]
        assert r["step_ms"] > 0 and r["first_call_s"] > 0 and r["memory"] == gpu_cases.DRY
        if r["phase"] == "train":
            assert r["grad_rel_err"] is not None
    for r in s["cases"]:
        if r["variant"] == gpu_cases.GRAPHED:
            assert r["status"] == gpu_cases.DRY
    for r in s["dropout_rng"][:1] + s["dropout_rng"][2:3]:  # eager, jitcore [torch]
        assert r["status"] == "pass" and r["reproducible"] and r["mask_reused"], r
    shapes = s["cache_shapes"][0]
    assert shapes["status"] == "pass" and len(shapes["calls"]) == len(gpu_cases.DRY_SIZES.shapes)
    last = shapes["calls"][-1]
    assert last["hits"] + last["misses"] == len(shapes["calls"]) and all(c["correct"] for c in shapes["calls"])


def test_compare_refuses_a_wrong_answer():
    t = torch.randn(4, 5)
    ok = gpu_cases.compare(([t.clone()], [t.clone()]), ([t], [t]), "fp32")
    assert ok["correct"] and ok["output_rel_err"] == 0
    off = gpu_cases.compare(([t + 1e-2], [t]), ([t], [t]), "fp32")
    assert not off["correct"] and "outputs" in off["mismatch"]
    nan = gpu_cases.compare(([t], [torch.full_like(t, float("nan"))]), ([t], [t]), "bf16")
    assert not nan["correct"] and nan["grad_rel_err"] == float("inf")
    assert not gpu_cases.compare(([t.double()], []), ([t], []), "fp32")["correct"]  # another dtype
    assert not gpu_cases.compare(([t], [None]), ([t], [t]), "fp32")["correct"]  # a missing gradient


def test_a_failure_is_recorded_with_the_users_line_and_the_run_goes_on(tmp_path, monkeypatch):
    def wrong_input(env, model, dropout=0.0):
        module, (x,) = real_build(env, model, dropout)
        return module, (torch.randn(*x.shape[:-1], x.shape[-1] + 1),)  # one feature too many

    real_build = gpu_cases.build_model
    monkeypatch.setattr(gpu_cases, "build_model", wrong_input)
    results = gpu_check.main([str(tmp_path), "--dry-run", "--only", "block / forward / fp32 / jitcore [torch]"])
    rows = {r["name"]: r for r in results["sections"]["cases"]}
    eager = rows["block / forward / fp32 / eager"]  # run: the selected row compares against it
    assert eager["status"] == "error" and eager["error"]["type"] == "RuntimeError", eager
    assert "benchmarks/models.py" in eager["error"]["user_line"] and "self.ln_1(x)" in eager["error"]["user_line"]
    jit = rows["block / forward / fp32 / jitcore [torch]"]
    assert jit["status"] == "error" and "eager's answer is missing" in jit["error"]["message"]
    assert rows["llama / train / fp32 / jitcore [torch]"]["status"] == "skipped: not selected"
    assert json.loads((tmp_path / "results.json").read_text())["sections"]["cases"][0]["status"] == "error"
    assert "- **block / forward / fp32 / eager**: RuntimeError" in (tmp_path / "results.md").read_text()


def test_error_record_of_a_jit_refusal_names_the_users_line():
    import jitcore

    def asks(x):
        return input("? ") + x

    with pytest.raises(jitcore.UnsupportedError) as info:
        jitcore.jit(asks)(torch.ones(2))
    record = gpu_check.error_record(info.value)
    assert record["type"] == "UnsupportedError" and "input" in record["message"]
    assert f"{__file__}:" in record["user_line"] and 'input("? ")' in record["user_line"]


def test_budget_stops_new_units_and_still_writes(tmp_path):
    results = gpu_check.main([str(tmp_path), "--dry-run", "--budget", "0"])
    s = results["sections"]
    assert s["environment"]["status"] == "pass"  # always: it is what a reader needs first
    assert s["cuda_tests"]["status"] == "skipped: budget"
    assert {r["status"] for r in s["cases"] + s["dropout_rng"] + s["cache_shapes"]} <= {"skipped: budget",
                                                                                          gpu_cases.DRY}
    assert (tmp_path / "results.md").exists() and json.loads((tmp_path / "results.json").read_text())
