"""Random ops that draw "like" a tensor (rand_like, randint_like, dropout) fill eager's
torch.empty_like(input), which keeps a permuted input's strides, in memory order: the values land where eager puts
them only if jitcore draws in the same order. Generated: input layouts x how the like-input is made (the input
itself, an elementwise result, a tensor rewritten by fill_, whose jitcore value is a fresh contiguous one, an input
written through a transposed view, whose jitcore value is a transposed one) x the
random ops (and torch.bernoulli, which eager draws contiguous whatever the layout), compared with eager (values
and the generator's state after the call), in every cache mode.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import jitcore

CACHES = ("constant values", "symbolic values", "no caching")

LAYOUTS = {
    "contiguous": lambda g: torch.randn(3, 4, 5, generator=g),
    "permuted": lambda g: torch.randn(4, 5, 3, generator=g).permute(2, 0, 1),
    "transposed": lambda g: torch.randn(5, 3, generator=g).t(),
    "small_transposed": lambda g: torch.randn(3, 2, generator=g).t(),
}
MAKERS = {
    "input": lambda x: x,
    "exp": lambda x: x.exp(),
    "filled": lambda x: (x * 2).fill_(0.5),
    "relu_twice_filled": lambda x: (x.relu() + x.relu()).fill_(0.25),
    # the input itself, written through a transpose first: eager's x keeps its layout, but jitcore's value of x after
    # functionalization is the transpose of a fresh filled tensor (fuzz seed 100427)
    "written_through_transpose": lambda x: (x.transpose(0, -1).fill_(0.5), x)[1],
}
RANDOM = {
    "rand_like": torch.rand_like,
    "randint_like": lambda t: torch.randint_like(t, 9),
    "bernoulli_p": lambda t: torch.bernoulli(t, 0.3),
    "bernoulli_tensor": lambda t: torch.bernoulli(t.sigmoid()),
    "dropout": lambda t: F.dropout(t, 0.4),
    "randn_like": torch.randn_like,
}


def _check_layouts(f, jf, layouts):
    """jf against eager f on inputs of each layout, one call after another from the same seed: values and the
    generator state after the call."""
    for layout, make in layouts.items():
        x = make(torch.Generator().manual_seed(1))
        torch.manual_seed(0)
        want, want_state = f(x.clone()), torch.get_rng_state()
        torch.manual_seed(0)
        got, got_state = jf(x.clone()), torch.get_rng_state()
        torch.testing.assert_close(got, want, msg=lambda m, layout=layout: f"{layout}: {m}")
        assert torch.equal(got_state, want_state), f"{layout}: generator state after the call differs"


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("maker,op", list(itertools.product(MAKERS, RANDOM)))
def test_random_like_draws_in_eager_memory_order(maker, op, cache):
    def f(x):
        return RANDOM[op](MAKERS[maker](x)) * 3

    jf = jitcore.jit(f, cache=cache)
    _check_layouts(f, jf, LAYOUTS)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("op", list(RANDOM))
def test_random_like_of_a_view_written_with_a_gradient(op, cache):
    """The like-input is a view of an input written (through another view) with a value that needs a gradient:
    functionalization records the random op again on the view's new value, which must draw as it was traced to,
    in the memory order of eager's view (fuzz seed 100799: a transposed input drew in the contiguous order)."""
    def f(w, x):
        rows = x[1:]
        x[::2] = w.sum()
        return RANDOM[op](rows) * 3 + rows

    jf = jitcore.jit(f, cache=cache)
    for layout, make in LAYOUTS.items():
        x = make(torch.Generator().manual_seed(1))
        results = []
        for fn in (f, jf):
            w = torch.randn(2, generator=torch.Generator().manual_seed(2), requires_grad=True)
            torch.manual_seed(0)
            out = fn(w, x.clone())
            state = torch.get_rng_state()
            if op != "bernoulli_p":  # (eager has no derivative for torch.bernoulli(t, p))
                out.sum().backward()
            results.append((out, state, w.grad))
        (want, want_state, want_grad), (got, got_state, got_grad) = results
        torch.testing.assert_close(got, want, msg=lambda m, layout=layout: f"{layout}: {m}")
        assert torch.equal(got_state, want_state), f"{layout}: generator state after the call differs"
        torch.testing.assert_close(got_grad, want_grad, msg=lambda m, layout=layout: f"{layout} grad: {m}")


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("fmt", ["contiguous_format", "channels_last", "preserve_format"])
@pytest.mark.parametrize("op", ["rand_like", "randn_like", "randint_like"])
def test_random_like_with_a_memory_format_draws_in_its_order(op, fmt, cache):
    """memory_format= decides the layout of the tensor eager fills, whatever the input's layout."""
    def f(x):
        like = {"rand_like": torch.rand_like, "randn_like": torch.randn_like,
                "randint_like": lambda t, **k: torch.randint_like(t, 9, **k)}[op]
        return like(x, memory_format=getattr(torch, fmt)) * 3

    jf = jitcore.jit(f, cache=cache)
    layouts = {"contiguous": lambda g: torch.randn(2, 3, 4, 5, generator=g),
               "permuted": lambda g: torch.randn(4, 2, 5, 3, generator=g).permute(1, 3, 0, 2),
               "channels_last": lambda g: torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)}
    _check_layouts(f, jf, layouts)


FILLS = {
    "normal_": lambda t: t.normal_(),
    "uniform_": lambda t: t.uniform_(-1, 2),
    "bernoulli_": lambda t: t.bernoulli_(0.3),
    "exponential_": lambda t: t.exponential_(),
    "cauchy_": lambda t: t.cauchy_(),
    "log_normal_": lambda t: t.log_normal_(),
    "geometric_": lambda t: t.geometric_(0.3),
}
FILLED = {
    "input": lambda x: x,
    "exp": lambda x: x.exp(),
    "rows of it": lambda x: x[1:],
    "transpose of it": lambda x: x.transpose(0, -1),
    "empty_like of a result": lambda x: torch.empty_like(x * 2),  # (laid out as x: fuzz seed 573)
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("maker,op", list(itertools.product(FILLED, FILLS)))
def test_inplace_random_fill_draws_in_eager_memory_order(maker, op, cache):
    """x.normal_() and the other in-place fills visit x's own memory in order (and normal_ draws one by one into a
    non-contiguous x): the values land where eager puts them only if jitcore draws in that order."""
    def f(x):
        return FILLS[op](FILLED[maker](x)) * 3

    jf = jitcore.jit(f, cache=cache)
    _check_layouts(f, jf, LAYOUTS)
