"""The IR imports nothing above it: the ops it records through itself come from tables jitcore/ops fills at import
(proxies.IR_OPS, METHOD_FALLBACKS, torch_map.FUNCTION_FALLBACKS, symbol.register_autocast); a missing entry fails
loudly, and fallback chains keep their declared order whatever order they are registered in.
"""
import ast
import pathlib
import subprocess
import sys

import pytest
import torch

import jitcore
from jitcore.ir import proxies, symbol
from jitcore.ir.proxies import Fallbacks, IntegerProxy, TensorProxy
from jitcore.ir.trace import Trace, tracectx
from jitcore.ops import autocast, torch_map

IR = pathlib.Path(jitcore.__file__).parent / "ir"


def _imports(path):
    """(module imported, inside a function?) for every import statement of the file."""
    tree = ast.parse(path.read_text())
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(n) for n in ast.walk(fn))
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            yield from ((a.name, id(n) in inside) for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            yield "." * n.level + (n.module or ""), id(n) in inside


@pytest.mark.parametrize("path", sorted(IR.glob("*.py")), ids=lambda p: p.name)
def test_ir_imports_nothing_above_it(path):
    for module, in_function in _imports(path):
        assert not module.startswith("."), f"{path.name}: relative import {module}"
        project = module.split(".")[0] in ("jitcore", "executors", "transforms")
        if project:
            allowed = ("jitcore.ir", "jitcore.errors", "jitcore.compat")
            assert module.startswith(allowed), f"{path.name} imports {module}"
            assert not in_function, f"{path.name} imports {module} inside a function"


def test_missing_ir_op_fails_loudly(monkeypatch):
    with tracectx(Trace()):
        i = IntegerProxy(3)
        t = TensorProxy((2, 3), torch.float32, torch.device("cpu"))
        monkeypatch.delitem(proxies.IR_OPS, "number_op")
        with pytest.raises(RuntimeError, match=r"'number_op'.*jitcore/ops/prims_python.py"):
            i + 1
        monkeypatch.delitem(proxies.IR_OPS, "torch_function")
        with pytest.raises(RuntimeError, match=r"'torch_function'.*jitcore/ops/torch_map.py"):
            torch.add(t, 1)
        monkeypatch.delitem(proxies.IR_OPS, "reshape")
        with pytest.raises(RuntimeError, match=r"'reshape'.*jitcore/ops/prims_shape.py"):
            symbol._alias(t)
    with pytest.raises(ValueError, match="unknown IR op role"):
        proxies.register_ir_op("no_such_role", print)


def test_ir_ops_registered_by_ops():
    assert set(proxies.IR_OPS) == set(proxies.IR_OP_ROLES)
    with tracectx(Trace()) as trace:
        t = TensorProxy((2, 3), torch.float32, torch.device("cpu"))
        out = symbol._alias(t)
        assert out is not t and tuple(out.shape) == (2, 3)
        assert trace.bound_symbols[-1].sym.id == "prims.reshape"


def test_fallbacks_keep_their_declared_order():
    chain = Fallbacks("test", ("first", "second"))
    assert chain("k") is None
    chain.register("second", lambda key: f"second {key}")
    assert chain("k") == "second k"
    chain.register("first", lambda key: f"first {key}" if key == "mine" else None)
    assert chain("mine") == "first mine"  # asked first, though registered last
    assert chain("other") == "second other"  # None passes to the next one
    with pytest.raises(ValueError, match="unknown fallback 'third'"):
        chain.register("third", print)


def test_ops_register_their_fallbacks_and_autocast_policy():
    for chain in (proxies.METHOD_FALLBACKS, torch_map.FUNCTION_FALLBACKS):
        assert chain.order == ("inplace", "opaque")
        assert set(chain.factories) == {"inplace", "opaque"}
    policy = symbol.AUTOCAST_POLICY
    assert policy["ops"] == autocast.AUTOCAST_OPS and policy["ops"]
    assert policy["transparent"] == autocast.TRANSPARENT
    assert policy["cast_args"] is autocast.autocast_args


def test_unmapped_inplace_method_goes_through_the_inplace_fallback():
    name = next(n for n in ("i0_", "sinc_", "erfinv_") if n not in proxies.TENSOR_METHODS)
    x = torch.rand(3) + 0.5

    def f(a):
        a = a.clone()
        getattr(a, name)()
        return a

    expected = f(x)
    jf = jitcore.jit(f)
    torch.testing.assert_close(jf(x), expected)
    ids = [b.sym.id for b in jitcore.last_traces(jf)[0].bound_symbols]
    assert f"opaque._opaque_{name}functional" in ids and "prims.copy_" in ids, ids  # functional form, then the write


def test_importing_any_part_of_jitcore_completes_the_ir():
    """Before this layering the IR imported the ops on first use; now the package imports them: a program importing
    only the IR still records number arithmetic and torch calls on proxies."""
    code = ("from jitcore.ir import proxies; from jitcore.ir.trace import Trace, tracectx\n"
            "with tracectx(Trace()) as t:\n"
            "    i = proxies.IntegerProxy(3) * 2\n"
            "    x = proxies.TensorProxy((2,), __import__('torch').float32, 'cpu')\n"
            "    __import__('torch').add(x, 1)\n"
            "print(sorted(b.sym.id for b in t.bound_symbols))")
    root = pathlib.Path(jitcore.__file__).parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['ltorch.add', 'python.mul']"
