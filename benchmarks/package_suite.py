"""Benchmarks: restarting with a package (`jitcore.save` / `jitcore.load`, jitcore/packages.py). For each workload
and executor list, one fresh process makes the first call cold (trace, compile, run) and saves a package; a second
fresh process loads the package and makes the same first call. Each process has its own empty Inductor cache folder
and one thread, so no compiler cache on disk does the work. The outputs of the loaded call are compared with the
cold call's (a mismatch is a failed row). Reported: cold first call (jit() and the call), load, first call after the
load, and the ratio (load + first call) / cold. Rows "torch precompile" do the same with torch.compile's precompile
(aot_compile, save_compiled_function, load_compiled_function) on the forward workloads.

    python -m benchmarks.package_suite                      # every row, a table on stdout
    python -m benchmarks.package_suite --only "gpt2 block, train" --executors inductor
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
MARK = "PACKAGE_SUITE_RESULT "
PRECOMPILE = "torch precompile"  # torch.compile's aot_compile / load_compiled_function, for comparison
EXECUTORS = {"torch": None, "inductor": ["inductor"], PRECOMPILE: None}


def _workloads() -> dict:
    from benchmarks.models import Block, GPTConfig

    def block():
        torch.manual_seed(0)
        return Block(GPTConfig(n_embd=128, n_head=4, block_size=64, vocab_size=512, n_layer=1))

    def hf_gpt2():
        import transformers

        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=512, n_embd=64, n_head=4, n_layer=2, n_positions=128)
        return transformers.GPT2LMHeadModel(cfg)

    hidden = lambda: (torch.randn(8, 64, 128, generator=torch.Generator().manual_seed(1)),)  # noqa: E731
    ids = lambda: (torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(1)),)  # noqa: E731
    return {"gpt2 block": (block, hidden, False), "gpt2 block, train": (block, hidden, True),
            "hf gpt2": (hf_gpt2, ids, False), "hf gpt2, train": (hf_gpt2, ids, True)}


def _first_logits(out):
    out = out.logits if hasattr(out, "logits") else out
    return out[0] if isinstance(out, (tuple, list)) else out


def _call(jm, args, train: bool):
    if not train:
        with torch.no_grad():
            return _first_logits(jm(*args)).detach()
    out = _first_logits(jm(*args))
    out.float().pow(2).mean().backward()
    return out.detach()


def child(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--one", required=True)
    p.add_argument("--executors", required=True, choices=list(EXECUTORS))
    p.add_argument("--phase", required=True, choices=["cold", "load"])
    p.add_argument("--package", required=True)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    import jitcore

    make, inputs, train = _workloads()[a.one]
    model, args = make(), inputs()
    res = {}
    if a.executors == PRECOMPILE:
        res = _precompile(model, args, a.phase, a.package)
        out = res.pop("out")
    elif a.phase == "cold":  # (jit() is timed too: with Inductor it imports it, as load would have to without
        start = time.perf_counter()  # the package's kernels)
        jm = jitcore.jit(model, executors=EXECUTORS[a.executors])
        out = _call(jm, args, train)
        res["cold_s"] = time.perf_counter() - start
        jitcore.save(jm, a.package)
    else:
        start = time.perf_counter()
        jm = jitcore.load(a.package, model)
        res["load_s"] = time.perf_counter() - start
        start = time.perf_counter()
        out = _call(jm, args, train)
        res["first_call_s"] = time.perf_counter() - start
        res["misses"] = jitcore.cache_misses(jm)
    torch.save(out, os.path.join(os.path.dirname(a.package), f"out_{a.phase}.pt"))  # (beside the package)
    print(MARK + json.dumps(res), flush=True)


def _precompile(model, args, phase: str, path: str) -> dict:
    """torch's own precompile, measured on the forward workloads: `torch.compile(forward, fullgraph=True)
    .aot_compile` then `save_compiled_function`, and `torch.compiler.load_compiled_function` in the new process.
    The compiled function takes the module as its first argument."""
    start = time.perf_counter()
    with torch.no_grad():
        if phase == "cold":
            compiled = torch.compile(type(model).forward, fullgraph=True).aot_compile(((model, *args), {}))
            out = _first_logits(compiled(model, *args)).detach()
            res = {"cold_s": time.perf_counter() - start}
            compiled.save_compiled_function(path)
            return {**res, "out": out}
        with open(path, "rb") as f:
            compiled = torch.compiler.load_compiled_function(f, f_globals=type(model).forward.__globals__)
        res = {"load_s": time.perf_counter() - start, "misses": 0}
        start = time.perf_counter()
        out = _first_logits(compiled(model, *args)).detach()
        return {**res, "first_call_s": time.perf_counter() - start, "out": out}


def _run(one: str, executors: str, phase: str, package: str, timeout: float) -> dict:
    cache = tempfile.mkdtemp(prefix="jitcore-package-inductor-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "JITCORE_CACHE_DIR": cache, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.package_suite", "--child", "--one", one,
                               "--executors", executors, "--phase", phase, "--package", package], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith(MARK)), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": tail[-1][:200] if tail else f"exit {proc.returncode}"}
    return json.loads(line[len(MARK):])


def run(only=None, executors=None, timeout: float = 900.0, log=print) -> list[dict]:
    rows = []
    for one in _workloads():
        if only and one not in only:
            continue
        for ex in executors or EXECUTORS:
            if ex == PRECOMPILE and _workloads()[one][2]:
                continue  # (precompile is measured on the forward workloads)
            work = tempfile.mkdtemp(prefix="jitcore-package-")
            package = os.path.join(work, "package")
            try:
                row = {"workload": one, "executors": ex, **_run(one, ex, "cold", package, timeout)}
                if "error" not in row:
                    row.update(_run(one, ex, "load", package, timeout))
                if "error" not in row:
                    same = torch.allclose(torch.load(Path(work) / "out_cold.pt"),
                                          torch.load(Path(work) / "out_load.pt"), atol=1e-5, rtol=1e-5)
                    row["same_output"] = bool(same)
                    row["ratio"] = (row["load_s"] + row["first_call_s"]) / row["cold_s"]
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rows.append(row)
            if log:
                log(_line(row))
    return rows


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['workload']:20s} [{r['executors']:16s}]  FAIL {r['error']}"
    return (f"{r['workload']:20s} [{r['executors']:16s}] cold {r['cold_s']:7.3f} s | load {r['load_s']:6.3f} s + first "
            f"call {r['first_call_s']:7.3f} s = {r['ratio']:.2f}x cold | misses after load {r['misses']} | "
            f"same output {r['same_output']}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        return child([a for a in argv if a != "--child"])
    p = argparse.ArgumentParser(description="cold first call vs load + first call, fresh processes")
    p.add_argument("--only", action="append", help="a workload (repeatable)")
    p.add_argument("--executors", action="append", choices=list(EXECUTORS))
    a = p.parse_args(argv)
    run(a.only, a.executors)


if __name__ == "__main__":
    main()
