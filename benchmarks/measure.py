"""Benchmarks: measuring one workload under every variant (eager, torch.compile, jitcore [torch], jitcore
[inductor, torch], thunder) side by side in one process: first call, steady forward and forward+backward times
(best of N), peak memory, correctness against eager, and for the cache suite the compiles and cost of a sequence of
shapes.

Peak memory is what torch's CPU allocator had live at most during one call, above what was live before it, read
from torch.profiler's memory events (profile_memory=True): tracemalloc does not see torch's allocations and the
resident set moves with the malloc arena, so neither is used.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field

import torch

from benchmarks import thunder_adapter
from benchmarks.suites import Workload

VARIANTS = ("eager", "torch.compile", "jitcore [torch]", "jitcore [inductor, torch]", "thunder")
SYMBOLIC = "jitcore [torch] symbolic"  # extra columns of the cache suite
SYMBOLIC_INDUCTOR = "jitcore [inductor, torch] symbolic"


class Unavailable(Exception):
    """This variant cannot run here (not installed, fails to import): reported as n/a, not as a failure."""


def inductor_executor():
    try:
        from executors import inductor_ex
    except Exception as e:
        raise Unavailable(f"executors.inductor_ex: {type(e).__name__}: {e}") from None
    ok, why = inductor_ex.is_available()
    if not ok:
        raise Unavailable(why)
    return inductor_ex


def make_variant(name: str, fn):
    """`fn` compiled by the variant `name` (jitcore is imported here, not with this module: a first call timed in a
    fresh process counts the import of its own compiler only)."""
    if name == "eager":
        return fn
    if name == "torch.compile":
        torch.compiler.reset()  # a fresh compile: dynamo caches compiled code on the function's code object
        return torch.compile(fn)
    import jitcore

    if name == "jitcore [torch]":
        return jitcore.jit(fn)
    if name == SYMBOLIC:
        return jitcore.jit(fn, cache="symbolic values")
    if name == SYMBOLIC_INDUCTOR:
        return jitcore.jit(fn, cache="symbolic values", executors=[inductor_executor()])
    if name == "jitcore [inductor, torch]":
        return jitcore.jit(fn, executors=[inductor_executor()])
    if name == "thunder":
        ok, why = thunder_adapter.available()
        if not ok:
            raise Unavailable(f"lightning-thunder: {why}")
        return thunder_adapter.jit(fn)
    raise ValueError(name)


@dataclass
class Result:
    suite: str
    workload: str
    variant: str
    status: str = "pass"  # pass | fail | n/a
    error: str = ""
    first_call_ms: float | None = None
    fwd_ms: float | None = None
    fwdbwd_ms: float | None = None
    peak_mem_mb: float | None = None
    compiles: int | None = None  # cache suite
    extra: dict = field(default_factory=dict)

    def fail(self, what: str, e: BaseException):
        if self.status != "fail":
            self.status, self.error = "fail", f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        self.extra.setdefault("traceback", traceback.format_exc(limit=-4))


class TimeLimit(BaseException):
    """A BaseException, like KeyboardInterrupt: the measured code's own `except Exception` does not swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise TimeLimit in the main thread after `seconds` (a variant that runs too long is a fail, not a hang)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise TimeLimit(f"took longer than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # and again every second, should something swallow it
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's C++ side logs start/stop lines to fd 2: send them to /dev/null while it runs."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def peak_memory_bytes(call) -> int:
    """Peak live bytes allocated by torch during call(), from the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def steady_time(call, *, repeat: int, inner: int = 1, warmup: int = 2) -> float:
    """Seconds per call: the fastest of `repeat` samples of `inner` calls, after warm-up. The minimum, not the
    median: on a shared machine, other processes only ever add time, so the fastest sample is the cleanest."""
    for _ in range(warmup):
        call()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def flat_tensors(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_tensors(o)]
    return []


class Steps:
    """The forward (no_grad) and forward+backward calls of one workload, and eager's answers to compare with."""

    def __init__(self, workload: Workload):
        self.fn, self.inputs, params = workload.make()
        self.tol = workload.tol
        self.backward = workload.backward
        if params is None:  # differentiate with respect to the floating-point inputs
            self.grad_inputs = [x.detach().requires_grad_(x.is_floating_point()) for x in self.inputs]
            self.leaves = [x for x in self.grad_inputs if x.requires_grad]
        else:
            self.grad_inputs, self.leaves = list(self.inputs), list(params)
        with torch.no_grad():
            self.expected = flat_tensors(self.fn(*self.inputs))
        g = torch.Generator().manual_seed(1)
        self.cotangents = [torch.randn(t.shape, generator=g, dtype=t.dtype) if t.is_floating_point() else None
                           for t in self.expected]
        self.expected_grads = self.grads_of(self.fn) if self.backward else []

    def forward(self, run):
        def call():
            with torch.no_grad():
                return run(*self.inputs)

        return call

    def forward_backward(self, run):
        def call():
            for p in self.leaves:
                p.grad = None
            outs = flat_tensors(run(*self.grad_inputs))
            loss = sum((o * c).sum() for o, c in zip(outs, self.cotangents) if c is not None and o.requires_grad)
            loss.backward()

        return call

    def grads_of(self, run) -> list:
        self.forward_backward(run)()
        grads = [None if p.grad is None else p.grad.detach().clone() for p in self.leaves]
        for p in self.leaves:
            p.grad = None
        return grads

    def check(self, got, expected, what: str):
        assert len(got) == len(expected), f"{what}: {len(got)} tensors, eager gives {len(expected)}"
        for g, e in zip(got, expected):
            if e is None or g is None:
                assert g is None and e is None, f"{what}: a gradient is missing"
                continue
            torch.testing.assert_close(g, e, rtol=self.tol, atol=self.tol, msg=lambda m: f"{what}: {m}")


def measure(workload: Workload, variant: str, *, repeat: int, inner: int, memory: bool,
            limit: float | None = None) -> Result:
    """All measurements of one workload under one variant; each stage gets `limit` seconds at most."""
    res = Result(workload.suite, workload.name, variant)
    try:
        steps = Steps(workload)
        run = make_variant(variant, steps.fn)
    except Unavailable as e:
        res.status, res.error = "n/a", str(e)
        return res
    except Exception as e:
        res.fail("setup", e)
        return res
    _guarded(res, "forward", limit, lambda: _forward(res, steps, run, repeat, inner))
    if workload.backward and res.status == "pass":
        _guarded(res, "fwd+bwd", limit, lambda: _forward_backward(res, steps, run, repeat))
    if memory and res.status == "pass":
        call = steps.forward_backward(run) if workload.backward else steps.forward(run)
        _guarded(res, "memory", limit, lambda: setattr(res, "peak_mem_mb", peak_memory_bytes(call) / 2**20))
    return res


def _guarded(res: Result, what: str, limit: float | None, body):
    try:
        with time_limit(limit):
            body()
    except (Exception, TimeLimit) as e:
        res.fail(what, e)


def _forward(res: Result, steps: Steps, run, repeat: int, inner: int):
    call = steps.forward(run)
    start = time.perf_counter()
    out = call()
    res.first_call_ms = (time.perf_counter() - start) * 1e3
    steps.check(flat_tensors(out), steps.expected, "forward")
    res.fwd_ms = steady_time(call, repeat=repeat, inner=inner) * 1e3


def _forward_backward(res: Result, steps: Steps, run, repeat: int):
    call = steps.forward_backward(run)
    start = time.perf_counter()
    got = steps.grads_of(run)
    res.extra["first_fwdbwd_ms"] = (time.perf_counter() - start) * 1e3
    steps.check(got, steps.expected_grads, "gradients")
    res.fwdbwd_ms = steady_time(call, repeat=repeat) * 1e3


def _compiles(variant: str, run) -> int | None:
    if variant.startswith("jitcore"):
        import jitcore

        return jitcore.cache_misses(run)
    if variant == "thunder":
        return thunder_adapter.cache_misses(run)
    if variant == "torch.compile":
        from jitcore.compat import dynamo_counters  # (lazy: as jitcore, imported where it is measured)

        counters = dynamo_counters()
        return int(counters["stats"]["unique_graphs"])
    return 0


def measure_shapes(workload: Workload, variant: str, limit: float | None = None) -> Result:
    """Forward calls over workload.shapes (first input resized): total time, compiles, correctness at each."""
    res = Result(workload.suite, workload.name, variant)
    try:
        fn, inputs, _ = workload.make()
        run = make_variant(variant, fn)
    except Unavailable as e:
        res.status, res.error = "n/a", str(e)
        return res
    except Exception as e:
        res.fail("setup", e)
        return res
    g = torch.Generator().manual_seed(2)
    calls = [(torch.randn(shape, generator=g), *inputs[1:]) for shape in workload.shapes]
    with torch.no_grad():
        expected = [flat_tensors(fn(*args)) for args in calls]
    total, before = 0.0, _compiles(variant, run) if variant == "torch.compile" else 0
    try:
        with torch.no_grad(), time_limit(limit):
            for i, args in enumerate(calls):
                start = time.perf_counter()
                out = run(*args)
                took = time.perf_counter() - start
                total += took
                if i == 0:
                    res.first_call_ms = took * 1e3
                torch.testing.assert_close(flat_tensors(out), expected[i], rtol=workload.tol, atol=workload.tol)
        res.fwd_ms = total * 1e3
        compiles = _compiles(variant, run)
        res.compiles = None if compiles is None else compiles - before
    except (Exception, TimeLimit) as e:
        res.fail(f"shape {tuple(args[0].shape)}", e)
    res.extra["shapes"] = [list(s) for s in workload.shapes]
    return res
