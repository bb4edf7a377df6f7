"""Torch-level creation ops (jitcore/ops/torch_creation.py) against torch: sizes, dtype inference, devices,
requires_grad; random ops are checked for metadata and ranges (their values come from torch's generator)."""
from __future__ import annotations

import pytest
import torch

from jitcore.errors import MetaError
from tests.core_ops_checks import J, check_factory, sample
from tests.helpers import run_ways, trace_fn

F32, I64 = torch.float32, torch.int64

NO_INPUT = {
    "zeros": lambda t: t.zeros(2, 3),
    "zeros_tuple": lambda t: t.zeros((2, 0), dtype=torch.int32),
    "zeros_size_kw": lambda t: t.zeros(size=(3,)),
    "ones": lambda t: t.ones([4], dtype=torch.bool),
    "ones_0d": lambda t: t.ones(()),
    "empty_shape": lambda t: t.empty(2, 5).shape,
    "full_int": lambda t: t.full((2, 2), 7),
    "full_float": lambda t: t.full((2,), 1.5),
    "full_bool": lambda t: t.full((3,), True),
    "full_dtype": lambda t: t.full([2], 3, dtype=torch.float64),
    "scalar_tensor": lambda t: t.scalar_tensor(3),
    "arange_end": lambda t: t.arange(5),
    "arange_start_end": lambda t: t.arange(-3, 7, 2),
    "arange_neg_step": lambda t: t.arange(10, 1, -3),
    "arange_float": lambda t: t.arange(0, 1, 0.1),
    "arange_float_end": lambda t: t.arange(2.5),
    "arange_dtype": lambda t: t.arange(6, dtype=torch.float64),
    "arange_empty": lambda t: t.arange(3, 3),
    "arange_bf16": lambda t: t.arange(0, 8, 0.5, dtype=torch.bfloat16),
    "linspace": lambda t: t.linspace(0, 1, 7),
    "linspace_rev": lambda t: t.linspace(3, -2.5, 11, dtype=torch.float64),
    "linspace_int": lambda t: t.linspace(-3, 10, 7, dtype=torch.int32),
    "linspace_one": lambda t: t.linspace(2, 5, 1),
    "linspace_zero": lambda t: t.linspace(2, 5, 0),
    "logspace": lambda t: t.logspace(0, 2, 5),
    "logspace_base": lambda t: t.logspace(-1, 1, 4, base=2.0, dtype=torch.float64),
    "eye": lambda t: t.eye(3),
    "eye_rect": lambda t: t.eye(2, 4, dtype=torch.int64),
    "tril_indices": lambda t: t.tril_indices(3, 4),
    "triu_indices": lambda t: t.triu_indices(4, 3, 1),
    "tril_indices_empty": lambda t: t.tril_indices(0, 3),
    "tensor_list": lambda t: t.tensor([[1, 2], [3, 4]]),
    "tensor_float": lambda t: t.tensor([1, 2.5]),
    "tensor_bool": lambda t: t.tensor([True, False]),
    "tensor_scalar": lambda t: t.tensor(3.0, dtype=torch.float64),
    "tensor_empty": lambda t: t.tensor([]),
    "as_tensor": lambda t: t.as_tensor([1, 2], dtype=torch.float32),
}


@pytest.mark.parametrize("name", list(NO_INPUT))
def test_creation_matches_torch(name):
    tol = {"atol": 1e-6, "rtol": 1e-6} if name.startswith(("linspace", "logspace")) else {}
    if name == "empty_shape":
        assert run_ways(lambda: NO_INPUT[name](J))["prims"] == (2, 5)
        return
    check_factory(NO_INPUT[name], **tol)


LIKE = {
    "zeros_like": lambda t, a: t.zeros_like(a),
    "ones_like": lambda t, a: t.ones_like(a, dtype=torch.int64),
    "full_like": lambda t, a: t.full_like(a, 2),
    "new_zeros": lambda t, a: a.new_zeros(2, 3),
    "new_ones": lambda t, a: a.new_ones((1,)),
    "new_full": lambda t, a: a.new_full((2,), 4),
    "new_tensor": lambda t, a: a.new_tensor([1, 2]),
    "tensor_of_tensor": lambda t, a: t.tensor(a, dtype=torch.float64),
    "as_tensor_of_tensor": lambda t, a: t.as_tensor(a, dtype=torch.int64) + 1,
    "tensor_of_0d": lambda t, a: t.tensor([a.flatten()[0], a.flatten()[-1]]),
    "full_0d_fill": lambda t, a: t.full((2, 2), a.sum()),
}


@pytest.mark.parametrize("name", list(LIKE))
@pytest.mark.parametrize("dtype", [F32, I64, torch.bool])
def test_like_matches_torch(name, dtype):
    for shape in ((2, 3), (1,)):
        check_factory(LIKE[name], sample(shape, dtype))


def test_empty_like_metadata():
    a = sample((2, 3), I64)
    outs = run_ways(lambda x: (torch.empty_like(x), x.new_empty((2, 0)), torch.empty_like(x, dtype=F32)), a)
    for way, (e, n, f) in outs.items():
        assert (e.shape, e.dtype, n.shape, f.dtype) == ((2, 3), I64, (2, 0), F32), way


RANDOM = [
    (lambda: J.rand(2, 3), ((2, 3), F32)),
    (lambda: J.randn((4,), dtype=torch.float64), ((4,), torch.float64)),
    (lambda: J.randint(10, (3, 2)), ((3, 2), I64)),
    (lambda: J.randint(-5, 5, (7,), dtype=torch.int32), ((7,), torch.int32)),
    (lambda: J.normal(0.0, 2.0, (5,)), ((5,), F32)),
]


@pytest.mark.parametrize("i", range(len(RANDOM)))
def test_random_metadata(i):
    fn, (shape, dtype) = RANDOM[i]
    trace = trace_fn(fn)
    assert (tuple(trace.output.shape), trace.output.dtype) == (shape, dtype)
    for way, out in run_ways(fn).items():
        assert tuple(out.shape) == shape and out.dtype == dtype, way


def test_random_like_and_ranges():
    a = sample((200,), F32)
    outs = run_ways(lambda x: (J.rand_like(x), J.randn_like(x), J.randint_like(x, 3, 6),
                               J.bernoulli(J.full_like(x, 0.5)), x.bernoulli(0.0), J.normal(x, 0.1),
                               J.normal(x, x.abs() + 0.1), J.randint_like(x, 4)), a)
    for way, (u, n, r, b, b0, nm, nm2, r2) in outs.items():
        assert u.min() >= 0 and u.max() < 1 and u.dtype == F32, way
        assert n.shape == a.shape and n.std() > 0.5, way
        assert r.min() >= 3 and r.max() < 6 and r.dtype == F32, way
        assert set(b.unique().tolist()) <= {0.0, 1.0} and b0.sum() == 0, way
        assert (nm - a).abs().max() < 1.0 and nm2.shape == a.shape, way
        assert r2.max() < 4, way


def test_requires_grad_and_defaults():
    assert trace_fn(lambda: J.zeros(2, requires_grad=True)).output.requires_grad
    assert not trace_fn(lambda: J.ones(2)).output.requires_grad
    assert trace_fn(lambda: J.arange(3.0, requires_grad=True)).output.requires_grad
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert trace_fn(lambda: J.ones(2)).output.dtype == torch.float64
        assert trace_fn(lambda: J.arange(0.5, 3)).output.dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("fn,match", [
    (lambda: J.zeros(2, -1), "negative dimension"),
    (lambda: J.arange(0, 5, 0), "step must be nonzero"),
    (lambda: J.arange(5, 0, 1), "inconsistent with step sign"),
    (lambda: J.ones(2, dtype=torch.int64, requires_grad=True), "floating point"),
    (lambda: J.randint(5, 5, (2,)), "randint"),
    (lambda: J.rand(2, generator=torch.Generator()), "generator"),
    (lambda: J.tensor([[1, 2], [3]]), "rectangular"),
])
def test_errors(fn, match):
    with pytest.raises(MetaError, match=match):
        trace_fn(fn)
