"""Long differential fuzz run (issue 38's bar): every seed of a range in every cache mode, each 10th seed with Inductor,
counted as agreeing, wrong (differs from eager) or refused (jitcore raised a JitError where eager ran), the refusals
grouped by cause and split into deliberate ones (DELIBERATE: what jitcore refuses by design) and the rest. Chunkable
(--start/--count) and resumable (--out keeps one record per run; a rerun with the same --out skips the seeds done):

    python -m tests.fuzz_long --start 0 --count 3000 --inductor-every 10 --jobs 1 --out /tmp/fuzz_long.json
    python -m tests.fuzz_long --merge a.json b.json          # one summary over chunks run apart
    python -m tests.fuzz_long --seeds 44,110 --out rerun.json   # some seeds (merged last, they replace older records)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from tests.fuzz import CACHE_MODES, _refusal_cause, check_program, generate

# refusals jitcore makes by design (a cause's text matched by the pattern -> why it is deliberate)
DELIBERATE = {
    r"data_ptr\(\) inside a jitted function: the traced program has no memory address":
        "a raw memory address: only its alignment (`p % k`) and `!= 0` are answered as eager",
    r"elements share memory: eager writes its elements one after another":
        "a computed write into a tensor whose elements share memory: eager's result depends on its kernel's order",
}


def deliberate(message: str) -> str | None:
    """Why a refusal with this message is deliberate, or None."""
    return next((why for pat, why in DELIBERATE.items() if re.search(pat, message)), None)


def run_seed(seed: int, inductor_every: int) -> list[dict]:
    """One record per cache mode for the program of seed."""
    executors = ("inductor",) if inductor_every and seed % inductor_every == 0 else ()
    prog, records = generate(seed), []
    for mode in CACHE_MODES:
        start = time.perf_counter()
        try:
            report = check_program(prog, mode, executors)
            problems, refused, crash = report.problems, report.refused, None
        except Exception as e:  # the harness itself failed (not jit vs eager): reported as wrong, never hidden
            problems, refused, crash = [(-1, [f"harness raised {type(e).__name__}: {str(e)[:300]}"])], None, True
        seconds = round(time.perf_counter() - start, 2)
        rec = {"seed": seed, "mode": mode, "executors": list(executors), "seconds": seconds}
        if problems:
            rec.update(status="wrong", problem=f"call {problems[0][0]}: {problems[0][1][0][:300]}", crash=bool(crash))
        elif refused:
            cause = _refusal_cause(refused)
            rec.update(status="refused", cause=cause, message=refused[:400], deliberate=deliberate(refused))
        else:
            rec.update(status="ok")
        records.append(rec)
    return records


def _load(path: str) -> list[dict]:
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(records: list[dict]) -> dict:
    runs = len(records)
    seeds = sorted({r["seed"] for r in records})
    refused = [r for r in records if r["status"] == "refused"]
    for r in refused:  # (from the message: records written before a pattern was added count too)
        r["deliberate"] = deliberate(r["message"])
    by_cause: dict[str, dict] = {}
    for r in refused:
        c = by_cause.setdefault(r["cause"], {"count": 0, "deliberate": r.get("deliberate"), "seeds": []})
        c["count"] += 1
        c["seeds"].append([r["seed"], r["mode"]])
    per_mode = {}
    for mode in CACHE_MODES:
        rs = [r for r in records if r["mode"] == mode]
        per_mode[mode] = {s: sum(r["status"] == s for r in rs) for s in ("ok", "wrong", "refused")}
        per_mode[mode]["refused_not_deliberate"] = sum(r["status"] == "refused" and not r.get("deliberate") for r in rs)
    not_deliberate = sum(not r.get("deliberate") for r in refused)
    return {
        "seeds": _ranges(seeds), "programs": len(seeds), "runs": runs,
        "inductor_runs": sum(bool(r["executors"]) for r in records),
        "wrong": [r for r in records if r["status"] == "wrong"],
        "refused": len(refused), "refused_deliberate": len(refused) - not_deliberate,
        "refused_not_deliberate": not_deliberate,
        "refused_not_deliberate_per_100": round(100 * not_deliberate / runs, 3) if runs else 0.0,
        "by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1]["count"])), "per_mode": per_mode,
        "seconds": round(sum(r["seconds"] for r in records), 1),
    }


def _ranges(seeds: list[int]) -> str:
    """'0-999, 1200-1299': the seeds run, as ranges."""
    out, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        out.append(f"{seeds[i]}-{seeds[j]}" if j > i else f"{seeds[i]}")
        i = j + 1
    return ", ".join(out)


def print_summary(s: dict, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"seeds {s['seeds']}: {s['programs']} programs, {s['runs']} runs ({s['inductor_runs']} with inductor), "
      f"{s['seconds']} s of runs")
    p(f"wrong: {len(s['wrong'])}")
    for w in s["wrong"]:
        ex = " --executors inductor" if w["executors"] else ""
        p(f"  seed {w['seed']} {w['mode']!r}{ex}: {w['problem'][:200]}")
        p(f"    reproduce: python -m tests.fuzz --seed {w['seed']} --cache {w['mode']!r}{ex}")
    p(f"refused: {s['refused']} ({s['refused_deliberate']} deliberate, {s['refused_not_deliberate']} not: "
      f"{s['refused_not_deliberate_per_100']} per 100 runs)")
    for cause, c in s["by_cause"].items():
        tag = "deliberate" if c["deliberate"] else "NOT deliberate"
        seeds = ", ".join(f"{sd} {m.replace(' values', '')}" for sd, m in c["seeds"][:6])
        p(f"  {c['count']:5d}  [{tag}] {cause}\n         e.g. {seeds}")
    for mode, counts in s["per_mode"].items():
        p(f"  {mode!r}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def _work(args):
    seed, inductor_every = args
    return run_seed(seed, inductor_every)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--inductor-every", type=int, default=10, help="seeds divisible by this run with Inductor (0: none)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--out", default="", help="JSON lines, one record per run (appended; seeds in it are skipped)")
    p.add_argument("--summary-json", default="", help="write the summary as JSON here")
    p.add_argument("--seeds", default="", help="comma-separated seeds to run (instead of --start/--count)")
    p.add_argument("--merge", nargs="*", help="only summarize these record files (a later file's record of a seed and "
                   "cache mode replaces an earlier one's: a rerun of some seeds with newer code)")
    opts = p.parse_args(argv)
    if opts.merge:
        records = list({(r["seed"], r["mode"]): r for path in opts.merge for r in _load(path)}.values())
    else:
        from jitcore.ir import lint
        lint.CHECK = True  # every trace checked, as tests/conftest.py does
        done = {r["seed"] for r in _load(opts.out)}
        wanted = [int(x) for x in opts.seeds.split(",") if x] or range(opts.start, opts.start + opts.count)
        seeds = [s for s in wanted if s not in done]
        out = open(opts.out, "a") if opts.out else None
        records, t0 = [], time.perf_counter()
        work = [(s, opts.inductor_every) for s in seeds]
        if opts.jobs > 1:
            import multiprocessing as mp
            pool = mp.get_context("fork").Pool(opts.jobs, maxtasksperchild=100)
            results = pool.imap(_work, work)
        else:
            results = map(_work, work)
        for n, recs in enumerate(results, 1):
            records += recs
            if out:
                out.writelines(json.dumps(r) + "\n" for r in recs)
                out.flush()
            bad = [r for r in recs if r["status"] != "ok"]
            for r in bad:
                print(f"seed {r['seed']} {r['mode']!r}: {r['status']}: {r.get('problem') or r.get('cause')}",
                      file=sys.stderr, flush=True)
            if n % 50 == 0:
                print(f"[{n}/{len(seeds)} seeds, {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        if opts.out:
            out.close()
            wanted = set(wanted)
            records = [r for r in _load(opts.out) if r["seed"] in wanted]
    s = summary(records)
    print_summary(s)
    if opts.summary_json:
        with open(opts.summary_json, "w") as f:
            json.dump(s, f, indent=1)
    return 1 if s["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
