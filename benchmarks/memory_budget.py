"""Benchmarks: the memory budget. jitcore's jit(memory_budget=b) against torch.compile with
torch._functorch.config.activation_memory_budget=b, b in 0, 0.25, 0.5, 0.75, 1, on the sin/tanh chain (5 steps over
512x512), the MLP, the GPT-2 style block and HF GPT-2 (tiny configs), paired in one run: bytes saved for backward
(autograd's saved-tensor hooks: jitcore.saved_tensor_bytes), peak memory of one step, step time (medians of rounds
that time every variant once, in rotating order), gradients against eager's. Writes results.json, results.md and
memory_budget.png (bytes saved against step time) into the folder given.

    python -m benchmarks.memory_budget out/                  # every workload, 21 rounds
    python -m benchmarks.memory_budget out/ --quick          # tiny sizes, a few rounds: seconds (tests run it)
"""
from __future__ import annotations

import argparse
import json
import time
import types
from pathlib import Path

import torch

import jitcore
from benchmarks.measure import peak_memory_bytes
from benchmarks.memory_suite import paired_medians, sin_tanh_chain, step_of
from benchmarks.models import Block, GPTConfig, mlp
from benchmarks.png_plot import scatter_panels

BUDGETS = (0.0, 0.25, 0.5, 0.75, 1.0)
WORKLOADS = ("sin/tanh chain", "mlp", "gpt2 block", "hf gpt2")
COLORS = {"jitcore": (31, 119, 180), "torch.compile": (255, 127, 14), "eager": (120, 120, 120)}


def _hf_gpt2(quick: bool):
    import transformers

    n, layers, t = (32, 1, 16) if quick else (128, 2, 128)
    config = transformers.GPT2Config(vocab_size=128 if quick else 512, n_embd=n, n_head=4, n_layer=layers,
                                     n_positions=t, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                     eos_token_id=0)
    config._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, config.vocab_size, (2 if quick else 4, t))
    return model, (ids,), {"labels": ids}


def build(name: str, quick: bool):
    """(callable, args, kwargs, tensors whose gradients are compared), the same weights and inputs on every call."""
    torch.manual_seed(0)
    if name == "sin/tanh chain":
        x = torch.randn(*((32, 32) if quick else (512, 512)), requires_grad=True)
        return sin_tanh_chain, (x,), {}, [x]
    if name == "mlp":
        model = mlp(32, 2) if quick else mlp(256, 3)
        x = torch.randn(16 if quick else 512, 32 if quick else 256)
        return model, (x,), {}, list(model.parameters())
    if name == "gpt2 block":
        config = GPTConfig(n_embd=32, n_head=2, block_size=16) if quick else GPTConfig()
        model = Block(config)
        x = torch.randn(*((2, 16, 32) if quick else (8, 64, 128)), requires_grad=True)
        return model, (x,), {}, [x, *model.parameters()]
    if name == "hf gpt2":
        model, args, kwargs = _hf_gpt2(quick)
        return model, args, kwargs, list(model.parameters())
    raise ValueError(name)


def own_frame(fn, tag: str):
    """A function calling fn, with a code object of its own: torch.compile (dynamo) caches what it compiled on the
    code object of the frame it starts from, and its guards do not read the functorch config, so each budget needs a
    frame of its own to be compiled under it."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    code = call.__code__.replace(co_name=f"call_{tag}")
    return types.FunctionType(code, call.__globals__, f"call_{tag}", None, call.__closure__)


def variants(quick: bool) -> list[tuple[str, float | None]]:
    vs = [("eager", None)] + [("jitcore", b) for b in BUDGETS]
    return vs + [("torch.compile", b) for b in ((0.0, 1.0) if quick else BUDGETS)]


def prepare(system: str, budget, name: str, quick: bool):
    """(step, run, args, kwargs, tensors) of one variant, on its own copy of the workload; compiled and warmed."""
    fn, args, kwargs, tensors = build(name, quick)
    if system == "jitcore":
        run = jitcore.jit(fn, memory_budget=budget)
    elif system == "torch.compile":
        run = torch.compile(own_frame(fn, f"b{int(budget * 100)}"))
    else:
        run = fn
    step = step_of(run, args, kwargs, tensors)
    if system == "torch.compile":  # the partition (what is saved) is chosen when the first call compiles
        with torch._functorch.config.patch(activation_memory_budget=budget):
            step()
    step()
    return step, run, args, kwargs


def measure(name: str, quick: bool, rounds: int, clock=time.perf_counter) -> list[dict]:
    fn, args, kwargs, tensors = build(name, quick)
    reference = step_of(fn, args, kwargs, tensors)()
    rows, steps = [], {}
    for system, budget in variants(quick):
        label = system if budget is None else f"{system} b={budget:g}"
        step, run, a, k = prepare(system, budget, name, quick)
        grads = step()
        row = {"workload": name, "system": system, "budget": budget, "variant": label,
               "saved_bytes": jitcore.saved_tensor_bytes(lambda run=run, a=a, k=k: run(*a, **k)).nbytes,
               "peak_bytes": peak_memory_bytes(step),
               "grads_bitwise": all(torch.equal(g, r) for g, r in zip(grads, reference)),
               "grads_max_rel": max(((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
                                    for g, r in zip(grads, reference))}
        if system == "jitcore":
            row["planned_bytes"] = jitcore.saved_tensor_bytes(run).nbytes
        rows.append(row)
        steps[label] = step
    times = paired_medians(steps, rounds, clock)
    for r in rows:
        r["step_ms"] = times[r["variant"]]
    return rows


def targets(rows: list[dict]) -> list[dict]:
    """Per workload: jitcore's bytes at b=0 against torch.compile's at activation_memory_budget=0 and at its default
    (1)."""
    out = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        by = {(r["system"], r["budget"]): r["saved_bytes"] for r in rows if r["workload"] == name}
        ours, tc0, tc1 = by.get(("jitcore", 0.0)), by.get(("torch.compile", 0.0)), by.get(("torch.compile", 1.0))
        out.append({"workload": name, "jitcore_b0": ours, "torch_compile_b0": tc0, "torch_compile_default": tc1,
                    "met": None not in (ours, tc0, tc1) and ours <= tc0 and ours <= tc1})
    return out


def _mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.3f}"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Memory budget: jitcore vs torch.compile ({meta['mode']}, {meta['rounds']} rounds, torch "
             f"{meta['torch']}, {meta['threads']} threads)", "",
             "| workload | variant | saved MiB | peak MiB | step ms (median) | grads vs eager |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        grads = "bitwise" if r["grads_bitwise"] else f"max rel {r['grads_max_rel']:.1e}"
        lines.append(f"| {r['workload']} | {r['variant']} | {_mib(r['saved_bytes'])} | {_mib(r['peak_bytes'])} | "
                     f"{r['step_ms']:.3f} | {grads} |")
    lines += ["", "Target: jitcore's bytes saved at b=0 at or below torch.compile's at activation_memory_budget=0 and "
              "at its default (1.0).", "", "| workload | jitcore b=0 MiB | torch.compile b=0 MiB | "
              "torch.compile default MiB | met |", "|---|---:|---:|---:|---|"]
    for t in targets(rows):
        lines.append(f"| {t['workload']} | {_mib(t['jitcore_b0'])} | {_mib(t['torch_compile_b0'])} | "
                     f"{_mib(t['torch_compile_default'])} | {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path):
    panels = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        series = []
        for system in ("jitcore", "torch.compile", "eager"):
            pts = sorted(((r["step_ms"], r["saved_bytes"] / 2**20, "" if r["budget"] is None else f"{r['budget']:g}")
                          for r in rows if r["workload"] == name and r["system"] == system), key=lambda p: p[2])
            if pts:
                series.append({"name": system, "color": COLORS[system], "points": pts})
        panels.append({"title": name, "xlabel": "step ms", "ylabel": "saved MiB", "series": series})
    scatter_panels(path, panels)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the folder for results.json, results.md and memory_budget.png")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 3 rounds, torch.compile at b=0 and 1 only")
    ap.add_argument("--workloads", nargs="*", choices=WORKLOADS)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    workloads = args.workloads or (WORKLOADS[:2] if args.quick else WORKLOADS)
    rounds = args.rounds or (3 if args.quick else 21)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in workloads:
        start = time.perf_counter()
        rows += measure(name, args.quick, rounds)
        print(f"{name}: measured in {time.perf_counter() - start:.0f} s", flush=True)
    meta = {"mode": "quick" if args.quick else "full", "rounds": rounds, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "workloads": list(workloads), "budgets": list(BUDGETS)}
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "targets": targets(rows)},
                                                      indent=1))
    (args.out / "results.md").write_text(markdown(rows, meta))
    plot(rows, args.out / "memory_budget.png")
    print(markdown(rows, meta))
    return rows


if __name__ == "__main__":
    main()
