"""The guard stage's one hot path: every call (functions and jitted modules) goes through Cache.lookup, and a
guarded value that disappears between calls (an attribute, a dict key, a list element, a global, a closure cell)
is a miss that the generated prologue reports by returning None: the call retraces and gives eager's result, or
raises eager's own error, never an internal one."""
from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import jitcore
from jitcore.errors import JitError

GONE = "a guarded value can no longer be fetched"


def _eager_outcome(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # the oracle: whatever eager raises
        return None, e


def _same_as_eager(jf, fn, *args):
    """jf(*args) gives eager's result, or raises eager's exception (same type and message)."""
    expected, error = _eager_outcome(fn, *args)
    if error is None:
        torch.testing.assert_close(jf(*args), expected)
    else:
        with pytest.raises(type(error)) as got:
            jf(*args)
        assert str(got.value) == str(error)


# each case: (make: () -> (fn, state), remove: state -> None, the miss reason mentions the failed fetch)
def _attr_with_default():
    c = types.SimpleNamespace(s=2.0)
    return (lambda x: x * getattr(c, "s", 3.0)), c


def _attr_read():
    c = types.SimpleNamespace(s=2.0)
    return (lambda x: x * c.s), c


def _dict_key():
    d = {"scale": 2.0}
    return (lambda x: x * d["scale"]), d


def _dict_key_get():
    d = {"scale": 2.0}
    return (lambda x: x * d.get("scale", 5.0)), d


def _list_element():
    c = types.SimpleNamespace(xs=[1.0, 2.0])
    return (lambda x: x * c.xs[1]), c


def _sized_becomes_unsized():
    c = types.SimpleNamespace(xs=[1.0, 2.0])
    return (lambda x: x * len(c.xs)), c


def _global():
    globals()["_SCALE"] = 2.0
    return (lambda x: x * _SCALE), None  # noqa: F821 (deleted and restored by the test)


def _closure_cell():
    s = 2.0

    def f(x):
        return x * s

    def remove(_):
        nonlocal s
        del s

    return f, remove


def _del_attr(c):
    del c.s


def _replace_key(d):  # same length, other keys
    del d["scale"]
    d["other"] = 1.0


def _shorten(c):
    c.xs = [c.xs[0]]


def _unsized(c):
    c.xs = 3


def _del_global(_):
    del globals()["_SCALE"]


CASES = {
    "attribute gone, getattr default": (_attr_with_default, _del_attr, True),
    "attribute gone, read": (_attr_read, _del_attr, True),
    "dict key gone, read": (_dict_key, _replace_key, False),  # its keys (in order) are guarded: a failed check
    "dict key gone, get default": (_dict_key_get, _replace_key, None),
    "list element gone": (_list_element, _shorten, False),  # its length is guarded: a failed check
    "len() of what is no longer sized": (_sized_becomes_unsized, _unsized, True),
    "global gone": (_global, _del_global, True),
    "closure cell emptied": (_closure_cell, None, True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_a_guarded_value_that_disappears_is_a_miss(case, mode):
    make, remove, fetch_fails = CASES[case]
    fn, state = make()
    jf = jitcore.jit(fn, cache=mode)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), fn(x))
    torch.testing.assert_close(jf(x), fn(x))
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (1, 1)
    entry = jf._last_entry
    if remove is None:
        state(None)
    else:
        remove(state)
    assert entry.check(fn, (x,), {}) is None  # the generated prologues return None, they do not raise
    assert entry.prologue(fn, (x,), {}) is None
    if fetch_fails:
        assert entry.explain(fn, (x,), {}).startswith(GONE)
    try:
        _same_as_eager(jf, fn, x)
    finally:
        globals()["_SCALE"] = 2.0
    assert jitcore.cache_misses(jf) == 2  # the lookup said miss (a prologue exception would have escaped it)
    if fetch_fails:
        assert GONE in jitcore.cache_miss_reasons(jf)[-1]


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 2.0
        self.cfg = types.SimpleNamespace(shift=1.0)

    def forward(self, x):
        return self.lin(x) * getattr(self, "scale", 4.0) + getattr(self.cfg, "shift", 0.5)


def test_module_attributes_that_disappear_are_misses():
    model = _Scaled()
    jm = jitcore.jit(model)
    x = torch.randn(2, 3)
    for _ in range(2):
        _same_as_eager(jm, model, x)
    del model.scale  # module-rooted: the module-state epoch changes, the module-rooted guards run and miss
    for _ in range(2):
        _same_as_eager(jm, model, x)
    assert jitcore.cache_misses(jm) == 2 and GONE in jitcore.cache_miss_reasons(jm)[-1]
    del model.cfg.shift  # not module-rooted: the per-call guard on the cached anchor `fn.cfg` misses
    _same_as_eager(jm, model, x)
    assert jitcore.cache_misses(jm) == 3 and GONE in jitcore.cache_miss_reasons(jm)[-1]
    del model.cfg  # eager raises: so does the retrace
    _same_as_eager(jm, model, x)
    assert jitcore.cache_misses(jm) == 4


def _counting_lookup(cache):
    calls = []
    lookup = cache.lookup

    def counted(fn, args, kwargs):
        calls.append(fn)
        return lookup(fn, args, kwargs)

    cache.lookup = counted
    return calls


def test_functions_and_modules_go_through_the_one_lookup():
    x = torch.randn(2, 3)
    jf = jitcore.jit(lambda a: a * 2)
    model = nn.Linear(3, 3)
    jm = jitcore.jit(model)
    for j in (jf, jm):
        calls = _counting_lookup(j._cache)
        for _ in range(3):
            j(x)
        assert len(calls) == 3 and (jitcore.cache_hits(j), jitcore.cache_misses(j)) == (2, 1)
    torch.testing.assert_close(jm(x), model(x))


def test_an_entry_writing_an_aliased_input_is_a_miss_not_a_hit():
    def f(a, b):
        a.add_(1)
        return b * 1

    jf = jitcore.jit(f)
    jf(torch.zeros(2), torch.zeros(2))
    jf(torch.zeros(2), torch.zeros(2))
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (1, 1)
    base = torch.zeros(4)
    with pytest.raises(JitError, match="shares its storage"):
        jf(base[:2], base[1:3])
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (1, 2)
    assert jitcore.cache_miss_reasons(jf)[-1].endswith("a written input shares storage with another input")
    a, b = torch.zeros(2), torch.zeros(2)
    torch.testing.assert_close(jf(a, b), b)
    torch.testing.assert_close(a, torch.ones(2))
    assert (jitcore.cache_hits(jf), jitcore.cache_misses(jf)) == (2, 2)
