"""Benchmarks: training-step speed of convolutional networks, eager against jitcore with the default [torch] executor.

`python -m benchmarks.convnets [model ...] [--rounds N] [--profile]` builds each port of benchmarks/convnet_models.py
twice from one seed, checks a few SGD steps of the jitted copy against eager (losses, gradients, BatchNorm running
stats), then times paired rounds in one process (torch.set_num_threads(1), batch 8, 3x64x64): each round times a few
eager steps and a few jitted steps (alternating which goes first) and the speedup is the median of eager/jitcore.
A step is zero_grad, forward, cross-entropy, backward and SGD step. `--profile` prints self CPU time per aten op.
`--cpu-time` times with the process's CPU time instead of the wall clock: on a shared, loaded machine the wall clock
counts the time the process waits for a core, which swamps differences of a few percent.
"""
from __future__ import annotations

import argparse
import copy
import functools
import statistics
import time

import torch
import torch.nn.functional as F

import jitcore
from benchmarks.convnet_models import CONVNETS
from benchmarks.timing import paired_ratio, paired_samples

BATCH, IMAGE = 8, (3, 64, 64)
IMAGE_OF = {"plain5": (3, 32, 32)}  # the plain network: batch 8, 32x32


def make_pair(name, seed=0):
    torch.manual_seed(seed)
    model = CONVNETS[name]()
    twin = copy.deepcopy(model)
    return model, twin


def make_step(model, call):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(call(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def batch(seed=1, name=None):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, *IMAGE_OF.get(name, IMAGE), generator=g), torch.randint(0, 1000, (BATCH,), generator=g)


def check(name, steps=3):
    """Max differences of jitcore against eager over `steps` SGD steps: losses, gradients, parameters, buffers."""
    model, twin = make_pair(name)
    model.train()
    twin.train()
    eager, jitted = make_step(model, model), make_step(twin, jitcore.jit(twin))
    worst = {"loss": 0.0, "grad": 0.0, "param": 0.0, "buffer": 0.0}
    for i in range(steps):
        x, y = batch(i, name)
        torch.manual_seed(100 + i)
        le = eager(x, y)
        torch.manual_seed(100 + i)
        lj = jitted(x, y)
        worst["loss"] = max(worst["loss"], abs(le.item() - lj.item()))
        for p, q in zip(model.parameters(), twin.parameters()):
            worst["grad"] = max(worst["grad"], (p.grad - q.grad).abs().max().item())
            worst["param"] = max(worst["param"], (p - q).abs().max().item())
        for a, b in zip(model.buffers(), twin.buffers()):
            worst["buffer"] = max(worst["buffer"], (a.float() - b.float()).abs().max().item())
    return worst


def speedup(name, rounds=7, per_round=3, clock=time.perf_counter):
    """Median over paired rounds of eager step time / jitcore step time, and the two medians in ms."""
    model, twin = make_pair(name)
    steps = {"eager": make_step(model, model), "jitcore": make_step(twin, jitcore.jit(twin))}
    x, y = batch(name=name)
    for _ in range(3):
        for step in steps.values():
            step(x, y)
    samples = paired_samples({k: functools.partial(step, x, y) for k, step in steps.items()}, rounds,
                             inner=per_round, clock=clock)
    return (paired_ratio(samples, "eager", "jitcore"), statistics.median(samples["eager"]) * 1e3,
            statistics.median(samples["jitcore"]) * 1e3)


def profile(name, steps=3, top=25):
    """Self CPU time per op (ms per step) for eager and jitcore, side by side."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    model, twin = make_pair(name)
    x, y = batch(name=name)
    tables = {}
    for label, m, call in (("eager", model, model), ("jitcore", twin, jitcore.jit(twin))):
        step = make_step(m, call)
        for _ in range(3):
            step(x, y)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step(x, y)
        tables[label] = {e.key: (e.self_cpu_time_total / 1e3 / steps, e.count // steps) for e in prof.key_averages()}
    keys = sorted(set(tables["eager"]) | set(tables["jitcore"]),
                  key=lambda k: -max(tables["eager"].get(k, (0, 0))[0], tables["jitcore"].get(k, (0, 0))[0]))
    print(f"{name}: self CPU ms per step (calls)")
    print(f"{'op':<48} {'eager':>14} {'jitcore':>14}")
    for k in keys[:top]:
        e, j = tables["eager"].get(k, (0.0, 0)), tables["jitcore"].get(k, (0.0, 0))
        print(f"{k[:48]:<48} {e[0]:>9.2f} ({e[1]:>3}) {j[0]:>9.2f} ({j[1]:>3})")
    for label, t in tables.items():
        print(f"  total {label}: {sum(v[0] for v in t.values()):.2f} ms")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(CONVNETS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--cpu-time", action="store_true", help="time with process CPU time, not the wall clock")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.models:
        if args.profile:
            profile(name)
            continue
        diffs = "" if args.no_check else "  max diff " + " ".join(f"{k} {v:.1e}" for k, v in check(name).items())
        ratio, te, tj = speedup(name, args.rounds, clock=time.process_time if args.cpu_time else time.perf_counter)
        print(f"{name:<20} eager {te:8.1f} ms  jitcore [torch] {tj:8.1f} ms  speedup {ratio:5.3f}x{diffs}", flush=True)


if __name__ == "__main__":
    main()
