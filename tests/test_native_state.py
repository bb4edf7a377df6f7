"""State outside the function that native code reads, changed by the caller between calls, against eager.

Each was silently stale before (the first call's answer, again): the value a native call returned was baked into
the program while the prologue checked only the object's identity or type:
- torch's process-wide settings read by their getters (`torch.get_num_threads()`, `get_float32_matmul_precision()`,
  `is_anomaly_enabled()`, `is_warn_always_enabled()`, the autocast dtypes, cuBLAS/cuDNN flags, the default device,
  also as the device of a tensor made without device=): the prologue checks each value read; their setters inside a
  jitted function are refused (they would run once, while tracing).

A seeded generator picks a kind of outside state, a read of it and a sequence of changes made between calls; every
call is compared with eager in each cache mode.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

import jitcore
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


def _settings_cases() -> list:
    threads = torch.get_num_threads()
    precision = torch.get_float32_matmul_precision()
    cpu_dtype = torch.get_autocast_dtype("cpu")
    tf32 = torch._C._get_cublas_allow_tf32()
    cache = torch.is_autocast_cache_enabled()
    return [
        _setting("num_threads", torch.get_num_threads, [1, 2, threads], torch.set_num_threads, threads),
        _setting("matmul_precision", lambda: ["highest", "high", "medium"].index(torch.get_float32_matmul_precision()),
                 ["highest", "high", "medium"], torch.set_float32_matmul_precision, precision),
        _setting("anomaly", lambda: 1.0 if torch.is_anomaly_enabled() else 2.0, [True, False],
                 torch.set_anomaly_enabled, False),
        _setting("warn_always", lambda: 1.0 if torch.is_warn_always_enabled() else 2.0, [True, False],
                 torch.set_warn_always, False),
        _setting("cublas_tf32", lambda: 1.0 if torch._C._get_cublas_allow_tf32() else 2.0, [True, False],
                 torch._C._set_cublas_allow_tf32, tf32),
        _setting("autocast_dtype", lambda: 1.0 if torch.get_autocast_dtype("cpu") is torch.bfloat16 else 2.0,
                 [torch.float16, torch.bfloat16], lambda d: torch.set_autocast_dtype("cpu", d), cpu_dtype),
        _setting("autocast_cache", lambda: 1.0 if torch.is_autocast_cache_enabled() else 2.0, [True, False],
                 torch.set_autocast_cache_enabled, cache),
        _setting("cudnn_enabled", lambda: 1.0 if torch.backends.cudnn.enabled else 2.0, [True, False],
                 lambda v: setattr(torch.backends.cudnn, "enabled", v), torch.backends.cudnn.enabled),
        _setting("mkldnn_enabled", lambda: 1.0 if torch.backends.mkldnn.enabled else 2.0, [True, False],
                 lambda v: setattr(torch.backends.mkldnn, "enabled", v), torch.backends.mkldnn.enabled),
    ]


def _kinds() -> dict:
    return {"settings": _settings_cases}


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
