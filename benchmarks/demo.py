"""The main job: jit a real model (a nanoGPT-style GPT), print its traces, check it against eager and time it.

    python -m benchmarks.demo            # CPU, a few seconds
"""
from __future__ import annotations

import statistics

import torch

import jitcore
from benchmarks.bench_executors import interleaved_samples, paired_ratio
from benchmarks.models import GPT, GPTConfig
from benchmarks.timing import first_call_time


def banner(text):
    print(f"\n{'=' * 100}\n{text}\n{'=' * 100}")


def main():
    torch.manual_seed(0)
    config = GPTConfig(n_embd=128, n_head=4, block_size=64, vocab_size=256, n_layer=2)
    model = GPT(config).eval()
    idx = torch.randint(0, config.vocab_size, (4, 64))
    targets = torch.randint(0, config.vocab_size, (4, 64))

    jmodel = jitcore.jit(model)
    compile_s = first_call_time(lambda: jmodel(idx, targets))

    banner("Prologue (the guards that decide cache hits)")
    print(jitcore.last_prologue_traces(jmodel)[-1])
    banner("Forward trace, as the interpreter recorded it (torch-level ops; decompositions as comments)")
    print(_head(str(jitcore.last_traces(jmodel)[0]), 60))
    banner("Execution trace (what runs: each line names its executor's kernel)")
    print(_head(str(jitcore.last_traces(jmodel)[-1]), 60))
    if jitcore.last_backward_traces(jmodel):
        banner("Backward trace")
        print(_head(str(jitcore.last_backward_traces(jmodel)[-1]), 40))

    with torch.no_grad():
        ref_logits, ref_loss = model(idx, targets)
    logits, loss = jmodel(idx, targets)
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4)

    banner("Timing (CPU; each round times eager and jit once, in a shuffled order; below 1 means jit is faster)")
    params = list(model.parameters())

    def fwd_bwd(run):
        def call():
            run(idx, targets)[1].backward()
            for p in params:
                p.grad = None
        return call

    def fwd(run):
        def call():
            with torch.no_grad():
                run(idx, targets)
        return call

    print(f"first call (trace + transforms + codegen): {compile_s * 1000:8.1f} ms")
    for name, make in (("forward, no_grad:  ", fwd), ("forward + backward:", fwd_bwd)):
        samples = interleaved_samples({"eager": make(model), "jit": make(jmodel)}, repeat=30)
        print(f"{name} {speed_line(samples['jit'], samples['eager'])}")
    print(f"cache: {jitcore.cache_hits(jmodel)} hits, {jitcore.cache_misses(jmodel)} misses")
    print("\nresults match eager (logits and loss).")


def speed_line(jit: list, eager: list) -> str:
    """One number per mode: the median over rounds of jit time / eager time (each round times both), its 95%
    interval, and which is faster (neither, when the interval holds 1)."""
    ratio, lo, hi = paired_ratio(jit, eager)  # (paired_ratio(base, other): the median of base / other)
    verdict = ("jit is faster" if hi < 1 else "eager is faster" if lo > 1 else
               "no clear difference (the interval holds 1)")
    return (f"jit time / eager time {ratio:.2f} (95% interval {lo:.2f}-{hi:.2f}, {len(jit)} paired rounds): "
            f"{verdict}   [medians: jit {statistics.median(jit) * 1e3:.2f} ms, eager "
            f"{statistics.median(eager) * 1e3:.2f} ms]")


def _head(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))


if __name__ == "__main__":
    main()
