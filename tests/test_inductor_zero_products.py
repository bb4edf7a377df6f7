"""Products by an integer zero in a region Inductor compiles: eager's `x * 0` is nan wherever x is inf or nan (a
division by zero before it), and Inductor's joint-graph constant folding replaces `mul(x, 0)` by zeros (fuzz seed
2120: `t7 = t4.select(0, 0) * 0` after `t4 = t3 / x.relu()` gave -2 where eager gives nan). Checked over call
sequences (sizes, grad modes) in every cache mode against eager: values (nan where eager's are), gradients, and an
integer tensor's product, which is 0 either way.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from executors import inductor_ex, torch_ex
from tests.fuzz import CACHE_MODES


def f(x, n):
    t = x.neg() / x.relu()  # inf or nan where x <= 0
    acc = t.select(0, 0) * 0
    for i in range(t.shape[0]):
        acc = acc + t.select(0, i) * i
    return acc, (x * 2) * 0, n * 0 + n


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_products_by_an_integer_zero_keep_eager_nans(cache):
    jf = jitcore.jit(f, cache=cache, executors=[inductor_ex, torch_ex])
    for rows, grad in ((3, True), (3, False), (4, True)):
        g = torch.Generator().manual_seed(rows)
        xe = torch.randn(rows, 5, generator=g)
        xe[0, 0], xe[1, 1] = 0.0, float("inf")
        xe.requires_grad_(grad)
        xj = xe.detach().clone().requires_grad_(grad)
        n = torch.randint(-3, 4, (rows, 5), generator=g)
        want, got = f(xe, n), jf(xj, n.clone())
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w, equal_nan=True)
        assert torch.isnan(want[0]).any()  # (the case: eager's nans)
        if grad:
            cots = torch.randn(5, generator=g), torch.randn(rows, 5, generator=g)
            for outs in (want, got):
                ((outs[0] * cots[0]).nan_to_num(0.0, 0.0, 0.0).sum() + (outs[1] * cots[1]).sum()).backward()
            torch.testing.assert_close(xj.grad, xe.grad, equal_nan=True)
