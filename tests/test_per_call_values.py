"""Values that change on every call (Python's random, numpy.random, clocks) and print(): a jitted function draws,
prints and refuses exactly as eager does, call after call, in every cache mode. Torch is the oracle: the same
seeded sequence of calls run eagerly and jitted gives the same results and leaves the generators in the same state.
"""
from __future__ import annotations

import inspect
import os
import random
import time
import uuid

import numpy as np
import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError

MODES = ("constant values", "symbolic values", "no caching")
_RNG = random.Random(7)  # a user's own generator, read as a global
_NP_RNG = np.random.default_rng(3)

# name -> a Python number drawn per call (only used in tensor math, as the function's result, or not at all)
SOURCES = {
    "random": lambda: random.random(),
    "uniform": lambda: random.uniform(-2.0, 3.0),
    "randint": lambda: random.randint(1, 9),
    "randrange": lambda: random.randrange(2, 50, 3),
    "gauss": lambda: random.gauss(1.0, 2.0),
    "normalvariate": lambda: random.normalvariate(0.0, 1.0),
    "expovariate": lambda: random.expovariate(1.5),
    "getrandbits": lambda: random.getrandbits(12),
    "triangular": lambda: random.triangular(0.0, 1.0, 0.3),
    "own_generator": lambda: _RNG.random(),
    "own_generator_randint": lambda: _RNG.randint(0, 100),
    "np_rand": lambda: np.random.rand(),
    "np_randn": lambda: np.random.randn(),
    "np_randint": lambda: np.random.randint(0, 7),
    "np_normal": lambda: np.random.normal(2.0, 0.5),
    "np_uniform": lambda: np.random.uniform(),
    "np_sample": lambda: np.random.sample(),
    "np_random_sample": lambda: np.random.random_sample(),
    "np_generator": lambda: _NP_RNG.random(),
    "np_generator_integers": lambda: _NP_RNG.integers(0, 10),
}

# name -> a function of (x, draw): where the drawn value goes
USES = {
    "mul": lambda x, draw: x * draw(),
    "add_and_scale": lambda x, draw: (x + draw()) * draw(),
    "output": lambda x, draw: (x.sin(), draw()),
    "unused": lambda x, draw: (draw(), x.cos())[1],
    "arith_then_tensor": lambda x, draw: x - (draw() * 2 + 1) / 3,
    "full": lambda x, draw: torch.full_like(x, 1.0) * draw() + x,
}


def _seed_all(s):
    random.seed(s)
    np.random.seed(s)
    _RNG.seed(s)
    _NP_RNG.bit_generator.state = np.random.default_rng(s).bit_generator.state


def _states():
    return (random.getstate(), repr(np.random.get_state()), _RNG.getstate(), repr(_NP_RNG.bit_generator.state))


def _run_sequence(fn, xs):
    _seed_all(0)
    outs = [fn(x) for x in xs]
    return outs, _states()


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.allclose(a, b, equal_nan=True)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def _inputs(mode):
    if mode == "symbolic values":  # sizes change between calls: the cached entry must keep drawing
        return [torch.randn(3, 4), torch.randn(5, 4), torch.randn(3, 4)]
    return [torch.randn(3, 4)] * 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_draws_match_eager_call_after_call(source, use, mode):
    draw, how = SOURCES[source], USES[use]

    def f(x):
        return how(x, draw)

    xs = _inputs(mode)
    expected, state_eager = _run_sequence(f, xs)
    jf = jitcore.jit(f, cache=mode)
    got, state_jit = _run_sequence(jf, xs)
    for e, g in zip(expected, got):
        assert _same(e, g), (source, use, mode, e, g)
    assert state_jit == state_eager  # the generators advanced exactly as eager's did: tracing drew nothing
    if mode != "no caching":
        assert jitcore.cache_hits(jf) >= 1


@pytest.mark.parametrize("mode", MODES[:2])
def test_order_of_draws_and_gradients(mode):
    def f(x, w):
        a = random.random()
        b = np.random.rand()
        c = random.gauss(0.0, 1.0)
        return ((x * a - b) @ w * c).tanh().sum()

    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    jf = jitcore.jit(f, cache=mode)
    for _ in range(3):
        grads = []
        for fn in (f, jf):
            _seed_all(11)
            out = fn(x, w)
            out.backward()
            grads.append((out.detach(), x.grad.clone(), w.grad.clone(), _states()))
            x.grad = w.grad = None
        assert all(torch.allclose(a, b) for a, b in zip(grads[0][:3], grads[1][:3]))
        assert grads[0][3] == grads[1][3]


@pytest.mark.parametrize("mode", MODES)
def test_seed_inside_the_function_runs_per_call(mode):
    def f(x):
        random.seed(5)
        np.random.seed(6)
        return x * random.random() + np.random.rand()

    jf = jitcore.jit(f, cache=mode)
    x = torch.ones(2)
    for _ in range(3):
        _seed_all(1)
        e = f(x)
        se = _states()
        _seed_all(1)
        assert torch.equal(jf(x), e)
        assert _states() == se


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clock", [time.time, time.perf_counter, time.monotonic, time.perf_counter_ns,
                                   time.time_ns, time.process_time])
def test_clocks_are_read_on_every_call(clock, mode):
    def f(x):
        return x * 0 + (clock() - clock())  # two reads per call, in order: never positive

    def g(x):
        return clock()

    jf, jg = jitcore.jit(f, cache=mode), jitcore.jit(g, cache=mode)
    x = torch.ones(2, dtype=torch.float64)
    readings = []
    for _ in range(3):
        assert (jf(x) <= 0).all()
        before = clock()
        got = jg(x)
        after = clock()
        assert before <= got <= after  # read during this call, not when the function was traced
        readings.append(got)
    assert readings == sorted(readings)


# -- Python control flow on a per-call value: refused at the user's line ------------------------------------------
CONTROL_FLOW = {
    "if": lambda x: x + 1 if random.random() < 0.5 else x,
    "range": lambda x: sum((x for _ in range(random.randint(1, 3))), x),
    "int": lambda x: x * int(random.uniform(1, 4)),
    "index": lambda x: x[: random.randint(1, 2)],
    "fstring": lambda x: (f"{random.random():.3f}", x)[1],
    "str": lambda x: (str(time.time()), x)[1],
    "np_if": lambda x: x if np.random.rand() > 0.5 else -x,
    "clock_loop": lambda x: x * 2 if time.perf_counter() > 0 else x,
    "while": lambda x: _loop(x),
    "bool_op": lambda x: x * (random.random() > 0.5 or 2),
}


def _loop(x):
    while random.random() < 0.9:
        x = x + 1
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_control_flow_on_a_per_call_value_is_refused(name, mode):
    fn = CONTROL_FLOW[name]
    jf = jitcore.jit(fn, cache=mode)
    random.seed(0)
    state = random.getstate()
    with pytest.raises(UnsupportedError) as info:
        jf(torch.randn(3))
    err = info.value
    assert err.kind == "per-call value"
    assert "argument" in err.hint
    assert err.where is not None and os.path.basename(__file__) in err.where
    source_line = inspect.getsource(fn).strip() if name != "while" else "while random.random() < 0.9:"
    assert source_line.split(":", 1)[-1].strip()[:20] in err.where or source_line[:20] in err.where
    assert random.getstate() == state  # nothing was drawn while tracing


@pytest.mark.parametrize("fn", [lambda x: (x, uuid.uuid4()), lambda x: (x, os.urandom(4)),
                                lambda x: (x, random.choice([1, 2])), lambda x: (x, random.sample(range(9), 2)),
                                lambda x: (random.shuffle([1, 2]), x)[1], lambda x: (x, np.random.rand(3)),
                                lambda x: (x, np.random.choice([1, 2])), lambda x: (x, random.getstate()),
                                lambda x: (x, random.randbytes(2))])
def test_per_call_values_that_are_not_numbers_are_refused(fn):
    with pytest.raises(UnsupportedError) as info:
        jitcore.jit(fn)(torch.ones(2))
    assert info.value.kind == "per-call value" and info.value.where is not None


def test_printed_trace_runs_and_draws():
    def f(x):
        return x * random.random()

    jf = jitcore.jit(f)
    jf(torch.ones(2))
    text = str(jitcore.last_traces(jf)[-1])
    assert "_c0()" in text and "random" in text
    random.seed(4)
    expected = f(torch.ones(2))
    random.seed(4)
    assert torch.equal(jitcore.last_traces(jf)[-1].python_callable()(torch.ones(2))[0], expected)


# -- print(): the real values, on every call, in program order ---------------------------------------------------------
PRINTS = {
    "tensor": lambda x: (print(x), x + 1)[1],
    "intermediate": lambda x: _print_between(x),
    "numbers_and_text": lambda x: (print("sum:", x.sum(), 3, 2.5, None, True), x * 2)[1],
    "shape": lambda x: (print(x.shape, x.size(0), x.dtype, x.device), x)[1],
    "containers": lambda x: (print([x, 1], (x.sum(),), {"k": x.max()}), x)[1],
    "sep_end": lambda x: (print(x.sum(), x.mean(), sep=" | ", end=" <\n"), x)[1],
    "random": lambda x: (print("drew", random.random()), x)[1],
    "no_args": lambda x: (print(), x)[1],
    "stderr": lambda x: (print("err", x.sum(), file=__import__("sys").stderr), x)[1],
    "written_later": lambda x: _print_then_write(x),
}


def _print_between(x):
    y = x * 2
    print("before", y)
    z = y.exp()
    print("after", z.sum())
    return z


def _print_then_write(x):
    y = x.clone()
    print(y)
    y.add_(1)
    print(y)
    return y


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(PRINTS))
def test_print_shows_real_values_on_every_call(name, mode, capsys):
    fn = PRINTS[name]
    xs = [torch.arange(4.0), torch.arange(4.0) * 3, torch.arange(4.0) - 1]
    if mode == "symbolic values":
        xs[1] = torch.arange(6.0) * 3
    jf = jitcore.jit(fn, cache=mode)
    capsys.readouterr()
    random.seed(2)
    expected = [fn(x) for x in xs]
    eager = capsys.readouterr()
    random.seed(2)
    got = [jf(x) for x in xs]
    jitted = capsys.readouterr()
    assert jitted.out == eager.out
    assert jitted.err == eager.err
    assert all(torch.equal(e, g) for e, g in zip(expected, got))


@pytest.mark.parametrize("make", [lambda: random.Random(0), lambda: np.random.default_rng(0),
                                  lambda: np.random.RandomState(1)])
def test_making_a_generator_inside_is_refused(make):
    with pytest.raises(UnsupportedError) as info:
        jitcore.jit(lambda x: x * make().random())(torch.ones(2))
    assert "outside" in info.value.hint


def test_print_of_an_object_holding_proxies_is_refused():
    class Box:
        def __init__(self, t):
            self.t = t

    with pytest.raises(UnsupportedError):
        jitcore.jit(lambda x: (print(Box(x)), x)[1])(torch.ones(2))
