"""Tests: every prim against torch (values, dtypes, shapes) run three ways by tests.helpers (prims decomposition,
the torch executor's trace, the printed text re-run), on 0-d, empty and non-contiguous inputs where they apply;
bad input raises a MetaError naming the prim.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.testing import make_tensor

from executors.claim import claim, flatten_to_prims
from executors.torchex import torch_ex
from jitcore.errors import MetaError
from jitcore.ops import prims
from tests.helpers import assert_matches_torch, assert_same, run_ways, trace_fn

pytestmark = pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")
torch.manual_seed(0)
CPU = torch.device("cpu")
f32, f64, bf16, i64, i32, b8, c64 = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32,
                                      torch.bool, torch.complex64)


def T(*shape, dtype=f32, nc=False, low=None, high=None):
    """A test tensor; nc: non-contiguous."""
    return make_tensor(shape, dtype=dtype, device="cpu", noncontiguous=nc, low=low, high=high)


def Ix(*values):  # an int64 index tensor
    return torch.tensor(values, dtype=i64)


def case(id, op_fn, torch_fn, *args, atol=None, rtol=None):
    return pytest.param(op_fn, torch_fn, args, {"atol": atol, "rtol": rtol}, id=id)


def ref_pad(a, value, config):
    """lax.pad semantics by brute force: element i of a lands at lo + i * (interior + 1), if inside."""
    shape = [lo + hi + n + max(n - 1, 0) * it for n, (lo, hi, it) in zip(a.shape, config)]
    out = torch.full(shape, value, dtype=a.dtype)
    for idx in itertools.product(*[range(n) for n in a.shape]):
        pos = [lo + i * (it + 1) for i, (lo, _, it) in zip(idx, config)]
        if all(0 <= p < s for p, s in zip(pos, shape)):
            out[tuple(pos)] = a[idx]
    return out


def _multi_prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = a.prod(d, dtype=a.dtype)
    return a


def _var_none(a, correction):  # variance over no dims: each element is its own sample of size 1
    return torch.zeros_like(a, dtype=a.real.dtype) / max(0, 1 - correction)


SHAPE = [
    case("broadcast_in_dim", lambda a: prims.broadcast_in_dim(a, (2, 3, 4), (0, 2)), lambda a: a[:, None, :].expand(
        2, 3, 4), T(2, 4, nc=True)),
    case("broadcast_in_dim_1", lambda a: prims.broadcast_in_dim(a, (5, 3), (1,)), lambda a: a.expand(5, 3), T(1)),
    case("broadcast_in_dim_0d", lambda a: prims.broadcast_in_dim(a, (2, 0), ()), lambda a: a.expand(2, 0), T()),
    case("reshape", lambda a: prims.reshape(a, (4, 3)), lambda a: a.reshape(4, 3), T(3, 4, nc=True)),
    case("reshape_0d", lambda a: prims.reshape(a, (1, 1)), lambda a: a.reshape(1, 1), T(dtype=i64)),
    case("reshape_empty", lambda a: prims.reshape(a, (0, 5)), lambda a: a.reshape(0, 5), T(5, 0, dtype=b8)),
    case("transpose", lambda a: prims.transpose(a, (2, 0, 1)), lambda a: a.permute(2, 0, 1), T(2, 3, 4, nc=True)),
    case("transpose_0d", lambda a: prims.transpose(a, ()), lambda a: a, T(dtype=b8)),
    case("transpose_empty", lambda a: prims.transpose(a, (1, 0)), lambda a: a.t(), T(0, 3, dtype=i64)),
    case("squeeze", lambda a: prims.squeeze(a, (1, 3)), lambda a: a.squeeze((1, 3)), T(2, 1, 3, 1)),
    case("squeeze_neg", lambda a: prims.squeeze(a, (-1,)), lambda a: a.squeeze(-1), T(0, 1, dtype=bf16)),
    case("squeeze_none", lambda a: prims.squeeze(a, ()), lambda a: a, T(2, 1)),
    case("squeeze_0d", lambda a: prims.squeeze(a, (0,)), lambda a: a.squeeze(0), T(dtype=i64)),
    case("slice", lambda a: prims.slice(a, (1, 0), (4, 6), (2, 3)), lambda a: a[1:4:2, 0:6:3],
         T(5, 6, nc=True)),
    case("slice_nostride", lambda a: prims.slice(a, (0, 2), (3, 5)), lambda a: a[0:3, 2:5], T(3, 6, dtype=i64)),
    case("slice_empty", lambda a: prims.slice(a, (2,), (2,), (1,)), lambda a: a[2:2], T(4)),
    case("slice_0d", lambda a: prims.slice(a, (), ()), lambda a: a, T()),
    case("cat", lambda a, b: prims.cat([a, b], 0), lambda a, b: torch.cat([a, b], 0), T(2, 3), T(4, 3, nc=True)),
    case("cat_neg_dim", lambda a, b, c: prims.cat((a, b, c), -1), lambda a, b, c: torch.cat([a, b, c], -1),
         T(2, 1, dtype=bf16), T(2, 0, dtype=bf16), T(2, 3, dtype=bf16)),
    case("cat_one", lambda a: prims.cat([a], 0), lambda a: torch.cat([a]), T(3, dtype=b8)),
    case("pad", lambda a: prims.pad(a, 0.5, ((1, 2, 0), (0, 0, 0))), lambda a: ref_pad(a, 0.5, ((1, 2, 0), (0, 0, 0))),
         T(3, 4, nc=True)),
    case("pad_crop", lambda a: prims.pad(a, -1, ((-1, 1, 0), (2, -2, 0))),
         lambda a: ref_pad(a, -1, ((-1, 1, 0), (2, -2, 0))), T(3, 4, dtype=i64)),
    case("pad_interior", lambda a: prims.pad(a, 0.0, ((1, 1, 2), (0, -1, 1))),
         lambda a: ref_pad(a, 0.0, ((1, 1, 2), (0, -1, 1))), T(3, 4, nc=True)),
    case("pad_interior_crop", lambda a: prims.pad(a, 2.0, ((-2, -1, 1), (-1, 0, 3))),
         lambda a: ref_pad(a, 2.0, ((-2, -1, 1), (-1, 0, 3))), T(4, 2)),
    case("pad_empty", lambda a: prims.pad(a, True, ((1, 1, 1), (0, 0, 0))),
         lambda a: ref_pad(a, True, ((1, 1, 1), (0, 0, 0))), T(0, 3, dtype=b8)),
    case("pad_0d", lambda a: prims.pad(a, 0, ()), lambda a: a, T()),
    case("flip", lambda a: prims.flip(a, (0, 2)), lambda a: a.flip(0, 2), T(2, 3, 4, nc=True)),
    case("flip_neg", lambda a: prims.flip(a, (-1,)), lambda a: a.flip(-1), T(3, 0, dtype=i64)),
    case("flip_none", lambda a: prims.flip(a, ()), lambda a: a, T(3, dtype=b8)),
    case("unfold", lambda a: prims.unfold(a, 1, 3, 2), lambda a: a.unfold(1, 3, 2), T(2, 7, nc=True)),
    case("unfold_dim0", lambda a: prims.unfold(a, -2, 2, 1), lambda a: a.unfold(-2, 2, 1), T(4, 3, dtype=i64)),
    case("unfold_0d", lambda a: prims.unfold(a, 0, 1, 1), lambda a: a.unfold(0, 1, 1), T()),
    case("unfold_size0", lambda a: prims.unfold(a, 0, 0, 2), lambda a: a.unfold(0, 0, 2), T(3)),
]

BF = {"atol": 1e-2, "rtol": 1e-2}
REDUCTION = [
    case("sum", lambda a: prims.sum(a, (0, 2)), lambda a: a.sum((0, 2)), T(2, 3, 4, nc=True)),
    case("sum_all_f64", lambda a: prims.sum(a, (0, 1)), lambda a: a.sum(), T(3, 5, dtype=f64)),
    case("sum_none", lambda a: prims.sum(a, ()), lambda a: a, T(2, 3)),
    case("sum_0d", lambda a: prims.sum(a, (0,)), lambda a: a.sum(0), T()),
    case("sum_empty", lambda a: prims.sum(a, (1,)), lambda a: a.sum(1), T(3, 0)),
    case("sum_int", lambda a: prims.sum(a, (1,)), lambda a: a.sum(1), T(3, 4, dtype=i64)),
    case("sum_int32", lambda a: prims.sum(a, (0,)), lambda a: a.sum(0, dtype=i32), T(3, 4, dtype=i32)),
    case("sum_bool", lambda a: prims.sum(a, (0,)), lambda a: a.any(0), T(3, 4, dtype=b8)),
    case("sum_bf16", lambda a: prims.sum(a, (1,)), lambda a: a.sum(1), T(3, 4, dtype=bf16), **BF),
    case("prod", lambda a: prims.prod(a, (0, 2)), lambda a: _multi_prod(a, (0, 2)), T(2, 3, 4, low=0.5, high=1.5)),
    case("prod_one", lambda a: prims.prod(a, (-1,)), lambda a: a.prod(-1), T(3, 4, dtype=i64, low=-3, high=3)),
    case("prod_all", lambda a: prims.prod(a, (0, 1)), lambda a: a.prod(), T(3, 2, nc=True, low=0.5, high=1.5)),
    case("prod_none", lambda a: prims.prod(a, ()), lambda a: a, T(2, dtype=i64)),
    case("prod_empty", lambda a: prims.prod(a, (0,)), lambda a: a.prod(0), T(0, 2)),
    case("amax", lambda a: prims.amax(a, (0, 2)), lambda a: a.amax((0, 2)), T(2, 3, 4, nc=True)),
    case("amax_int", lambda a: prims.amax(a, (1,)), lambda a: a.amax(1), T(2, 3, dtype=i64)),
    case("amax_bool", lambda a: prims.amax(a, (0,)), lambda a: a.amax(0), T(3, 2, dtype=b8)),
    case("amax_none", lambda a: prims.amax(a, ()), lambda a: a, T(3)),
    case("amax_keep_empty", lambda a: prims.amax(a, (0,)), lambda a: a.amax(0), T(2, 0)),
    case("amin", lambda a: prims.amin(a, (-1,)), lambda a: a.amin(-1), T(2, 3, dtype=bf16)),
    case("amin_0d", lambda a: prims.amin(a, (0,)), lambda a: a.amin(0), T(dtype=i64)),
    case("var", lambda a: prims.var(a, (1,), correction=1), lambda a: a.var(1), T(3, 5, nc=True)),
    case("var_c0", lambda a: prims.var(a, (0, 1), correction=0), lambda a: a.var((0, 1), correction=0), T(3, 5)),
    case("var_none", lambda a: prims.var(a, (), correction=1), lambda a: _var_none(a, 1), T(3)),
    case("var_none_c0", lambda a: prims.var(a, (), correction=0), lambda a: _var_none(a, 0), T(3, dtype=f64)),
    case("var_complex", lambda a: prims.var(a, (0,), correction=1), lambda a: a.var(0), T(4, 2, dtype=c64)),
    case("var_bf16", lambda a: prims.var(a, (1,), correction=1), lambda a: a.var(1), T(4, 6, dtype=bf16), **BF),
    case("var_mean", lambda a: prims.var_mean(a, (1,), correction=1), lambda a: torch.var_mean(a, 1), T(3, 4)),
    case("var_mean_none", lambda a: prims.var_mean(a, (), correction=0),
         lambda a: (_var_none(a, 0), a), T(2, 2, dtype=f64)),
    case("argmax", lambda a: prims.argmax(a, 1), lambda a: a.argmax(1), T(3, 5, nc=True)),
    case("argmax_flat", lambda a: prims.argmax(a, None), lambda a: a.argmax(), T(3, 5, dtype=i64)),
    case("argmax_0d", lambda a: prims.argmax(a, 0), lambda a: a.argmax(0), T()),
    case("argmax_ties", lambda a: prims.argmax(a, -1), lambda a: a.argmax(-1), T(4, 3, dtype=i64, low=0, high=2)),
    case("argmin", lambda a: prims.argmin(a, 0), lambda a: a.argmin(0), T(3, 5, dtype=bf16)),
    case("argmin_flat", lambda a: prims.argmin(a, None), lambda a: a.argmin(), T(2, 3, nc=True)),
    case("topk", lambda a: prims.topk(a, 2, -1, True, True), lambda a: a.topk(2), T(3, 5, nc=True)),
    case("topk_small", lambda a: prims.topk(a, 3, 0, False, True), lambda a: a.topk(3, 0, largest=False),
         T(4, 2, dtype=i64)),
    case("topk_k0", lambda a: prims.topk(a, 0, 1, True, True), lambda a: a.topk(0, 1), T(3, 4)),
    case("topk_0d", lambda a: prims.topk(a, 1, 0, True, True), lambda a: a.topk(1, 0), T()),
    case("sort", lambda a: prims.sort(a, 0, True, True), lambda a: a.sort(dim=0, descending=True, stable=True),
         T(5, 3, dtype=i64, low=0, high=3)),
    case("sort_asc", lambda a: prims.sort(a, -1, False, False), lambda a: a.sort(-1), T(3, 5, nc=True)),
    case("sort_bool", lambda a: prims.sort(a, 0, False, True), lambda a: a.sort(dim=0, stable=True), T(6, dtype=b8)),
    case("cumsum", lambda a: prims.cumsum(a, 1), lambda a: a.cumsum(1), T(3, 5, nc=True)),
    case("cumsum_int", lambda a: prims.cumsum(a, 0), lambda a: a.cumsum(0), T(4, 2, dtype=i64)),
    case("cumsum_int32", lambda a: prims.cumsum(a, 0), lambda a: a.cumsum(0, dtype=i32), T(4, dtype=i32)),
    case("cumsum_bf16", lambda a: prims.cumsum(a, -1), lambda a: a.cumsum(-1, dtype=bf16), T(2, 4, dtype=bf16)),
    case("cumsum_0d", lambda a: prims.cumsum(a, 0), lambda a: a.cumsum(0), T()),
    case("cumprod", lambda a: prims.cumprod(a, -1), lambda a: a.cumprod(-1), T(3, 4, low=0.5, high=1.5)),
    case("cumprod_empty", lambda a: prims.cumprod(a, 0), lambda a: a.cumprod(0), T(0, 3, dtype=i64)),
]


def _index_put_ref(a, indices, values, accumulate):
    return torch.ops.aten.index_put.default(a, list(indices), values, accumulate)


INDEX = [
    case("take", lambda a, i: prims.take(a, i, 0), lambda a, i: a.index_select(0, i), T(4, 5, nc=True), Ix(0, 3, 3)),
    case("take_dim1", lambda a, i: prims.take(a, i, -1), lambda a, i: a.index_select(-1, i), T(2, 5, dtype=i64),
         Ix(4, 0)),
    case("take_empty", lambda a, i: prims.take(a, i, 0), lambda a, i: a.index_select(0, i), T(4, 2), Ix()),
    case("take_0d", lambda a, i: prims.take(a, i, 0), lambda a, i: a.index_select(0, i), T(), Ix(0)),
    case("take_0d_index", lambda a, i: prims.take(a, i, 0), lambda a, i: a.index_select(0, i), T(3, dtype=b8),
         torch.tensor(2)),
    case("take_along_axis", lambda a, i: prims.take_along_axis(a, i, 1), lambda a, i: a.gather(1, i),
         T(3, 4, nc=True), torch.tensor([[0, 3], [1, 1], [2, 0]])),
    case("take_along_axis_smaller", lambda a, i: prims.take_along_axis(a, i, 0), lambda a, i: a.gather(0, i),
         T(3, 4, dtype=bf16), torch.tensor([[2, 0, 1]])),
    case("take_along_axis_0d", lambda a, i: prims.take_along_axis(a, i, 0), lambda a, i: a.gather(0, i), T(),
         torch.tensor(0)),
    case("scatter", lambda a, i, s: prims.scatter(a, i, s, 1), lambda a, i, s: a.scatter(1, i, s),
         T(3, 4, nc=True), torch.tensor([[0, 3], [1, 2], [2, 0]]), T(3, 3)),
    case("scatter_value", lambda a, i: prims.scatter(a, i, 7, 0), lambda a, i: a.scatter(0, i, 7),
         T(3, 2, dtype=i64), torch.tensor([[2, 0]])),
    case("scatter_add", lambda a, i, s: prims.scatter_add(a, i, s, 0), lambda a, i, s: a.scatter_add(0, i, s),
         T(3, 2), torch.tensor([[0, 1], [0, 1], [2, 1]]), T(3, 2, nc=True)),
    case("scatter_add_int", lambda a, i, s: prims.scatter_add(a, i, s, -1), lambda a, i, s: a.scatter_add(-1, i, s),
         T(2, 3, dtype=i64), torch.tensor([[0, 0], [2, 2]]), T(2, 2, dtype=i64)),
    case("index_add", lambda a, i, s: prims.index_add(a, i, s, 0), lambda a, i, s: a.index_add(0, i, s),
         T(4, 3), Ix(0, 2, 0), T(3, 3, nc=True)),
    case("index_add_dim1", lambda a, i, s: prims.index_add(a, i, s, 1), lambda a, i, s: a.index_add(1, i, s),
         T(2, 4, dtype=i64), Ix(3), T(2, 1, dtype=i64)),
    case("index_add_empty", lambda a, i, s: prims.index_add(a, i, s, 0), lambda a, i, s: a.index_add(0, i, s),
         T(4, 3), Ix(), T(0, 3)),
    case("index_put", lambda a, i, v: prims.index_put(a, (i,), v, False),
         lambda a, i, v: _index_put_ref(a, (i,), v, False), T(5, 3, nc=True), Ix(0, 4), T(2, 3)),
    case("index_put_acc", lambda a, i, v: prims.index_put(a, (i,), v, True),
         lambda a, i, v: _index_put_ref(a, (i,), v, True), T(5, 3), Ix(1, 1, 2), T(3)),
    case("index_put_two", lambda a, i, j, v: prims.index_put(a, (i, j), v, True),
         lambda a, i, j, v: _index_put_ref(a, (i, j), v, True), T(4, 3, dtype=i64), torch.tensor([[0], [3]]),
         Ix(0, 2), T(2, 2, dtype=i64)),
    case("index_put_none", lambda a, i, v: prims.index_put(a, (None, i), v, False),
         lambda a, i, v: _index_put_ref(a, (None, i), v, False), T(2, 4, 3), Ix(3, 0), T(2, 2, 3)),
    case("index_put_apart", lambda a, i, j, v: prims.index_put(a, (i, None, j), v, False),
         lambda a, i, j, v: _index_put_ref(a, (i, None, j), v, False), T(2, 4, 3), Ix(1, 0), Ix(2, 2), T(2, 4)),
    case("index_put_mask", lambda a, m, v: prims.index_put(a, (m,), v, False),
         lambda a, m, v: _index_put_ref(a, (m,), v, False), T(3, 4, dtype=bf16), torch.rand(3, 4) > 0.5,
         T(dtype=bf16)),
    case("index_put_mask_rows", lambda a, m, v: prims.index_put(a, (m,), v, False),
         lambda a, m, v: _index_put_ref(a, (m,), v, False), T(3, 2), torch.tensor([True, False, True]), T(2)),
]

NN = [
    case("matmul_dot", lambda a, b: prims.matmul(a, b), torch.matmul, T(4), T(4, nc=True)),
    case("matmul_mv", lambda a, b: prims.matmul(a, b), torch.matmul, T(3, 4, nc=True), T(4)),
    case("matmul_vm", lambda a, b: prims.matmul(a, b), torch.matmul, T(4), T(4, 2)),
    case("matmul_mm", lambda a, b: prims.matmul(a, b), torch.matmul, T(3, 4).t(), T(3, 2, dtype=f32)),
    case("matmul_batched", lambda a, b: prims.matmul(a, b), torch.matmul, T(2, 1, 3, 4), T(5, 4, 2)),
    case("matmul_batched_vec", lambda a, b: prims.matmul(a, b), torch.matmul, T(4), T(2, 4, 3, dtype=f32)),
    case("matmul_int", lambda a, b: prims.matmul(a, b), torch.matmul, T(2, 3, dtype=i64), T(3, 2, dtype=i64)),
    case("matmul_bf16", lambda a, b: prims.matmul(a, b), torch.matmul, T(3, 8, dtype=bf16), T(8, 2, dtype=bf16),
         **BF),
    case("matmul_empty", lambda a, b: prims.matmul(a, b), torch.matmul, T(3, 0), T(0, 2)),
    case("linear", lambda a, w, b: prims.linear(a, w, b), torch.nn.functional.linear, T(2, 3, 4), T(5, 4), T(5)),
    case("linear_nobias", lambda a, w: prims.linear(a, w, None), torch.nn.functional.linear, T(3, 4, nc=True),
         T(2, 4)),
    case("linear_vec_weight", lambda a, w: prims.linear(a, w, None), torch.nn.functional.linear, T(2, 3, 4), T(4)),
    case("linear_vec_input", lambda a, w, b: prims.linear(a, w, b), torch.nn.functional.linear, T(4), T(2, 4),
         T(2)),
    case("conv2d", lambda a, w, b: prims.convolution(a, w, b, (2, 2), (1, 1), (1, 1), False, (0, 0), 2),
         lambda a, w, b: torch.conv2d(a, w, b, 2, 1, 1, 2), T(2, 4, 7, 6), T(6, 2, 3, 3), T(6), atol=1e-4,
         rtol=1e-4),
    case("conv1d_dilated", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (2,), False, (0,), 1),
         lambda a, w: torch.conv1d(a, w, None, 1, 0, 2), T(1, 3, 9, nc=True), T(2, 3, 3), atol=1e-4, rtol=1e-4),
    case("conv_transpose2d_groups", lambda a, w: prims.convolution(a, w, None, (1, 2), (0, 1), (1, 1), True, (0, 1),
                                                                    2),
         lambda a, w: torch.conv_transpose2d(a, w, None, (1, 2), (0, 1), (0, 1), 2), T(1, 4, 3, 3), T(4, 3, 2, 2),
         atol=1e-4, rtol=1e-4),
    case("conv_transpose1d", lambda a, w, b: prims.convolution(a, w, b, (2,), (1,), (1,), True, (1,), 1),
         lambda a, w, b: torch.conv_transpose1d(a, w, b, 2, 1, 1), T(2, 3, 5), T(3, 4, 3), T(4), atol=1e-4,
         rtol=1e-4),
    case("embedding", lambda i, w: prims.embedding(i, w), torch.nn.functional.embedding, Ix(0, 3, 3), T(4, 5)),
    case("embedding_pad", lambda i, w: prims.embedding(i, w, padding_idx=1), lambda i, w: torch.nn.functional.
         embedding(i, w, padding_idx=1), torch.tensor([[0, 1], [2, 1]]), T(3, 2, dtype=bf16)),
]

CREATION = [
    case("full", lambda: prims.full((2, 3), 1.5, device=CPU, dtype=f32), lambda: torch.full((2, 3), 1.5)),
    case("full_int", lambda: prims.full((4,), 7, device=CPU, dtype=i64), lambda: torch.full((4,), 7)),
    case("full_0d_bool", lambda: prims.full((), True, device=CPU, dtype=b8), lambda: torch.tensor(True)),
    case("full_empty", lambda: prims.full((0, 2), 0.0, device=CPU, dtype=bf16),
         lambda: torch.zeros(0, 2, dtype=bf16)),
    case("iota", lambda: prims.iota(5, start=2, step=3, device=CPU, dtype=i64), lambda: torch.arange(2, 17, 3)),
    case("iota_float", lambda: prims.iota(4, start=0.5, step=0.25, device=CPU, dtype=f32),
         lambda: torch.arange(0.5, 1.5, 0.25)),
    case("iota_neg", lambda: prims.iota(3, start=0, step=-2, device=CPU, dtype=i32),
         lambda: torch.arange(0, -6, -2, dtype=i32)),
    case("iota_empty", lambda: prims.iota(0, start=0, step=1, device=CPU, dtype=f64),
         lambda: torch.arange(0, dtype=f64)),
    case("tensor_from_sequence", lambda: prims.tensor_from_sequence([[1, 2], [3, 4]], dtype=i64, device=CPU),
         lambda: torch.tensor([[1, 2], [3, 4]])),
    case("tensor_from_sequence_float", lambda: prims.tensor_from_sequence([1.5, -2], dtype=f32, device=CPU),
         lambda: torch.tensor([1.5, -2.0])),
    case("tensor_from_sequence_0d", lambda: prims.tensor_from_sequence(3, dtype=b8, device=CPU),
         lambda: torch.tensor(True)),
    case("tensor_from_sequence_empty", lambda: prims.tensor_from_sequence([], dtype=f32, device=CPU),
         lambda: torch.tensor([])),
]

MISC = [
    case("shape", lambda a: prims.shape(a), lambda a: tuple(a.shape), T(2, 0, 3)),
    case("shape_0d", lambda a: prims.shape(a), lambda a: (), T()),
    case("stop_gradient", lambda a: prims.stop_gradient(a), lambda a: a.detach(), T(3, nc=True)),
]


@pytest.mark.parametrize("op_fn, torch_fn, args, tol", SHAPE + REDUCTION + INDEX + NN + CREATION + MISC)
def test_prim_matches_torch(op_fn, torch_fn, args, tol):
    assert_matches_torch(op_fn, torch_fn, *args, **tol)


RANDOM = [
    ("uniform", lambda: prims.uniform((3, 4), -2.0, 3.0, device=CPU, dtype=f32), lambda: torch.rand(3, 4) * 5 - 2),
    ("uniform_f64", lambda: prims.uniform((5,), 0.0, 1.0, device=CPU, dtype=f64), lambda: torch.rand(5, dtype=f64)),
    ("normal", lambda: prims.normal((2, 3), 1.0, 2.0, device=CPU, dtype=f32), lambda: torch.randn(2, 3) * 2 + 1),
    ("normal_bf16", lambda: prims.normal((4,), 0.0, 1.0, device=CPU, dtype=bf16), lambda: torch.randn(4, dtype=bf16)),
    ("randint", lambda: prims.randint(-3, 5, (6,), device=CPU, dtype=i64), lambda: torch.randint(-3, 5, (6,))),
    ("randint_empty", lambda: prims.randint(0, 2, (0, 3), device=CPU, dtype=i32),
     lambda: torch.randint(0, 2, (0, 3), dtype=i32)),
]


def _ways(trace):
    """The prims decomposition and the torch executor's program (compiled from its printed text), as callables
    that can each be seeded before they run."""
    return {"prims": flatten_to_prims(trace).python_callable(), "torch_ex": claim(trace, [torch_ex]).python_callable()}


@pytest.mark.parametrize("op_fn, torch_fn", [pytest.param(o, t, id=i) for i, o, t in RANDOM])
def test_random_prims_follow_torch_seed(op_fn, torch_fn):
    torch.manual_seed(1234)
    expected = torch_fn()
    for way, fn in _ways(trace_fn(op_fn)).items():
        torch.manual_seed(1234)
        assert_same(fn(), expected, atol=1e-6, rtol=1e-6, msg=way)
    torch.manual_seed(1234)
    a, b = _ways(trace_fn(op_fn))["torch_ex"](), _ways(trace_fn(op_fn))["torch_ex"]()
    assert a.numel() == 0 or not torch.equal(a, b), "two draws without reseeding should differ"


def test_empty_prim_gives_shape_and_dtype():
    for out in run_ways(lambda: prims.empty((2, 0, 3), device=CPU, dtype=bf16)).values():
        assert out.shape == (2, 0, 3) and out.dtype == bf16


def test_uniform_range_and_normal_moments():
    torch.manual_seed(0)
    u = _ways(trace_fn(lambda: prims.uniform((20000,), 2.0, 4.0, device=CPU, dtype=f32)))["torch_ex"]()
    assert 2.0 <= u.min() and u.max() < 4.0 and abs(u.mean() - 3.0) < 0.05
    n = _ways(trace_fn(lambda: prims.normal((20000,), -1.0, 3.0, device=CPU, dtype=f64)))["torch_ex"]()
    assert abs(n.mean() + 1.0) < 0.1 and abs(n.std() - 3.0) < 0.1


def test_copy_writes_into_dst():
    src, dst = T(2, 3, nc=True), T(2, 3, dtype=f64)
    trace = trace_fn(lambda s, d: prims.copy_(s, d), src, dst)
    for way, fn in _ways(trace).items():
        d = dst.clone()
        out = fn(src, d)
        assert out is d or out.data_ptr() == d.data_ptr(), way
        assert_same(d, src.to(f64), msg=way)
    # copy_ is kept even when nothing uses its output
    assert "copy_" in str(claim(trace, [torch_ex]))


def test_kernels_print_as_torch_calls_or_torchex_adapters():
    def fn(a):
        return (prims.topk(a, 2, -1, True, True), prims.transpose(a, (1, 0)), prims.sum(a, (0,)),
                prims.unfold(a, 0, 2, 1))

    text = str(claim(trace_fn(fn, T(3, 4)), [torch_ex]))
    for call in ("torch.topk(t0, 2, -1, True, True)", "torch.permute(t0, (1, 0))", "torchex._sum(t0, (0,))",
                 "torch.Tensor.unfold(t0, 0, 2, 1)"):
        assert call in text, text


def test_requires_grad_propagation():
    x, i = T(3, 4).requires_grad_(), Ix(0, 1)

    def fn(a, idx):
        return (prims.sum(a, (0,)), prims.argmax(a, 0), prims.stop_gradient(a), prims.take(a, idx, 0),
                prims.topk(a, 1, 0, True, True), prims.shape(a))

    s, am, sg, tk, (tv, ti), shp = trace_fn(fn, x, i).output
    assert s.requires_grad and tk.requires_grad and tv.requires_grad
    assert not am.requires_grad and not sg.requires_grad and not ti.requires_grad
    assert am.dtype == i64 and ti.dtype == i64 and shp == (3, 4)
    with torch.no_grad():
        assert not trace_fn(lambda a: prims.sum(a, (0,)), x).output.requires_grad


BAD = [
    ("transpose", lambda a: prims.transpose(a, (0, 0)), [T(2, 2)]),
    ("squeeze", lambda a: prims.squeeze(a, (0,)), [T(2, 1)]),
    ("squeeze", lambda a: prims.squeeze(a, (2,)), [T(2, 1)]),
    ("slice", lambda a: prims.slice(a, (0,), (5,)), [T(4)]),
    ("slice", lambda a: prims.slice(a, (3,), (1,)), [T(4)]),
    ("slice", lambda a: prims.slice(a, (0,), (4,), (0,)), [T(4)]),
    ("slice", lambda a: prims.slice(a, (0,), (4,)), [T(4, 2)]),
    ("cat", lambda a, b: prims.cat([a, b], 0), [T(2, 3), T(2, 4)]),
    ("cat", lambda a, b: prims.cat([a, b], 0), [T(2, 3), T(2, 3, dtype=f64)]),
    ("cat", lambda a, b: prims.cat([a, b], 0), [T(2, 3), T(3)]),
    ("cat", lambda a: prims.cat([a], 0), [T()]),
    ("cat", lambda: prims.cat([], 0), []),
    ("pad", lambda a: prims.pad(a, 0, ((0, 0, 0),)), [T(2, 2)]),
    ("pad", lambda a: prims.pad(a, 0, ((-3, 0, 0),)), [T(2)]),
    ("pad", lambda a: prims.pad(a, 0, ((0, 0, -1),)), [T(2)]),
    ("flip", lambda a: prims.flip(a, (2,)), [T(2, 2)]),
    ("unfold", lambda a: prims.unfold(a, 0, 4, 1), [T(3)]),
    ("unfold", lambda a: prims.unfold(a, 0, 2, 0), [T(3)]),
    ("sum", lambda a: prims.sum(a, (0, 0)), [T(2, 2)]),
    ("sum", lambda a: prims.sum(a, (3,)), [T(2, 2)]),
    ("amax", lambda a: prims.amax(a, (0,)), [T(0, 2)]),
    ("amax", lambda a: prims.amax(a, (0,)), [T(2, dtype=c64)]),
    ("var", lambda a: prims.var(a, (0,), correction=1), [T(3, dtype=i64)]),
    ("argmax", lambda a: prims.argmax(a, None), [T(0, 3)]),
    ("argmax", lambda a: prims.argmax(a, 0), [T(3, dtype=b8)]),
    ("argmin", lambda a: prims.argmin(a, 1), [T(3, 0)]),
    ("topk", lambda a: prims.topk(a, 4, 0, True, True), [T(3)]),
    ("cumsum", lambda a: prims.cumsum(a, 0), [T(3, dtype=b8)]),
    ("take", lambda a, i: prims.take(a, i, 0), [T(3), T(2, 2, dtype=i64)]),
    ("take", lambda a, i: prims.take(a, i, 0), [T(3), T(2)]),
    ("take_along_axis", lambda a, i: prims.take_along_axis(a, i, 0), [T(3, 2), Ix(0, 1)]),
    ("take_along_axis", lambda a, i: prims.take_along_axis(a, i, 0), [T(3, 2), torch.zeros(1, 3, dtype=i64)]),
    ("scatter", lambda a, i, s: prims.scatter(a, i, s, 0), [T(3), Ix(0, 1), T(3, dtype=f64)]),
    ("scatter_add", lambda a, i, s: prims.scatter_add(a, i, s, 0), [T(3), Ix(0, 1), T(1)]),
    ("index_add", lambda a, i, s: prims.index_add(a, i, s, 0), [T(3, 2), Ix(0, 1), T(2, 3)]),
    ("index_put", lambda a, i, v: prims.index_put(a, (i,), v, False), [T(3, 2), Ix(0, 1), T(3, 2)]),
    ("index_put", lambda a, i, v: prims.index_put(a, (i, i, i), v, False), [T(3, 2), Ix(0, 1), T(2)]),
    ("index_put", lambda a, m, v: prims.index_put(a, (m,), v, False), [T(3, 2), torch.ones(2, dtype=b8), T()]),
    ("index_put", lambda a, i, v: prims.index_put(a, (i,), v, False), [T(3, 2), Ix(0, 1), T(2, dtype=f64)]),
    ("matmul", lambda a, b: prims.matmul(a, b), [T(2, 3), T(2, 3)]),
    ("matmul", lambda a, b: prims.matmul(a, b), [T(3), T(3, dtype=f64)]),
    ("matmul", lambda a, b: prims.matmul(a, b), [T(), T(3)]),
    ("matmul", lambda a, b: prims.matmul(a, b), [T(2, 2, 3), T(3, 3, 1)]),
    ("linear", lambda a, w: prims.linear(a, w, None), [T(2, 3), T(4, 2)]),
    ("linear", lambda a, w, b: prims.linear(a, w, b), [T(2, 3), T(4, 3), T(3)]),
    ("linear", lambda a, w, b: prims.linear(a, w, b), [T(2, 3), T(3), T()]),
    ("convolution", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (1,), False, (0,), 1),
     [T(3, 5), T(2, 3, 3)]),
    ("convolution", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (1,), False, (0,), 1),
     [T(1, 4, 5), T(2, 3, 3)]),
    ("convolution", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (1,), False, (0,), 1),
     [T(1, 3, 2), T(2, 3, 3)]),
    ("convolution", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (1,), True, (1,), 1),
     [T(1, 3, 4), T(3, 2, 3)]),
    ("convolution", lambda a, w: prims.convolution(a, w, None, (1,), (0,), (1,), False, (0,), 2),
     [T(1, 4, 5), T(3, 2, 3)]),
    ("embedding", lambda i, w: prims.embedding(i, w), [T(3), T(4, 2)]),
    ("full", lambda: prims.full((2, -1), 0.0, device=CPU, dtype=f32), []),
    ("iota", lambda: prims.iota(-1, start=0, step=1, device=CPU, dtype=i64), []),
    ("uniform", lambda: prims.uniform((2,), 1.0, 0.0, device=CPU, dtype=f32), []),
    ("uniform", lambda: prims.uniform((2,), 0.0, 1.0, device=CPU, dtype=i64), []),
    ("normal", lambda: prims.normal((2,), 0.0, -1.0, device=CPU, dtype=f32), []),
    ("randint", lambda: prims.randint(3, 3, (2,), device=CPU, dtype=i64), []),
    ("tensor_from_sequence", lambda: prims.tensor_from_sequence([[1], [2, 3]], dtype=f32, device=CPU), []),
    ("copy_", lambda s, d: prims.copy_(s, d), [T(3), T(2)]),
    ("shape", lambda: prims.shape(3), []),
]


@pytest.mark.parametrize("name, op_fn, args", [pytest.param(*b, id=f"{b[0]}-{i}") for i, b in enumerate(BAD)])
def test_bad_input_raises_meta_error_naming_the_prim(name, op_fn, args):
    with pytest.raises(MetaError, match=f"prims.{name}"):
        trace_fn(op_fn, *args)


def test_pad_reference_is_lax_pad():
    # the reference itself, on a case worked by hand: [1, 2] with lo=1, hi=-1, interior=1 -> [0, 1, 0]
    assert ref_pad(torch.tensor([1, 2]), 0, ((1, -1, 1),)).tolist() == [0, 1, 0]
    assert math.prod(ref_pad(T(2, 3), 0, ((0, 0, 0), (0, 0, 0))).shape) == 6
