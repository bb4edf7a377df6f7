"""State read through objects that the caller changes between calls, against eager over sequences of calls.

Each was silently stale before (the first call's answer, again):
- an attribute's absence or presence: `hasattr(o, "k")` or `getattr(o, "k", 1.5)` taking its default (objects,
  modules, buffers and parameters registered later, the lazy `if not hasattr(self, "cache")` pattern), `"k" in
  vars(o)`, and a Python attribute set on a tensor argument (`x.scale = 2.0`, read as `getattr(x, "scale", 1.0)`);
- what a Python-level `__len__`, `__bool__`, `__contains__` or `__iter__` (`f(*o.items)`) reads (`len(self.params)`
  of an nn.ParameterList, `if self.layers:`, `"a" in self.heads` of an nn.ModuleDict, a user container), or a
  `__getitem__` that iteration, `in`, unpacking and reversed() fall back to, and the items of a set argument;
- which function a method call finds: an instance attribute shadowing it (`model.forward = wrapper`, as accelerate's
  hooks do) or its class's function replaced (objects that are not modules);
- an operator, conversion or text written in Python by the object's class (`s + 1`, `float(s)`, `lst[s]`, `s == 1`,
  `d != Options()` of a dataclass, `str(s)`, `f"{s}"`, `repr(d)`, `d in [a, b]`, `min(s, 2)`, `sorted([2, s])`): the
  dunder ran natively, so what it read of the object was not guarded;
- an iterator from outside (an argument, a closure's itertools.count): the program replayed the first call's items
  without advancing it; refused now;
- a numpy array from outside read natively (`w.sum()`, `w[1]`): its contents are guarded now;
- a hook of torch.nn.utils run natively while tracing (old-style weight_norm and spectral_norm recompute the weight
  in a forward pre-hook: the program read the weight the trace computed, never again).

A seeded generator builds a holder (a plain object passed in, or the jitted module itself), a read of it, and a
random sequence of changes made between calls; every call is compared with eager in each cache mode.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
import warnings

import pytest
import torch
import torch.nn as nn

import jitcore
from tests.fuzz import CACHE_MODES
from tests.helpers import assert_same_outcome


class Bag:
    """A user container: __len__, __bool__ and __contains__ written in Python."""

    def __init__(self):
        self.items = []

    def __len__(self):
        return len(self.items)

    def __bool__(self):
        return bool(self.items)

    def __contains__(self, k):
        return k in self.items

    def __iter__(self):
        return iter(self.items)


class OldSequence:
    """Python's older sequence protocol: __getitem__ (and __len__) only; iteration, `in`, `*` and reversed() go
    through __getitem__."""

    def __init__(self):
        self.items = []

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)


def _act(self, v):
    return v * 2.0


def _other_act(self, v):
    return v * 5.0


def _make_class(base):
    return type("Holder", (base,), {"act": _act})


# read name -> (expression over `o` giving a float, the kinds of `o.items` it may use)
READS = {
    "hasattr": ('(2.0 if hasattr(o, "k") else 3.0)', None),
    "getattr_default": ('getattr(o, "k", 1.5)', None),
    "instance_dict": ('(o.__dict__.get("k", 0.5) if "k" in vars(o) else -2.0)', None),
    "method": ("o.act(1.0)", None),
    "len": ("float(len(o.items))", ("bag", "modulelist", "paramlist")),
    "bool": ("(4.0 if o.items else 5.0)", ("bag", "modulelist", "paramlist")),
    "contains": ('(6.0 if "a" in o.items else 7.0)', ("bag", "moduledict", "set", "oldseq")),
    "star_args": ("float((lambda *a: len(a))(*o.items))", ("bag", "modulelist", "paramlist", "oldseq")),
    "iterate": ('float(sum(2.0 if v == "a" else 1.0 for v in o.items))', ("bag", "oldseq")),
    "reversed": ('(4.0 if [*reversed(o.items)][:1] == ["a"] else 5.0)', ("oldseq",)),
}


def _items(kind):
    return {"bag": Bag, "modulelist": nn.ModuleList, "moduledict": nn.ModuleDict,
            "paramlist": nn.ParameterList, "set": set, "oldseq": OldSequence}[kind]()


def _grow(items, r):
    if isinstance(items, (Bag, OldSequence)):
        items.items.append(r.choice(["a", "b"]))
    elif isinstance(items, nn.ModuleDict):
        items[r.choice(["a", "b"])] = nn.Identity()
    elif isinstance(items, nn.ParameterList):
        items.append(nn.Parameter(torch.ones(1)))
    elif isinstance(items, set):
        items.add(r.choice(["a", "b"]))
    else:
        items.append(nn.Identity())


def _shrink(items, r):
    if isinstance(items, (Bag, OldSequence)):
        items.items.clear()
    elif isinstance(items, nn.ModuleDict):
        items.clear()
    elif isinstance(items, set):
        items.clear()
    elif len(items):
        if isinstance(items, nn.ParameterList):
            return  # (no removal in nn.ParameterList)
        del items[len(items) - 1]


def _change(o, r, cls):
    """One change of the holder, chosen at random (some may do nothing for this holder)."""
    what = r.choice(["set_k", "del_k", "shadow", "unshadow", "class_method", "grow", "shrink", "buffer", "none"])
    buffers = o.__dict__.get("_buffers", {})
    if what == "set_k":
        value = r.choice([0.25, 3.0, -1.0])
        o.k = torch.tensor(value) if "k" in buffers else value
    elif what == "del_k" and ("k" in o.__dict__ or "k" in buffers):
        delattr(o, "k")
    elif what == "buffer" and isinstance(o, nn.Module) and not hasattr(o, "k"):
        o.register_buffer("k", torch.tensor(r.choice([0.5, 2.0])))
    elif what == "shadow":
        scale = r.choice([7.0, 11.0])
        o.act = lambda v: v * scale
    elif what == "unshadow" and "act" in o.__dict__:
        delattr(o, "act")
    elif what == "class_method" and not isinstance(o, nn.Module):  # (a module class's attributes: not watched)
        cls.act = _other_act if cls.act is _act else _act
    elif what == "grow" and hasattr(o, "items"):
        _grow(o.items, r)
    elif what == "shrink" and hasattr(o, "items"):
        _shrink(o.items, r)
    return what


def _world(seed):
    r = random.Random(seed)
    read = list(READS)[seed % len(READS)]
    expr, kinds = READS[read]
    as_module = r.random() < 0.5
    kind = r.choice(kinds) if kinds else None
    if kind == "set" or (kind in ("modulelist", "moduledict", "paramlist") and not as_module):
        as_module = kind != "set"
    return r, read, expr, kind, as_module


def _run(seed, wrap):
    r, _read, expr, kind, as_module = _world(seed)
    scope: dict = {}
    if as_module:
        cls = _make_class(nn.Module)
        exec(f"def forward(o, x):\n    return x * {expr}\n", scope)
        cls.forward = scope["forward"]
        o = cls()
        nn.Module.__init__(o)
        fn = wrap(o)
        call = fn
    else:
        cls = _make_class(object)
        o = cls()
        exec(f"def f(x, o):\n    return x * {expr}\n", scope)
        fn = wrap(scope["f"])

        def call(x):
            return fn(x, o)
    if kind is not None:
        o.items = _items(kind)
        if r.random() < 0.5:
            _grow(o.items, r)
    out, steps = [], []
    for _ in range(6):
        x = torch.arange(3.0)
        try:
            out.append(call(x))
        except Exception as e:  # (eager's own errors: the same error expected)
            out.append(type(e).__name__)
        steps.append(_change(o, r, cls))
    return out, steps


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(4 * len(READS)))
def test_state_changed_between_calls(seed, mode):
    expected, steps = _run(seed, lambda f: f)
    got, _ = _run(seed, lambda f: jitcore.jit(f, cache=mode))
    _, read, _, kind, as_module = _world(seed)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_same_outcome(g, e, f"call {i} after {steps[:i]} (read {read}, items {kind}, module {as_module})")


def test_lazy_initialization_runs_once():
    """`if not hasattr(self, "cache"): self.cache = ...`: the call after the one that created it finds it (the first
    entry's absence guard fails), as eager does; before, every call re-created it."""
    class M(nn.Module):
        def forward(self, x):
            if not hasattr(self, "count"):
                self.count = 0
            self.count = self.count + 1
            return x * self.count

    for mode in CACHE_MODES:
        m, e = M(), M()
        jm = jitcore.jit(m, cache=mode)
        for _ in range(3):
            torch.testing.assert_close(jm(torch.ones(2)), e(torch.ones(2)))
        assert m.count == e.count == 3


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_python_attribute_of_tensor_argument(mode):
    def f(x):
        return x * getattr(x, "scale", 1.0) + (1.0 if hasattr(x, "shift") else 0.0)

    jf = jitcore.jit(f, cache=mode)
    for scale, shift in [(None, False), (2.0, False), (3.0, True), (None, True), (None, False)]:
        x = torch.ones(2)
        if scale is not None:
            x.scale = scale
        if shift:
            x.shift = True
        torch.testing.assert_close(jf(x), f(x))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_forward_wrapped_after_first_call(mode):
    """accelerate-style hooks: `module.forward = wrapper` on the model and on a submodule after the first call."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jm = jitcore.jit(model, cache=mode)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jm(x), model(x))
    inner = model[0].forward
    model[0].forward = lambda t: inner(t) * 10
    torch.testing.assert_close(jm(x), model(x))
    outer = model.forward
    model.forward = lambda t: outer(t) - 1
    torch.testing.assert_close(jm(x), model(x))
    del model.forward, model[0].forward
    torch.testing.assert_close(jm(x), model(x))


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("norm", ["weight_norm", "spectral_norm"])
def test_old_style_norm_hooks(norm, mode):
    """torch.nn.utils.weight_norm / spectral_norm recompute the weight in a forward pre-hook: traced, per call."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        models = [getattr(nn.utils, norm)(nn.Linear(3, 3)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    eager, jm = models[0], jitcore.jit(models[1], cache=mode)
    for step in range(3):
        x = torch.randn(2, 3)
        e, g = eager(x), jm(x)
        torch.testing.assert_close(g, e)
        e.sum().backward()
        g.sum().backward()
        for (name, pe), (_, pg) in zip(eager.named_parameters(), models[1].named_parameters()):
            torch.testing.assert_close(pg.grad, pe.grad, msg=f"step {step}: {name}.grad")
        with torch.no_grad():
            for pe, pg in zip(eager.parameters(), models[1].parameters()):
                pe.mul_(0.9)
                pg.mul_(0.9)


# -- operators written in Python: what they read is read by the program -------------------------------------------
class Scalar:
    """A user number: its operators, conversions and text are Python dunders reading `self.v`."""

    def __init__(self, v):
        self.v = v

    def __add__(self, o):
        return self.v + o

    def __radd__(self, o):
        return o + self.v

    def __mul__(self, o):
        return o * self.v

    __rmul__ = __mul__

    def __neg__(self):
        return -self.v

    def __abs__(self):
        return abs(self.v)

    def __float__(self):
        return float(self.v)

    def __index__(self):
        return int(self.v)

    def __eq__(self, o):
        return self.v == (o.v if isinstance(o, Scalar) else o)

    def __lt__(self, o):
        return self.v < o

    def __gt__(self, o):
        return self.v > o

    __hash__ = None

    def __str__(self):
        return f"S{self.v}"

    def __format__(self, spec):
        return f"S{self.v:{spec}}" if spec else str(self)


@dataclasses.dataclass
class Options:
    """A dataclass: its generated __eq__ and __repr__ read every field."""

    scale: float = 1.0
    mode: str = "a"


# (expression over `s` (a Scalar) and `d` (an Options) giving a number)
OPERATOR_READS = [
    "s + 1", "1.5 + s", "s * 2.0", "2.0 * s", "-s", "abs(s)", "float(s)", "[1.0, 2.0, 3.0, 4.0, 5.0][s]",
    "(2.0 if s == 1 else 3.0)", "(2.0 if s != 1 else 3.0)", "(2.0 if s < 2 else 3.0)", "(2.0 if 2 > s else 3.0)",
    "(2.0 if str(s) == 'S1' else 3.0)", "(2.0 if f'{s}' == 'S1' else 3.0)", "len(f'{s:>4}')",
    "(2.0 if d == Options() else 3.0)", "(2.0 if d != Options() else 3.0)", "(2.0 if d in [Options(), None] else 3.0)",
    "float(len(repr(d)))", "(2.0 if 'scale=1.0' in str(d) else 3.0)", "(2.0 if s in [Scalar(1), 7] else 3.0)",
    "float(min(s, 2))", "float(max([2, s]))", "float(sorted([2, s, 1.5])[1])",
    "float(sorted([s, 2], key=lambda v: v)[0])",
]


def _operator_run(seed, wrap):
    r = random.Random(seed)
    expr = OPERATOR_READS[seed % len(OPERATOR_READS)]
    scope = {"Options": Options, "Scalar": Scalar}
    exec(f"def f(x, s, d):\n    return x * ({expr})\n", scope)
    fn = wrap(scope["f"])
    s, d = Scalar(1), Options()
    out = []
    for _ in range(5):
        try:
            out.append(fn(torch.arange(3.0), s, d))
        except Exception as e:  # (eager's own errors: the same error expected)
            out.append(type(e).__name__)
        s.v = r.choice([0, 1, 2, 3])
        d.scale, d.mode = r.choice([1.0, 2.0]), r.choice(["a", "b"])
    return expr, out


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(2 * len(OPERATOR_READS)))
def test_python_operators_read_per_call(seed, mode):
    expr, expected = _operator_run(seed, lambda f: f)
    _, got = _operator_run(seed, lambda f: jitcore.jit(f, cache=mode))
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_same_outcome(g, e, f"{expr}: call {i}")


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_deterministic_flag_read_inside(mode):
    def f(x):
        return x * (2.0 if torch.are_deterministic_algorithms_enabled() else 3.0)

    jf = jitcore.jit(f, cache=mode)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        for flag in (False, True, False):
            torch.use_deterministic_algorithms(flag)
            torch.testing.assert_close(jf(torch.ones(2)), f(torch.ones(2)))
    finally:
        torch.use_deterministic_algorithms(before)


def _count_closure():
    counter = itertools.count(1)

    def f(x):
        return x * next(counter)

    return f, ()


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("make", [lambda: iter([1.0, 2.0]), lambda: (v for v in [3.0, 4.0]), lambda: zip([1.0], [2.0]),
                                  lambda: map(float, [5, 6]), lambda: itertools.cycle([1.0, 2.0])],
                         ids=["list_iterator", "generator", "zip", "map", "cycle"])
def test_iterator_from_outside_is_refused(make, mode):
    """An iterator handed in (or held by a closure) is consumed by each call: the program replayed the first call's
    items and did not advance it (silently); now refused, naming where it came from."""
    def f(x, it):
        for v in it:
            return x * (v if not isinstance(v, tuple) else v[0])
        return x

    with pytest.raises(jitcore.UnsupportedError, match="iterator from outside: args\\[1\\]"):
        jitcore.jit(f, cache=mode)(torch.ones(2), make())
    g, _ = _count_closure()
    with pytest.raises(jitcore.UnsupportedError, match="iterator from outside"):
        jitcore.jit(g, cache=mode)(torch.ones(2))


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("read", ["float(w.sum())", "w[1]", "torch.tensor(w)", "torch.as_tensor(w)",
                                  "torch.from_numpy(w)", "w.shape[0]"])
def test_numpy_array_read_per_call(read, mode):
    """A numpy array from outside: read natively (`w.sum()`, `w[1]`) its values were baked in unguarded (silently
    stale after `w[1] = 7`), `w[1]` (a numpy.float64) made a prologue naming `float64`, and torch.tensor/as_tensor/
    from_numpy of it were refused; its contents are guarded now and it converts to a tensor of its values."""
    np = pytest.importorskip("numpy")
    scope = {"torch": torch}
    exec(f"def f(x, w):\n    return x * {read}\n", scope)
    f = scope["f"]
    jf = jitcore.jit(f, cache=mode)
    w = np.ones(3)
    for step in range(4):
        torch.testing.assert_close(jf(torch.ones(3), w), f(torch.ones(3), w), msg=f"step {step}")
        w[step % 3] = 7.0 + step
    torch.testing.assert_close(jf(torch.ones(3), np.zeros(3, dtype=np.float32)),
                               f(torch.ones(3), np.zeros(3, dtype=np.float32)))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_files_read_from_outside_are_written_to_not_refused_as_iterators(mode, capsys):
    """A file is an iterator over its lines, but code from outside reads it to write to it: logging's last-resort
    handler reads sys.stderr, print(..., file=sys.stderr). Reading one is not refused as an iterator from outside
    (external iterators are: their items would be replayed)."""
    import logging
    import sys

    log = logging.getLogger("jitcore.tests.files")

    def f(x):
        log.warning("called")
        print("sum", file=sys.stderr)
        return x * 2

    jf = jitcore.jit(f, cache=mode)
    for n in (2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(jf(x), f(x))
    assert "sum" in capsys.readouterr().err


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_conjugate_and_negative_bits_of_tensor_arguments(mode):
    """`x.is_conj()` / `torch.is_neg(x)` of an argument (a lazily conjugated view `z.conj()`, or its imaginary part): a
    proxy does not model these bits, so the traced program answered False for every call (a silent wrong branch)
    until the bits read were guarded (guard kind "bits", jitcore/guards/kinds.py)."""
    def f(x):
        return (x * 2 if x.is_conj() else x - 1) + (3 if torch.is_neg(x) else 0)

    z = torch.randn(3, dtype=torch.complex64)
    calls = [z, z.conj(), z, z.conj(), z.conj().imag, z.imag, z.conj().imag]
    jf = jitcore.jit(f, cache=mode)
    for x in calls:
        torch.testing.assert_close(jf(x).resolve_conj().resolve_neg(), f(x).resolve_conj().resolve_neg())
    if mode != "no caching":  # (complex with each bit, then a float dtype: a miss on the signature, then each bit)
        assert jitcore.cache_misses(jf) == 4
        assert "t0.is_neg(): expected True" in jitcore.cache_miss_reasons(jf)[-1]
