"""jitcore/compat.py, the one module that knows which torch releases do what: the release parsing and range, a
refusal naming the release a feature needs, the warning for a torch outside the tested range, both forms of
`MyFunction.apply`, and no other module of jitcore, executors or transforms reaching below torch's public API."""
import ast
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from jitcore import compat
from jitcore.errors import UnsupportedError

ROOT = pathlib.Path(__file__).resolve().parents[1]

# torch's private modules and names (what compat routes); the prefixes are dotted names as the source spells them
PRIVATE = ("torch._inductor", "torch._subclasses", "torch._dynamo", "torch._C._", "torch._ops", "torch._decomp",
           "torch._guards", "torch._prims", "torch._refs", "torch._functorch", "torch.testing._internal",
           "torch.utils._sympy", "torch.utils._python_dispatch", "torch.utils._filelock",
           "torch.distributed._functional_collectives", "torch.fx.experimental.symbolic_shapes",
           "torch.distributed.fsdp._")


def test_release_parsing_and_range():
    assert compat._release("2.13.0+cpu") == (2, 13, 0)
    assert compat._release("2.15.0a0+git1234") == (2, 15, 0)
    assert compat._release("2.10") == (2, 10, 0)
    assert compat.LINE == compat._release(torch.__version__)[:2]
    assert compat.supported((2, 10)) and compat.supported((2, 15))
    assert not compat.supported((2, 9)) and not compat.supported((2, 16))


def test_a_feature_a_release_lacks_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(compat, "LINE", (2, 10))
    with pytest.raises(UnsupportedError, match=r"the feature needs torch 2\.12 or newer; this is torch"):
        compat.require("the feature", (2, 12))
    compat.require("the feature", (2, 10))  # (no error)


def test_an_untested_torch_is_said_at_import():
    code = "import warnings, torch; torch.__version__ = '2.16.0'; warnings.simplefilter('always'); import jitcore"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "jitcore is tested with torch 2.10 to 2.15; this is torch 2.16.0" in run.stderr


def test_both_forms_of_function_apply():
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    assert compat.autograd_function_class(Double.apply) is Double
    assert compat.autograd_function_class(Double.forward) is None
    assert compat.autograd_function_class(torch.sin) is None
    assert (compat.builtin_apply_class(Double.apply) is Double) == (compat.FUNCTION_APPLY is None)
    torch.testing.assert_close(compat.call_apply(Double, torch.ones(2)), torch.full((2,), 2.0))


def test_torchs_own_max_and_min_translate_to_numbers():
    """2.10's fake max_pool2d writes an output size as torch's Max(1, s // 2) (not sympy's Max): it translates."""
    import sympy

    from jitcore.ops.opaque_symbolic import _translate

    floor_div, _, _, torch_max, torch_min = compat.sympy_functions()
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert _translate(torch_max(1, floor_div(s, 2)), {s: 7}) == 3
    assert _translate(torch_min(5, s), {s: 7}) == 5


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _private_uses(path: pathlib.Path, root: pathlib.Path = ROOT):
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node) or ""]
        for name in names:
            if name.startswith(PRIVATE):
                yield f"{path.relative_to(root)}:{node.lineno}: {name}"


def test_only_compat_reaches_below_torchs_public_api():
    files = [p for pkg in ("jitcore", "executors", "transforms") for p in sorted((ROOT / pkg).rglob("*.py"))
             if p.name != "compat.py"]
    found = sorted({use for p in files for use in _private_uses(p)})
    assert found == []


def test_the_check_sees_a_private_use(tmp_path):
    (tmp_path / "m.py").write_text("import torch\nx = torch._C._is_any_autocast_enabled()\n"
                                   "from torch._inductor import config\nimport torch.nn.functional as F\n")
    found = list(_private_uses(tmp_path / "m.py", tmp_path))
    assert any("m.py:2: torch._C._is_any_autocast_enabled" in u for u in found)
    assert any("m.py:3: torch._inductor" in u for u in found)
    assert not any("functional" in u for u in found)


def test_inductor_region_with_max_pool_compiles_in_a_fresh_process():
    # torch's max_pool*_with_indices decompositions read torch._inductor.lowering without importing it; jitcore runs
    # them before Inductor imports it: in a fresh process (no region cache) whose first region held a max_pool2d (a
    # small CNN's first stage), the region failed and ran eagerly
    code = """if True:
        import warnings, torch, jitcore
        from executors import inductor_ex, torch_ex
        from tests.distributed_workers import ConvBN, cnn_batch, cnn_loss
        warnings.filterwarnings("error", message="inductor: compiling a fusion region failed")
        torch.manual_seed(0)
        model = ConvBN()
        cnn_loss(jitcore.jit(model, executors=[inductor_ex, torch_ex]), cnn_batch(0, 0)).backward()
    """
    env = {**os.environ, "JITCORE_REGION_CACHE": "0"}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
