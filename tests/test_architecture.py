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


def test_the_pipeline_is_the_one_module_importing_jitcore_transforms_and_executors(found):
    """DESIGN.md: jitcore/pipeline.py assembles the stages; no other module of jitcore imports transforms, and none
    imports transforms and executors together."""
    reach = {}
    for i in found:
        reach.setdefault(i.importer, set()).add(g.stage_of(i.imported))
    assert {m for m, stages in reach.items() if m.startswith("jitcore") and "transforms" in stages} == {
        "jitcore.pipeline"}
    assert {m for m, stages in reach.items() if {"transforms", "executors"} <= stages} == {"jitcore.pipeline"}


def test_api_keeps_the_faces_only():
    """jitcore/api.py: jit(), JitFunction, JitModule and the run path of a call; the compile is pipeline.py's."""
    lines = len((ROOT / "jitcore" / "api.py").read_text().splitlines())
    assert lines < 350, f"jitcore/api.py has {lines} lines: the compile stages belong in jitcore/pipeline.py"
    assert "pipeline.py" in (ROOT / "jitcore" / "README.md").read_text()


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


# -- Trace.extra: notes, not a service bus (issue 37) ---------------------------------------------------------------
def _extra_uses(root: pathlib.Path):
    """(file:line, key, value node or None) for each `<x>.extra[key]`, `.extra.get/setdefault/pop(key, ...)` in the
    project's code; a key given by a module-level name is resolved to its string."""
    import ast

    out = []
    for pkg in ("jitcore", "executors", "transforms"):
        for path in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text())
            names = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) for t in n.targets if isinstance(t, ast.Name)}

            def key_of(node, names=names):
                if isinstance(node, ast.Constant):
                    return node.value
                return names.get(node.id, f"<{node.id}>") if isinstance(node, ast.Name) else f"<{ast.dump(node)}>"

            assigned = {id(t): n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets}
            where = f"{path.relative_to(root)}"
            for node in ast.walk(tree):
                if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                        node.value.attr == "extra":
                    out.append((f"{where}:{node.lineno}", key_of(node.slice), assigned.get(id(node))))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "extra":
                    if node.func.attr in ("get", "setdefault", "pop") and node.args:
                        value = node.args[1] if node.func.attr == "setdefault" and len(node.args) > 1 else None
                        out.append((f"{where}:{node.lineno}", key_of(node.args[0]), value))
                    else:  # (update, __setitem__ through another name, ...: keys the check cannot see)
                        out.append((f"{where}:{node.lineno}", f"<extra.{node.func.attr}>", None))
    return out


def test_extra_keys_are_the_declared_notes():
    """The source uses `Trace.extra` only with the handful of notes jitcore/ir/trace.py declares; facts other stages
    read are named fields of Trace/BoundSymbol, and services travel with the trace context (jitcore/ir/services.py)."""
    import ast

    from jitcore.ir.trace import EXTRA_KEYS

    uses = _extra_uses(ROOT)
    assert uses, "the scan found no use of Trace.extra at all: it no longer sees them"
    undeclared = [f"{w}: {k!r}" for w, k, _ in uses if k not in EXTRA_KEYS]
    assert undeclared == [], "keys of Trace.extra outside EXTRA_KEYS"
    assert len(EXTRA_KEYS) <= 5
    callables = [w for w, _, v in uses if isinstance(v, (ast.Lambda, ast.Attribute))]
    assert callables == [], "a lambda or a bound method stored into Trace.extra (a service is not a note)"


def test_extra_refuses_callables_and_undeclared_keys():
    from jitcore.ir.symbol import BoundSymbol
    from jitcore.ir.trace import Trace

    trace = Trace()
    with pytest.raises(TypeError, match="a callable is a service"):
        trace.extra["nested_masks"] = lambda: None
    with pytest.raises(TypeError, match="a callable is a service"):
        trace.extra.setdefault("range_lists", print)
    with pytest.raises(KeyError, match="declared notes"):
        trace.extra["data_oracle"] = {}
    with pytest.raises(KeyError, match="declared notes"):
        trace.extra.update(user_stack=())
    trace.extra.setdefault("nonzero_counts", {})["t0"] = 1
    assert dict(trace.extra) == {"nonzero_counts": {"t0": 1}}
    assert not hasattr(BoundSymbol, "extra") and "extra" not in BoundSymbol.__dataclass_fields__


def test_services_travel_with_the_trace_being_recorded():
    """Outside the interpreter's recording, every question gets the documented default (NO_SERVICES); the frontend's
    services are seen by the trace they were handed down with, not by another trace recorded inside."""
    import torch

    import jitcore
    from jitcore.ir.services import NO_SERVICES, TracingServices
    from jitcore.ir.trace import Trace, services, tracectx

    assert services() is NO_SERVICES and type(NO_SERVICES) is TracingServices
    mine, other = Trace(), Trace()
    given = TracingServices()
    with tracectx(mine, given):
        assert services() is given
        with tracectx(mine):
            assert services() is given
        with tracectx(other):
            assert services() is NO_SERVICES
    assert services() is NO_SERVICES

    seen = []

    def fn(x):
        seen.append(type(services()).__name__)
        return x * 2

    jfn = jitcore.jit(fn)
    jfn(torch.randn(3))
    assert seen == ["JitServices"]
    for trace in jitcore.last_traces(jfn):
        assert all(not callable(v) for v in trace.extra.values())


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
