"""Logging (jitcore/logs.py): the JITCORE_LOGS topics through Python's logging, the user's call site in recompile
records and in the many-entries warning, opaque fallbacks logged once, final programs logged, and the progress of a
long compile (only where it is wanted).
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

import jitcore
from jitcore import logs, pipeline
from jitcore.guards import cache as cache_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def topics():
    """configure(spec) -> the stream the records go to; the process's own configuration is restored after."""
    def turn_on(spec):
        stream = io.StringIO()
        logs.configure(spec, stream=stream)
        return stream

    yield turn_on
    logs.configure(os.environ.get(logs.ENV))


def _add(a, b):
    return a + b


def test_a_recompile_logs_the_callers_line_and_the_reason(topics):
    out = topics("recompiles")
    jf = jitcore.jit(_add)
    jf(torch.randn(2), torch.randn(2))
    line = sys._getframe().f_lineno + 1
    jf(torch.randn(3), torch.randn(3))
    records = out.getvalue().splitlines()
    assert len(records) == 2, records
    assert records[0].startswith("[jitcore.guards recompiles] compiling _add at ")
    assert f"{__file__}:{line}: " in records[1] and "miss 2" in records[1]
    assert "expected a tensor cpu f32[2]" in records[1]
    assert "jitcore/api.py" not in out.getvalue() and "jitcore/pipeline.py" not in out.getvalue()


def test_topics_not_turned_on_log_nothing(topics):
    out = topics("fallbacks")
    jf = jitcore.jit(_add)
    jf(torch.randn(2), torch.randn(2))
    jf(torch.randn(3), torch.randn(3))
    assert out.getvalue() == ""
    assert not logs.enabled("recompiles") and logs.enabled("fallbacks")


def test_traces_logs_each_final_program_and_debug_every_pass(topics):
    out = topics("traces")
    jf = jitcore.jit(_add)
    jf(torch.randn(2, requires_grad=True), torch.randn(2))
    text = out.getvalue()
    assert text.count("[jitcore.api traces]") == 2  # the forward and the backward that run
    assert "def computation(" in text or "def forward(" in text
    assert "def backward(" in text
    out = topics("+traces")
    jf = jitcore.jit(_add)
    jf(torch.randn(2, requires_grad=True), torch.randn(2))
    n = len(jitcore.last_traces(jf)) + len(jitcore.last_backward_traces(jf))
    assert out.getvalue().count("[jitcore.api traces]") == n


def test_guards_and_compile_times(topics):
    out = topics("guards,compile_times")
    jf = jitcore.jit(_add)
    jf(torch.randn(2), torch.randn(2))
    text = out.getvalue()
    assert "[jitcore.guards guards]" in text and "def prologue(fn, args, kwargs)" in text
    assert "[jitcore.api compile_times] _add: " in text and "interpret " in text and "guards " in text


def _twice(x):
    return torch.ops.jitcore_logs_test.twice(x)


@torch.library.custom_op("jitcore_logs_test::twice", mutates_args=())
def _twice_op(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice_op.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_fallback_to_an_opaque_torch_call_is_logged_once(topics):
    out = topics("fallbacks")
    for _ in range(2):  # two jitted functions, two compiles each: one record
        jf = jitcore.jit(_twice)
        torch.testing.assert_close(jf(torch.ones(2)), torch.full((2,), 2.0))
        jf(torch.ones(3))
    records = [r for r in out.getvalue().splitlines() if "twice" in r]
    assert len(records) == 1, out.getvalue()
    assert "opaque torch call" in records[0] and f"{__file__}:" in records[0]  # the line in _twice


def test_unknown_topic_warns_and_lists_the_valid_ones(topics):
    with pytest.warns(UserWarning, match="unknown topic 'recompile'.*recompiles, guards, traces"):
        topics("recompile,traces")
    assert logs.enabled("traces") and not logs.enabled("recompiles")


def test_the_environment_variable_turns_topics_on():
    code = ("import torch, jitcore\n"
            "jf = jitcore.jit(lambda a: a + 1)\n"
            "jf(torch.ones(2))\n"
            "jf(torch.ones(3))\n")
    env = {**os.environ, "JITCORE_LOGS": "recompiles,+nonsense", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "unknown topic 'nonsense'" in done.stderr
    assert "[jitcore.guards recompiles] recompiling (miss 2) <lambda> at <string>:4: " in done.stderr


def test_the_many_entries_warning_of_a_module_names_the_users_call_site(monkeypatch):
    monkeypatch.setattr(cache_mod, "ENTRY_WARN_LIMIT", 1)
    jm = jitcore.jit(torch.nn.Linear(2, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jm(torch.randn(1, 2))
        jm(torch.randn(3, 2))
    assert [w.filename for w in caught if "compiled 2 times" in str(w.message)] == [__file__]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _slow_compiles(monkeypatch, seconds=0.3):
    compile_entry = pipeline.compile_entry

    def slow(*args, **kwargs):
        logs.stage("interpret")
        time.sleep(seconds)
        return compile_entry(*args, **kwargs)

    monkeypatch.setattr(pipeline, "compile_entry", slow)
    monkeypatch.setattr(logs, "PROGRESS_DELAY_S", 0.05)
    monkeypatch.setattr(logs, "PROGRESS_EVERY_S", 10.0)


def test_a_long_compile_shows_its_stage_on_a_terminal(monkeypatch, topics):
    topics("")
    _slow_compiles(monkeypatch)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    jitcore.jit(_add)(torch.randn(2), torch.randn(2))
    text = sys.stderr.getvalue()
    assert "jitcore: compiling _add: interpret, 0 fusion regions compiled" in text
    assert text.rstrip().endswith("s") and "jitcore: compiled _add in " in text


@pytest.mark.parametrize("case", ["piped", "ci", "turned off"])
def test_no_progress_when_piped_in_ci_or_turned_off(monkeypatch, topics, case):
    topics("-progress" if case == "turned off" else "")
    _slow_compiles(monkeypatch)
    if case == "ci":
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO() if case == "piped" else _Terminal())
    jitcore.jit(_add)(torch.randn(2), torch.randn(2))
    assert sys.stderr.getvalue() == ""


def test_a_fast_compile_shows_nothing(monkeypatch, topics):
    topics("progress")  # asked for explicitly (shown even when piped), but the compile ends before the delay
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    jitcore.jit(_add)(torch.randn(2), torch.randn(2))
    assert sys.stderr.getvalue() == ""
