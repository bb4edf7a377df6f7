"""Torch-level shape and layout ops (jitcore/ops/torch_shape.py, torch_layout.py) against torch."""
from __future__ import annotations

import pytest
import torch

from jitcore.errors import MetaError
from tests.core_ops_checks import SHAPES, check_op, sample
from tests.helpers import trace_fn

F32, BF16, I64, B8 = torch.float32, torch.bfloat16, torch.int64, torch.bool
ALL = (F32, I64, B8)
FB = (F32, BF16)

OPS = {
    "reshape": (lambda a: a.reshape(-1, 1), ALL),
    "reshape_fn": (lambda a: torch.reshape(a, (a.numel(),)), (F32,)),
    "reshape_tuple": (lambda a: a.reshape((1, -1)), (F32,)),
    "view": (lambda a: a.view(1, -1, 1), ALL),
    "view_as": (lambda a: a.view_as(a.reshape(-1)), (F32,)),
    "reshape_as": (lambda a: a.reshape_as(a.reshape(1, -1)), (F32,)),
    "flatten": (lambda a: a.flatten(), ALL),
    "flatten_range": (lambda a: torch.flatten(a, 1, -1), (F32,)),
    "ravel": (lambda a: torch.ravel(a), (F32,)),
    "unflatten": (lambda a: a.unflatten(0, (1, -1)), (F32,)),
    "squeeze": (lambda a: a.squeeze(), ALL),
    "squeeze_dim": (lambda a: torch.squeeze(a, 1), (F32,)),
    "squeeze_dims": (lambda a: a.squeeze((0, -2)), (F32,)),
    "unsqueeze": (lambda a: a.unsqueeze(0), ALL),
    "unsqueeze_end": (lambda a: torch.unsqueeze(a, -1), (F32,)),
    "permute": (lambda a: a.permute(*reversed(range(a.ndim))), ALL),
    "permute_fn": (lambda a: torch.permute(a, (-1, 0, 1)), (F32,)),
    "transpose": (lambda a: a.transpose(0, -1), ALL),
    "swapaxes": (lambda a: torch.swapaxes(a, 0, 1), (F32,)),
    "swapdims": (lambda a: a.swapdims(-1, -2), (F32,)),
    "t": (lambda a: a.t(), (F32, I64)),
    "T": (lambda a: a.T, (F32,)),
    "mT": (lambda a: a.mT, (F32,)),
    "mH": (lambda a: a.mH, (F32,)),
    "H": (lambda a: a.H, (F32,)),
    "adjoint": (lambda a: torch.adjoint(a), (F32,)),
    "movedim": (lambda a: torch.movedim(a, 0, -1), (F32,)),
    "moveaxis": (lambda a: a.moveaxis((0, 1), (-1, 0)), (F32,)),
    "expand": (lambda a: a.expand(2, *a.shape), ALL),
    "expand_m1": (lambda a: a.expand(-1, 4, -1), (F32,)),
    "expand_as": (lambda a: a.expand_as(a.unsqueeze(0)), (F32,)),
    "broadcast_to": (lambda a: torch.broadcast_to(a, (3,) + tuple(a.shape)), (F32,)),
    "broadcast_tensors": (lambda a: torch.broadcast_tensors(a, a.unsqueeze(0)), (F32,)),
    "repeat": (lambda a: a.repeat(2, *([1] * a.ndim)), ALL),
    "repeat_grow": (lambda a: a.repeat(1, 2, 3, 1), (F32,)),
    "tile": (lambda a: torch.tile(a, (2,)), (F32, I64)),
    "cat": (lambda a: torch.cat([a, a * 2], 0), (F32, I64)),
    "cat_last": (lambda a: torch.cat((a, a), dim=-1), (F32, B8)),
    "cat_promote": (lambda a: torch.cat([a, a.double()], 0), (F32, I64)),
    "cat_legacy_empty": (lambda a: torch.cat([a, a.new_zeros(0)], 0), (F32,)),
    "concat": (lambda a: torch.concat([a, a], 0), (F32,)),
    "concatenate": (lambda a: torch.concatenate([a, a], axis=-1), (F32,)),
    "stack": (lambda a: torch.stack([a, a + 1]), (F32, I64)),
    "stack_last": (lambda a: torch.stack((a, a), -1), (F32,)),
    "hstack": (lambda a: torch.hstack([a, a]), (F32,)),
    "vstack": (lambda a: torch.vstack([a, a]), (F32,)),
    "row_stack": (lambda a: torch.row_stack((a, a)), (F32,)),
    "dstack": (lambda a: torch.dstack([a, a]), (F32,)),
    "column_stack": (lambda a: torch.column_stack([a, a]), (F32,)),
    "atleast_1d": (lambda a: torch.atleast_1d(a), (F32,)),
    "atleast_2d": (lambda a: torch.atleast_2d(a, a), (F32,)),
    "atleast_3d": (lambda a: torch.atleast_3d([a]), (F32,)),
    "split": (lambda a: a.split(2), ALL),
    "split_sizes": (lambda a: torch.split(a, [1, a.shape[0] - 1]), (F32,)),
    "split_with_sizes": (lambda a: a.split_with_sizes([a.shape[-1]], -1), (F32,)),
    "chunk": (lambda a: a.chunk(2), (F32, I64)),
    "chunk_last": (lambda a: torch.chunk(a, 3, -1), (F32,)),
    "tensor_split": (lambda a: torch.tensor_split(a, 2), (F32,)),
    "tensor_split_idx": (lambda a: a.tensor_split([1, -1], -1), (F32,)),
    "hsplit": (lambda a: torch.hsplit(a, 1), (F32,)),
    "vsplit": (lambda a: torch.vsplit(a, [1]), (F32,)),
    "dsplit": (lambda a: torch.dsplit(a, 1), (F32,)),
    "unbind": (lambda a: a.unbind(), ALL),
    "unbind_last": (lambda a: torch.unbind(a, -1), (F32,)),
    "select": (lambda a: a.select(0, -1), ALL),
    "narrow": (lambda a: a.narrow(0, 1, 1), (F32,)),
    "narrow_neg": (lambda a: torch.narrow(a, -1, -2, 2), (F32,)),
    "narrow_copy": (lambda a: torch.narrow_copy(a, 0, 0, 1), (F32,)),
    "unfold": (lambda a: a.unfold(0, 1, 1), (F32,)),
    "unfold_step": (lambda a: a.unfold(-1, 2, 2), (F32,)),
    # layout
    "flip": (lambda a: a.flip(0), ALL),
    "flip_fn": (lambda a: torch.flip(a, (0, -1)), (F32,)),
    "fliplr": (lambda a: torch.fliplr(a), (F32,)),
    "flipud": (lambda a: a.flipud(), (F32,)),
    "roll": (lambda a: a.roll(1, 0), ALL),
    "roll_flat": (lambda a: torch.roll(a, -7), (F32,)),
    "roll_multi": (lambda a: torch.roll(a, (1, 2), (0, -1)), (F32,)),
    "rot90": (lambda a: torch.rot90(a), (F32,)),
    "rot90_k2": (lambda a: a.rot90(2, (0, -1)), (F32,)),
    "rot90_k3": (lambda a: torch.rot90(a, -1, [0, 1]), (F32,)),
    "tril": (lambda a: a.tril(), ALL),
    "triu": (lambda a: torch.triu(a, 1), ALL),
    "tril_neg": (lambda a: torch.tril(a, -1), (F32,)),
    "diagonal": (lambda a: a.diagonal(), (F32, I64)),
    "diagonal_off": (lambda a: torch.diagonal(a, 1, -1, 0), (F32,)),
    "diagonal_neg": (lambda a: torch.diagonal(a, -1, 0, -1), (F32,)),
    "diag_2d": (lambda a: torch.diag(a.reshape(a.shape[0], -1) if a.ndim else a, 1), (F32,)),
    "diag_1d": (lambda a: torch.diag(a.flatten()), (F32, B8)),
    "diag_1d_off": (lambda a: a.flatten().diag(-2), (F32,)),
    "meshgrid": (lambda a: torch.meshgrid(a.flatten(), a.flatten()[:2], indexing="ij"), (F32,)),
    "meshgrid_xy": (lambda a: torch.meshgrid([a.flatten()[:3], a.flatten(), a.flatten()[:1]], indexing="xy"), (F32,)),
    "contiguous": (lambda a: a.t().contiguous() if a.ndim <= 2 else a.contiguous() + 1, (F32,)),
    "clone": (lambda a: torch.clone(a), ALL),
    "detach": (lambda a: a.detach(), (F32,)),
    "to_dtype": (lambda a: a.to(torch.float64), ALL),
    "to_kw": (lambda a: a.to(dtype=torch.int32), (F32,)),
    "to_device_dtype": (lambda a: a.to("cpu", torch.bfloat16), (F32,)),
    "to_other": (lambda a: a.to(a.long()), (F32,)),
    "to_copy": (lambda a: a.to(torch.float32, copy=True), (F32,)),
    "type_as": (lambda a: a.type_as(a.bool()), (F32, I64)),
    "shorthands": (lambda a: (a.float(), a.double(), a.half(), a.bfloat16(), a.int(), a.long(), a.short(), a.char(),
                              a.byte(), a.bool()), (F32, I64)),
}

CASES = [(name, dt, shape) for name, (_, dts) in OPS.items() for dt in dts for shape in SHAPES]


@pytest.mark.parametrize("name,dtype,shape", CASES, ids=[f"{n}-{str(d)[6:]}-{s}" for n, d, s in CASES])
def test_matches_torch(name, dtype, shape):
    fn, _ = OPS[name]
    check_op(fn, sample(shape, dtype))


@pytest.mark.parametrize("name", ["reshape", "permute", "cat", "split", "roll", "tril", "diagonal", "flip", "repeat",
                                  "rot90", "unbind", "meshgrid", "expand"])
def test_noncontiguous_and_bf16(name):
    fn, _ = OPS[name]
    check_op(fn, sample((4, 6), F32, noncontiguous=True))
    check_op(fn, sample((5, 4), F32).t())
    check_op(fn, sample((3, 4), BF16))


def test_two_inputs():
    a, b = sample((2, 3), F32), sample((4, 3), I64)
    check_op(lambda x, y: torch.cat([x, y]), a, b)
    check_op(lambda x, y: torch.vstack([x, y]), a, b)
    check_op(lambda x, y: torch.broadcast_tensors(x[:, None, :], y), a, b)
    check_op(lambda x, y: x.expand_as(y[:2]), a[:1], b)


def test_properties_are_ops():
    trace = trace_fn(lambda a: (a.T, a.mT), torch.randn(2, 3))
    assert [b.sym.id for b in trace.bound_symbols] == ["ltorch.T", "ltorch.mT"]


def test_contiguous_records_nothing():
    trace = trace_fn(lambda a: a.contiguous(), torch.randn(2, 3))
    assert trace.bound_symbols == []


@pytest.mark.parametrize("fn,match", [
    (lambda a: a.reshape(4, 4), "invalid for input of size 6"),
    (lambda a: a.view(-1, -1), "only one dimension can be inferred"),
    (lambda a: a.permute(0, 0), "permute"),
    (lambda a: a.transpose(0, 2), "out of range"),
    (lambda a: a.expand(3, 3), "expanded size"),
    (lambda a: a.expand(2), "number of sizes"),
    (lambda a: a.repeat(2), "repeat"),
    (lambda a: torch.cat([a, a.t()]), "Sizes of tensors must match"),
    (lambda a: torch.cat([a, a[0, 0]]), "zero-dimensional"),
    (lambda a: torch.stack([a, a[:1]]), "stack expects each tensor to be equal size"),
    (lambda a: a.split([1, 2]), "split_with_sizes expects"),
    (lambda a: a.chunk(0), "chunk"),
    (lambda a: a.narrow(1, 2, 2), "exceeds dimension"),
    (lambda a: a.select(0, 5), "out of range"),
    (lambda a: a[0].t().tril(), "at least 2 dimensions"),
    (lambda a: a.diagonal(0, 1, 1), "diagonal dimensions cannot be identical"),
    (lambda a: torch.rot90(a, 1, (0, 0)), "rotation dims"),
    (lambda a: a.unfold(1, 5, 1), "unfold"),
    (lambda a: a.unsqueeze(0).t(), "t\\(\\) expects"),
])
def test_errors(fn, match):
    with pytest.raises((MetaError, IndexError), match=match):
        trace_fn(fn, torch.randn(2, 3))


def test_narrow_tensor_start_and_split_with_sizes():
    a = sample((5, 4), F32)
    check_op(lambda x, s: torch.narrow(x, 0, s, 2), a, torch.tensor(2))
    check_op(lambda x, s: x.narrow(1, s, 3), a, torch.tensor(-4))
    check_op(lambda x: torch.split_with_sizes(x, [2, 3]), a)
