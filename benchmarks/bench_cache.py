"""Benchmark: the cost of a cached call (the hot path: cache lookup + prologue + computation + output), jitted vs
eager, in one run. Timings interleave jitted and eager rounds and report medians, so a noisy machine affects both.

    python -m benchmarks.bench_cache              # all cases
    python -m benchmarks.bench_cache --profile    # also a cProfile of the jitted a + b hot path

Cases: `a + b` on 2x2 tensors (constant values, symbolic values; forward+backward against eager and against a bare
torch.autograd.Function, the floor of a compiled backward), nn.Sequential of 50 and 500 Linear(2, 2) (100
and 1000 parameters) with and without grad mode, with the cost of their prologue per call (module-rooted guards
skipped while the module state is unchanged) and after a module state change, and the breakdown of the hot path
of `a + b` (prologue, computation).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import jitcore
from benchmarks.timing import paired_samples


def _per_call_us(fn, number: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - t0) / number / 1e3


def compare(jitted, eager, number: int, rounds: int = 15) -> tuple[float, float]:
    """Median microseconds per call of (jitted, eager), measured in alternating rounds."""
    j, e = [], []
    for _ in range(rounds):
        j.append(_per_call_us(jitted, number))
        e.append(_per_call_us(eager, number))
    return statistics.median(j), statistics.median(e)


def _report(name: str, jitted, eager, number: int):
    tj, te = compare(jitted, eager, number)
    print(f"{name:<44} jit {tj:9.2f} us   eager {te:9.2f} us   ratio {tj / te:5.2f}x")
    return tj, te


def bench_add(profile: bool):
    def f(a, b):
        return a + b

    a, b = torch.randn(2, 2), torch.randn(2, 2)
    for mode in ("constant values", "symbolic values"):
        jf = jitcore.jit(f, cache=mode)
        jf(a, b)
        jf(a, b)
        _report(f"a + b, 2x2, cache={mode!r}", lambda jf=jf: jf(a, b), lambda: f(a, b), 2000)
        assert jitcore.cache_misses(jf) == 1
    jf = jitcore.jit(f)
    jf(a, b)
    entry = jf._last_entry
    fn = jf.fn
    args = (a, b)
    tp, tc = compare(lambda: entry.check(fn, args, {}), lambda: entry.computation(a, b), 2000)
    print(f"{'  breakdown: full prologue / computation':<44} {tp:9.2f} us / {tc:.2f} us")
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20000):
            jf(a, b)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(8)


class _Add(torch.autograd.Function):
    """The floor of any compiled backward: a torch.autograd.Function that adds, with nothing of jitcore's."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, g):
        return g, g


def add_backward_cases(variants: dict) -> dict:
    """Forward + backward calls of `a + b` on 2x2 inputs that require grad (`f(a, b).sum().backward()`): eager, a
    bare torch.autograd.Function (what every compiler that runs its own backward pays: a Python node in torch's
    autograd graph), and `variants` (name -> a function that compiles `f`, e.g. jitcore.jit)."""
    def f(a, b):
        return a + b

    a, b = torch.randn(2, 2, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    cases = {"eager": lambda: f(a, b).sum().backward(), "autograd.Function": lambda: _Add.apply(a, b).sum().backward()}
    for name, compile_fn in variants.items():
        run = compile_fn(f)
        cases[name] = lambda run=run: run(a, b).sum().backward()
    return cases


def add_forward_cases(variants: dict) -> dict:
    """Forward calls of `a + b` on 2x2 inputs that do not require grad: eager and `variants` (name -> a function
    that compiles `f`)."""
    def f(a, b):
        return a + b

    a, b = torch.randn(2, 2), torch.randn(2, 2)
    cases = {"eager": lambda: f(a, b)}
    for name, compile_fn in variants.items():
        run = compile_fn(f)
        cases[name] = lambda run=run: run(a, b)
    return cases


def overhead_over_eager(cases: dict, rounds: int = 21, number: int = 1000) -> dict:
    """name -> (median us per call, median over paired rounds of its us per call minus eager's), timed in rounds
    (each case once per round, `number` calls in a row) after 200 warm-up calls each."""
    for run in cases.values():
        for _ in range(200):
            run()
    samples = paired_samples(cases, rounds, inner=number)
    return {k: (statistics.median(s) * 1e6, statistics.median((t - e) * 1e6 for t, e in zip(s, samples["eager"])))
            for k, s in samples.items()}


def bench_add_backward():
    """jitcore's forward + backward of the tiny add against eager, next to the bare autograd.Function's."""
    times = overhead_over_eager(add_backward_cases({"jitcore": jitcore.jit}))
    eager = times["eager"][0]
    for k in ("jitcore", "autograd.Function"):
        print(f"{'a + b, 2x2, fwd+bwd: ' + k:<44} {times[k][0]:9.2f} us   eager {eager:9.2f} us   "
              f"over eager {times[k][1]:+6.2f} us (median of paired rounds)")


def bench_module():
    """Sequential(n x Linear(2, 2)) with 100 and 1000 parameters."""
    for n_layers, number in ((50, 50), (500, 5)):
        _bench_module(n_layers, number)


def _bench_module(n_layers: int, number: int):
    """jit vs eager per call, then the prologue alone. Parameters are re-checked only when the module state epoch
    changed (jitcore/guards/module_state.py): the per-call prologue does not grow with the parameter count; the
    module-rooted guards (what every call paid before) and a call right after a module state change are timed
    for comparison."""
    from jitcore.guards import module_state

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(n_layers)])
    n_params = sum(1 for _ in model.parameters())
    jm = jitcore.jit(model)
    x = torch.randn(2, 2)
    jm(x)
    jm(x)
    _report(f"Sequential({n_layers} x Linear(2, 2)), {n_params} params", lambda: jm(x), lambda: model(x), number)
    with torch.no_grad():
        jm(x)
        jm(x)
        _report("  same, under torch.no_grad()", lambda: jm(x), lambda: model(x), number)
        entry = jm._last_entry
        runs = jm._cache.module_guard_runs()
        tp, tm = compare(lambda: entry.check(model, (x,), {}), lambda: entry.module_state.guard(model, (x,), {}),
                         max(20, number * 4))
        assert jm._cache.module_guard_runs() == runs, "the fast path re-ran the module-rooted guards"

        def changed():  # a module state change before every call: the module-rooted guards run again
            module_state.bump()
            return entry.check(model, (x,), {})

        tc, _ = compare(changed, lambda: None, max(20, number * 4))
    print(f"{'  prologue per call (no_grad entry)':<44} {tp:9.2f} us   module-rooted guards alone {tm:9.2f} us")
    print(f"{'  prologue after a module state change':<44} {tc:9.2f} us")


def bench_symbolic_shapes():
    def f(a, b):
        return (a.unsqueeze(1) + b).sum()

    jf = jitcore.jit(f, cache="symbolic values")
    shapes = [(3, 4), (5, 6), (7, 2), (4, 9)]
    pairs = [(torch.randn(n, m), torch.randn(n, 1, m)) for n, m in shapes]
    for a, b in pairs:
        jf(a, b)
    i = iter(range(10**9))

    def jitted():
        a, b = pairs[next(i) % 4]
        return jf(a, b)

    def eager():
        a, b = pairs[next(i) % 4]
        return f(a, b)

    _report("symbolic values, 4 shapes in turn (1 entry)", jitted, eager, 500)
    assert jitcore.cache_misses(jf) == 1, jitcore.cache_miss_reasons(jf)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    bench_add(args.profile)
    bench_add_backward()
    bench_module()
    bench_symbolic_shapes()


if __name__ == "__main__":
    main()
