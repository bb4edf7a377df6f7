"""The layering the project promises (DESIGN.md, jitcore/README.md), checked on the source: stages import only
lower stages, no import cycle between stages, few imports inside functions (each with its reason), files under 800
lines. `python -m tests.import_graph` prints the same facts as a report.
"""
import pathlib
import re

import pytest

from tests import import_graph as g

ROOT = pathlib.Path(__file__).resolve().parents[1]
INNER_IMPORT_BUDGET = 20


@pytest.fixture(scope="module")
def found():
    return g.imports(ROOT)


def test_every_module_belongs_to_a_stage(found):
    stages = {g.stage_of(m) for m in g.project_files(ROOT)}
    assert stages <= set(g.RANKS), f"modules outside the known stages: {stages - set(g.RANKS)}"


def test_no_cycle_between_stages(found):
    assert g.cycles(g.stage_graph(found)) == []


def test_lower_stages_never_import_higher_ones(found):
    up = [f"{i.importer}:{i.line} imports {i.imported}" for i in g.upward(found)]
    assert up == []


def test_the_ir_imports_only_the_ir_errors_and_compat(found):
    bad = [f"{i.importer}:{i.line} imports {i.imported}" for i in found if g.stage_of(i.importer) == "jitcore.ir"
           and g.stage_of(i.imported) not in ("jitcore.ir", "jitcore.errors", "jitcore.compat")]
    assert bad == []


def test_transforms_and_executors_are_independent(found):
    bad = [f"{i.importer}:{i.line} imports {i.imported}" for i in found
           if {g.stage_of(i.importer), g.stage_of(i.imported)} == {"transforms", "executors"}]
    assert bad == []


def test_few_imports_inside_functions_each_with_its_reason(found):
    inner = g.in_functions(found)
    assert len(inner) <= INNER_IMPORT_BUDGET, "\n".join(f"{i.importer}:{i.line} -> {i.imported}" for i in inner)
    silent = [f"{i.importer}:{i.line} -> {i.imported}" for i in inner if not i.commented]
    assert silent == [], "an import inside a function needs a comment saying why it is not at module level"


def test_no_file_over_800_lines():
    assert g.long_files(ROOT) == []


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path):
    """The checks above can fail: a lower stage importing a higher one is reported, and so is the cycle."""
    for name, text in {"jitcore/__init__.py": "", "jitcore/ir/__init__.py": "",
                       "jitcore/ir/proxies.py": "def f():\n    from jitcore.ops import prims\n",
                       "jitcore/ops/__init__.py": "", "jitcore/ops/prims.py": "from jitcore.ir import proxies\n",
                       "executors/__init__.py": "", "transforms/__init__.py": ""}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = g.imports(tmp_path)
    assert g.cycles(g.stage_graph(found)) == [["jitcore.ir", "jitcore.ops"]]
    assert [(i.importer, i.imported) for i in g.upward(found)] == [("jitcore.ir.proxies", "jitcore.ops.prims")]
    assert [i.commented for i in g.in_functions(found)] == [False]


def test_the_layout_is_described_in_the_clone():
    text = (ROOT / "jitcore" / "README.md").read_text()
    for folder in ("ir/", "ops/", "interpreter/", "guards/", "frontend/", "runtime/", "debug/", "api.py", "transforms/",
                   "executors/"):
        assert folder in text, f"jitcore/README.md does not describe {folder}"
    stages = {g.stage_of(m) for m in g.project_files(ROOT)}
    undescribed = [s for s in stages if s.startswith("jitcore.")
                   and not re.search(rf"(^|[\s/`(]){s.split('.')[1]}(/|\.py)", text, re.M)]
    assert undescribed == [], f"jitcore/README.md does not describe {undescribed}"


LOOSE_MODULES_BUDGET = 8  # DESIGN.md: the faces (api, packages, explanation, pipeline) and the leaves (errors, ...)


def test_few_loose_modules_in_jitcore():
    """Everything but the faces and the leaves every stage may use lives in its stage's folder."""
    loose = sorted(p.name for p in (ROOT / "jitcore").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= LOOSE_MODULES_BUDGET, f"{len(loose)} modules directly in jitcore/: {loose}"


def test_no_two_modules_share_a_basename():
    """A basename names one role: `fsdp.py` in three folders meant three different things to a reader."""
    seen: dict[str, list[str]] = {}
    for pkg in g.PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            if p.name != "__init__.py":
                seen.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    assert {n: ps for n, ps in seen.items() if len(ps) > 1} == {}


def test_every_guard_kind_row_is_complete():
    """jitcore/guards/kinds.py: every Guards field is recorded by exactly one kind, and every kind says where it is
    recorded, where and how the prologue checks it, its miss text and its scope (adding a kind is a field and a row
    there, its recording in the frontend, and a test)."""
    import dataclasses

    from jitcore.guards import kinds

    names = [k.name for k in kinds.KINDS]
    assert len(names) == len(set(names))
    owners = [f for k in kinds.KINDS for f in k.fields]
    assert sorted(owners) == sorted(f.name for f in dataclasses.fields(kinds.Guards)), "a Guards field without a row"
    for k in kinds.KINDS:
        assert k.place in kinds.PLACES and k.recorded and k.miss and k.scope, k.name
        if k.place == "folded":
            assert kinds.BY_NAME[k.folded_into].place != "folded", k.name
            continue
        assert callable(k.entries) and callable(k.check), k.name
        assert (k.module_rooted is None) == (k.scope == "per call" or k.place != "path"), k.name
        assert not k.binds_parent or k.place == "path", k.name
        # a relation check names tensor inputs (predicates: size symbols), which must then be bound by name
        assert k.place != "relation" or k.name == "predicates" or k.reads is not kinds._nothing, k.name


def test_the_prologue_loops_over_the_guard_kinds():
    """The prologue and the module split take what differs between kinds from the rows, not from a chain of tests on
    the kind's name; the guard record lives with the rows, not in the frontend."""
    import re

    for name in ("prologue.py", "module_guards.py"):
        text = (ROOT / "jitcore" / "guards" / name).read_text()
        assert not re.search(r"\bkind(\.name)?\s*(==|!=|in|not in|is)\s*[(\[{'\"]", text), \
            f"guards/{name} branches on a kind's name"
        assert not re.search(r"guards\.(values|objects|types|lengths|presence|distinct|predicates|data)\b", text), \
            f"guards/{name} reads a Guards field directly (kinds.py's rows say how)"
    homes = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("jitcore/**/*.py") if "\nclass Guards" in p.read_text()]
    assert homes == ["jitcore/guards/kinds.py"]


def test_the_interpreter_binds_its_hooks_without_fallbacks():
    """interpreter/protocol.py declares every hook with its one default (InterpreterHooks); the interpreter binds or
    calls them directly, never through getattr with a default; jitcore's context implements the protocol."""
    import inspect
    import re

    from jitcore.frontend.tracing import JitContext
    from jitcore.interpreter.protocol import HOOKS, InterpreterHooks

    for path in (ROOT / "jitcore" / "interpreter").glob("*.py"):
        assert not re.search(r"getattr\((self\.)?(rt\.)?(type\()?ctx\)?,[^)]*,", path.read_text()), \
            f"{path.name}: a context hook looked up with a default (declare it in InterpreterHooks)"
    runtime = (ROOT / "jitcore" / "interpreter" / "run.py").read_text() + \
        (ROOT / "jitcore" / "interpreter" / "__init__.py").read_text()
    assert set(HOOKS) == {h for h in HOOKS if f"ctx.{h}" in runtime or f'"{h}"' in runtime}
    assert issubclass(JitContext, InterpreterHooks)
    for hook in HOOKS:  # an override takes the protocol's arguments
        ours = getattr(JitContext, hook)
        if ours is not getattr(InterpreterHooks, hook):
            declared = inspect.signature(getattr(InterpreterHooks, hook)).parameters
            assert list(inspect.signature(ours).parameters) == list(declared), hook
