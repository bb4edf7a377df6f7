"""cache="symbolic values": math-module functions of sizes (`1 / math.sqrt(d)`, an attention scale) are recorded
number ops, not specialisations, and so is scaled_dot_product_attention's default scale: an attention whose head
size changes between calls compiles once (issue 16), with eager's outputs and gradients, under the torch executor
and with Inductor fusion. A Python branch on such a value is a predicate over it (named on a recompile).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore
from executors import torch_ex

# name -> fn(x) using a math-module function of a size of x
MATH = {
    "sqrt": lambda x: x * (1 / math.sqrt(x.size(-1))),
    "exp": lambda x: x + math.exp(x.size(-1) / 8),
    "log": lambda x: x - math.log(x.size(-1)),
    "log_base": lambda x: x * math.log(x.size(-1), 2),
    "log2": lambda x: x + math.log2(x.size(0) * x.size(-1)),
    "log10": lambda x: x * math.log10(x.size(-1) + 1),
    "pow": lambda x: x / math.pow(x.size(-1), 0.25),
}


@pytest.mark.parametrize("name", list(MATH))
@settings(max_examples=3, deadline=None)
@given(sizes=st.lists(st.integers(2, 40), min_size=2, max_size=4))
def test_math_of_sizes_compiles_once(name, sizes):
    fn = MATH[name]
    jf = jitcore.jit(fn, cache="symbolic values")
    for n in sizes:
        x = torch.randn(3, n)
        torch.testing.assert_close(jf(x), fn(x), rtol=0, atol=0)  # the same Python function on the same numbers
    assert jitcore.cache_misses(jf) == 1, (name, sizes, jitcore.cache_miss_reasons(jf))
    assert "math." in str(jitcore.last_traces(jf)[0])


def test_branch_on_math_of_a_size_is_a_predicate():
    def f(x):
        return x * 2 if math.sqrt(x.size(-1)) > 3 else x - 1

    jf = jitcore.jit(f, cache="symbolic values")
    for n in (4, 9, 5, 16, 25, 2):
        x = torch.randn(2, n)
        torch.testing.assert_close(jf(x), f(x))
    reasons = jitcore.cache_miss_reasons(jf)
    assert jitcore.cache_misses(jf) == 2, reasons
    assert "math.sqrt(i1)" in reasons[1], reasons


def test_math_of_plain_numbers_is_unchanged():
    def f(x, n):
        return x * math.sqrt(4) + math.log(n)

    jf = jitcore.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x, 7), f(x, 7))


def _attention(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s.softmax(-1) @ v + F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _executors(kind):
    if kind == "torch":
        return [torch_ex]
    return [pytest.importorskip("executors.inductorex").inductor_ex, torch_ex]


@pytest.mark.parametrize("kind", ["torch", "inductor"])
def test_attention_with_varying_head_size_compiles_once(kind):
    """The head size (and batch, heads, length) changes on every call: one compile, no `i3 == 16` in the prologue,
    eager's outputs and gradients."""
    jf = jitcore.jit(_attention, cache="symbolic values", executors=_executors(kind))
    for b, h, t, d in ((2, 2, 8, 16), (3, 2, 5, 8), (2, 3, 12, 32), (2, 2, 6, 12)):
        base = [torch.randn(b, h, t, d) for _ in range(3)]
        outs, grads = [], []
        for fn in (_attention, jf):
            qkv = [a.clone().requires_grad_() for a in base]
            out = fn(*qkv)
            grads.append(torch.autograd.grad(out, qkv, torch.ones_like(out)))
            outs.append(out.detach())
        torch.testing.assert_close(outs[1], outs[0])
        for g, w in zip(grads[1], grads[0]):
            torch.testing.assert_close(g, w)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    prologue = str(jitcore.last_prologue_traces(jf)[-1])
    assert not any(f" == {d}" in prologue for d in (8, 12, 16, 32)), prologue


def test_sdpa_explicit_scale_keeps_its_sign():
    def f(q, k, v, s):
        return F.scaled_dot_product_attention(q, k, v, scale=s)

    jf = jitcore.jit(f, cache="symbolic values")
    for d, s in ((8, 0.5), (12, -0.25), (16, 0.125)):
        qkv = [torch.randn(2, 5, d) for _ in range(3)]
        torch.testing.assert_close(jf(*qkv, s), f(*qkv, s))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
def test_bitwise_operators_of_sizes(mode):
    """`n & 1`, `n | 1`, `n ^ 3`, `n << 1`, `n >> 1`, `~n` of a size: recorded ops under symbolic values (they raised
    TypeError), a branch on them a predicate; compared with eager over sizes of both parities."""
    def f(x):
        n = x.shape[0]
        if n & 1:
            return x * (n >> 1) + (n | 8) - (1 << n)
        return x.reshape(-1)[: (n ^ 3) % n + 1] * (~n)

    jf = jitcore.jit(f, cache=mode)
    for n in (4, 5, 6, 7, 9, 4):
        x = torch.ones(n)
        torch.testing.assert_close(jf(x), f(x))
    if mode == "symbolic values":
        assert jitcore.cache_misses(jf) == 2  # (odd, even)


# The rest of int's and float's API on a number argument or a size (`n.bit_length()`, a next power of two;
# `v.is_integer()`): under symbolic values the proxies had no such attribute (AttributeError where eager answers).
NUMBER_METHODS = {
    "bit_length": lambda x, n, v: x * (1 << (n.bit_length())),
    "size bit_length": lambda x, n, v: x * (1 << (x.shape[0] - 1).bit_length()),
    "bit_count": lambda x, n, v: x * n.bit_count(),
    "int real/imag/conjugate": lambda x, n, v: x * n.real * n.conjugate() + n.imag,
    "numerator/denominator": lambda x, n, v: x * n.numerator / n.denominator,
    "int as_integer_ratio": lambda x, n, v: x * n.as_integer_ratio()[0],
    "to_bytes": lambda x, n, v: x * n.to_bytes(2, "little", signed=True)[0],
    "is_integer": lambda x, n, v: x * 2 if v.is_integer() else x * 3,
    "float real/imag/conjugate": lambda x, n, v: x * v.real * v.conjugate() + v.imag,
    "float as_integer_ratio": lambda x, n, v: x * v.as_integer_ratio()[1],
    "hex": lambda x, n, v: x * len(v.hex()),
}


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("method", sorted(NUMBER_METHODS))
def test_number_methods_answer_as_eager(method, mode):
    fn = NUMBER_METHODS[method]
    jf = jitcore.jit(fn, cache=mode)
    for i, (size, n, v) in enumerate([(3, 5, 1.5), (5, 6, 2.0), (9, 1000, 2.0), (3, 5, 1.5), (4, -3, -0.25)]):
        x = torch.arange(float(size))
        torch.testing.assert_close(jf(x, n, v), fn(x, n, v), msg=lambda m, i=i: f"call {i}: {m}")
