"""Benchmarks: timing helpers. Medians of repeated runs, measured side by side in one process."""
from __future__ import annotations

import statistics
import time


def median_time(fn, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> float:
    """Median seconds per call of fn() over `repeat` samples of `inner` calls each."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def first_call_time(make_and_call) -> float:
    start = time.perf_counter()
    make_and_call()
    return time.perf_counter() - start
