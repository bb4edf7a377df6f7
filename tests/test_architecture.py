"""The layering the project promises (DESIGN.md, jitcore/README.md), checked on the source: stages import only
lower stages, no import cycle between stages, few imports inside functions (each with its reason), files under 800
lines, the IR's tables written only through the register_* functions of their own modules. `python -m
tests.import_graph` prints the same facts as a report (`python -m tests.table_writes`: the IR's tables and writers).
"""
import ast
import pathlib
import re

import pytest

from tests import import_graph as g
from tests import table_writes as w

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


# -- the IR's tables are filled only through the register_* function of the module that owns each ------------------
def test_ir_tables_are_written_only_by_their_own_module():
    """No module writes a table of jitcore/ir directly (`T[k] = v`, `T.update(...)`, `T.add(...)`, rebinding it):
    it calls the owner's register_* function, which checks the entry (tests/table_writes.py finds the tables)."""
    assert w.writes(ROOT) == []


def test_the_ir_rebinds_no_module_global():
    """IR state that changes while tracing lives in a ContextVar (the autocast depth), and a registered policy in a
    table its register_* function fills: no `global` statement anywhere in jitcore/ir."""
    found = [f"{p.relative_to(ROOT)}:{n.lineno} global {', '.join(n.names)}"
             for p in sorted((ROOT / "jitcore" / "ir").rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Global)]
    assert found == []


def test_the_table_checker_sees_a_direct_write(tmp_path):
    """The check above can fail: a write from outside the owner, in each form, is reported; the owner's is not."""
    files = {"jitcore/__init__.py": "", "jitcore/ir/__init__.py": "", "executors/__init__.py": "",
             "transforms/__init__.py": "", "jitcore/ops/__init__.py": "",
             "jitcore/ir/proxies.py": "TABLE: dict = {}\nCONST = 3\n\ndef register(k, v):\n    TABLE[k] = v\n",
             "jitcore/ops/a.py": "from jitcore.ir.proxies import TABLE, CONST\nTABLE['x'] = 1\nTABLE.update(y=2)\n"
                                 "print(CONST)\n",
             "jitcore/ops/b.py": "from jitcore.ir import proxies as p\np.TABLE.setdefault('z', 3)\np.TABLE = {}\n",
             "executors/c.py": "import jitcore.ir.proxies\ndel jitcore.ir.proxies.TABLE['x']\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert set(w.ir_tables(tmp_path)) == {("jitcore.ir.proxies", "TABLE")}
    assert w.writes(tmp_path) == sorted([
        "executors/c.py:2 writes jitcore.ir.proxies.TABLE", "jitcore/ops/a.py:2 writes jitcore.ir.proxies.TABLE",
        "jitcore/ops/a.py:3 writes jitcore.ir.proxies.TABLE", "jitcore/ops/b.py:2 writes jitcore.ir.proxies.TABLE",
        "jitcore/ops/b.py:3 writes jitcore.ir.proxies.TABLE"])


def test_a_bad_registration_raises_and_leaves_the_table_as_it_was():
    import torch

    import jitcore  # noqa: F401  (the ops register into the IR)
    from jitcore.ir import codegen, proxies, symbol
    from jitcore.ops import autocast
    from jitcore.ops.registry import OPS, prim

    before = dict(proxies.TENSOR_METHODS), dict(codegen.NAMESPACE_IMPORTS), dict(symbol.AUTOCAST_POLICY)
    add = proxies.TENSOR_METHODS["add"]
    with pytest.raises(ValueError, match="Tensor method 'add' is registered already"):
        proxies.register_tensor_method("add", torch.add)  # a duplicate, not marked replace=True
    with pytest.raises(ValueError, match="Tensor property 'T' is registered already"):
        proxies.register_tensor_property("T", torch.t)
    with pytest.raises(TypeError, match="expected a callable"):
        proxies.register_tensor_method("no_such_method_yet", "torch.add")  # a value of the wrong type
    with pytest.raises(TypeError, match="non-empty str"):
        proxies.register_tensor_method(7, torch.add)  # a key of the wrong type
    with pytest.raises(ValueError, match="unknown IR op role"):
        proxies.register_ir_op("no_such_role", torch.add)
    with pytest.raises(ValueError, match="IR op role 'reshape' is registered already"):
        proxies.register_ir_op("reshape", torch.reshape)
    with pytest.raises(ValueError, match="fallback 'opaque' is registered already"):
        proxies.METHOD_FALLBACKS.register("opaque", lambda name: None)
    with pytest.raises(ValueError, match="trace namespace 'prims' is registered already"):
        codegen.register_namespace_import("prims", "import something_else as prims")
    codegen.register_namespace_import("prims", codegen.namespace_import("prims"))  # the same line again: no-op
    with pytest.raises(KeyError):  # an autocast policy naming an op that is not defined
        symbol.register_autocast([OPS["ltorch.no_such_op"]], [], autocast.autocast_args, replace=True)
    with pytest.raises(TypeError, match="as Symbols"):  # an op id where the op is expected
        symbol.register_autocast(["ltorch.matmul"], [], autocast.autocast_args, replace=True)
    with pytest.raises(ValueError, match="autocast policy is registered already"):
        symbol.register_autocast([OPS["ltorch.matmul"]], [], autocast.autocast_args)
    with pytest.raises(ValueError, match=r"op prims\.add is defined twice"):  # a prim defined again
        prim("prims.add", kernel=torch.add)(lambda a, b: a)
    assert proxies.TENSOR_METHODS["add"] is add
    assert (dict(proxies.TENSOR_METHODS), dict(codegen.NAMESPACE_IMPORTS), dict(symbol.AUTOCAST_POLICY)) == before
