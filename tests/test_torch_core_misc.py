"""Torch-level misc ops (jitcore/ops/torch_misc.py) and the elementwise ops added to torch_elementwise.py, against
torch; plus the Python-valued helpers in the torch map."""
from __future__ import annotations

import pytest
import torch

from jitcore import compat
from jitcore.errors import DataDependentError, MetaError
from jitcore.ops.torch_map import TORCH_MAP
from tests.core_ops_checks import SHAPES, check_op, sample
from tests.helpers import trace_fn

F32, F64, BF16, I64, B8 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool


def _special(x):
    """x with zeros, infinities and a NaN mixed in (for the nan/inf-aware ops)."""
    flat = x.flatten().clone()
    vals = [0.0, float("inf"), float("-inf"), float("nan")]
    for i, v in enumerate(vals[:flat.numel()]):
        flat[i * 2 % max(flat.numel(), 1)] = v
    return flat.reshape(x.shape)


UNARY = {
    "deg2rad": (lambda a: torch.deg2rad(a), (F32, BF16, I64)),
    "rad2deg": (lambda a: a.rad2deg(), (F32, I64)),
    "sinc": (lambda a: torch.sinc(a), (F32, F64, BF16, I64)),
    "special_sinc": (lambda a: torch.special.sinc(a), (F32,)),
    "logit": (lambda a: torch.logit(a.sigmoid()), (F32, F64)),
    "logit_eps": (lambda a: torch.special.logit(a, 0.1), (F32,)),
    "ndtr": (lambda a: torch.special.ndtr(a), (F32, F64)),
    "entr": (lambda a: torch.special.entr(a), (F32, F64)),
    "isposinf": (lambda a: torch.isposinf(a), (F32, I64)),
    "isneginf": (lambda a: a.isneginf(), (F32,)),
    "isreal": (lambda a: torch.isreal(a), (F32, I64, B8)),
    "sgn": (lambda a: torch.sgn(a), (F32, I64)),
    "diff": (lambda a: torch.diff(a), (F32, I64, B8)),
    "diff_n2_dim0": (lambda a: a.diff(2, 0), (F32,)),
    "diff_pre_app": (lambda a: torch.diff(a, dim=-1, prepend=a[..., :1], append=a[..., -1:] * 2), (F32,)),
    "sum_to_size": (lambda a: a.sum_to_size(*([1] * a.ndim)), (F32, I64)),
    "sum_to_size_last": (lambda a: a.sum_to_size(a.shape[-1:]), (F32,)),
    "type": (lambda a: a.type(torch.float64), (F32, I64)),
    "type_str": (lambda a: a.type("torch.IntTensor"), (F32,)),
}

BINARY = {
    "hypot": (lambda a, b: torch.hypot(a, b), (F32, F64, BF16)),
    "logaddexp": (lambda a, b: torch.logaddexp(a, b), (F32, F64, BF16)),
    "logaddexp2": (lambda a, b: a.logaddexp2(b), (F32, F64)),
    "xlogy": (lambda a, b: torch.xlogy(a, b), (F32, F64, I64)),
    "xlogy_special": (lambda a, b: torch.special.xlogy(a, b.abs()), (F32,)),
    "xlog1py": (lambda a, b: torch.special.xlog1py(a, b), (F32, F64)),
    "float_power": (lambda a, b: torch.float_power(a, b), (F32, I64)),
    "fmax": (lambda a, b: torch.fmax(a, b), (F32, I64, BF16)),
    "fmin": (lambda a, b: a.fmin(b), (F32, I64)),
    "heaviside": (lambda a, b: torch.heaviside(a, b), (F32, I64)),
    "isclose": (lambda a, b: torch.isclose(a, b), (F32, I64, B8)),
    "isclose_nan": (lambda a, b: torch.isclose(a, a.where(b > 0, b), rtol=0.5, atol=0.1, equal_nan=True), (F32,)),
}


@pytest.mark.parametrize("name,dtype,shape", [(n, d, s) for n, (_, ds) in UNARY.items() for d in ds for s in SHAPES])
def test_unary(name, dtype, shape):
    fn, _ = UNARY[name]
    a = sample(shape, dtype)
    check_op(fn, a)
    if dtype.is_floating_point and a.numel() > 3:
        check_op(fn, _special(a))


@pytest.mark.parametrize("name,dtype", [(n, d) for n, (_, ds) in BINARY.items() for d in ds])
def test_binary(name, dtype):
    fn, _ = BINARY[name]
    a, b = sample((3, 4), dtype), sample((4,), dtype, seed=1)
    check_op(fn, a, b)
    if name.startswith("isclose") and not compat.eager_has("isclose of a 0-d tensor with a larger one"):
        return
    check_op(fn, sample((), dtype, seed=2), b)
    check_op(fn, sample((2, 6), dtype, noncontiguous=True), sample((6, 2), dtype).t())
    if dtype.is_floating_point:
        check_op(fn, _special(a), _special(b.flip(0)))


def test_block_diag():
    a, b, c = sample((2, 3), F32), sample((3,), I64), sample((), F32)
    check_op(lambda x, y, z: torch.block_diag(x, y, z), a, b, c)
    check_op(lambda x: torch.block_diag(x), a)
    check_op(lambda x: torch.block_diag(x, x[:0]), a)


def test_python_valued_helpers():
    trace = trace_fn(lambda a: (TORCH_MAP[torch.numel](a), TORCH_MAP[torch.is_tensor](a),
                                TORCH_MAP[torch.is_floating_point](a), TORCH_MAP[torch.is_complex](a),
                                TORCH_MAP[torch.result_type](a, 2.5), a.type()), torch.ones(2, 3, dtype=I64))
    assert trace.output == (6, True, False, False, torch.float32, "torch.LongTensor")
    assert trace.bound_symbols == []


def test_errors():
    a = torch.randn(3, 4)
    with pytest.raises(DataDependentError):  # a Python bool of a tensor's value: no real inputs at hand here
        trace_fn(lambda x: torch.is_nonzero(x[0, 0]), a)
    # output lengths that depend on values: sizes known only at run time (prims.nonzero, prims.item_as_size)
    for fn in (lambda x: torch.unique(x), lambda x: x.unique(),
               lambda x: torch.bincount((x * 3).abs().long().flatten()),
               lambda x: torch.unique(x.round(), return_inverse=True, return_counts=True),
               lambda x: torch.unique_consecutive((x > 0).long(), return_counts=True)):
        check_op(fn, a)
    with pytest.raises(MetaError, match="hypot"):
        trace_fn(lambda x: torch.hypot(x.long(), x.long()), a)
    with pytest.raises(MetaError, match="heaviside"):
        trace_fn(lambda x: torch.heaviside(x, x.double()), a)
    with pytest.raises(MetaError, match="block_diag"):
        trace_fn(lambda x: torch.block_diag(x[None]), a)
    with pytest.raises(MetaError, match="not expandable"):
        trace_fn(lambda x: x.sum_to_size(2), a)
    with pytest.raises(MetaError, match="diff"):
        trace_fn(lambda x: torch.diff(x[0, 0]), a)
