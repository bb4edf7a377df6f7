"""Tests: the memory passes (transforms/memory.py): results written into dead inputs' memory, and del-last-used."""
from __future__ import annotations

import pytest
import torch

import jitcore
from benchmarks.models import elementwise_chain as chain
from executors.torchex import OUT_FUNCTIONS, _aten_out_overload


@pytest.mark.parametrize("name", sorted(OUT_FUNCTIONS))
def test_out_functions_take_out_and_compute_elementwise(name):
    fn = getattr(torch, name)
    a, b = torch.rand(3, 4) + 0.5, torch.rand(3, 4) + 0.5
    if name.startswith(("bitwise", "logical")):
        a, b = (a * 10).to(torch.int64), (b * 10).to(torch.int64)
    if name == "logical_not":
        a = a > 1.0
    args = {"lerp": (a, b, 0.3), "clamp": (a, 0.6, 0.9)}.get(name)
    if args is None:
        try:
            expected, args = fn(a, b), (a, b)
        except TypeError:
            expected, args = fn(a), (a,)
    else:
        expected = fn(*args)
    buffer = args[0].clone()
    result = fn(buffer, *args[1:], out=buffer)  # written into its own input, as reuse_buffers prints it
    assert result.data_ptr() == buffer.data_ptr()
    torch.testing.assert_close(result, expected, equal_nan=True)


def test_pointwise_aten_backward_kernels_have_out_overloads():
    found = _aten_out_overload(torch.ops.aten.sigmoid_backward.default)
    assert found == (torch.ops.aten.sigmoid_backward.grad_input, "grad_input")
    assert _aten_out_overload(torch.ops.aten.mm.default) is None  # not pointwise: never written into an input


def test_chain_writes_into_dead_buffers_forward_and_backward():
    x = torch.randn(64, 32, requires_grad=True)
    jfn = jitcore.jit(chain)
    out = jfn(x)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_(True)
    expected = chain(xe)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, xe.grad)
    fwd, bwd = str(jitcore.last_traces(jfn)[-1]), str(jitcore.last_backward_traces(jfn)[-1])
    assert "out=" in fwd and "out=" in bwd
    assert "grad_input=" in bwd  # the aten backward kernels too (tanh_backward/sigmoid_backward)
    with torch.no_grad():
        x0 = x.detach().clone()
        torch.testing.assert_close(jfn(x0), chain(x0))
        assert torch.equal(x0, x.detach())  # inputs are never written


def test_inputs_outputs_and_saved_values_are_never_reused():
    def f(a, b):
        c = a * b  # fresh, but returned
        d = c + 1.0
        return c, d.exp() + a

    a, b = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    ac, bc = a.detach().clone(), b.detach().clone()
    jf = jitcore.jit(f)
    c, e = jf(a, b)
    torch.testing.assert_close(c, ac * bc)
    torch.testing.assert_close(e, (ac * bc + 1.0).exp() + ac)
    assert torch.equal(a.detach(), ac) and torch.equal(b.detach(), bc)
    # backward twice with retain_graph: the saved tensors survived the first backward
    loss = (c * 2 + e).sum()
    g1 = torch.autograd.grad(loss, (a, b), retain_graph=True)
    g2 = torch.autograd.grad(loss, (a, b))
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y)


def test_a_value_with_a_live_view_is_not_reused():
    def f(x):
        y = x * 2.0
        v = y.view(-1)  # aliases y
        z = torch.sin(y)  # y's last use, but its memory is visible through v
        return z, v

    x = torch.randn(4, 5)
    jf = jitcore.jit(f)
    z, v = jf(x)
    torch.testing.assert_close(z, torch.sin(x * 2.0))
    torch.testing.assert_close(v, (x * 2.0).view(-1))
    assert "out=" not in str(jitcore.last_traces(jf)[-1])


def test_broadcast_and_dtype_changes_are_not_reused():
    def f(x, y):
        a = x * 2.0  # [4, 1]
        b = a + y  # [4, 5]: a has the wrong shape to hold it
        c = b > 0.0  # bool: b has the wrong dtype
        return c, b.sum()

    x, y = torch.randn(4, 1), torch.randn(4, 5)
    jf = jitcore.jit(f)
    c, s = jf(x, y)
    torch.testing.assert_close(c, (x * 2.0 + y) > 0)
    torch.testing.assert_close(s, (x * 2.0 + y).sum())
    assert "out=" not in str(jitcore.last_traces(jf)[-1])


def test_reuse_under_symbolic_values():
    jf = jitcore.jit(chain, cache="symbolic values")
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), chain(x))
    assert jitcore.cache_misses(jf) == 1


def test_matmul_results_are_fresh_memory_and_views_of_them_are_not():
    from executors.torchex import makes_fresh
    from jitcore.ops.opaque import opaque_symbol

    def f(x, w, b):
        h = x @ w  # fresh memory: the add may write into it
        g = x @ (w * 3.0)
        return (h + b).relu(), g.t() * 2.0  # g has a live view (its transpose): the mul allocates

    x, w, b = torch.randn(6, 4), torch.randn(4, 4), torch.randn(4)
    jf = jitcore.jit(f)
    for got, want in zip(jf(x, w, b), f(x, w, b)):
        torch.testing.assert_close(got, want)
    lines = str(jitcore.last_traces(jf)[-1]).splitlines()
    assert any("torch.add(" in line and "out=" in line for line in lines)
    assert not any("torch.mul(" in line and "out=" in line for line in lines)
    fresh = opaque_symbol(torch.ops.aten.gelu_backward.default).bind(output=None)
    view = opaque_symbol(torch.ops.aten.t.default).bind(output=None)
    assert makes_fresh(fresh) and not makes_fresh(view)


def test_backward_frees_each_saved_tensor_after_its_last_use():
    import weakref

    from executors import OperatorExecutor
    from jitcore.ops import ltorch

    seen = {}
    probe = OperatorExecutor("probe_saved")

    def probing_cos(a):  # runs in the backward after tanh's saved output was last read
        seen["alive"] = [r() is not None for r in seen["refs"]]
        return torch.cos(a)

    probe.register_implementation(ltorch.cos, probing_cos)

    def f(x):
        return torch.tanh(torch.sin(x * 2.0)).exp()

    x = torch.randn(5, requires_grad=True)
    jf = jitcore.jit(f, executors=[probe])
    out = jf(x)
    backward = str(jitcore.last_backward_traces(jf)[-1])
    assert "def backward(saved, cotangents):" in backward and "saved.clear()" in backward
    seen["refs"] = [weakref.ref(t) for t in out.grad_fn.saved_tensors]
    out.sum().backward()
    assert seen["alive"] == [False, False, True]  # exp's and tanh's outputs gone; sin's input still needed
    xe = x.detach().requires_grad_(True)
    f(xe).sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    with pytest.raises(RuntimeError, match="second time"):
        out.sum().backward()  # the graph was freed, as in eager


def test_broadcast_cotangent_is_made_dense_once_for_several_matmuls():
    # out.sum().backward() hands the backward an expanded (stride-0) cotangent; both matmuls of the linear's
    # backward would copy it, so the program copies it once at the top
    from executors.torchex import _densify

    lin = torch.nn.Linear(8, 8)
    jm = jitcore.jit(lin)
    x = torch.randn(4, 8, requires_grad=True)
    out = jm(x)
    out.sum().backward()
    grads = [x.grad, lin.weight.grad, lin.bias.grad]
    x2 = x.detach().requires_grad_(True)
    lin.zero_grad()
    lin(x2).sum().backward()
    torch.testing.assert_close(grads, [x2.grad, lin.weight.grad, lin.bias.grad])
    backward = jitcore.last_backward_traces(jm)[-1]
    text = str(backward)
    assert "torchex.densify(" in text
    assert any("Densify broadcast inputs" in str(t) for t in jitcore.last_backward_traces(jm))
    assert "densify" not in str(jitcore.last_traces(jm)[-1])  # x feeds one matmul: left alone
    dense = torch.randn(3, 4)
    assert _densify(dense) is dense and _densify(dense.t()) is not None and _densify(dense.t()).data_ptr() == \
        dense.data_ptr()  # a transposed tensor is BLAS-ready: not copied
    expanded = torch.ones(()).expand(3, 4)
    assert _densify(expanded).is_contiguous() and _densify(expanded).stride() == (4, 1)


def test_memory_questions_go_to_the_executor_that_claimed_each_line():
    from executors import OperatorExecutor, python_ex, torch_ex
    from executors.claim import claim
    from jitcore.ops import ltorch
    from tests.helpers import tensor_inputs, trace_fn
    from transforms.memory import reuse_buffers

    def f(x):
        return ((x * 2.0).sin() + 1.0).exp()

    x = torch.randn(16)
    trace = trace_fn(f, x)
    claimed = claim(trace, [torch_ex, python_ex])
    assert all(b.claimed_by in (torch_ex, python_ex) for b in claimed.bound_symbols)
    reused = reuse_buffers(claimed)
    assert "out=" in str(reused)
    torch.testing.assert_close(reused.python_callable()(*tensor_inputs(x)), f(x))
    # an executor that answers nothing about memory (the Executor defaults): its lines are left alone
    quiet = OperatorExecutor("quiet_memory_ex")
    for op, fn in ((ltorch.mul, torch.mul), (ltorch.sin, torch.sin), (ltorch.add, torch.add), (ltorch.exp, torch.exp)):
        quiet.register_implementation(op, lambda *a, fn=fn, **k: fn(*a, **k), name=op.name)
    claimed = claim(trace, [quiet, torch_ex, python_ex])
    assert all(b.claimed_by is quiet for b in claimed.bound_symbols)
    assert reuse_buffers(claimed) is claimed


def test_inductor_regions_free_each_input_after_its_last_use_inside():
    # the backward's one region gets the saved tensors in a list it empties (a boxed call): the saved activations
    # are freed inside it before the (larger) input gradient is made, so a training step peaks no higher than
    # eager's, where a region holding its arguments until it returns peaks higher
    pytest.importorskip("torch._inductor")
    from benchmarks.measure import peak_memory_bytes

    def f(x, w1, w2):
        return (torch.sin(torch.tanh(x @ w1) * 1.5) @ w2).sum()

    gen = torch.Generator().manual_seed(0)
    x0, w10, w20 = (torch.randn(2048, 512, generator=gen), torch.randn(512, 128, generator=gen) / 20,
                    torch.randn(128, 16, generator=gen))

    def step_peak(fn):
        x, w1, w2 = (t.clone().requires_grad_(True) for t in (x0, w10, w20))
        peak = peak_memory_bytes(lambda: fn(x, w1, w2).backward())
        return peak, [x.grad, w1.grad, w2.grad]

    jf = jitcore.jit(f, executors=["inductor"])
    step_peak(jf)
    peak, grads = step_peak(jf)
    eager_peak, expected = step_peak(f)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, atol=1e-3, rtol=1e-4)
    backward = str(jitcore.last_backward_traces(jf)[-1])
    assert "inductor_fusion0.boxed(inductor_fusion0_args)" in backward
    assert peak <= eager_peak
    x, w1, w2 = (t.clone().requires_grad_(True) for t in (x0, w10, w20))
    with torch.no_grad():  # (no autodiff: the forward program's region is called boxed as well)
        # (a sum over 32768 values: Inductor adds in another order than eager's kernel)
        torch.testing.assert_close(jf(x, w1, w2), f(x0, w10, w20), rtol=1e-4, atol=1e-3)
