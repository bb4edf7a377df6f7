"""Benchmarks: the grad transform on a GPT-2 style block (and an MLP). How many bytes the saved-for-backward holds,
jit vs eager (both counted with torch.autograd.graph.saved_tensors_hooks: eager's autograd graph saves through
them, and so does the jitted autograd.Function's ctx.save_for_backward), and forward+backward time (medians).

    python -m benchmarks.bench_autodiff                  # block and mlp, torch executor
    python -m benchmarks.bench_autodiff --repeat 50 --batch 16

The row "jit, prims rules only" switches the composite rows (layer_norm, sdpa, gelu, ...) off: every composite is
differentiated through its subsymbols, which is what the composite rows save.
"""
from __future__ import annotations

import argparse
import contextlib

import torch

import jitcore
from benchmarks.models import Block, GPTConfig, mlp
from benchmarks.timing import median_time


def saved_bytes(run, *inputs) -> tuple[int, int, int]:
    """(bytes of every saved tensor, bytes of distinct storages, count) for one forward under grad mode."""
    seen: dict = {}
    total = [0, 0]

    def pack(x):
        total[0] += x.numel() * x.element_size()
        total[1] += 1
        key = (x.untyped_storage().data_ptr(), x.untyped_storage().nbytes())
        seen[key] = key[1]
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = run(*inputs)
    del out
    return total[0], sum(seen.values()), total[1]


def make_case(name: str, batch: int):
    torch.manual_seed(0)
    if name == "block":
        return Block(GPTConfig()), (torch.randn(batch, 64, 128),)
    if name == "mlp":
        return mlp(), (torch.randn(batch * 64, 256),)
    raise ValueError(f"unknown case {name!r}")


@contextlib.contextmanager
def prims_rules_only():
    from transforms.vjp_rules import VJP_RULES

    composite = {k: v for k, v in VJP_RULES.items() if k.startswith("ltorch.")}
    for k in composite:
        del VJP_RULES[k]
    try:
        yield
    finally:
        VJP_RULES.update(composite)


def fwd_bwd(run, inputs, params):
    def step():
        run(*inputs).sum().backward()
        for p in params:
            p.grad = None

    return step


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="*", default=["block", "mlp"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    rows = []
    for case in args.cases:
        model, inputs = make_case(case, args.batch)
        params = list(model.parameters())
        jm, jp = jitcore.jit(model), jitcore.jit(model)
        jm(*inputs)  # compile outside the timings
        with prims_rules_only():
            jp(*inputs)  # compiled without the composite rows; the cached entry keeps that split
        for label, run in (("eager", model), ("jit [torch]", jm), ("jit, prims rules only", jp)):
            all_bytes, distinct, count = saved_bytes(run, *inputs)
            ms = median_time(fwd_bwd(run, inputs, params), repeat=args.repeat) * 1e3
            rows.append((case, label, count, all_bytes / 2**20, distinct / 2**20, ms))
    print(f"{'case':6} {'variant':22} {'saved':>6} {'MiB saved':>10} {'MiB distinct':>13} {'fwd+bwd ms':>11}")
    for case, label, count, mib, dmib, ms in rows:
        print(f"{case:6} {label:22} {count:6d} {mib:10.2f} {dmib:13.2f} {ms:11.2f}")


if __name__ == "__main__":
    main()
