"""Writes into a module's globals dict by key (`globals()["G"] = v`, `globals().__setitem__("G", v)`,
`globals().update(G=v)`) behave as `global G; G = v` does under jitcore.jit: set after the call, and a later call
sees the new value (it was "a fresh prologue rejected its own call" when the function read G first). Every cache mode.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES

G = None


def read_then_setitem_method(x):
    y = x + G if isinstance(G, torch.Tensor) else x * 1
    globals().__setitem__("G", y)
    return y


def read_then_subscript(x):
    y = x * G if isinstance(G, torch.Tensor) else x + 1
    g = globals()
    g["G"] = y + 1
    return y


def update_kwargs(x):
    y = x - G if isinstance(G, torch.Tensor) else x * 3
    globals().update(G=y)
    return y


def write_number(x):
    globals().__setitem__("G", float(x.shape[0]) + (G or 0.0))
    return x * 2


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("fn", [read_then_setitem_method, read_then_subscript, update_kwargs, write_number])
def test_globals_written_by_key_match_eager(fn, mode):
    global G
    xs = [torch.arange(3.0) + k for k in range(3)]
    G = None
    eager = [fn(x) for x in xs]
    eager_g = G
    G = None
    jf = jitcore.jit(fn, cache=mode)
    out = [jf(x) for x in xs]
    for a, b in zip(eager, out):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    if isinstance(eager_g, torch.Tensor):
        torch.testing.assert_close(G, eager_g, rtol=0, atol=0)
    else:
        assert G == eager_g
    G = None


def pop_global(x):
    globals().pop("G", None)
    return x


def test_other_globals_methods_are_refused():
    with pytest.raises(UnsupportedError, match="globals"):
        jitcore.jit(pop_global)(torch.ones(2))
