"""Torch-level reductions, scans and sorts (jitcore/ops/torch_reduction.py) against torch."""
from __future__ import annotations

import math

import pytest
import torch

from jitcore.errors import MetaError
from tests.core_ops_checks import SHAPES, check_op, sample
from tests.helpers import trace_fn

F32, F64, BF16, I64, B8 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool
FLOATS = (F32, F64, BF16)
ALL = (F32, I64, B8)

# name -> (fn over one tensor, dtypes)
OPS = {
    "sum": (lambda a: a.sum(), ALL),
    "sum_dim_keep": (lambda a: torch.sum(a, -1, keepdim=True), ALL),
    "sum_dims": (lambda a: a.sum((0, -1)), (F32, I64)),
    "sum_dtype": (lambda a: torch.sum(a, 0, dtype=torch.float64), (F32, I64)),
    "prod": (lambda a: a.prod(), (F32, I64, B8)),
    "prod_dim": (lambda a: torch.prod(a, 0, keepdim=True), (F32, BF16, I64)),
    "nansum": (lambda a: torch.nansum(a, -1), (F32, I64)),
    "mean": (lambda a: a.mean(), FLOATS + (I64,)),
    "mean_dim": (lambda a: torch.mean(a, (-1,), keepdim=True), FLOATS),
    "mean_dtype": (lambda a: a.mean(0, dtype=torch.float64), (I64, F32)),
    "nanmean": (lambda a: a.nanmean(0), (F32,)),
    "amax": (lambda a: a.amax(), (F32, BF16, I64, B8)),
    "amin_dims": (lambda a: torch.amin(a, (0, -1), keepdim=True), (F32, I64)),
    "max": (lambda a: a.max(), (F32, I64, B8)),
    "max_dim": (lambda a: torch.max(a, -1), (F32, BF16, I64, B8)),
    "min_dim_keep": (lambda a: a.min(0, keepdim=True), (F32, I64)),
    "max_binary": (lambda a: torch.max(a, a.flip(0) if a.ndim else a), (F32, I64)),
    "min_binary": (lambda a: a.min(a * 2), (F32,)),
    "aminmax": (lambda a: torch.aminmax(a), (F32, I64)),
    "aminmax_dim": (lambda a: torch.aminmax(a, dim=0, keepdim=True), (F32,)),
    "argmax": (lambda a: a.argmax(), (F32, I64)),
    "argmax_dim": (lambda a: torch.argmax(a, -1, keepdim=True), (F32, I64)),
    "argmin": (lambda a: torch.argmin(a, 0), (F32, BF16)),
    "argmin_keep": (lambda a: a.argmin(keepdim=True), (F32,)),
    "var": (lambda a: a.var(), FLOATS + (I64,)),
    "var_dim": (lambda a: torch.var(a, -1, keepdim=True), FLOATS),
    "var_unbiased": (lambda a: torch.var(a, False), (F32,)),
    "var_dim_unbiased": (lambda a: torch.var(a, 0, False, True), (F32,)),
    "var_correction": (lambda a: torch.var(a, (0,), correction=0.5), (F64,)),
    "std": (lambda a: a.std(0), FLOATS),
    "std_correction": (lambda a: torch.std(a, dim=None, correction=0), (F32,)),
    "var_mean": (lambda a: torch.var_mean(a, -1), FLOATS),
    "std_mean": (lambda a: torch.std_mean(a, unbiased=False, keepdim=True), (F32, BF16)),
    "all": (lambda a: a.all(), ALL + (torch.uint8,)),
    "any_dim": (lambda a: torch.any(a, -1, keepdim=True), ALL + (torch.uint8,)),
    "all_dims": (lambda a: torch.all(a, (0, -1)), (F32, B8)),
    "any_empty_dims": (lambda a: torch.any(a, ()), (F32,)),
    "count_nonzero": (lambda a: torch.count_nonzero(a), (F32, I64, B8)),
    "count_nonzero_dim": (lambda a: a.count_nonzero(-1), (F32, B8)),
    "logsumexp": (lambda a: torch.logsumexp(a, -1), FLOATS + (I64,)),
    "logsumexp_dims": (lambda a: a.logsumexp((0, -1), keepdim=True), (F32,)),
    "norm": (lambda a: a.norm(), FLOATS),
    "norm_p1": (lambda a: torch.norm(a, 1, -1), (F32, F64)),
    "norm_inf": (lambda a: torch.norm(a, float("inf"), dim=0, keepdim=True), (F32,)),
    "norm_p3": (lambda a: torch.norm(a, 3), (F32, F64)),
    "norm_fro": (lambda a: torch.norm(a, "fro", (0, -1)), (F32,)),
    "vector_norm": (lambda a: torch.linalg.vector_norm(a), FLOATS),
    "vector_norm_0": (lambda a: torch.linalg.vector_norm(a, 0, -1), (F32,)),
    "vector_norm_ninf": (lambda a: torch.linalg.vector_norm(a, -math.inf, (0,)), (F32,)),
    "vector_norm_dtype": (lambda a: torch.linalg.vector_norm(a, 2, dtype=torch.float64), (F32,)),
    "cumsum": (lambda a: a.cumsum(0), ALL),
    "cumsum_dtype": (lambda a: torch.cumsum(a, -1, dtype=torch.float64), (F32, I64)),
    "cumprod": (lambda a: torch.cumprod(a, -1), (F32, BF16, I64, B8)),
    "topk": (lambda a: torch.topk(a, 1), (F32, I64)),
    "topk_smallest": (lambda a: a.topk(min(2, a.shape[0]) if a.ndim else 1, 0, largest=False), (F32,)),
    "sort": (lambda a: torch.sort(a, stable=True), (F32, I64, B8)),
    "sort_desc": (lambda a: a.sort(dim=0, descending=True, stable=True), (F32, BF16)),
    "argsort": (lambda a: torch.argsort(a, 0, stable=True), (F32, I64)),
    "msort": (lambda a: torch.msort(a), (F32,)),
}

CASES = [(name, dt, shape) for name, (_, dts) in OPS.items() for dt in dts for shape in SHAPES]


@pytest.mark.parametrize("name,dtype,shape", CASES, ids=[f"{n}-{str(d)[6:]}-{s}" for n, d, s in CASES])
def test_matches_torch(name, dtype, shape):
    fn, _ = OPS[name]
    check_op(fn, sample(shape, dtype))


@pytest.mark.parametrize("name", ["sum_dim_keep", "mean_dim", "max_dim", "var_mean", "cumsum", "logsumexp",
                                  "norm_p1", "sort", "amin_dims"])
def test_noncontiguous(name):
    fn, dts = OPS[name]
    check_op(fn, sample((4, 6), dts[0], noncontiguous=True))
    check_op(fn, sample((5, 4), dts[0]).t())


def test_nan_and_inf():
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 1.0, float("-inf")], [float("-inf")] * 3])
    for fn in (lambda a: a.max(1), lambda a: a.argmax(1), lambda a: a.logsumexp(1), lambda a: a.nansum(1),
               lambda a: a.nanmean(1), lambda a: a.amin(1), lambda a: a.sum(1)):
        check_op(fn, x)


@pytest.mark.parametrize("fn,match", [
    (lambda a: a.sum(3), "sum"),
    (lambda a: a.sum((0, 0)), "multiple times"),
    (lambda a: torch.mean(a.long()), "mean"),
    (lambda a: a.long().var(), "var"),
    (lambda a: a[:0].max(), "max"),
    (lambda a: a[:0].amax(0), "amax"),
    (lambda a: a.bool().argmax(), "argmax"),
    (lambda a: torch.topk(a, 9), "topk"),
])
def test_errors(fn, match):
    with pytest.raises((MetaError, IndexError), match=match):
        trace_fn(fn, torch.randn(2, 3))


def test_result_dtypes_follow_torch():
    for dt in (torch.int32, torch.uint8, torch.bool):
        a = torch.ones(3, dtype=dt)
        check_op(lambda x: (x.sum(), x.prod(), x.cumsum(0)), a)


def test_named_results():
    """(values, indices) results are torch.return_types, so `.values` / `.indices` work in traced code."""
    def fn(a):
        return (a.max(1).values, torch.min(a, 0).indices, torch.sort(a, descending=True).values,
                a.topk(2).indices, torch.aminmax(a).max, a.max(-1))

    check_op(fn, sample((3, 4), F32))
