"""cache="symbolic values" through the creation ops: arange (1, 2 and 3 arguments, int and float), linspace/logspace
(steps=n), zeros/ones/full/empty (*sizes, a tuple, a list, a torch.Size), the _like and new_ forms, eye, tensor of
sizes, and the causal masks models build (`torch.ones(T, T).tril()`, `torch.full((T, T), -inf).triu(1)`). Sizes
drawn from the inputs (and Python int arguments) stay symbolic: one compile serves every size sequence, outputs and
dtypes equal eager's. (Size ops: tests/test_symbolic_size_ops.py.)"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore
from jitcore.errors import MetaError

# fn(x, n): x a [rows, cols] float32 tensor, n a Python int; every size below is valid for rows, cols, n >= 2
CREATION = {
    "arange_end": lambda x, n: torch.arange(x.shape[1]),
    "arange_plus_x": lambda x, n: x + torch.arange(x.shape[1]),
    "arange_start_end": lambda x, n: torch.arange(n, n + x.shape[1]),
    "arange_position_ids": lambda x, n: torch.arange(n, n + x.shape[1], dtype=torch.long).unsqueeze(0),
    "arange_step": lambda x, n: torch.arange(x.shape[0], 3 * x.shape[1] + x.shape[0], n),
    "arange_negative_step": lambda x, n: torch.arange(x.shape[1] * n, 0, -n),
    "arange_float_step": lambda x, n: torch.arange(0, x.shape[1], 0.5),
    "arange_float_start": lambda x, n: torch.arange(0.1, x.shape[1] * 0.3, 0.3),
    "arange_float_end": lambda x, n: torch.arange(x.shape[1] / n),
    "arange_float_dtype": lambda x, n: torch.arange(n, x.shape[1] + n, dtype=torch.float64),
    "linspace": lambda x, n: torch.linspace(0, 1, x.shape[1]),
    "linspace_symbolic_ends": lambda x, n: torch.linspace(-n, x.shape[0], steps=x.shape[1] + 1),
    "linspace_float64": lambda x, n: torch.linspace(-2.5, 3.0, x.shape[1] * n, dtype=torch.float64),
    "logspace": lambda x, n: torch.logspace(0, 2, x.shape[1]),
    "zeros_args": lambda x, n: torch.zeros(x.shape[0], x.shape[1] + n),
    "zeros_torch_size": lambda x, n: torch.zeros(x.shape) + x,
    "ones_tuple_int32": lambda x, n: torch.ones((x.shape[1], x.shape[0]), dtype=torch.int32),
    "ones_size_kw": lambda x, n: torch.ones(size=(x.shape[1], n)),
    "full_list": lambda x, n: torch.full([x.shape[0], n], 2.5),
    "full_symbolic_fill": lambda x, n: torch.full((x.shape[1],), n),
    "full_float_into_int64": lambda x, n: torch.full((x.shape[0],), -x.shape[1] / n, dtype=torch.int64),
    "zeros_requires_grad": lambda x, n: torch.zeros(x.shape[1], n, requires_grad=True) * 2,
    "empty": lambda x, n: torch.empty(x.shape[1], n),
    "empty_torch_size": lambda x, n: torch.empty(x.shape, dtype=torch.float16),
    "zeros_like": lambda x, n: torch.zeros_like(x),
    "ones_like_int64": lambda x, n: torch.ones_like(x, dtype=torch.int64),
    "full_like": lambda x, n: torch.full_like(x, n),
    "empty_like": lambda x, n: torch.empty_like(x, dtype=torch.int32),
    "eye": lambda x, n: torch.eye(x.shape[1]),
    "eye_n_m": lambda x, n: torch.eye(x.shape[0], x.shape[1] + n, dtype=torch.int32),
    "tril_of_ones": lambda x, n: torch.ones(x.shape[1], x.shape[1]).tril(),
    "triu_of_minus_inf": lambda x, n: torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1),
    "causal_mask_fill": lambda x, n: x.masked_fill(torch.ones(x.shape[0], x.shape[1]).tril() == 0, 0.0),
    "new_zeros": lambda x, n: x.new_zeros(x.shape[0], n),
    "new_ones": lambda x, n: x.new_ones((x.shape[1],)),
    "new_full": lambda x, n: x.new_full((x.shape[1], n), 7),
    "new_empty": lambda x, n: x.new_empty((n, x.shape[0])),
    "tensor_of_sizes": lambda x, n: torch.tensor(x.shape) * n,
    "tensor_of_numbers": lambda x, n: torch.tensor([x.shape[1] * 0.5, n]),
}

SIZES = st.tuples(st.integers(2, 9), st.integers(2, 9), st.integers(2, 5))  # rows, cols, n


def _check(name, fn, sizes):
    jf = jitcore.jit(fn, cache="symbolic values")
    for rows, cols, n in sizes:
        x = torch.randn(rows, cols)
        expected, got = fn(x, n), jf(x, n)
        assert got.dtype == expected.dtype, (name, rows, cols, n, got.dtype, expected.dtype)
        if "empty" in name:  # uninitialized values: the shape and dtype are what eager defines
            assert got.shape == expected.shape, (name, rows, cols, n, got.shape, expected.shape)
        else:
            where = f"{name} {(rows, cols, n)}"
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=lambda m, where=where: f"{where}: {m}")
    assert jitcore.cache_misses(jf) == 1, (name, sizes, jitcore.cache_miss_reasons(jf))


@pytest.mark.parametrize("name", sorted(CREATION))
@settings(max_examples=8, deadline=None)
@given(sizes=st.lists(SIZES, min_size=2, max_size=4))
def test_creation_one_compile_for_every_size(name, sizes):
    _check(name, CREATION[name], sizes)


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation_fixed_sequence(name):
    """The same table over a fixed sequence (the sizes grow, shrink and repeat)."""
    _check(name, CREATION[name], [(3, 4, 2), (5, 9, 3), (2, 2, 2), (7, 3, 5), (3, 4, 2)])


def test_reproducer_arange_of_a_size():
    f = lambda x: x + torch.arange(x.shape[1])  # noqa: E731
    jf = jitcore.jit(f, cache="symbolic values")
    for n in (4, 6, 9):
        x = torch.randn(3, n)
        torch.testing.assert_close(jf(x), f(x), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    trace = str(jitcore.last_traces(jf)[-1])
    assert "i64[i1]" in trace, trace  # eager's int64, and the length is the input's size itself


def test_gpt2_position_ids_reach_embedding_as_int64():
    emb = torch.nn.Embedding(64, 8)

    def f(x, past):
        with_dtype = torch.arange(past, past + x.shape[1], dtype=torch.long).unsqueeze(0)
        inferred = torch.arange(past, past + x.shape[1]).unsqueeze(0)
        return emb(with_dtype) + emb(inferred) + x[..., None]

    jf = jitcore.jit(f, cache="symbolic values")
    for past, seq in [(0, 4), (3, 6), (5, 9), (2, 2), (11, 3)]:
        x = torch.randn(1, seq)
        torch.testing.assert_close(jf(x, past), f(x, past), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


@settings(max_examples=30, deadline=None)
@given(start=st.floats(-5, 5), length=st.floats(0, 20), step=st.sampled_from([0.1, 0.3, 0.25, 1.0, 0.7, 2.5]))
def test_arange_float_length_is_eager_ceil(start, length, step):
    """Float arguments: the length ceil((end - start) / step) is a recorded expression, equal to eager's for every
    value (one compile serves all; jf is shared over the examples)."""
    end = start + length
    got, expected = _FLOAT_ARANGE(start, end, step), torch.arange(start, end, step)
    assert got.shape == expected.shape, (start, end, step)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


_FLOAT_ARANGE = jitcore.jit(lambda a, b, s: torch.arange(a, b, s), cache="symbolic values")


def test_arange_float_arguments_one_compile():
    jf = jitcore.jit(lambda a, b, s: torch.arange(a, b, s), cache="symbolic values")
    for a, b, s in [(0.0, 3.0, 0.5), (0.1, 2.2, 0.3), (-1.5, 4.0, 0.25), (2.0, 2.0, 1.0), (0.0, 1.0, 0.1)]:
        torch.testing.assert_close(jf(a, b, s), torch.arange(a, b, s), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    assert "int(" in str(jitcore.last_traces(jf)[-1])  # the length: int of -floor(-(b - a) / s), recorded


def test_arange_bad_bounds_never_reuse_an_entry():
    """arange(n, cols) is valid only while n <= cols: the entry's predicate misses, and eager's error comes back."""
    f = lambda x, n: torch.arange(n, x.shape[1])  # noqa: E731
    jf = jitcore.jit(f, cache="symbolic values")
    for cols, n in [(5, 2), (9, 4), (4, 4)]:
        torch.testing.assert_close(jf(torch.randn(2, cols), n), f(torch.randn(2, cols), n), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)
    with pytest.raises(RuntimeError):
        f(torch.randn(2, 3), 5)
    with pytest.raises(MetaError, match="upper bound and larger bound"):
        jf(torch.randn(2, 3), 5)
    assert jitcore.cache_misses(jf) == 2


def test_linspace_steps_one_is_its_own_entry():
    """linspace(steps=cols - 1) takes eager's steps <= 1 branch at cols == 2: a second compile, never a wrong one."""
    f = lambda x: torch.linspace(-1.0, 2.0, x.shape[1] - 1)  # noqa: E731
    jf = jitcore.jit(f, cache="symbolic values")
    for cols in (4, 7, 9, 2, 5, 2):
        x = torch.randn(3, cols)
        torch.testing.assert_close(jf(x), f(x), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 2, jitcore.cache_miss_reasons(jf)


def test_creation_gradients_with_symbolic_sizes():
    def f(x, n):
        scale = torch.linspace(0, 1, x.shape[1]) + torch.arange(x.shape[1]) * n
        mask = torch.full((x.shape[0], x.shape[1]), float("-inf")).triu(1)
        return (torch.softmax(x * scale + mask, dim=-1) * torch.eye(x.shape[0], x.shape[1])).sum()

    jf = jitcore.jit(f, cache="symbolic values")
    for rows, cols, n in [(3, 4, 2), (5, 6, 3), (4, 9, 2)]:
        x = torch.randn(rows, cols, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        got, expected = jf(x, n), f(x2, n)
        torch.testing.assert_close(got, expected)
        got.backward()
        expected.backward()
        torch.testing.assert_close(x.grad, x2.grad)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


def test_gpt2_like_block_one_compile():
    """Position ids from arange, a causal mask from ones(T, T).tril(): one compile over sequence lengths and pasts."""
    torch.manual_seed(0)
    wte, wpe, qkv = torch.nn.Embedding(50, 16), torch.nn.Embedding(64, 16), torch.nn.Linear(16, 48)

    def f(ids, past):
        seq = ids.shape[1]
        h = wte(ids) + wpe(torch.arange(past, past + seq).unsqueeze(0))
        q, k, v = qkv(h).split(16, dim=-1)
        att = q @ k.transpose(-1, -2) / 4.0
        att = att.masked_fill(torch.ones(seq, seq).tril().view(1, seq, seq) == 0, float("-inf"))
        return torch.softmax(att + torch.full((seq, seq), float("-inf")).triu(1 + seq), -1) @ v

    jf = jitcore.jit(f, cache="symbolic values")
    for past, seq in [(0, 5), (2, 7), (4, 12), (1, 3), (9, 5)]:
        ids = torch.randint(0, 50, (2, seq))
        torch.testing.assert_close(jf(ids, past), f(ids, past))
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


# fn(x, w, a, b): geometry arguments of the nn ops passed in as Python ints (symbolic numbers under "symbolic
# values"), varied from call to call; x a [2, 4, 8, 8] float32 batch, w a [4, 4, 3, 3] weight
GEOMETRY = {
    "conv2d_stride_padding": (lambda x, w, a, b: F.conv2d(x, w, None, a, b), [(1, 1), (2, 0), (1, 2), (2, 0)]),
    "conv2d_tuple_stride": (lambda x, w, a, b: F.conv2d(x, w, None, (a, b)), [(1, 2), (2, 1), (1, 1)]),
    "conv_transpose2d": (lambda x, w, a, b: F.conv_transpose2d(x, w, None, a, b), [(1, 0), (2, 1), (2, 0)]),
    "max_pool2d": (lambda x, w, a, b: F.max_pool2d(x, a, 2, b), [(3, 1), (2, 0), (3, 0), (2, 1)]),
    "max_pool2d_indices": (lambda x, w, a, b: F.max_pool2d(x, a, b, return_indices=True)[1], [(2, 2), (3, 1)]),
    "max_pool1d": (lambda x, w, a, b: F.max_pool1d(x[0], a, b), [(2, 2), (3, 1), (2, 1)]),
    "avg_pool2d": (lambda x, w, a, b: F.avg_pool2d(x, a, b), [(2, 2), (4, 1), (3, 2)]),
    "adaptive_avg_pool2d": (lambda x, w, a, b: F.adaptive_avg_pool2d(x, (a, b)), [(2, 2), (3, 5), (1, 1), (2, 2)]),
    "adaptive_max_pool2d": (lambda x, w, a, b: F.adaptive_max_pool2d(x, a), [(2, 0), (3, 0), (8, 0)]),
    "interpolate_scale": (lambda x, w, a, b: F.interpolate(x, scale_factor=a), [(2, 0), (3, 0), (1, 0)]),
    "interpolate_size": (lambda x, w, a, b: F.interpolate(x, size=(a, b), mode="bilinear"), [(4, 6), (9, 3)]),
    "unfold": (lambda x, w, a, b: F.unfold(x, a, stride=b), [(2, 2), (3, 1)]),
}


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_nn_geometry_arguments_passed_in(name, mode):
    """Kernel sizes, strides, paddings and output sizes passed in as ints work in every cache mode and each call
    gets its own values' answer (they were refused with "'IntegerProxy' object is not iterable" under symbolic
    values)."""
    fn, calls = GEOMETRY[name]
    jfn = jitcore.jit(fn, cache=mode)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3)
    for a, b in calls:
        expected, got = fn(x, w, a, b), jfn(x, w, a, b)
        assert expected.shape == got.shape and expected.dtype == got.dtype, (a, b)
        torch.testing.assert_close(got, expected)


# fn(x, d): a dim, a correction, an index or a group count passed in as a Python int (x a [4, 4] float32 tensor);
# these ops' primitives take them as structure
NUMBERS_PASSED_IN = {
    "topk": lambda x, d: torch.topk(x, 2, d).values,
    "sort": lambda x, d: x.sort(d).values,
    "argsort": lambda x, d: x.argsort(d, descending=True),
    "gather": lambda x, d: x.gather(d, (x > 0).long()),
    "scatter": lambda x, d: x.scatter(d, (x > 0).long(), x),
    "scatter_add": lambda x, d: x.scatter_add(d, (x > 0).long(), x),
    "index_add": lambda x, d: x.index_add(d, torch.tensor([0, 2]), x.narrow(d, 1, 2)),
    "index_select": lambda x, d: x.index_select(d, torch.tensor([3, 0])),
    "var_correction": lambda x, d: x.var(0, correction=d),
    "std_mean_correction": lambda x, d: torch.std_mean(x, 1, correction=d)[0],
    "index_list": lambda x, d: x[[d, d - 1, 0]],
    "index_list_dim1": lambda x, d: x[:, [0, d]],
    "conv_groups": lambda x, d: F.conv1d(x[None], torch.ones(4, 4 // (d + 1), 2), groups=d + 1),
    "norm_p": lambda x, d: torch.norm(x, float("inf") if d else 2.0),
}


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("name", sorted(NUMBERS_PASSED_IN))
def test_numbers_passed_in_that_ops_take_as_structure(name, mode):
    """Each call's own value, in every cache mode (under symbolic values these raised: the primitives got the
    number's proxy; a norm of p=inf printed a prologue naming `inf`)."""
    fn = NUMBERS_PASSED_IN[name]
    jfn = jitcore.jit(fn, cache=mode)
    for d in (1, 0, 1, 0):
        x = torch.randn(4, 4)
        expected, got = fn(x, d), jfn(x, d)
        assert expected.shape == got.shape and expected.dtype == got.dtype, d
        torch.testing.assert_close(got, expected)
