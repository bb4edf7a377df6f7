"""Elementwise ops' result dtypes, shapes and values against eager: every unary/binary/logical/comparison op
jitcore maps (found in the ops table, not listed by hand) x input dtypes x ranks (0-d, 1-d, 2-d) x Python scalars
x in-place variants written through views. Eager raising means jit must raise too. CI runs a deterministic
sample; the full product is marked slow.
"""
from __future__ import annotations

import inspect
import random

import pytest
import torch

import jitcore
from jitcore.errors import JitError
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import Symbol, Tag
from jitcore.ops import torch_elementwise
from jitcore.ops.torch_map import OverloadAware, lookup

DTYPES = (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.complex64)
SHAPES = ((), (3,), (2, 3))
SCALARS = (2, 0.5, True, 1 + 1j)
VIEWS = ("t", "row", "unsqueeze")  # in-place writes go through these views of a fresh tensor


def _elementwise_ops() -> tuple[list[str], list[str]]:
    """Names of torch.<name> that map to a torch_elementwise op, split by the number of tensor arguments."""
    unary, binary = [], []
    for name in sorted(dir(torch)):
        fn = getattr(torch, name, None)
        op = lookup(fn) if callable(fn) and not name.startswith("_") else None
        op = op.op if isinstance(op, OverloadAware) else op
        if not isinstance(op, Symbol) or op.fn is None or op.fn.__module__ != torch_elementwise.__name__:
            continue
        if Tag.RANDOM in op.tags or Tag.INPLACE in op.tags or name.endswith("_"):
            continue
        params = inspect.signature(op.fn).parameters.values()
        required = [p for p in params if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
        {1: unary, 2: binary}.get(len(required), []).append(name)
    return unary, binary


UNARY, BINARY = _elementwise_ops()


def _tensor(dtype, shape, seed, nonzero=False):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.ones(shape, dtype=dtype) if nonzero else torch.randint(0, 2, shape, generator=g).bool()
    if not (dtype.is_floating_point or dtype.is_complex):
        lo = 1 if nonzero or dtype is torch.uint8 else -3
        t = torch.randint(lo, 4, shape, generator=g)
        return (t if not nonzero else t.clamp(min=1)).to(dtype)
    t = torch.randn(shape, generator=g, dtype=torch.float64 if not dtype.is_complex else torch.complex128) * 2
    return (t.abs() + 0.5 if nonzero else t).to(dtype)


# loud refusals jitcore makes where eager computes (op name -> predicate over the inputs): a JitError, never an answer
def _any_complex(*args):
    return any(isinstance(x, torch.Tensor) and x.dtype.is_complex for x in args)


KNOWN_REFUSALS = {"logaddexp": _any_complex, "logaddexp2": _any_complex, "isreal": _any_complex,
                  "nan_to_num": _any_complex,
                  "pow": lambda x, y: x.dtype is torch.bool and isinstance(y, bool)}


def _run(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # eager refusing is an expectation too
        return None, e


def _compare(got, want, what):
    assert isinstance(got, torch.Tensor), what
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, eager {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
    low = want.dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2 if low else 1e-5, rtol=1e-2 if low else 1e-5,
                               msg=lambda m: f"{what}: {m}")


def _check(fn, args, what):
    want, err = _run(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    jf = jitcore.jit(fn, cache="no caching")
    got, jerr = _run(jf, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    if err is not None:
        assert jerr is not None, f"{what}: eager raised {type(err).__name__}: {err}, jit returned {got}"
        return
    refused = KNOWN_REFUSALS.get(what.split("-")[0].rstrip("_"), lambda *a: False)(*args)
    if jerr is not None and refused and isinstance(jerr, JitError):
        return
    assert jerr is None, f"{what}: eager worked, jit raised {type(jerr).__name__}: {jerr}"
    for g, w in zip(tree_leaves(got), tree_leaves(want)):  # (torch.where(x) hands back a tuple)
        _compare(g, w, what)
    # the trace's own metadata too: a kernel that happens to return the right dtype must not hide a wrong meta,
    # which later ops (and decompositions, fusion) would build on
    traced = [o for o in tree_leaves(jitcore.last_traces(jf)[0].output) if isinstance(o, TensorProxy)]
    for p, w in zip(traced, tree_leaves(want)):
        shape = tuple(s if type(s) is int else s.value for s in p.shape)  # (a size known at run time: its value)
        assert (p.dtype, shape) == (w.dtype, tuple(w.shape)), \
            f"{what}: traced as {p.dtype}{list(p.shape)}, eager {w.dtype}{list(w.shape)}"


def _view(x, kind):
    if kind == "t":
        return x.t() if x.ndim == 2 else x.view(x.shape)
    if kind == "row":
        return x[0] if x.ndim >= 1 else x[...]
    return x.unsqueeze(0)


def _cases(full: bool):
    """(id, fn, args) triples; the sample draws three shape/other combinations of each op and input dtype."""
    cases = []
    for name in UNARY:
        for dtype in DTYPES:
            for shape in SHAPES:
                cases.append((f"{name}-{dtype}-{shape}", _unary_fn(name), (dtype, shape, None)))
    for name in BINARY:
        for dtype in DTYPES:
            for shape in SHAPES:
                for other in (*DTYPES, *SCALARS):
                    for oshape in (SHAPES if isinstance(other, torch.dtype) else (None,)):
                        cases.append((f"{name}-{dtype}-{shape}-{other}-{oshape}", _binary_fn(name), (dtype, shape,
                                      (other, oshape))))
    cases += _inplace_cases()
    if full:
        return cases
    rng = random.Random(1414)
    by_op_dtype = {}
    for c in cases:
        by_op_dtype.setdefault(tuple(c[0].split("-")[:2]), []).append(c)
    return [c for key in sorted(by_op_dtype) for c in rng.sample(by_op_dtype[key], min(len(by_op_dtype[key]), 3))]


def _inplace_cases():
    """x.<op>_(other) written through a view of x, for each binary op with an in-place variant, and zero_/fill_."""
    names = [n for n in BINARY if hasattr(torch.Tensor, n + "_")] + ["fill", "zero"]
    cases = []
    for name in names:
        others = (None,) if name == "zero" else (*DTYPES, *SCALARS)
        for dtype in DTYPES:
            for shape in SHAPES:
                for view in VIEWS:
                    for other in others:
                        spec = None if other is None else (other, () if isinstance(other, torch.dtype) else None)
                        cases.append((f"{name}_-{dtype}-{shape}-{view}-{other}", _inplace_fn(name, view),
                                      (dtype, shape, spec)))
    return cases


def _unary_fn(name):
    def f(x):
        return (getattr(torch, name)(x),)
    return f


def _binary_fn(name):
    def f(x, y):
        return (getattr(torch, name)(x, y),)
    return f


def _inplace_fn(name, view):
    def f(x, *y):
        v = _view(x, view)
        getattr(v, name + "_")(*y)
        return x, v
    return f


def _args(spec, seed):
    dtype, shape, other = spec
    x = _tensor(dtype, shape, seed)
    if other is None:
        return (x,)
    o, oshape = other
    return (x, _tensor(o, oshape, seed + 1, nonzero=True) if isinstance(o, torch.dtype) else o)


def _run_cases(cases):
    failures = []
    for i, (what, fn, spec) in enumerate(cases):
        try:
            _check(fn, _args(spec, i), what)
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])
    assert not failures, f"{len(failures)} of {len(cases)} disagree with eager:\n" + "\n".join(failures[:60])


def test_ops_were_found():
    assert {"abs", "neg", "exp", "logical_not", "isnan"} <= set(UNARY)
    assert {"add", "mul", "div", "eq", "lt", "logical_and", "bitwise_xor", "pow"} <= set(BINARY)


@pytest.mark.parametrize("family", ["unary", "binary", "inplace"])
def test_dtypes_vs_eager_sample(family):
    prefix = {"unary": UNARY, "binary": BINARY}
    cases = _cases(full=False)
    if family == "inplace":
        cases = [c for c in cases if c[0].split("-")[0].endswith("_")]
    else:
        cases = [c for c in cases if c[0].split("-")[0] in prefix[family] and not c[0].split("-")[0].endswith("_")]
    _run_cases(cases)


@pytest.mark.slow
def test_dtypes_vs_eager_full():
    _run_cases(_cases(full=True))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.float64])
def test_average_pooling_of_integers_and_floats(dtype, mode):
    """avg_pool1d/2d/3d over int64 tensors as eager's CPU kernels: exact sums, quotients truncated toward zero
    (they were refused as not implemented), other integer dtypes refused as eager refuses them; windows with
    padding, ceil_mode, count_include_pad, divisor_override."""
    import torch.nn.functional as F

    pools = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
    configs = [(2, 2, 0, False, True, None), (3, 2, 1, True, True, None), (3, 1, 1, False, False, None),
               (2, 1, 1, True, False, None), (3, 2, 1, False, True, 3)]
    g = torch.Generator().manual_seed(3)
    for n, pool in pools.items():
        jpool = jitcore.jit(lambda *a, pool=pool: pool(*a), cache=mode)
        for k, s, p, ceil, include, divisor in configs:
            if n == 1 and divisor:
                continue
            low = 0 if dtype is torch.uint8 else -50
            x = torch.randint(low, 200, (2, 3) + (7,) * n, generator=g).to(dtype)
            args = (x, k, s, p, ceil, include) + ((divisor,) if n > 1 else ())
            if dtype in (torch.int32, torch.uint8):  # (not implemented by eager's kernels: the same error)
                for f in (pool, jpool):
                    with pytest.raises((NotImplementedError, JitError), match="not implemented for"):
                        f(*args)
                continue
            expected, got = pool(*args), jpool(*args)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)
