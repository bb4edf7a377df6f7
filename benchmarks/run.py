"""Benchmarks: the one runner. Measures, side by side in one process, eager, torch.compile, jitcore with [torch]
and with [inductor, torch], and lightning-thunder when it is installed, over the suites of benchmarks/suites.py,
and writes the dashboard (markdown, PNG, raw JSON) into the results folder.

    python -m benchmarks.run --quick                     # < 2 minutes on a laptop CPU
    python -m benchmarks.run --quick --threads 1         # steadier on a shared machine (no OpenMP stalls)
    python -m benchmarks.run --out benchmarks/results    # the full set (several minutes: compilers compile)
    python -m benchmarks.run --suites mlp,cache --variants eager,"jitcore [torch]"
    python -m benchmarks.run --quick --suites shapes     # models over shape sequences, each variant in a fresh
                                                         # process (benchmarks/shape_suite.py; in full runs by default)
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import torch

from benchmarks import dashboard, shape_suite, thunder_adapter
from benchmarks.measure import SYMBOLIC, SYMBOLIC_INDUCTOR, VARIANTS, measure, measure_shapes
from benchmarks.suites import cache_workloads, core_workloads, hf_workloads

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_rev() -> str:
    def git(*args):
        return subprocess.run(
            ["git", *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        rev = git("rev-parse", "--short", "HEAD") or "unknown"
        return rev + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metadata(argv: list[str]) -> dict:
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}", f"jitcore {git_rev()}"]
    thunder = thunder_adapter.version()
    versions.append(f"lightning-thunder {thunder}" if thunder else "lightning-thunder not installed")
    try:
        import transformers

        versions.append(f"transformers {transformers.__version__}")
    except ImportError:
        versions.append("transformers not installed")
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(["python -m benchmarks.run", *map(shlex.quote, argv)]),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
                   f"{platform.system()} {platform.machine()}",
        "versions": ", ".join(versions),
        "memory_method": "torch.profiler memory events (bytes live in torch's CPU allocator during one call, "
                         "above the bytes live before it)",
    }


def run(args) -> list[dict]:
    quick = args.quick
    repeat = args.repeat or (7 if quick else 20)
    suites = set(args.suites.split(",")) if args.suites else None
    # (a comma inside brackets belongs to the name: "jitcore [inductor, torch]")
    variants = [v.strip() for v in re.split(r",(?![^\[]*\])", args.variants)] if args.variants else list(VARIANTS)
    if "eager" not in variants:
        variants.insert(0, "eager")  # speedups and memory ratios are relative to it
    hf, hf_missing = hf_workloads(quick)
    if hf_missing:
        print(f"huggingface suite skipped: {hf_missing}")
    work = core_workloads(quick) + hf + cache_workloads(quick)
    results = []
    chosen = [w for w in work if not suites or w.suite in suites]
    for k, w in enumerate(chosen, 1):
        extra = [SYMBOLIC, SYMBOLIC_INDUCTOR] if w.suite == "cache" else []
        names = variants + [v for v in extra if v not in variants]
        for v in names:
            _progress(f"[{k}/{len(chosen)}] {w.suite} / {w.name} / {v} ...")
            start = time.perf_counter()
            if w.shapes:
                r = measure_shapes(w, v, limit=args.limit)
            else:
                inner = (100 if quick else 1000) if w.suite == "tiny add" else 1
                r = measure(w, v, repeat=repeat, inner=inner, memory=not args.no_memory, limit=args.limit)
            _progress("")
            print(f"[{k}/{len(chosen)}] {w.suite:12s} {w.name:28s} {v:28s} {r.status:5s} "
                  f"{time.perf_counter() - start:6.1f}s{'  ' + r.error if r.error else ''}", flush=True)
            results.append(asdict(r))
            gc.collect()  # the variant's compiled objects go before the next one is measured
    if (suites is None and not quick) or (suites and shape_suite.SUITE in suites):
        results += shape_suite.run_suite(
            quick=quick, variants=variants if args.variants else None, threads=args.threads or 1,
            timeout=args.limit * 5, repeat=args.repeat, log=lambda line: print(line, flush=True))
    elif suites is None:
        print(f"{shape_suite.SUITE} suite skipped in --quick runs: add --suites {shape_suite.SUITE} (fresh processes, "
              "compiles: minutes)")
    return results


def _progress(text: str):
    """The workload being measured, on a terminal's stderr (one line, rewritten; "" clears it): a variant that
    compiles for a minute shows what it is. Nothing when stderr is piped or in CI (each finished workload prints its
    own line on stdout)."""
    if sys.stderr.isatty() and not os.environ.get("CI"):
        sys.stderr.write(f"\r\x1b[K{text}")
        sys.stderr.flush()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats, fewer workloads")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="results folder")
    parser.add_argument("--suites", default="", help="comma-separated suite names (default: all)")
    parser.add_argument("--variants", default="",
                        help=f"comma-separated, from: {', '.join(VARIANTS)}; the {shape_suite.SUITE} suite's: "
                             f"{', '.join(shape_suite.SHAPE_VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=0, help="timed samples per measurement (the best is kept)")
    parser.add_argument("--limit", type=float, default=None,
                        help="seconds one stage of one variant may take before it counts as failed "
                             f"(default 60 with --quick, 300 otherwise; five times that for one process of the "
                             f"{shape_suite.SUITE} suite)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (1 gives steadier numbers on a shared or busy machine; the "
                             f"{shape_suite.SUITE} suite's processes use 1 unless this says otherwise)")
    parser.add_argument("--no-memory", action="store_true", help="skip the profiler's peak-memory measurement")
    args = parser.parse_args(argv)
    args.limit = args.limit or (60.0 if args.quick else 300.0)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="thunder")
    start = time.perf_counter()
    meta = metadata(argv)
    print(f"{meta['machine']}\n{meta['versions']}")
    results = run(args)
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    for path in dashboard.write(results, meta, Path(args.out)):
        print(f"wrote {path}")
    print(f"total {meta['wall_s']:.0f} s")
    return results


if __name__ == "__main__":
    main()
