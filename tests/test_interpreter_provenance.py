"""Interpreter: every external value is reported to the context with a provenance that round-trips."""
from __future__ import annotations

import types

from jitcore.interpreter import DefaultContext, Roots, interpret

CONFIG = types.SimpleNamespace(hidden=4, sizes=[1, 2, 3], table={"k": 10})


class Recorder(DefaultContext):
    def __init__(self):
        self.seen = []

    def on_external_value(self, value, provenance):
        self.seen.append((value, provenance))
        return value


class Holder:
    def __init__(self):
        self.layers = [types.SimpleNamespace(weight=1.5), types.SimpleNamespace(weight=2.5)]
        self.params = {"a": 1, "b": 2}


def test_provenance_strings_and_load_roundtrip():
    h = Holder()

    def f(holder, scale, *, shift=0):
        total = holder.layers[1].weight * scale + shift + CONFIG.hidden
        for layer in holder.layers:
            total += layer.weight
        for _, v in holder.params.items():
            total += v
        first, second = CONFIG.sizes[:2]
        return total + CONFIG.table["k"] + len(CONFIG.sizes) + first + second

    ctx = Recorder()
    args, kwargs = (h, 2.0), {"shift": 1}
    res = interpret(f, args, kwargs, ctx)
    assert res.output == f(*args, **kwargs)
    by_str = {str(p): (v, p) for v, p in ctx.seen}
    expected = ["args[0]", "args[1]", "kwargs['shift']", "fn", "args[0].layers", "args[0].layers[1]",
                "args[0].layers[1].weight", "globals()['CONFIG']", "globals()['CONFIG'].hidden",
                "args[0].layers[0]", "args[0].layers[0].weight", "args[0].params['a']", "args[0].params['b']",
                "globals()['CONFIG'].table['k']", "globals()['CONFIG'].sizes", "builtins.len"]
    for name in expected:
        assert name in by_str, (name, sorted(by_str))
    roots = Roots(args, kwargs, f)
    for v, p in ctx.seen:
        assert p.load(roots) == v, str(p)
    # provenance map handed to jitcore for guards
    assert res.external[id(h)] == by_str["args[0]"][1]


def test_closure_and_module_provenance():
    import math

    k = 3.0

    def f(x):
        import os

        return math.floor(x * k) + len(os.sep)

    ctx = Recorder()
    res = interpret(f, (2.5,), {}, ctx)
    assert res.output == f(2.5)
    names = [str(p) for _, p in ctx.seen]
    assert "fn.__closure__['k']" in names
    assert "fn.__closure__['math'].floor" in names
    assert "sys.modules['os'].sep" in names
    roots = Roots((2.5,), {}, f)
    for v, p in ctx.seen:
        assert p.load(roots) == v


def test_same_object_reported_consistently_and_replaced():
    class Swap(DefaultContext):
        def on_external_value(self, value, provenance):
            return value * 10 if type(value) is int and not isinstance(value, bool) else value

    def f(a, xs):
        return a + xs[0] + sum(xs)

    assert interpret(f, (1, [2, 3]), {}, Swap()).output == 10 + 20 + (20 + 30)


def test_module_as_fn_gets_fn_provenance():
    class M:
        def __init__(self):
            self.w = 5

        def __call__(self, x):
            return self.w * x

    ctx = Recorder()
    m = M()
    res = interpret(m, (2,), {}, ctx)
    assert res.output == 10
    names = [str(p) for _, p in ctx.seen]
    assert names[:2] == ["args[0]", "fn"]
    assert "fn.w" in names


def test_dict_views_and_builtin_iteration_report_items():
    d = {"x": 1, "y": 2}

    def f(m):
        return list(m.values()), [v for _, v in m.items()], list(zip(m.values(), range(3))), m.get("x")

    ctx = Recorder()
    res = interpret(f, (d,), {}, ctx)
    assert res.output == f(d)
    names = [str(p) for _, p in ctx.seen]
    assert names.count("args[0]['x']") >= 3
    assert "args[0]['y']" in names
