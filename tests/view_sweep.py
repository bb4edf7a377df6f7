"""A sweep of the views torch's ops return, against eager: for each OpInfo sample (float32, CPU) whose outputs share
memory with an input, write through each such output, write the input and read the outputs, and write the input and
return the outputs themselves, under jitcore.jit in each cache mode. Each run matches eager, is refused, or is WRONG
(a silent wrong answer: the one defect class jitcore never ships).

    python -m tests.view_sweep [--cache MODE ...] [--ops name,name] [--samples N] [--quiet]
"""
from __future__ import annotations

import argparse
import collections
import itertools
import warnings

import torch
from torch.utils import _pytree as pytree

import jitcore
from jitcore import compat
from tests.fuzz import CACHE_MODES
from tests.test_opinfo import _call as _call_of  # (each sample tensor an argument)


def _tensors(out) -> list:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _shares(o, inputs) -> bool:
    if o.numel() == 0 or o.layout != torch.strided:
        return False
    p = o.untyped_storage().data_ptr()
    return any(i.numel() and i.layout == torch.strided and i.untyped_storage().data_ptr() == p for i in inputs)


def _program(fn, k):
    """The function under test: `k` an output position (write through it), "base" (write the first input, read the
    outputs) or "returned" (write the first input, return the outputs themselves)."""
    def g(*ts):
        outs = _tensors(fn(*ts))
        if k in ("base", "returned"):
            ts[0].add_(1)
            return tuple(outs) if k == "returned" else tuple(o + 0 for o in outs)
        outs[k].mul_(2).add_(1)
        return tuple(o + 0 for o in outs)
    return g


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _run(op, si, fn, tensors, k, modes, counts, found):
    g = _program(fn, k)
    try:
        e_in = [t.clone() for t in tensors]
        e_out = g(*e_in)
    except Exception:
        return  # eager refuses it (a write into an expanded view, ...)
    for mode in modes:
        key = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}[{si}] {k} ({mode})"
        try:
            jf = jitcore.jit(g, cache=mode)
            for _ in range(2):
                j_in = [t.clone() for t in tensors]
                j_out = jf(*j_in)
        except Exception as e:
            counts["refused"] += 1
            found.append(("refused", key, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
            continue
        ok = _same(e_in, j_in) and _same(e_out, j_out)
        counts["ok" if ok else "WRONG"] += 1
        if not ok:
            found.append(("WRONG", key, ""))


def sweep(modes=CACHE_MODES, ops=None, samples=4):
    """(counts, [(verdict, case, detail), ...]) over op_db's ops (those named in `ops`, when given)."""
    common = compat.opinfo_module()
    counts, found = collections.Counter(), []
    for op in common.op_db:
        if (ops and op.name not in ops) or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        try:
            cases = list(itertools.islice(op.sample_inputs("cpu", torch.float32), samples))
        except Exception:
            continue
        for si, s in enumerate(cases):
            fn, tensors = _call_of(op, s)
            try:
                ins = [t.clone() for t in tensors]
                outs = _tensors(fn(*ins))
            except Exception:
                continue
            aliasing = [k for k, o in enumerate(outs) if _shares(o, ins) and o.dtype.is_floating_point]
            for k in (aliasing + ["base", "returned"]) if aliasing else ():
                _run(op, si, fn, tensors, k, modes, counts, found)
    return counts, found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", action="append", choices=CACHE_MODES, help="cache modes (default: all three)")
    p.add_argument("--ops", help="comma-separated OpInfo names (default: every op)")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--quiet", action="store_true", help="print only WRONG runs and the counts")
    opts = p.parse_args()
    warnings.filterwarnings("ignore")
    counts, found = sweep(opts.cache or CACHE_MODES, set(opts.ops.split(",")) if opts.ops else None, opts.samples)
    for verdict, key, detail in found:
        if verdict == "WRONG" or not opts.quiet:
            print(verdict, key, detail)
    print(dict(counts))
    return 1 if counts["WRONG"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
