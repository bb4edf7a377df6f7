"""Fuzzer class `foreach_scalar` (tests/fuzz_class_foreachscalar.py; issue 38): torch's `_foreach_*_` functions (no
op of jitcore's: an opaque in-place call over the list) with a Python number argument, which is a FloatProxy or an
IntegerProxy under cache="symbolic values": torch's argument parser takes no proxy for a number, so such a call goes to
the fallbacks itself (jitcore/ops/torch_map.py with_number_proxies); it raised TypeError at tracing. Call sequences in
every cache mode against eager: outputs, gradients, arguments after the call.
"""
from __future__ import annotations

import pytest
import torch

from tests.call_sequences import check_calls
from tests.fuzz import CACHE_MODES

MODES = list(CACHE_MODES)


def _mul(a, b, k):
    ts = [a * 1, b.abs() + 1]
    torch._foreach_mul_(ts, k)
    return ts[0] + ts[1].sum()


def _add_alpha(a, b, k):
    ts = [a * 1, b * 2]
    torch._foreach_add_(ts, [a, b], alpha=k)
    return ts


def _div_arguments(a, b, k):
    with torch.no_grad():
        torch._foreach_div_([a, b], k)
    return a * 2, b


CASES = {"mul": _mul, "add_alpha": _add_alpha, "div_arguments": _div_arguments}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_foreach_with_a_number_argument(name, mode):
    grad = name != "div_arguments"
    calls = [(torch.randn(3, requires_grad=grad), torch.randn(2, 3), k) for k in (0.5, 1.5, 2, 0.5, -3.0)]
    calls.append((torch.randn(4, requires_grad=grad), torch.randn(5), 2.5))
    check_calls(CASES[name], calls, mode)
