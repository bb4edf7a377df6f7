"""Layouts and addresses of tensors whose sizes are known only at run time (issue 38): cat and stack lay their result
out contiguously whatever their inputs' layouts (nonzero's column-major result among them) below 4 dims, so its
strides, and as_strided_ over it, are eager's (fuzz seed 13); `data_ptr() % k` of a view that starts where such a
tensor starts (`t[t > 0].unsqueeze(0)`, fuzz seed 52) is a new allocation's, 0. Compared with eager over call
sequences in every cache mode; what stays unknown (a slice into nonzero's result) is refused clearly.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_1C52E7A
from tests.test_inplace_metadata import check


def _args(n, m, seed):
    def make():
        torch.manual_seed(seed)
        return (torch.randn(n, m),)
    return make


CALLS = [_args(4, 3, 0), _args(4, 3, 1), _args(5, 2, 2), _args(3, 3, 3)]


def _cat_of_nonzero(x):
    nz = (x > 0).nonzero()
    both = torch.cat([nz, nz * 2])
    return both.stride(), both.is_contiguous(), torch.stack([nz, nz]).stride(), both * 1


def _as_strided_of_cat(x):
    nz = (x > -10).nonzero()  # (every element: at least 3 rows)
    both = torch.cat([nz, nz * 2]).detach()
    both.as_strided_((2, 2), (1, 1))
    both[0] = 3
    return both * 1


def _data_ptr_of_masked(x):
    t = x[x > -10]
    v = t.unsqueeze(0).t()
    return x * (v.data_ptr() % 16) + (t.data_ptr() % 8 == 0)


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_cat_of_nonzero, _as_strided_of_cat, _data_ptr_of_masked])
def test_against_eager(fn, cache):
    check(fn, CALLS, cache)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_slice_into_runtime_sized_tensor_is_refused(cache):
    """A view that starts inside nonzero's result: its offset depends on the layout, which is not known here."""
    def f(x):
        nz = (x > -10).nonzero()
        return x * (nz[1:].data_ptr() % 16)

    with pytest.raises(UnsupportedError, match="known only at run time"):
        jitcore.jit(f, cache=cache)(torch.randn(3, 4))


@pytest.mark.parametrize("seed", [13, 52])
def test_fuzz_seeds(seed):
    prog = generate(seed, classes=CLASSES_1C52E7A)
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems and report.refused is None, report.text(prog) + f"\nrefused: {report.refused}"
