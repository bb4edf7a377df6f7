"""User exceptions: an exception raised in the user's code while tracing has eager's type (the user's `except` clauses
behave the same), eager's message, and the user's frames (file, line, function) in its traceback, as eager's has.

PYTEST_DONT_REWRITE: the cases' own asserts must be Python's, not pytest's rewritten ones (whose messages print the
traced values)."""
import traceback

import pytest
import torch

import jitcore
from jitcore.errors import MetaError
from jitcore.guards.cache import CACHE_MODES

_STANDARD = (IndexError, TypeError, RuntimeError, ValueError, KeyError, AssertionError, AttributeError,
             ZeroDivisionError, NotImplementedError)


def _helper(d):
    return d["missing"]


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.lin(x).view(5)


def c_raise(x):
    raise ValueError(f"bad value {x.shape[0]}")


def c_assert(x):
    assert x.shape[0] == 5, "need 5 rows"
    return x


def c_key(x):
    return x * _helper({"a": 1})


def c_list_index(x):
    items = [1, 2]
    return x * items[5]


def c_tensor_index(x):
    return x[10]


def c_too_many_indices(x):
    return x[:, 5]


def c_add_str(x):
    return x + "a"


def c_view(x):
    return x.view(7)


def c_reshape(x):
    return x.reshape(4, -1)


def c_cat(x):
    return torch.cat([x, x.reshape(1, 3)])


def c_matmul(x):
    return x @ torch.ones(4, 2)


def c_broadcast(x):
    return x + torch.ones(4)


def c_dim(x):
    return x.sum(dim=3)


def c_transpose(x):
    return torch.transpose(x, 0, 4)


def c_inplace_dtype(x):
    return torch.ones(3, dtype=torch.long).add_(x * 0.5)


def c_attribute(x):
    return x.no_such_attribute


def c_zero_division(x):
    return x * (1 / (x.shape[0] - 3))


_BLOCK = _Block()


def c_module(x):
    return _BLOCK(x)


def c_chained(x):
    try:
        return x.view(7)
    except RuntimeError as e:
        raise ValueError("could not view") from e


def c_except_other_type(x):
    try:
        return x.view(7)
    except ValueError:  # eager raises RuntimeError: this clause must not catch it under jit either
        return x


def c_nested_calls(x):
    def inner(y):
        return torch.nn.functional.linear(y, torch.ones(2, 4))

    return inner(x * 2) + 1


CASES = [c_raise, c_assert, c_key, c_list_index, c_tensor_index, c_too_many_indices, c_add_str, c_view, c_reshape,
         c_cat, c_matmul, c_broadcast, c_dim, c_transpose, c_inplace_dtype, c_attribute, c_zero_division, c_module,
         c_chained, c_except_other_type, c_nested_calls]
_OWN_MESSAGE = {c_add_str}  # eager's `x + "a"` message comes from Python's operator protocol, not from torch


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as e:
        return e
    raise AssertionError(f"{fn.__name__} did not raise")


def _user_frames(exc) -> list:
    """(line, function) of this file's frames in exc's traceback, after the caller's."""
    frames = [(f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]
    return frames[1:]


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_user_exception_like_eager(case, cache):
    torch.manual_seed(0)
    x = torch.randn(3)
    eager = _raised(case, x)
    torch.manual_seed(0)
    got = _raised(jitcore.jit(case, cache=cache), x)
    for kind in _STANDARD:  # every except clause a user may write behaves the same
        assert isinstance(got, kind) == isinstance(eager, kind), (kind, type(got), type(eager))
    if case not in _OWN_MESSAGE:
        assert str(eager) in str(got)
    # the user's frames, as eager's traceback has them (file, line, function), and shown first-class
    want = _user_frames(eager)
    assert want and _user_frames(got) == want
    text = "".join(traceback.format_exception(got))
    line, name = want[-1]
    assert f'File "{__file__}", line {line}, in {name}' in text
    if isinstance(eager, ValueError) and eager.__cause__ is not None:  # raise ... from e: the cause is eager's too
        assert isinstance(got.__cause__, type(eager.__cause__))


def test_meta_error_is_still_a_jitcore_error():
    with pytest.raises(MetaError):
        jitcore.jit(c_view)(torch.randn(3))


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_exceptions_caught_inside_the_function(cache):
    def f(x, d):
        try:
            y = x.view(7)
        except RuntimeError:  # eager's type for a shape error: the fallback runs
            y = x * 2
        try:
            k = d["b"]
        except KeyError:
            k = 3.0
        try:
            z = x.sum(dim=4)
        except IndexError:
            z = x.sum()
        try:
            assert x.shape[0] == 2, "two rows"
        except AssertionError as e:
            k = k + len(str(e))
        return y + k + z

    x = torch.randn(3, requires_grad=True)
    jf = jitcore.jit(f, cache=cache)
    for n in (3, 4):
        x = torch.randn(n, requires_grad=True)
        got, want = jf(x, {"a": 1.0}), f(x, {"a": 1.0})
        torch.testing.assert_close(got, want)
        (g,) = torch.autograd.grad(got.sum(), x)
        (w,) = torch.autograd.grad(want.sum(), x)
        torch.testing.assert_close(g, w)


def test_traceback_shows_user_frames_before_jitcore_internals():
    """After the caller's line, the first frames of the traceback are the user's, not the interpreter's."""
    e = _raised(jitcore.jit(c_key), torch.randn(3))
    frames = traceback.extract_tb(e.__traceback__)
    files = [f.filename for f in frames]
    first_user = next(i for i, f in enumerate(files[1:], 1) if f == __file__)
    assert first_user <= 2  # the caller, (jitcore's __call__,) then the user's function
    assert [f.name for f in frames[first_user:]] == ["c_key", "_helper"]


def test_setitem_out_of_bounds_is_an_index_error():
    def f(x):
        y = x.clone()
        y[10] = 1.0
        return y

    eager, got = _raised(f, torch.randn(3)), _raised(jitcore.jit(f), torch.randn(3))
    assert isinstance(eager, IndexError) and isinstance(got, IndexError) and not isinstance(got, RuntimeError)


def test_asking_torch_leaves_the_random_stream_alone():
    """Torch is asked about the failing call (eager's type) without drawing from the generator the program uses."""
    def f(x):
        try:
            torch.nn.functional.dropout(x, p=1.5)  # eager: ValueError, before any draw
        except ValueError:
            pass
        return x + torch.rand(3)

    x = torch.randn(3)
    torch.manual_seed(1)
    want = f(x)
    torch.manual_seed(1)
    got = jitcore.jit(f)(x)
    torch.testing.assert_close(got, want)


# -- raised while a compiled program runs (a later call's values make a kernel fail) ------------------------------
class _Embedder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.emb(ids).sum()


def _gather_twice(x, i):
    y = x.sin()
    z = torch.gather(y, 0, i)
    return z * 2


def _index_after(x, i):
    y = x * 2
    return y[i] + 1


RUN_TIME_CASES = {  # name -> (function, a call that compiles, a call whose values make a kernel fail)
    "index": (_index_after, (torch.randn(5), torch.tensor([1, 2])), (torch.randn(5), torch.tensor([1, 7]))),
    "gather with grad": (_gather_twice, (torch.randn(5, requires_grad=True), torch.tensor([1, 2])),
                         (torch.randn(5, requires_grad=True), torch.tensor([1, 9]))),
    "module": (_Embedder, (torch.tensor([1, 2]),), (torch.tensor([1, 12]),)),
}


def _frames(fn, args):
    try:
        fn(*args)
    except Exception as e:  # (compared with eager's)
        return type(e), str(e).splitlines()[0], [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(
            e.__traceback__) if "jitcore" not in f.filename and "test_user_exceptions" not in f.name]
    raise AssertionError("no exception")


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(RUN_TIME_CASES))
def test_run_time_error_shows_the_user_line(name, cache):
    """A cached program whose kernel fails on this call's values raises eager's exception, and its traceback shows
    the user's frames of the line that failed (not the generated program's)."""
    fn, good, bad = RUN_TIME_CASES[name]
    if isinstance(fn, type):
        fn = fn()
    jf = jitcore.jit(fn, cache=cache)
    jf(*good)
    want, got = _frames(fn, bad), _frames(jf, bad)
    assert got == want, f"jit {got}\neager {want}"
    assert not any(f[0].startswith("<jitcore") for f in got[2])
