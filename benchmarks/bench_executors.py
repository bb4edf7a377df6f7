"""Benchmarks: executors side by side on CPU. Eager vs torch.compile vs jit with [torch] vs jit with
[inductor, torch], forward (no_grad) and forward+backward, on a 10-op elementwise chain, an MLP and a GPT-2
style block. Prints medians (ms; variants sampled round-robin, so load changes hit all alike), ratios to eager and
first-call (compile) times.

    python -m benchmarks.bench_executors                 # everything (a few minutes: inductor compiles)
    python -m benchmarks.bench_executors --cases chain --repeat 50
"""
from __future__ import annotations

import argparse
import math
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


def interleaved_medians(calls: dict, repeat: int, warmup: int = 3) -> dict:
    """Median seconds per call of each callable, sampled round-robin so that load changes hit all alike."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    samples: dict = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in samples.items()}


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
        medians = interleaved_medians(calls, repeat)
        eager = medians.get("eager", math.nan)
        for vname in variants_names():
            med = medians.get(vname, math.nan)
            rows.append({"case": case, "mode": mode, "variant": vname, "ms": med * 1e3,
                         "first_ms": first.get(vname, math.nan) * 1e3,
                         "ratio": eager / med if math.isfinite(med) and med > 0 else math.nan,
                         "error": errors.get(vname, "")})
    return rows


def variants_names() -> list[str]:
    return ["eager", "torch.compile", "jit [torch]", "jit [inductor, torch]"]


def print_table(rows: list[dict]) -> None:
    head = f"{'case':6s} {'mode':8s} {'variant':22s} {'median ms':>10s} {'x eager':>8s} {'first call ms':>14s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        tail = f"  {r['error']}" if r["error"] else ""
        print(f"{r['case']:6s} {r['mode']:8s} {r['variant']:22s} {r['ms']:10.3f} {r['ratio']:8.2f} "
              f"{r['first_ms']:14.1f}{tail}")
    print("x eager: eager median / variant median (above 1 is faster than eager)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="chain,mlp,block", help="comma-separated: chain, mlp, block")
    parser.add_argument("--repeat", type=int, default=20, help="timed samples per measurement (median)")
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
