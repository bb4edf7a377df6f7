"""Fuzzer class `alignment_views` (tests/fuzz_class_alignmentviews.py; issue 38): `data_ptr()` residues of views into
tensors whose sizes are known only at run time (`(x[x > 0] * 2).flatten()[1:]`, a column of `torch.where(m)` made a
new tensor) and of eager's views that jitcore computes (view_as_real, real, imag, conj, mH, unfold), answered as eager
(jitcore/frontend/alignment.py) over call sequences in every cache mode: outputs, gradients and arguments after the
call against eager. A residue that depends on the run-time count is specialised (guarded, or checked when the program
runs); what is not known (the layout of nonzero's result) stays refused.
"""
from __future__ import annotations

import pytest
import torch

from jitcore.errors import UnsupportedError
from tests.call_sequences import check_calls
from tests.fuzz import CACHE_MODES
from tests.fuzz_templates import _Cube

MODES = list(CACHE_MODES)


def _masked(pos: int, n: int = 12, requires_grad=True):
    """A (3, 4) tensor with `pos` positive entries."""
    x = -torch.rand(n) - 0.1
    x[torch.randperm(n)[:pos]] *= -1
    return x.view(3, n // 3).requires_grad_(requires_grad)


class _Tail(torch.autograd.Function):
    """A user's Function whose result is a view into memory of its own, one element in."""

    @staticmethod
    def forward(ctx, x):
        return (x.flatten() * 2)[1:]

    @staticmethod
    def backward(ctx, g):
        return None  # (applied to a tensor without grad)


RUN_TIME = {  # name -> fn(x): a residue of a view into a tensor with run-time sizes
    "tail_of_product": lambda x: (x[x > 0] * 2).flatten()[1:],
    "tail_of_selection": lambda x: x[x > 0][2:],
    "column_zero_of_where": lambda x: torch.where(x > 0)[0].float()[1:],
    "row_of_masked_rows": lambda x: (x[x.sum(1) > -10] + 1)[1],
    "masked_select_tail": lambda x: torch.masked_select(x, x < 0).exp()[3:],
    "users_function_of_selection": lambda x: _Cube.apply(x[x > 0]),
    "users_function_of_selection_tail": lambda x: _Cube.apply(x[x > 0])[1:],
    "users_function_view_of_its_own": lambda x: _Tail.apply(x[x > 0].detach()),
    "multi_dot_vector": lambda x: torch.linalg.multi_dot([x.t(), x, x[0]])[1:],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(RUN_TIME))
def test_views_into_run_time_sized_tensors(name, mode):
    make = RUN_TIME[name]

    def fn(x):
        v = make(x)
        r = v.data_ptr() % 64
        out = x * (r + 1)
        return out + 1 if v.data_ptr() & 15 else out - 1

    # counts 0 and 1 give views without elements (data_ptr() 0 in eager), others 4 bytes (or a row) in
    calls = [(_masked(p),) for p in (5, 0, 1, 7, 5, 12, 2)]
    check_calls(fn, calls, mode)


def test_a_column_of_nonzero_stays_refused():
    """torch.where(m)[1] starts u0 elements into nonzero's (column-major) result: not known here (it was answered as
    offset 0 before: eager's residue was 8 for an odd count)."""
    import jitcore

    def fn(x):
        return x * (torch.where(x > 0)[1].data_ptr() % 16)

    with pytest.raises(UnsupportedError, match="layout is not known"):
        jitcore.jit(fn)(torch.tensor([[1.0, -1, 1], [1, -1, -1]]))


def _shifted_complex(elems: int, requires_grad=False):
    z = torch.randn(12 + elems, dtype=torch.complex64)[elems:].view(4, 3)
    return z.requires_grad_(requires_grad) if requires_grad else z


COMPLEX = {  # name -> fn(z): a view eager makes of a complex tensor (or of a tensor made from it)
    "view_as_real": lambda z: torch.view_as_real(z),
    "view_as_real_tail": lambda z: torch.view_as_real(z[1:]).flatten(-2).t(),
    "view_as_real_of_product": lambda z: torch.view_as_real(z * 2).flatten()[3:],
    "real": lambda z: z.real[1:],
    "imag": lambda z: z.imag,
    "imag_of_product": lambda z: (z * 2).imag[1],
    "conj": lambda z: z.conj()[1],
    "mH": lambda z: z.mH[1],
    "unfold": lambda z: torch.view_as_real(z).unfold(0, 2, 1)[1],
    "view_as_complex": lambda z: torch.view_as_complex(torch.view_as_real(z)[1:]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(COMPLEX))
def test_complex_views(name, mode):
    make = COMPLEX[name]

    def fn(z, w):
        v = make(z)
        k = v.data_ptr() % 32
        return (z * k).abs() + w if v.data_ptr() % 16 else w * 2

    w = torch.randn(4, 3, requires_grad=True)
    calls = [(_shifted_complex(e), w) for e in (0, 1, 3, 0, 2)]
    check_calls(fn, calls, mode)


def test_complex_view_with_inductor():
    from executors import inductor_ex, torch_ex

    def fn(z, w):
        v = torch.view_as_real(z).flatten()[1:]
        return (w * (v.data_ptr() % 16 + 1)).sin()

    w = torch.randn(4, 3, requires_grad=True)
    check_calls(fn, [(_shifted_complex(e), w) for e in (0, 1, 0, 2)], "symbolic values",
                executors=[inductor_ex, torch_ex], misses=3)
