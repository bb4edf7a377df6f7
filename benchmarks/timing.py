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


def paired_samples(calls: dict, rounds: int, *, inner: int = 1, clock=time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each of `calls` (name -> callable), `rounds` samples each: every round times each callable
    once (`inner` calls in a row), in an order that rotates from round to round, so a slow moment of a shared machine
    lands on every callable alike and the samples of one round can be compared with each other."""
    names = list(calls)
    samples = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            call = calls[n]
            start = clock()
            for _ in range(inner):
                call()
            samples[n].append((clock() - start) / inner)
    return samples


def paired_ratio(samples: dict[str, list[float]], num: str, den: str) -> float:
    """Median over rounds of samples[num] / samples[den] (a speedup of `den` over `num` when both are times)."""
    return statistics.median(a / b for a, b in zip(samples[num], samples[den]))
