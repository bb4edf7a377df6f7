"""The performance report (benchmarks/performance.py, benchmarks/perf_report.py): its plumbing on the smallest
workloads, without torch.compile (no timing is asserted): every part's rows and columns, the targets and their
verdicts, the thunder variant skipped when it is not installed, the markdown and JSON written."""
from __future__ import annotations

import json

from benchmarks import perf_report, performance, thunder_adapter

JT, JI = perf_report.JIT_TORCH, perf_report.JIT_INDUCTOR


def test_one_run_writes_a_report_with_every_part_row_and_target(tmp_path, capsys):
    argv = ["--parts", "convnets,training,overhead", "--variants", f"eager,{JT},thunder", "--models", "plain5",
            "--training", "gpt2 block", "--rounds", "2", "--quick", "--out", str(tmp_path)]
    rows, meta = performance.main(argv)
    got = [(r["part"], r["workload"], r["variant"], r["status"]) for r in rows]
    assert got == [("convnets", "plain5", "eager", "pass"), ("convnets", "plain5", JT, "pass"),
                   ("training", "gpt2 block", "eager", "pass"), ("training", "gpt2 block", JT, "pass"),
                   ("overhead", "add 2x2", "eager", "pass"), ("overhead", "add 2x2", JT, "pass"),
                   ("overhead", "add 2x2", "eager", "pass"), ("overhead", "add 2x2", "autograd.Function", "pass"),
                   ("overhead", "add 2x2", JT, "pass")], [r["note"] for r in rows]
    assert [r["mode"] for r in rows[4:]] == ["forward"] * 2 + ["forward+backward"] * 3
    for r in rows:
        assert r["value"] > 0
        if r["part"] != "overhead":
            assert r["x_eager"] > 0 and r["x_compile"] is None  # (torch.compile was not run)
    assert rows[0]["x_eager"] == 1.0 and rows[4]["over_eager_us"] == 0.0
    md = (tmp_path / "performance.md").read_text()
    assert md == capsys.readouterr().out
    assert f"- command: `python -m benchmarks.performance {argv[0]} {argv[1]}" in md
    assert "load average (1, 5, 15 min):" in md and " at start, " in md and "jitcore " in md
    if thunder_adapter.version() is None:
        assert "skipped: thunder: not installed" in md and "| thunder |" not in md
    assert "| model | variant | step ms | x eager | x torch.compile | target | verdict | note |" in md
    assert f"| plain5 | {JT} | " in md and "| x eager >= 1.0 | " in md
    assert "| workload | variant | fwd+bwd ms | x eager | x torch.compile | x jitcore [torch] |" in md
    assert "| mode | variant | us per call | over eager (us) |" in md and "| autograd.Function |" in md
    raw = json.loads((tmp_path / "performance.json").read_text())
    assert raw["rows"] == rows and raw["meta"]["command"] == meta["command"]
    verdicts = {(t["part"], t["workload"], t["variant"], t["field"], t["mode"]): t["verdict"] for t in raw["targets"]}
    assert verdicts[("convnets", "plain5", JT, "x_eager", "training step")] in ("met", "missed")
    for mode in ("forward", "forward+backward"):
        assert verdicts[("overhead", "add 2x2", JT, "over_eager_us", mode)] in ("met", "missed")
    assert verdicts[("training", "gpt2 block", JI, "x_compile", "forward+backward")] == "not measured"  # (no variant)
    assert f"## Targets: {sum(v == 'met' for v in verdicts.values())} of {len(verdicts)} met" in md


def test_first_call_runs_each_variant_cold_in_its_own_process():
    rows = performance.part_first_call(["eager"], 1, log=lambda text: None)
    assert [(r["mode"], r["variant"], r["status"]) for r in rows] == [("forward", "eager", "pass"),
                                                                      ("forward+backward", "eager", "pass")]
    assert all(0 < r["value"] < 60 and r["x_eager"] == 1.0 and r["note"].startswith("1 fresh processes") for r in rows)


def row(part, variant, status="pass", mode="m", **fields):
    return performance.row(part, "w", mode, variant, status=status, value=1.0, **fields)


def test_verdicts_read_each_target_against_its_threshold():
    rows = [row("convnets", "eager", x_eager=1.0), row("convnets", JT, x_eager=0.98),
            row("first call", JI, x_compile=0.5), row("training", JI, x_compile=1.2, x_torch=0.9),
            row("overhead", JT, over_eager_us=4.0, mode="forward+backward"),
            row("overhead", JI, status="fail", note="boom", mode="forward+backward"),
            row("overhead", JT, over_eager_us=2.5, mode="forward")]
    got = [(v["part"], v["variant"], v["field"], v["verdict"]) for v in perf_report.judge(rows)]
    assert got == [("convnets", JT, "x_eager", "missed"), ("first call", JI, "x_compile", "met"),
                   ("training", JI, "x_compile", "met"), ("training", JI, "x_torch", "missed"),
                   ("overhead", JT, "over_eager_us", "met"), ("overhead", JI, "over_eager_us", "missed (fail)"),
                   ("overhead", JT, "over_eager_us", "missed"), ("overhead", JI, "over_eager_us", "not measured")]
    texts = [v["text"] for v in perf_report.judge(rows)]
    assert "w m, jitcore [torch]: 0.980 x eager — target x eager >= 1.0: missed" in texts
    assert "w forward+backward, jitcore [inductor, torch]: - — target us over eager <= 10.0: missed (fail)" in texts
    assert "w forward, jitcore [torch]: +2.5 us over eager — target us over eager <= 2.0: missed" in texts
    md = perf_report.markdown(rows, {"command": "c", "date": "d", "machine": "m", "versions": "v",
                                     "load_start": "1", "clock": "wall clock"})
    assert "## Targets: 3 of 8 met" in md
    failed_row = "| jitcore [inductor, torch] | - | - | us over eager <= 10.0 | missed (fail) | fail: boom |"
    assert f"| forward+backward {failed_row}" in md


def test_a_torch_compile_that_ran_past_its_recompile_limit_is_no_fair_comparison():
    rows = [row("training", "torch.compile", note="9 graphs compiled, recompile limit hit: runs eagerly past it"),
            row("training", JI, x_compile=2.5, x_torch=1.5)]
    got = [v["verdict"] for v in perf_report.judge(rows)]
    assert got == ["met (torch.compile hit its recompile limit here: not a fair comparison)", "met"]
    assert "## Targets: 1 of 2 met" in perf_report.markdown(rows, {"command": "c", "date": "d", "machine": "m",
                                                                   "versions": "v", "load_start": "1", "clock": "c"})
