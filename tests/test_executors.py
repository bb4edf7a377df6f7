"""Tests: executors. Claim order and fallbacks, custom executors (the executors/base.py worked example), the
dependency-safe regions of executors/regions.py (no cycles, side effects never move), and the inductor executor
against eager, forward and backward. Inductor compiles cost seconds on CPU: only a handful run here.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import jitcore
from executors import OperatorExecutor, python_ex, torch_ex
from executors.base import FusionExecutor
from executors.claim import claim
from executors.regions import fuse_regions, has_side_effect
from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.ops import ltorch
from jitcore.ops.registry import PRIMS
from tests.helpers import assert_same, tensor_inputs, trace_fn

ELEMENTWISE = {"ltorch.sin", "ltorch.cos", "ltorch.exp", "ltorch.add", "ltorch.mul", "ltorch.sub", "ltorch.neg",
               "ltorch.tanh", "ltorch.div", "ltorch.sigmoid", "ltorch.where", "ltorch.gt"}


class EagerFusion(FusionExecutor):
    """A test fusion executor: claims ELEMENTWISE ops, fuses them into regions that run eagerly (no compile)."""

    def can_execute(self, bsym):
        return bsym.sym.id in ELEMENTWISE and not has_side_effect(bsym)

    def execute(self, bsym):
        line = torch_ex.execute(bsym)
        line.executor = self.name
        return line

    def fuse(self, trace):
        return fuse_regions(trace, lambda b: b.executor == self.name and b.region_trace is None,
                            lambda sub: sub.python_callable(), prefix="eager_fusion", executor_name=self.name)


eager_fusion = EagerFusion("eager_fusion_test")


def run_claimed(fn, executors, *args):
    trace = trace_fn(fn, *args)
    claimed = claim(trace, executors)
    return claimed, claimed.python_callable()(*tensor_inputs(*args))


def kernel_names(trace) -> list[str]:
    return [b.sym.qualname for b in trace.bound_symbols]


# -- claim order and fallbacks ------------------------------------------------------------------------------------
first_ex = OperatorExecutor("first_ex")
first_ex.register_implementation(ltorch.add, lambda input, other, *, alpha=1: torch.add(input, other, alpha=alpha),
                                 name="my_add", checker=lambda input, other, *, alpha=1: input.dtype == torch.float32)


def add_sin(x, y):
    return torch.add(x, y).sin()


def test_earlier_executor_wins():
    x, y = torch.randn(3), torch.randn(3)
    t, out = run_claimed(add_sin, [first_ex, torch_ex], x, y)
    assert kernel_names(t) == ["first_ex.my_add", "torch.sin"]
    assert_same(out, add_sin(x, y))
    t, _ = run_claimed(add_sin, [torch_ex, first_ex], x, y)
    assert kernel_names(t) == ["torch.add", "torch.sin"]


def test_refused_op_falls_through():
    x, y = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    t, out = run_claimed(add_sin, [first_ex, torch_ex], x, y)
    assert kernel_names(t) == ["torch.add", "torch.sin"]
    assert_same(out, add_sin(x, y))


def test_unclaimed_composite_decomposes_and_unclaimed_prim_is_an_error():
    prim_ex = OperatorExecutor("prims_only")
    prim_ex.register_implementation(PRIMS["sin"], torch.sin, name="sin")
    t, out = run_claimed(lambda x: x.sin(), [prim_ex], torch.ones(2))
    assert kernel_names(t) == ["prims_only.sin"]  # ltorch.sin had no taker: its prim was claimed
    assert_same(out, torch.ones(2).sin())
    with pytest.raises(UnsupportedError, match=r"prims.cos.*prims_only"):
        claim(trace_fn(lambda x: x.cos(), torch.ones(2)), [prim_ex])


# -- the worked example of executors/base.py ----------------------------------------------------------------------
myex = OperatorExecutor("myex")


def my_gelu(a, approximate="none"):
    return torch.nn.functional.gelu(a, approximate=approximate)


myex.register_implementation(ltorch.gelu, my_gelu, checker=lambda a, approximate="none": a.dtype == torch.float32)


def gelu_twice(x):
    return F.gelu(x) * 2


def test_register_implementation_with_checker():
    jfn = jitcore.jit(gelu_twice, executors=[myex])
    x = torch.randn(4)
    assert_same(jfn(x), gelu_twice(x))
    assert "= myex.my_gelu(t0)" in str(jitcore.last_traces(jfn)[-1])
    assert_same(jfn(x.double()), gelu_twice(x.double()))  # float64: refused by the checker, torch runs it
    assert "myex" not in str(jitcore.last_traces(jfn)[-1]).split("def computation")[1]


def test_register_operator_with_vjp(monkeypatch):
    from transforms.vjp_rules import VJP_RULES

    sq_ex = OperatorExecutor("square_ex")
    square = sq_ex.register_operator("square", meta=lambda a: a.like(), fn=lambda a: a * a)
    # a row for this test only: the registry test (test_autodiff) checks every row of the table has samples
    monkeypatch.setitem(VJP_RULES, square.id, lambda bsym, g: (ltorch.mul(g, ltorch.mul(bsym.args[0], 2.0)),))

    def fn(x):
        return square(x).sin()

    jfn = jitcore.jit(fn, executors=[sq_ex])
    x = torch.randn(5, requires_grad=True)
    out = jfn(x)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_(True)
    (xe * xe).sin().sum().backward()
    assert_same(out.detach(), (xe * xe).sin().detach())
    torch.testing.assert_close(x.grad, xe.grad)
    assert "square_ex.square(t0)" in str(jitcore.last_traces(jfn)[-1])


# -- regions ----------------------------------------------------------------------------------------------------------
def chain(x):
    return ((x * 2.0).sin() + 1.0).exp() - x


def test_chain_is_one_region_printed_as_one_line():
    x = torch.randn(4, 5)
    t, out = run_claimed(chain, [eager_fusion, torch_ex], x)
    assert_same(out, chain(x))
    assert len(t.bound_symbols) == 1
    region = t.bound_symbols[0]
    text = str(t)
    assert "t5 = eager_fusion0(t0)" in text
    assert "# t1 = torch.mul(t0, 2.0)" in text  # the body stays visible as comments
    sub = region.region_trace
    assert [b.sym.qualname for b in sub.bound_symbols] == ["torch.mul", "torch.sin", "torch.add", "torch.exp",
                                                           "torch.sub"]
    assert "def eager_fusion0(t0):" in str(sub)
    assert_same(sub.python_callable()(x), chain(x))


def split_by_matmul(x, w):
    a = x.sin()
    m = a @ w  # not fusible: depends on the region's output and feeds it
    return a.cos() + m


def test_non_fusible_line_between_splits_region_without_cycle():
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    t, out = run_claimed(split_by_matmul, [eager_fusion, torch_ex], x, w)
    assert_same(out, split_by_matmul(x, w))
    names = kernel_names(t)
    assert names == ["torch.sin", "torch.matmul", "eager_fusion0"] or names[1] == "torch.matmul", names
    # every line reads only values defined before it
    defined = {p.name for p in t.args}
    for b in t.bound_symbols:
        assert all(a.name in defined for a in b.flat_proxy_args()), b
        defined |= {o.name for o in b.flat_proxy_outs()}


def independent(x, w):
    s = x.sin()
    m = x @ w
    c = x.cos()
    return s + c, m


def test_independent_fusible_lines_merge_across_non_fusible():
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    t, out = run_claimed(independent, [eager_fusion, torch_ex], x, w)
    assert_same(out, independent(x, w))
    assert kernel_names(t) == ["eager_fusion0", "torch.matmul"]
    assert len(t.bound_symbols[0].subsymbols) == 3


def with_dropout(x):
    a = x.sin() * 2.0
    d = F.dropout(a, 0.5, training=True)
    b = x.cos() * 3.0
    return d + b


def test_random_op_is_never_crossed():
    x = torch.randn(64)
    t = claim(trace_fn(with_dropout, x), [eager_fusion, torch_ex])
    names = kernel_names(t)
    drop = names.index("torchex.dropout")  # torch's dropout on a contiguous input (the draw order eager's had)
    assert names == ["eager_fusion0", "torchex.dropout", "eager_fusion1"], names
    # cos (after the draw in the source) stays after it
    assert all(b.sym.id != "torch.cos" for b in t.bound_symbols[drop - 1].subsymbols)
    torch.manual_seed(0)
    got = t.python_callable()(x)
    torch.manual_seed(0)
    assert_same(got, with_dropout(x))


def with_inplace(x):
    y = x.sin()
    x.add_(1.0)
    return y + x.cos()


def test_inplace_op_is_never_crossed():
    x = torch.randn(6)
    t = claim(trace_fn(with_inplace, x), [eager_fusion, torch_ex])
    names = kernel_names(t)
    assert names.index("torch.Tensor.add_") == 1, names
    assert_same(t.python_callable()(x.clone()), with_inplace(x.clone()))


def test_single_line_regions_stay_unfused():
    t, _ = run_claimed(lambda x, w: (x.sin() @ w).cos(), [eager_fusion, torch_ex], torch.randn(2, 2),
                       torch.randn(2, 2))
    assert kernel_names(t) == ["torch.sin", "torch.matmul", "torch.cos"]


# -- inductor (each distinct region compiles once per process: keep these few) ---------------------------------
inductor_ex = pytest.importorskip("executors.inductorex").inductor_ex


def elementwise(x, y):
    z = torch.tanh(x * 2.0 + y)
    return torch.sigmoid(z) * x - z.sum(-1, keepdim=True)


def test_inductor_region_equals_eager_and_is_reused():
    from executors import inductorex

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    t, out = run_claimed(elementwise, [inductor_ex, torch_ex], x, y)
    torch.testing.assert_close(out, elementwise(x, y))
    assert kernel_names(t) == ["inductor_fusion0"]
    assert "inductor_fusion0(t0, t1)" in str(t)
    region = t.bound_symbols[0]
    before = dict(inductorex.STATS)
    # the same region in another function (other proxy names) reuses the compiled code
    t2, out2 = run_claimed(lambda a, b: elementwise(a, b), [inductor_ex, torch_ex], x, y)
    assert inductorex.STATS["reused"] == before["reused"] + 1
    assert t2.bound_symbols[0].sym.call_ctx["inductor_fusion0"] is region.sym.call_ctx["inductor_fusion0"]
    torch.testing.assert_close(out2, out)


def test_inductor_regions_round_half_precision_like_eager():
    # Inductor keeps a bf16 intermediate in float32 across a fused kernel unless told to emulate the cast
    def f(x):
        y = x.to(torch.bfloat16) * 3
        return torch.nn.functional.layer_norm(y.float(), (x.shape[-1],)).relu().mean(0)

    x = torch.randn(4, 8)
    jfn = jitcore.jit(f, executors=["inductor"])
    torch.testing.assert_close(jfn(x), f(x))
    # (torch 2.11's CPU kernels would keep the product in float32: the region is not fused there, see compat)
    fused = "inductor_fusion0" in str(jitcore.last_traces(jfn)[-1])
    assert fused != compat.INDUCTOR_CPU_DROPS_HALF_ROUNDING


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_inductor_cuda_regions_round_half_precision_like_eager():
    # the same on a GPU (Triton's kernels): a bf16 product kept in float32 would be ~1e-3 from eager, far above
    # float32's reordering noise; jitcore asks Inductor for emulate_precision_casts on every device
    def f(x):
        y = x.to(torch.bfloat16) * 3
        return torch.nn.functional.layer_norm(y.float(), (x.shape[-1],)).relu().mean(0)

    x = torch.randn(64, 256, device="cuda")
    jfn = jitcore.jit(f, executors=["inductor"])
    torch.testing.assert_close(jfn(x), f(x))
    assert "inductor_fusion0" in str(jitcore.last_traces(jfn)[-1])


def test_inductor_region_compiles_a_variant_per_input_strides():
    # compiled code assumes its inputs' strides: a transposed input of the same shape must not reuse it
    jfn = jitcore.jit(elementwise, executors=["inductor"])
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(jfn(x, y), elementwise(x, y))
    xt = torch.randn(16, 16).t()
    torch.testing.assert_close(jfn(xt, y), elementwise(xt, y))
    ys = torch.randn(16, 32)[:, ::2]
    torch.testing.assert_close(jfn(x, ys), elementwise(x, ys))
    region = jitcore.last_traces(jfn)[-1].bound_symbols[0]
    assert len(region.sym.call_ctx["inductor_fusion0"].variants) >= 2


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_inductor_region_whose_composite_depends_on_a_decomposed_layout(cache):
    # a cat that keeps one non-empty tensor (HF's empty key cache), scaled, transposed and multiplied: Inductor's
    # cat of one tensor keeps its strides where eager's is contiguous, so matmul's view-or-copy choice must be
    # traced after Inductor's decompositions (it compiled to "Cannot view a tensor" and ran eagerly, with a warning)
    def attention_scores(cache_k, k, q):
        k = torch.cat([cache_k, k], dim=-2) * 0.5
        return torch.matmul(q, k.transpose(-1, -2)).softmax(-1)

    base = torch.randn(4, 32, 64, requires_grad=True)
    q = torch.randn(4, 4, 32, 16, requires_grad=True)
    heads = lambda: base.view(4, 32, 4, 16).permute(0, 2, 1, 3)  # noqa: E731
    jfn = jitcore.jit(attention_scores, executors=["inductor"], cache=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = jfn(torch.empty(0), heads(), q)
        out.pow(2).sum().backward()
    assert not [w for w in caught if "inductor" in str(w.message)]  # a region that fails to compile warns
    grads = base.grad, q.grad
    base.grad = q.grad = None
    expected = attention_scores(torch.empty(0), heads(), q)
    expected.pow(2).sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, (base.grad, q.grad))
    assert "inductor_fusion" in str(jitcore.last_traces(jfn)[-1])


@pytest.mark.parametrize("executors", [None, ["inductor"], [myex, "inductor"]], ids=["torch", "inductor", "myex"])
def test_jit_forward_and_backward_equal_eager(executors):
    x = torch.randn(8, 16, requires_grad=True)
    y = torch.randn(8, 16, requires_grad=True)
    jfn = jitcore.jit(elementwise, executors=executors)
    out = jfn(x, y)
    out.sum().backward()
    xe, ye = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
    expected = elementwise(xe, ye)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(y.grad, ye.grad)
    if executors and "inductor" in executors:
        assert "inductor_fusion0" in str(jitcore.last_traces(jfn)[-1])
        assert "inductor_fusion0" in str(jitcore.last_backward_traces(jfn)[-1])


def test_inductor_refuses_what_it_cannot_fuse():
    from executors.inductorex import InductorExecutor

    x = torch.randn(4, 4)
    tr = trace_fn(lambda a: (F.dropout(a, 0.5, training=True), a.add_(1), torch.fft.fft(a)), x)
    claimed = {b.sym.id: inductor_ex.can_execute(b) for b in tr.bound_symbols}
    assert not any(claimed.values()), claimed
    no_mm = InductorExecutor("inductor_no_matmul", fuse_matmul=False)
    mm = trace_fn(lambda a: a @ a, x).bound_symbols[0]
    assert inductor_ex.can_execute(mm) and not no_mm.can_execute(mm)
    cplx = trace_fn(lambda a: a * 2, torch.randn(3, dtype=torch.complex64)).bound_symbols[0]
    assert not inductor_ex.can_execute(cplx)


def test_inductor_takes_pure_aten_ops():
    from jitcore.ops.opaque import opaque_symbol

    aten = torch.ops.aten
    x = torch.randn(4, 4)
    tr = trace_fn(lambda g, a: (opaque_symbol(aten.gelu_backward.default)(g, a),
                                opaque_symbol(aten.bernoulli.default)(a),
                                opaque_symbol(aten.add_.Tensor)(a, g)), x, x)
    assert [inductor_ex.can_execute(b) for b in tr.bound_symbols] == [True, False, False]
    assert has_side_effect(tr.bound_symbols[1]) and has_side_effect(tr.bound_symbols[2])
    assert not has_side_effect(tr.bound_symbols[0])


def test_executors_are_subclasses_not_patched_instances():
    from executors.inductorex import InductorExecutor, inductor_ex
    from executors.nvfuserex import NvFuserExecutor, nvfuser_ex
    from executors.pythonex import PythonExecutor
    from executors.torchex import TorchExecutor

    for ex, cls in ((torch_ex, TorchExecutor), (python_ex, PythonExecutor), (inductor_ex, InductorExecutor),
                    (nvfuser_ex, NvFuserExecutor)):
        assert type(ex) is cls
        assert not {"can_execute", "execute", "fuse", "out_form", "makes_fresh"} & set(vars(ex)), ex


def test_inductor_fuses_the_prims_tagged_elementwise():
    from executors.inductorex import FUSIBLE_PRIMS
    from jitcore.ir.symbol import Tag

    elementwise = {s.id for s in PRIMS.values() if Tag.ELEMENTWISE in s.tags}
    assert {"prims.add", "prims.sin", "prims.where", "prims.convert_element_type", "prims.eq"} <= elementwise
    assert not elementwise & {"prims.sum", "prims.matmul", "prims.reshape", "prims.uniform"}
    assert elementwise <= FUSIBLE_PRIMS


def test_executor_names_resolve():
    from executors.base import get_executor

    assert get_executor("inductor") is inductor_ex
    assert get_executor("torch") is torch_ex and get_executor("python") is python_ex


@pytest.mark.slow
def test_inductor_mlp_and_block_forward_backward():
    from benchmarks.models import Block, GPTConfig, mlp

    for model, x in ((mlp(64, 2), torch.randn(8, 64)), (Block(GPTConfig(n_embd=32, n_head=2)), torch.randn(2, 8, 32))):
        jm = jitcore.jit(model, executors=["inductor"])
        out = jm(x)
        out.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(x)
        expected.sum().backward()
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)


def test_inductor_fuses_under_symbolic_values_without_a_compile_per_size():
    # symbolic sizes: the region is compiled for dynamic shapes, so new sizes reuse it instead of recompiling
    def f(x, y):
        z = torch.sin(x * 2 + y).reshape(x.shape[0] * x.shape[1])
        return z.exp().sum() * x.shape[0], torch.tanh(y) - 1

    jfn = jitcore.jit(f, executors=["inductor"], cache="symbolic values")
    for n in (3, 5, 6, 9):
        x = torch.randn(n, 4, requires_grad=True)
        y = torch.randn(n, 4, requires_grad=True)
        out = jfn(x, y)
        (out[0] + out[1].sum()).backward()
        xe, ye = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
        expected = f(xe, ye)
        (expected[0] + expected[1].sum()).backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close((x.grad, y.grad), (xe.grad, ye.grad))
    assert jitcore.cache_misses(jfn) == 1
    fwd, bwd = jitcore.last_traces(jfn)[-1], jitcore.last_backward_traces(jfn)[-1]
    assert "inductor_fusion0" in str(fwd) and "inductor_fusion0" in str(bwd)
    region = next(b for b in fwd.bound_symbols if b.region_trace is not None).sym.call_ctx["inductor_fusion0"]
    assert region.dynamic and len(region.guarded) == 1  # one compiled variant for every size
    assert region.guarded[0][1] is not region.eager_fn  # compiled, not fallen back


# -- kernels chosen by input (executors/torchex.BY_INPUT) ----------------------------------------------------------
@pytest.mark.parametrize("split", [lambda x: torch.split(x, 3, -1), lambda x: x.split([2, 5], 1),
                                   lambda x: x.split(7, 1)])
def test_split_runs_as_split_with_sizes(split):
    def fn(x):
        return [p * (i + 1) for i, p in enumerate(split(x))]

    x = torch.randn(4, 7, requires_grad=True)
    jfn = jitcore.jit(fn)
    got, want = jfn(x), fn(x)
    assert_same(got, want)
    assert_same(torch.autograd.grad(sum(g.sum() for g in got), x), torch.autograd.grad(sum(w.sum() for w in want), x))
    assert "torch.Tensor.split_with_sizes(" in str(jitcore.last_traces(jfn)[-1])


def test_split_of_symbolic_size_keeps_torch_split():
    jfn = jitcore.jit(lambda x: [p.sum() for p in torch.split(x, 2)], cache="symbolic values")
    for n in (4, 5, 6):
        x = torch.randn(n, 3)
        assert_same(jfn(x), [p.sum() for p in torch.split(x, 2)])
    assert "split_with_sizes" not in str(jitcore.last_traces(jfn)[-1])


# -- which regions the inductor executor compiles (op class and cost: executors/inductorex.py worth_compiling) -----
def _regions(trace) -> list[str]:
    return [b.sym.name for b in trace.bound_symbols if b.region_trace is not None]


def test_inductor_leaves_library_kernels_and_small_regions_to_torch():
    def linear_relu(x, w):  # a matmul and one loop op: the same two kernel calls either way
        return torch.relu(x @ w)

    def short_chain(a, b):  # three loop ops
        return torch.tanh(a * b + 1.0)

    def long_chain(a, b):  # five loop ops
        return torch.tanh(a * b + 1.0).sin() * a

    calls = [(linear_relu, (torch.randn(64, 64), torch.randn(64, 64)), False),
             (short_chain, (torch.randn(2, 2), torch.randn(2, 2)), False),  # too small to pay a compiled call
             (short_chain, (torch.randn(128, 128), torch.randn(128, 128)), True),
             (long_chain, (torch.randn(2, 2), torch.randn(2, 2)), True)]
    for fn, args, fused in calls:
        jfn = jitcore.jit(fn, executors=["inductor"])
        torch.testing.assert_close(jfn(*args), fn(*args))
        assert bool(_regions(jitcore.last_traces(jfn)[-1])) == fused, (fn.__name__, args[0].shape)


def test_inductor_op_classes():
    from executors.inductorex import op_class, worth_compiling

    def f(x, w):
        y = x.t() @ w  # a view, a matmul
        return torch.nn.functional.gelu(y).sum(0)

    trace = trace_fn(f, torch.randn(4, 3), torch.randn(4, 5))
    classes = {b.sym.name: op_class(b) for b in trace.bound_symbols if b.sym.id.startswith("ltorch")}
    assert classes == {"t": "view", "matmul": "library", "gelu": "loop", "sum": "loop"}
    assert worth_compiling(["loop", "loop"], None)  # symbolic sizes: counted as large
    assert not worth_compiling(["loop", "library", "view", "library"], 10**6)
    assert worth_compiling(["loop"] * 4, 4)


def test_inductor_training_step_of_a_gated_mlp_with_rms_norm_equals_eager():
    # a Llama-style feed-forward (RMS norm, SiLU gate), not one of the benchmark models: three training steps
    class GatedMLP(torch.nn.Module):
        def __init__(self, d=32, h=64):
            super().__init__()
            self.norm_w = torch.nn.Parameter(torch.ones(d))
            self.gate, self.up, self.down = (torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False),
                                             torch.nn.Linear(h, d, bias=False))

        def forward(self, x):
            n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_w
            return x + self.down(F.silu(self.gate(n)) * self.up(n))

    torch.manual_seed(0)
    model = GatedMLP()
    ref = GatedMLP()
    ref.load_state_dict(model.state_dict())
    jm = jitcore.jit(model, executors=["inductor"])
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for batch in (8, 8, 16):
        x = torch.randn(batch, 16, 32)
        for m, o in ((jm, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
    assert _regions(jitcore.last_traces(jm)[-1]) and _regions(jitcore.last_backward_traces(jm)[-1])
