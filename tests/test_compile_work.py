"""Compile work with Inductor (executors/inductor_options.py, executors/cpu_compiler.py): last_compile_stats counts the
C++ builds and splits the region compiles into stages; a region that is one kernel compiles with Inductor's Python
wrapper (one build: the kernel alone), a region guessed so that has more kernels takes the C++ wrapper (one build for
all); a C++ wrapper module's precompiled header holds its kernels' prefix header too. Eager is the oracle."""
import copy

import pytest
import torch

import jitcore
from executors import cpu_compiler, inductor_kernels, inductorex
from executors.inductor_options import few_kernels
from tests.fuzz import CACHE_MODES

pytestmark = pytest.mark.skipif(not inductorex.inductor_ex.is_available()[0], reason="Inductor cannot compile here")


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """Empty compile caches on disk: every region compiles (Inductor's and jitcore's folders read at each use)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path / "jitcore"))


def _newest_region():
    return list(inductorex.COMPILED.values())[-1]


def _wrapper_source(region) -> str:
    (run,) = [r for r in region.variants.values() if r is not region.eager_fn]
    return inductor_kernels._compiled_graph(getattr(run, "resolve", lambda: run)()).source_code


def test_a_region_of_one_kernel_builds_the_kernel_alone_and_reports_its_stages(empty_caches):
    def chain(x):  # (constants of its own: a region text no other test compiles)
        return torch.tanh((x * 1.25 + 0.5).sin() * x) - 0.375

    x = torch.randn(64, 64)
    jf = jitcore.jit(chain, executors=[inductorex.inductor_ex])
    torch.testing.assert_close(jf(x), chain(x))
    region = _newest_region()
    assert region.python_wrapper and "async_compile.cpp_pybinding(" in _wrapper_source(region)  # (the Python wrapper)
    stats = jitcore.last_compile_stats(jf)
    assert stats["region_compiles"] == 1 and stats["cpp_builds"] >= 1
    assert set(stats["region_stages"]) == {"graph", "lowering", "codegen", "cpp_build", "load"}
    assert stats["region_stages"]["cpp_build"] > 0 and stats["region_stages"]["graph"] > 0
    assert [r["region"] for r in stats["region_log"]] == [region.name]
    torch.testing.assert_close(jf(x + 1), chain(x + 1))  # (the compiled variant, called again)
    assert jitcore.last_compile_stats(jf)["region_compiles"] == 0


def test_a_region_guessed_with_few_kernels_that_has_more_takes_the_cpp_wrapper(empty_caches, monkeypatch):
    def two_kernels(x):  # an elementwise chain and a reduction of it
        y = ((x * 0.75 + 0.125).cos() * x).exp()
        return y, y.sum(-1)

    monkeypatch.setattr(inductorex, "few_kernels", lambda sub: True)  # (the guess, wrong here:)
    monkeypatch.setattr(inductorex, "MAX_KERNELS", 0)  # (every kernel is one too many)
    x = torch.randn(32, 48)
    jf = jitcore.jit(two_kernels, executors=[inductorex.inductor_ex])
    for got, want in zip(jf(x), two_kernels(x)):
        torch.testing.assert_close(got, want)
    region = _newest_region()
    assert not region.python_wrapper and "async_compile.cpp_pybinding(" not in _wrapper_source(region)


def test_the_guess_of_one_kernel():
    def regions(fn, *args):
        jf = jitcore.jit(fn, executors=[inductorex.inductor_ex])
        seen = []
        original = inductorex.compile_region

        def record(sub, program_order=False):
            seen.append(few_kernels(sub))
            return original(sub, program_order)

        inductorex.compile_region = record
        try:
            jf(*args)
        finally:
            inductorex.compile_region = original
        return seen

    x = torch.randn(16, 16)
    assert regions(lambda a: ((a * 2 + 1).sin() * a).exp(), x) == [True]
    assert regions(lambda a: ((a * 3 + 1).cos() * a).exp().sum(-1), x) == [True]  # (a pointwise nest, a reduction)
    assert regions(lambda a: a.exp().sum(0) + a.cos().sum(1), x) == [False]  # (two reductions, a pointwise sum)
    assert regions(lambda a: (a.exp() * 2).var(0) * 3, x) == [False]  # (a variance: not a kind the guess knows)
    w = torch.randn(16, 16)
    assert regions(lambda a, b: torch.nn.functional.gelu((a @ b).sin() * 2 + a) @ b, x, w) == [True]  # (library calls)
    # the MLP's backward: its layers' GELU gradients and their bias gradients are two kernels, each called per layer
    assert regions(lambda a, b: [(torch.nn.functional.gelu(a @ b) * (a @ b).cos()).sum(0) for _ in range(2)], x, w) \
        == [True]


def test_a_training_step_with_a_reduction_per_layer_builds_few_kernels_side_by_side(empty_caches):
    # the MLP's backward (linear, GELU, linear, GELU, linear): its GELU gradients, one kernel called per layer, and
    # its bias gradients, one more: the Python wrapper, each kernel a build of its own, side by side
    torch.manual_seed(0)
    width = 24  # (a size of its own: a region text no other test compiles)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                                torch.nn.GELU(), torch.nn.Linear(width, width))
    twin = copy.deepcopy(model)
    jm = jitcore.jit(model, executors=[inductorex.inductor_ex])
    for rows in (40, 40, 8):  # (the compiled backward, its variant called again, other sizes)
        x = torch.randn(rows, width)
        torch.testing.assert_close(jm(x), twin(x))
        jm(x).square().sum().backward()
        twin(x).square().sum().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        if rows == 40:
            assert "async_compile.cpp_pybinding(" in _wrapper_source(_newest_region())


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_an_mlp_whose_backward_takes_the_python_wrapper_equals_eager_over_calls(empty_caches, mode):
    # calls as users make them: training steps over batch sizes, a call under no_grad, a non-contiguous input (a view,
    # other strides than those compiled), gradients accumulated over calls, in every cache mode
    torch.manual_seed(1)
    width = 20 + CACHE_MODES.index(mode)  # (region texts of their own)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                                torch.nn.GELU(), torch.nn.Linear(width, width))
    twin = copy.deepcopy(model)
    jm = jitcore.jit(model, executors=[inductorex.inductor_ex], cache=mode)
    for rows, grad, view in ((32, True, False), (32, False, False), (32, True, True), (12, True, False),
                             (32, True, False)):
        base = torch.randn(rows, 2 * width)
        x = base[:, ::2] if view else base[:, :width].contiguous()
        with torch.set_grad_enabled(grad):
            out, ref = jm(x), twin(x)
        torch.testing.assert_close(out, ref)
        assert out.requires_grad == ref.requires_grad
        if grad:
            (out * torch.linspace(0, 1, width)).sum().backward()
            (ref * torch.linspace(0, 1, width)).sum().backward()
            for p, q in zip(model.parameters(), twin.parameters()):
                torch.testing.assert_close(p.grad, q.grad)


def test_a_cpp_wrapper_header_is_precompiled_with_the_kernel_prefix(tmp_path):
    class Codecache:
        _HEADER_DIR = str(tmp_path)

        @staticmethod
        def _get_cpp_wrapper_header(device):
            return "torch/csrc/inductor/cpp_wrapper/cpu.h"

        @staticmethod
        def _get_cpp_prefix_header(device):
            return "torch/csrc/inductor/cpp_prefix.h"

    path = cpu_compiler._with_kernel_prefix(Codecache, "torch/csrc/inductor/cpp_wrapper/cpu.h")
    assert open(path).read() == ("#include <torch/csrc/inductor/cpp_wrapper/cpu.h>\n"
                                 "#include <torch/csrc/inductor/cpp_prefix.h>\n")
    assert cpu_compiler._with_kernel_prefix(Codecache, "torch/csrc/inductor/cpp_wrapper/cpu.h") == path  # (one file)
    assert cpu_compiler._with_kernel_prefix(Codecache, "torch/csrc/inductor/cpp_prefix.h") == \
        "torch/csrc/inductor/cpp_prefix.h"  # (the kernels' own header: as Inductor asks)
