"""Stable names (issue 18 item 4): the same program traced in another process prints the same text, whatever the
process's string-hash seed (set and dict orders of strings differ between processes), and the computation's
arguments are named in signature order, not in the order the function first uses them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import jitcore

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = r'''
import re, torch, jitcore
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.LayerNorm(4), torch.nn.Dropout(0.0))
jm = jitcore.jit(m, cache="symbolic values")
jm(torch.randn(2, 3, 4)).sum().backward()
TABLE = {"k": 2, "j": 3}
def f(a, b, *, c=None):
    y = b * TABLE["k"] + a.sum() * TABLE["j"]
    return y if c is None else y + c
jf = jitcore.jit(f)
jf(torch.randn(3), torch.randn(3), c=torch.randn(3))
traces = [jitcore.last_traces(jm)[-1], jitcore.last_backward_traces(jm)[-1], *jitcore.last_prologue_traces(jm),
          jitcore.last_traces(jf)[-1], *jitcore.last_prologue_traces(jf)]
print(re.sub(r"took [0-9.]+ ms", "took", "\n".join(map(str, traces))))
'''


def _run(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=300).stdout


def test_same_text_in_another_process_with_another_hash_seed():
    first, second = _run(1), _run(2)
    assert first and "def computation" in first
    assert first == second


def test_arguments_are_named_in_signature_order_not_first_use():
    def uses_b_first(a, b):
        return b.sin() + a

    def uses_a_first(a, b):
        return a + b.sin()

    headers = []
    for fn in (uses_b_first, uses_a_first):
        jf = jitcore.jit(fn)
        jf(torch.randn(2), torch.randn(3, 2))
        trace = jitcore.last_traces(jf)[-1]
        headers.append([(a.name, tuple(a.shape)) for a in trace.args])
    assert headers[0] == headers[1] == [("t0", (2,)), ("t1", (3, 2))]
