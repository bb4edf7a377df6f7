"""The documentation runs: every public function has a docstring with an example, the examples in docstrings
(doctest `>>>`) and the README's Python blocks run, and what they print is what the text shows. Timings in trace
headers (`(took 0.02 ms)`) and object addresses are normalized before comparing.

README blocks: a ```python block runs (all in one namespace, in order) unless the line before it is
`<!-- doctest: skip -->`; a block that starts with `# Constructed by` is printed output: it must appear in what
the blocks before it printed.
"""
from __future__ import annotations

import contextlib
import doctest
import inspect
import io
import re
from pathlib import Path

import pytest
import torch

import executors
import jitcore
from executors.base import OperatorExecutor
from jitcore.guards.cache import CACHE_MODES

README = Path(__file__).resolve().parent.parent / "README.md"

PUBLIC = {
    **{name: getattr(jitcore, name) for name in (
        "jit", "last_traces", "last_backward_traces", "last_prologue_traces", "last_epilogue_traces",
        "last_compile_stats", "cache_hits", "cache_misses", "cache_miss_reasons", "examine", "explain")},
    "OperatorExecutor": executors.OperatorExecutor,
    "FusionExecutor": executors.FusionExecutor,
    "register_implementation": OperatorExecutor.register_implementation,
    "register_operator": OperatorExecutor.register_operator,
    "get_executor": executors.get_executor,
}


def normalize(text: str) -> str:
    text = re.sub(r"\(took [0-9.]+ ms\)", "(took X ms)", text)
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", text)


class _Checker(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        return super().check_output(normalize(want), normalize(got), optionflags)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_function_has_a_docstring_with_an_example(name):
    doc = inspect.getdoc(PUBLIC[name]) or ""
    assert len(doc.splitlines()) >= 3 and ">>> " in doc, f"{name}: no docstring with an example"


def test_jits_docstring_lists_every_option_with_its_values():
    doc = inspect.getdoc(jitcore.jit)
    options = [p.name for p in inspect.signature(jitcore.jit).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert {"executors", "cache", "keep_inputs", "verify"} <= set(options)
    for option in options:  # every option, including ones added later
        assert f"\n{option}: " in doc, option
    for value in (*CACHE_MODES, "int", "all", "none", "inductor", "nvfuser", "torch", "python"):
        assert f'"{value}"' in doc, value


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_docstring_examples_print_what_they_show(name):
    obj = PUBLIC[name]
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={"torch": torch, "jitcore": jitcore})
    runner = doctest.DocTestRunner(checker=_Checker(), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    for test in tests:
        runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()
    assert runner.tries > 0


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """("run" | "skip" | "output", code) for each ```python block of the README, in order."""
    out = []
    for m in re.finditer(r"(?:^(<!-- doctest: skip -->)\n)?^```python\n(.*?)^```", text, re.M | re.S):
        code = m.group(2)
        kind = "skip" if m.group(1) else "output" if code.startswith("# Constructed by") else "run"
        out.append((kind, code))
    return out


def test_the_readme_runs_and_prints_what_it_shows():
    blocks = readme_blocks(README.read_text())
    assert [k for k, _ in blocks].count("run") >= 1 and [k for k, _ in blocks].count("output") >= 2
    namespace: dict = {"__name__": "__readme__"}
    printed = io.StringIO()
    for kind, code in blocks:
        if kind == "run":
            with contextlib.redirect_stdout(printed):
                exec(compile(code, str(README), "exec"), namespace)
        elif kind == "output":
            assert normalize(code.strip()) in normalize(printed.getvalue()), (
                f"the README shows\n{code}\nbut its code printed\n{printed.getvalue()}")


def test_a_first_run_needs_no_package_the_project_does_not_install():
    """torch warns "Failed to initialize NumPy" at import when numpy is missing, and torch does not depend on it:
    the project does, so `pip install -e . && python -m benchmarks.demo` prints no warning a newcomer cannot act on."""
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"numpy\b", d) for d in project["dependencies"])
