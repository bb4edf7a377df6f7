"""`range(n)` of a symbolic size (jitcore/ir/ranges.py): tensors made from it keep n symbolic.

Each creation form (torch.tensor / torch.as_tensor / the legacy constructors of a range or of list(range(...)), with
and without dtype= and device=) must equal eager on every call (values, dtype, device, requires_grad, gradients) and
compile once under cache="symbolic values" for every size; in the other cache modes it recompiles per size, never
answers wrongly. What else Python does with a range (iterate, index, `in`, reversed, sum, mutate list(range(n))) may
pin its size: correct on every call, one compile per size, the predicate named in cache_miss_reasons.
"""
from __future__ import annotations

import heapq

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore
from jitcore.guards.cache import CACHE_MODES

SIZES = (2, 3, 5, 8)


def _one(x):
    return (x,)


def _two(x):
    return x, torch.randn(x.shape[0] + 1)


# name -> (fn, args(x) -> arguments): every one a tensor made from a range whose bounds are sizes of x (or of y)
CREATIONS = {
    "tensor": (lambda x: torch.tensor(range(x.shape[0])), _one),
    "tensor_list": (lambda x: torch.tensor(list(range(x.shape[0]))), _one),
    "tensor_data_kw": (lambda x: torch.tensor(data=list(range(x.shape[0])), dtype=torch.int32), _one),
    "as_tensor_start_stop_step": (lambda x: torch.as_tensor(range(1, x.shape[0], 2)), _one),
    "as_tensor_list": (lambda x: torch.as_tensor(list(range(0, x.shape[0] * 2, 3)), dtype=torch.float64), _one),
    "negative_step": (lambda x: torch.tensor(range(x.shape[0], 0, -2)), _one),
    "two_sizes": (lambda x, y: torch.tensor(range(x.shape[0], y.shape[0] + x.shape[0])), _two),
    "dtype_float": (lambda x: torch.tensor(range(x.shape[0]), dtype=torch.float32), _one),
    "dtype_bool": (lambda x: torch.tensor(range(x.shape[0] - 1), dtype=torch.bool), _one),
    "device": (lambda x: torch.tensor(range(x.shape[0]), dtype=torch.int16, device=x.device), _one),
    "requires_grad": (lambda x: torch.tensor(range(x.shape[0]), dtype=x.dtype, requires_grad=True), _one),
    "LongTensor": (lambda x: torch.LongTensor(range(x.shape[0])), _one),
    "Tensor": (lambda x: torch.Tensor(range(1, x.shape[0])), _one),
    "FloatTensor_list": (lambda x: torch.FloatTensor(list(range(x.shape[0]))), _one),
    "new_tensor": (lambda x: x.new_tensor(range(x.shape[0])), _one),
    "arange_indexed": (lambda x: torch.arange(x.shape[0])[torch.tensor(range(x.shape[0]))], _one),
    "plus_input": (lambda x: x + torch.tensor(range(x.shape[0])), _one),
    "len": (lambda x: x.new_zeros(len(range(1, x.shape[0], 3)), len(list(range(x.shape[0])))), _one),
}


def _same(got, want, what):
    if type(want) in (tuple, list) and any(isinstance(w, torch.Tensor) for w in want):
        assert type(got) is type(want) and len(got) == len(want), what
        for g, w in zip(got, want):
            _same(g, w, what)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), what
        assert (got.dtype, got.device, got.shape, got.requires_grad) == \
            (want.dtype, want.device, want.shape, want.requires_grad), what
        assert torch.equal(got.detach(), want.detach()), what
    else:
        assert type(got) is type(want) and got == want, what


def _run(fn, make, sizes, cache):
    jf = jitcore.jit(fn, cache=cache)
    for n in sizes:
        args = make(torch.randn(n))
        _same(jf(*args), fn(*args), (n, cache))
    return jf


def _expected_misses(sizes, cache):
    return {"symbolic values": 1, "constant values": len(set(sizes)), "no caching": len(sizes)}[cache]


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", list(CREATIONS))
def test_creation_from_a_range_of_sizes(name, cache):
    fn, make = CREATIONS[name]
    jf = _run(fn, make, SIZES, cache)
    assert jitcore.cache_misses(jf) == _expected_misses(SIZES, cache), jitcore.cache_miss_reasons(jf)
    args = make(torch.randn(4))
    assert jf(*args) is not jf(*args)  # a new tensor on every call, as eager makes


@pytest.mark.parametrize("name", ["tensor", "tensor_list", "as_tensor_start_stop_step", "two_sizes", "Tensor"])
@settings(max_examples=5, deadline=None)
@given(sizes=st.lists(st.integers(2, 40), min_size=2, max_size=5))
def test_creation_one_compile_for_any_sizes(name, sizes):
    fn, make = CREATIONS[name]
    jf = _run(fn, make, sizes, "symbolic values")
    assert jitcore.cache_misses(jf) == 1, (sizes, jitcore.cache_miss_reasons(jf))


def test_the_range_prints_symbolic_and_guards_nothing():
    jf = jitcore.jit(lambda x: torch.tensor(list(range(x.shape[0]))) + torch.as_tensor(range(1, x.shape[0] + 1)),
                     cache="symbolic values")
    jf(torch.randn(6))
    text = str(jitcore.last_traces(jf)[0])
    assert "ltorch.tensor(range(0, i0, 1))" in text and "prims.iota(i0, start=0, step=1" in text, text
    assert " == " not in str(jitcore.last_prologue_traces(jf)[-1])  # no size pinned


# -- gradients through indices made from a range ------------------------------------------------------------------
GRADS = {
    "gather": lambda x: (x[torch.tensor(range(x.shape[0]))] * 2).sum(),
    "reverse_rows": lambda x: (x[torch.tensor(range(x.shape[0] - 1, -1, -1))] * torch.randn(1).abs()).sum(),
    "every_other": lambda x: x.index_select(0, torch.as_tensor(range(0, x.shape[0], 2))).pow(2).sum(),
    "weights": lambda x: (x * torch.tensor(list(range(x.shape[0])), dtype=x.dtype)[:, None]).sum(),
}


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", list(GRADS))
def test_gradients_through_range_indices(name, cache):
    fn = GRADS[name]
    jf = jitcore.jit(fn, cache=cache)
    for n in SIZES:
        x = torch.randn(n, 3)
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        torch.manual_seed(n)
        got = jf(xj)
        torch.manual_seed(n)
        want = fn(xe)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xj.grad, xe.grad)
    assert jitcore.cache_misses(jf) == _expected_misses(SIZES, cache), jitcore.cache_miss_reasons(jf)


# -- uses that need the values: correct, one compile per size, the predicate named -----------------------------------
PINNING = {
    "for_loop": lambda x: sum(x[i] * i for i in range(x.shape[0])),
    "for_loop_list": lambda x: torch.stack([x[i] for i in list(range(x.shape[0]))[::-1]]),
    "index": lambda x: x * range(2, x.shape[0] + 2)[-1],
    "slice": lambda x: torch.tensor(range(x.shape[0])[1:]),
    "contains": lambda x: x * (4 in range(x.shape[0])),
    "reversed": lambda x: torch.tensor(list(reversed(range(x.shape[0])))),
    "sum": lambda x: x * sum(range(x.shape[0])),
    "tuple": lambda x: torch.tensor(tuple(range(x.shape[0]))),
    "list_append": lambda x: (lambda idx: (idx.append(0), torch.tensor(idx))[1])(list(range(x.shape[0]))),
    "list_item_write": lambda x: (lambda idx: (idx.__setitem__(0, 7), torch.tensor(idx))[1])(list(range(x.shape[0]))),
    "list_concat": lambda x: torch.tensor([9] + list(range(x.shape[0]))),
    # native code that writes the list's items directly (no Python method of it runs): pinned when handed over
    "native_writer": lambda x: (lambda idx: (heapq.heappush(idx, -1), torch.tensor(idx))[1])(list(range(x.shape[0]))),
    "nested_lists": lambda x: torch.tensor([list(range(x.shape[0])), list(range(x.shape[0]))]),
    "repr": lambda x: (x, repr(range(x.shape[0])), str(list(range(x.shape[0])))),
    "returned_list": lambda x: (x + 1, list(range(x.shape[0]))),
}


@pytest.mark.parametrize("name", list(PINNING))
def test_uses_that_need_the_values_recompile_per_size(name):
    fn = PINNING[name]
    sizes = (2, 3, 5, 3, 8)
    jf = _run(fn, _one, sizes, "symbolic values")
    reasons = jitcore.cache_miss_reasons(jf)
    assert jitcore.cache_misses(jf) == len(set(sizes)), reasons
    assert all("predicate" in r and "i0" in r and " == " in r for r in reasons[1:]), reasons


def test_a_list_written_after_the_tensor_was_made():
    """torch.tensor(l) holds the range's values; the list, written afterwards, holds eager's contents."""
    def f(x):
        idx = list(range(x.shape[0]))
        t = torch.tensor(idx)
        idx.append(-1)
        return t, idx

    jf = _run(f, _one, SIZES, "symbolic values")
    assert jitcore.cache_misses(jf) == len(SIZES)  # the list escapes: its values are this size's


def test_a_returned_list_is_a_new_list_on_every_call():
    jf = jitcore.jit(lambda x: (x, list(range(x.shape[0]))), cache="symbolic values")
    x = torch.randn(3)
    first = jf(x)[1]
    first.append(99)
    second = jf(x)[1]
    assert type(second) is list and second == [0, 1, 2]


def test_a_returned_or_stored_range_is_the_call_s_range():
    class Box:
        pass

    def f(x, box):
        box.r = range(1, x.shape[0])
        return x + 1, range(x.shape[0])

    jf = jitcore.jit(f, cache="symbolic values")
    for n in SIZES:
        box = Box()
        out = jf(torch.randn(n), box)[1]
        assert type(out) is range and out == range(n) and box.r == range(1, n)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_the_range_is_a_range_to_the_program(cache):
    def f(x):
        r, idx = range(x.shape[0]), list(range(x.shape[0]))
        flags = [isinstance(r, range), type(r) is range, r.__class__ is range, type(idx) is list,
                 isinstance(idx, list), idx.__class__ is list, r.start == 0, r.step == 1, bool(r)]
        return torch.tensor(flags) & (x.shape[0] == r.stop)

    jf = _run(f, _one, SIZES, cache)
    assert jitcore.cache_misses(jf) == _expected_misses(SIZES, cache), jitcore.cache_miss_reasons(jf)


# -- where eager's answer depends on more than the size --------------------------------------------------------------
def test_an_empty_range_gives_eager_s_empty_float_tensor():
    """torch.tensor of an empty range is float32 in eager: emptiness is a predicate, not an assumption."""
    fn = lambda x: torch.tensor(range(x.shape[0] - 2))  # noqa: E731
    jf = _run(fn, _one, (2, 3, 4, 2, 5), "symbolic values")
    reasons = jitcore.cache_miss_reasons(jf)
    assert jitcore.cache_misses(jf) == 2 and "i0 - 2" in reasons[1], reasons


def test_a_narrow_dtype_refuses_overflow_as_eager_does():
    fn = lambda x: torch.tensor(range(x.shape[0]), dtype=torch.uint8)  # noqa: E731
    jf = _run(fn, _one, (2, 200, 256), "symbolic values")
    assert jitcore.cache_misses(jf) == 1
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8 without overflow"):
        fn(torch.randn(257))
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8 without overflow"):
        jf(torch.randn(257))
    assert "<= 255" in jitcore.cache_miss_reasons(jf)[-1]


def test_a_symbolic_step():
    fn = lambda x, s: torch.tensor(range(0, x.shape[0], s))  # noqa: E731
    jf = jitcore.jit(fn, cache="symbolic values")
    for n, s in ((5, 2), (9, 3), (4, 1), (12, 5)):
        x = torch.randn(n)
        _same(jf(x, s), fn(x, s), (n, s))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    with pytest.raises(ValueError, match="must not be zero"):
        jf(torch.randn(3), 0)


class _Positions(torch.nn.Module):
    """Position ids made from range(seq_len) in a module's forward (a module reads containers from outside: its
    submodules and a config dict, which the frontend's calls go through too)."""

    def __init__(self):
        super().__init__()
        self.embed, self.cfg = torch.nn.Embedding(64, 4), {"offset": 1}

    def forward(self, x):
        pos = torch.tensor(list(range(self.cfg["offset"], x.shape[1] + self.cfg["offset"])), device=x.device)
        return x + self.embed(pos)[None]


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_positions_in_a_module(cache):
    m = _Positions()
    jm = jitcore.jit(m, cache=cache)
    for n in SIZES:
        x = torch.randn(2, n, 4, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        got, want = jm(x), m(xe)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        want.sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
        for g, p in zip(grads, m.parameters()):
            torch.testing.assert_close(g, p.grad)
        m.zero_grad()
    assert jitcore.cache_misses(jm) == _expected_misses(SIZES, cache), jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_legacy_constructor_of_sizes_is_a_new_tensor_every_call(cache):
    """torch.Tensor(n, 2) / torch.LongTensor(torch.Size(...)) are empty tensors of those sizes, made on every call
    (they ran while tracing: one tensor that every call returned, or a failure once the program wrote into it)."""
    def f(x):
        buf = torch.Tensor(x.shape[0], 2)
        buf.fill_(1.0)
        buf[0] = x.sum()
        ids = torch.LongTensor(torch.Size([3]))
        ids.fill_(2)
        return buf, ids, torch.Tensor().numel()

    jf = jitcore.jit(f, cache=cache)
    outs = []
    for n, v in [(3, 1.0), (3, 2.0), (5, 1.0)]:
        x = torch.full((n,), v)
        got, want = jf(x), f(x)
        torch.testing.assert_close(got, want)
        outs.append(got[0])
    assert outs[0] is not outs[1] and outs[0][0, 0] == 3.0


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_len_of_a_tensor_is_its_symbolic_first_size(cache):
    """len(x) is x.shape[0]: under symbolic values no predicate (one compile for every batch size) as long as it is
    used as a size; a loop over range(len(x)) still compiles per size, naming the predicate."""
    def sized(x):
        n = len(x)
        return x * n + torch.tensor(range(len(x)))[:, None], torch.zeros(len(x), 2)

    def looped(x):
        total = x[0] * 0
        for i in range(len(x)):
            total = total + x[i] * i
        return total

    for fn, sizes_once in ((sized, True), (looped, False)):
        jf = jitcore.jit(fn, cache=cache)
        for b in (2, 3, 5):
            x = torch.randn(b, 4)
            torch.testing.assert_close(jf(x), fn(x))
        if cache == "symbolic values":
            assert jitcore.cache_misses(jf) == (1 if sizes_once else 3), jitcore.cache_miss_reasons(jf)
            if not sizes_once:
                assert "i0 ==" in jitcore.cache_miss_reasons(jf)[1]
    with pytest.raises(TypeError, match="0-d"):
        jitcore.jit(lambda x: len(x), cache=cache)(torch.tensor(1.0))
