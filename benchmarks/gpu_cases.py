"""Benchmarks: the models, steps and measurements of `python -m benchmarks.gpu_check` (a GPT-2 style block and a
small HuggingFace Llama from a config; forward and training step; fp32 and bf16 autocast), each variant checked
against eager (relative error of outputs and gradients, dtypes) and timed (first call, median step, peak CUDA memory,
CUDA graph replay). On a CPU (--dry-run) the same code runs on tiny sizes; the CUDA-only parts say "skipped: dry run".
"""
from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass

import torch

from benchmarks.measure import SYMBOLIC, SYMBOLIC_INDUCTOR, flat_tensors, make_variant
from benchmarks.models import Block, GPTConfig
from benchmarks.timing import median_time

DRY = "skipped: dry run"
INDUCTOR = "jitcore [inductor, torch]"
GRAPHED = "jitcore [inductor, torch] + CUDA graph"
VARIANTS = ("eager", "torch.compile", "jitcore [torch]", INDUCTOR)  # GRAPHED reuses INDUCTOR's compiled callable
# relative error ||got - eager|| / ||eager|| allowed, per precision (fp32 reorderings are ~1e-6; bf16 several ulps)
TOLERANCE = {"fp32": 2e-4, "bf16": 3e-2}


@dataclass
class Sizes:
    block: dict  # GPTConfig fields
    block_input: tuple  # (batch, length)
    llama: dict  # LlamaConfig fields
    llama_input: tuple  # (batch, length)
    shapes: list  # (batch, length) sequence of the cache section (sizes 0 and 1 are specialised: none here)
    warmup: int
    repeat: int


GPU_SIZES = Sizes(
    block={"n_embd": 768, "n_head": 12, "block_size": 1024}, block_input=(8, 1024),
    llama={"vocab_size": 8192, "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 1024},
    llama_input=(4, 512), shapes=[(8, 512), (8, 1024), (4, 768), (8, 512), (2, 1024)], warmup=3, repeat=25)
DRY_SIZES = Sizes(
    block={"n_embd": 32, "n_head": 2, "block_size": 16}, block_input=(2, 16),
    llama={"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64},
    llama_input=(2, 16), shapes=[(2, 16), (2, 8), (3, 12), (2, 16)], warmup=1, repeat=3)


class Env:
    """Where a run happens: the device, the sizes, and how to synchronise and read memory there."""

    def __init__(self, dry_run: bool):
        self.dry_run = dry_run
        self.device = torch.device("cpu" if dry_run else "cuda")
        self.sizes = DRY_SIZES if dry_run else GPU_SIZES

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def autocast(self, precision: str, cache: bool = True):
        """bf16 autocast (or nothing for fp32); cache=False for CUDA graph capture, as torch's docs require."""
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=cache)

    def rng_state(self) -> dict:
        """The default generators' states: the CPU one, and on a GPU the CUDA one (seed and philox offset)."""
        states = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            states["cuda"] = torch.cuda.get_rng_state()
        return states

    def release(self):
        import gc

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def build_model(env: Env, model: str, dropout: float = 0.0):
    """(module, inputs): the model with seed-0 random weights on env.device, and its inputs."""
    torch.manual_seed(0)
    s = env.sizes
    if model == "block":
        m = Block(GPTConfig(**s.block, dropout=dropout))
        return m.to(env.device), (torch.randn(*s.block_input, s.block["n_embd"], device=env.device),)
    if model == "llama":
        import transformers

        from benchmarks.suites import LastHidden

        config = transformers.LlamaConfig(**s.llama, attention_dropout=dropout, bos_token_id=0, eos_token_id=0)
        config._attn_implementation = "sdpa"
        m = LastHidden(transformers.LlamaForCausalLM(config))
        return m.to(env.device), (torch.randint(0, s.llama["vocab_size"], s.llama_input, device=env.device),)
    raise ValueError(model)


class Step:
    """One call of a case: forward under no_grad (eval mode), or a training step (train mode: grads set to None,
    forward, loss = sum(output * fixed cotangent) in fp32, backward). Returns (outputs, gradients)."""

    def __init__(self, env: Env, run, module, inputs, phase: str, precision: str):
        self.env, self.run, self.module, self.phase, self.precision = env, run, module, phase, precision
        self.inputs = [x.detach().requires_grad_(phase == "train" and x.is_floating_point()) for x in inputs]
        self.leaves = [*module.parameters(), *(x for x in self.inputs if x.requires_grad)]
        module.train(phase == "train")
        self.cotangent = None
        self.autocast_cache = True  # off for a CUDA graph capture

    def __call__(self):
        if self.phase == "forward":
            with torch.no_grad(), self.env.autocast(self.precision, self.autocast_cache):
                return flat_tensors(self.run(*self.inputs)), []
        for p in self.leaves:
            p.grad = None
        with self.env.autocast(self.precision, self.autocast_cache):
            outs = flat_tensors(self.run(*self.inputs))
        if self.cotangent is None:
            g = torch.Generator(device=self.env.device).manual_seed(1)
            self.cotangent = torch.randn(outs[0].shape, generator=g, device=self.env.device)
        (outs[0].float() * self.cotangent).sum().backward()
        return [o.detach() for o in outs], [p.grad for p in self.leaves]


def rel_error(got, want) -> float:
    """||got - want|| / ||want|| in float64 (inf for NaN or a shape/dtype mismatch; 0 when both are zero)."""
    if got is None or want is None:
        return 0.0 if got is None and want is None else float("inf")
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    diff = torch.linalg.vector_norm((got.double() - want.double()).flatten()).item()
    ref = torch.linalg.vector_norm(want.double().flatten()).item()
    err = diff / ref if ref else diff
    return err if err == err else float("inf")  # NaN -> inf


def compare(got: tuple, want: tuple, precision: str) -> dict:
    """The correctness fields of a row: max relative error of outputs and of gradients, dtypes, verdict."""
    (outs, grads), (ref_outs, ref_grads) = got, want
    checks = {"outputs": len(outs) == len(ref_outs), "grads": len(grads) == len(ref_grads)}
    out_err = max((rel_error(a, b) for a, b in zip(outs, ref_outs)), default=0.0)
    grad_err = max((rel_error(a, b) for a, b in zip(grads, ref_grads)), default=0.0)
    tol = TOLERANCE[precision]
    ok = checks["outputs"] and checks["grads"] and out_err <= tol and grad_err <= tol
    why = [] if ok else [f"{n} differ in count" for n, c in checks.items() if not c]
    if out_err > tol:
        why.append(f"outputs: relative error {out_err:.3g} > {tol:g}")
    if grad_err > tol:
        why.append(f"gradients: relative error {grad_err:.3g} > {tol:g}")
    return {"correct": ok, "output_rel_err": out_err, "grad_rel_err": grad_err, "tolerance": tol,
            "dtypes": sorted({str(t.dtype) for t in outs}), "mismatch": "; ".join(why)}


def timed_first_call(env: Env, make_and_call):
    env.sync()
    start = time.perf_counter()
    result = make_and_call()
    env.sync()
    return result, time.perf_counter() - start


def median_step_ms(env: Env, step) -> float:
    """Median milliseconds per step over env.sizes.repeat samples, synchronised before and after each."""
    def once():
        step()
        env.sync()

    env.sync()
    return median_time(once, warmup=env.sizes.warmup, repeat=env.sizes.repeat) * 1e3


def peak_memory(env: Env, step) -> dict | str:
    """Peak CUDA memory of one step above what was allocated before it (max_memory_allocated after a reset)."""
    if env.dry_run:
        return DRY
    env.sync()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    env.sync()
    return {"peak_mib": (torch.cuda.max_memory_allocated() - base) / 2**20, "before_mib": base / 2**20}


def measure_variant(env: Env, case: dict, variant: str, row: dict, reference: dict) -> dict:
    """Build the variant on a copy of the case's model, call it once (timed, checked against eager's answer in
    `reference`), then time its steps and read its peak memory. Fills `row` as it goes (a failure keeps what was
    measured before it). Returns what the CUDA graph row of the same case reuses."""
    module = copy.deepcopy(case["module"])

    def make_and_call():
        run = make_variant(variant, module)
        step = Step(env, run, module, case["inputs"], case["phase"], case["precision"])
        return step, step()

    (step, got), first_s = timed_first_call(env, make_and_call)
    row["first_call_s"] = first_s
    if variant == "eager":
        reference["answer"] = _clone(got)
    row.update(compare(got, reference["answer"], case["precision"]))
    row["step_ms"] = median_step_ms(env, step)
    row["memory"] = peak_memory(env, step)
    if variant.startswith("jitcore"):
        import jitcore

        row["cache"] = {"hits": jitcore.cache_hits(step.run), "misses": jitcore.cache_misses(step.run)}
    return {"step": step}


def _clone(answer):
    outs, grads = answer
    return [o.detach().clone() for o in outs], [None if g is None else g.detach().clone() for g in grads]


def measure_graphed(env: Env, case: dict, row: dict, reference: dict, shared: dict) -> None:
    """jitcore has no CUDA-graph option of its own: capture one whole step of the jitted [inductor, torch] callable
    (forward, loss and backward, as torch.cuda.graph's whole-network recipe does: warm-up on a side stream, grads set
    to None before capture so backward allocates them from the graph's pool), replay it, check the replayed outputs
    and grads against eager, and time replays. The prologue's guards run at capture only: inputs stay static."""
    if env.dry_run:
        row["status"] = DRY
        return
    step = shared.get("step")
    if step is None:
        raise RuntimeError(f"no compiled {INDUCTOR} callable to capture (its row failed or did not run)")
    step.autocast_cache = False  # no autocast cast cache in a captured region (make_graphed_callables refuses it)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    start = time.perf_counter()
    with torch.cuda.graph(graph):
        static = step()
    row["capture_s"] = time.perf_counter() - start
    for t in static[0] + static[1]:  # poisoned: every value compared below was written by the replay
        if t is not None and t.is_floating_point():
            t.fill_(float("nan"))
    graph.replay()
    env.sync()
    row.update(compare(static, reference["answer"], case["precision"]))
    row["step_ms"] = median_step_ms(env, graph.replay)
    row["memory"] = peak_memory(env, graph.replay)


def dropout_row(env: Env, variant: str, reference: dict, p: float = 0.1) -> dict:
    """A training step of the block with dropout p (attention and MLP) under manual_seed: are the values and the
    generator's state after the step eager's, is it reproducible under the same seed, and does the backward use the
    forward's mask (probe: x -> dropout(x * 1.0); its grad must be (out != 0) / (1 - p))."""
    module, inputs = build_model(env, "block", dropout=p)
    run = make_variant(variant, module)
    step = Step(env, run, module, inputs, "train", "fp32")
    answers = []
    for _ in range(2):
        torch.manual_seed(1234)
        outs, grads = step()
        answers.append((_clone((outs, grads)), env.rng_state()))
    (answer, state), (again, state_again) = answers
    row = {"reproducible": all(torch.equal(a, b) for a, b in zip(answer[0] + answer[1], again[0] + again[1]))
           and _same_states(state, state_again)}
    if variant == "eager":
        reference["dropout"] = (answer, state)
    ref_answer, ref_state = reference["dropout"]
    row["output_rel_err"] = max(rel_error(a, b) for a, b in zip(answer[0], ref_answer[0]))
    row["grad_rel_err"] = max(rel_error(a, b) for a, b in zip(answer[1], ref_answer[1]))
    row["eager_values"] = max(row["output_rel_err"], row["grad_rel_err"]) <= TOLERANCE["fp32"]  # eager's masks
    row["eager_rng_state"] = _same_states(state, ref_state)
    row["rng_differs_in"] = [k for k in state if not torch.equal(state[k], ref_state[k])]
    row["mask_reused"], row["kept_fraction"] = _mask_probe(env, variant, p)
    row["correct"] = row["reproducible"] and row["mask_reused"] and abs(row["kept_fraction"] - (1 - p)) < 0.05
    return row


def _same_states(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _mask_probe(env: Env, variant: str, p: float) -> tuple[bool, float]:
    def probe(x):
        return torch.nn.functional.dropout(x * 1.0, p, training=True)

    x = torch.randn(4096, device=env.device, requires_grad=True)
    out = make_variant(variant, probe)(x)
    out.backward(torch.ones_like(out))
    kept = (out != 0).float()
    return bool(torch.allclose(x.grad, kept / (1 - p))), kept.mean().item()


def shapes_rows(env: Env, variant: str) -> list[dict]:
    """The block's forward under cache="symbolic values" over env.sizes.shapes: per call, its time (synchronised),
    the cache hits and misses after it, and its relative error against eager."""
    import jitcore

    module, _ = build_model(env, "block")
    module.eval()
    run = make_variant({"jitcore [torch]": SYMBOLIC, INDUCTOR: SYMBOLIC_INDUCTOR}[variant], module)
    rows = []
    g = torch.Generator(device=env.device).manual_seed(3)
    for batch, length in env.sizes.shapes:
        x = torch.randn(batch, length, env.sizes.block["n_embd"], device=env.device, generator=g)
        with torch.no_grad():
            want = module(x)
            got, took = timed_first_call(env, lambda x=x: run(x))
        err = rel_error(got, want)
        rows.append({"shape": [batch, length], "ms": took * 1e3, "hits": jitcore.cache_hits(run),
                     "misses": jitcore.cache_misses(run), "rel_err": err, "correct": err <= TOLERANCE["fp32"]})
    return rows
