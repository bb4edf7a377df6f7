"""Benchmark: the interpreter's overhead on a straight-line 100-op function over Python floats.

Run: python benchmarks/interpreter_overhead.py
Reports the median time to interpret the function (jitcore.interpreter.interpret with DefaultContext) and to
call it natively, and their difference (the interpreter's overhead for 100 operator calls).
"""
from __future__ import annotations

import statistics
import sys
import time

sys.path.insert(
    0, __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__)))
)

from jitcore.interpreter import DefaultContext, interpret

N_OPS = 100


def _make_fn(n_ops: int):
    lines = ["def f(a, b):", "    x = a"]
    lines += ["    x = x + b" for _ in range(n_ops)]
    lines.append("    return x")
    ns: dict = {}
    exec(compile("\n".join(lines), "<bench>", "exec"), ns)
    return ns["f"]


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(repeat: int = 200):
    f = _make_fn(N_OPS)
    ctx = DefaultContext()
    interpret(f, (1.0, 2.0), {}, ctx)  # warm the decode cache
    native = _median_seconds(lambda: f(1.0, 2.0), repeat)
    interp = _median_seconds(lambda: interpret(f, (1.0, 2.0), {}, ctx), repeat)
    cold_f = _make_fn(N_OPS)
    t0 = time.perf_counter()
    interpret(cold_f, (1.0, 2.0), {}, ctx)
    cold = time.perf_counter() - t0
    print(f"{N_OPS}-op function on floats, median of {repeat} runs")
    print(f"  native call      : {native * 1e6:9.1f} us")
    print(f"  interpreted      : {interp * 1e6:9.1f} us  (decode cached)")
    print(f"  overhead         : {(interp - native) * 1e6:9.1f} us  ({(interp - native) / N_OPS * 1e6:.2f} us/op)")
    print(f"  first interpret  : {cold * 1e6:9.1f} us  (includes decoding the code object)")
    _proxy_section(f, repeat=max(repeat // 5, 5))


def _proxy_section(f, repeat: int):
    """The same function on a TensorProxy: op recording natively vs under the interpreter (needs jitcore.ops)."""
    try:
        import torch

        import jitcore.ops  # noqa: F401  (fills the proxy method table)
        from jitcore.ir.proxies import TensorProxy
        from jitcore.ir.trace import Trace, tracectx
    except Exception as e:
        print(f"  (proxy section skipped: {e})")
        return

    def once(interpreted: bool) -> float:
        with tracectx(Trace()):
            p = TensorProxy((4,), torch.float32, "cpu")
            t0 = time.perf_counter()
            if interpreted:
                interpret(f, (p, 1.0), {}, DefaultContext())
            else:
                f(p, 1.0)
            return time.perf_counter() - t0

    native = statistics.median(once(False) for _ in range(repeat))
    interp = statistics.median(once(True) for _ in range(repeat))
    print(f"{N_OPS}-op function on a TensorProxy (op recording included), median of {repeat} runs")
    print(f"  native recording : {native * 1e3:9.2f} ms")
    print(f"  interpreted      : {interp * 1e3:9.2f} ms")
    print(f"  overhead         : {(interp - native) * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
