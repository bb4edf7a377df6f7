"""benchmarks/demo.py, the README's first command: it fits on a screen by default (the model, the start of its
forward program and where the rest is, the passes, the check against eager, the timing table) and prints every
program in full with --traces."""
from __future__ import annotations

import contextlib
import io

import jitcore
from benchmarks import demo


def run_demo(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        demo.main([*argv, "--rounds", "2"])
    return out.getvalue()


def test_the_demo_fits_on_a_screen_and_says_where_the_rest_is():
    text = run_demo()
    lines = text.splitlines()
    assert len(lines) <= 120, f"the demo printed {len(lines)} lines"
    for section in ("The model", "The forward program that runs", "The passes", "Check against eager", "Timing"):
        assert any(line.startswith(section) for line in lines), section
    assert "more lines: `python -m benchmarks.demo --traces` prints every program in full" in text
    assert "forward  Interpretation (jitcore bytecode interpreter)" in text and "backward Delete Last Used" in text
    assert "results match eager: logits, loss and the gradients of all 28 parameters" in text
    assert any(line.startswith("forward + backward") for line in lines) and "jit / eager (95% interval)" in text


def test_the_demo_prints_every_program_in_full_with_traces(monkeypatch):
    made = []
    jit = jitcore.jit
    monkeypatch.setattr(jitcore, "jit", lambda *a, **k: made.append(jit(*a, **k)) or made[-1])
    text = run_demo("--traces")
    (jmodel,) = made
    for program in (jitcore.last_prologue_traces(jmodel)[-1], jitcore.last_traces(jmodel)[0],
                    jitcore.last_traces(jmodel)[-1], jitcore.last_backward_traces(jmodel)[-1]):
        body = str(program).split("\n", 1)[1]  # (the header's time differs between the compiles of later calls)
        assert body in text
    assert "more lines" not in text and len(text.splitlines()) > 500
