"""`t.data_ptr()` inside a jitted function (issues 35 and 38): its alignment, `addr % k` and `addr & (k - 1)` for k a
power of two up to the allocator's alignment, is answered as eager's tensor has it: for a tensor the program allocates
(or a view of one) from its storage offset, for one from outside (argument, parameter, buffer, or a view of one) from
its real address, guarded, so a call whose tensor has another residue takes the other branch, as eager. Every other
use of the address is refused at the user's line. Eager, run on the same tensor objects, is the oracle.
"""
from __future__ import annotations

import os

import pytest
import torch

import jitcore
from executors import inductor_ex, torch_ex
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES

MODES = list(CACHE_MODES)


def shifted(shape, elems: int, dtype=torch.float32, requires_grad=False) -> torch.Tensor:
    """A tensor `elems` elements into a fresh (64-byte aligned) allocation: its data_ptr() % 16 is elems * itemsize
    % 16."""
    n = 1
    for s in shape:
        n *= s
    t = torch.randn(n + elems, dtype=dtype)[elems:].view(shape)
    assert t.data_ptr() % 64 == elems * t.element_size() % 64
    return t.requires_grad_(requires_grad) if requires_grad else t


def _check(fn, jfn, *args):
    want = fn(*args)
    got = jfn(*args)
    assert torch.equal(got, want), (args[0].data_ptr() % 64, got, want)
    return got


# -- arguments ---------------------------------------------------------------------------------------------------------
def _by_argument(x, w):
    """transformers' test: `weight.data_ptr() % 16 != 0 or input.data_ptr() % 16 != 0` (CPU, torch <= 2.10)."""
    if x.data_ptr() % 16 != 0 or w.data_ptr() & 15:
        return x * 2 + w
    return x @ w.t() if x.ndim == 2 else x - w


@pytest.mark.parametrize("mode", MODES)
def test_arguments_aligned_and_misaligned_take_eagers_branch(mode):
    jf = jitcore.jit(_by_argument, cache=mode)
    w = torch.randn(4, 4)
    for elems in (0, 1, 2, 0, 4, 3, 1, 0):  # float32 residues mod 16: 0, 4, 8, 0, 0, 12, 4, 0
        _check(_by_argument, jf, shifted((4, 4), elems), w)
    _check(_by_argument, jf, torch.randn(4, 4), shifted((4, 4), 1))  # the weight misaligned
    if mode != "no caching":  # a program per residue read (x: 0, 4, 8, 12; then w: 4), each reused
        assert jitcore.cache_misses(jf) == 5 and jitcore.cache_hits(jf) == 4


@pytest.mark.parametrize("mode", MODES)
def test_each_residue_is_its_own_answer(mode):
    def fn(x):
        return x * (x.data_ptr() % 16) + (x.data_ptr() & 7) + (3 & x.data_ptr()) + x.data_ptr() % 64

    jf = jitcore.jit(fn, cache=mode)
    for elems in (0, 1, 2, 3, 5, 8, 16, 1):
        _check(fn, jf, shifted((6,), elems))


@pytest.mark.parametrize("mode", MODES)
def test_other_dtypes_and_gradients(mode):
    def fn(x, w):
        scale = 3.0 if x.data_ptr() % 8 == 0 else -1.0
        return (x.to(w.dtype) * w * scale).sum()

    jf = jitcore.jit(fn, cache=mode)
    for elems, dtype in ((0, torch.float64), (1, torch.float16), (2, torch.float16), (1, torch.float64)):
        x, w = shifted((5,), elems, dtype=dtype), torch.randn(5, requires_grad=True)
        want = fn(x, w)
        (gw_want,) = torch.autograd.grad(want, w)
        got = jf(x, w)
        (gw_got,) = torch.autograd.grad(got, w)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gw_got, gw_want)


# -- views of arguments ----------------------------------------------------------------------------------------------
VIEWS = {  # name -> a view of x (6 x 4) whose address eager derives from x's
    "slice_rows": lambda x: x[1:],
    "slice_cols": lambda x: x[:, 1:],
    "transpose": lambda x: x.t(),
    "select": lambda x: x[2],
    "narrow_flat": lambda x: x.reshape(-1).narrow(0, 3, 5),
    "unsqueeze_index": lambda x: x.unsqueeze(0)[0, 1:, 2:],
    "detach": lambda x: x.detach()[1:],
    "chunk_whole": lambda x: x.chunk(1)[0],
    "split_second": lambda x: x.split(2)[1],
    "atleast_pair": lambda x: torch.atleast_1d(x, x[0])[1],
    "expand": lambda x: x[:, :1].expand(6, 3),
    "reshape_view": lambda x: x.reshape(3, 8)[1],
    "flatten_slice": lambda x: x.flatten()[5:],
    "data": lambda x: x.data[1:],
    "mT": lambda x: x.mT[1],
    "expand_as": lambda x: x[:1].expand_as(x),
    "diagonal": lambda x: x.diagonal(1),
    "unbind": lambda x: x.unbind(0)[3],
    "contiguous_self": lambda x: x.contiguous()[1],  # (eager's contiguous() of a contiguous x is x)
    "dropout_p0": lambda x: torch.nn.functional.dropout(x, 0.0)[2],  # (eager hands back x)
    "same_dtype": lambda x: x.to(torch.float32)[1:],
    "unfold": lambda x: x.unfold(0, 2, 1)[1],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_views_of_arguments(view, mode):
    make = VIEWS[view]

    def fn(x):
        v = make(x)
        return x + (v.data_ptr() % 16) + 100 * (v.data_ptr() % 32 == 0)

    jf = jitcore.jit(fn, cache=mode)
    for elems in (0, 1, 3, 0, 2):
        _check(fn, jf, shifted((6, 4), elems))
    _check(fn, jf, shifted((4, 6), 1).t())  # another layout (guarded): a reshape of it copies


# -- tensors the program allocates ---------------------------------------------------------------------------------
INTERMEDIATES = {  # name -> a tensor made from x (6 x 4); eager allocates it (or a view of such a tensor)
    "product": lambda x: x * 2,
    "matmul": lambda x: x @ x.t(),
    "advanced_index": lambda x: x[torch.tensor([2, 0, 1])],
    "sorted_gather": lambda x: x[torch.sort(x[:, 0])[1]],
    "contiguous_copy": lambda x: x.t().contiguous(),
    "reshape_copy": lambda x: x.t().reshape(-1),
    "view_of_product": lambda x: (x + 1)[1:],
    "column_of_product": lambda x: (x + 1)[:, 3],
    "flat_tail": lambda x: (x * x).view(-1)[5:],
    "transposed_tail": lambda x: (x - 1).t()[1, 3:],
    "split_of_product": lambda x: (x * 3).split(3, dim=1)[1],
    "to_double_tail": lambda x: x.double()[1:, 1:],
    "half_tail": lambda x: x.half().view(-1)[3:],
    "empty_tail": lambda x: (x + 1)[6:],
    "sort_values": lambda x: x.sort(0)[0][1],
    "softmax_tail": lambda x: x.softmax(-1)[2:],
    "cat_one": lambda x: torch.cat([x])[1],
    "clamp_in_place": lambda x: x.clone().clamp_(0)[1],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(INTERMEDIATES))
def test_intermediates_and_views_of_them(name, mode):
    make = INTERMEDIATES[name]

    def fn(x):
        v = make(x)
        out = x * (v.data_ptr() % 16 + 1)
        return out + (v.data_ptr() & 63) if v.data_ptr() % 4 == 0 else -out

    jf = jitcore.jit(fn, cache=mode)
    for elems in (0, 1, 2, 0):  # the input's alignment does not move a new allocation's
        _check(fn, jf, shifted((6, 4), elems))
    if mode != "no caching":
        assert jitcore.cache_misses(jf) == 1, jitcore.cache_misses(jf)


# -- parameters and buffers ----------------------------------------------------------------------------------------
class Experts(torch.nn.Module):
    """The shape of transformers' MoE check: a parameter (through a transpose) and a tensor the forward makes."""

    def __init__(self):
        super().__init__()
        self.gate_up = torch.nn.Parameter(torch.randn(3, 8, 4))
        self.register_buffer("scale", torch.randn(4))

    def forward(self, h, order):
        picked = h[order]  # (a new tensor: advanced indexing)
        w = self.gate_up.transpose(-2, -1)
        if w.data_ptr() % 16 != 0 or picked.data_ptr() % 16 != 0 or self.scale.data_ptr() % 16:
            return (picked * self.scale).sum(-1)  # the fallback
        return (picked @ w[0]).relu()


@pytest.mark.parametrize("mode", MODES)
def test_parameters_and_buffers_aligned_misaligned_and_swapped(mode):
    m = Experts()
    jm = jitcore.jit(m, cache=mode)
    h, order = torch.randn(5, 4), torch.tensor([4, 0, 2, 1])
    _check(m, jm, h, order)
    with torch.no_grad():  # the same Parameter object now over misaligned memory
        m.gate_up.data = shifted((3, 8, 4), 1)
    _check(m, jm, h, order)
    with torch.no_grad():
        m.gate_up.data = shifted((3, 8, 4), 4)  # aligned again (16 bytes in)
    _check(m, jm, h, order)
    m.scale = shifted((4,), 2)  # a misaligned buffer
    _check(m, jm, h, order)
    m.scale = torch.randn(4)
    got = _check(m, jm, h, order)
    assert got.shape == (4, 8)


def test_parameters_with_inductor():
    m = Experts()
    jm = jitcore.jit(m, executors=[inductor_ex, torch_ex])
    h, order = torch.randn(5, 4), torch.tensor([4, 0, 2, 1])
    for elems in (0, 1, 0):
        with torch.no_grad():
            m.gate_up.data = shifted((3, 8, 4), elems)
        torch.testing.assert_close(jm(h, order), m(h, order))
    assert jitcore.cache_misses(jm) == 2


# -- refused: everything but the alignment ---------------------------------------------------------------------------
REFUSED = {  # name -> (fn, its source text, what the message names)
    "compare_five": (lambda x: x * (x.data_ptr() != 5), "x.data_ptr() != 5", "__ne__"),
    "compare_zero_empty": (lambda x: x * (x[:0].data_ptr() != 0), "x[:0].data_ptr() != 0", "without elements"),
    "compare_two": (lambda x: x * (x.data_ptr() == x[1:].data_ptr()), "x.data_ptr() == x[1:].data_ptr()", "__eq__"),
    "int": (lambda x: x * int(x.data_ptr()), "int(x.data_ptr())", "int()"),
    "hash": (lambda x: x * len({x.data_ptr(): 1}), "{x.data_ptr(): 1}", "hashing"),
    "print": (lambda x: print(x.data_ptr()) or x, "print(x.data_ptr())", "printing"),
    "fstring": (lambda x: x * len(f"{x.data_ptr()}"), 'f"{x.data_ptr()}"', "formatting"),
    "times_tensor": (lambda x: x * x.data_ptr(), "x * x.data_ptr()", "passing to"),
    "difference": (lambda x: x * (x.data_ptr() - x[1:].data_ptr()), "x.data_ptr() - x[1:].data_ptr()", "__sub__"),
    "mod_three": (lambda x: x * (x.data_ptr() % 3), "x.data_ptr() % 3", "not a power of two"),
    "mod_above_alignment": (lambda x: x * (x.data_ptr() % 128), "x.data_ptr() % 128", "above the alignment"),
    "mask_not_low_bits": (lambda x: x * (x.data_ptr() & 6), "x.data_ptr() & 6", "not a power of two"),
    "int_tensor_index": (lambda x: x * (x[torch.tensor(1)].data_ptr() % 16), "x[torch.tensor(1)].data_ptr()",
                         "eager may make a view"),
    "resolve_conj": (lambda x: x * (x.to(torch.complex64).conj().resolve_conj().data_ptr() % 16),
                     "conj().resolve_conj().data_ptr()", "resolve_conj"),  # (eager copies or not, by the conj bit)
    "as_strided": (lambda x: x * (x.as_strided((2,), (1,), 3).data_ptr() % 16), "x.as_strided((2,), (1,), 3)",
                   "may return a view"),
    "view_dtype": (lambda x: x * (x.view(torch.int32).data_ptr() % 16), "x.view(torch.int32).data_ptr()",
                   "eager may make a view"),
    "view_of_nonzero": (lambda x: x * (x.nonzero()[1].data_ptr() % 16), "x.nonzero()[1].data_ptr()",
                        "known only at run time"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_uses_are_refused_at_the_users_line(name, mode):
    fn, source, named = REFUSED[name]
    with pytest.raises(UnsupportedError) as info:
        jitcore.jit(fn, cache=mode)(torch.randn(4, 4))
    where = info.value.where
    assert where is not None and os.path.basename(__file__) in where and source in where, where
    assert named in str(info.value) and info.value.hint


def test_returned_or_stored_addresses_are_refused():
    with pytest.raises(UnsupportedError, match="returning"):
        jitcore.jit(lambda x: (x + 1, x.data_ptr()))(torch.randn(3))
    box = {}

    def store(x, d):
        d["p"] = x.data_ptr()
        return x + 1

    with pytest.raises(UnsupportedError, match="data_ptr"):
        jitcore.jit(store)(torch.randn(3), box)
    assert box == {}


def test_an_address_is_an_int_to_type_and_isinstance():
    def fn(x):
        p = x.data_ptr()
        return x * (isinstance(p, int) + (type(p) is int) + (p % 16 == 0))

    x = torch.randn(4)
    assert torch.equal(jitcore.jit(fn)(x), fn(x))


def test_the_guard_reads_the_address_once_per_tensor_and_modulus():
    def fn(x):
        return x * (x.data_ptr() % 16) + (x.data_ptr() % 16) * (x.t().data_ptr() % 16)

    jf = jitcore.jit(fn)
    _check(fn, jf, shifted((3, 3), 1))
    text = str(jitcore.last_prologue_traces(jf)[-1])
    assert text.count("data_ptr_mod_16") == 2, text  # x itself, and its transpose (a view: with its layout)


def test_outside_a_recording_data_ptr_is_refused():
    from jitcore.ir.proxies import TensorProxy
    from jitcore.ir.trace import Trace, tracectx

    with tracectx(Trace("t")):
        p = TensorProxy((2,), torch.float32, torch.device("cpu"), False)
    with pytest.raises(UnsupportedError, match="data_ptr"):
        p.data_ptr()


def test_ops_eager_views_and_jitcore_computes_are_not_followed():
    """What functionalization knows eager views and jitcore computes is refused here too (not taken as new memory)."""
    from jitcore.frontend.alignment import EAGER_VIEWS
    from transforms.functionalize import COMPUTED_VIEW_OPS

    assert set(COMPUTED_VIEW_OPS) <= EAGER_VIEWS
