"""Fusion regions compiled ahead of an entry's first run (executors/ahead.py): the forward's and the backward's regions
compile before the first call runs, their C++ builds in background threads (executors/cpu_compiler.py
builds_in_background), awaited at each region's first run; a build that fails leaves the region eager with a
warning; a broadcast cotangent is copied to the dense layout compiled ahead. Eager is the oracle throughout."""
import warnings

import pytest
import torch

import jitcore
from executors import cpu_compiler, inductor_ex
from executors import inductorex as ix
from executors.ahead import compile_ahead
from jitcore import compat
from tests.fuzz import CACHE_MODES


def _regions(fn) -> list:
    """The CompiledRegions of a jitted function's last forward and backward programs."""
    traces = [jitcore.last_traces(fn)[-1], *jitcore.last_backward_traces(fn)[-1:]]
    return [v for t in traces for v in t.python_callable().__globals__.values() if isinstance(v, ix.CompiledRegion)]


def _program(scale: float):
    """A function with a fused region in its forward and in its backward (each: several loop ops); `scale` makes
    its region text (and so its compiled regions) its own."""
    def f(x, w):
        h = torch.tanh(x * w + scale) * torch.sigmoid(x - scale)
        return torch.nn.functional.gelu(h * h + x) * 0.5

    return f


def _inputs(n=6, m=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, m, generator=g, requires_grad=True), torch.randn(m, generator=g, requires_grad=True)


def _check_against_eager(f, jf, args, reduce):
    ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, ref = jf(*args), f(*ref_args)
    torch.testing.assert_close(out, ref)
    reduce(out).backward()
    reduce(ref).backward()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad)


def test_first_training_call_compiles_forward_and_backward_regions_ahead_and_uses_them():
    f = _program(0.25)
    jf = jitcore.jit(f, executors=[inductor_ex])
    x, w = _inputs()
    # (t * w).sum(): a dense cotangent, as the ahead run guessed
    _check_against_eager(f, jf, [x, w], lambda t: (t * torch.linspace(0, 1, t.shape[-1])).sum())
    regions = _regions(jf)
    assert len(regions) == 2
    for r in regions:
        assert r.ahead, "the region was not compiled ahead of the first run"
        (strides,) = r.ahead
        run = r.variants[strides]
        # the variant is the compiled code (awaited, its built entry function in place of the pending one), not
        # the eager program nor the function that awaited the build
        assert run is not r.eager_fn and getattr(run, "__name__", "") != "first_call"
        call = ix.inductor_kernels._compiled_graph(run).current_callable
        assert not any(isinstance(c.cell_contents, cpu_compiler.PendingEntry) for c in call.__closure__ or ())
        assert len(r.variants) == 1  # (the backward's strides were predicted: nothing compiled at first run)
    # later calls: the same variants, still eager's results
    for seed in (1, 2):
        x, w = _inputs(seed=seed)
        _check_against_eager(f, jf, [x, w], lambda t: (t * t).sum())
    assert all(len(r.variants) == 1 for r in _regions(jf))


def test_a_broadcast_cotangent_is_densified_for_the_backward_compiled_ahead():
    f = _program(0.5)
    jf = jitcore.jit(f, executors=[inductor_ex])
    for seed in range(3):  # y.sum(): autograd's cotangent is ones expanded (strides 0)
        _check_against_eager(f, jf, list(_inputs(seed=seed)), lambda t: t.sum())
    backward_region = _regions(jf)[-1]
    assert len(backward_region.variants) == 2  # the one compiled ahead, and the copy into it for the broadcast
    assert sum(1 for v in backward_region.variants.values() if v.__name__ == "densified") == 1
    assert ix.COMPILE_EVENTS[0] >= 2


def test_a_background_build_that_fails_leaves_the_region_eager_with_a_warning(monkeypatch):
    # (every region a C++ wrapper module, the builds left to the background: one-kernel regions take the Python
    # wrapper, whose kernels build while the region compiles: executors/inductor_options.py)
    monkeypatch.setattr(ix, "few_kernels", lambda sub: False)
    f = _program(0.75)
    jf = jitcore.jit(f, executors=[inductor_ex])
    cache = compat.wrapper_code_cache()
    original = cache.load_pybinding_async

    def failing_build(*args, submit_fn=None, **kwargs):
        if submit_fn is None:
            return original(*args, **kwargs)

        def fail():
            raise RuntimeError("the compiler failed")

        future = submit_fn(fail)
        return lambda: future.result()

    monkeypatch.setattr(cache, "load_pybinding_async", failing_build)
    x, w = _inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_against_eager(f, jf, [x, w], lambda t: (t * t).sum())
    assert any("the compiler failed" in str(c.message) for c in caught)
    for r in _regions(jf):
        assert r.ahead and all(v is r.eager_fn for v in r.variants.values())
    monkeypatch.undo()
    _check_against_eager(f, jf, list(_inputs(seed=1)), lambda t: (t * t).sum())  # (still eager's)


@pytest.fixture
def python_wrappers(monkeypatch, tmp_path):
    """Every region guessed few kernels (Inductor's Python wrapper: its kernels built in Inductor's compile threads,
    two of them, as on a machine of two cores or more), with empty compile caches on disk (every kernel builds)."""
    from torch._inductor import config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path / "jitcore"))

    monkeypatch.setattr(ix, "few_kernels", lambda sub: True)
    made = []

    class Recorded(cpu_compiler.PendingEntry):
        def __init__(self, future):
            super().__init__(future)
            made.append(self)

    monkeypatch.setattr(cpu_compiler, "PendingEntry", Recorded)
    with config.patch(compile_threads=2):  # (Inductor's own way: under torch 2.10, a monkeypatch's undo removed it)
        yield made


def test_python_wrapper_regions_compiled_ahead_leave_their_kernel_builds_to_their_first_run(python_wrappers):
    # the forward's kernels build while the backward's region compiles: the module's wait for them is a PendingEntry
    f = _program(1.25)
    jf = jitcore.jit(f, executors=[inductor_ex])
    _check_against_eager(f, jf, list(_inputs()), lambda t: (t * t).sum())
    # (each compile's kernel builds count in its record, though they end after the compile returned)
    assert [r["cpp_build"] > 0 for r in jitcore.last_compile_stats(jf)["region_log"]] == [True, True]
    regions = _regions(jf)
    assert len(regions) == 2 and all(r.ahead for r in regions)
    assert len(python_wrappers) >= 2 and all(p.fn is not None for p in python_wrappers)  # (each awaited, once)
    for r in regions:
        (run,) = r.variants.values()
        assert run is not r.eager_fn and "async_compile.cpp_pybinding(" in \
            ix.inductor_kernels._compiled_graph(run).source_code
    for seed in (1, 2):
        _check_against_eager(f, jf, list(_inputs(seed=seed)), lambda t: t.sum())


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_python_wrapper_regions_compiled_ahead_equal_eager_over_calls(python_wrappers, mode):
    # their kernels awaited at first run, then: other sizes, a call under no_grad, a non-contiguous input (a view:
    # strides not compiled ahead), a broadcast cotangent, keyword arguments, in every cache mode
    f = _program(2.0 + CACHE_MODES.index(mode))
    jf = jitcore.jit(f, executors=[inductor_ex], cache=mode)
    for i, (n, m, kind) in enumerate([(6, 16, "dense"), (6, 16, "sum"), (5, 16, "no_grad"), (6, 16, "view"),
                                      (7, 16, "keywords")]):
        x, w = _inputs(n, m, seed=i)
        if kind == "no_grad":
            with torch.no_grad():
                torch.testing.assert_close(jf(x, w), f(x, w))
            continue
        if kind == "view":
            wide = torch.randn(n, 2 * m, generator=torch.Generator().manual_seed(i))
            x = wide[:, ::2].requires_grad_()  # (a non-contiguous leaf)
        if kind == "keywords":
            ref_x, ref_w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
            out, ref = jf(x=x, w=w), f(x=ref_x, w=ref_w)
            torch.testing.assert_close(out, ref)
            out.sum().backward()
            ref.sum().backward()
            torch.testing.assert_close(x.grad, ref_x.grad)
            torch.testing.assert_close(w.grad, ref_w.grad)
            continue
        _check_against_eager(f, jf, [x, w], (lambda t: t.sum()) if kind == "sum" else (lambda t: (t * t).sum()))
    # (kernels' waits left to first runs; regions of symbolic sizes are not compiled ahead: executors/ahead.py)
    assert bool(python_wrappers) == (mode != "symbolic values")


def test_a_python_wrapper_kernel_build_that_fails_leaves_the_region_eager_with_a_warning(python_wrappers,
                                                                                         monkeypatch):
    f = _program(1.5)
    jf = jitcore.jit(f, executors=[inductor_ex])
    cache = compat.inductor_cpp_modules()[0].CppPythonBindingsCodeCache
    original = cache.load_pybinding_async

    def failing_build(*args, submit_fn=None, **kwargs):
        if submit_fn is None:
            return original(*args, **kwargs)
        future = submit_fn(lambda: 1 / 0)
        return lambda: future.result()

    monkeypatch.setattr(cache, "load_pybinding_async", failing_build)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_against_eager(f, jf, list(_inputs()), lambda t: (t * t).sum())
    assert any("division by zero" in str(c.message) for c in caught)
    assert python_wrappers
    for r in _regions(jf):
        assert r.ahead and all(v is r.eager_fn for v in r.variants.values())


def test_pending_entry_waits_for_its_build_and_raises_its_failure():
    import concurrent.futures
    import threading

    release = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(lambda: release.wait(5) and (lambda v: v + 1))
        entry = cpu_compiler.PendingEntry(future.result)
        assert entry.fn is None
        release.set()
        assert entry(1) == 2 and entry.fn is not None
        bad = cpu_compiler.PendingEntry(pool.submit(lambda: 1 / 0).result)
        with pytest.raises(ZeroDivisionError):
            bad.resolve()


def test_programs_with_side_effects_or_without_enough_regions_are_not_run_ahead():
    def writes(x, w):
        x.add_(1)
        return torch.tanh(x * w + 1.5) * torch.sigmoid(x - 1.5) * 2

    jf = jitcore.jit(writes, executors=[inductor_ex])
    x, w = torch.randn(4, 8), torch.randn(8)
    ref = writes(x.clone(), w)
    torch.testing.assert_close(jf(x.clone(), w), ref)
    entry = jf.entries()[0]
    assert compile_ahead(entry, [x.clone(), w]) == 0  # (one forward region, no backward: nothing side by side)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_calls_of_varying_shapes_and_grad_modes_equal_eager(mode):
    f = _program(1.0 + CACHE_MODES.index(mode))
    jf = jitcore.jit(f, executors=[inductor_ex], cache=mode)
    for i, (n, m) in enumerate([(6, 16), (6, 16), (5, 16), (6, 16)]):
        x, w = _inputs(n, m, seed=i)
        if i == 2:
            with torch.no_grad():
                torch.testing.assert_close(jf(x, w), f(x, w))
            continue
        _check_against_eager(f, jf, [x, w], (lambda t: t.sum()) if i % 2 else (lambda t: (t * t).sum()))


CACHED = '''
import sys, torch, jitcore
from executors import inductor_ex, inductorex


def f(x, w):
    h = torch.tanh(x * w + 0.125) * torch.sigmoid(x - 0.125)
    return torch.nn.functional.gelu(h * h + x) * 0.5


jf = jitcore.jit(f, executors=[inductor_ex])
g = torch.Generator().manual_seed(0)
x, w = torch.randn(6, 16, generator=g, requires_grad=True), torch.randn(16, generator=g, requires_grad=True)
for _ in range(2):
    x.grad = w.grad = None
    y = jf(x, w)
    y.sum().backward()  # (a broadcast cotangent: the backward's variant compiled ahead, densified)
torch.save({"out": y.detach(), "grads": [x.grad, w.grad], "compiles": inductorex.COMPILE_EVENTS[0],
            "loaded": inductorex.STATS["loaded"], "x": x.detach(), "w": w.detach()}, sys.argv[1])
'''


def test_regions_compiled_ahead_and_densified_are_cached_on_disk_across_processes(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "JITCORE_REGION_CACHE": "1", "JITCORE_CACHE_DIR": str(tmp_path / "jitcore-cache"),
           "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runs = []
    for i in range(2):  # each with an empty Inductor cache: only jitcore's cache can help the second
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / f"inductor-{i}")
        proc = subprocess.run([sys.executable, "-c", CACHED, str(tmp_path / f"run{i}.pt")], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(torch.load(tmp_path / f"run{i}.pt", weights_only=False))
    assert runs[0]["compiles"] >= 2 and runs[1]["compiles"] == 0 and runs[1]["loaded"] >= 3, runs
    x, w = runs[0]["x"].requires_grad_(), runs[0]["w"].requires_grad_()
    h = torch.tanh(x * w + 0.125) * torch.sigmoid(x - 0.125)
    y = torch.nn.functional.gelu(h * h + x) * 0.5  # (the script's f)
    y.sum().backward()
    for run in runs:
        torch.testing.assert_close(run["out"], y.detach())
        torch.testing.assert_close(run["grads"], [x.grad, w.grad])
