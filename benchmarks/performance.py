"""Benchmarks: the performance report, one run of four parts side by side (eager, torch.compile, jitcore [torch],
jitcore [inductor, torch], and lightning-thunder when it is installed), each row with its target and a verdict.

    python -m benchmarks.performance                  # the full report (tens of minutes: compilers compile)
    python -m benchmarks.performance --quick          # a few minutes: fewer models, rounds and cold processes
    python -m benchmarks.performance --parts overhead,training --variants eager,"jitcore [torch]"

Parts (each reuses the measurements of the module named):
- convnets: a training step (zero_grad, forward, cross-entropy, backward, SGD) of the conv-net ports
  (benchmarks/convnets.py; batch 8, one thread); target: jitcore [torch] at least as fast as eager.
- first call: the GPT-2 style block's first call, each variant in a fresh process with empty Inductor and jitcore
  caches on disk (benchmarks/first_call.py), forward and forward+backward; target: jitcore [inductor, torch] at
  most half of torch.compile's.
- training: forward+backward of the block and of the HuggingFace GPT-2 and Llama workloads (benchmarks/suites.py,
  benchmarks/measure.py's Steps); target: jitcore [inductor, torch] at least as fast as torch.compile and as
  jitcore [torch].
- overhead: the cached call of a 2x2 add (benchmarks/bench_cache.py), forward without grad and forward+backward,
  microseconds per call over eager's, with a bare torch.autograd.Function as the floor of the second; targets:
  jitcore at most +2 us (forward) and +10 us (forward+backward) over eager (issue 39).
Steady times are medians over paired rounds (every round times each variant once, the order rotating; a ratio is
the median of the rounds' ratios), with torch.set_num_threads(1). Every variant's answer is checked against eager's
before it is timed. Writes performance.md and performance.json into the results folder (--out) and the markdown to
stdout; benchmarks/perf_report.py renders it.
"""
from __future__ import annotations

import argparse
import copy
import functools
import os
import re
import resource
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

from benchmarks import bench_cache, convnets, first_call, perf_report, thunder_adapter
from benchmarks.convnet_models import CONVNETS
from benchmarks.measure import VARIANTS, Steps, TimeLimit, Unavailable, make_variant, time_limit
from benchmarks.suites import core_workloads, hf_workloads
from benchmarks.timing import paired_ratio, paired_samples

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("convnets", "first call", "training", "overhead")
COMPILE = "torch.compile"
JIT_TORCH, JIT_INDUCTOR = "jitcore [torch]", "jitcore [inductor, torch]"
TRAINING = ("gpt2 block", "gpt2", "llama")  # the block of suites.core_workloads, the HuggingFace ones


def row(part, workload, mode, variant, **fields) -> dict:
    return {"part": part, "workload": workload, "mode": mode, "variant": variant, "status": "pass", "value": None,
            "unit": "", "x_eager": None, "x_compile": None, "x_torch": None, "note": "", **fields}


def failed(part, workload, mode, variant, e: BaseException) -> dict:
    status = "n/a" if isinstance(e, Unavailable) else "fail"
    return row(part, workload, mode, variant, status=status, note=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
               if status == "fail" else str(e)[:160])


def timed_rows(part, workload, mode, samples: dict, unit="ms", scale=1e3) -> list[dict]:
    """Rows of paired samples (variant -> seconds per call): the median time and the medians of the rounds' ratios
    eager / variant and torch.compile / variant (above 1: faster)."""
    out = []
    for v, s in samples.items():
        out.append(row(part, workload, mode, v, value=statistics.median(s) * scale, unit=unit,
                       x_eager=paired_ratio(samples, "eager", v) if "eager" in samples else None,
                       x_compile=paired_ratio(samples, COMPILE, v) if COMPILE in samples else None,
                       x_torch=paired_ratio(samples, JIT_TORCH, v) if JIT_TORCH in samples else None))
    return out


def dynamo_state() -> tuple[int, int]:
    """(graphs torch.compile has compiled in this process, times it hit its recompile limit): read before and after
    a torch.compile variant, a row says when the variant recompiled and ran past the limit (then eagerly)."""
    from jitcore.compat import dynamo_counters  # (lazy: as jitcore, imported where it is measured)

    counters = dynamo_counters()
    hits = sum(n for k, n in counters["unimplemented"].items() if "recompile limit" in k.lower())
    return int(counters["stats"]["unique_graphs"]), hits


def note_recompiles(rows: list[dict], before: tuple[int, int]):
    graphs, hits = (a - b for a, b in zip(dynamo_state(), before))
    for r in rows:
        if r["variant"] == COMPILE and (graphs > 1 or hits):
            r["note"] = "; ".join(filter(None, [r["note"], f"{graphs} graphs compiled"
                                                + (", recompile limit hit: runs eagerly past it" if hits else "")]))


class PageFaults:
    """Minor page faults per call of each variant. A step whose memory glibc gave back to the system since the last
    step touches fresh pages (about 1 us each); which variant pays depends on the process's history of large frees,
    not on its code, and can move a ratio by several percent: the rows say how many each variant took."""

    def __init__(self):
        self.faults, self.calls = {}, {}

    def counted(self, name, call):
        def counting():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            call()
            self.faults[name] = self.faults.get(name, 0) + resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            self.calls[name] = self.calls.get(name, 0) + 1

        return counting

    def note(self, name) -> str:
        return f"{self.faults[name] / self.calls[name]:.0f} page faults per step" if self.calls.get(name) else ""


def has_dropout(model) -> bool:
    return any(isinstance(m, torch.nn.Dropout) for m in model.modules())


def part_convnets(models, variants, rounds, per_round, limit, clock, log) -> list[dict]:
    """Training steps of the conv nets: one copy of the model per variant (the same initial weights), the first
    step's loss checked against eager's (same batch, same seed), then paired rounds of `per_round` steps each."""
    out = []
    for name in models:
        faults = PageFaults()
        base, _ = convnets.make_pair(name)
        base.train()
        x, y = convnets.batch(name=name)
        calls, reference, dynamo = {}, None, dynamo_state()
        for v in variants:
            start = time.perf_counter()
            try:
                model = copy.deepcopy(base)
                step = convnets.make_step(model, make_variant(v, model))
                with time_limit(limit):
                    torch.manual_seed(7)
                    loss = step(x, y).item()
                    for _ in range(2):
                        step(x, y)
                reference = loss if v == "eager" else reference
                checked = v.startswith("jitcore") or not has_dropout(base)  # (other RNGs draw other masks)
                if checked and abs(loss - reference) > 1e-3 * max(1.0, abs(reference)):
                    raise AssertionError(f"first step's loss {loss:.6f}, eager's {reference:.6f}")
            except (Exception, TimeLimit) as e:
                out.append(failed("convnets", name, "training step", v, e))
                continue
            finally:
                log(f"convnets {name} {v}: set up in {time.perf_counter() - start:.1f} s")
            calls[v] = faults.counted(v, functools.partial(step, x, y))
        samples = paired_samples(calls, rounds, inner=per_round, clock=clock)
        rows = timed_rows("convnets", name, "training step", samples)
        for r in rows:
            if r["variant"] != "eager" and not r["variant"].startswith("jitcore") and has_dropout(base):
                r["note"] = "loss not compared (dropout draws another mask)"
            r["note"] = "; ".join(filter(None, [r["note"], faults.note(r["variant"])]))
        note_recompiles(rows, dynamo)
        out += rows
        log(perf_report.progress(rows))
    return out


def part_first_call(variants, reps, log) -> list[dict]:
    """Cold first calls of the block (benchmarks/first_call.py), each in a fresh process with empty caches, the
    variants alternating within each repetition; rows: median seconds and variant / torch.compile (below 1:
    faster)."""
    out = []
    for train in (False, True):
        mode = "forward+backward" if train else "forward"
        times, errors = {v: [] for v in variants}, {}
        for _ in range(reps):
            for v in variants:
                if v in errors:
                    continue
                try:
                    times[v].append(first_call.cold(v, train))
                except Exception as e:
                    errors[v] = e
        for v in variants:
            if v in errors:
                out.append(failed("first call", "gpt2 block 8x64x128", mode, v, errors[v]))
                continue
            med = statistics.median(times[v])
            c = statistics.median(times[COMPILE]) if times.get(COMPILE) else None
            e = statistics.median(times["eager"]) if times.get("eager") else None
            out.append(row("first call", "gpt2 block 8x64x128", mode, v, value=med, unit="s",
                           x_compile=med / c if c else None, x_eager=med / e if e else None,
                           note=f"{len(times[v])} fresh processes: " + ", ".join(f"{t:.2f}" for t in times[v])))
        log(perf_report.progress(out[-len(variants):]))
    return out


def part_training(quick, names, variants, rounds, limit, clock, log) -> list[dict]:
    """Forward+backward of the block and the HuggingFace models (benchmarks/suites.py), gradients checked
    against eager's (measure.Steps), then paired rounds."""
    hf, missing = hf_workloads(quick=False)
    work = [w for w in core_workloads(quick) + hf if w.name in names]
    out = [row("training", n, "forward+backward", "-", status="n/a", note=missing or "")
           for n in names if missing and n not in {w.name for w in work}]
    for w in work:
        steps, calls, dynamo = Steps(w), {}, dynamo_state()
        for v in variants:
            try:
                run = make_variant(v, steps.fn)
                with time_limit(limit):
                    steps.check(steps.grads_of(run), steps.expected_grads, "gradients")
                calls[v] = steps.forward_backward(run)
                calls[v]()
            except (Exception, TimeLimit) as e:
                out.append(failed("training", w.name, "forward+backward", v, e))
        rows = timed_rows("training", w.name, "forward+backward", paired_samples(calls, rounds, clock=clock))
        note_recompiles(rows, dynamo)
        out += rows
        log(perf_report.progress(rows))
    return out


def part_overhead(variants, rounds, number, log) -> list[dict]:
    """The 2x2 add's cached call, forward without grad (bench_cache.add_forward_cases) and forward+backward
    (bench_cache.add_backward_cases): us per call and us over eager."""
    compilers, out = {}, []
    for v in variants:
        if v == "eager":
            continue
        try:
            make_variant(v, lambda a, b: a + b)  # (raises Unavailable where the variant cannot run here)
            compilers[v] = functools.partial(make_variant, v)
        except Unavailable as e:
            out += [failed("overhead", "add 2x2", mode, v, e) for mode in ("forward", "forward+backward")]
    modes = (("forward", bench_cache.add_forward_cases), ("forward+backward", bench_cache.add_backward_cases))
    for mode, cases in modes:
        times = bench_cache.overhead_over_eager(cases(compilers), rounds, number)
        for v, (us, over) in times.items():
            note = "the floor: a bare torch.autograd.Function, no compiler" if v == "autograd.Function" else ""
            out.append(row("overhead", "add 2x2", mode, v, value=us, unit="us", over_eager_us=over, note=note))
    log(perf_report.progress(out))
    return out


def settings(quick: bool) -> dict:
    if quick:
        return {"models": ["plain5"], "rounds": 5, "per_round": 2, "reps": 1, "training": ["gpt2 block"],
                "overhead_rounds": 9, "overhead_number": 300}
    return {"models": list(CONVNETS), "rounds": 9, "per_round": 3, "reps": 3, "training": list(TRAINING),
            "overhead_rounds": 21, "overhead_number": 1000}


def parse_variants(text: str) -> list[str]:
    # (a comma inside brackets belongs to the name: "jitcore [inductor, torch]")
    names = [v.strip() for v in re.split(r",(?![^\[]*\])", text)] if text else list(VARIANTS)
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    return ["eager"] + [v for v in names if v != "eager"]  # (eager first: every ratio is relative to it)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer models, rounds and cold processes: a few minutes")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="results folder")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from: {', '.join(PARTS)}")
    p.add_argument("--variants", default="", help=f"comma-separated, from: {', '.join(VARIANTS)} (default: all)")
    p.add_argument("--models", default="", help=f"conv nets, comma-separated, from: {', '.join(CONVNETS)}")
    p.add_argument("--training", default="", help=f"training workloads, comma-separated, from: {', '.join(TRAINING)}")
    p.add_argument("--rounds", type=int, default=0, help="paired rounds of the steady-time parts")
    p.add_argument("--reps", type=int, default=0, help="fresh processes per variant and mode of the first call")
    p.add_argument("--limit", type=float, default=900.0, help="seconds one variant's set-up and first steps may take")
    p.add_argument("--cpu-time", action="store_true", help="time steps by the process's CPU time, not the wall clock")
    a = p.parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    if set(parts) - set(PARTS):
        raise SystemExit(f"unknown parts {sorted(set(parts) - set(PARTS))}; choose from {', '.join(PARTS)}")
    cfg = settings(a.quick)
    variants = parse_variants(a.variants)
    models = a.models.split(",") if a.models else cfg["models"]
    rounds = a.rounds or cfg["rounds"]
    clock = time.process_time if a.cpu_time else time.perf_counter
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", module="thunder")
    meta = perf_report.metadata(" ".join(["python -m benchmarks.performance", *map(shlex.quote, argv)]),
                                "process CPU time" if a.cpu_time else "wall clock")
    thunder = thunder_adapter.version()
    if "thunder" in variants and not thunder:
        variants.remove("thunder")
        meta["skipped"] = "thunder: not installed (benchmarks/thunder_adapter.py finds no lightning-thunder)"
    start = time.perf_counter()

    def log(text):
        print(text, file=sys.stderr, flush=True)

    rows = []
    if "convnets" in parts:
        rows += part_convnets(models, variants, rounds, cfg["per_round"], a.limit, clock, log)
    if "first call" in parts:
        rows += part_first_call(variants, a.reps or cfg["reps"], log)
    if "training" in parts:
        names = a.training.split(",") if a.training else cfg["training"]
        rows += part_training(a.quick, names, variants, a.rounds or (5 if a.quick else 15), a.limit, clock, log)
    if "overhead" in parts:
        rows += part_overhead(variants, a.rounds or cfg["overhead_rounds"], cfg["overhead_number"], log)
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = perf_report.markdown(rows, meta)
    print(text, end="")
    for path in perf_report.write(rows, meta, text, Path(a.out)):
        log(f"wrote {path}")
    return rows, meta


if __name__ == "__main__":
    main()
