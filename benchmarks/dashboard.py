"""Benchmarks: the dashboard. Aggregates the runner's per-workload results into a weekly-report style summary
per suite and variant (pass rate, geometric-mean speedup over eager forward and forward+backward, first-call time,
memory ratio), the per-call overhead, the cache behaviour, the shape sequences (benchmarks/shape_suite.py) and the
details, as markdown and as a PNG chart.

    python -m benchmarks.dashboard benchmarks/results/results.json     # redraw from saved results
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def summarize(results: list[dict]) -> list[dict]:
    """One row per (suite, variant): pass rate and the geometric means over the suite's passing workloads."""
    eager = {r["workload"]: r for r in results if r["variant"] == "eager"}
    rows = []
    for suite in _ordered(r["suite"] for r in results):
        for variant in _ordered(r["variant"] for r in results if r["suite"] == suite):
            mine = [r for r in results if r["suite"] == suite and r["variant"] == variant]
            ran = [r for r in mine if r["status"] != "n/a"]
            ok = [r for r in ran if r["status"] == "pass"]
            ratio = _ratio_of(ok, eager)
            rows.append({
                "suite": suite, "variant": variant, "n": len(ran), "passed": len(ok),
                "fwd_speedup": geomean(ratio(lambda r: r["fwd_ms"], invert=True)),
                "fwdbwd_speedup": geomean(ratio(lambda r: r["fwdbwd_ms"], invert=True)),
                "first_call_ms": geomean(r["first_call_ms"] for r in ok),
                "memory_ratio": geomean(ratio(lambda r: r["peak_mem_mb"])),
                "compiles": sum(r["compiles"] or 0 for r in ok) if suite in ("cache", "shapes") else None,
                "na_reason": mine[0]["error"] if mine and not ran else ""})
    return rows


def _ratio_of(ok, eager):
    def ratio(get, invert=False):
        out = []
        for r in ok:
            base = eager.get(r["workload"])
            a, b = (get(r), get(base)) if base else (None, None)
            if a and b:
                out.append(b / a if invert else a / b)
        return out

    return ratio


def _fmt(v, spec=".2f", suffix="") -> str:
    return "\u2013" if v is None else f"{v:{spec}}{suffix}"


def markdown(results: list[dict], meta: dict) -> str:
    rows = summarize(results)
    out = [f"# jitcore benchmark dashboard ({meta['date']})", "",
           f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}  ", f"Versions: {meta['versions']}  ",
           f"Peak memory: {meta['memory_method']}", "",
           "## Summary per suite", "",
           ("Speedup: eager time / variant time, geometric mean over the suite's passing workloads (above 1 is "
            "faster than eager). Memory ratio: peak bytes / eager's peak during forward+backward (below 1 is less). "
            "Times: best of N calls after warm-up. First call: trace + compile + run, geometric mean. "
            "Cache suite: the whole shape sequence, compiles included, forward only."), "",
           "| suite | variant | pass rate | fwd speedup | fwd+bwd speedup | first call (ms) | memory ratio |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["n"] == 0:
            out.append(f"| {r['suite']} | {r['variant']} | n/a | | | | |")
            continue
        out.append(f"| {r['suite']} | {r['variant']} | {r['passed']}/{r['n']} ({100 * r['passed'] / r['n']:.0f}%) | "
                   f"{_fmt(r['fwd_speedup'], '.3g', 'x')} | {_fmt(r['fwdbwd_speedup'], '.3g', 'x')} | "
                   f"{_fmt(r['first_call_ms'], '.1f')} | {_fmt(r['memory_ratio'], '.2f')} |")
    out += _overhead_section(results) + _cache_section(results) + _shapes_section(results) + _detail_section(results)
    na = _ordered(f"{r['variant']}: {r['na_reason']}" for r in rows if r["n"] == 0 and r["na_reason"])
    if na:
        out += ["", "## Not available here", ""] + [f"- {line}" for line in na]
    return "\n".join(out) + "\n"


def _overhead_section(results) -> list[str]:
    tiny = [r for r in results if r["suite"] == "tiny add" and r["fwd_ms"]]
    if not tiny:
        return []
    base = next((r["fwd_ms"] for r in tiny if r["variant"] == "eager"), None)
    out = ["", "## Per-call overhead (tiny add on 2x2, forward, no_grad)", "",
           "| variant | µs per call | above eager (µs) | fwd+bwd µs per call |", "|---|---|---|---|"]
    for r in tiny:
        above = None if base is None else (r["fwd_ms"] - base) * 1e3
        out.append(f"| {r['variant']} | {r['fwd_ms'] * 1e3:.1f} | {_fmt(above, '+.1f')} | "
                   f"{_fmt(r['fwdbwd_ms'] and r['fwdbwd_ms'] * 1e3, '.1f')} |")
    return out


def _cache_section(results) -> list[str]:
    cache = [r for r in results if r["suite"] == "cache"]
    if not cache:
        return []
    shapes = cache[0]["extra"].get("shapes", [])
    out = ["", "## Cache behaviour over a sequence of shapes", "",
           f"Shapes of the first input, in call order: {', '.join('x'.join(map(str, s)) for s in shapes)}", "",
           "| workload | variant | status | compiles | total ms | first call ms |", "|---|---|---|---|---|---|"]
    for r in cache:
        out.append(f"| {r['workload']} | {r['variant']} | {r['status']} | {_fmt(r['compiles'], 'd')} | "
                   f"{_fmt(r['fwd_ms'], '.1f')} | {_fmt(r['first_call_ms'], '.1f')} |")
    return out


def _shapes_section(results) -> list[str]:
    rows = [r for r in results if r["suite"] == "shapes"]
    if not rows:
        return []
    out = ["", "## Shape sequences (each variant in a fresh process, empty compiler caches)", "",
           ("Each model called over its sequence of shapes (inference under no_grad, or training steps: forward, "
            "loss, backward), outputs and gradients checked against eager at every call. Compiles: jitcore's cache "
            "misses, Dynamo's compiled frames for torch.compile (a graph break's frames count too), thunder's cache "
            "misses; later: those after the first shape. Compiling calls: the wall time of the calls that compiled. "
            "Total: every call of the sequence, first calls included. Steady: median per call on the last shape. "
            "Ratios: this variant's time / eager's (or torch.compile's); below 1 is faster. Dynamo graphs: graphs "
            "Dynamo captured over the sequence (for jitcore [inductor, torch], its dynamic fusion regions)."), ""]
    for shapes in _ordered(tuple(map(tuple, r["extra"].get("shapes", []))) for r in rows):
        names = _ordered(r["workload"] for r in rows if tuple(map(tuple, r["extra"].get("shapes", []))) == shapes)
        if not shapes:
            continue
        out.append(f"- {', '.join(names)}: {', '.join('x'.join(map(str, s)) for s in shapes)}")
    out += ["", "| workload | variant | status | compiles | later compiles | compiling calls (s) | total (s) | "
            "steady ms/call | steady vs eager | total vs eager | total vs torch.compile | Dynamo graphs |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        x = r["extra"]
        later = None if r["compiles"] is None or "first_shape_compiles" not in x else \
            r["compiles"] - x["first_shape_compiles"]
        note = f" {r['error'][:100]}".replace("|", "\\|") if r["error"] else ""
        out.append(f"| {r['workload']} | {r['variant']} | {r['status']}{note} | {_fmt(r['compiles'], 'd')} | "
                   f"{_fmt(later, 'd')} | {_fmt(_s(x.get('compiling_ms')), '.2f')} | "
                   f"{_fmt(_s(x.get('total_ms')), '.2f')} | {_fmt(x.get('steady_ms'), '.3f')} | "
                   f"{_fmt(x.get('steady_vs_eager'), '.3g')} | {_fmt(x.get('total_vs_eager'), '.3g')} | "
                   f"{_fmt(x.get('total_vs_torch_compile'), '.3g')} | "
                   f"{_fmt(x.get('dynamo_graphs'), 'd')} |")
    again = [f"- {r['workload']}, {r['variant']}: {'; '.join(r['extra']['miss_reasons'])}" for r in rows
             if r["extra"].get("miss_reasons")]
    return out + (["", "Why jitcore compiled again (its cache miss reasons):", "", *again] if again else [])


def _s(ms):
    return None if ms is None else ms / 1e3


def _detail_section(results) -> list[str]:
    if all(r["suite"] in ("cache", "shapes") for r in results):
        return []
    out = ["", "## Per workload", "",
           "| suite | workload | variant | status | first call ms | fwd ms | fwd+bwd ms | peak MiB | note |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["suite"] in ("cache", "shapes"):
            continue
        note = r["error"].replace("|", "\\|")[:140]
        out.append(f"| {r['suite']} | {r['workload']} | {r['variant']} | {r['status']} | "
                   f"{_fmt(r['first_call_ms'], '.1f')} | {_fmt(r['fwd_ms'], '.3f')} | {_fmt(r['fwdbwd_ms'], '.3f')} | "
                   f"{_fmt(r['peak_mem_mb'], '.1f')} | {note} |")
    return out


def chart(results: list[dict], meta: dict, path: Path) -> bool:
    """The summary as a 2x2 bar chart (PNG); False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in summarize(results) if r["n"]]
    suites = _ordered(r["suite"] for r in rows)
    variants = _ordered(r["variant"] for r in rows)
    panels = [("fwd_speedup", "forward speedup over eager (x)", True), ("fwdbwd_speedup", "fwd+bwd speedup (x)", True),
              ("first_call_ms", "first call (ms, log)", False), ("memory_ratio", "peak memory / eager", True)]
    fig, axes = plt.subplots(2, 2, figsize=(14, 8.5))
    width = 0.8 / max(len(variants), 1)
    for ax, (key, title, ref_line) in zip(axes.flat, panels):
        for i, v in enumerate(variants):
            vals = [next((r[key] for r in rows if r["suite"] == s and r["variant"] == v), None) for s in suites]
            xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(suites))]
            ax.bar(xs, [x or 0 for x in vals], width, label=v)
        ax.set_xticks(range(len(suites)), suites, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_yscale("log")
        if ref_line:
            ax.axhline(1.0, color="black", linewidth=0.8)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"jitcore benchmarks {meta['date']} — {meta['machine']}\n{meta['versions']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(results: list[dict], meta: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "results.json", out_dir / "dashboard.md"]
    written[0].write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    written[1].write_text(markdown(results, meta))
    if chart(results, meta, out_dir / "dashboard.png"):
        written.append(out_dir / "dashboard.png")
    return written


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    for p in write(data["results"], data["meta"], Path(sys.argv[1]).parent):
        print(p)
