"""Benchmarks: training memory. For each workload (a sin/tanh chain, the elementwise chain, the MLP, the GPT-2 style
block, a HuggingFace GPT-2 training step), side by side in one process: bytes saved for backward (as autograd saves
them: jitcore.saved_tensor_bytes), peak memory of one forward+backward step (torch.profiler's memory events), step
time (paired medians: every round times each variant once, in rotating order) and the gradients against eager's, for
eager, torch.compile, and jitcore [torch] / [inductor, torch] with and without rematerialization, and with the saved
tensors packed (jit(saved_tensor_hooks=jitcore.hooks.float8 / .bf16): the bytes are of the packed tensors).

    python -m benchmarks.memory_suite                       # every workload
    python -m benchmarks.memory_suite --workloads chain block --rounds 30
    python -m benchmarks.memory_suite --cpu-time    # one thread, timed by its CPU time: steady on a shared machine
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import jitcore
import jitcore.hooks
from benchmarks.measure import Unavailable, inductor_executor, peak_memory_bytes
from benchmarks.models import Block, GPTConfig, elementwise_chain, mlp
from benchmarks.timing import paired_samples

VARIANTS = ("eager", "torch.compile", "jit [torch] no remat", "jit [torch]", "jit [inductor,torch] no remat",
            "jit [inductor,torch]", "jit [torch] bf16", "jit [torch] float8", "jit [inductor,torch] float8")
HOOKS = {"bf16": jitcore.hooks.bf16, "float8": jitcore.hooks.float8}


def sin_tanh_chain(x):
    for _ in range(5):
        x = torch.tanh(torch.sin(x))
    return x


def _hf_gpt2():
    import transformers

    config = transformers.GPT2Config(vocab_size=512, n_embd=128, n_head=4, n_layer=2, n_positions=128,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 512, (4, 128))
    return model, (ids,), {"labels": ids}


def workload(name: str):
    """(callable, args, kwargs, tensors whose gradients are compared)."""
    torch.manual_seed(0)
    if name == "sin/tanh chain":
        x = torch.randn(512, 512, requires_grad=True)
        return sin_tanh_chain, (x,), {}, [x]
    if name == "elementwise chain":
        x = torch.randn(512, 512, requires_grad=True)
        return elementwise_chain, (x,), {}, [x]
    if name == "mlp":
        model = mlp(256, 3)
        return model, (torch.randn(512, 256),), {}, list(model.parameters())
    if name == "gpt2 block":
        model = Block(GPTConfig())
        x = torch.randn(8, 64, 128, requires_grad=True)
        return model, (x,), {}, [x, *model.parameters()]
    if name == "hf gpt2":
        model, args, kwargs = _hf_gpt2()
        return model, args, kwargs, list(model.parameters())
    raise ValueError(name)


WORKLOADS = {"chain": "sin/tanh chain", "elementwise": "elementwise chain", "mlp": "mlp", "block": "gpt2 block",
             "hf": "hf gpt2"}


def make(variant: str, fn):
    if variant == "eager":
        return fn
    if variant == "torch.compile":
        torch.compiler.reset()
        return torch.compile(fn)
    remat = not variant.endswith("no remat")
    if " remat " in variant:  # "jit [inductor,torch] remat 1.0": the step-time budget rematerialization may spend
        remat = float(variant.rsplit(" ", 1)[-1])
    executors = [inductor_executor()] if "inductor" in variant else None
    hooks = HOOKS.get(variant.rsplit(" ", 1)[-1])
    return jitcore.jit(fn, executors=executors, rematerialize=remat, saved_tensor_hooks=hooks)


def _loss(out):
    if hasattr(out, "loss"):
        return out.loss
    return out.sum()


def step_of(run, args, kwargs, tensors):
    def step():
        _loss(run(*args, **kwargs)).backward()
        grads = [t.grad for t in tensors]
        for t in tensors:
            t.grad = None
        return grads

    return step


def measure_workload(name: str, rounds: int, variants=VARIANTS, clock=time.perf_counter) -> list[dict]:
    fn, args, kwargs, tensors = workload(name)
    rows, steps = [], {}
    reference = step_of(fn, args, kwargs, tensors)()
    for v in variants:
        try:
            run = make(v, fn)
            step = step_of(run, args, kwargs, tensors)
            grads = step()
            step()
        except Unavailable as e:
            rows.append({"workload": name, "variant": v, "error": str(e)})
            continue
        saved = jitcore.saved_tensor_bytes(lambda run=run: run(*args, **kwargs))
        peak = peak_memory_bytes(step)
        steps[v] = step
        exact = all(torch.equal(a, b) for a, b in zip(grads, reference))
        rel = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(grads, reference))
        rows.append({"workload": name, "variant": v, "saved_mib": saved.nbytes / 2**20,
                     "saved_distinct_mib": saved.distinct_nbytes / 2**20, "saved_count": saved.count,
                     "peak_mib": peak / 2**20, "grads_bitwise": exact, "grads_max_rel": rel})
    times = paired_medians(steps, rounds, clock)
    for r in rows:
        r["step_ms"] = times.get(r["variant"])
    return rows


def paired_medians(steps: dict, rounds: int, clock=time.perf_counter) -> dict:
    """Median ms per step of each variant, timed in rounds (each variant once per round, the order rotating), so a
    slow moment of the machine lands on every variant alike."""
    samples = paired_samples(steps, rounds, clock=clock)
    return {n: statistics.median(s) * 1e3 for n, s in samples.items() if s}


def report(rows: list[dict]) -> str:
    lines = [f"{'workload':18} {'variant':30} {'saved MiB':>9} {'x eager':>7} {'peak MiB':>9} {'x eager':>7} "
             f"{'step ms':>9} {'x eager':>7}  grads"]
    eager = {r["workload"]: r for r in rows if r["variant"] == "eager"}
    for r in rows:
        if "error" in r:
            lines.append(f"{r['workload']:18} {r['variant']:30} n/a: {r['error']}")
            continue
        e = eager[r["workload"]]
        grads = "bitwise" if r["grads_bitwise"] else f"rel {r['grads_max_rel']:.1e}"
        cells = " ".join(f"{r[k]:9.2f} {r[k] / e[k]:7.2f}" for k in ("saved_mib", "peak_mib", "step_ms"))
        lines.append(f"{r['workload']:18} {r['variant']:30} {cells}  {grads}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--cpu-time", action="store_true", help="one torch thread; time steps by the thread's CPU time")
    args = ap.parse_args(argv)
    clock = time.perf_counter
    if args.cpu_time:
        torch.set_num_threads(1)
        clock = time.thread_time
    rows = []
    for w in args.workloads:
        rows += measure_workload(WORKLOADS[w], args.rounds, args.variants, clock)
        print(report([r for r in rows if r["workload"] == WORKLOADS[w]]), flush=True)
    print()
    print(report(rows))


if __name__ == "__main__":
    main()
