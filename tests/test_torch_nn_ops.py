"""Tests: torch-level nn.functional activations, normalizations and attention against torch, three ways each
(prims decomposition, torch executor, printed text); the callables are torch's own, so the torch_map entries are
tested too. Losses, convolutions, pooling and linear algebra live in tests/test_torch_nn_ops2.py.
"""
from __future__ import annotations

import math

import pytest
import torch

from jitcore.errors import MetaError
from jitcore.ir.symbol import Tag
from tests.helpers import assert_matches_torch, trace_fn

F = torch.nn.functional
torch.manual_seed(0)


def check(fn, *args, opaque=False, atol=None, rtol=None, **kwargs):
    """fn (a torch callable) traced on proxies records our op, not an opaque one, and matches torch every way."""
    trace = trace_fn(fn, *args, **kwargs)
    ops = [b.sym for b in trace.bound_symbols]
    if not opaque:
        assert not any(Tag.OPAQUE in s.tags for s in ops), [s.id for s in ops]
    assert_matches_torch(fn, fn, *args, atol=atol, rtol=rtol, **kwargs)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape[0] if shape and isinstance(shape[0], tuple) else shape, dtype=dtype)


def method(name):
    """`tensor.<name>(*args)` as a function (Tensor's descriptors refuse proxies when called unbound)."""
    def call(a, *args, **kwargs):
        return getattr(a, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"Tensor.{name}"
    return call


BF16 = {"atol": 2e-2, "rtol": 2e-2}
SAMPLES = [r(3, 5), r(2, 3, 4).permute(2, 0, 1), r(()), r(0, 4), r(4, 6)[:, ::2],
           torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0, 25.0, -25.0, float("nan"), float("inf"), float("-inf")])]


# -- activations ----------------------------------------------------------------------------------------------------
UNARY = [
    (F.relu, {}), (torch.relu, {}), (F.relu6, {}), (F.leaky_relu, {}), (F.leaky_relu, {"negative_slope": 0.2}),
    (F.elu, {}), (F.elu, {"alpha": 0.5}), (F.selu, {}), (torch.selu, {}), (F.celu, {"alpha": 2.0}), (F.gelu, {}),
    (F.gelu, {"approximate": "tanh"}), (F.silu, {}), (F.mish, {}), (F.softplus, {}),
    (F.softplus, {"beta": 2.0, "threshold": 5.0}), (F.softsign, {}), (F.hardtanh, {}),
    (F.hardtanh, {"min_val": -0.5, "max_val": 2.0}), (F.hardsigmoid, {}), (F.hardswish, {}), (F.hardshrink, {}),
    (F.hardshrink, {"lambd": 1.0}), (method("hardshrink"), {}), (F.softshrink, {}), (F.tanhshrink, {}),
    (F.logsigmoid, {}), (F.rrelu, {}), (method("relu"), {}), (F.threshold, {"threshold": 0.1, "value": 20.0}),
]


@pytest.mark.parametrize("fn,kwargs", UNARY, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_activation(fn, kwargs, sample):
    x = SAMPLES[sample]
    if fn is F.gelu:  # torch's vectorized CPU gelu gives nan at +inf; ours gives inf
        x = x.nan_to_num(posinf=1e30, neginf=-1e30)
    check(fn, x, **kwargs)


@pytest.mark.parametrize("fn,kwargs", UNARY[:20], ids=lambda v: getattr(v, "__name__", str(v)))
def test_activation_bf16_float64(fn, kwargs):
    check(fn, r(4, 5, dtype=torch.bfloat16), **kwargs, **BF16)
    check(fn, r(4, 5, dtype=torch.float64), **kwargs)


def test_activation_integer_inputs():
    x = torch.tensor([-3, 0, 2, 7])
    check(F.relu, x)
    check(F.threshold, x, 1, 5)
    check(F.softsign, x)
    check(F.hardtanh, x, -2, 3)
    check(F.relu6, x)


def test_inplace_activation_writes_input():
    x = r(3, 4)
    assert_matches_torch(lambda a: F.relu(a, inplace=True), lambda a: F.relu(a.clone()), x)


def test_glu_prelu():
    check(F.glu, r(4, 6))
    check(F.glu, r(4, 6, 2), dim=1)
    check(F.prelu, r(2, 3, 4), torch.rand(3))
    check(F.prelu, r(2, 3), torch.rand(1))
    check(F.prelu, r(5), torch.rand(1))
    with pytest.raises(MetaError, match="Halving dimension must be even"):
        trace_fn(F.glu, r(3, 5))
    with pytest.raises(MetaError, match="prelu"):
        trace_fn(F.prelu, r(2, 3, 4), torch.rand(2))


def test_activation_errors():
    with pytest.raises(MetaError, match="gelu"):
        trace_fn(F.gelu, torch.tensor([1, 2]))
    with pytest.raises(MetaError, match="approximate"):
        trace_fn(lambda a: F.gelu(a, approximate="fast"), r(3))


# -- softmax family -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax, F.softmin, torch.softmax, torch.log_softmax,
                                torch.special.softmax, torch.special.log_softmax, method("softmax"),
                                method("log_softmax")], ids=lambda f: f.__qualname__)
@pytest.mark.parametrize("shape,dim", [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -1), ((), 0), ((0, 4), 1), ((4, 0), 1),
                                       ((2, 3, 4), 1)])
def test_softmax(fn, shape, dim):
    check(fn, r(*shape), dim)


def test_softmax_dtypes_and_extremes():
    check(F.softmax, r(3, 5, dtype=torch.bfloat16), 1, **BF16)
    check(F.log_softmax, r(3, 5, dtype=torch.bfloat16), -1, **BF16)
    check(F.softmax, r(3, 5), 1, dtype=torch.float64)
    check(torch.softmax, torch.randint(0, 5, (3, 4)), 1, dtype=torch.float32)
    check(F.log_softmax, r(3, 5, dtype=torch.float64) * 1000, 1)
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3, [1e4, -1e4, 0.0]])
    check(F.softmax, x, 1)
    check(F.log_softmax, x, 1)
    check(F.softmax, r(3, 5)[:, ::2], 0)
    for v in (0.0, -2.0, float("inf"), float("nan")):
        check(F.softmax, torch.tensor(v), 0)
        check(F.log_softmax, torch.tensor(v), -1)
    with pytest.raises(MetaError, match="softmax"):
        trace_fn(F.softmax, torch.tensor([1, 2]), 0)


def test_softmax_implicit_dim():
    with pytest.warns(UserWarning):
        check(F.softmax, r(3, 5))


# -- dropout --------------------------------------------------------------------------------------------------------
def test_dropout_identity_and_zero():
    x = r(4, 5)
    for kw in ({"training": False}, {"p": 0.0}):
        assert_matches_torch(lambda a, kw=kw: F.dropout(a, **kw), lambda a, kw=kw: F.dropout(a, **kw), x)
    check(F.dropout, torch.tensor([1.0, float("inf"), -2.0]), p=1.0)
    with pytest.raises(MetaError, match="dropout probability"):
        trace_fn(F.dropout, x, 1.5)


@pytest.mark.parametrize("fn,shape", [(F.dropout, (200, 50)), (F.dropout1d, (40, 30, 7)),
                                      (F.dropout2d, (40, 30, 5, 5)), (F.dropout3d, (20, 30, 2, 2, 2)),
                                      (torch.dropout, (200, 50))])
def test_dropout_statistics(fn, shape):
    from tests.helpers import run_ways

    p = 0.3
    x = torch.ones(shape)
    args = (x, p, True)
    for way, out in run_ways(fn, *args).items():
        assert out.shape == x.shape and out.dtype == x.dtype, way
        kept = out != 0
        torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
        assert abs(kept.float().mean().item() - (1 - p)) < 0.05, way
        if fn is not F.dropout and fn is not torch.dropout:  # whole channels are dropped together
            flat = kept.reshape(shape[0] * shape[1], -1)
            assert bool(((flat.all(1)) | (~flat.any(1))).all()), way


def test_dropout_is_random_op():
    trace = trace_fn(F.dropout, r(3, 4), 0.5, True)
    assert any(Tag.RANDOM in b.sym.tags for b in trace.bound_symbols)


def test_alpha_dropout_eval_and_opaque_training():
    check(F.alpha_dropout, r(3, 4))
    check(F.feature_alpha_dropout, r(3, 4, 2))
    trace = trace_fn(F.alpha_dropout, r(3, 4), 0.5, True)
    assert any(Tag.OPAQUE in s.tags for b in trace.bound_symbols for s in [b.sym] + [x.sym for x in b.subsymbols])


# -- normalizations -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [(torch.float32, {}), (torch.float64, {}), (torch.bfloat16, BF16)])
def test_layer_norm(dtype, tol):
    x = r(4, 5, 6, dtype=dtype)
    w, b = r(5, 6, dtype=dtype), r(5, 6, dtype=dtype)
    check(F.layer_norm, x, (6,), **tol)
    check(F.layer_norm, x, (5, 6), w, b, **tol)
    check(F.layer_norm, x, [5, 6], w, None, 1e-3, **tol)
    check(torch.layer_norm, x, (6,), **tol)
    check(F.layer_norm, x.transpose(0, 2), (4,), **tol)
    check(F.layer_norm, r(0, 3, dtype=dtype), (3,), **tol)


def test_rms_norm():
    x = r(4, 5, 6)
    check(F.rms_norm, x, (6,))
    check(F.rms_norm, x, (5, 6), r(5, 6), 1e-3)
    check(F.rms_norm, r(4, 6, dtype=torch.bfloat16), (6,), r(6, dtype=torch.bfloat16), **BF16)
    check(F.rms_norm, r(4, 6, dtype=torch.float64), [6])


def test_norm_errors():
    with pytest.raises(MetaError, match="normalized_shape"):
        trace_fn(F.layer_norm, r(4, 5), (4,))
    with pytest.raises(MetaError, match="weight"):
        trace_fn(F.layer_norm, r(4, 5), (5,), r(4))
    with pytest.raises(MetaError, match="divisible by num_groups"):
        trace_fn(F.group_norm, r(2, 6, 3), 4)
    with pytest.raises(MetaError, match="more than 1 value per channel"):
        trace_fn(F.batch_norm, r(1, 3), None, None, training=True)


def test_group_norm():
    check(F.group_norm, r(2, 6, 4, 3), 3)
    check(F.group_norm, r(2, 6, 5), 2, r(6), r(6), 1e-3)
    check(F.group_norm, r(3, 4), 4)
    check(F.group_norm, r(2, 6, 4, dtype=torch.bfloat16), 3, **BF16)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_eval(shape):
    rm, rv = r(3), torch.rand(3) + 0.5
    check(F.batch_norm, r(*shape), rm, rv)
    check(F.batch_norm, r(*shape), rm, rv, r(3), r(3), False, 0.1, 1e-3)
    check(torch.batch_norm, r(*shape), r(3), r(3), rm, rv, False, 0.1, 1e-5, False)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_training_updates_running_stats(shape):
    from tests.helpers import run_ways

    x, w, b = r(*shape), r(3), r(3)
    rm0, rv0 = r(3), torch.rand(3) + 0.5
    rm_ref, rv_ref = rm0.clone(), rv0.clone()
    expected = F.batch_norm(x, rm_ref, rv_ref, w, b, True, 0.2)
    for way in ("prims", "torch_ex", "text"):
        rm, rv = rm0.clone(), rv0.clone()
        trace_fn(F.batch_norm, x, rm, rv, w, b, True, 0.2)  # tracing does not touch the buffers
        torch.testing.assert_close(rm, rm0)
        got = run_ways(F.batch_norm, x, rm, rv, w, b, True, 0.2)
        # run_ways ran the program three times, so the buffers were updated three times; check the first output
        torch.testing.assert_close(got[way], expected, msg=way)
    rm, rv = rm0.clone(), rv0.clone()
    out = run_one(F.batch_norm, x, rm, rv, w, b, True, 0.2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(rm, rm_ref)
    torch.testing.assert_close(rv, rv_ref)
    check(F.batch_norm, x, None, None, training=True)


def run_one(fn, *args):
    """fn's traced program run once with the torch executor on args' tensors."""
    from executors.claim import claim
    from executors.torchex import torch_ex
    from tests.helpers import tensor_inputs

    trace = claim(trace_fn(fn, *args), [torch_ex])
    return trace.python_callable()(*tensor_inputs(*args))


def test_batch_norm_prims_path_updates_running_stats():
    from executors.claim import flatten_to_prims
    from tests.helpers import tensor_inputs

    x, rm, rv = r(4, 3, 5), r(3), torch.rand(3) + 0.5
    rm_ref, rv_ref = rm.clone(), rv.clone()
    expected = F.batch_norm(x, rm_ref, rv_ref, None, None, True, 0.1)
    prog = flatten_to_prims(trace_fn(F.batch_norm, x, rm, rv, None, None, True)).python_callable()
    torch.testing.assert_close(prog(*tensor_inputs(x, rm, rv)), expected)
    torch.testing.assert_close(rm, rm_ref)
    torch.testing.assert_close(rv, rv_ref)


def test_instance_norm():
    check(F.instance_norm, r(2, 3, 5))
    check(F.instance_norm, r(2, 3, 4, 5), weight=r(3), bias=r(3))
    check(F.instance_norm, r(2, 3, 4), r(3), torch.rand(3) + 0.5, use_input_stats=False)
    x, rm, rv = r(2, 3, 6), r(3), torch.rand(3) + 0.5
    rm_ref, rv_ref = rm.clone(), rv.clone()
    expected = F.instance_norm(x, rm_ref, rv_ref, momentum=0.3)
    torch.testing.assert_close(run_one(lambda *a: F.instance_norm(*a, momentum=0.3), x, rm, rv), expected)
    torch.testing.assert_close(rm, rm_ref)
    torch.testing.assert_close(rv, rv_ref)


def test_normalize_and_distances():
    check(F.normalize, r(4, 5))
    check(F.normalize, r(4, 5), p=1.0, dim=0)
    check(F.normalize, r(4, 5, 3), p=math.inf, dim=-1)
    check(F.normalize, torch.zeros(2, 3))
    check(F.cosine_similarity, r(4, 5), r(4, 5))
    check(F.cosine_similarity, r(4, 5), r(1, 5), dim=-1)
    check(F.cosine_similarity, r(3, 4, 5), r(3, 4, 5), 2, 1e-3)
    check(torch.cosine_similarity, torch.zeros(2, 3), r(2, 3))
    check(F.pairwise_distance, r(4, 5), r(4, 5))
    check(F.pairwise_distance, r(4, 5), r(5), 1.0, 1e-6, True)
    check(F.pairwise_distance, r(4, 5), r(4, 5), p=math.inf)
    check(torch.pairwise_distance, r(3, 2, 5), r(3, 2, 5), 3.0)


# -- attention ------------------------------------------------------------------------------------------------------
SDPA_TOL = {"atol": 1e-5, "rtol": 1e-4}  # torch's CPU flash kernel sums in another order


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3}, {"scale": -0.5}],
                         ids=lambda k: ",".join(k) or "plain")
@pytest.mark.parametrize("shapes", [((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)), ((5, 8), (5, 8), (5, 8)),
                                    ((2, 3, 4, 8), (1, 3, 6, 8), (1, 3, 6, 8))])
def test_sdpa(kwargs, shapes):
    q, k, v = (r(*s) for s in shapes)
    check(F.scaled_dot_product_attention, q, k, v, **kwargs, **SDPA_TOL)


def test_sdpa_masks_and_dtypes():
    q, k, v = r(2, 2, 5, 8), r(2, 2, 6, 8), r(2, 2, 6, 8)
    bool_mask = torch.rand(5, 6) > 0.3
    bool_mask[1] = False  # a row with every key masked gives zeros
    check(F.scaled_dot_product_attention, q, k, v, attn_mask=bool_mask, **SDPA_TOL)
    check(F.scaled_dot_product_attention, q, k, v, attn_mask=r(2, 1, 5, 6), **SDPA_TOL)
    check(F.scaled_dot_product_attention, q.double(), k.double(), v.double(), attn_mask=r(5, 6).double())
    qb, kb, vb = (t.bfloat16() for t in (q, k, v))
    check(F.scaled_dot_product_attention, qb, kb, vb, is_causal=True, **BF16)
    check(F.scaled_dot_product_attention, r(2, 4, 5, 8), r(2, 2, 5, 8), r(2, 2, 5, 8), enable_gqa=True, **SDPA_TOL)
    with pytest.raises(MetaError, match="is_causal"):
        trace_fn(F.scaled_dot_product_attention, q, k, v, attn_mask=bool_mask, is_causal=True)
    with pytest.raises(MetaError, match="same dtype"):
        trace_fn(F.scaled_dot_product_attention, q, k.double(), v)


def test_sdpa_dropout_is_random():
    q = r(2, 3, 4)
    torch.manual_seed(1)
    trace = trace_fn(F.scaled_dot_product_attention, q, q, q, dropout_p=0.5)
    subs = [s.sym.id for b in trace.bound_symbols for s in b.subsymbols]
    assert "ltorch.dropout" in subs
