"""Fuzzer class `runtime_size_function` (tests/fuzz_class_runtimefunction.py; issue 38 item 8): a size known only at
run time (the count of a selection) that a pass asks about after a user's autograd.Function, whose effect a failed
run-time check could not take back (functionalization asks about the count at `_Cube.apply(s)`; a branch on a count
made of random draws, which no prologue can compute). The check goes before the Function's line where what it reads
is made there (jitcore/ops/size_checks.py check); it was refused. Call sequences in every cache mode against eager:
outputs, gradients, arguments after the call, with counts that change per call.
"""
from __future__ import annotations

import pytest
import torch

from tests.call_sequences import check_calls
from tests.fuzz import CACHE_MODES
from tests.fuzz_templates import _Cube, _Ste

MODES = list(CACHE_MODES)


def _function_of_selection(x):
    s = x[x > 0]
    c = _Cube.apply(s)
    y = x * 1
    y.add_(1)  # (a write: functionalization runs, and asks about the count at _Cube.apply)
    return c, y


def _branch_after_function(x):
    y = x * 1
    y.add_(1)
    s = y[y > 1.5]
    c = _Ste.apply(s)
    if c.shape[0] > 2:
        return c.sum() + y
    return y * 2


def _loop_after_function(x):  # (fuzz seed 798's shape)
    s = x[x > 0]
    if s.shape[0] // x.shape[1] == x.shape[1]:
        t = x.flatten()[:min(s.shape[0], x.shape[1])] * 2
    else:
        t = x.flatten()[:x.shape[1]] + 1
    c = _Cube.apply(s)
    t = t.clone()
    for i in range(1, t.shape[0]):
        t.narrow(0, i, 1).div_(2)
    return s, c, t


def _after_function(x):
    a = _Ste.apply(x)
    s = torch.masked_select(x, x < 0)
    t = s.shape[0]
    n = min(t, x.shape[0])
    return a.tanh(), _Cube.apply(x.flatten()[:n] * 2)


def _masked(pos: int):
    x = -torch.rand(8) - 0.1
    x[torch.randperm(8)[:pos]] *= -1
    return x.view(4, 2).requires_grad_(True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [_function_of_selection, _branch_after_function, _loop_after_function],
                         ids=lambda f: f.__name__)
def test_run_time_checks_before_a_users_function(fn, mode):
    check_calls(fn, [(_masked(p),) for p in (2, 3, 0, 2, 8, 5, 3)], mode)


def test_a_count_made_after_the_function_stays_refused():
    """The count is made after _Ste.apply and asked about by functionalization (no data guard after tracing): no check
    can go before the Function's line, so the call is refused, naming it (fuzz seed 1405's shape)."""
    import jitcore
    from jitcore.errors import DataDependentError

    with pytest.raises(DataDependentError, match="after _Ste_apply"):
        jitcore.jit(_after_function)(_masked(3))
