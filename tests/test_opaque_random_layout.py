"""Random opaque ops (a user's torch.autograd.Function whose forward draws, torch functions jitcore runs as a whole
such as alpha_dropout) fill tensors in their input's memory order: their values land where eager puts them only if
the input jitcore hands them at run time is laid out as eager's value was. A functional value after a write
(`t.fill_(v)` becomes a fresh contiguous tensor) need not be (fuzz seed 1793: a filled relu of a transposed input
into a Function drawing rand_like). Checked over call sequences of inputs of several layouts in every cache mode,
with gradients, and with Inductor, against eager.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from executors import inductor_ex, torch_ex
from tests.fuzz import CACHE_MODES
from tests.fuzz_templates import _Mask  # (rand_like inside a forward: the fuzzer's template)

LAYOUTS = {  # one call after another, in this order: the cache sees each layout after the others
    "transposed": lambda g: torch.randn(5, 3, generator=g).t(),
    "contiguous": lambda g: torch.randn(3, 5, generator=g),
    "permuted": lambda g: torch.randn(5, 4, 3, generator=g).permute(2, 0, 1)[:, :, :3],
    "transposed_again": lambda g: torch.randn(4, 3, generator=g).t(),
}


def filled(x):  # the seed's program: jitcore's value of t is a fresh full() whatever x's layout
    t = x * 2  # (the seed's x.relu(): eager's autograd refuses a write into relu's saved result)
    t.view(t.shape[0], -1).fill_(1)
    return _Mask.apply(t) * 2


def written_through_transpose(x):  # eager's t keeps x's layout; jitcore's value of t is the transpose of a new one
    t = x * 1
    t.transpose(0, -1).fill_(0.5)
    return _Mask.apply(t) + t


def copied_from_input(x):  # eager's t is contiguous; jitcore's value of t is x's own (a permuted layout)
    t = torch.zeros(x.shape)
    t.copy_(x)
    return _Mask.apply(t)


def alpha_dropout_of_filled(x):  # a torch function run as a whole, its input filled first
    t = (x * 2).fill_(0.5)
    return F.alpha_dropout(t, 0.3, True) + F.feature_alpha_dropout(t.unsqueeze(0), 0.5, True).squeeze(0)


PROGRAMS = [filled, written_through_transpose, copied_from_input, alpha_dropout_of_filled]


def _check_calls(f, jf, grad: bool):
    for i, (layout, make) in enumerate(LAYOUTS.items()):
        xe = make(torch.Generator().manual_seed(i)).requires_grad_(grad)
        xj = xe.detach().clone().requires_grad_(grad) if layout == "contiguous" else \
            torch.empty_strided(xe.shape, xe.stride()).copy_(xe.detach()).requires_grad_(grad)
        assert xj.stride() == xe.stride()
        torch.manual_seed(i)
        want, want_state = f(xe), torch.get_rng_state()
        torch.manual_seed(i)
        got, got_state = jf(xj), torch.get_rng_state()
        torch.testing.assert_close(got, want, msg=lambda m, layout=layout: f"{layout}: {m}")
        assert torch.equal(got_state, want_state), f"{layout}: generator state after the call differs"
        torch.testing.assert_close(xj, xe)
        if grad:
            cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(7))
            (want * cot).sum().backward()
            (got * cot).sum().backward()
            torch.testing.assert_close(xj.grad, xe.grad, msg=lambda m, layout=layout: f"{layout} grad: {m}")


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_random_opaque_op_draws_in_eager_memory_order(f, cache, grad):
    _check_calls(f, jitcore.jit(f, cache=cache), grad)


@pytest.mark.parametrize("f", [filled, alpha_dropout_of_filled], ids=lambda f: f.__name__)
def test_random_opaque_op_with_inductor_regions_around_it(f):
    _check_calls(f, jitcore.jit(f, executors=[inductor_ex, torch_ex]), grad=True)


def test_the_layout_is_guarded():
    """The order laid out is eager's for the traced input's layout: an input of another layout is a cache miss."""
    jf = jitcore.jit(filled)
    x = torch.randn(5, 3).t()
    jf(x)
    jf(x.contiguous())
    assert jitcore.cache_misses(jf) == 2
    assert "prims.laid_out" in str(jitcore.last_traces(jf)[0])
