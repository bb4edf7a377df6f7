"""Benchmarks: the shape-sequence suite ("shapes" in `python -m benchmarks.run --suites shapes`). Each model is called
over a sequence of input shapes (batch, sequence length), as a user's loop calls it, and each variant reports its
compiles, the total wall time over the sequence (compiles and first calls included), the time of the calls that
compiled, and the steady-state median per call on the last shape, all against eager. Every call's outputs (and in
training, the parameters' gradients) are compared with eager's: a wrong answer is a failed row, never a time.

Variants: eager, jitcore [torch] and [inductor, torch] with cache="symbolic values", torch.compile(dynamic=True), and
thunder's symbolic values when lightning-thunder is installed. Every (workload, variant) runs in a fresh Python process
(`python -m benchmarks.shape_suite --one NAME --variant V`) with an empty Inductor cache (its own
TORCHINDUCTOR_CACHE_DIR), torch._dynamo reset and one thread (`--threads`): no compiler reuses another's work, and
the first calls cost what they cost a user's new process.

    python -m benchmarks.run --quick --suites shapes              # the suite, with the dashboard
    python -m benchmarks.shape_suite --one "mlp over batch" --variant "jitcore [torch] symbolic" --quick
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
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks import thunder_adapter
from benchmarks.measure import SYMBOLIC, SYMBOLIC_INDUCTOR, Result, Unavailable, flat_tensors, inductor_executor
from benchmarks.models import GPT, Block, GPTConfig, mlp
from benchmarks.suites import LastHidden, gelu_mlp_fn
from benchmarks.timing import median_time

ROOT = Path(__file__).resolve().parent.parent
SUITE = "shapes"
TORCH_COMPILE_DYNAMIC = "torch.compile dynamic"
THUNDER_SYMBOLIC = "thunder symbolic"
SHAPE_VARIANTS = ("eager", SYMBOLIC, SYMBOLIC_INDUCTOR, TORCH_COMPILE_DYNAMIC, THUNDER_SYMBOLIC)
MARK = "SHAPE_SUITE_RESULT "  # the line of the child's stdout that carries its result


@dataclass
class ShapeWorkload:
    name: str
    make: Callable  # () -> (callable, parameters a training step differentiates)
    inputs: Callable  # (shape, torch.Generator) -> the call's positional arguments
    shapes: list
    train: bool = False
    tol: float = 1e-4  # rtol = atol against eager
    default: bool = True  # part of the suite (False: reachable by name only, for the runner's own test)


def _sequences(quick: bool):
    bt = [(2, 16), (4, 32), (3, 24), (8, 8), (2, 48), (6, 40)]
    rows = [16, 64, 32, 128, 48, 96]
    if not quick:
        bt += [(5, 56), (16, 16), (7, 64), (4, 28)]
        rows += [256, 24, 200, 8]
    return bt, [(r,) for r in rows]


def _seeded(make):
    def wrapped():
        torch.manual_seed(0)
        return make()

    return wrapped


def _hf(config_cls: str, model_cls: str, experts: str | None = None, **cfg):
    def make():
        import transformers

        transformers.logging.set_verbosity_error()
        config = getattr(transformers, config_cls)(**cfg)
        config._attn_implementation = "sdpa"
        if experts is not None:  # a mixture of experts: "eager" (a loop over the experts hit, selecting each one's
            config._experts_implementation = experts  # tokens by a mask) or "grouped_mm" (one product by groups)
        model = LastHidden(getattr(transformers, model_cls)(config).eval())
        return model, list(model.parameters())

    return _seeded(make)


def shape_workloads(quick: bool) -> list[ShapeWorkload]:
    """Every workload of the suite (those with default=False run only when named)."""
    bt, rows = _sequences(quick)
    cfg = GPTConfig(n_embd=64, n_head=4, block_size=64, vocab_size=512, n_layer=2)

    def block():
        model = Block(cfg)
        return model, list(model.parameters())

    def mlp_case():
        model = mlp(256, 3)
        return model, list(model.parameters())

    def nanogpt():
        model = GPT(cfg)
        return model, list(model.parameters())

    def tiny():
        w1, w2 = (torch.randn(32, 64) * 0.1).requires_grad_(), (torch.randn(64, 32) * 0.1).requires_grad_()
        return (lambda x: gelu_mlp_fn(x, w1, w2)), [w1, w2]

    def hidden(shape, g):
        return (torch.randn(*shape, cfg.n_embd, generator=g),)

    def ids(shape, g):
        return (torch.randint(0, 512, shape, generator=g),)

    def features(width):
        return lambda shape, g: (torch.randn(*shape, width, generator=g),)

    hf_common = {"vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                 "intermediate_size": 128, "max_position_embeddings": 128}
    gpt2 = _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=512, n_embd=64, n_head=4, n_layer=2, n_positions=128,
               bos_token_id=0, eos_token_id=0)
    llama = _hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **hf_common)
    moe = {"num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2, **hf_common}
    mixtral_loop = _hf("MixtralConfig", "MixtralForCausalLM", experts="eager", **moe)
    mixtral_grouped = _hf("MixtralConfig", "MixtralForCausalLM", experts="grouped_mm", **moe)
    work = [
        ShapeWorkload("gpt2 block over (b, t)", _seeded(block), hidden, bt, tol=1e-3),
        ShapeWorkload("gpt2 block over (b, t), train", _seeded(block), hidden, bt, train=True, tol=1e-3),
        ShapeWorkload("mlp over batch", _seeded(mlp_case), features(256), rows, tol=1e-3),
        ShapeWorkload("hf gpt2 over (b, t)", gpt2, ids, bt, tol=1e-3),
        ShapeWorkload("hf llama over (b, t)", llama, ids, bt, tol=1e-3),
        # the routing sends a different number of tokens to each expert on every call: sizes known at run time
        ShapeWorkload("hf mixtral (experts loop) over (b, t)", mixtral_loop, ids, bt, tol=1e-3),
        ShapeWorkload("hf mixtral (grouped_mm) over (b, t)", mixtral_grouped, ids, bt, tol=1e-3),
        ShapeWorkload("tiny gelu mlp over batch, train", _seeded(tiny), features(32), rows[:3], train=True,
                      default=False),
    ]
    if not quick:
        work += [
            ShapeWorkload("mlp over batch, train", _seeded(mlp_case), features(256), rows, train=True, tol=1e-3),
            ShapeWorkload("nanogpt over (b, t)", _seeded(nanogpt), ids, bt, tol=1e-3),
            ShapeWorkload("hf gpt2 over (b, t), train", gpt2, ids, bt, train=True, tol=1e-3),
            ShapeWorkload("hf llama over (b, t), train", llama, ids, bt, train=True, tol=1e-3),
        ]
    return work


# -- the child: one (workload, variant) in this process ---------------------------------------------------------------
def make_variant(name: str, fn):
    import jitcore

    if name == "eager":
        return fn
    if name == SYMBOLIC:
        return jitcore.jit(fn, cache="symbolic values")
    if name == SYMBOLIC_INDUCTOR:
        return jitcore.jit(fn, cache="symbolic values", executors=[inductor_executor()])
    if name == TORCH_COMPILE_DYNAMIC:
        torch.compiler.reset()
        return torch.compile(fn, dynamic=True)
    if name == THUNDER_SYMBOLIC:
        ok, why = thunder_adapter.available()
        if not ok:
            raise Unavailable(f"lightning-thunder: {why}")
        return thunder_adapter.jit(fn, cache="symbolic values")
    raise ValueError(f"unknown variant {name!r} (from: {', '.join(SHAPE_VARIANTS)})")


def dynamo_frames() -> int:
    """Frames Dynamo compiled in this process (torch.compile's compiles and recompiles, graph breaks' frames)."""
    from jitcore.compat import dynamo_counters  # (lazy: as jitcore, imported where it is measured)

    counters = dynamo_counters()
    return int(counters["frames"]["ok"])


def dynamo_graphs() -> int:
    """Graphs Dynamo captured in this process: torch.compile's (a graph break makes two), and the dynamic fusion
    regions jitcore's Inductor executor compiles with torch.compile(fullgraph=True), which count no frames."""
    from jitcore.compat import dynamo_counters  # (lazy: as jitcore, imported where it is measured)

    counters = dynamo_counters()
    return int(counters["stats"]["unique_graphs"])


def compiles(variant: str, run) -> int:
    if variant.startswith("jitcore"):
        import jitcore

        return jitcore.cache_misses(run)
    if variant == TORCH_COMPILE_DYNAMIC:
        return dynamo_frames()
    if variant == THUNDER_SYMBOLIC:
        return thunder_adapter.cache_misses(run) or 0
    return 0


def step(run, params, train: bool, args, keep: bool = True) -> list:
    """One call: inference under no_grad, or forward, loss, backward (the loss: mean square of the first output).
    Returns the outputs (and the parameters' gradients) when `keep`."""
    if not train:
        with torch.no_grad():
            out = flat_tensors(run(*args))
        return out if keep else []
    for p in params:
        p.grad = None
    out = flat_tensors(run(*args))
    out[0].float().pow(2).mean().backward()
    if not keep:
        return []
    return [o.detach() for o in out] + [None if p.grad is None else p.grad.clone() for p in params]


def check(got: list, expected: list, tol: float, what: str):
    assert len(got) == len(expected), f"{what}: {len(got)} tensors, eager gives {len(expected)}"
    for g, e in zip(got, expected):
        if g is None or e is None:
            assert g is None and e is None, f"{what}: a gradient is missing"
            continue
        torch.testing.assert_close(g, e, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def measure_one(w: ShapeWorkload, variant: str, repeat: int) -> Result:
    """The sequence under one variant: compiles, total and compiling time, steady median on the last shape."""
    res = Result(SUITE, w.name, variant)
    res.extra.update(shapes=[list(s) for s in w.shapes], mode="train" if w.train else "inference")
    try:
        fn, params = w.make()
        g = torch.Generator().manual_seed(2)
        calls = [w.inputs(shape, g) for shape in w.shapes]
        expected = [step(fn, params, w.train, args) for args in calls]  # eager's answers (eager's warm-up too)
        run = make_variant(variant, fn)
    except Unavailable as e:
        res.status, res.error = "n/a", str(e)
        return res
    except Exception as e:
        res.fail("setup", e)
        return res
    total = compiling = 0.0
    shape = w.shapes[0]
    try:
        graphs_before = dynamo_graphs()
        for i, (shape, args) in enumerate(zip(w.shapes, calls)):
            before = compiles(variant, run)
            start = time.perf_counter()
            got = step(run, params, w.train, args)
            took = time.perf_counter() - start
            total += took
            if compiles(variant, run) != before:
                compiling += took
            if i == 0:
                res.first_call_ms = took * 1e3
                res.extra["first_shape_compiles"] = compiles(variant, run)
            check(got, expected[i], w.tol, f"shape {tuple(shape)}")
        res.compiles = compiles(variant, run)
        if variant.startswith("jitcore") and res.compiles > 1:  # why it compiled again (the predicate that failed)
            import jitcore

            res.extra["miss_reasons"] = [str(m)[:300] for m in jitcore.cache_miss_reasons(run)[1:]]
        res.extra.update(total_ms=total * 1e3, compiling_ms=compiling * 1e3,
                         dynamo_graphs=dynamo_graphs() - graphs_before)
        last = calls[-1]
        steady = median_time(lambda: step(run, params, w.train, last, keep=False), warmup=2, repeat=repeat) * 1e3
        res.extra["steady_ms"] = steady
        if w.train:
            res.fwdbwd_ms = steady
        else:
            res.fwd_ms = steady
        res.compiles = compiles(variant, run)  # the steady calls too: a compile there is a compile
    except Exception as e:
        res.fail(f"shape {tuple(shape)}", e)
    return res


def child(argv=None):
    parser = argparse.ArgumentParser(description="one (workload, variant) of the shape suite, in this process")
    parser.add_argument("--one", required=True, help="workload name")
    parser.add_argument("--variant", required=True, choices=SHAPE_VARIANTS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.compiler.reset()
    found = {w.name: w for w in shape_workloads(args.quick)}
    if args.one not in found:
        parser.error(f"unknown workload {args.one!r} (from: {', '.join(found)})")
    res = measure_one(found[args.one], args.variant, args.repeat or (7 if args.quick else 20))
    print(MARK + json.dumps(asdict(res)), flush=True)


# -- the parent: each (workload, variant) in a fresh process -------------------------------------------------------
def run_isolated(name: str, variant: str, *, quick: bool, threads: int, timeout: float, repeat: int = 0) -> dict:
    """One (workload, variant) in a fresh Python process with an empty Inductor cache; its Result as a dict."""
    res = Result(SUITE, name, variant)
    cache_dir = tempfile.mkdtemp(prefix="jitcore-shapes-inductor-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "JITCORE_CACHE_DIR": cache_dir,
           "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
           "OMP_NUM_THREADS": str(threads), "PYTHONPATH": os.pathsep.join(
               [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "benchmarks.shape_suite", "--one", name, "--variant", variant,
           "--threads", str(threads), *(["--quick"] if quick else []), *(["--repeat", str(repeat)] if repeat else [])]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith(MARK)), None)
        if line is not None:
            return json.loads(line[len(MARK):])
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        res.status, res.error = "fail", f"process exited {proc.returncode}: {tail[-1][:160] if tail else ''}"
        res.extra["traceback"] = "\n".join(tail[-12:])
    except subprocess.TimeoutExpired:
        res.status, res.error = "fail", f"took longer than {timeout:.0f} s"
    except Exception as e:
        res.status, res.error = "fail", f"{type(e).__name__}: {e}"
        res.extra["traceback"] = traceback.format_exc(limit=-4)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return asdict(res)


def run_suite(*, quick: bool, variants=None, names=None, threads: int = 1, timeout: float = 600.0, repeat: int = 0,
              log=print) -> list[dict]:
    """Every (workload, variant) of the suite, each in its own process; eager first (the ratios' reference)."""
    variants = [v for v in (variants or SHAPE_VARIANTS) if v in SHAPE_VARIANTS]
    variants = ["eager"] + [v for v in variants if v != "eager"]
    work = [w for w in shape_workloads(quick) if (w.name in names if names else w.default)]
    thunder_ok, thunder_why = thunder_adapter.available()
    results = []
    for w in work:
        for v in variants:
            start = time.perf_counter()
            if v == THUNDER_SYMBOLIC and not thunder_ok:  # no process to start for what cannot import
                r = asdict(Result(SUITE, w.name, v, status="n/a", error=f"lightning-thunder: {thunder_why}"))
            else:
                r = run_isolated(w.name, v, quick=quick, threads=threads, timeout=timeout, repeat=repeat)
            if log:
                log(f"{SUITE:12s} {w.name:28s} {v:28s} {r['status']:5s} {time.perf_counter() - start:6.1f}s"
                    f"{'  ' + r['error'] if r['error'] else ''}")
            results.append(r)
    add_ratios(results)
    return results


def add_ratios(results: list[dict]):
    """Steady and total time of each row against eager's (and the total against torch.compile's) on the workload."""
    by = {(r["workload"], r["variant"]): r for r in results if r["suite"] == SUITE and r["status"] == "pass"}
    for r in results:
        if r["suite"] != SUITE or r["status"] != "pass":
            continue
        for ref, key in (("eager", "vs_eager"), (TORCH_COMPILE_DYNAMIC, "vs_torch_compile")):
            base = by.get((r["workload"], ref))
            if base is None:
                continue
            if base["extra"].get("steady_ms") and r["extra"].get("steady_ms"):
                r["extra"][f"steady_{key}"] = r["extra"]["steady_ms"] / base["extra"]["steady_ms"]
            if base["extra"].get("total_ms") and r["extra"].get("total_ms"):
                r["extra"][f"total_{key}"] = r["extra"]["total_ms"] / base["extra"]["total_ms"]


if __name__ == "__main__":
    child()
