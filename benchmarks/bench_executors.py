"""Benchmarks: executors side by side on CPU. Eager vs torch.compile vs jit with [torch] vs jit with
[inductor, torch], forward (no_grad) and forward+backward, on a 10-op elementwise chain, an MLP and a GPT-2
style block. Prints medians (ms), paired speedups with 95% intervals
(every round times each variant once, in a shuffled order, so load changes hit all alike), each target's verdict, and
first-call (compile) times.

    python -m benchmarks.bench_executors                 # everything (a few minutes: inductor compiles)
    python -m benchmarks.bench_executors --cases chain --repeat 50
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import time

import torch

import jitcore
from benchmarks.models import Block, GPTConfig, elementwise_chain, mlp


def make_case(name: str):
    """(callable, inputs, params-or-None): what to run and what needs grad in forward+backward."""
    torch.manual_seed(0)
    if name == "chain":
        return elementwise_chain, (torch.randn(1024, 1024),), None
    if name == "mlp":
        model = mlp()
        return model, (torch.randn(512, 256),), list(model.parameters())
    if name == "block":
        model = Block(GPTConfig())
        return model, (torch.randn(8, 64, 128),), list(model.parameters())
    raise ValueError(f"unknown case {name!r}")


def variants(fn):
    made = (fn, torch.compile(fn), jitcore.jit(fn), jitcore.jit(fn, executors=["inductor"]))
    return dict(zip(variants_names(), made))


def step(run, inputs, params, backward: bool):
    """One call: forward under no_grad, or forward + backward of the sum."""
    if not backward:
        def fwd():
            with torch.no_grad():
                return run(*inputs)

        return fwd
    grad_inputs = [x.detach().requires_grad_(True) for x in inputs] if params is None else list(inputs)

    def fwd_bwd():
        out = run(*grad_inputs)
        out.sum().backward()
        for p in (params or grad_inputs):
            p.grad = None

    return fwd_bwd


def interleaved_samples(calls: dict, repeat: int, warmup: int = 3, seed: int = 0) -> dict:
    """Seconds per call of each callable, `repeat` rounds; each round runs every callable once, in a shuffled
    order, so that load changes and position effects (caches warmed by the previous call) hit all alike."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    rng = random.Random(seed)
    samples: dict = {name: [] for name in calls}
    for _ in range(repeat):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            calls[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def paired_ratio(base: list, other: list) -> tuple:
    """Median over rounds of base/other (the same round's two samples), with a 95% confidence interval for that
    median from order statistics (distribution-free). A ratio above 1: `other` is faster than `base`."""
    if not base or len(base) != len(other):
        return math.nan, math.nan, math.nan
    ratios = sorted(b / o for b, o in zip(base, other))
    n = len(ratios)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return statistics.median(ratios), ratios[lo], ratios[hi]


def measure(case: str, repeat: int) -> list[dict]:
    fn, inputs, params = make_case(case)
    rows = []
    for mode, backward in (("forward", False), ("fwd+bwd", True)):
        calls, first, errors = {}, {}, {}
        for vname, run in variants(fn).items():
            call = step(run, inputs, params, backward)
            try:
                start = time.perf_counter()
                call()
                first[vname] = time.perf_counter() - start
                calls[vname] = call
            except Exception as e:
                errors[vname] = f"{type(e).__name__}: {str(e)[:60]}"
        samples = interleaved_samples(calls, repeat)
        compiled = samples.get("torch.compile", [])
        for vname in variants_names():
            ts = samples.get(vname, [])
            ratio, lo, hi = paired_ratio(samples.get("eager", []), ts)
            vs_compile = paired_ratio(compiled, ts) if vname == "jit [inductor, torch]" else (math.nan,) * 3
            rows.append({"case": case, "mode": mode, "variant": vname,
                         "ms": statistics.median(ts) * 1e3 if ts else math.nan,
                         "first_ms": first.get(vname, math.nan) * 1e3,
                         "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi, "vs_compile": vs_compile,
                         "error": errors.get(vname, "")})
    return rows


def variants_names() -> list[str]:
    return ["eager", "torch.compile", "jit [torch]", "jit [inductor, torch]"]


def _ci(ratio: float, lo: float, hi: float) -> str:
    return f"{ratio:5.2f} [{lo:4.2f}-{hi:4.2f}]" if math.isfinite(ratio) else f"{'-':>17s}"


def verdict(ratio: float, lo: float, hi: float) -> str:
    """A target "at least as fast": met when the median paired ratio is >= 1; the interval says how sure."""
    if not math.isfinite(ratio):
        return "NOT RUN"
    if lo >= 1.0:
        return "met"
    if hi < 1.0:
        return "NOT MET"
    return "met (within noise)" if ratio >= 1.0 else "NOT MET (within noise)"


def print_table(rows: list[dict]) -> None:
    head = (f"{'case':6s} {'mode':8s} {'variant':22s} {'median ms':>10s} {'x eager [95% CI]':>18s} "
            f"{'x torch.compile':>18s} {'first call ms':>14s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        tail = f"  {r['error']}" if r["error"] else ""
        print(f"{r['case']:6s} {r['mode']:8s} {r['variant']:22s} {r['ms']:10.3f} "
              f"{_ci(r['ratio'], r['ratio_lo'], r['ratio_hi']):>18s} {_ci(*r['vs_compile']):>18s} "
              f"{r['first_ms']:14.1f}{tail}")
    print("x eager: median over rounds of (eager time / variant time), each round timing every variant once in a "
          "shuffled order; [95% CI] of that median. Above 1 is faster than eager.")
    print("\nTargets (issue 6):")
    for r in rows:
        if r["variant"] == "jit [torch]":
            target, ratio = "jit [torch] no slower than eager", (r["ratio"], r["ratio_lo"], r["ratio_hi"])
        elif r["variant"] == "jit [inductor, torch]":
            target, ratio = "jit [inductor, torch] at least as fast as torch.compile", r["vs_compile"]
        else:
            continue
        print(f"  {r['case']:6s} {r['mode']:8s} {target:56s} {_ci(*ratio)}  {verdict(*ratio)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="chain,mlp,block", help="comma-separated: chain, mlp, block")
    parser.add_argument("--repeat", type=int, default=20, help="timed rounds per measurement (medians)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    rows = []
    for case in args.cases.split(","):
        rows += measure(case.strip(), args.repeat)
    print_table(rows)
    return rows


if __name__ == "__main__":
    main()
