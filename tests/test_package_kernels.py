"""Packages with Inductor regions (jitcore/packages.py, executors/inductor_kernels.py): the compiled kernels are
saved with the programs and loaded in a new process, whose first call compiles nothing and gives bitwise the saving
process's results (the same kernels), forward and training, in constant and symbolic values, without importing
Inductor or Dynamo; a package made for another machine compiles again, with a warning. The same records make the
cache of compiled regions on disk: a second process compiles nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from itertools import chain
from pathlib import Path

import pytest
import torch

import jitcore
from executors import inductor_kernels
from executors.inductorex import inductor_ex

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not inductor_ex.is_available()[0],
                                reason="Inductor cannot compile here")

USER_MODULE = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.a(x)))
        return self.b(h * torch.sigmoid(h)).tanh()


def inputs(n):
    return torch.randn(n, 16, generator=torch.Generator().manual_seed(n))
'''

SCRIPT = '''
import sys, torch, jitcore, usermod
from executors import inductorex
phase, folder, cache = sys.argv[1], sys.argv[2], sys.argv[3]
net = usermod.Net()
if phase == "save":
    jn = jitcore.jit(net, executors=["inductor"], cache=cache)
else:
    jn = jitcore.load(folder + "/pkg", net)
res = {"compiles": [], "outs": [], "grads": []}
for n, train in ((4, True), (4, False), (6, True)):
    net.zero_grad()
    x = usermod.inputs(n)
    if train:
        y = jn(x)
        y.pow(2).sum().backward()
        res["grads"].append([p.grad.clone() for p in net.parameters()])
    else:
        with torch.no_grad():
            y = jn(x)
    res["outs"].append(y.detach())
    res["compiles"].append(jitcore.last_compile_stats(jn)["region_compiles"])
res["misses"], res["loaded"] = jitcore.cache_misses(jn), inductorex.STATS["loaded"]
res["imported"] = sorted(m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules)
if phase == "save":
    jitcore.save(jn, folder + "/pkg")
torch.save(res, folder + f"/{phase}.pt")
'''


def _run(tmp_path: Path, phase: str, cache: str, inductor_cache: Path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, phase, str(tmp_path), cache], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(tmp_path / f"{phase}.pt", weights_only=False)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_loaded_kernels_compile_nothing_and_match_bitwise(tmp_path, cache):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    saved = _run(tmp_path, "save", cache, tmp_path / "inductor-save")
    manifest = (tmp_path / "pkg" / "manifest.json").read_text()
    assert '"kernels": 0' not in manifest and list((tmp_path / "pkg").glob("kernel-*.so"))
    # a fresh process with an empty Inductor cache: the kernels come from the package, not from a cache on disk
    loaded = _run(tmp_path, "load", cache, tmp_path / "inductor-load")
    assert sum(saved["compiles"]) > 0 and loaded["compiles"] == [0, 0, 0], (saved["compiles"], loaded["compiles"])
    assert loaded["misses"] == 0 and loaded["loaded"] > 0
    # the load traced with the package's meta-kernel answers and ran the packaged kernels: neither Inductor nor
    # Dynamo (seconds to import) was needed
    assert loaded["imported"] == [] and saved["imported"] == ["torch._dynamo", "torch._inductor"]
    for a, b in zip([*saved["outs"], *chain(*saved["grads"])], [*loaded["outs"], *chain(*loaded["grads"])]):
        assert torch.equal(a, b)
    # and eager's numbers
    import importlib.util
    spec = importlib.util.spec_from_file_location("usermod_eager", tmp_path / "usermod.py")
    usermod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(usermod)
    net = usermod.Net()
    y = net(usermod.inputs(4))
    y.pow(2).sum().backward()
    torch.testing.assert_close(loaded["outs"][0], y.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded["grads"][0], [p.grad for p in net.parameters()], atol=1e-5, rtol=1e-5)


def _tanh_chain(x):
    return (x.sin() * 2 + 1).tanh().sum(0)


def test_kernels_of_another_machine_compile_again(tmp_path, monkeypatch):
    jf = jitcore.jit(_tanh_chain, executors=["inductor"])
    x = torch.randn(5, 7)
    want = jf(x)
    jitcore.save(jf, tmp_path / "pkg")
    other = {**inductor_kernels.machine(), "cpu_flags": "another cpu"}
    monkeypatch.setattr(inductor_kernels, "machine", lambda: other)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jl = jitcore.load(tmp_path / "pkg", _tanh_chain)
    assert any("another machine" in str(w.message) and "cpu_flags" in str(w.message) for w in caught)
    assert not inductor_kernels.PACKAGED  # nothing offered to the executors
    torch.testing.assert_close(jl(x), want)


def test_kernels_of_another_torch_compile_again(tmp_path):
    """A package written under another torch release (faked in its manifest): its kernels are not offered, the load
    says why, and the region compiles again and gives the same numbers."""
    import json

    from jitcore.packages import _digest

    jf = jitcore.jit(_tanh_chain, executors=["inductor"])
    x = torch.randn(5, 7)
    want = jf(x)
    folder = jitcore.save(jf, tmp_path / "pkg")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["versions"]["torch"] = "2.10.0+fake"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "DIGEST").write_text(_digest(folder))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jl = jitcore.load(folder, _tanh_chain)
    assert any("written with torch 2.10.0+fake" in str(w.message) for w in caught)
    assert not inductor_kernels.PACKAGED  # nothing offered to the executors
    torch.testing.assert_close(jl(x), want)


def test_the_region_cache_on_disk_is_keyed_by_torchs_version(tmp_path, monkeypatch):
    """A region stored on disk under one torch release is not found under another (it compiles again)."""
    monkeypatch.setenv("JITCORE_REGION_CACHE", "1")
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(inductor_kernels, "_DISK_KEY", [])
    variant = {"kernels": [], "strides": None, "guard": None}
    inductor_kernels.store("region text", {}, variant)
    assert inductor_kernels.stored("region text", {}, True, False) is not None
    monkeypatch.setattr(inductor_kernels, "_DISK_KEY", [])
    monkeypatch.setattr(torch, "__version__", "2.10.0+fake")
    assert inductor_kernels.stored("region text", {}, True, False) is None


def test_the_region_cache_on_disk_is_keyed_by_jitcores_lowering_code(tmp_path, monkeypatch):
    """A region stored on disk by other code of jitcore's Inductor executor (an editable install keeps its version
    while the code changes: a rewrite added to regions, fuzz seed 2120) is not found: it compiles again."""
    monkeypatch.setenv("JITCORE_REGION_CACHE", "1")
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(inductor_kernels, "_DISK_KEY", [])
    inductor_kernels.store("region text", {}, {"kernels": [], "strides": None, "guard": None})
    assert inductor_kernels.stored("region text", {}, True, False) is not None
    monkeypatch.setattr(inductor_kernels, "_DISK_KEY", [])
    assert inductor_kernels.stored("region text", {}, True, False) is not None  # (the same code: found)
    monkeypatch.setattr(inductor_kernels, "_DISK_KEY", [])
    monkeypatch.setattr(inductor_kernels, "_lowering_digest", lambda: "other code")
    assert inductor_kernels.stored("region text", {}, True, False) is None


def test_a_kernel_that_does_not_match_its_source_is_not_used():
    """The loaded wrapper checks each kernel against the digest of the C++ source it asks for."""
    kernels = inductor_kernels._PackagedKernels([(inductor_kernels.source_digest("int a;"), print)])
    with pytest.raises(ValueError, match="does not match"):
        kernels.cpp_pybinding([], "int b;")
    assert kernels.cpp_pybinding([], "int a;") is print


def test_a_packaged_cpp_wrapper_that_does_not_match_its_source_is_not_used():
    wrapper = inductor_kernels._PackagedWrapper([(inductor_kernels.source_digest("int a;"), print)])
    with pytest.raises(ValueError, match="does not match"):
        wrapper.load_pybinding(argtypes=[], main_code="int b;")
    assert wrapper.load_pybinding(argtypes=[], main_code="int a;") is print


def test_a_cpu_region_is_one_compiled_library_and_its_record_runs_as_compiled():
    """A static CPU region is compiled with Inductor's C++ wrapper: its kernels and the code calling them are one
    library (one compiler run); the record of it loads and gives bitwise the compiled variant's results."""
    from executors import inductorex

    def f(x, y):  # (1.2345: a region no other test of this process compiles)
        h = torch.nn.functional.gelu(x @ y) * torch.sigmoid(x.sum(1, keepdim=True) * 1.2345)
        return h.softmax(-1), (h - h.mean(-1, keepdim=True)).tanh()

    x, y = torch.randn(32, 32), torch.randn(32, 32)  # (one shape: the region's two arguments in either order)
    jf = jitcore.jit(f, executors=["inductor"])
    before = set(inductorex.COMPILED)
    for o, e in zip(jf(x, y), f(x, y)):
        torch.testing.assert_close(o, e)
    region = next(r for key, r in inductorex.COMPILED.items()
                  if key not in before and r.n_args == 2 and r.variants)
    assert region.options["cpp_wrapper"] and not region.dynamic
    run = next(iter(region.variants.values()))
    record = inductor_kernels.export_variant(run, region.n_args)
    assert record is not None and [k["entry"] for k in record["kernels"]] == ["inductor_entry_cpp"]
    with tempfile.TemporaryDirectory() as d:
        k = record["kernels"][0]
        (Path(d) / "wrapper.so").write_bytes(k["library"])
        loaded = inductor_kernels.load_variant(record, {k["digest"]: str(Path(d) / "wrapper.so")}, region.single)
        again = loaded(x, y)
    compiled = run(x, y)
    again, compiled = ([t] if isinstance(t, torch.Tensor) else list(t) for t in (again, compiled))
    assert len(again) == len(compiled) and all(torch.equal(a, b) for a, b in zip(again, compiled))


CACHED = '''
import sys, torch, jitcore, usermod
from executors import inductorex
net = usermod.Net()
jn = jitcore.jit(net, executors=["inductor"], cache=sys.argv[2])
with torch.no_grad():  # (the forward's regions: the backward's take the same path)
    y = jn(usermod.inputs(4))
torch.save({"out": y, "compiles": jitcore.last_compile_stats(jn)["region_compiles"],
            "loaded": inductorex.STATS["loaded"]}, sys.argv[1])
'''


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_compiled_regions_are_cached_on_disk_across_processes(tmp_path, cache):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    env = {**os.environ, "JITCORE_REGION_CACHE": "1", "JITCORE_CACHE_DIR": str(tmp_path / "jitcore-cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runs = []
    for i in range(2):  # each with an empty Inductor cache: only jitcore's cache can help the second
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / f"inductor-{i}")
        proc = subprocess.run([sys.executable, "-c", CACHED, str(tmp_path / f"run{i}.pt"), cache], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append({**torch.load(tmp_path / f"run{i}.pt", weights_only=False), "stderr": proc.stderr[-3000:]})
    stored = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "jitcore-cache").rglob("*") if p.is_file())
    why = f"stored: {stored}\nfirst run: {runs[0]['stderr']}\nsecond run: {runs[1]['stderr']}"
    assert runs[0]["compiles"] > 0 and runs[0]["loaded"] == 0, why
    assert runs[1]["compiles"] == 0 and runs[1]["loaded"] > 0, why
    assert torch.equal(runs[0]["out"], runs[1]["out"])
    assert list((tmp_path / "jitcore-cache" / "inductor-regions").glob("*/*/kernel-*.so"))


def _relu_chain(x):
    return (x.cos() * 3 - 1).relu().sum(1)


def test_a_region_that_failed_to_compile_is_not_tried_again_after_a_load(tmp_path, monkeypatch):
    from executors import inductorex

    def broken(*args, **kwargs):
        raise ValueError("this region cannot be compiled")

    jf = jitcore.jit(_relu_chain, executors=["inductor"])
    x = torch.randn(6, 5)
    with monkeypatch.context() as m:
        m.setattr(torch._inductor, "compile", broken)
        with pytest.warns(UserWarning, match="cannot be compiled"):
            want = jf(x)  # eager's kernels, after the failed compile
    jitcore.save(jf, tmp_path / "pkg")
    for key in [k for k, r in inductorex.COMPILED.items() if r.failures]:
        del inductorex.COMPILED[key]  # (as in a new process)
    with pytest.warns(UserWarning, match="compiling it failed where the package was made"):
        jl = jitcore.load(tmp_path / "pkg", _relu_chain)
        got = jl(x)
    assert jitcore.last_compile_stats(jl)["region_compiles"] == 0
    torch.testing.assert_close(got, want)


META = '''
import sys, torch, jitcore
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
jl = jitcore.jit(layer)
with torch.no_grad():
    out = jl(torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1)))
torch.save({"out": out, "dynamo": "torch._dynamo" in sys.modules}, sys.argv[1])
'''


def test_meta_kernel_answers_are_kept_on_disk_so_a_restart_runs_none(tmp_path):
    """The first trace of a process asks torch's meta kernels for layouts (attention's, here); the first Python one
    imports torch._dynamo (about a second). The answers are kept in jitcore's cache folder: the next process's
    first trace of the same model runs none of them."""
    env = {**os.environ, "JITCORE_REGION_CACHE": "1", "JITCORE_CACHE_DIR": str(tmp_path / "jitcore-cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runs = []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-c", META, str(tmp_path / f"run{i}.pt")], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(torch.load(tmp_path / f"run{i}.pt", weights_only=False))
    assert runs[0]["dynamo"] and not runs[1]["dynamo"]
    assert torch.equal(runs[0]["out"], runs[1]["out"])
    assert list((tmp_path / "jitcore-cache" / "meta-results").glob("*.pt"))


def test_a_cache_that_cannot_be_written_is_said_once(tmp_path, monkeypatch):
    """A full disk or a folder without write access: the region runs (it is compiled in this process), and the user
    is told once that later processes will compile it again."""
    monkeypatch.setenv("JITCORE_REGION_CACHE", "1")
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(inductor_kernels, "_WRITE_FAILED", [])

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(inductor_kernels, "write_atomically", full)
    variant = {"kernels": [{"digest": "0" * 64, "library": b""}], "strides": None, "guard": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inductor_kernels.store("region text", {}, variant)
        inductor_kernels.store("another region", {}, variant)
    said = [w for w in caught if "could not be written" in str(w.message)]
    assert len(said) == 1 and "No space left" in str(said[0].message)
