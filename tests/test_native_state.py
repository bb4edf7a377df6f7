"""State outside the function that native code reads, changed by the caller between calls, against eager.

Each was silently stale before (the first call's answer, again): the value a native call returned was baked into
the program while the prologue checked only the object's identity or type:
- a deque, array.array or bytearray read natively (`len(dq)`, `sum(a)`, `5 in dq`, iteration): their contents are
  guarded (a copy); writes into them inside the function (`dq.append(v)`, `a[0] = v`) are replayed on every call;
  a set of objects that hash by identity (`o in s`, `len(s)`): its items are guarded;
- what a weak reference from outside refers to (`ref().v`, a WeakValueDictionary's item), a ContextVar's value
  (`var.get()`; a var the function leaves set is refused), and what operator.attrgetter/itemgetter read: guarded
  as reads;
- torch's process-wide settings read by their getters (`torch.get_num_threads()`, `get_float32_matmul_precision()`,
  `is_anomaly_enabled()`, `is_warn_always_enabled()`, the autocast dtypes, cuBLAS/cuDNN flags, the default device,
  also as the device of a tensor made without device=): the prologue checks each value read; their setters inside a
  jitted function are refused (they would run once, while tracing).

A seeded generator picks a kind of outside state, a read of it and a sequence of changes made between calls; every
call is compared with eager in each cache mode.
"""
from __future__ import annotations

import array
import collections
import contextvars
import operator
import random
import types
import weakref
from dataclasses import dataclass

import pytest
import torch

import jitcore
from jitcore import compat
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES


@dataclass
class Case:
    """A read of outside state (fn(x)), the changes a caller makes between calls, and how to put the state back."""

    name: str
    fn: object
    changes: list
    restore: object = None


def _setting(name, read, values, setter, restore_value):
    changes = [lambda v=v: setter(v) for v in values]
    return Case(name, lambda x: x + read(), changes, lambda: setter(restore_value))


def _set_backend(module, name, value):
    """torch.backends.<module>.<name> = value, also after torch's test utilities disabled such global writes."""
    with getattr(torch.backends, "__allow_nonbracketed_mutation")():
        setattr(module, name, value)


def _settings_cases() -> list:
    threads = torch.get_num_threads()
    precision = torch.get_float32_matmul_precision()
    cpu_dtype = torch.get_autocast_dtype("cpu")
    tf32 = compat.get_cublas_allow_tf32()
    cache = torch.is_autocast_cache_enabled()
    return [
        _setting("num_threads", torch.get_num_threads, [1, 2, threads], torch.set_num_threads, threads),
        _setting("matmul_precision", lambda: ["highest", "high", "medium"].index(torch.get_float32_matmul_precision()),
                 ["highest", "high", "medium"], torch.set_float32_matmul_precision, precision),
        _setting("anomaly", lambda: 1.0 if torch.is_anomaly_enabled() else 2.0, [True, False],
                 torch.set_anomaly_enabled, False),
        _setting("warn_always", lambda: 1.0 if torch.is_warn_always_enabled() else 2.0, [True, False],
                 torch.set_warn_always, False),
        _setting("cublas_tf32", lambda: 1.0 if compat.get_cublas_allow_tf32() else 2.0, [True, False],
                 compat.set_cublas_allow_tf32, tf32),
        _setting("autocast_dtype", lambda: 1.0 if torch.get_autocast_dtype("cpu") is torch.bfloat16 else 2.0,
                 [torch.float16, torch.bfloat16], lambda d: torch.set_autocast_dtype("cpu", d), cpu_dtype),
        _setting("autocast_cache", lambda: 1.0 if torch.is_autocast_cache_enabled() else 2.0, [True, False],
                 torch.set_autocast_cache_enabled, cache),
        _setting("cudnn_enabled", lambda: 1.0 if torch.backends.cudnn.enabled else 2.0, [True, False],
                 lambda v: _set_backend(torch.backends.cudnn, "enabled", v), torch.backends.cudnn.enabled),
        _setting("mkldnn_enabled", lambda: 1.0 if torch.backends.mkldnn.enabled else 2.0, [True, False],
                 lambda v: _set_backend(torch.backends.mkldnn, "enabled", v), torch.backends.mkldnn.enabled),
    ]


class Obj:
    """An object that hashes and compares by identity, with an attribute read through references to it."""

    def __init__(self, v=1.0):
        self.v = v


def _container_cases() -> list:
    dq, arr, ba = collections.deque([1, 2]), array.array("d", [1.0, 2.0]), bytearray(b"ab")
    a, b = Obj(), Obj()
    objs = {a}
    grow = [lambda: dq.append(5), lambda: dq.appendleft(7), lambda: dq.popleft() if len(dq) > 1 else None,
            lambda: dq.rotate(1), lambda: dq.__setitem__(0, 3)]
    return [
        Case("deque len+first", lambda x: x + len(dq) + dq[0], grow),
        Case("deque sum", lambda x: x + sum(dq), grow),
        Case("deque in", lambda x: x + (1.0 if 5 in dq else 2.0), grow),
        Case("deque iterated", lambda x: x + [v * i for i, v in enumerate(dq)][-1], grow),
        Case("array", lambda x: x + len(arr) + sum(arr) + arr.tolist()[0],
             [lambda: arr.append(3.0), lambda: arr.__setitem__(0, 9.0), lambda: arr.pop() if len(arr) > 1 else None]),
        Case("bytearray", lambda x: x + len(ba) + ba[0], [lambda: ba.append(9), lambda: ba.__setitem__(0, 4)]),
        Case("set of objects", lambda x: x + len(objs) + (1.0 if b in objs else 2.0),
             [lambda: objs.add(b), lambda: objs.discard(b), lambda: objs.add(Obj())]),
    ]


def _reference_cases() -> list:
    target, other = Obj(), Obj(5.0)
    ref = weakref.ref(target)
    table = weakref.WeakValueDictionary({"a": target})
    var = contextvars.ContextVar("jitcore_test_var", default=1.0)
    holder = types.SimpleNamespace(v=1.0, w=[1.0, 2.0])
    by_attr, by_item = operator.attrgetter("v"), operator.itemgetter(1)
    return [
        Case("weakref", lambda x: x + ref().v, [lambda: setattr(target, "v", 3.0), lambda: setattr(target, "v", 4.0)]),
        Case("WeakValueDictionary", lambda x: x + table["a"].v,
             [lambda: setattr(target, "v", 6.0), lambda: table.__setitem__("a", other),
              lambda: table.__setitem__("a", target)]),
        Case("ContextVar", lambda x: x + var.get(), [lambda: var.set(5.0), lambda: var.set(2.0)],
             lambda: var.set(1.0)),
        Case("attrgetter", lambda x: x + by_attr(holder), [lambda: setattr(holder, "v", 3.0)]),
        Case("itemgetter", lambda x: x + by_item(holder.w), [lambda: holder.w.__setitem__(1, 7.0)]),
    ]


def _kinds() -> dict:
    return {"settings": _settings_cases, "containers": _container_cases, "references": _reference_cases}


def _run_sequence(case: Case, mode: str, rng: random.Random, calls: int = 4):
    jf = jitcore.jit(case.fn, cache=mode)
    try:
        for i in range(calls):
            if i:
                rng.choice(case.changes)()
            x = torch.zeros(2)
            expected = case.fn(x)
            torch.testing.assert_close(jf(x), expected, msg=lambda m, i=i: f"{case.name}, {mode}, call {i}: {m}")
    finally:
        if case.restore is not None:
            case.restore()


@pytest.mark.parametrize("seed", range(24))
def test_outside_state_read_per_call(seed):
    rng = random.Random(seed)
    kinds = _kinds()
    kind = rng.choice(sorted(kinds))
    case = rng.choice(kinds[kind]())
    _run_sequence(case, CACHE_MODES[seed % 3], rng)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("index", range(len(_settings_cases())))
def test_each_setting_read_per_call(index, mode):
    _run_sequence(_settings_cases()[index], mode, random.Random(index))


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("kind", ["containers", "references"])
def test_each_read_per_call(kind, mode):
    for index in range(len(_kinds()[kind]())):
        case = _kinds()[kind]()[index]
        for seed in range(3):
            _run_sequence(case, mode, random.Random(seed), calls=5)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("write", ["append", "appendleft", "extend", "rotate", "setitem", "array"])
def test_write_into_outside_deque_or_array(write, mode):
    def make():
        return array.array("d", [1.0, 2.0]) if write == "array" else collections.deque([1.0, 2.0])

    def f(x, c):
        if write in ("append", "array"):
            c.append(float(len(c)))
        elif write == "appendleft":
            c.appendleft(3.0)
        elif write == "extend":
            c.extend([1.0, 4.0])
        elif write == "rotate":
            c.rotate(1)
        else:
            c[0] = c[0] + 1.0
        return x + c[0] + len(c)

    jf = jitcore.jit(f, cache=mode)
    mine, theirs = make(), make()
    for i in range(4):
        if i == 2:
            mine.append(9.0)
            theirs.append(9.0)
        torch.testing.assert_close(jf(torch.zeros(2), mine), f(torch.zeros(2), theirs))
        assert list(mine) == list(theirs)


def test_context_var_left_set_refused():
    var = contextvars.ContextVar("jitcore_test_set")

    def f(x):
        var.set(2.0)
        return x + 1

    with pytest.raises(UnsupportedError, match="context variable"):
        jitcore.jit(f)(torch.zeros(2))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_context_var_set_and_reset_inside(mode):
    """A library's scoped use (transformers' output recorders): set, read, reset inside; a read before the set is
    checked per call."""
    var = contextvars.ContextVar("jitcore_test_scoped", default=1.0)

    def f(x):
        before = var.get()
        token = var.set(5.0)
        inside = var.get()
        var.reset(token)
        return x + before + inside

    jf = jitcore.jit(f, cache=mode)
    for value in (1.0, 1.0, 3.0):
        token = var.set(value)
        torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)))
        var.reset(token)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_default_device_of_made_tensor(mode):
    def f(n):
        return torch.ones(n)

    jf = jitcore.jit(f, cache=mode)
    try:
        for device in (None, "meta", None):
            torch.set_default_device(device)
            assert jf(2).device == f(2).device
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("setter", [lambda: torch.set_num_threads(1),
                                    lambda: torch.set_float32_matmul_precision("high"),
                                    lambda: torch.use_deterministic_algorithms(False),
                                    lambda: torch.set_warn_always(False)])
def test_setting_changed_inside_refused(setter):
    def f(x):
        setter()
        return x + 1

    with pytest.raises(UnsupportedError, match="global torch setting"):
        jitcore.jit(f)(torch.zeros(2))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_inference_mode_read_per_call(mode):
    """torch.is_inference_mode_enabled() read inside: grad mode is off under both no_grad and inference_mode, so a call
    under the other one answered the first call's value (silently) until the prologue checked the setting."""
    def f(x):
        return x + (1.0 if torch.is_inference_mode_enabled() else 2.0)

    jf = jitcore.jit(f, cache=mode)
    contexts = [torch.no_grad, torch.inference_mode, torch.no_grad, torch.inference_mode, torch.enable_grad]
    for context in contexts:
        with context():
            x = torch.zeros(2)
            torch.testing.assert_close(jf(x), f(x), msg=lambda m, c=context: f"under {c.__name__}: {m}")
    if mode != "no caching":
        assert jitcore.cache_misses(jf) == 3
