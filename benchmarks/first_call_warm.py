"""Benchmarks: the first call of jitcore [inductor, torch] against torch.compile in a warm process and in a fresh one,
on the elementwise chain (1024x1024), the MLP, the GPT-2 style block and HuggingFace's GPT-2 (benchmarks/suites.py),
forward (under no_grad) and forward+backward. Every measurement is a process of its own, with one thread:

- warm process: it first compiles two unrelated small functions with BOTH compilers (the same mode: forward, or
  forward and backward), so each has paid its one-time costs (imports, Inductor's instruction-set checks, precompiled
  headers), waits for jitcore's background work, then points TORCHINDUCTOR_CACHE_DIR and JITCORE_CACHE_DIR at new
  empty folders (both are read at each use) and times `jit()` / `torch.compile()` and the first call (its backward
  included). The C++ compiler runs are counted: a compile served from a cache in memory would show none.
- fresh process (as benchmarks/first_call.py): empty caches and temporary folder (precompiled headers built in the
  process), the time running from before jitcore / Dynamo are imported to the end of the first call.

Reported per row: medians over --reps (the variants alternate, so a change in load hits both), the ratio jitcore /
torch.compile, the C++ compiler runs, process CPU seconds (its own and its compiler subprocesses') and jitcore's
per-stage seconds (jitcore.last_compile_stats), with the load average; markdown, and JSON with --json.

    python -m benchmarks.first_call_warm --reps 1              # warm and fresh processes, all rows
    python -m benchmarks.first_call_warm --reps 3 --no-fresh --workloads chain block
    python -m benchmarks.first_call_warm --reps 3 --no-warm --workloads block    # fresh processes only
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
MARK = "FIRST_CALL_WARM "
JIT, TC = "jitcore [inductor, torch]", "torch.compile"
BASE = "jitcore baseline"  # (--baseline: jitcore [inductor, torch] from another checkout)
WORKLOADS = {"chain": ("core", "chain 1024x1024"), "mlp": ("core", "mlp 256x3 b512"),
             "block": ("core", "gpt2 block"), "hf-gpt2": ("hf", "gpt2")}
MODES = ("forward", "forward+backward")


def _workload(name: str):
    from benchmarks import suites

    where, title = WORKLOADS[name]
    work = suites.core_workloads(False) if where == "core" else suites.hf_workloads(False)[0]
    return next(w for w in work if w.name == title)


def _warm_up_pointwise(x):
    """What the warm process compiles first (nothing the workloads contain: region texts of their own), this and
    _warm_up_reductions: a region of one kind of loop nest and one of several, so that both kinds of CPU module
    jitcore compiles (Inductor's Python wrapper for few kernels, its C++ wrapper for more:
    executors/inductor_options.py) have paid their one-time work (their precompiled headers), as in a process that
    has compiled a model."""
    return (x.cos() * 3 + x.sin()).exp()


def _warm_up_reductions(x):
    return (x.cos() * 3 + x.sin()).sum(-1, keepdim=True) * x.amax(0)


def _first_call(f, inputs, train: bool):
    if train:
        out = f(*inputs)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    else:
        with torch.no_grad():
            f(*inputs)


def _warm_up(train: bool):
    from benchmarks.measure import make_variant
    from executors import cpu_compiler

    cpu_compiler.HEADER_NICENESS = 0  # (waited for below: at the lowest priority, a loaded machine starves it)
    for variant in (TC, JIT):
        for fn in (_warm_up_pointwise, _warm_up_reductions):
            x = torch.randn(64, 64, requires_grad=train)
            _first_call(make_variant(variant, fn), (x,), train)
    cpu_compiler.wait_for_background_work()  # (a precompiled header built in a thread: one-time work, paid here)


def _inductor_metrics() -> dict:
    from jitcore import compat

    return {k: list(v) for k, v in compat.inductor_time_metrics().items()}


_STAGE_KEYS = {"lowering": "GraphLowering.run", "codegen": "GraphLowering.codegen",
               "load": "PyCodeCache.load_by_key_path", "cpp_build": "compile_file"}


def child(variant: str, workload: str, train: bool, warm: bool):
    torch.set_num_threads(1)
    w = _workload(workload)
    fn, inputs, params = w.make()
    if train and params is None:
        inputs = tuple(t.detach().requires_grad_(t.is_floating_point()) for t in inputs)
    if warm:
        _warm_up(train)
        root = tempfile.mkdtemp(prefix="jitcore-warm-first-call-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
        os.environ["JITCORE_CACHE_DIR"] = os.path.join(root, "jitcore")
        if variant == TC:
            torch.compiler.reset()  # (make_variant resets too: the metrics' snapshot below starts after it)
    load = os.getloadavg()[0]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, start = time.process_time(), time.perf_counter()
    from benchmarks.measure import make_variant  # (imports jitcore in a fresh process: part of its first call)

    before = _inductor_metrics() if warm else {}
    f = make_variant(variant, fn)
    _first_call(f, inputs, train)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"seconds": seconds, "cpu": cpu, "cpu_children": after.ru_utime + after.ru_stime - children.ru_utime -
              children.ru_stime, "load": load}
    metrics = _inductor_metrics()
    new = {key: metrics.get(key, [])[len(before.get(key, [])):] for key in _STAGE_KEYS.values()}
    result["inductor"] = {name: round(sum(new[key]), 3) for name, key in _STAGE_KEYS.items()}
    result["cpp_builds"] = len(new["compile_file"])  # (every C++ compiler run of Inductor's, threads' too)
    if variant == JIT:
        import jitcore

        stats = jitcore.last_compile_stats(f)
        result["stats"] = {k: v for k, v in stats.items() if k != "region_log"}
    print(MARK + json.dumps(result), flush=True)


_SHARED_TMP: list = []


def _shared_tmp() -> str:
    if not _SHARED_TMP:
        _SHARED_TMP.append(tempfile.mkdtemp(prefix="jitcore-first-call-tmp-"))
    return _SHARED_TMP[0]


def run_one(variant: str, workload: str, train: bool, warm: bool, root: Path = ROOT) -> dict:
    """One measurement in a new process (see the module's docstring), of the jitcore in the checkout `root`."""
    folder = tempfile.mkdtemp(prefix="jitcore-first-call-")
    # (a warm process's temporary folder, where Inductor keeps its precompiled headers, is shared by the warm runs:
    # the first one builds them in its warm-up, one-time work either way; a fresh process builds its own)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "inductor"), "JITCORE_CACHE_DIR": folder,
           "TMPDIR": _shared_tmp() if warm else folder, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("JITCORE_REGION_CACHE", None)
    args = [sys.executable, "-m", "benchmarks.first_call_warm", "--child", variant, "--workloads", workload] + \
        (["--train"] if train else []) + (["--warm-child"] if warm else [])
    try:
        proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
    if line is None:
        raise RuntimeError(f"{variant} {workload}: {(proc.stderr or proc.stdout).strip().splitlines()[-3:]}")
    return json.loads(line[len(MARK):])


def _median(runs: list, key: str):
    return statistics.median(r[key] for r in runs)


def _stages(stats: dict) -> str:
    """jitcore's compile, per stage: the pipeline's stages summed, then the regions' (compat: stats without them)."""
    pipeline = sum(v for k, v in stats.items() if k in ("interpret", "transforms", "claim", "memory", "codegen",
                                                          "guards"))
    regions = stats.get("region_stages", {})
    parts = [f"trace+passes {pipeline:.2f}"] + [f"{k} {v:.2f}" for k, v in regions.items()]
    return ", ".join(parts) + f"; {stats.get('region_compiles', '?')} regions"


def table(rows: list, warm: bool) -> str:
    title = "warm process" if warm else "fresh process"
    lines = [f"| workload | mode | torch.compile ({title}) | jitcore [inductor, torch] | ratio | C++ builds "
             "(tc / jit) | CPU s incl. g++ (tc / jit) | load |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, j = r[TC], r[JIT]
        ct, cj = (_median(x, "cpu") + _median(x, "cpu_children") for x in (t, j))
        lines.append(f"| {r['workload']} | {r['mode']} | {_median(t, 'seconds'):.2f} s | {_median(j, 'seconds'):.2f} s "
                     f"| {_median(j, 'seconds') / _median(t, 'seconds'):.2f} | {_median(t, 'cpp_builds'):g} / "
                     f"{_median(j, 'cpp_builds'):g} | {ct:.1f} / {cj:.1f} | "
                     f"{statistics.mean(x['load'] for x in t + j):.1f} |" +
                     (f" baseline {_median(r[BASE], 'seconds'):.2f} s, CPU "
                      f"{_median(r[BASE], 'cpu') + _median(r[BASE], 'cpu_children'):.1f} |" if BASE in r else ""))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--no-fresh", action="store_true", help="the warm-process rows only")
    p.add_argument("--no-warm", action="store_true", help="the fresh-process rows only")
    p.add_argument("--json", help="write the measurements to this file")
    p.add_argument("--baseline", help="also measure jitcore from this other checkout (a column 'jitcore baseline')")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--warm-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child, a.workloads[0], a.train, a.warm_child)
    results = {"warm": [], "fresh": []}
    for warm in [w for w in (True, False) if not ((a.no_fresh and not w) or (a.no_warm and w))]:
        for workload in a.workloads:
            for mode in a.modes:
                row = {"workload": workload, "mode": mode, TC: [], JIT: []}
                if a.baseline:
                    row[BASE] = []
                for _ in range(a.reps):  # (alternating: a change in the machine's load hits both)
                    for variant in row.keys() - {"workload", "mode"}:
                        row[variant].append(run_one(JIT if variant == BASE else variant, workload, mode != "forward",
                                                    warm, Path(a.baseline) if variant == BASE else ROOT))
                results["warm" if warm else "fresh"].append(row)
                j = row[JIT][-1]
                print(f"# {'warm' if warm else 'fresh'} {workload} {mode}: torch.compile "
                      f"{row[TC][-1]['seconds']:.2f} s {row[TC][-1]['inductor']}, jitcore {j['seconds']:.2f} s "
                      f"({_stages(j.get('stats', {}))})", flush=True)
    print(f"\nmedians of {a.reps} process(es) per cell; one thread; load: the 1-minute load average at the start")
    for kind in ("warm", "fresh"):
        if results[kind]:
            print("\n" + table(results[kind], kind == "warm"))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    if _SHARED_TMP:
        shutil.rmtree(_SHARED_TMP[0], ignore_errors=True)


if __name__ == "__main__":
    main()
