"""Benchmarks: rendering the performance report of benchmarks/performance.py. Takes its rows (one per part,
workload, mode and variant) and the run's metadata; gives each row its targets and verdicts, the markdown report
(header: machine, load average at start and end, git revision, exact command) and the raw JSON.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch

from benchmarks import thunder_adapter
from benchmarks.run import cpu_model, git_rev

COMPILE, JIT_TORCH, JIT_INDUCTOR = "torch.compile", "jitcore [torch]", "jitcore [inductor, torch]"
# the per-call budget above eager's of a cached call of a 2x2 add, by mode (issue 39, item 2)
OVERHEAD_US = {"forward": 2.0, "forward+backward": 10.0}

# part -> [(variant, field, what the field reads as, op, threshold, format of the value)]
TARGETS = {
    "convnets": [(JIT_TORCH, "x_eager", "x eager", ">=", 1.0, "{:.3f}")],
    "first call": [(JIT_INDUCTOR, "x_compile", "x torch.compile's time", "<=", 0.5, "{:.2f}")],
    "training": [(JIT_INDUCTOR, "x_compile", "x torch.compile", ">=", 1.0, "{:.3f}"),
                 (JIT_INDUCTOR, "x_torch", "x jitcore [torch]", ">=", 1.0, "{:.3f}")],
    "overhead": [(JIT_TORCH, "over_eager_us", "us over eager", "<=", OVERHEAD_US, "{:+.1f}"),
                 (JIT_INDUCTOR, "over_eager_us", "us over eager", "<=", OVERHEAD_US, "{:+.1f}")],
}

COLUMNS = {  # part -> [(header, field, format)]
    "convnets": [("model", "workload", "{}"), ("variant", "variant", "{}"), ("step ms", "value", "{:.2f}"),
                 ("x eager", "x_eager", "{:.3f}"), ("x torch.compile", "x_compile", "{:.3f}")],
    "first call": [("mode", "mode", "{}"), ("variant", "variant", "{}"), ("first call s", "value", "{:.2f}"),
                   ("/ torch.compile", "x_compile", "{:.2f}"), ("/ eager", "x_eager", "{:.1f}")],
    "training": [("workload", "workload", "{}"), ("variant", "variant", "{}"), ("fwd+bwd ms", "value", "{:.2f}"),
                 ("x eager", "x_eager", "{:.3f}"), ("x torch.compile", "x_compile", "{:.3f}"),
                 ("x jitcore [torch]", "x_torch", "{:.3f}")],
    "overhead": [("mode", "mode", "{}"), ("variant", "variant", "{}"), ("us per call", "value", "{:.1f}"),
                 ("over eager (us)", "over_eager_us", "{:+.1f}")],
}

TITLES = {
    "convnets": "Training step of the conv nets (batch 8, SGD; x = eager or torch.compile time / this time)",
    "first call": "Cold first call of the GPT-2 style block (fresh process, empty Inductor and jitcore caches; "
                  "/ = this time / torch.compile's or eager's)",
    "training": "Forward+backward of the block and the HuggingFace models (x = that variant's time / this time)",
    "overhead": "Per-call overhead of a cached call of a 2x2 add: forward `f(a, b)` without grad, and "
                "forward+backward `f(a, b).sum().backward()`",
}


def metadata(command: str, clock: str) -> dict:
    thunder = thunder_adapter.version()
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
                   f"{platform.system()} {platform.machine()}",
        "versions": f"python {platform.python_version()}, torch {torch.__version__}, jitcore {git_rev()}, "
                    + (f"lightning-thunder {thunder}" if thunder else "lightning-thunder not installed"),
        "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "clock": clock,
    }


def judge(rows: list[dict]) -> list[dict]:
    """One verdict per target: the row it reads (or none: not measured), the value, and met / missed."""
    verdicts = []
    keys = sorted({(r["part"], r["workload"], r["mode"]) for r in rows}, key=lambda k: _order(rows, k))
    for part, workload, mode in keys:
        for variant, field, what, op, threshold, fmt in TARGETS.get(part, []):
            if isinstance(threshold, dict):  # a threshold per mode
                threshold = threshold.get(mode)
                if threshold is None:
                    continue
            r = next((r for r in rows if (r["part"], r["workload"], r["mode"], r["variant"]) ==
                      (part, workload, mode, variant)), None)
            value = None if r is None or r["status"] != "pass" else r.get(field)
            if r is None or (value is None and r["status"] == "n/a"):
                verdict = "not measured"
            elif value is None:
                verdict = f"missed ({r['status']})" if r["status"] != "pass" else "not measured"
            else:
                verdict = "met" if (value >= threshold if op == ">=" else value <= threshold) else "missed"
                if field == "x_compile" and "recompile limit" in _note_of(rows, part, workload, mode, COMPILE):
                    verdict += " (torch.compile hit its recompile limit here: not a fair comparison)"
            target = f"{what} {op} {threshold:.1f}"
            verdicts.append({"part": part, "workload": workload, "mode": mode, "variant": variant, "field": field,
                             "value": value, "target": target, "verdict": verdict,
                             "text": f"{workload} {mode}, {variant}: "
                                     + (f"{fmt.format(value)} {what}" if value is not None else "-")
                                     + f" — target {target}: {verdict}"})
    return verdicts


def _note_of(rows, part, workload, mode, variant) -> str:
    return next((r["note"] for r in rows if (r["part"], r["workload"], r["mode"], r["variant"]) ==
                 (part, workload, mode, variant)), "")


def _order(rows, key):
    return next(i for i, r in enumerate(rows) if (r["part"], r["workload"], r["mode"]) == key)


def _cell(fmt: str, value) -> str:
    return "-" if value is None else fmt.format(value)


def markdown(rows: list[dict], meta: dict) -> str:
    verdicts = judge(rows)
    lines = ["# jitcore performance report", "",
             f"- command: `{meta['command']}`",
             f"- date: {meta['date']}; wall time {meta.get('wall_s', 0):.0f} s",
             f"- machine: {meta['machine']}",
             f"- versions: {meta['versions']}",
             f"- load average (1, 5, 15 min): {meta['load_start']} at start, {meta.get('load_end', '?')} at end",
             f"- steady times: medians over paired rounds ({meta['clock']}); ratios: medians of the rounds' ratios"]
    if meta.get("skipped"):
        lines.append(f"- skipped: {meta['skipped']}")
    met = sum(v["verdict"] == "met" for v in verdicts)  # (a comparison that is not fair counts as not met)
    lines += ["", f"## Targets: {met} of {len(verdicts)} met", ""] + [f"- {v['text']}" for v in verdicts]
    for part in COLUMNS:
        part_rows = [r for r in rows if r["part"] == part]
        if not part_rows:
            continue
        cols = COLUMNS[part]
        lines += ["", f"## {TITLES[part]}", "",
                  "| " + " | ".join(h for h, _, _ in cols) + " | target | verdict | note |",
                  "|" + "---|" * (len(cols) + 3)]
        for r in part_rows:
            mine = [v for v in verdicts if (v["part"], v["workload"], v["mode"], v["variant"]) ==
                    (part, r["workload"], r["mode"], r["variant"])]
            target = "; ".join(v["target"] for v in mine)
            verdict = "; ".join(v["verdict"] for v in mine)
            note = r["note"] if r["status"] == "pass" else f"{r['status']}: {r['note']}"
            cells = [_cell(fmt, r.get(f)) if r["status"] == "pass" or f in ("workload", "mode", "variant") else "-"
                     for _, f, fmt in cols]
            lines.append("| " + " | ".join(cells + [target, verdict, note.replace("|", "/")]) + " |")
    return "\n".join(lines) + "\n"


def progress(rows: list[dict]) -> str:
    """Rows as short lines, for the log while the run goes on."""
    return "\n".join(f"  {r['part']} / {r['workload']} / {r['mode']} / {r['variant']}: {r['status']} "
                     + (f"{r['value']:.3g} {r['unit']}" if r["value"] is not None else r["note"]) for r in rows)


def write(rows: list[dict], meta: dict, text: str, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, raw = out / "performance.md", out / "performance.json"
    md.write_text(text)
    raw.write_text(json.dumps({"meta": meta, "rows": rows, "targets": judge(rows)}, indent=1))
    return [md, raw]
