"""Interpreter: the constructs CPython 3.14 compiles differently (LOAD_SPECIAL for `with`, BINARY_OP's subscript,
LOAD_SMALL_INT, LOAD_COMMON_CONSTANT's inlined tuple/all/any of a generator, lazy annotations, t-strings, the
partial Placeholder), against CPython on plain values and against eager torch through jitcore.jit. The tests run on
every version; those of 3.14-only syntax or library features are skipped before it. (No `from __future__ import
annotations` here: the annotations of functions defined inside jitted code must be compiled as 3.14 compiles them.)
"""
import functools
import inspect
import sys
import typing

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.test_interpreter_basic import check, run

PY314 = sys.version_info >= (3, 14)
only_314 = pytest.mark.skipif(not PY314, reason="3.14 syntax or library")


def jit_check(f, *args):
    expected = f(*args)
    got = jitcore.jit(f)(*args)
    torch.testing.assert_close(got, expected)


def _compile(src: str, name: str):
    """A function defined by `src` (3.14-only syntax lives in strings so this file imports on 3.11)."""
    ns: dict = {"torch": torch}
    exec(compile(src, f"<{name}>", "exec"), ns)
    return ns[name]


# -- with: LOAD_SPECIAL (3.14) / BEFORE_WITH -------------------------------------------------------------------------
class Recorder:
    def __init__(self, suppress=False):
        self.log, self.suppress = [], suppress

    def __enter__(self):
        self.log.append("enter")
        return 10

    def __exit__(self, typ, val, tb):
        self.log.append(("exit", None if typ is None else typ.__name__, str(val) if val else None))
        return self.suppress


class StaticEnter:
    __enter__ = staticmethod(lambda: 7)  # (not a method descriptor: LOAD_SPECIAL binds it and pushes NULL)

    def __exit__(self, *exc):
        return False


def with_plain(suppress, fail):
    r, out = Recorder(suppress), None
    try:
        with r as v:
            if fail:
                raise ValueError("boom")
            out = v + 1
    except ValueError as e:
        out = str(e)
    return out, r.log


def with_nested():
    a, b = Recorder(), Recorder(True)
    with a as x, b as y:
        z = x + y
        raise KeyError(z)
    return a.log, b.log


def with_static():
    with StaticEnter() as v:
        return v


def with_return_inside(xs):
    r = Recorder()
    for x in xs:
        with r:
            if x > 1:
                return x, r.log
    return None, r.log


@pytest.mark.parametrize("suppress,fail", [(False, False), (False, True), (True, True)])
def test_with_statement(suppress, fail):
    check(with_plain, suppress, fail)


def test_with_nested_and_static_enter_and_return():
    check(with_nested)
    check(with_static)
    check(with_return_inside, [0, 1, 2, 3])


def test_with_non_context_manager_message():
    def f(o):
        with o:
            return 1

    with pytest.raises(TypeError) as eager:
        f(3)
    with pytest.raises(TypeError) as ours:
        run(f, 3)
    assert str(ours.value) == str(eager.value)


def test_with_torch_no_grad_and_exception_in_block():
    def f(x):
        with torch.no_grad():
            y = x * 2
        try:
            with torch.enable_grad():
                z = x.sum()
                raise RuntimeError("inside")
        except RuntimeError:
            z = z + 1
        return y + z

    x = torch.randn(3, requires_grad=True)
    jit_check(f, x)
    assert jitcore.jit(f)(x).requires_grad == f(x).requires_grad


# -- subscripts: BINARY_OP NB_SUBSCR (3.14) / BINARY_SUBSCR ------------------------------------------------------------
def subscripts(xs, d, s):
    return xs[0], xs[-1], xs[1:3], xs[::2], d["a"], d[("k", 1)], s[1:], s[0], [xs[i] for i in range(len(xs))]


def test_subscripts():
    check(subscripts, [1, 2, 3, 4], {"a": 5, ("k", 1): 6}, "hello")


def test_subscript_of_tensors_and_containers():
    def f(x, ts, cfg):
        return x[0] * cfg["scale"] + ts[1][1:] + x[1:2, ::2].sum()

    jit_check(f, torch.randn(3, 4), [torch.randn(4), torch.randn(5)], {"scale": 2.0})


def test_subscript_of_external_dict_is_guarded():
    cfg = {"scale": 2.0}

    def f(x):
        return x * cfg["scale"]

    jf = jitcore.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    cfg["scale"] = 5.0  # a different value read by `cfg["scale"]`: a cache miss, not the old constant
    torch.testing.assert_close(jf(x), f(x))


# -- small ints, common constants (assert, tuple/all/any of a generator) ---------------------------------------------
def small_ints(n):
    return [0, 1, 255, 256, -1, 300][n], n + 255


def test_small_ints():
    for n in range(6):
        check(small_ints, n)


def gen_builtins(xs):
    return tuple(x * 2 for x in xs), all(x > 0 for x in xs), any(x > 3 for x in xs), all(x for x in ())


def asserts(x):
    assert x > 0, "positive"
    try:
        assert x > 5, f"big {x}"
    except AssertionError as e:
        return str(e)
    return "ok"


def test_common_constants():
    check(gen_builtins, [1, 2, 3])
    check(gen_builtins, [1, -2, 5])
    check(asserts, 2)
    check(asserts, 9)
    with pytest.raises(AssertionError, match="positive"):
        run(asserts, -1)


_shadow_src = '''
def tuple(it):
    return ["shadowed", *it]

def gen_shadowed(xs):
    return tuple(x for x in xs)
'''


def test_shadowed_tuple_takes_the_call():
    ns: dict = {}
    exec(compile(_shadow_src, "<shadow>", "exec"), ns)
    check(ns["gen_shadowed"], [1, 2])


def test_tuple_of_generator_of_tensors():
    def f(x):
        parts = tuple(x[i] * i for i in range(3))
        ok = all(p.shape == (4,) for p in parts)
        return torch.stack(parts) if ok else x

    jit_check(f, torch.randn(3, 4))


# -- functions defined inside jitted code: annotations (PEP 649 on 3.14: lazy) -------------------------------------
def annotated(x):
    def h(a: int, b: "float" = 2.0) -> int:
        return a * b

    return h(x), h.__annotations__


def test_function_with_annotations_defined_inside():
    check(annotated, 3)


def test_annotations_are_lazy_on_314():
    def f(x):
        def h(a: UndefinedName) -> x:  # noqa: F821  (never evaluated unless read, on 3.14)
            return a + 1

        return h(x)

    if not PY314:
        pytest.skip("annotations are evaluated when the function is defined before 3.14")
    check(f, 4)


def introspected(x):
    def h(a: int, b: float = 2.0) -> list[int]:
        return [a] * int(b)

    sig = inspect.signature(h)
    return [(p.name, p.annotation, p.default) for p in sig.parameters.values()], typing.get_type_hints(h), h(x)


def test_annotations_read_by_inspect_and_typing_inside():
    check(introspected, 2)


SCALE = 2.0


def scaled_by_annotation(x):
    def h(a: SCALE):
        return a

    return x * h.__annotations__["a"]


def test_annotation_values_read_from_globals_are_guarded():
    """The annotation names a global: on 3.14 it is computed when `__annotations__` is read, by the interpreter (the
    global is reported and guarded, as when 3.11 evaluates it at the def), so a changed global is a new call."""
    global SCALE
    jf = jitcore.jit(scaled_by_annotation)
    x = torch.randn(3)
    try:
        for scale in (2.0, 5.0):
            SCALE = scale
            torch.testing.assert_close(jf(x), x * scale)
    finally:
        SCALE = 2.0


def test_annotated_function_inside_jit():
    def f(x):
        def scale(t: torch.Tensor, k: float = 3.0) -> torch.Tensor:
            return t * k

        return scale(x) + scale(x, k=0.5)

    jit_check(f, torch.randn(4))


# -- t-strings (3.14) -------------------------------------------------------------------------------------------------
_tstring_src = '''
def tstring(x, width):
    t = t"a{x!r:>{width}}b{x + 1}"
    return t.strings, [(i.value, i.expression, i.conversion, i.format_spec) for i in t.interpolations]
'''

_tstring_tensor_src = '''
def tstring_tensor(x):
    t = t"{x * 2} and {x.sum()!s}"
    vals = [i.value for i in t.interpolations]
    return vals[0] + vals[1], len(t.strings)
'''


@only_314
def test_tstring_fields():
    check(_compile(_tstring_src, "tstring"), 5, 4)


@only_314
def test_tstring_holding_tensors():
    f = _compile(_tstring_tensor_src, "tstring_tensor")
    x = torch.randn(3)
    got, n = jitcore.jit(f)(x)
    exp, en = f(x)
    torch.testing.assert_close(got, exp)
    assert n == en


# -- functools.partial's Placeholder (3.14) ----------------------------------------------------------------------------
@only_314
def test_partial_placeholder():
    P = functools.Placeholder

    def sub(a, b, c=0):
        return a - b + c

    p = functools.partial(sub, P, 10)

    def f(x):
        q = functools.partial(sub, P, 1, c=5)
        return p(x), q(x), functools.partial(q, 7)()

    check(f, 3)
    with pytest.raises(TypeError, match="missing positional arguments"):
        run(lambda: p())


# -- calls with * and ** ---------------------------------------------------------------------------------------------
class Obj:
    def m(self, *a, **k):
        return a, sorted(k.items())


def star_calls(args, kw):
    o = Obj()
    return o.m(*args), o.m(*args, **kw), max(*args), Obj.m(o, *args, x=1, **kw), o.m(*[*args, 9])


def test_star_calls():
    check(star_calls, (1, 2, 3), {"y": 2})



_tstring_escape_src = '''
def tstring_escape(x):
    return t"{x * 2}"
'''


@only_314
def test_tstring_holding_tensors_returned_is_refused():
    f = _compile(_tstring_escape_src, "tstring_escape")
    with pytest.raises(UnsupportedError, match="Template holding tensors"):
        jitcore.jit(f)(torch.randn(3))


def test_autocast_regions_leave_through_their_exit():
    """Two autocast regions: eager casts the weight afresh in each (its cast cache is cleared when a region exits),
    which jitcore follows by recognising the region's bound __exit__ (3.14 loads it with LOAD_SPECIAL)."""
    weight = torch.nn.Parameter(torch.randn(6, 6, generator=torch.Generator().manual_seed(4)))

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            first = torch.nn.functional.linear(weight, weight).float().sum(-1) * 3.0
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return first + (weight @ weight.t()).float().sum(-1) * -2.0

    jf = jitcore.jit(f)
    for n in (4, 7):
        got, want = [], []
        for fn, out in ((f, want), (jf, got)):
            weight.grad = None
            x = torch.randn(n, 6, requires_grad=True)
            r = fn(x)
            r.sum().backward()
            out += [r.detach(), weight.grad]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


class Cfg(dict):
    @property
    def scale(self):
        return self["scale"] * 2


CFG = Cfg(scale=1.5)


def by_property_of_dict_subclass(x):
    return x * CFG.scale


def test_property_of_a_builtin_subclass():
    """3.14's builtin types lost their own __getattribute__: a Python property of a dict subclass is interpreted
    there (as on a plain class) and read natively before; either way what it reads is guarded."""
    jf = jitcore.jit(by_property_of_dict_subclass)
    x = torch.randn(3)
    try:
        for scale in (1.5, 4.0):
            CFG["scale"] = scale
            torch.testing.assert_close(jf(x), x * scale * 2)
    finally:
        CFG["scale"] = 1.5
