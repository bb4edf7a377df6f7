"""Tests: the nvFuser executor. On CPU: availability gives a clear error, regions form, and the lowering prints
the expected nvFuser Python frontend program (the same translator rows build the real FusionDefinition). On a
machine with CUDA and nvFuser: results equal eager (marked `nvfuser`, skipped elsewhere).
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from executors import torch_ex
from executors.claim import claim, flatten_to_prims
from executors.nvfuserex import NvFuserExecutor, nvfuser_ex, nvfuser_program
from executors.nvfuserex.translate import TRANSLATORS, contiguity, translatable
from tests.helpers import trace_fn

# claims CPU proxies too, so regions and their lowering can be inspected here
nv_cpu = NvFuserExecutor("nvfuser_cpu_view", require_cuda=False)


def program(fn, *args, inputs=None) -> str:
    return nvfuser_program(flatten_to_prims(trace_fn(fn, *args)), inputs)


def body(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()[1:]]


def test_unavailable_without_cuda_is_a_clear_error():
    ok, why = nvfuser_ex.is_available()
    if ok:
        pytest.skip("nvFuser is available here")
    assert "CUDA" in why or "nvFuser" in why
    for ex in (nvfuser_ex, "nvfuser"):
        with pytest.raises(RuntimeError, match=r"nvfuser.*cannot be used here"):
            jitcore.jit(lambda x: x + 1, executors=[ex])


def test_elementwise_chain_program():
    text = program(lambda x, y: torch.exp(x * y) + 1.0, torch.randn(2, 3), torch.randn(2, 3))
    assert body(text) == [
        "T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=True)",
        "T1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=True)",
        "T2 = fd.ops.mul(T0, T1)",
        "T3 = fd.ops.exp(T2)",
        "S4 = fd.define_scalar(1.0, dtype=DataType.Double)",
        "T5 = fd.ops.add(T3, S4)",
        "fd.add_output(T5)",
    ]
    assert text.startswith("with FusionDefinition() as fd:\n")


def test_reduction_program():
    lines = body(program(lambda x: x.sum(1), torch.randn(4, 5)))
    assert "T1 = fd.ops.sum(T0, dims=[1], keepdim=False, dtype=DataType.Null)" in lines
    lines = body(program(lambda x: torch.amax(x, (0, 2)), torch.randn(2, 3, 4)))
    assert "T1 = fd.ops.max(T0, dims=[0, 2], keepdim=False, dtype=DataType.Null)" in lines


def test_broadcast_program():
    lines = body(program(lambda x, y: x + y, torch.randn(4, 1), torch.randn(4, 5)))
    assert lines[0].startswith("T0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None]")
    assert lines[2:] == ["T2 = fd.ops.reshape(T0, new_shape=[4])",
                         "T3 = fd.ops.broadcast_in_dim(T2, shape=[4, 5], broadcast_dims=[0])",
                         "T4 = fd.ops.add(T3, T1)",
                         "fd.add_output(T4)"]


def test_where_and_cast_program():
    lines = body(program(lambda c, x: torch.where(c, x, 0.0).to(torch.bfloat16),
                         torch.rand(3) > 0.5, torch.randn(3)))
    assert lines[0] == "T0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool, is_cpu=True)"
    assert any(line.startswith("T") and "fd.ops.where(T0, T1, " in line for line in lines), lines
    assert any("fd.ops.cast(" in line and "dtype=DataType.BFloat16" in line for line in lines), lines


def test_input_signature_from_real_tensors():
    x = torch.randn(4, 6)
    lines = body(program(lambda a: a.neg(), x, inputs=[x.t()]))
    assert lines[0] == "T0 = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float, " \
                       "is_cpu=True)"
    assert contiguity((2, 3, 4), (12, 4, 1)) == (True, True, True)
    assert contiguity((2, 1, 4), (4, 4, 1)) == (True, None, True)
    assert contiguity((4, 3), (1, 4)) == (False, False)


def test_regions_form_and_print():
    def f(x, w):
        a = (x * 2.0).tanh()
        return (a @ w).sigmoid() + 1.0

    t = claim(trace_fn(f, torch.randn(3, 3), torch.randn(3, 3)), [nv_cpu, torch_ex])
    assert [b.sym.name for b in t.bound_symbols] == ["nvFusion0"]  # matmul has a row: one region
    assert "t6 = nvFusion0(t0, t1)" in str(t)
    region = t.bound_symbols[0]
    prog = nvfuser_program(region.region_trace)
    assert "fd.ops.matmul(" in prog and "fd.ops.sigmoid(" in prog


def test_checkers_refuse():
    x = torch.randn(3, 4)
    refused = [
        trace_fn(lambda a: torch.flip(a, (0,)), x),  # no row for flip
        trace_fn(lambda a: a + 1, torch.ones(3, dtype=torch.uint8)),  # dtype
        trace_fn(lambda a: torch.nn.functional.dropout(a, 0.5, training=True), x),  # random
    ]
    for tr in refused:
        assert not nv_cpu.can_execute(tr.bound_symbols[0]), tr
    assert not nvfuser_ex.can_execute(trace_fn(lambda a: a + 1, x).bound_symbols[0])  # CPU tensors
    assert translatable(trace_fn(lambda a: torch.nn.functional.gelu(a), x).bound_symbols[0])
    assert "prims.add" in TRANSLATORS and "prims.var_mean" in TRANSLATORS


def _has_nvfuser() -> bool:
    return nvfuser_ex.is_available()[0]


@pytest.mark.nvfuser
@pytest.mark.skipif(not _has_nvfuser(), reason="needs CUDA and nvFuser")
def test_nvfuser_matches_eager_on_gpu():
    def f(x, y):
        z = torch.nn.functional.layer_norm(x + y, (x.shape[-1],))
        return torch.nn.functional.gelu(z).sum(-1), z.to(torch.bfloat16)

    x = torch.randn(8, 32, device="cuda", requires_grad=True)
    y = torch.randn(8, 32, device="cuda")
    jfn = jitcore.jit(f, executors=[nvfuser_ex])
    out = jfn(x, y)
    expected = f(x, y)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)
    assert "nvFusion0" in str(jitcore.last_traces(jfn)[-1])
    out[0].sum().backward()
