"""Benchmarks: the one prepared check for a lent GPU machine (issue 36). On CUDA: the `cuda`-marked tests (pytest in
a subprocess, whose conftest turns the trace checker on); then in this process, a GPT-2 style block and a small
HuggingFace Llama, forward and training step, fp32 and bf16 autocast, under eager / torch.compile / jitcore [torch] /
jitcore [inductor, torch] / that captured in a CUDA graph, each checked against eager and timed; dropout's values and
RNG state; the cache over a few shapes under symbolic values. Writes results.json and results.md into the folder
given (the device tool's $OUT).

    python -m benchmarks.gpu_check $OUT                  # on the GPU machine: see benchmarks/gpu_check.sh
    python -m benchmarks.gpu_check /tmp/gc --dry-run     # the same plan on CPU tensors, tiny sizes (CI's check)
    python -m benchmarks.gpu_check $OUT --only llama     # only the units whose name contains a pattern

Every unit runs in its own try/except with a time cap: a failure is recorded (type, message, the user's line) and
the run goes on. Units start in priority order until --budget seconds have passed; the rest are recorded as
"skipped: budget". Results are rewritten after every unit, so a run killed from outside keeps what it measured.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import shlex
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks import gpu_cases as gc
from benchmarks.gpu_report import markdown
from benchmarks.measure import TimeLimit, time_limit

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("environment", "cuda_tests", "cases", "dropout_rng", "cache_shapes")
# the cases in priority order: what runs first when the budget cannot hold them all
CASES = [("block", "forward", "fp32"), ("block", "train", "fp32"), ("block", "train", "bf16"),
         ("llama", "forward", "fp32"), ("llama", "train", "fp32"), ("llama", "train", "bf16"),
         ("block", "forward", "bf16"), ("llama", "forward", "bf16")]
FIRST_CASES = 2  # then the dropout and cache sections, then the rest of the cases
COMPILING = ("torch.compile", gc.INDUCTOR)  # the variants that compile with Inductor
GRACE_S = 90  # a unit started before the budget ran out may run this long past it (its own cap permitting)
# the models' own code: where the innermost frame of a failure in one of them is "the user's line" (code jitcore
# traces runs in its own interpreter, whose errors carry that line as `where`)
USER_CODE = ("/benchmarks/models.py", "/benchmarks/suites.py", "/transformers/")


class Stopped(BaseException):
    """SIGTERM arrived (`timeout` in benchmarks/gpu_check.sh): the unit running is recorded and the run ends."""


def _stop(signum, frame):
    raise Stopped(f"signal {signum}")


@dataclass
class Unit:
    section: str
    name: str
    body: object  # (row: dict) -> None; fills the row
    cap_s: float
    fields: dict = field(default_factory=dict)  # what the row says before it runs (model, phase, ..., variant)
    skip: str | None = None  # the status of a unit not run (the dry run's skips)
    selected: bool = True


def error_record(e: BaseException) -> dict:
    """What a failure was: type, message, the user's line (jitcore's `where`, else the innermost frame in the models'
    own code), where it was raised, and the last frames."""
    frames = traceback.extract_tb(e.__traceback__)
    user = [f for f in frames if any(part in f.filename for part in USER_CODE)]
    where = getattr(e, "where", None)
    line = where or (f"{user[-1].filename}:{user[-1].lineno}: {user[-1].line}" if user else None)
    raised = f"{frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames else None
    return {"type": type(e).__name__, "message": str(e)[:1200], "user_line": line, "raised_at": raised,
            "traceback": "".join(traceback.format_exception(e, limit=-8))[-4000:]}


class Check:
    """The run: the plan's units, the budget, and the results written after each unit."""

    def __init__(self, args):
        self.args, self.out = args, Path(args.out)
        self.env = gc.Env(args.dry_run)
        self.start = time.monotonic()
        self.results = {"meta": {"command": "python -m benchmarks.gpu_check " + shlex.join(sys.argv[1:]),
                                 "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                                 "dry_run": args.dry_run, "budget_s": args.budget, "device": str(self.env.device)},
                        "sections": {"environment": {}, "cuda_tests": {}, "cases": [], "dropout_rng": [],
                                     "cache_shapes": []}}
        self.case_state: dict = {}
        self.dropout_reference: dict = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def run_unit(self, unit: Unit):
        section = self.results["sections"][unit.section]
        row = section if isinstance(section, dict) else {"name": unit.name}
        row.update(unit.fields)
        if isinstance(section, list):
            section.append(row)
        left = self.args.budget - self.elapsed()
        if not unit.selected or unit.skip:
            row["status"] = unit.skip or "skipped: not selected"
            return
        if left <= 0 and unit.section != "environment":
            row["status"] = "skipped: budget"
            self._log(unit.name, row)
            return
        start = time.monotonic()
        try:
            with time_limit(max(min(unit.cap_s, left + GRACE_S), 1.0)):
                unit.body(row)
            if "status" not in row:
                row["status"] = "pass" if row.get("correct", True) else "wrong"
        except (Exception, TimeLimit) as e:
            row["status"], row["error"] = "error", error_record(e)
        except Stopped as e:  # SIGTERM (the device script's timeout): this unit's record, then out
            row["status"], row["error"] = "error", error_record(e)
            row["wall_s"] = time.monotonic() - start
            self.results["meta"]["aborted"] = f"stopped from outside ({e}) during {unit.name}"
            self.write()
            raise
        row["wall_s"] = time.monotonic() - start
        self.env.release()
        self._log(unit.name, row)
        self.write()

    def _log(self, name, row):
        err = row.get("error", {})
        detail = f"{err.get('type')}: {(err.get('message', '').splitlines() or [''])[0][:120]}" if err else ""
        print(f"[{self.elapsed():6.1f}s] {name}: {row['status']} {detail}", flush=True)

    def write(self):
        self.results["meta"]["wall_s"] = self.elapsed()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))
        (self.out / "results.md").write_text(markdown(self.results))

    # ---------------------------------------------------------------- the plan

    def plan(self) -> list[Unit]:
        units = [Unit("environment", "environment", self.environment, 120),
                 Unit("cuda_tests", "cuda tests", self.cuda_tests, self.args.tests_cap)]
        case_cap, other_cap = (120, 60) if self.args.dry_run else (200, 150)
        case_units = [self._case_units(*case, case_cap, first=i == 0) for i, case in enumerate(CASES)]
        for group in case_units[:FIRST_CASES]:
            units += group
        for variant in gc.VARIANTS:
            units.append(Unit("dropout_rng", f"dropout rng / {variant}", self._dropout(variant), other_cap,
                              {"variant": variant}, self._dry_skip(variant)))
        for variant in ("jitcore [torch]", gc.INDUCTOR):
            units.append(Unit("cache_shapes", f"cache shapes / {variant}", self._shapes(variant), other_cap,
                              {"variant": variant}, self._dry_skip(variant)))
        for group in case_units[FIRST_CASES:]:
            units += group
        return self._select(units) if self.args.only else units

    def _dry_skip(self, variant: str, first: bool = False) -> str | None:
        """The dry run skips torch.compile, and compiles with jitcore's Inductor executor on the first case only:
        compiles on a CPU take tens of seconds each (--all-variants runs them all)."""
        if self.args.dry_run and not self.args.all_variants and variant in COMPILING and (
                variant == "torch.compile" or not first):
            return gc.DRY
        return None

    def _select(self, units: list[Unit]) -> list[Unit]:
        """--only: the units whose name contains a pattern, with the eager units their comparisons need (a case's
        or the dropout section's); the environment always runs."""
        def wanted(u):
            return any(p in u.name for p in self.args.only)

        for u in units:
            group = u.name.rsplit(" / ", 1)[0]
            u.selected = u.section == "environment" or wanted(u) or (
                u.name.endswith(" / eager") and any(wanted(v) for v in units if v.name.startswith(group + " / ")))
        return units

    def _case_units(self, model, phase, precision, cap, first) -> list[Unit]:
        key = f"{model} / {phase} / {precision}"
        fields = {"model": model, "phase": phase, "precision": precision}
        units = [Unit("cases", f"{key} / {v}", self._variant(key, model, phase, precision, v), cap,
                      {**fields, "variant": v}, self._dry_skip(v, first)) for v in gc.VARIANTS]
        graphed = Unit("cases", f"{key} / {gc.GRAPHED}", self._graphed(key, model, phase, precision), cap,
                       {**fields, "variant": gc.GRAPHED}, gc.DRY if self.args.dry_run else None)
        return [*units, graphed]

    def _case(self, key, model, phase, precision) -> dict:
        if key not in self.case_state:
            self.case_state.clear()  # one case's models and compiled callables live at a time
            module, inputs = gc.build_model(self.env, model)
            self.case_state[key] = {"module": module, "inputs": inputs, "phase": phase, "precision": precision,
                                    "reference": {}, "shared": {}}
        return self.case_state[key]

    def _variant(self, key, model, phase, precision, variant):
        def body(row):
            case = self._case(key, model, phase, precision)
            if variant != "eager" and "answer" not in case["reference"]:
                raise RuntimeError("eager's answer is missing (its row failed or did not run)")
            shared = gc.measure_variant(self.env, case, variant, row, case["reference"])
            if variant == gc.INDUCTOR:
                case["shared"] = shared

        return body

    def _graphed(self, key, model, phase, precision):
        def body(row):
            case = self._case(key, model, phase, precision)
            gc.measure_graphed(self.env, case, row, case["reference"], case["shared"])

        return body

    def _dropout(self, variant):
        reference = self.dropout_reference

        def body(row):
            if variant != "eager" and "dropout" not in reference:
                raise RuntimeError("eager's dropout answer is missing (its row failed or did not run)")
            row.update(gc.dropout_row(self.env, variant, reference))

        return body

    def _shapes(self, variant):
        def body(row):
            row["calls"] = gc.shapes_rows(self.env, variant)
            row["correct"] = all(c["correct"] for c in row["calls"])

        return body

    # ---------------------------------------------------------------- environment and tests

    def environment(self, row):
        from benchmarks.run import cpu_model, git_rev

        row.update(python=platform.python_version(), executable=sys.executable, torch=torch.__version__,
                   cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(), cpu=cpu_model(),
                   cpu_count=os.cpu_count(), jitcore_rev=git_rev())
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            row.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                       multiprocessors=props.multi_processor_count, gpu_memory_gib=props.total_memory / 2**30,
                       tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
        for name in ("triton", "transformers", "optree", "looseversion"):
            try:
                row[name] = getattr(__import__(name), "__version__", "installed")
            except Exception as e:
                row[name] = f"missing: {type(e).__name__}: {e}"
        start = time.perf_counter()  # imported once here, so no variant's first call counts their import
        importlib.import_module("torch._dynamo")
        importlib.import_module("torch._inductor.compile_fx")

        row["compiler_import_s"] = time.perf_counter() - start
        try:  # jitcore itself, and its executors: each later unit would fail the same way
            import jitcore  # noqa: F401
            from executors import inductor_ex

            row["jitcore_import"] = "ok"
            row["inductor_executor"] = "ok" if inductor_ex.is_available()[0] else inductor_ex.is_available()[1]
        except Exception as e:
            row["jitcore_import"] = error_record(e)

    def cuda_tests(self, row):
        import subprocess
        import tempfile
        import xml.etree.ElementTree as ET

        files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                       if "mark.cuda" in p.read_text())
        row["files"] = files
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "junit.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-rfEs",
                   f"--junitxml={report}", *files]
            row["command"] = " ".join(cmd[1:])
            try:
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                      timeout=max(self.args.tests_cap - 10, 10))
                row["returncode"], output = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as e:
                row["returncode"], output = "timeout", (e.stdout or b"").decode(errors="replace")
            row["output_tail"] = output[-3000:]
            tests = []
            if report.exists():
                for case in ET.parse(report).getroot().iter("testcase"):
                    outcome, message = "passed", ""
                    for kind in ("failure", "error", "skipped"):
                        node = case.find(kind)
                        if node is not None:
                            outcome, message = kind, (node.get("message") or "")[:300]
                    tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                                  "message": message})
        row["tests"] = tests
        row["counts"] = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failure", "error", "skipped")}
        row["correct"] = row["returncode"] in (0, 5) and not row["counts"]["failure"] and not row["counts"]["error"]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder for results.json and results.md (created)")
    p.add_argument("--dry-run", action="store_true", help="CPU tensors, tiny sizes; CUDA-only parts are skipped")
    p.add_argument("--all-variants", action="store_true",
                   help="with --dry-run: the Inductor-compiled variants in every case too (minutes on a CPU)")
    p.add_argument("--budget", type=float, default=420.0,
                   help="seconds after which no new unit starts (default 420); results are written either way")
    p.add_argument("--tests-cap", type=float, default=150.0, help="seconds for the cuda-marked tests (default 150)")
    p.add_argument("--only", type=lambda s: [x for x in s.split(",") if x],
                   help="comma-separated patterns: run only the units whose name contains one (others are "
                        "'skipped: not selected')")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    check = Check(args)
    units = check.plan()
    check.run_unit(units[0])  # the environment
    if not args.dry_run and not torch.cuda.is_available():
        check.results["meta"]["aborted"] = "no CUDA device: nothing else to check here (on a CPU machine: --dry-run)"
        check.write()
        print(check.results["meta"]["aborted"], flush=True)
        raise SystemExit(2)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        for unit in units[1:]:
            check.run_unit(unit)
    except Stopped:
        raise SystemExit(124) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    check.write()
    print(markdown(check.results, short=True), flush=True)
    return check.results


if __name__ == "__main__":
    if "--dry-run" in sys.argv:
        torch.set_num_threads(1)  # the dry run checks the plumbing; on a shared CPU, OpenMP threads only stall
    main()
