"""The documentation runs: every public name has a docstring with an example, the examples in docstrings (doctest
`>>>`) and the Python blocks of README.md and of every page in docs/ run, and what they print is what the text shows;
nothing in them names a file or a module a clone lacks. tests/docs_blocks.py says how a page's blocks are read
(```python runs, a ```text block after it is its output, `<!-- skip: needs ... -->` before a block skips it).
"""
from __future__ import annotations

import contextlib
import doctest
import inspect
import io
import re

import pytest
import torch

import executors
import jitcore
import jitcore.logs
from executors.base import OperatorExecutor
from jitcore.guards.cache import CACHE_MODES
from tests import docs_blocks

ROOT = docs_blocks.ROOT
README = ROOT / "README.md"

# every public name of jitcore (jitcore.__all__) and of executors' extension points
PUBLIC = {
    **{name: getattr(jitcore, name) for name in jitcore.__all__},
    "OperatorExecutor": executors.OperatorExecutor,
    "FusionExecutor": executors.FusionExecutor,
    "register_implementation": OperatorExecutor.register_implementation,
    "register_operator": OperatorExecutor.register_operator,
    "get_executor": executors.get_executor,
}


class _Checker(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        normalize = docs_blocks.normalize
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


MAX_SKIPPED_BLOCKS = 4  # blocks that need a GPU or several processes; every other Python block runs


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in docs_blocks.PAGES])
def test_the_page_runs_and_prints_what_it_shows(page, tmp_path, monkeypatch):
    """A page's Python blocks run in order in one namespace; each ```text block is what they printed since the last."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {"__name__": "__docs__"}
    printed, since, ran, skipped = io.StringIO(), 0, False, False
    try:
        for block in docs_blocks.blocks((ROOT / page).read_text()):
            if block.lang == "python" and block.skip:
                assert block.skip.startswith("needs"), f"{page}:{block.line}: a skip says what it needs"
                skipped = True
            elif block.lang == "python":
                code = compile("\n" * block.line + block.code, str(ROOT / page), "exec")  # tracebacks: page lines
                with contextlib.redirect_stdout(printed):
                    exec(code, namespace)
                ran = True
            elif block.lang == "text":
                assert ran or skipped, f"{page}:{block.line}: a ```text block shows output, but no block ran before it"
                if ran:
                    got = printed.getvalue()[since:]
                    assert docs_blocks.shows(block.code, got), (
                        f"{page}:{block.line} shows\n{block.code}\nbut its code printed\n{got}")
                since, ran, skipped = len(printed.getvalue()), False, False
    finally:
        jitcore.logs.configure(None)
        if torch.distributed.is_available() and torch.distributed.is_initialized():  # (a page that failed midway)
            torch.distributed.destroy_process_group()


def test_few_blocks_are_skipped_and_every_page_runs_code():
    skips = [f"{p.name}:{b.line}" for p in docs_blocks.PAGES for b in docs_blocks.blocks(p.read_text()) if b.skip]
    assert len(skips) <= MAX_SKIPPED_BLOCKS, skips
    for page in docs_blocks.PAGES:
        kinds = [b.lang for b in docs_blocks.blocks(page.read_text()) if not b.skip]
        if page.parent.name == "docs" and page.name != "README.md":
            assert "python" in kinds, f"{page.name}: a manual page shows at least one program that runs"


def test_the_readers_rules_can_fail():
    """The checks above can fail: a missing line, a wrong number, a text block with nothing run before it."""
    assert docs_blocks.shows("a\n... (took 1.0 ms)\nc", "a\nb (took 0.02 ms)\nc\n")
    assert not docs_blocks.shows("a\nc", "a\nb\nc")
    assert not docs_blocks.shows("x = 3", "x = 4")
    found = docs_blocks.blocks("<!-- skip: needs CUDA -->\n```python\nx\n```\n\n```text\ny\n```\n")
    assert [(b.lang, b.skip, b.line) for b in found] == [("python", "needs CUDA", 2), ("text", None, 6)]


def test_nothing_names_a_file_a_clone_lacks():
    files = docs_blocks.clone_files()
    missing = []
    for page in docs_blocks.PAGES:
        for path, how in docs_blocks.named_paths(page):
            if not docs_blocks.in_clone(path, files) and path not in docs_blocks.PENDING:
                missing.append(f"{page.relative_to(ROOT)}: {how}")
    assert missing == []
    assert {"README.md", "tests/test_docs.py"} <= files  # (the listing works: a check that cannot fail is none)
    text = ("`benchmarks/nothere.py`, `python -m tests.nofuzz`, [x](nope.md), `tests/test_interpreter_*.py`, "
            "[y](traces.md)")
    found = {p: docs_blocks.in_clone(p, files) for p, _ in docs_blocks.named_paths(ROOT / "docs" / "any.md", text)}
    assert found == {"benchmarks/nothere.py": False, "tests/nofuzz.py": False, "docs/nope.md": False,
                     "tests/test_interpreter_*.py": True, "docs/traces.md": True}


def test_the_readme_is_a_front_page_with_the_two_set_up_commands():
    """README.md: at most ~200 lines; the set-up commands CI and the team's instructions use, character for character;
    the supported versions as jitcore/compat.py and pyproject.toml declare them; links into the manual."""
    text = README.read_text()
    assert len(text.splitlines()) <= 210
    demo = "pip install torch==2.13.0 && pip install -e . && python -m benchmarks.demo"
    tests = "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest -q -n 2 tests"
    assert f"\n{demo}\n" in text and f"\n{tests}\n" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\npip install torch==2.13.0 && pip install -e '.[test]'\n" in ci  # .ci/run runs the README's test command
    assert "\npython -m pytest -q -n 2 tests\n" in ci
    from jitcore import compat

    (py0, py1), (t0, t1) = compat.PYTHONS, (compat.OLDEST, compat.NEWEST)
    assert f"Python {py0[0]}.{py0[1]}-{py1[0]}.{py1[1]}" in text and f"torch {t0[0]}.{t0[1]}-{t1[0]}.{t1[1]}" in text
    for page in ("docs/traces.md", "docs/caching.md", "docs/executors.md", "docs/autodiff.md", "docs/packages.md",
                 "docs/distributed.md", "docs/debugging.md", "docs/benchmarks.md", "docs/compatibility.md",
                 "docs/architecture.md"):
        assert f"]({page})" in text, f"the README links {page}"


def test_a_first_run_needs_no_package_the_project_does_not_install():
    """torch warns "Failed to initialize NumPy" at import when numpy is missing, and torch does not depend on it:
    the project does, so `pip install -e . && python -m benchmarks.demo` prints no warning a newcomer cannot act on."""
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"numpy\b", d) for d in project["dependencies"])
