"""Torch-level indexing (jitcore/ops/torch_index.py) against torch: __getitem__ in all its forms, the functional
setitem, gather/scatter, index_* ops, masks; data-dependent ones raise DataDependentError."""
from __future__ import annotations

import pytest
import torch

from jitcore.errors import MetaError
from jitcore.ops import ltorch
from tests.core_ops_checks import check_op, sample
from tests.helpers import assert_matches_torch, trace_fn

F32, BF16, I64, B8 = torch.float32, torch.bfloat16, torch.int64, torch.bool

KEYS = [
    0, -1, 2, slice(None), slice(1, None), slice(None, None, 2), slice(-3, -1), slice(5, 1), slice(None, 100, 3),
    (1, 2), (0, slice(1, 3)), (Ellipsis, 1), (None,), (None, 0, None), (slice(None), None, 1), (Ellipsis, None),
    (1, Ellipsis, 2), True, False, (0, True), [0, 2], [-1, 0, 0], [True, False, True], ([0, 1], [1, 2]),
    ([0, 1], slice(None), [1, 2]), (slice(None), [0, 2], [1, -1]), (0, slice(None), [1, 2]),
    (None, [0, 1], slice(None), [1, 2]), ([[0], [1]], slice(1, None), [1, 2]), (slice(None), [[0, 1], [2, 3]]),
    ([0, 1], None, [1, 2]), (slice(None), [0, 1], None, [1, 2]), (Ellipsis, [0, 4]), ([], slice(None)),
    (2, [0, 1, 2], [4, 3, 2]),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem(key):
    check_op(lambda a: a[key], sample((3, 4, 5), F32))


@pytest.mark.parametrize("dtype", [BF16, I64, B8])
def test_getitem_dtypes_noncontiguous(dtype):
    a = sample((4, 6), dtype, noncontiguous=True)
    for key in [(1, slice(None, None, 2)), ([0, 2], slice(1, 3)), (slice(None), [0, -1]), (None, Ellipsis, 0)]:
        check_op(lambda x, key=key: x[key], a)
    check_op(lambda x: x.t()[1:, [0, 1]], a)


def test_getitem_zero_dim_and_empty():
    check_op(lambda a: a[None], sample((), F32))
    check_op(lambda a: a[...], sample((), F32) + 0)
    check_op(lambda a: a[True], sample((), F32))
    check_op(lambda a: a[1:, 0], sample((0, 3), F32))
    check_op(lambda a: a[:, [0, 2]], sample((0, 3), F32))


def test_getitem_tensor_indices():
    a = sample((3, 4, 5), F32)
    i = torch.tensor([[0, 2], [-1, 1]])
    j = torch.tensor([1, -2])
    check_op(lambda x, i: x[i], a, i)
    check_op(lambda x, i, j: x[i, :, j], a, i, j)
    check_op(lambda x, i, j: x[:, i, j], a, i, j)
    check_op(lambda x, i: x[..., i.int()], a, i)
    check_op(lambda x, j: x[j[0]], a, j)  # a 0-d index tensor


def test_getitem_errors():
    a = torch.randn(3, 4)
    with pytest.raises(MetaError, match="does not match the shape of the indexed tensor"):
        trace_fn(lambda x: x[x[:2] > 0], a)
    with pytest.raises(MetaError, match="too many indices"):
        trace_fn(lambda x: x[0, 0, 0], a)
    with pytest.raises(MetaError, match="out of bounds"):
        trace_fn(lambda x: x[3], a)
    with pytest.raises(MetaError, match="single ellipsis"):
        trace_fn(lambda x: x[..., ...], a)
    with pytest.raises(MetaError, match="step must be greater than zero"):
        trace_fn(lambda x: x[::-1], a)
    with pytest.raises(MetaError, match="indices"):
        trace_fn(lambda x: x[x], a)


def _same_mask(x):
    m = x > 0
    return x[m].reshape(-1, 1) * (x + 1)[m][:, None] + x[m].sum()


def _eager_setitem(x, key, value):
    out = x.clone()
    out[key] = value
    return out


SET_KEYS = [(0, 1.5), (slice(1, None), -2.0), ((slice(None), 0), 7), ((Ellipsis, slice(None, None, 2)), 3.0),
            ([0, 2], 0.0), ((0, [1, 3]), 9.0), ((slice(None), [0, 1], [2, 3]), 4.0), ((None, 1), 5.0)]


@pytest.mark.parametrize("key,value", SET_KEYS, ids=[repr(k) for k, _ in SET_KEYS])
@pytest.mark.parametrize("dtype", [F32, I64])
def test_setitem(key, value, dtype):
    a = sample((3, 4, 5), dtype)
    assert_matches_torch(lambda x: ltorch.setitem(x, key, value), lambda x: _eager_setitem(x, key, value), a)


def test_setitem_tensor_values_and_masks():
    a, v = sample((3, 4), F32), sample((4,), torch.float64)
    assert_matches_torch(lambda x, y: ltorch.setitem(x, 1, y), lambda x, y: _eager_setitem(x, 1, y), a, v)
    assert_matches_torch(lambda x, y: ltorch.setitem(x, (slice(None), 0), y[:3]),
                         lambda x, y: _eager_setitem(x, (slice(None), 0), y[:3]), a, v)
    assert_matches_torch(lambda x, y: ltorch.setitem(x, slice(None), y),
                         lambda x, y: _eager_setitem(x, slice(None), y), a, v)
    assert_matches_torch(lambda x: ltorch.setitem(x, x > 0, 0.0), lambda x: _eager_setitem(x, x > 0, 0.0), a)
    assert_matches_torch(lambda x, y: ltorch.setitem(x, x[:, 0] > 0, y),
                         lambda x, y: _eager_setitem(x, x[:, 0] > 0, y.float()), a, v)
    assert_matches_torch(lambda x: ltorch.setitem(x, x > 0, x[0, 0]), lambda x: _eager_setitem(x, x > 0, x[0, 0]), a)
    assert ltorch.setitem.__doc__ and "NEW tensor" in ltorch.setitem.__doc__


def _idx(shape, high):
    torch.manual_seed(1)
    return torch.randint(0, high, shape)


def test_gather_scatter_family():
    a = sample((3, 4, 5), F32)
    idx = _idx((3, 2, 5), 4)
    src = sample((3, 2, 5), F32, seed=2)
    check_op(lambda x, i: torch.gather(x, 1, i), a, idx)
    check_op(lambda x, i: x.gather(-2, i[:, :, :2]), a, idx)
    check_op(lambda x, i, s: torch.scatter(x, 1, i, s), a, idx, src)
    check_op(lambda x, i: x.scatter(1, i, 2.5), a, idx)
    check_op(lambda x, i: torch.scatter(x, 1, i, value=-1.0), a, idx)
    check_op(lambda x, i, s: torch.scatter_add(x, 1, i, s), a, idx, src)
    check_op(lambda x, i, s: x.scatter_add(1, i[:, :1], s[:, :1, :3]), a, idx, src)
    check_op(lambda x, i: torch.take_along_dim(x, i, 1), a, idx)
    check_op(lambda x, i: torch.take_along_dim(x, i[:1], 1), a, idx)
    check_op(lambda x, i: torch.take_along_dim(x, i), a, _idx((7,), 60))
    check_op(lambda x, i: torch.gather(x, 0, i), sample((), F32), torch.tensor(0))


def test_index_family():
    a = sample((3, 4, 5), F32)
    i = torch.tensor([2, 0, 2])
    check_op(lambda x, i: torch.index_select(x, 1, i), a, i)
    check_op(lambda x, i: x.index_select(-1, i[0]), a, i)
    check_op(lambda x, i: torch.take(x, i.reshape(1, 3)), a, torch.tensor([0, -1, 59]))
    src = sample((3, 3, 5), F32, seed=3)
    check_op(lambda x, i, s: torch.index_add(x, 1, i, s), a, i, src)
    check_op(lambda x, i, s: x.index_add(1, i, s, alpha=2.0), a, i, src)
    j = torch.tensor([3, 0, 1])
    check_op(lambda x, j, s: torch.index_copy(x, 1, j, s), a, j, src)
    check_op(lambda x, j: x.index_copy(-1, j[1:], x[:, :, :2] * 2), a, j)
    check_op(lambda x, j: torch.index_fill(x, 1, j, -3.0), a, j)
    check_op(lambda x, j: x.index_fill(0, j[1:], x[0, 0, 0]), a, j)
    v = sample((3, 5), F32)
    check_op(lambda x, i: torch.index_put(x, (i[:2],), x[:2]), a, i)
    check_op(lambda x, i: torch.index_put(x, (i[:2],), x[0, 0]), a, i)
    check_op(lambda x, j, v: x.index_put((j, j), v, accumulate=True), a, torch.tensor([0, 1, 1]), v)


def test_masks():
    a = sample((3, 4), F32)
    check_op(lambda x: x.masked_fill(x > 0, -1.0), a)
    check_op(lambda x: torch.masked_fill(x, x[:, :1] > 0, 2), a)
    check_op(lambda x: torch.masked_fill(x[:, :1], x > 0, 2.5), a)
    check_op(lambda x: x.masked_fill(x > 0, x[0, 0]), a)
    check_op(lambda x: x.long().masked_fill(x > 0, 3.7), a)
    check_op(lambda x: x.masked_scatter(x > 0, x * 10), a)
    check_op(lambda x: torch.masked_scatter(x, x[0] > 0, -x[:2].flatten()), a)
    check_op(lambda x: x.bool().masked_fill(x > 0, False), a)
    # a data-dependent number of entries: the count is a size known only at run time (prims.nonzero)
    for fn in (lambda x: x.masked_select(x > 0), lambda x: torch.nonzero(x), lambda x: x.nonzero(as_tuple=True),
               lambda x: torch.argwhere(x), lambda x: x[x > 0], lambda x: x[:, x[0] > 0], lambda x: x[x[:, 0] > 0, 1:],
               lambda x: torch.where(x > 0), lambda x: x.masked_select(x[0] > 0),
               _same_mask):
        check_op(fn, a)
    with pytest.raises(MetaError, match="boolean masks"):
        trace_fn(lambda x: x.masked_fill(x.long(), 1.0), a)
    with pytest.raises(MetaError, match="0-dimensional value"):
        trace_fn(lambda x: x.masked_fill(x > 0, x[0]), a)


def test_setitem_tensor_index():
    a, i = sample((5, 3), F32), torch.tensor([4, -1, 0])
    assert_matches_torch(lambda x, i: ltorch.setitem(x, i, 1.0), lambda x, i: _eager_setitem(x, i, 1.0), a, i)
    assert_matches_torch(lambda x, i: ltorch.setitem(x, (i, 1), x[:3, 0]),
                         lambda x, i: _eager_setitem(x, (i, 1), x[:3, 0]), a, torch.tensor([4, 2, 0]))


def test_index_ops_on_0d_and_negative_take_along_dim():
    a = sample((), F32)
    check_op(lambda x, i: torch.index_fill(x, 0, i, 2.0), a, torch.tensor([0]))
    check_op(lambda x, i: torch.index_copy(x, 0, i, x * 3), a, torch.tensor([0]))
    check_op(lambda x, i: torch.take_along_dim(x, i, 1), sample((2, 5), F32), torch.tensor([[-1, 0], [-5, 2]]))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
def test_range_index(mode):
    """x[range(a, b)] (and in a tuple key, reversed) indexes with the range's values, as eager (it was refused)."""
    import jitcore

    def f(x, a, b):
        return x[:, range(a, b)] * 2, x[range(b - 1, a - 1, -1)]

    jf = jitcore.jit(f, cache=mode)
    for a, b in [(0, 2), (1, 4), (2, 2), (0, 3)]:
        x = torch.arange(30.0).reshape(5, 6).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        got, expected = jf(x, a, b), f(x2, a, b)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        sum(o.sum() for o in got).backward()
        sum(o.sum() for o in expected).backward()
        torch.testing.assert_close(x.grad, x2.grad)
