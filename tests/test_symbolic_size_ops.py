"""cache="symbolic values": ops that take sizes, and Python arithmetic on sizes, stay symbolic.

Table-driven: each row is a function of tensors whose sizes are drawn per call (hypothesis, sizes >= 2). The jitted
function must equal eager (values, dtypes, shapes) on every call and compile once, or once per distinct outcome of a
branch Python truly needs (the number of pieces of a split, the length of a list), with that predicate named in
cache_miss_reasons.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore

_MASK = torch.tril(torch.ones(48, 48))


def _one(sizes):
    return 1


def _distinct(key):
    return lambda sizes: len({key(n) for n in sizes})


# name -> (fn, make(n) -> args, expected compiles for the size sequence, predicate named on a recompile, needs iota)
CASES = {
    "expand_as": (lambda x, y: x[:, :1].expand_as(y), lambda n: (torch.randn(3, n), torch.randn(3, n))),
    "expand_sym": (lambda x, y: x.expand(y.shape[0], -1, x.shape[-1]), lambda n: (torch.randn(1, 3, n),
                                                                                   torch.randn(n + 1))),
    "view_neg1": (lambda x: x.view(-1, x.shape[1]), lambda n: (torch.randn(2, n, 3),)),
    "view_prod": (lambda x: x.view(x.shape[0] * x.shape[1]), lambda n: (torch.randn(3, n),)),
    "view_heads": (lambda x: x.view(x.shape[0], x.shape[1], 2, x.shape[2] // 2).transpose(1, 2),
                   lambda n: (torch.randn(2, n, 8),)),
    "reshape_sym": (lambda x: x.reshape(x.shape[1], x.shape[0] * 2, -1), lambda n: (torch.randn(2, n, 4),)),
    "reshape_numel": (lambda x: x.reshape(x.numel() // 2, 2), lambda n: (torch.randn(2, n),)),
    "reshape_prod": (lambda x: x.reshape(math.prod(x.shape)), lambda n: (torch.randn(3, n),)),
    "unflatten": (lambda x: x.unflatten(1, (2, x.shape[1] // 2)), lambda n: (torch.randn(3, 2 * n),)),
    "repeat": (lambda x: x.repeat(1, x.shape[0]), lambda n: (torch.randn(n, 3),)),
    "repeat_list": (lambda x: x.repeat([x.shape[0] // 2, 1]), lambda n: (torch.randn(n, 2),)),
    "split_sizes": (lambda x: torch.split(x, [x.shape[0] - 1, 1]), lambda n: (torch.randn(n, 3),)),
    "chunk2": (lambda x: x.chunk(2), lambda n: (torch.randn(n, 3),)),
    "tensor_split3": (lambda x: torch.tensor_split(x, 3), lambda n: (torch.randn(n, 3),)),
    "tensor_split_idx": (lambda x: torch.tensor_split(x, [1, -(x.shape[0] // 2)]), lambda n: (torch.randn(n, 3),)),
    "slice_half": (lambda x: x[:, : x.shape[1] // 2], lambda n: (torch.randn(3, n),)),
    "slice_last_n": (lambda x, n: x[..., -n:], lambda n: (torch.randn(3, n + 3), n)),
    "slice_neg_start": (lambda x: x[-(x.shape[0] // 2):], lambda n: (torch.randn(n, 2),)),
    "slice_step": (lambda x: x[::2][: x.shape[0] // 3], lambda n: (torch.randn(n, 2),)),
    "index_sym": (lambda x: x[:, x.shape[1] // 2] + x[:, x.shape[1] - 1], lambda n: (torch.randn(2, n),)),
    "narrow": (lambda x: x.narrow(1, 1, x.shape[1] - 1), lambda n: (torch.randn(3, n),)),
    "narrow_sym_start": (lambda x: x.narrow(0, x.shape[0] // 2, x.shape[0] - x.shape[0] // 2),
                         lambda n: (torch.randn(n, 2),)),
    "pad": (lambda x, n: F.pad(x, (n, n // 2)), lambda n: (torch.randn(3, 4), n)),
    "pad_neg": (lambda x: F.pad(x, (-1, x.shape[-1] // 2)), lambda n: (torch.randn(2, n),)),
    "pad_reflect": (lambda x: F.pad(x, (x.shape[-1] // 2, 1), mode="reflect"),
                    lambda n: (torch.randn(1, 2, n + 2),)),  # pads >= 2: a derived size 1 is specialised
    "mask_slice": (lambda x: x.masked_fill(_MASK[: x.shape[1], : x.shape[1]] == 0, float("-inf")).softmax(-1),
                   lambda n: (torch.randn(1, n, n),)),
    # Python arithmetic on sizes
    "max_min": (lambda x, y: x.new_zeros(max(x.shape[0], y.shape[0]) + min(x.shape[0], y.shape[0], 10)),
                lambda n: (torch.randn(n), torch.randn(45 - n))),
    "max_list": (lambda x, y: x[: max([x.shape[0] - y.shape[0], 1])], lambda n: (torch.randn(n), torch.randn(45 - n))),
    "floordiv_mod": (lambda x: x[: x.shape[0] // 3 + x.shape[0] % 3], lambda n: (torch.randn(n),)),
    "divmod": (lambda x: x[: sum(divmod(x.shape[0], 3))], lambda n: (torch.randn(n),)),
    "ceil_div": (lambda x: x[: math.ceil(x.shape[0] / 3)], lambda n: (torch.randn(n),)),
    "floor_div": (lambda x: x[: math.floor(x.shape[0] / 3)], lambda n: (torch.randn(n),)),
    "round_div": (lambda x: x[: round(x.shape[0] / 3)], lambda n: (torch.randn(n),)),
    "int_div": (lambda x: x[: int(x.shape[0] / 2)], lambda n: (torch.randn(n),)),
    "int_pow": (lambda x: x[: int(x.shape[0] ** 0.5)], lambda n: (torch.randn(n),)),
    "float_size": (lambda x: x * float(x.shape[0]), lambda n: (torch.randn(n),)),
    "scale": (lambda x: x / x.shape[-1] ** 0.5, lambda n: (torch.randn(3, n),)),
    "sum_sizes": (lambda x, y: x.new_zeros(sum([x.shape[0], y.shape[0]])), lambda n: (torch.randn(n),
                                                                                      torch.randn(n + 1))),
    # branches Python needs: one compile per outcome, the predicate named
    "split_int": (lambda x: torch.split(x, 2), lambda n: (torch.randn(n, 3),),
                  _distinct(lambda n: -(-n // 2)), "// 2"),
    "chunk3": (lambda x: x.chunk(3, dim=1), lambda n: (torch.randn(2, n),),
               _distinct(lambda n: -(-n // -(-n // 3))), "// 3"),
    "list_times_n": (lambda x: x.new_ones(len([1] * x.shape[0])), lambda n: (torch.randn(n),),
                     _distinct(lambda n: n), "i0 == "),
    # these build index ranges of a symbolic length (prims.iota)
    "interp_size": (lambda x: F.interpolate(x, size=x.shape[-1] * 2), lambda n: (torch.randn(1, 2, n),), _one, None,
                    True),
    "interp_linear": (lambda x: F.interpolate(x, size=x.shape[-1] * 3 - 1, mode="linear"),
                      lambda n: (torch.randn(1, 2, n),), _one, None, True),
    "interp_linear_ac": (lambda x: F.interpolate(x, size=x.shape[-1] + 3, mode="linear", align_corners=True),
                         lambda n: (torch.randn(1, 2, n),), _one, None, True),
    "interp_linear64": (lambda x: F.interpolate(x, size=x.shape[-1] + 3, mode="linear"),
                        lambda n: (torch.randn(1, 2, n, dtype=torch.float64),), _one, None, True),
    "interp_bilinear": (lambda x: F.interpolate(x, size=(x.shape[-2] * 2, x.shape[-1] + 1), mode="bilinear"),
                        lambda n: (torch.randn(1, 2, n, n + 1),), _one, None, True),
    "interp_nearest_exact": (lambda x: F.interpolate(x, size=x.shape[-1] * 2 + 1, mode="nearest-exact"),
                             lambda n: (torch.randn(1, 2, n),), _one, None, True),
    "interp_scale_factor": (lambda x: F.interpolate(x, scale_factor=1.5, mode="linear"),
                            lambda n: (torch.randn(1, 2, n),), _one, None, True),
    "causal_arange": (lambda x: (torch.arange(x.shape[1])[None, :] <= torch.arange(x.shape[1])[:, None]).float()
                      * x.shape[1] ** -0.5 + x, lambda n: (torch.randn(n, n),), _one, None, True),
}


def _row(name):
    fn, make, *rest = CASES[name]
    expected, pred, iota = (rest + [_one, None, False][len(rest):])[:3]
    return fn, make, expected, pred, iota


def _flat(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _check_sequence(name, sizes):
    fn, make, expected, pred, _ = _row(name)
    jf = jitcore.jit(fn, cache="symbolic values")
    for n in sizes:
        args = make(n)
        got, want = _flat(jf(*args)), _flat(fn(*args))
        assert len(got) == len(want), (name, n)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (name, n, g.dtype, w.dtype, g.shape, w.shape)
            assert torch.equal(g, w), (name, n)
    reasons = jitcore.cache_miss_reasons(jf)
    assert jitcore.cache_misses(jf) == expected(sizes), (name, sizes, reasons)
    for reason in reasons[1:]:
        assert pred is not None and pred in reason, (name, sizes, reasons)


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=4, deadline=None)
@given(sizes=st.lists(st.integers(2, 40), min_size=2, max_size=4))
def test_size_op_sequence(name, sizes):
    _check_sequence(name, sizes)


@pytest.mark.parametrize("name", ["split_int", "chunk3", "list_times_n"])
def test_branch_outcomes_recompile_with_the_predicate(name):
    sizes = [4, 5, 9, 12, 13]
    expected, pred = _row(name)[2:4]
    assert pred and expected(sizes) > 1  # the sequence does cross a branch, and its predicate is named
    _check_sequence(name, sizes)


def test_issue_repro_slice_reshape_expand():
    def f(x):
        return x[:, : x.shape[1] // 2].reshape(x.shape[0], -1).expand(2, -1, -1)

    jf = jitcore.jit(f, cache="symbolic values")
    for n in (4, 6, 10, 7):
        x = torch.randn(3, n)
        assert torch.equal(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


@pytest.mark.parametrize("expr, want", [
    (lambda n: math.ceil(n / 3), "= int(-(-f0 // 1))"),
    (lambda n: int(n / 2), "= int(f0)"),
    (lambda n: max(n, 7), "max(i0, 7)"),
])
def test_size_arithmetic_is_recorded_not_specialised(expr, want):
    """A true division of sizes turned back into an int is recorded (no `i0 / 3 == 2.0` predicate)."""
    def f(x):
        return x.new_zeros(expr(x.shape[0]))

    jf = jitcore.jit(f, cache="symbolic values")
    for n in (5, 8, 11):
        x = torch.randn(n)
        assert torch.equal(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    assert want in str(jitcore.last_traces(jf)[0]), str(jitcore.last_traces(jf)[0])
    assert " == " not in str(jitcore.last_prologue_traces(jf)[-1])  # no value of the division pinned


@pytest.mark.parametrize("view", [
    lambda x: x.reshape(-1, 2),
    lambda x: x.chunk(2, 1)[0],
    lambda x: torch.tensor_split(x, 3, 1)[0],
    lambda x: x[:, -(x.shape[1] // 2):],
], ids=["reshape_neg1", "chunk", "tensor_split", "slice"])
def test_repeated_size_op_is_merged_with_its_sizes(view):
    """The same op twice is one line after CSE; the sizes the dropped copy computed read as the kept one's."""
    def f(x):
        return view(x)[None] + view(x)[:, None]

    jf = jitcore.jit(f, cache="symbolic values")
    for n in (8, 10, 14):
        x = torch.randn(3, n)
        assert torch.equal(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


class _CausalBlock(torch.nn.Module):
    """An attention block whose causal mask is built with torch.arange(T) (it recompiled per T on `i1 / 1 == 8.0`)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in self.qkv(x).split(c, dim=-1))
        att = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(k.size(-1)))
        i = torch.arange(t)
        att = att.masked_fill(~(i[None, :] <= i[:, None]), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(F.pad(y, (0, 0, 0, max(0, 16 - t)))[:, :t])


def test_causal_block_compiles_once_with_grads():
    torch.manual_seed(0)
    m = _CausalBlock()
    jm = jitcore.jit(m, cache="symbolic values")
    for t in (5, 8, 11, 3, 20):
        x = torch.randn(2, t, 8, requires_grad=True)
        y = jm(x)
        y.sum().backward()
        got = (x.grad, m.qkv.weight.grad.clone())
        x.grad = None
        m.zero_grad()
        want_y = m(x)
        want_y.sum().backward()
        torch.testing.assert_close(y, want_y)
        torch.testing.assert_close(got[0], x.grad)
        torch.testing.assert_close(got[1], m.qkv.weight.grad)
        m.zero_grad()
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("name", ["slice_half", "index_sym", "chunk2", "tensor_split3", "pad_reflect", "ceil_div",
                                  "view_heads", "interp_linear", "interp_bilinear"])
def test_size_op_gradients(name):
    fn, make, _, _, _ = _row(name)
    jf = jitcore.jit(fn, cache="symbolic values")
    for n in (6, 9, 13):
        args = make(n)
        x = args[0].requires_grad_()
        got = _flat(jf(*args))
        seeds = [torch.randn_like(g) for g in got]
        (gx,) = torch.autograd.grad(got, x, seeds)
        (wx,) = torch.autograd.grad(_flat(fn(*args)), x, seeds)
        torch.testing.assert_close(gx, wx)  # eager's backward kernels sum in their own order
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


def _texts(x):
    n = x.shape[0]
    return (x * 2, str(n), repr(n), f"{n}", f"{n!r}", "%s" % n, "%d" % n, "{}".format(n),  # noqa: UP031, UP032
            str((n, 1)), str([n]), f"{x.shape}", str(x.shape[1:]), {str(x.shape): 1})


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_text_of_a_symbolic_size_is_its_value(cache):
    # str()/repr() of a size in user code is the number's text (under symbolic values it was the symbol's name,
    # 'i0'): the string depends on the value, so the entry is specialized to it
    jfn = jitcore.jit(_texts, cache=cache)
    for rows in (2, 4, 4, 2):
        x = torch.randn(rows, 3)
        got, expected = jfn(x), _texts(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    assert jitcore.cache_misses(jfn) == (4 if cache == "no caching" else 2)


def test_a_size_only_computed_with_keeps_one_entry():
    jfn = jitcore.jit(lambda x: x.view(x.shape[0] * 2, -1) + len(x), cache="symbolic values")
    for rows in (2, 4, 6):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(jfn(x), x.view(rows * 2, -1) + rows)
    assert jitcore.cache_misses(jfn) == 1


@pytest.mark.parametrize("op", ["topk", "unfold"])
def test_symbolic_k_and_window_sizes(op):
    """topk(k) and unfold(size, step) with a symbolic int argument: their metas accepted only Python ints (an error
    where eager works); the bounds are predicates now, checked per call."""
    def f(x, n):
        return x.topk(n, 0).values if op == "topk" else x.unfold(0, n, n)

    jf = jitcore.jit(f, cache="symbolic values")
    for rows, n in [(6, 2), (6, 3), (9, 3), (7, 2), (5, 5)]:
        x = torch.arange(float(rows * 3)).reshape(rows, 3)
        torch.testing.assert_close(jf(x, n), f(x, n))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_with_negative_and_zero_sides_forward_and_backward(mode, cache):
    """F.pad's reflect/replicate/circular with sides that crop (negative), are 0 or pad, passed in as ints, over
    seeded call sequences: values and input gradients equal eager's (negative sides were refused; under symbolic
    values a side of 0 or an empty batch left the forward without a slice length its backward reads)."""
    import random

    r = random.Random(f"{mode}{cache}")
    fn = lambda x, a, b, c, d: torch.nn.functional.pad(x, (a, b, c, d), mode=mode)  # noqa: E731
    jfn = jitcore.jit(fn, cache=cache)
    calls = 0
    while calls < 8:
        pads = tuple(r.choice((-3, -1, 0, 0, 2, 4)) for _ in range(4))
        x = torch.randn(r.choice((0, 1, 2)), 2, 5, 6).requires_grad_()
        cropped = (6 - max(-pads[0], 0) - max(-pads[1], 0), 5 - max(-pads[2], 0) - max(-pads[3], 0))
        if mode == "circular" and (max(pads[:2]) > cropped[0] or max(pads[2:]) > cropped[1]):
            continue  # (wrapping around the cropped part more than once: eager leaves memory unwritten; refused)
        try:
            expected = fn(x, *pads)
        except RuntimeError:
            continue  # (pads eager refuses)
        calls += 1
        got = jfn(x, *pads)
        torch.testing.assert_close(got, expected)
        seed = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(got, x, seed)[0], torch.autograd.grad(expected, x, seed)[0])
