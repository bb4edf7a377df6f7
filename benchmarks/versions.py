"""Benchmarks: jitcore's cost per Python and torch release, one record per environment, side by side.

Each environment (this Python; pyenv's 3.12 venv, .ci/py312.sh; the forky chroot's 3.13 and 3.14 venvs; the torch 2.10 /
2.15 venvs, where they exist) measures, in one process: the cached-call overhead over eager of `a + b` on 2x2 tensors
(forward, and forward+backward; medians of paired rounds), the first call of a small function with the torch executor
(trace + transforms + codegen; median over fresh functions), the first call and steady forward+backward step of the
GPT-2 style block with [torch] against eager, and the interpreter's overhead on a 100-op float function. The records are
printed as a table with each row's ratio to the first environment's (3.11 + torch 2.13.0 on CI's machine).

    python -m benchmarks.versions                  # this environment only, one JSON line
    python -m benchmarks.versions --all            # every environment present (run from the repo root, as root)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "VERSIONS_RECORD "
FORKY = os.environ.get("JITCORE_FORKY", "/opt/jitcore-forky")
TORCH_VENVS = os.environ.get("JITCORE_TORCH_VENVS", "/opt/jitcore-venvs")


def _first_call_small(reps: int) -> float:
    import torch

    import jitcore

    times = []
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    for i in range(reps):
        ns: dict = {}
        # a fresh function object (and code object) every rep: nothing cached by the interpreter's decoder either
        exec(compile(f"def f{i}(a, b):\n    c = a * b + a\n    return c.sin().sum(0) / {i + 1}\n",
                     f"<first_call_{i}>", "exec"), ns)
        start = time.perf_counter()
        jitcore.jit(ns[f"f{i}"])(a, b)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _block_times(reps: int) -> dict:
    import torch

    import jitcore
    from benchmarks.models import Block, GPTConfig
    from benchmarks.timing import paired_samples

    torch.manual_seed(0)
    block = Block(GPTConfig(n_embd=128, n_head=4, block_size=64))
    x = torch.randn(8, 64, 128, requires_grad=True)
    start = time.perf_counter()
    jblock = jitcore.jit(block)
    jblock(x).sum().backward()
    first = time.perf_counter() - start
    calls = {"eager": lambda: block(x).sum().backward(), "jit": lambda: jblock(x).sum().backward()}
    s = paired_samples(calls, reps, inner=3)
    return {"block_first_call_s": first, "block_step_eager_ms": statistics.median(s["eager"]) * 1e3,
            "block_step_jit_ms": statistics.median(s["jit"]) * 1e3}


def record(reps: int) -> dict:
    import torch

    import jitcore
    from benchmarks.bench_cache import add_backward_cases, overhead_over_eager
    from benchmarks.interpreter_overhead import N_OPS, _make_fn, _median_seconds
    from jitcore.interpreter import DefaultContext, interpret

    torch.set_num_threads(1)
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    a, b = torch.randn(2, 2), torch.randn(2, 2)

    def f(a, b):
        return a + b

    jf = jitcore.jit(f)
    fwd = overhead_over_eager({"eager": lambda: f(a, b), "jit": lambda: jf(a, b)}, rounds=reps, number=500)
    out["fwd_overhead_us"] = fwd["jit"][1]
    bwd = overhead_over_eager(add_backward_cases({"jit": jitcore.jit}), rounds=reps, number=300)
    out["fwd_bwd_overhead_us"] = bwd["jit"][1]
    out["first_call_small_ms"] = _first_call_small(max(5, reps // 2)) * 1e3
    g = _make_fn(N_OPS)
    out["interpret_100_ops_us"] = _median_seconds(lambda: interpret(g, (1.0, 2.0), {}, DefaultContext()), 200) * 1e6
    out.update(_block_times(max(5, reps // 2)))
    return out


def environments() -> list[tuple[str, list[str]]]:
    """(label, command prefix) of every environment present on this machine, this one first."""
    envs = [(f"{sys.version_info[0]}.{sys.version_info[1]} (this)", [sys.executable])]
    py312 = Path(os.environ.get("JITCORE_PY312", "/opt/venv312"), "bin", "python")  # (.ci/py312.sh)
    if py312.exists():
        envs.append(("3.12 pyenv", [str(py312)]))
    forky = ROOT / ".ci" / "forky.sh"
    for py in ("3.13", "3.14"):
        if Path(FORKY, f"venv{py}", "bin", "python").exists():
            envs.append((f"{py} forky", ["bash", str(forky), "run", py]))
    py312 = Path(os.environ.get("JITCORE_PY312", "/opt/venv312"), "bin", "python")
    if py312.exists():
        envs.append(("3.12 pyenv", [str(py312)]))
    venvs = Path(TORCH_VENVS)
    if venvs.is_dir():
        for v in sorted(venvs.iterdir()):
            if (v / "bin" / "python").exists():
                envs.append((f"3.11 {v.name}", [str(v / "bin" / "python")]))
    return envs


def _run(prefix: list[str], reps: int) -> dict | str:
    cmd = f"python -m benchmarks.versions --reps {reps}"
    argv = prefix + [cmd] if prefix[0] == "bash" else prefix + cmd.split()[1:]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (p.stderr or p.stdout).strip().splitlines()
    return tail[-1] if tail else f"exit {p.returncode}, no output"


COLUMNS = ("fwd_overhead_us", "fwd_bwd_overhead_us", "first_call_small_ms", "interpret_100_ops_us",
           "block_first_call_s", "block_step_eager_ms", "block_step_jit_ms")


def table(rows: list[tuple[str, dict | str]]) -> str:
    lines = ["| environment | python | torch | " + " | ".join(COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(COLUMNS)]
    base = next((r for _, r in rows if isinstance(r, dict)), None)
    for label, r in rows:
        if not isinstance(r, dict):
            lines.append(f"| {label} | failed: {r} |")
            continue
        cells = []
        for c in COLUMNS:
            ratio = f" ({r[c] / base[c]:.2f}x)" if base is not None and r is not base and base[c] > 0 else ""
            cells.append(f"{r[c]:.2f}{ratio}")
        lines.append(f"| {label} | {r['python']} | {r['torch']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--all", action="store_true", help="every environment present, one after another")
    args = p.parse_args()
    if not args.all:
        print(MARK + json.dumps(record(args.reps)))
        return
    rows = []
    for label, prefix in environments():
        print(f"... {label}", file=sys.stderr, flush=True)
        rows.append((label, _run(prefix, args.reps)))
    print(table(rows))


if __name__ == "__main__":
    main()
