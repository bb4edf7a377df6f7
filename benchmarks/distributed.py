"""Benchmarks: data-parallel training in several processes (gloo on CPU, nccl on GPUs), eager DDP(model) against
DDP(jitcore.jit(model)) on a GPT-2 style model: per process, the median time of a training step (forward, backward
with DDP's gradient all-reduce, optimizer step; the variants' steps alternate) and the peak memory of a step (the
median of a few); the losses of both are checked to agree. Run `python -m benchmarks.distributed` (it starts --nproc
processes itself), or one process per rank under torchrun: `torchrun --nproc-per-node 2 -m benchmarks.distributed`.
"""
from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.models import GPT, GPTConfig


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="processes to start when not run under torchrun (default 2)")
    p.add_argument("--steps", type=int, default=15, help="timed training steps per variant (default 15)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (the jitted model compiles) (default 3)")
    p.add_argument("--peaks", type=int, default=3, help="steps whose peak memory is measured, per variant: the table "
                                                        "gives their median and range (default 3)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--executors", default="torch", help="jitcore executors, comma-separated (default: torch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--fsdp", action="store_true", help="also FSDP2: fully_shard per block and on the root, eager and "
                                                        "jitted (jitcore.jit(model) of the sharded model)")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, argv) -> int:
    """Start args.nproc ranks of this script on a free localhost port (what torchrun would do); their exit status."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(args.nproc), "OMP_NUM_THREADS": str(args.threads)}
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.distributed", *argv],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(args.nproc)]
    codes = [p.wait() for p in procs]
    return max(abs(c) for c in codes)


def step_fn(ddp, opt, batch):
    idx, targets = batch

    def step():
        opt.zero_grad(set_to_none=True)
        logits = ddp(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def peak_step_bytes(call) -> int:
    """Peak bytes of the tensors call() allocates that are alive at once (torch's CPU allocator, from the profiler's
    allocation events, matched by address): what was allocated before the call, and its frees, do not count, so the
    number is the same whatever an earlier profile of the process saw."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.measure import quiet_stderr

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    nodes, allocations = list(prof.profiler.kineto_results.experimental_event_tree()), []
    while nodes:
        n = nodes.pop()
        nodes.extend(n.children)
        if type(n.typed[1]).__name__ == "_ExtraFields_Allocation":
            allocations.append((n.start_time_ns, n.typed[1].ptr, n.typed[1].alloc_size))
    sizes, live, peak = {}, 0, 0
    for _, ptr, size in sorted(allocations):
        if size > 0:
            sizes[ptr] = size
            live += size
        elif ptr in sizes:
            live -= sizes.pop(ptr)
        peak = max(peak, live)
    return peak


def measure(ddps: dict, batch, args) -> dict:
    """Per variant: median step time and peak memory. The variants' steps alternate (eager, jitted, eager, ...), so
    a slow spell of a shared machine falls on both alike."""
    steps = {name: step_fn(ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-3), batch) for name, ddp in ddps.items()}
    losses = {name: [step() for _ in range(args.warmup)] for name, step in steps.items()}
    times: dict = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():
            torch.distributed.barrier()  # the ranks start a step together: a time is not another rank's wait
            start = time.perf_counter()
            losses[name].append(step())
            times[name].append(time.perf_counter() - start)
    peaks: dict = {name: [] for name in steps}
    for _ in range(args.peaks):  # (alternating too: a step's peak depends on when the collectives finish)
        for name, step in steps.items():
            torch.distributed.barrier()
            peaks[name].append(peak_step_bytes(lambda step=step, name=name: losses[name].append(step())) / 2**20)
    return {name: {"median_ms": 1e3 * statistics.median(times[name]), "peak_mib": statistics.median(peaks[name]),
                   "peaks": peaks[name], "times": times[name], "losses": torch.stack(losses[name])} for name in steps}


def worker(args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jitcore

    torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}") if torch.cuda.is_available() else \
        torch.device("cpu")
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_embd=args.width, n_layer=args.layers, block_size=args.seq)).to(device)
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g).to(device)
    batch = (idx, torch.roll(idx, -1, 1))
    executors = args.executors.split(",")
    variants = {"eager DDP(model)": lambda m: DDP(m),
                "DDP(jitcore.jit(model))": lambda m: DDP(jitcore.jit(m, executors=executors))}
    if args.fsdp:
        variants["eager FSDP2(model)"] = lambda m: sharded(m, device)
        variants["jitcore.jit(FSDP2(model))"] = lambda m: jitcore.jit(sharded(m, device), executors=executors)
    args.params = sum(p.numel() for p in model.parameters())
    results = measure({name: make(copy.deepcopy(model)) for name, make in variants.items()}, batch, args)
    everyone = [None] * world
    dist.all_gather_object(everyone, {k: {"median_ms": v["median_ms"], "peak_mib": v["peak_mib"], "peaks": v["peaks"],
                                          "times": v["times"]} for k, v in results.items()})
    losses = [v["losses"] for v in results.values()]
    diff = max((losses[i] - losses[i + 1]).abs().max().item() for i in range(0, len(losses), 2))
    if rank == 0:
        report(everyone, args, world, diff)
    dist.destroy_process_group()


def sharded(model, device):
    """model with fully_shard applied to each block, then to the root, over every rank."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def report(everyone, args, world, loss_diff):
    print(f"\nDDP training step, GPT-2 style ({args.layers} layers, width {args.width}, {args.params / 1e6:.1f}M "
          f"parameters, batch {args.batch}x{args.seq}),"
          f" {world} processes ({'nccl' if torch.cuda.is_available() else 'gloo'}), torch threads {args.threads}, "
          f"jitcore executors [{args.executors}]; median of {args.steps} steps after {args.warmup}\n")
    print(f"| variant | rank | step (ms, median) | peak memory (MiB, median of {args.peaks} steps) | peak range |")
    print("|---|---|---|---|---|")
    for name in everyone[0]:
        for rank, per in enumerate(everyone):
            print(f"| {name} | {rank} | {per[name]['median_ms']:.1f} | {per[name]['peak_mib']:.1f} | "
                  f"{min(per[name]['peaks']):.1f}-{max(per[name]['peaks']):.1f} |")
    names = list(everyone[0])
    medians = {n: statistics.median(per[n]["median_ms"] for per in everyone) for n in names}
    # the ratio of each round's two steps (taken one after the other), median over rounds and ranks: a slow spell of
    # a shared machine falls on one round's pair alike
    paired = {j: statistics.median(tj / te for per in everyone for te, tj in zip(per[e]["times"], per[j]["times"]))
              for e, j in zip(names[::2], names[1::2])}
    pairs = ", ".join(f"{e} {medians[e]:.1f} ms, {j} {medians[j]:.1f} ms ({medians[j] / medians[e]:.3f}x eager's "
                      f"time; median of the rounds' ratios {paired[j]:.3f}x)" for e, j in zip(names[::2], names[1::2]))
    print(f"\nmedian over ranks: {pairs}; largest loss difference (eager vs jitted) over "
          f"{args.warmup + args.steps + args.peaks} steps: {loss_diff:.2e}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if "RANK" not in os.environ:
        sys.exit(launch(args, argv))
    worker(args)


if __name__ == "__main__":
    main()
