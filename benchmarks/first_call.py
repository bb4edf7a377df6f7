"""Benchmarks: the cold first call of the GPT-2 style block (8x64x128) with jitcore [inductor, torch] against
torch.compile, forward and forward+backward. Each measurement is a fresh process with an empty Inductor cache and an
empty jitcore cache (no compiler cache on disk does the work, Inductor's precompiled headers included: they are
built in the measured process) and one thread; the time runs from before `jit()` /
`torch.compile()` (which import the compiler) to the end of the first call (its backward included). Reported:
the median over the repetitions and the ratio jitcore / torch.compile.

`--warm` measures instead the first call of a fresh process whose caches on disk are warm: a first process fills
an empty cache folder, a second one (timed) uses it (jitcore's compiled-region cache, JITCORE_REGION_CACHE, and
Inductor's own caches; torch.compile has only the latter).

    python -m benchmarks.first_call --reps 3
    python -m benchmarks.first_call --reps 3 --warm
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
MARK = "FIRST_CALL_SECONDS "
JIT = "jitcore [inductor, torch]"


def child(variant: str, train: bool):
    torch.set_num_threads(1)
    from benchmarks.models import Block, GPTConfig

    torch.manual_seed(0)
    model = Block(GPTConfig(n_embd=128, n_head=4, block_size=64, vocab_size=512, n_layer=1))
    x = torch.randn(8, 64, 128)
    start = time.perf_counter()
    from benchmarks.measure import make_variant  # (imports jitcore: part of what a first call costs)

    f = make_variant(variant, model)
    if train:
        f(x).sum().backward()
    else:
        with torch.no_grad():
            f(x)
    print(MARK + str(time.perf_counter() - start), flush=True)


def _run_child(variant: str, train: bool, env: dict) -> float:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--child", variant] +
                          (["--train"] if train else []), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
    if line is None:
        raise RuntimeError(f"{variant}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return float(line[len(MARK):])


def cold(variant: str, train: bool, warm: bool = False) -> float:
    """Seconds from before `jit()` / `torch.compile()` to the end of the block's first call (its backward included
    when `train`), in a fresh process with one thread and empty Inductor and jitcore caches on disk (`warm`: after a
    first process filled them). `variant` is a name of benchmarks.measure.VARIANTS."""
    cache = tempfile.mkdtemp(prefix="jitcore-first-call-")
    # (TMPDIR too: Inductor keeps its precompiled headers in a folder of the temporary directory, outside
    # TORCHINDUCTOR_CACHE_DIR; a cold process builds them)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"), "JITCORE_CACHE_DIR": cache,
           "TMPDIR": cache, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("JITCORE_REGION_CACHE", None)  # (the cache on disk as users have it: on)
    try:
        if warm:
            _run_child(variant, train, env)
        return _run_child(variant, train, env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", help="(internal) the variant a fresh process measures, a name of measure.VARIANTS")
    p.add_argument("--train", action="store_true")
    p.add_argument("--warm", action="store_true", help="a second process over the caches the first one filled")
    a = p.parse_args(argv)
    if a.child:
        return child(a.child, a.train)
    for train in (False, True):
        times = {JIT: [], "torch.compile": []}
        for _ in range(a.reps):  # (alternating, so a change in the machine's load hits both)
            for variant in times:
                times[variant].append(cold(variant, train, a.warm))
        j, c = statistics.median(times[JIT]), statistics.median(times["torch.compile"])
        print(f"{'forward+backward' if train else 'forward':17s} jitcore [inductor, torch] {j:6.2f} s | "
              f"torch.compile {c:6.2f} s | ratio {j / c:.2f} (medians of {a.reps} fresh processes each"
              f"{', caches on disk warm' if a.warm else ''})")


if __name__ == "__main__":
    main()
