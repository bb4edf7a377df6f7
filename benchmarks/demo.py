"""The main job: jit a real model (a nanoGPT-style GPT), show the start of its forward program and its passes, check
it against eager (outputs and gradients) and time it. About 85 lines; `--traces` prints every program in full.

    python -m benchmarks.demo              # CPU, a few seconds
    python -m benchmarks.demo --traces     # the prologue, the forward as recorded and as run, the backward, in full
"""
from __future__ import annotations

import argparse
import statistics

import torch

import jitcore
from benchmarks.bench_executors import interleaved_samples, paired_ratio
from benchmarks.models import GPT, GPTConfig
from benchmarks.timing import first_call_time

FORWARD_HEAD_LINES = 24  # lines of the forward program shown by default (after its parameter list)


def banner(text):
    print(f"\n{'=' * 100}\n{text}\n{'=' * 100}")


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(0)
    config = GPTConfig(n_embd=128, n_head=4, block_size=64, vocab_size=256, n_layer=2)
    model = GPT(config).eval()
    idx = torch.randint(0, config.vocab_size, (4, 64))
    targets = torch.randint(0, config.vocab_size, (4, 64))

    banner("The model")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"GPT (benchmarks/models.py): {config.n_layer} blocks of attention + MLP, {config.n_head} heads, width "
          f"{config.n_embd}, vocabulary {config.vocab_size}; {n_params / 1e6:.2f}M parameters")
    print(f"input: token ids {tuple(idx.shape)} and targets {tuple(targets.shape)}; returns (logits, loss)")
    print("jmodel = jitcore.jit(model); logits, loss = jmodel(idx, targets); loss.backward()")

    jmodel = jitcore.jit(model)
    compile_s = first_call_time(lambda: jmodel(idx, targets)[1].backward())
    model.zero_grad(set_to_none=True)

    if args.traces:
        print_every_program(jmodel)
    else:
        banner("The forward program that runs (each line names its executor's kernel; decompositions as comments)")
        print(_head(str(jitcore.last_traces(jmodel)[-1]), FORWARD_HEAD_LINES))
    print_passes(jmodel, compile_s)

    banner("Check against eager")
    print(check_against_eager(model, jmodel, idx, targets))

    banner(f"Timing (CPU; {args.rounds} rounds, each times eager and jit once in a shuffled order)")
    print_timing(model, jmodel, idx, targets, args.rounds)
    print(f"cache: {jitcore.cache_hits(jmodel)} hits, {jitcore.cache_misses(jmodel)} misses")


def parse_args(argv):
    summary = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=summary)
    p.add_argument("--traces", action="store_true", help="print every program in full (about 1150 lines)")
    p.add_argument("--rounds", type=int, default=30, help="timing rounds (default 30)")
    return p.parse_args(argv)


def print_every_program(jmodel):
    programs = [("Prologue (the guards that decide cache hits)", jitcore.last_prologue_traces(jmodel)[-1]),
                ("Forward, as the interpreter recorded it (torch-level ops)", jitcore.last_traces(jmodel)[0]),
                ("Forward, as it runs (each line names its executor's kernel)", jitcore.last_traces(jmodel)[-1]),
                ("Backward, as it runs", jitcore.last_backward_traces(jmodel)[-1])]
    programs += [("Epilogue (side effects written back)", t) for t in jitcore.last_epilogue_traces(jmodel)]
    for title, trace in programs:
        banner(title)
        print(trace)


def print_passes(jmodel, compile_s):
    banner("The passes (forward, then backward) and the compile's stages")
    for name, traces in (("forward", jitcore.last_traces(jmodel)), ("backward", jitcore.last_backward_traces(jmodel))):
        for trace in traces:
            print(f"{name:9s}{str(trace).splitlines()[0].removeprefix('# Constructed by ')}")
    stats = jitcore.last_compile_stats(jmodel)
    stages = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in stats.items() if isinstance(v, float))
    print(f"stages: {stages}")
    print(f"first call, forward and backward (trace + transforms + codegen + run): {compile_s * 1e3:.0f} ms")


def check_against_eager(model, jmodel, idx, targets) -> str:
    """Logits, loss and every parameter's gradient of the jitted model against eager's (the same parameters)."""
    results = {}
    for name, run in (("eager", model), ("jit", jmodel)):
        model.zero_grad(set_to_none=True)
        logits, loss = run(idx, targets)
        loss.backward()
        results[name] = (logits.detach(), loss.detach(), [p.grad for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    (ref_logits, ref_loss, ref_grads), (logits, loss, grads) = results["eager"], results["jit"]
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4)
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref, atol=1e-4, rtol=1e-4)
    worst = max((g - ref).abs().max().item() for g, ref in zip(grads, ref_grads))
    return (f"results match eager: logits, loss and the gradients of all {len(grads)} parameters (largest gradient "
            f"difference {worst:.1e}; tolerance 1e-4)")


def print_timing(model, jmodel, idx, targets, rounds):
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

    print(f"{'':20s} {'eager ms':>9s} {'jit ms':>8s}   {'jit / eager (95% interval)':28s} verdict")
    for name, make in (("forward, no_grad", fwd), ("forward + backward", fwd_bwd)):
        samples = interleaved_samples({"eager": make(model), "jit": make(jmodel)}, repeat=rounds)
        print(f"{name:20s} {speed_line(samples['jit'], samples['eager'])}")
    print("(below 1: jit is faster; the median over rounds of each round's ratio)")


def speed_line(jit: list, eager: list) -> str:
    """The medians, the median over rounds of jit time / eager time (each round times both), its 95% interval, and
    which is faster (neither, when the interval holds 1)."""
    ratio, lo, hi = paired_ratio(jit, eager)  # (paired_ratio(base, other): the median of base / other)
    verdict = "jit is faster" if hi < 1 else "eager is faster" if lo > 1 else "no clear difference"
    interval = f"{ratio:.2f} ({lo:.2f}-{hi:.2f})"
    return (f"{statistics.median(eager) * 1e3:9.2f} {statistics.median(jit) * 1e3:8.2f}   {interval:28s} "
            f"{verdict}")


def _head(text: str, n: int) -> str:
    """The header, the signature and the first n lines of a program's body (its parameters' comments summarised),
    and where the rest is."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def "))
    params = [line for line in lines[start + 1:] if line.startswith('  # ') and '"' in line]
    body = lines[start + 1 + len(params):]
    shown = lines[:start + 1] + [f"  # ({len(params)} parameters: the inputs, then the model's parameters)"] + body[:n]
    rest = len(body) - n
    if rest > 0:
        shown.append(f"  ... ({rest} more lines: `python -m benchmarks.demo --traces` prints every program in full, "
                     "or print(jitcore.last_traces(jmodel)[-1]))")
    return "\n".join(shown)


if __name__ == "__main__":
    main()
