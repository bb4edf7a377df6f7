"""Packages (jitcore/packages.py): jitcore.save in one process, jitcore.load in another; the loaded entries are hit
without tracing and give eager's outputs and gradients; each way a package can fail to belong (edited source,
signature, versions, options, a changed file) is its own PackageError."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import jitcore
from jitcore.packages import PackageError, _digest

ROOT = Path(__file__).resolve().parent.parent

USER_MODULE = '''
import torch

LOG = []


def helper(x):
    return torch.tanh(x) * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.b(helper(self.a(x)))


def effects(x):
    LOG.append(x.shape[0])
    return x * 2


def branches(x):
    return x + 1 if x.sum() > 0 else x - 1
'''

SAVE = '''
import sys, torch, jitcore, usermod
out, cache = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
net = usermod.Net()
torch.save(net.state_dict(), out + "/state.pt")
jn = jitcore.jit(net, cache=cache)
jn(torch.randn(2, 4)).pow(2).sum().backward()  # a training entry
with torch.no_grad():
    jn(torch.randn(5, 4))  # an inference entry
jitcore.save(jn, out + "/net")
je = jitcore.jit(usermod.effects)
je(torch.randn(3))
jitcore.save(je, out + "/effects")
for keep in ("all", "int"):
    jb = jitcore.jit(usermod.branches, keep_inputs=keep)
    jb(torch.ones(3))
    jitcore.save(jb, out + "/branches_" + keep)
'''

LOAD = '''
import sys, warnings, torch, jitcore, usermod
out, cache = sys.argv[1], sys.argv[2]
net = usermod.Net()
net.load_state_dict(torch.load(out + "/state.pt"))
jn = jitcore.load(out + "/net", net)
res = {"entries": len(jitcore.input_specs(jn)), "misses_after_load": jitcore.cache_misses(jn)}
g = torch.Generator().manual_seed(1)
x, x2 = torch.randn(2, 4, generator=g), torch.randn(5, 4, generator=g)
y = jn(x)
y.pow(2).sum().backward()
res["train_out"], res["grads"] = y.detach(), [p.grad.clone() for p in net.parameters()]
res["trace_printed"] = "def forward" in str(jitcore.last_traces(jn)[-1])
with torch.no_grad():
    res["infer_out"] = jn(x2)
res["hits"], res["misses"] = jitcore.cache_hits(jn), jitcore.cache_misses(jn)
je = jitcore.load(out + "/effects", usermod.effects)
res["log_after_load"] = list(usermod.LOG)
je(torch.ones(3))
res["log_after_call"], res["effects_misses"] = list(usermod.LOG), jitcore.cache_misses(je)
jb = jitcore.load(out + "/branches_all", usermod.branches)
res["branch_pos"], res["branch_misses"] = jb(torch.ones(3)), jitcore.cache_misses(jb)
res["branch_neg"], res["branch_misses_after_neg"] = jb(-torch.ones(3)), jitcore.cache_misses(jb)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jd = jitcore.load(out + "/branches_int", usermod.branches)
res["skipped_warning"] = any("not restored" in str(w.message) for w in caught)
res["default_entries"] = len(jitcore.input_specs(jd))
torch.save(res, out + "/result.pt")
'''


def _run(script: str, tmp_path: Path, *args: str):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT),
                                                         *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_save_then_load_in_another_process(tmp_path, cache):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    _run(SAVE, tmp_path, str(tmp_path), cache)
    _run(LOAD, tmp_path, str(tmp_path), cache)
    res = torch.load(tmp_path / "result.pt", weights_only=False)
    sys.path.insert(0, str(tmp_path))
    try:
        import usermod
    finally:
        sys.path.remove(str(tmp_path))
    net = usermod.Net()
    net.load_state_dict(torch.load(tmp_path / "state.pt"))
    g = torch.Generator().manual_seed(1)
    x, x2 = torch.randn(2, 4, generator=g), torch.randn(5, 4, generator=g)
    y = net(x)
    y.pow(2).sum().backward()
    torch.testing.assert_close(res["train_out"], y.detach())
    torch.testing.assert_close(res["grads"], [p.grad for p in net.parameters()])
    with torch.no_grad():
        torch.testing.assert_close(res["infer_out"], net(x2))
    assert res["entries"] == 2 and res["misses_after_load"] == 0
    assert (res["hits"], res["misses"]) == (2, 0) and res["trace_printed"]
    # side effects replay on calls, never at load
    assert res["log_after_load"] == [] and res["log_after_call"] == [3] and res["effects_misses"] == 0
    # a data-guarded entry with its values kept is restored; the other branch is a miss, with eager's answer
    torch.testing.assert_close(res["branch_pos"], torch.full((3,), 2.0))
    torch.testing.assert_close(res["branch_neg"], torch.full((3,), -2.0))
    assert res["branch_misses"] == 0 and res["branch_misses_after_neg"] == 1
    assert res["skipped_warning"] and res["default_entries"] == 0


def _saved(tmp_path, fn=None, **options):
    fn = fn or _double
    jf = jitcore.jit(fn, **options)
    jf(torch.randn(3))
    return jitcore.save(jf, tmp_path / "pkg")


def _double(x):
    return x * 2


def _rewrite_manifest(folder: Path, change):
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "DIGEST").write_text(_digest(folder))  # a consistent package: only the content differs


def test_loaded_in_process_hits_and_prints(tmp_path):
    folder = _saved(tmp_path)
    jf = jitcore.load(folder, _double)
    torch.testing.assert_close(jf(torch.ones(3)), torch.full((3,), 2.0))
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (1, 0)
    assert "def computation" in str(jitcore.last_traces(jf)[-1]) and jitcore.last_prologue_traces(jf)
    assert "forward" in (folder / "entry0.py").read_text()


def test_a_changed_file_fails_the_digest(tmp_path):
    folder = _saved(tmp_path)
    with open(folder / "entry0.pt", "ab") as f:
        f.write(b"\0")
    with pytest.raises(PackageError, match="digest"):
        jitcore.load(folder, _double)


def test_another_torch_version_warns_and_traces_again(tmp_path):
    """A package written under another torch (faked in its manifest): a warning naming both releases, the entries
    traced again from their input descriptions, eager's numbers."""
    folder = _saved(tmp_path)
    _rewrite_manifest(folder, lambda m: m["versions"].update(torch="2.12.0"))
    with pytest.warns(UserWarning, match=rf"written with torch 2\.12\.0; this is torch {re.escape(torch.__version__)}"):
        jf = jitcore.load(folder, _double)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), x * 2)
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (1, 0)  # the entry was traced again at load


def test_another_jitcore_version_is_refused(tmp_path):
    folder = _saved(tmp_path)
    _rewrite_manifest(folder, lambda m: m["versions"].update(jitcore="0.0.1"))
    with pytest.raises(PackageError, match=r"jitcore 0\.0\.1"):
        jitcore.load(folder, _double)


def test_other_jit_options_are_named(tmp_path):
    folder = _saved(tmp_path)
    with pytest.raises(PackageError, match="cache: the package has 'constant values'"):
        jitcore.load(folder, _double, cache="symbolic values")
    with pytest.raises(PackageError, match="executors"):
        jitcore.load(folder, _double, executors=["python"])


def test_another_function_or_signature_is_refused(tmp_path):
    folder = _saved(tmp_path)
    with pytest.raises(PackageError, match="saved for"):
        jitcore.load(folder, lambda x: x * 2)
    namespace = {}
    exec("def _double(x, y=1):\n    return x * 2 * y\n", namespace)
    other = namespace["_double"]
    other.__module__, other.__qualname__ = _double.__module__, _double.__qualname__
    with pytest.raises(PackageError, match="signature"):
        jitcore.load(folder, other)


def test_edited_source_is_refused_unless_asked(tmp_path):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    save = textwrap.dedent('''
        import sys, torch, jitcore, usermod
        jf = jitcore.jit(usermod.Net())
        jf(torch.randn(2, 4))
        jitcore.save(jf, sys.argv[1])
    ''')
    load = textwrap.dedent('''
        import sys, torch, jitcore, usermod
        try:
            jitcore.load(sys.argv[1], usermod.Net())
            print("LOADED")
        except jitcore.PackageError as e:
            print("REFUSED", e)
        jf = jitcore.load(sys.argv[1], usermod.Net(), check_source=False)
        print("UNCHECKED", len(jitcore.input_specs(jf)))
    ''')
    _run(save, tmp_path, str(tmp_path / "pkg"))
    assert "LOADED" in _run(load, tmp_path, str(tmp_path / "pkg")).stdout  # unchanged: loads
    (tmp_path / "usermod.py").write_text(USER_MODULE.replace("torch.tanh(x) * 2", "torch.tanh(x) * 3"))
    out = _run(load, tmp_path, str(tmp_path / "pkg")).stdout
    assert "REFUSED" in out and "helper" in out and "edited" in out, out
    assert "UNCHECKED 1" in out


def test_save_needs_a_call_and_a_jitted_function(tmp_path):
    with pytest.raises(ValueError, match="not been called"):
        jitcore.save(jitcore.jit(_double), tmp_path / "pkg")
    with pytest.raises(TypeError):
        jitcore.save(_double, tmp_path / "pkg")


@pytest.mark.parametrize("what", ["module", "function", "function by source"])
def test_repro_script_runs_standalone(tmp_path, what):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import usermod

        if what == "module":
            fn, args, kwargs = usermod.Net(), (torch.randn(2, 4),), {}
        elif what == "function":
            fn, args, kwargs = usermod.helper, (torch.randn(3, requires_grad=True),), {}
        else:
            def scaled(x, *, scale=2.0):  # nested: not importable, written into the script as source
                return torch.tanh(x) * scale

            fn, args, kwargs = scaled, (torch.randn(3),), {"scale": 3.0}
        jf = jitcore.jit(fn, keep_inputs="all")
        jf(*args, **kwargs)
        folder = jitcore.repro(jf, tmp_path / "repro")
    finally:
        sys.path.remove(str(tmp_path))
    assert {"repro.py", "inputs.pt", "programs.py"} <= {p.name for p in folder.iterdir()}
    text = (folder / "repro.py").read_text()
    assert ("def scaled(x, *, scale=2.0):" in text) == (what == "function by source")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, str(folder / "repro.py")], cwd=tmp_path.parent, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "jitcore agrees with eager" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU"))])
def test_a_call_on_another_device_misses(tmp_path, device):
    jf = jitcore.load(_saved(tmp_path), _double)
    y = jf(torch.ones(3, device=device))
    assert y.device.type == device and jitcore.cache_misses(jf) == 1
    assert "expected device cpu" in jitcore.cache_miss_reasons(jf)[0]
