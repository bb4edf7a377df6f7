"""Views eager makes that jitcore once lost writes through (silent wrong answers): views of several tensors
(atleast_1d(x, y), broadcast_tensors, meshgrid), views jitcore computes as copies (x[t] with t a 0-d integer
tensor, narrow at a tensor position), opaque ops handing back an input's memory (conj_physical of a real tensor,
unsafe_chunk). Each call sequence runs in every cache mode against eager: a match, or a clear refusal.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES


def _seq(fn, make, mode, calls=3):
    jf = jitcore.jit(fn, cache=mode)
    for k in range(calls):
        e_in, j_in = make(k), make(k)
        e_out, j_out = fn(*e_in), jf(*j_in)
        for a, b in zip(e_in, j_in):
            torch.testing.assert_close(b, a, rtol=0, atol=0)
        e_flat = e_out if isinstance(e_out, tuple) else (e_out,)
        j_flat = j_out if isinstance(j_out, tuple) else (j_out,)
        assert len(e_flat) == len(j_flat)
        for a, b in zip(e_flat, j_flat):
            torch.testing.assert_close(b, a, rtol=0, atol=0)


def atleast_1d_writes(x, y):
    a, b = torch.atleast_1d(x, y)
    a.add_(1)
    b.mul_(2)
    return a + b


def atleast_2d_list(x, y):
    a, b = torch.atleast_2d([x, y])
    b.sub_(3)
    return a.sum() + b.sum()


def atleast_3d_returned(x, y):
    _, b = torch.atleast_3d(x, y)
    y.add_(1)
    return b


def broadcast_then_write_base(x, y):
    a, b = torch.broadcast_tensors(x, y)
    x.add_(1)
    return a * 1, b * 1


def broadcast_write_view(x, y):
    a, b = torch.broadcast_tensors(x, y)  # same shapes: views eager lets one write into
    b.mul_(3)
    return a + b


def meshgrid_then_write(x, y):
    gx, gy = torch.meshgrid(x, y, indexing="ij")
    y.add_(1)
    return gx + gy


CASES = {
    "atleast_1d": (atleast_1d_writes, lambda k: (torch.arange(3.0) + k, torch.tensor(2.0 + k))),
    "atleast_2d": (atleast_2d_list, lambda k: (torch.arange(3.0) + k, torch.ones(2, 2) * k)),
    "atleast_3d": (atleast_3d_returned, lambda k: (torch.arange(3.0), torch.arange(4.0).reshape(2, 2) + k)),
    "broadcast_base": (broadcast_then_write_base, lambda k: (torch.arange(3.0) + k, torch.ones(2, 3))),
    "broadcast_view": (broadcast_write_view, lambda k: (torch.arange(3.0) + k, torch.ones(3))),
    "meshgrid": (meshgrid_then_write, lambda k: (torch.arange(3.0), torch.arange(2.0) + k)),
}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_views_of_several_tensors(case, mode):
    fn, make = CASES[case]
    _seq(fn, make, mode)


def zero_dim_index_write(x, i):
    x[i].add_(1)
    return x * 1


def zero_dim_index_stale_read(x, i):
    v = x[i]
    x.add_(1)
    return v * 1


def narrow_tensor_write(x, s):
    x.narrow(0, s, 2).mul_(2)
    return x * 1


def conj_physical_write(x):
    torch.conj_physical(x).add_(1)
    return x * 1


def unsafe_chunk_write(x):
    a, _ = torch.unsafe_chunk(x, 2)
    a.add_(1)
    return x * 1


REFUSED = {
    "0d index write": (zero_dim_index_write, lambda: (torch.arange(6.0).reshape(3, 2), torch.tensor(1))),
    "0d index stale read": (zero_dim_index_stale_read, lambda: (torch.arange(6.0).reshape(3, 2), torch.tensor(1))),
    "narrow at tensor": (narrow_tensor_write, lambda: (torch.arange(6.0), torch.tensor(1))),
    "unsafe_chunk": (unsafe_chunk_write, lambda: (torch.arange(4.0),)),
}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_views_jitcore_cannot_follow_are_refused(case, mode):
    fn, make = REFUSED[case]
    args = make()
    with pytest.raises(UnsupportedError, match=r"cannot be followed|which jitcore cannot follow"):
        jitcore.jit(fn, cache=mode)(*args)


def conj_of_real_then_write(x):
    v = x.conj()  # (x itself in eager)
    x.add_(1)
    return v * 1


def conj_physical_of_real_then_write(x):
    v = torch.conj_physical(x)  # (x itself in eager)
    x.mul_(2)
    return v + 0


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", [conj_physical_write, conj_of_real_then_write, conj_physical_of_real_then_write])
def test_conj_of_a_real_tensor_is_the_tensor_itself(fn, mode):
    """conj()/conj_physical() of a real tensor hand back the tensor itself in eager: writes through either reach the
    other (refused while they were opaque ops; followed since the complex views are view ops)."""
    jf = jitcore.jit(fn, cache=mode)
    for n in (3, 4, 3):
        x = torch.arange(float(n))
        xe = x.clone()
        torch.testing.assert_close(jf(x), fn(xe))
        torch.testing.assert_close(x, xe)


def zero_dim_index_read_only(x, i):
    v = x[i]
    return v * 2, x.sum()


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_zero_dim_index_read_stays_supported(mode):
    _seq(zero_dim_index_read_only, lambda k: (torch.arange(6.0).reshape(3, 2) + k, torch.tensor(k % 3)), mode)


def nonzero_stride(x):
    return x.nonzero().stride()


def argwhere_contiguous(x):
    return torch.argwhere(x).is_contiguous()


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", [nonzero_stride, argwhere_contiguous])
def test_layout_of_nonzero_is_refused_not_guessed(fn, mode):
    """eager's CPU kernel lays nonzero's (n, ndim) result out column-major; jitcore answered contiguous."""
    with pytest.raises(UnsupportedError, match="memory layout"):
        jitcore.jit(fn, cache=mode)(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))


def offsets_of_pieces(x):
    return (x.chunk(1)[0].storage_offset(), [p.storage_offset() for p in x.split(2)],
            x[::2].tensor_split(1)[0].stride(), [p.storage_offset() for p in torch.atleast_1d(x, x)])


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_whole_pieces_keep_their_input_offset(mode):
    """x.chunk(1)[0] is x's view in eager (its offset, its strides); jitcore laid it out as a new tensor."""
    jf = jitcore.jit(offsets_of_pieces, cache=mode)
    for start in (3, 3, 1):
        x = torch.arange(12.0)[start:]
        assert jf(x) == offsets_of_pieces(x)


SWEPT = ("atleast_1d", "atleast_2d", "atleast_3d", "broadcast_tensors", "meshgrid", "tensor_split", "narrow", "chunk",
         "split", "unbind", "movedim", "unflatten", "conj_physical", "unsafe_chunk", "histogramdd", "cartesian_prod")


def test_view_sweep_finds_no_wrong_answers():
    """tests/view_sweep.py over the ops whose views were lost (constant values; the whole sweep: python -m
    tests.view_sweep)."""
    from tests.view_sweep import sweep

    counts, found = sweep(("constant values",), set(SWEPT), samples=2)
    assert counts["ok"] > 0
    assert not [f for f in found if f[0] == "WRONG"], found


def broadcast_piece_alignment(x):
    return x * (torch.broadcast_tensors(x[1:2], x)[0].data_ptr() % 16)


def broadcast_whole_alignment(x):
    return x * (torch.broadcast_tensors(x, x[1:2])[0].data_ptr() % 16)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", [broadcast_piece_alignment, broadcast_whole_alignment])
def test_broadcast_tensors_outputs_are_views_for_data_ptr(fn, mode):
    """broadcast_tensors is a view op now (each output of its own input): its data_ptr() alignment is eager's (it
    was refused as an op that may share its input's memory; tests/test_data_ptr_alignment.py listed it)."""
    jf = jitcore.jit(fn, cache=mode)
    for start in (0, 1, 2, 1):
        x = torch.arange(12.0)[start:start + 4]
        torch.testing.assert_close(jf(x), fn(x), rtol=0, atol=0)


def _seq_grad(fn, make, mode, calls=3):
    """Outputs, gradients of the arguments and the arguments after each call, against eager."""
    jf = jitcore.jit(fn, cache=mode)
    for k in range(calls):
        e_in = make(k)
        j_in = [a.detach().clone().requires_grad_(a.requires_grad) for a in e_in]
        e_out, j_out = fn(*e_in), jf(*j_in)
        torch.testing.assert_close(j_out, e_out)
        e_g = torch.autograd.grad(e_out.sum(), [a for a in e_in if a.requires_grad])
        j_g = torch.autograd.grad(j_out.sum(), [a for a in j_in if a.requires_grad])
        torch.testing.assert_close(j_g, e_g)
        torch.testing.assert_close([a.detach() for a in j_in], [a.detach() for a in e_in])


def multi_dot_written(x, w):
    t = torch.linalg.multi_dot([x, x.mT, w])  # (eager's result is a view of the product it made)
    t.mul_(2)
    with torch.no_grad():
        t[0].zero_()
    return t + x


def multi_dot_vectors_written(v, m, w):
    t = torch.linalg.multi_dot([v, m, w])  # (1-D ends: the product squeezed, a view again)
    t.add_(v.sum())
    return t * m[0]


MULTI_DOT = {
    "matrices": (multi_dot_written, lambda k: (torch.randn(3 + k, 4, requires_grad=True),
                                                torch.randn(3 + k, 4, requires_grad=True))),
    "vectors": (multi_dot_vectors_written, lambda k: (torch.randn(3, requires_grad=True),
                                                      torch.randn(3, 4 + k, requires_grad=True),
                                                      torch.randn(4 + k, 4 + k, requires_grad=True))),
}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(MULTI_DOT))
def test_write_into_multi_dot_result_is_an_ordinary_write(case, mode):
    fn, make = MULTI_DOT[case]
    _seq_grad(fn, make, mode)
