"""Tests: torch-level losses, linear/convolution layers, padding, pooling, resampling and linear algebra against
torch, three ways each (prims decomposition, torch executor, printed text), called through torch's own callables.
"""
from __future__ import annotations

import math

import pytest
import torch

from jitcore.errors import DataDependentError, MetaError
from jitcore.ir.symbol import Tag
from tests.helpers import assert_matches_torch, trace_fn
from tests.test_torch_nn_ops import BF16, check, method, r

F = torch.nn.functional
torch.manual_seed(0)
LONG = {"atol": 1e-4, "rtol": 1e-4}  # float32 sums over many terms, in another order than torch's kernels


def _opaque_ids(trace):
    out = []
    for b in trace.bound_symbols:
        for s in [b] + list(b.subsymbols):
            if Tag.OPAQUE in s.sym.tags:
                out.append(s.sym.id)
    return out


# -- losses ---------------------------------------------------------------------------------------------------------
def _targets(n, c, *extra, ignore=False):
    t = torch.randint(0, c, (n, *extra))
    if ignore:
        t.view(-1)[::3] = -100
    return t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("fn", [F.cross_entropy, F.nll_loss], ids=lambda f: f.__name__)
def test_class_index_losses(fn, reduction):
    check(fn, r(4, 5), _targets(4, 5), reduction=reduction)
    check(fn, r(4, 5), _targets(4, 5, ignore=True), reduction=reduction)
    check(fn, r(4, 5), _targets(4, 5, ignore=True), torch.rand(5), reduction=reduction)
    check(fn, r(2, 5, 3, 2), _targets(2, 5, 3, 2, ignore=True), torch.rand(5), reduction=reduction)
    check(fn, r(5), torch.tensor(2), reduction=reduction)
    check(fn, r(4, 5), _targets(4, 5), ignore_index=1, reduction=reduction)
    check(fn, r(4, 5, dtype=torch.float64), _targets(4, 5), reduction=reduction)
    check(fn, r(4, 5, dtype=torch.bfloat16), _targets(4, 5), reduction=reduction, **BF16)
    check(fn, r(0, 5), _targets(0, 5), reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_label_smoothing_and_probabilities(reduction):
    check(F.cross_entropy, r(4, 5), _targets(4, 5, ignore=True), label_smoothing=0.1, reduction=reduction)
    check(F.cross_entropy, r(4, 5), _targets(4, 5, ignore=True), torch.rand(5), label_smoothing=0.2,
          reduction=reduction)
    check(F.cross_entropy, r(2, 5, 3), _targets(2, 5, 3), label_smoothing=0.3, reduction=reduction)
    check(F.cross_entropy, r(5), torch.tensor(1), label_smoothing=0.3, reduction=reduction)
    probs = torch.softmax(r(4, 5), 1)
    check(F.cross_entropy, r(4, 5), probs, reduction=reduction)
    check(F.cross_entropy, r(4, 5), probs, torch.rand(5), reduction=reduction, label_smoothing=0.1)
    check(F.cross_entropy, r(2, 5, 3), torch.softmax(r(2, 5, 3), 1), reduction=reduction)


def test_loss_legacy_reduction_and_errors():
    check(F.nll_loss, r(4, 5), _targets(4, 5), size_average=False)
    check(F.mse_loss, r(4, 5), r(4, 5), reduce=False)
    with pytest.raises(MetaError, match="batch_size"):
        trace_fn(F.cross_entropy, r(4, 5), _targets(3, 5))
    with pytest.raises(MetaError, match="weight tensor"):
        trace_fn(F.nll_loss, r(4, 5), _targets(4, 5), torch.rand(4))
    with pytest.raises(MetaError, match="not a valid value"):
        trace_fn(F.mse_loss, r(3), r(3), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("fn,kwargs", [
    (F.mse_loss, {}), (F.l1_loss, {}), (F.smooth_l1_loss, {}), (F.smooth_l1_loss, {"beta": 0.5}),
    (F.smooth_l1_loss, {"beta": 0.0}), (F.huber_loss, {}), (F.huber_loss, {"delta": 0.3}), (F.soft_margin_loss, {}),
    (F.kl_div, {}), (F.kl_div, {"log_target": True}), (F.binary_cross_entropy_with_logits, {}),
    (F.poisson_nll_loss, {}), (F.poisson_nll_loss, {"log_input": False, "full": True}),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_pointwise_losses(fn, kwargs, reduction):
    x, t = r(4, 5), torch.rand(4, 5)
    if fn is F.poisson_nll_loss and not kwargs.get("log_input", True):
        x = torch.rand(4, 5) + 0.1
        t = torch.randint(0, 4, (4, 5)).float()
    check(fn, x, t, reduction=reduction, **kwargs)
    check(fn, x.t(), t.t(), reduction=reduction, **kwargs)
    check(fn, x.double(), t.double(), reduction=reduction, **kwargs)


def test_more_losses():
    x, t = torch.rand(4, 5) * 0.98 + 0.01, torch.rand(4, 5)
    for red in ("mean", "sum", "none"):
        check(F.binary_cross_entropy, x, t, reduction=red)
        check(F.binary_cross_entropy, x, t, torch.rand(5), reduction=red)
        check(F.binary_cross_entropy_with_logits, r(4, 5), t, torch.rand(5), pos_weight=torch.rand(5) + 0.5,
              reduction=red)
        check(F.kl_div, F.log_softmax(r(4, 5), 1), torch.softmax(r(4, 5), 1), reduction="batchmean")
        check(F.mse_loss, r(4, 5), r(4, 5), weight=torch.rand(4, 5), reduction=red)
        check(F.huber_loss, r(4, 5), r(4, 5), weight=torch.rand(4, 5), reduction=red)
        check(F.margin_ranking_loss, r(6), r(6), torch.randint(0, 2, (6,)).float() * 2 - 1, 0.2, reduction=red)
        y = torch.randint(0, 2, (4,)).float() * 2 - 1
        check(F.cosine_embedding_loss, r(4, 5), r(4, 5), y, 0.1, reduction=red)
        check(F.gaussian_nll_loss, r(4, 5), r(4, 5), torch.rand(4, 5) + 0.1, reduction=red)
        check(F.gaussian_nll_loss, r(4, 5), r(4, 5), torch.rand(4, 1) + 0.1, full=True, reduction=red)
        check(F.gaussian_nll_loss, r(4, 5), r(4, 5), torch.rand(4) + 0.1, reduction=red)
    check(F.binary_cross_entropy, torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 0.5]))
    check(F.mse_loss, r(4, 5), r(5))
    with pytest.raises(MetaError, match="target size"):
        trace_fn(F.binary_cross_entropy, x, t[:, :2])


# -- linear and convolutions ----------------------------------------------------------------------------------------
def test_linear_bilinear():
    check(F.linear, r(3, 4), r(5, 4))
    check(F.linear, r(2, 3, 4), r(5, 4), r(5))
    check(F.linear, r(4), r(5, 4), r(5))
    check(F.linear, r(3, 4), r(4))
    check(F.linear, r(4, 3).t(), r(5, 4))
    check(F.linear, r(3, 4, dtype=torch.bfloat16), r(5, 4, dtype=torch.bfloat16), **BF16)
    check(F.bilinear, r(3, 4), r(3, 5), r(6, 4, 5), r(6), **LONG)
    check(F.bilinear, r(2, 3, 4), r(2, 3, 5), r(6, 4, 5), **LONG)
    with pytest.raises(MetaError, match="linear"):
        trace_fn(F.linear, r(3, 4), r(5, 3))


CONV_CASES = [
    (F.conv1d, (2, 4, 9), (6, 4, 3), {}),
    (F.conv1d, (4, 9), (6, 4, 3), {"padding": 1, "stride": 2}),
    (F.conv1d, (2, 4, 9), (6, 2, 3), {"groups": 2, "dilation": 2}),
    (F.conv1d, (2, 4, 9), (6, 4, 4), {"padding": "same", "dilation": 1}),
    (F.conv1d, (2, 4, 9), (6, 4, 4), {"padding": "valid"}),
    (F.conv2d, (2, 3, 8, 7), (4, 3, 3, 3), {"padding": (1, 2), "stride": (2, 1)}),
    (F.conv2d, (3, 8, 7), (4, 3, 2, 3), {"padding": "same"}),
    (F.conv2d, (2, 4, 8, 7), (4, 1, 3, 3), {"groups": 4, "dilation": (2, 1)}),
    (torch.conv2d, (2, 3, 8, 7), (4, 3, 3, 3), {}),
    (F.conv3d, (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"padding": 1}),
    (F.conv_transpose1d, (2, 4, 7), (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    (F.conv_transpose2d, (2, 4, 5, 6), (4, 2, 3, 3), {"stride": 2, "groups": 2}),
    (F.conv_transpose2d, (4, 5, 6), (4, 3, 2, 2), {"dilation": 2}),
    (F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), {}),
]


@pytest.mark.parametrize("fn,xs,ws,kwargs", CONV_CASES)
def test_conv(fn, xs, ws, kwargs):
    transposed = "transpose" in fn.__name__
    c_out = ws[1] * kwargs.get("groups", 1) if transposed else ws[0]
    check(fn, r(*xs), r(*ws), r(c_out), **kwargs, **LONG)
    check(fn, r(*xs), r(*ws), None, **kwargs, **LONG)


def test_conv_errors():
    with pytest.raises(MetaError, match="strided"):
        trace_fn(F.conv1d, r(2, 4, 9), r(6, 4, 3), None, 2, "same")
    with pytest.raises(MetaError, match="Expected 2D"):
        trace_fn(F.conv1d, r(9), r(6, 4, 3))
    with pytest.raises(MetaError, match="Invalid padding string"):
        trace_fn(F.conv1d, r(2, 4, 9), r(6, 4, 3), None, 1, "full")


def test_embedding_one_hot_pixel_shuffle():
    idx, w = torch.randint(0, 10, (3, 4)), r(10, 5)
    check(F.embedding, idx, w)
    check(F.embedding, idx, w, padding_idx=-1)
    check(torch.embedding, w, idx)
    check(F.embedding, torch.tensor(3), w)
    check(F.one_hot, torch.randint(0, 5, (3, 4)), 6)
    check(F.one_hot, torch.zeros(0, dtype=torch.long), 3)
    with pytest.raises(DataDependentError, match="num_classes"):
        trace_fn(F.one_hot, idx)
    with pytest.raises(MetaError, match="LongTensor"):
        trace_fn(F.one_hot, idx.int(), 10)
    check(F.pixel_shuffle, r(2, 8, 3, 4), 2)
    check(F.pixel_shuffle, r(9, 2, 2), 3)
    check(F.pixel_unshuffle, r(2, 2, 6, 4), 2)
    check(torch.pixel_unshuffle, r(3, 2, 6, 4), 2)
    with pytest.raises(MetaError, match="divisible"):
        trace_fn(F.pixel_shuffle, r(2, 7, 3, 4), 2)


def test_embedding_max_norm_is_opaque():
    trace = trace_fn(F.embedding, torch.randint(0, 10, (3,)), r(10, 5), None, 1.0)
    assert _opaque_ids(trace)


# -- padding, pooling, resampling -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 6), (2, 1)), ((2, 3, 5, 6), (1, 2, 2, 0)), ((3, 5, 6), (0, 3, 1, 1)),
                                       ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2))])
def test_pad(mode, shape, pad):
    check(F.pad, r(*shape), pad, mode)


def test_pad_constant_extras():
    check(F.pad, r(3, 4), (1, -1, -2, 2), value=1.5)
    check(F.pad, torch.randint(0, 5, (3, 4)), (1, 1), value=7)
    check(F.pad, r(2, 3, 4).transpose(0, 2), (2, 2, 1, 1, 1, 1))
    check(F.pad, r(0, 4), (1, 1))
    with pytest.raises(MetaError, match="divisible by 2"):
        trace_fn(F.pad, r(3, 4), (1, 2, 3))
    with pytest.raises(MetaError, match="Padding size should be less"):
        trace_fn(F.pad, r(1, 3, 4), (4, 0), "reflect")


POOL_ARGS = [
    {"kernel_size": 2}, {"kernel_size": 3, "stride": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 2, "stride": 3, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
]


@pytest.mark.parametrize("kwargs", POOL_ARGS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool(kwargs, count_include_pad):
    check(F.avg_pool2d, r(2, 3, 7, 8), **kwargs, count_include_pad=count_include_pad)
    if not isinstance(kwargs["kernel_size"], tuple):
        check(F.avg_pool1d, r(2, 3, 9), **kwargs, count_include_pad=count_include_pad)
        check(F.avg_pool3d, r(1, 2, 5, 6, 7), **kwargs, count_include_pad=count_include_pad)


@pytest.mark.parametrize("kwargs", POOL_ARGS + [{"kernel_size": 2, "dilation": 2}, {"kernel_size": 3, "dilation": 2,
                                                                                    "padding": 1, "ceil_mode": True}])
def test_max_pool(kwargs):
    check(F.max_pool2d, r(2, 3, 9, 8), **kwargs)
    check(F.max_pool2d, r(3, 9, 8), **kwargs)
    if not isinstance(kwargs["kernel_size"], tuple):
        check(F.max_pool1d, r(2, 3, 9), **kwargs)
        check(F.max_pool3d, r(1, 2, 5, 6, 7), **kwargs)


def test_pool_extras():
    check(F.avg_pool2d, r(2, 3, 6, 6), 2, divisor_override=3)
    check(torch.avg_pool1d, r(2, 3, 9), 3)
    check(torch.max_pool2d, r(2, 3, 6, 6), 2)
    check(F.max_pool2d, r(2, 3, 6, 6, dtype=torch.bfloat16), 3, 2, 1)
    check(F.avg_pool2d, r(2, 3, 6, 6, dtype=torch.bfloat16), 3, 2, 1, **BF16)
    check(F.max_pool2d, torch.tensor([[[1.0, float("nan")], [3.0, 4.0]]]), 2)
    trace = trace_fn(F.max_pool2d, r(1, 2, 4, 4), 2, return_indices=True)
    assert _opaque_ids(trace)
    assert_matches_torch(lambda x: F.max_pool2d(x, 2, return_indices=True),
                         lambda x: F.max_pool2d(x, 2, return_indices=True), r(1, 2, 4, 4))
    with pytest.raises(MetaError, match="at most half"):
        trace_fn(F.max_pool2d, r(1, 2, 4, 4), 2, 1, 2)
    with pytest.raises(MetaError, match="too small"):
        trace_fn(F.avg_pool2d, r(1, 2, 2, 2), 3)


@pytest.mark.parametrize("fn,shape,out", [(F.adaptive_avg_pool2d, (2, 3, 8, 9), (4, 3)),
                                          (F.adaptive_avg_pool2d, (2, 3, 7, 10), (3, 4)),
                                          (F.adaptive_avg_pool2d, (3, 7, 10), 1),
                                          (F.adaptive_avg_pool2d, (2, 3, 7, 10), (None, 3)),
                                          (F.adaptive_avg_pool2d, (2, 3, 5, 5), (7, 8)),
                                          (F.adaptive_avg_pool1d, (2, 3, 11), 4),
                                          (torch.adaptive_avg_pool1d, (2, 3, 11), 11),
                                          (F.adaptive_avg_pool3d, (1, 2, 5, 6, 7), (2, 3, 4))])
def test_adaptive_avg_pool(fn, shape, out):
    check(fn, r(*shape), out)


INTERP = [
    {"size": (5, 7), "mode": "nearest"}, {"scale_factor": 2, "mode": "nearest"},
    {"scale_factor": 0.6, "mode": "nearest"},
    {"scale_factor": (1.7, 2.3), "mode": "nearest-exact"}, {"size": (3, 4), "mode": "nearest-exact"},
    {"size": (5, 7), "mode": "bilinear"}, {"size": (5, 7), "mode": "bilinear", "align_corners": True},
    {"scale_factor": 1.5, "mode": "bilinear"}, {"scale_factor": (0.5, 2.5), "mode": "bilinear", "align_corners": False},
    {"scale_factor": 1.3, "mode": "bilinear", "recompute_scale_factor": True}, {"size": (1, 1), "mode": "bilinear"},
    {"size": (1, 6), "mode": "bilinear", "align_corners": True},
]


@pytest.mark.parametrize("kwargs", INTERP, ids=str)
def test_interpolate_2d(kwargs):
    check(F.interpolate, r(2, 3, 4, 6), **kwargs)


def test_interpolate_other_ranks_and_modes():
    check(F.interpolate, r(2, 3, 5), size=9, mode="linear")
    check(F.interpolate, r(2, 3, 5), scale_factor=1.5, mode="linear", align_corners=True)
    check(F.interpolate, r(2, 3, 5), scale_factor=3, mode="nearest")
    check(F.interpolate, r(1, 2, 3, 4, 5), size=(4, 5, 3), mode="trilinear")
    check(F.interpolate, r(1, 2, 3, 4, 5), scale_factor=2, mode="nearest")
    check(F.interpolate, r(2, 3, 4, 6, dtype=torch.float64), size=(5, 9), mode="bilinear")
    check(F.interpolate, r(2, 3, 4, 6, dtype=torch.bfloat16), size=(5, 9), mode="bilinear", **BF16)
    check(F.interpolate, torch.randint(0, 255, (1, 3, 4, 5), dtype=torch.uint8), scale_factor=2)
    check(F.upsample, r(1, 2, 3, 4), scale_factor=2)
    check(F.upsample_bilinear, r(1, 2, 3, 4), scale_factor=2)
    check(F.upsample_nearest, r(1, 2, 3, 4), size=(5, 5))
    check(F.interpolate, r(1, 2, 3, 4), size=(6, 8), mode="bicubic", opaque=True)
    with pytest.raises(MetaError, match="only one of size or scale_factor"):
        trace_fn(F.interpolate, r(1, 2, 3, 4), (4, 4), 2.0)


# -- linear algebra -------------------------------------------------------------------------------------------------
MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((5, 2, 3), (1, 3, 4)), ((3,), (2, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((0, 3), (3, 2)),
                 ((2, 0), (0, 3))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa, sb):
    check(torch.matmul, r(*sa), r(*sb))
    check(lambda a, b: a @ b, r(*sa), r(*sb))
    check(method("matmul"), r(*sa).double(), r(*sb).double())


def test_matmul_family():
    check(torch.mm, r(3, 4), r(5, 4).t())
    check(torch.mm, torch.randint(-3, 3, (3, 4)), torch.randint(-3, 3, (4, 2)))
    check(torch.bmm, r(2, 3, 4), r(2, 4, 5))
    check(torch.mv, r(3, 4), r(4))
    check(torch.dot, r(4), r(4))
    check(torch.vdot, r(4), r(4))
    check(torch.outer, r(3), r(4))
    check(torch.ger, r(3), torch.randint(0, 3, (4,)))
    check(torch.addmm, r(3, 5), r(3, 4), r(4, 5))
    check(torch.addmm, r(5), r(3, 4), r(4, 5), beta=0.5, alpha=2.0)
    check(torch.addmm, torch.full((3, 5), float("nan")), r(3, 4), r(4, 5), beta=0)
    check(torch.addmv, r(3), r(3, 4), r(4), alpha=0.5)
    check(torch.baddbmm, r(2, 3, 5), r(2, 3, 4), r(2, 4, 5), beta=2)
    check(torch.addbmm, r(3, 5), r(2, 3, 4), r(2, 4, 5))
    check(torch.addr, r(3, 4), r(3), r(4), alpha=2)
    check(torch.linalg.matmul, r(2, 3), r(3, 2))
    check(torch.matmul, r(2, 3, dtype=torch.bfloat16), r(3, 2, dtype=torch.bfloat16), **BF16)
    check(lambda a, b: b.__rmatmul__(a), r(2, 3), r(3, 4))
    with pytest.raises(MetaError, match="same dtype"):
        trace_fn(torch.matmul, r(2, 3), r(3, 2).double())
    with pytest.raises(MetaError, match="mm"):
        trace_fn(torch.mm, r(2, 3), r(2, 3))
    with pytest.raises(MetaError, match="inconsistent tensor size"):
        trace_fn(torch.dot, r(3), r(4))


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("ij->", [(3, 4)]), ("ij->ji", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]), ("ijk,jkl,lm->im", [(2, 3, 4), (3, 4, 5), (5, 6)]),
    ("i j , j k -> i k", [(3, 4), (4, 5)]), ("...i,...i", [(3, 4), (1, 4)]), ("iij->ij", [(3, 3, 2)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]), ("ba,ab->", [(3, 4), (4, 3)]), ("i,i,i->i", [(4,), (4,), (1,)]),
    ("...", [(2, 3)]), ("bij,bjk->", [(0, 3, 4), (0, 4, 5)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(eq, shapes):
    ops = [r(*s) for s in shapes]
    check(torch.einsum, eq, *ops, **LONG)
    check(lambda *xs: torch.einsum(eq, list(xs)), *ops, **LONG)


def test_einsum_errors_and_ints():
    check(torch.einsum, "ij,jk->ik", torch.randint(-3, 3, (3, 4)), torch.randint(-3, 3, (4, 5)))
    with pytest.raises(MetaError, match="operands"):
        trace_fn(torch.einsum, "ij,jk->ik", r(3, 4))
    with pytest.raises(MetaError, match="subscripts"):
        trace_fn(torch.einsum, "ijk->i", r(3, 4))
    with pytest.raises(MetaError, match="same dtype"):
        trace_fn(torch.einsum, "ij,jk->ik", r(3, 4), r(4, 5).double())


def test_tensordot_kron_trace_cross():
    check(torch.tensordot, r(3, 4, 5), r(4, 5, 6), **LONG)
    check(torch.tensordot, r(3, 4, 5), r(5, 4, 6), dims=([1, 2], [1, 0]), **LONG)
    check(torch.tensordot, r(3, 4), r(5, 6), dims=0)
    # a contracted size 1 against another broadcasts in eager: the other side is summed over that dim
    check(torch.tensordot, r(3, 4, 1), r(1, 5, 6), dims=([1, 2], [0, 2]), **LONG)
    check(torch.tensordot, r(3, 1), r(4, 5), dims=([1], [0]))
    check(torch.kron, r(2, 3), r(4, 5))
    check(torch.kron, r(3), r(2, 2))
    check(torch.trace, r(4, 4))
    check(torch.trace, r(3, 5))
    check(torch.trace, torch.randint(0, 5, (3, 3), dtype=torch.int32))
    check(torch.linalg.cross, r(4, 3), r(4, 3))
    check(torch.linalg.cross, r(3, 5), r(3, 1), dim=0)
    check(torch.cross, r(2, 3, 4), r(2, 3, 4))
    check(torch.linalg.vecdot, r(3, 4), r(3, 4))
    check(torch.linalg.vecdot, r(3, 4), r(4), dim=-1)


def test_norms_and_distances():
    check(torch.linalg.matrix_norm, r(3, 4))
    for ord_ in (1, -1, math.inf, -math.inf):
        check(torch.linalg.matrix_norm, r(2, 3, 4), ord_)
        check(torch.linalg.matrix_norm, r(3, 4), ord_, keepdim=True)
        check(torch.linalg.norm, r(3, 4), ord_)
    check(torch.linalg.norm, r(3, 4))
    check(torch.linalg.norm, r(3, 4), 3, 1)
    check(torch.linalg.norm, r(2, 3, 4), None, (1, 2))
    check(torch.linalg.matrix_norm, r(3, 4), "nuc", opaque=True, **LONG)
    check(torch.dist, r(3, 4), r(4))
    check(torch.dist, r(3, 4), r(3, 4), 1)
    check(torch.cdist, r(5, 3), r(4, 3))
    check(torch.cdist, r(2, 30, 3), r(2, 26, 3), **LONG)
    check(torch.cdist, r(5, 3), r(4, 3), p=1.0)
    check(torch.cdist, r(2, 5, 3), r(1, 4, 3), p=math.inf)
    check(torch.cdist, r(5, 3), r(4, 3), p=0.0)
    check(torch.cdist, r(5, 3), r(4, 3), compute_mode="use_mm_for_euclid_dist", **LONG)
