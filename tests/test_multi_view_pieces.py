"""Pieces of view ops returning several tensors, written in place with grad recorded: eager refuses writes into the
pieces of split/chunk/unbind (outputs of a multi-output view) and lets one write those of tensor_split and h/v/dsplit
(slices); jitcore does the same, with eager's own message (which names the autograd node of the tensor changed and
differs between torch releases)."""
import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES


def _pieces_written(x, k):
    y = x * 1
    p = y.tensor_split(2)[1]
    p.mul_(k)
    q = y.hsplit(2)[0]
    q.t_()
    return y.sin(), q * 2


def _dsplit_written(x):
    y = x * 1
    p = y.dsplit(2)[0]
    p.add_(y[..., -1:])
    p.unsqueeze_(0)
    return y, p


def _grads(fn, args):
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.arange(o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outs)
    ins = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return outs, torch.autograd.grad(loss, ins)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_slice_pieces_are_written_as_in_eager(cache):
    jfn, jd = jitcore.jit(_pieces_written, cache=cache), jitcore.jit(_dsplit_written, cache=cache)
    for shape, k in [((4, 6), 3.0), ((6, 6), -1.5), ((4, 6), 2.0), ((2, 8), 0.5)]:
        x = torch.randn(shape, requires_grad=True)
        (eo, eg), (jo, jg) = _grads(_pieces_written, (x, k)), _grads(jfn, (x, k))
        for a, b in zip(eo + eg, jo + jg):
            torch.testing.assert_close(b, a)
    for shape in [(2, 3, 4), (3, 2, 6), (2, 3, 4)]:
        x = torch.randn(shape, requires_grad=True)
        (eo, eg), (jo, jg) = _grads(_dsplit_written, (x,)), _grads(jd, (x,))
        for a, b in zip(eo + eg, jo + jg):
            torch.testing.assert_close(b, a)
            assert a.shape == b.shape


def _unbind_slice_transposed(x):
    p = (x * 1).unbind(0)[1][1:]
    p.t_()
    return p


def _split_piece_transposed(x):
    p = (x * 1).split(2)[1]
    p.transpose_(0, 1)
    return p


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_unbind_slice_transposed, _split_piece_transposed])
def test_multi_output_pieces_raise_eagers_error(fn, cache):
    jfn = jitcore.jit(fn, cache=cache)
    for shape in [(4, 3, 3), (4, 5, 5)]:
        x = torch.randn(shape, requires_grad=True)
        with pytest.raises(RuntimeError) as eager:
            fn(x)
        with pytest.raises(RuntimeError) as jit:
            jfn(x)
        assert str(jit.value).splitlines()[0] == str(eager.value).splitlines()[0]
