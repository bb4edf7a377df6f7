"""Random ops given an explicit torch.Generator (generator=g), and the generator's methods inside a jitted function,
against eager: outputs and the generator's state after each call, over call sequences where the caller reseeds g or
passes another generator object, with gradients through a draw, in all three cache modes, with the torch executor and
with Inductor before it; the global generator is left alone. These were refused before ("an explicit generator= is
not supported"), and `x + g.initial_seed()` baked the first call's seed (silently stale after g.manual_seed(5)).
"""
from __future__ import annotations

import random

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES

DRAWS = {
    "rand": lambda x, g: x + torch.rand(3, generator=g),
    "randn": lambda x, g: x + torch.randn(3, generator=g),
    "randint": lambda x, g: x + torch.randint(0, 10, (3,), generator=g),
    "normal float": lambda x, g: x + torch.normal(0.0, 2.0, (3,), generator=g),
    "normal tensor": lambda x, g: torch.normal(x, x.abs() + 1, generator=g),
    "bernoulli": lambda x, g: torch.bernoulli(torch.full_like(x, 0.3), generator=g) * x,
    "bernoulli p": lambda x, g: torch.bernoulli(x, 0.4, generator=g),
    "uniform_": lambda x, g: torch.empty_like(x).uniform_(-1, 1, generator=g) + x,
    "normal_": lambda x, g: torch.empty_like(x).normal_(generator=g) + x,
    "random_": lambda x, g: torch.empty_like(x).random_(0, 5, generator=g) + x,
    "bernoulli_": lambda x, g: torch.empty_like(x).bernoulli_(0.5, generator=g) + x,
    "exponential_": lambda x, g: torch.empty_like(x).exponential_(generator=g) + x,
    "multinomial": lambda x, g: torch.multinomial(x.abs() + 0.1, 2, generator=g).float(),
    "randperm": lambda x, g: torch.randperm(3, generator=g) + x,
    "dropout mask": lambda x, g: x * (torch.rand(x.shape, generator=g) > 0.5) * 2.0,
    "global and g": lambda x, g: x + torch.rand(3) + torch.rand(3, generator=g),
    "manual_seed inside": lambda x, g: x + g.manual_seed(11).initial_seed() + torch.rand(3, generator=g),
    "initial_seed": lambda x, g: x + g.initial_seed(),
    "get_state": lambda x, g: x + torch.rand(3, generator=g) + g.get_state().float().sum(),
    "set_state": lambda x, g: _set_state(x, g),
    "generator made inside": lambda x, g: x + torch.rand(3, generator=torch.Generator().manual_seed(5)),
}


def _set_state(x, g):
    saved = g.get_state()
    a = torch.rand(3, generator=g)
    g.set_state(saved)
    return x + a + torch.rand(3, generator=g)


def _executors(name):
    if name == "torch":
        return ["torch"]
    pytest.importorskip("torch._inductor")
    return ["inductor", "torch"]


def _check_sequence(f, mode, executors, rng: random.Random, calls=5, requires_grad=False):
    jf = jitcore.jit(f, cache=mode, executors=executors)
    mine, theirs = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(calls):
        change = rng.choice(["none", "reseed", "other generator"]) if i else "none"
        if change == "reseed":
            seed = rng.randrange(100)
            mine.manual_seed(seed)
            theirs.manual_seed(seed)
        elif change == "other generator":
            seed = rng.randrange(100)
            mine, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        x = torch.rand(3, requires_grad=requires_grad)
        x2 = x.detach().clone().requires_grad_(requires_grad)
        torch.manual_seed(i)
        out = jf(x, mine)
        global_after = torch.get_rng_state()
        torch.manual_seed(i)
        expected = f(x2, theirs)
        assert torch.equal(global_after, torch.get_rng_state()), f"call {i}: the global generator differs"
        torch.testing.assert_close(out, expected, msg=lambda m, i=i, c=change: f"call {i} ({c}): {m}")
        assert torch.equal(mine.get_state(), theirs.get_state()), f"call {i} ({change}): generator state differs"
        if requires_grad:
            out.sum().backward()
            expected.sum().backward()
            torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("executors", ["torch", "inductor"])
@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(DRAWS))
def test_draws_with_explicit_generator(name, mode, executors):
    _check_sequence(DRAWS[name], mode, _executors(executors), random.Random(name))


@pytest.mark.parametrize("executors", ["torch", "inductor"])
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_dropout_like_mask_gradients(mode, executors):
    def f(x, g):
        mask = torch.rand(x.shape, generator=g) > 0.3
        return (x.sin() * mask / 0.7).exp()

    _check_sequence(f, mode, _executors(executors), random.Random(0), requires_grad=True)


@pytest.mark.parametrize("seed", range(12))
def test_generated_programs_with_generators(seed):
    """Random programs mixing draws from g, from the global generator, and g's methods, over random call sequences."""
    rng = random.Random(seed)
    names = rng.sample(sorted(n for n in DRAWS if n not in ("multinomial",)), 3)

    def f(x, g):
        for n in names:
            x = DRAWS[n](x, g)[:3].float()
        return x

    _check_sequence(f, CACHE_MODES[seed % 3], _executors("torch" if seed % 2 else "inductor"), rng)


def test_generator_global_read_per_call():
    g = torch.Generator().manual_seed(3)

    def f(x):
        return x + g.initial_seed() + torch.rand(2, generator=g)

    for mode in CACHE_MODES:
        jf = jitcore.jit(f, cache=mode)
        for seed in (3, 5, 5, 9):
            g.manual_seed(seed)
            out = jf(torch.zeros(2))
            g.manual_seed(seed)
            torch.testing.assert_close(out, f(torch.zeros(2)))


def test_generator_unsupported_method_and_control_flow():
    def f(x, g):
        return x + (1 if g.seed() > 0 else 2)

    with pytest.raises(UnsupportedError, match=r"generator\.seed"):
        jitcore.jit(f)(torch.zeros(2), torch.Generator())
    with pytest.raises(AttributeError, match="not supported inside a jitted function"):
        jitcore.jit(lambda x, g: x + g.clone_state().initial_seed())(torch.zeros(2), torch.Generator())
