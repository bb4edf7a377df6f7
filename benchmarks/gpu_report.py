"""Benchmarks: the markdown of `python -m benchmarks.gpu_check` (results.md): environment, the cuda-marked tests,
correctness and timing per case and variant, dropout's RNG, the cache over shapes, and every failure with its line.
"""
from __future__ import annotations


def _num(v, fmt="{:.3g}"):
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else ("-" if v is None else v)


def _yes(v):
    return "-" if v is None else ("yes" if v else "no")


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def _memory(m):
    if isinstance(m, dict):
        return f"{m['peak_mib']:.1f}"
    return "-" if m is None else ("dry run" if "dry run" in str(m) else str(m))


def cases_table(cases: list[dict]) -> list[str]:
    eager = {(r.get("model"), r.get("phase"), r.get("precision")): r.get("step_ms")
             for r in cases if r.get("variant") == "eager"}
    rows = []
    for r in cases:
        base = eager.get((r.get("model"), r.get("phase"), r.get("precision")))
        ratio = base / r["step_ms"] if base and r.get("step_ms") else None
        cache = r.get("cache")
        rows.append([r.get("model", "-"), r.get("phase", "-"), r.get("precision", "-"), r.get("variant", r["name"]),
                     r["status"], _num(r.get("output_rel_err")), _num(r.get("grad_rel_err")),
                     _num(r.get("first_call_s"), "{:.2f}"), _num(r.get("step_ms"), "{:.3f}"),
                     _num(ratio, "{:.2f}"), _memory(r.get("memory")),
                     f"{cache['hits']}/{cache['misses']}" if cache else "-"])
    return _table(["model", "phase", "precision", "variant", "status", "out rel err", "grad rel err", "first call s",
                   "step ms (median)", "speedup vs eager", "peak MiB", "cache hits/misses"], rows)


def failures(results: dict) -> list[str]:
    lines = []
    sections = results["sections"]
    rows = [sections["environment"], sections["cuda_tests"], *sections["cases"], *sections["dropout_rng"],
            *sections["cache_shapes"]]
    for r in rows:
        name = r.get("name", "?")
        if r.get("error"):
            e = r["error"]
            first = (e["message"].splitlines() or [""])[0]
            lines.append(f"- **{name}**: {e['type']}: {first}  \n  user's line: `{e.get('user_line')}`; raised at "
                         f"`{e.get('raised_at')}`")
        elif r.get("status") == "wrong":
            lines.append(f"- **{name}**: differs from eager: {r.get('mismatch') or r}")
    imp = sections["environment"].get("jitcore_import")
    if isinstance(imp, dict):
        lines.insert(0, f"- **import jitcore**: {imp['type']}: {(imp['message'].splitlines() or [''])[0]}  \n"
                        f"  raised at `{imp.get('raised_at')}`")
    return lines or ["none"]


def markdown(results: dict, short: bool = False) -> str:
    meta, s = results["meta"], results["sections"]
    env = s["environment"]
    out = [f"# GPU check{' (dry run: CPU, tiny sizes)' if meta['dry_run'] else ''}", "",
           f"- date: {meta['date']}; command: `{meta['command']}`; wall {meta.get('wall_s', 0):.0f} s of a "
           f"{meta['budget_s']:.0f} s budget",
           f"- machine: {env.get('gpu', 'no GPU')} ({env.get('capability', '-')}), {env.get('cpu', '-')}; python "
           f"{env.get('python', '-')}, torch {env.get('torch', '-')} (CUDA {env.get('cuda')}), triton "
           f"{env.get('triton', '-')}, transformers {env.get('transformers', '-')}, jitcore {env.get('jitcore_rev')}",
           ""]
    if meta.get("aborted"):
        out += [f"**Aborted**: {meta['aborted']}", ""]
    counts = {}
    for r in [*s["cases"], *s["dropout_rng"], *s["cache_shapes"]]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    out += ["units: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    tests = s["cuda_tests"]
    if tests:
        c = tests.get("counts", {})
        out += [f"## cuda-marked tests: {tests.get('status')}", "",
                f"`{tests.get('command', '-')}`: passed {c.get('passed', 0)}, failed {c.get('failure', 0)}, "
                f"errors {c.get('error', 0)}, skipped {c.get('skipped', 0)} (exit {tests.get('returncode')})", ""]
        out += [f"- {t['test']}: {t['outcome']} {t['message']}" for t in tests.get("tests", [])
                if t["outcome"] != "passed"]
        out.append("")
    out += ["## Cases: correctness against eager and timing", "",
            "Relative error is ||variant - eager|| / ||eager|| (outputs; gradients of parameters and float inputs); "
            "the step is a no_grad forward or a training step (forward, loss, backward); the median of synchronised "
            "steps after warm-up; peak MiB: max_memory_allocated during one step above what was allocated before.",
            "", *cases_table(s["cases"]), ""]
    out += ["## Failures", "", *failures(results), ""]
    if short:
        return "\n".join(out)
    out += ["## Dropout and the RNG", "",
            "Block training step with dropout 0.1 after manual_seed: the same values and generator state as eager's, "
            "reproducible under the same seed, and the backward using the forward's mask (a probe).", ""]
    out += _table(["variant", "status", "reproducible", "eager's values", "eager's RNG state", "grad rel err",
                   "mask reused", "kept fraction"],
                  [[r.get("variant", r["name"]), r["status"], _yes(r.get("reproducible")), _yes(r.get("eager_values")),
                    _yes(r.get("eager_rng_state")), _num(r.get("grad_rel_err")), _yes(r.get("mask_reused")),
                    _num(r.get("kept_fraction"), "{:.3f}")] for r in s["dropout_rng"]])
    out += ["", "## Cache over shapes (cache=\"symbolic values\", block forward)", ""]
    rows = []
    for r in s["cache_shapes"]:
        calls = r.get("calls") or [{}]
        for c in calls:
            rows.append([r.get("variant", r["name"]), r["status"], c.get("shape", "-"), _num(c.get("ms"), "{:.1f}"),
                         c.get("hits", "-"), c.get("misses", "-"), _num(c.get("rel_err"))])
    out += _table(["variant", "status", "shape (batch, length)", "call ms", "hits after", "misses after", "rel err"],
                  rows)
    return "\n".join(out) + "\n"
