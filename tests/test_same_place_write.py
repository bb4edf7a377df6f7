"""Fuzzer class `same_place_write` (tests/fuzz_class_samewrite.py; issue 38): a write of a view into itself through an
expand() (`e.unsqueeze(0).expand(2, *e.shape)[0] = e`, `e[:] = e`, `e.copy_(e)` with e an expand of a tensor). Eager's
copy_ leaves out a write whose source is the very view written, so it runs though the view's elements overlap; other
values written there are refused, like eager. Without grad jitcore runs it as eager (transforms/functionalize.py
_same_place); with grad it stays refused (eager's backward through it raises). Call sequences in every cache mode
against eager: outputs, gradients, arguments after the call (values and whether they were written).
"""
from __future__ import annotations

import pytest
import torch

from jitcore.errors import UnsupportedError
from tests.call_sequences import check_calls
from tests.fuzz import CACHE_MODES

MODES = list(CACHE_MODES)


def _into_itself(x):
    t = x.sum(1)
    e = t.unsqueeze(0).expand(2, *t.shape)
    with torch.no_grad():
        e.unsqueeze(0).expand(2, *e.shape)[0] = e
    return t * 2, e + 1


def _slice_of_itself(x):
    t = x * 3
    e = t.detach().unsqueeze(0).expand(3, *t.shape)
    e[:] = e
    return t.relu(), e.sum(0)


def _argument_into_itself(x, w):
    e = x.unsqueeze(0).expand(2, *x.shape)
    e.unsqueeze(0).expand(3, *e.shape)[1].copy_(e)  # (x is written, as eager counts it)
    return x + w


CASES = {"into_itself": _into_itself, "slice_of_itself": _slice_of_itself}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_view_written_into_itself(name, mode):
    calls = [(torch.randn(s, requires_grad=True),) for s in ((3, 4), (5, 2), (3, 4), (4, 4))]
    check_calls(CASES[name], calls, mode)


@pytest.mark.parametrize("mode", MODES)
def test_an_argument_written_into_itself(mode):
    w = torch.randn(4, requires_grad=True)
    check_calls(_argument_into_itself, [(torch.randn(4), w), (torch.randn(4), w), (torch.randn(6), torch.randn(6))],
                mode)


def _other_values(x):
    e = x.sum(1).unsqueeze(0).expand(2, x.shape[1] * 0 + x.shape[0])
    e.unsqueeze(0).expand(2, *e.shape)[0] = e * 1  # (eager: more than one element refers to one place)
    return e


def _with_grad(x):
    t = x.sum(1)
    e = t.unsqueeze(0).expand(2, *t.shape)
    e.unsqueeze(0).expand(2, *e.shape)[0] = e
    return t * 2


@pytest.mark.parametrize("fn", [_other_values, _with_grad])
def test_other_values_and_writes_with_grad_are_refused(fn):
    import jitcore

    x = torch.randn(3, 4, requires_grad=fn is _with_grad)
    if fn is _other_values:
        with pytest.raises(RuntimeError, match="single memory location"):
            fn(x.clone())
    with pytest.raises(UnsupportedError, match="more than one element refers to a single memory location"):
        jitcore.jit(fn)(x)
