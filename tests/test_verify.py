"""The accuracy check (jit(fn, verify=True), jitcore/debug/verify.py): correct programs pass without doubling anything
the
caller sees (random stream, module state, inputs written in place); a wrong kernel is caught with the first
differing line, the user's source line and a repro script; calls that write outside their arguments are not re-run.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jitcore
from executors.base import OperatorExecutor
from jitcore.ops import ltorch

# an executor whose sin is wrong by 1e-2: what the check must catch
wrong_ex = OperatorExecutor("wrong_sin_ex")
wrong_ex.register_implementation(ltorch.sin, lambda x: torch.sin(x) + 1e-2, name="bad_sin")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.3),
                               torch.nn.Linear(8, 2))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_a_correct_module_passes_and_nothing_happens_twice(cache):
    jitted, eager = _net(), _net()
    jm = jitcore.jit(jitted, verify=2, cache=cache)
    for n in (6, 6, 6, 7):
        torch.manual_seed(n)
        x = torch.randn(n, 5)
        torch.manual_seed(100 + n)
        got = jm(x)
        got.sum().backward()
        after_jit = torch.rand(1)
        torch.manual_seed(100 + n)
        want = eager(x)
        want.sum().backward()
        after_eager = torch.rand(1)
        torch.testing.assert_close(got, want)  # dropout's mask: the same random stream, drawn once
        assert torch.equal(after_jit, after_eager)  # the check left the stream where one call leaves it
    # running statistics advanced once per call, as eager's
    torch.testing.assert_close(jitted[1].running_mean, eager[1].running_mean)
    assert jitted[1].num_batches_tracked.item() == eager[1].num_batches_tracked.item() == 4
    for p, q in zip(jitted.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def _writes_input(x, y):
    x.add_(y)
    return x * 2


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_in_place_writes_happen_once(cache):
    jf = jitcore.jit(_writes_input, verify=2, cache=cache)
    for n in (3, 3, 4):  # checked, checked, a new shape (a new entry where sizes are constants)
        x, y = torch.ones(n), torch.full((n,), 2.0)
        out = jf(x, y)
        assert torch.equal(x, torch.full((n,), 3.0)) and torch.equal(out, torch.full((n,), 6.0))
    base = torch.ones(2, 4)
    with torch.no_grad():  # a view written in place, under no_grad
        out = jf(base[:, 1], torch.full((2,), 2.0))
    assert torch.equal(base[:, 1], torch.full((2,), 3.0)) and torch.equal(base[:, 0], torch.ones(2))


def _uses_sin(x):
    h = x * 2
    s = torch.sin(h)  # the line the report must name
    return s + 1


def test_a_wrong_kernel_is_caught_with_its_line_and_a_repro():
    jf = jitcore.jit(_uses_sin, executors=[wrong_ex], verify=True)
    x = torch.randn(4)
    with pytest.raises(jitcore.VerificationError) as caught:
        jf(x)
    text = str(caught.value)
    assert "output[0]" in text and "first differing line" in text and "sin" in text
    assert "s = torch.sin(h)  # the line the report must name" in text and "test_verify.py" in text
    folder = Path(text.split("a repro: python ")[1].split()[0]).parent
    assert "bad_sin" in (folder / "programs.py").read_text() and "wrong_sin_ex" in (folder / "repro.py").read_text()
    args, _ = torch.load(folder / "inputs.pt")
    assert torch.equal(args[0], x)  # the failing call's own inputs


def test_a_wrong_gradient_is_caught():
    bad = OperatorExecutor("wrong_cos_ex")
    bad.register_implementation(ltorch.cos, lambda x: torch.cos(x) * 1.5, name="bad_cos")
    jf = jitcore.jit(lambda x: torch.sin(x).sum(), executors=[bad], verify=True)
    with pytest.raises(jitcore.VerificationError, match="gradient"):
        jf(torch.randn(4, requires_grad=True))


def test_only_the_first_calls_of_each_entry_are_checked():
    jf = jitcore.jit(_uses_sin, executors=[wrong_ex], verify=1)
    with pytest.raises(jitcore.VerificationError):
        jf(torch.randn(4))
    jf(torch.randn(4))  # the entry's one check is spent: it runs unchecked
    with pytest.raises(jitcore.VerificationError):
        jf(torch.randn(5))  # a new entry is checked


LOG = []


def _logs(x):
    LOG.append(1)
    return x + 1


def test_a_function_writing_outside_its_arguments_is_not_run_twice():
    LOG.clear()
    jf = jitcore.jit(_logs, verify=True)
    with pytest.warns(UserWarning, match="not checked"):
        jf(torch.ones(2))
    assert LOG == [1]


def test_off_by_default_and_from_the_environment(monkeypatch):
    assert type(jitcore.jit(_uses_sin)).__name__ == "JitFunction"
    monkeypatch.setenv("JITCORE_VERIFY", "1")
    jf = jitcore.jit(_uses_sin, executors=[wrong_ex])
    with pytest.raises(jitcore.VerificationError):
        jf(torch.randn(3))
    with pytest.raises(ValueError, match="verify"):
        jitcore.jit(_uses_sin, verify="sometimes")


def test_the_repro_of_a_call_with_an_executor_of_your_own_says_how_to_run_it(tmp_path):
    import os
    import subprocess
    import sys

    # made here, as in a notebook: a new process running the repro script does not know the executor's name
    mine = OperatorExecutor("my_wrong_sin_ex")
    mine.register_implementation(ltorch.sin, lambda x: torch.sin(x) + 1e-2, name="bad_sin")

    def uses_sin(x):
        return torch.sin(x * 2) + 1

    jf = jitcore.jit(uses_sin, executors=[mine], verify=True)
    with pytest.raises(jitcore.VerificationError) as caught:
        jf(torch.randn(4))
    script = caught.value.args[0].split("a repro: python ")[1].split()[0]
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, script], env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1 and "unknown executor 'my_wrong_sin_ex'" in out.stderr, out.stdout + out.stderr
    assert "an executor of your own: import the code that creates it at the top of this script" in out.stderr
