"""State that Python reads behind an opcode or inside a builtin, changed between calls, against eager over sequences
of calls in each cache mode. Each was silently the first call's answer before:

- isinstance/issubclass against an ABC a class is registered with later (`Kind.register(Thing)`), a metaclass's
  `__instancecheck__` written in Python, a runtime-checkable Protocol (the attributes it looks for);
- which code a function runs and the defaults filling its parameters (`helper.__code__ = other.__code__`,
  `helper.__defaults__ = (5.0,)`), for a helper and for the jitted function itself;
- builtins and methods iterating a user iterable natively (`dict.fromkeys(o)`, `bytes(o)`, `",".join(o)`,
  `out.extend(o)`, itertools, `math.prod`, `functools.reduce`, `collections.Counter`, `sum(o, 0)`, `dict(mapping)`):
  its Python `__iter__` (or `__getitem__`) ran natively;
- dict and set lookups keyed by objects whose class hashes and compares in Python (`d[key]`, `key in s`, `d.get(k)`),
  and the values of a dict read at a key that is no constant (a dtype, an enum member, a class: `d[x.dtype]`);
- the filesystem and the process read natively (`os.path.exists(p)`, `pathlib.Path(p).is_file()`, `os.listdir(d)`,
  `glob.glob`, `os.getcwd()`), environment variables, what a functools.lru_cache function answers after
  `cache_clear()`, and modules reached through `__import__("sys")` (`sys.argv`);
- the fields of objects that are keys of an outside dict or set (iterated, or compared in a lookup), a
  WeakKeyDictionary's lookups and keys; a key whose hash changed after it was put in is refused (eager's lookups then
  depend on the hash it was stored with);
- an inference tensor that eager's autograd saves for backward: eager's RuntimeError, on every call.

A seeded generator builds a world of such objects, one read of them, and a random sequence of changes made between
calls; every call is compared with eager in each cache mode.
"""
from __future__ import annotations

import abc
import collections
import contextlib
import enum
import functools
import glob
import itertools
import math
import os
import pathlib
import random
import shutil
import sys
import tempfile
import typing
import weakref

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES
from tests.helpers import assert_same_outcome


class Key:
    """A dict/set key whose class hashes and compares in Python, by `self.v`."""

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, Key) and self.v == other.v


class Obj:
    """An object that hashes and compares by identity, with a field: a key whose field the function reads."""

    def __init__(self, v):
        self.v = v


class Items:
    """A user iterable: __iter__ written in Python."""

    def __init__(self, vals):
        self.vals = list(vals)

    def __iter__(self):
        return iter(self.vals)


class OldSequence:
    """Python's older sequence protocol: __getitem__ only."""

    def __init__(self, vals):
        self.vals = list(vals)

    def __getitem__(self, i):
        return self.vals[i]


class Mapping:
    """A mapping dict() and dict.update() read through keys() and __getitem__."""

    def __init__(self):
        self.data = {"a": 1}

    def keys(self):
        return list(self.data)

    def __getitem__(self, k):
        return self.data[k]


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Flagged(type):
    def __instancecheck__(cls, obj):
        return getattr(obj, "flag", False)


class ByFlag(metaclass=Flagged):
    pass


@typing.runtime_checkable
class HasScale(typing.Protocol):
    def scale(self): ...


def _helper(v, s=2.0):
    return v * s


def _other_helper(v, s=2.0):
    return v * s + 3.0


# read name -> an expression over the world `w` (and the module-level helpers) giving a float
READS = {
    "dict_key": "w.table[w.key]",
    "dict_get": "w.table.get(w.key, -1.0)",
    "set_contains": "(2.0 if w.key in w.keys else 3.0)",
    "dict_contains": "(4.0 if w.key in w.table else 5.0)",
    "dtype_key": "w.by_kind[x.dtype] + w.by_kind[Color.RED] + w.by_kind[int]",
    "abc_isinstance": "(2.0 if isinstance(w.thing, Kind) else 3.0)",
    "abc_issubclass": "(2.0 if issubclass(type(w.thing), Kind) else 3.0)",
    "metaclass": "(2.0 if isinstance(w.thing, ByFlag) else 3.0)",
    "protocol": "(2.0 if isinstance(w.thing, HasScale) else 3.0)",
    "helper": "helper(1.5)",
    "fromkeys": "float(len(dict.fromkeys(w.items)))",
    "bytes": "float(sum(bytes(w.items)))",
    "join": "float(len('-'.join(str(v) for v in w.items)) + len(','.join(map(str, w.items))))",
    "extend": "float(sum(_extended(w.items)))",
    "chain": "float(sum(itertools.chain(w.items, w.items)))",
    "prod": "float(math.prod(w.items))",
    "reduce": "float(functools.reduce(lambda a, b: a * 2 + b, w.items, 1))",
    "counter": "float(collections.Counter(w.items).most_common(1)[0][1] if w.items.vals else 0)",
    "sum_start": "float(sum(w.items, 10))",
    "mapping": "float(sum(dict(w.mapping).values()) + len(_updated(w.mapping)))",
    "exists": "(2.0 if os.path.exists(w.path) else 3.0) + (4.0 if pathlib.Path(w.path).is_file() else 5.0)",
    "listdir": "float(len(os.listdir(w.dir)) + 10 * len(glob.glob(os.path.join(w.dir, '*'))))",
    "environ": "float(os.environ.get('JITCORE_TEST_HIDDEN', '1')) + float(os.getenv('JITCORE_TEST_HIDDEN', '2'))",
    "lru_cache": "w.cached(2) + w.cached(3)",
    "lru_cache_objects": "w.cached_obj(w.obj) + w.cached_pair(w.obj, 3)",
    "argv": "float(len(__import__('sys').argv))",
    "object_keys": "float(sum(o.v * val for o, val in w.by_obj.items()) + sum(o.v for o in w.by_obj) * 10 + "
                   "sum(o.v for o in w.obj_set) * 100)",
    "weak_keys": "w.weak.get(Key(1), 0.5) + (2.0 if Key(2) in w.weak else 3.0) + float(sum(k.v for k in w.weak)) + "
                 "w.weak.get(w.weak_held[0], 0.25)",
}


def _extended(o):
    out = [0]
    out.extend(o)
    return out


def _updated(m):
    d = {"z": 0}
    d.update(m)
    return d


def _world(r):
    class Kind(abc.ABC):  # noqa: B024 (an ABC for its registry)
        pass

    class Thing:
        pass

    w = type("World", (), {})()
    w.table = {Key(0): 1.0, Key(1): 2.0, Key(2): 3.0}
    w.keys = {Key(0), Key(2)}
    w.key = Key(r.randrange(3))
    w.thing = Thing()
    w.items = (Items if r.random() < 0.5 else OldSequence)([1, 2])
    w.mapping = Mapping()
    w.by_kind = {torch.float32: 1.0, Color.RED: 2.0, int: 3.0}
    w.dir = tempfile.mkdtemp(prefix="jitcore_hidden_")
    w.path = os.path.join(w.dir, "flag")
    w.state = {"k": 1.0}
    w.cached = functools.lru_cache(maxsize=None)(lambda n: w.state["k"] * n)
    w.obj = Obj(2.0)  # (an lru_cache function's argument: hashed by identity, its field read inside)
    w.cached_obj = functools.lru_cache(maxsize=None)(lambda o: o.v * w.state["k"])
    w.cached_pair = functools.lru_cache(maxsize=None)(lambda o, n: o.v * n)
    w.by_obj = {Obj(1.0): 1.0, Obj(2.0): 2.0}
    w.obj_set = set(w.by_obj)
    w.weak_held = [Key(1), Key(2), Key(3)]  # (alive while the world is)
    w.weak = weakref.WeakKeyDictionary({w.weak_held[0]: 1.0, w.weak_held[1]: 2.0})
    scope = {"Kind": Kind, "ByFlag": ByFlag, "torch": torch, "Color": Color, "HasScale": HasScale,
             "itertools": itertools, "math": math, "functools": functools, "collections": collections,
             "_extended": _extended, "_updated": _updated, "os": os, "pathlib": pathlib, "glob": glob, "Key": Key}
    exec("def helper(v, s=2.0):\n    return v * s\n", scope)
    return w, Kind, Thing, scope


# reads and the change that reaches them, made more often than the others
_TOUCHES = {"exists": "file", "listdir": "file", "environ": "environ", "lru_cache": "lru_cache", "argv": "argv",
            "lru_cache_objects": "lru_cache_objects",
            "object_keys": "object_field", "weak_keys": "weak"}


def _change(r, w, Kind, Thing, scope, read=None):
    """One change made between calls, chosen at random (some do nothing to this read)."""
    what = r.choice(["key", "table", "keys", "register", "flag", "protocol", "code", "defaults", "items", "mapping",
                     "by_kind", "file", "environ", "lru_cache", "lru_cache_objects", "argv", "object_field", "weak",
                     "none"])
    if read in _TOUCHES and r.random() < 0.6:
        what = _TOUCHES[read]
    if what == "key":
        w.key.v = r.randrange(4)
    elif what == "table":
        w.table[Key(r.randrange(4))] = r.choice([7.0, 9.0])
    elif what == "keys":
        w.keys.symmetric_difference_update({Key(r.randrange(4))})
    elif what == "register" and not issubclass(Thing, Kind):
        Kind.register(Thing)
    elif what == "flag":
        w.thing.flag = not getattr(w.thing, "flag", False)
    elif what == "protocol":
        if "scale" in w.thing.__dict__:
            del w.thing.scale
        else:
            w.thing.scale = lambda: 1.0
    elif what == "code":
        helper = scope["helper"]
        helper.__code__ = (_other_helper if helper.__code__ is _helper.__code__ else _helper).__code__
    elif what == "defaults":
        scope["helper"].__defaults__ = (r.choice([2.0, 5.0]),)
    elif what == "items":
        w.items.vals.append(r.randrange(1, 4)) if r.random() < 0.7 else w.items.vals.clear()
    elif what == "mapping":
        w.mapping.data[r.choice("abc")] = r.randrange(5)
    elif what == "by_kind":
        w.by_kind[r.choice([torch.float32, Color.RED, int])] = r.choice([4.0, 8.0])
    elif what == "file":
        if os.path.exists(w.path):
            os.remove(w.path)
        else:
            open(w.path, "w").close()
    elif what == "environ":
        os.environ["JITCORE_TEST_HIDDEN"] = str(r.randrange(5))
    elif what == "lru_cache":
        w.state["k"] = r.choice([1.0, 3.0, 5.0])
        if r.random() < 0.7:  # (without cache_clear(), eager answers from its cache: so must the jitted call)
            w.cached.cache_clear()
    elif what == "lru_cache_objects":
        w.obj.v = r.choice([1.0, 2.0, 4.0]) if r.random() < 0.5 else w.obj.v
        w.state["k"] = r.choice([1.0, 3.0]) if r.random() < 0.5 else w.state["k"]
        for fn in (w.cached_obj, w.cached_pair):
            if r.random() < 0.7:  # (without cache_clear(), eager answers from its cache: so must the jitted call)
                fn.cache_clear()
    elif what == "argv":
        sys.argv.append("-v") if r.random() < 0.6 or len(sys.argv) < 2 else sys.argv.pop()
    elif what == "object_field":  # (a key hashing by identity: its field may change while it is a key)
        r.choice(list(w.by_obj)).v = r.choice([1.0, 4.0, 8.0])
    elif what == "weak":  # (a weak reference keeps the hash its key had: a changed field is no moved key)
        held = r.choice(w.weak_held)
        if r.random() < 0.5:
            held.v = r.randrange(4)
        else:
            w.weak[held] = r.choice([5.0, 6.0])
    return what


def _run(seed, mode):
    """(read, [(change, eager, jitted)...]) for one seeded world, eager and jitted side by side on one world."""
    r = random.Random(seed)
    read = list(READS)[seed % len(READS)]
    w, Kind, Thing, scope = _world(r)
    exec(f"def f(x, w):\n    return x * {READS[read]}\n", scope)
    f = scope["f"]
    jf = jitcore.jit(f, cache=mode)
    steps, what = [], "start"
    argv = list(sys.argv)
    try:
        for _ in range(7):
            x = torch.arange(3.0)
            out = []
            for fn in (f, jf):
                try:
                    out.append(fn(x, w))
                except Exception as e:  # (eager's own errors: the same error expected)
                    out.append(type(e).__name__)
            steps.append((what, *out))
            what = _change(r, w, Kind, Thing, scope, read)
    finally:
        sys.argv[:] = argv
        os.environ.pop("JITCORE_TEST_HIDDEN", None)
        shutil.rmtree(w.dir, ignore_errors=True)
    return read, steps


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(3 * len(READS)))
def test_hidden_reads_between_calls(seed, mode):
    read, steps = _run(seed, mode)
    for i, (_, e, g) in enumerate(steps):
        assert_same_outcome(g, e, f"call {i} after {[s[0] for s in steps[:i + 1]]} (read {read})")


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_jitted_function_code_replaced(mode):
    def f(x):
        return x + 1

    def other(x):
        return x * 10

    jf = jitcore.jit(f, cache=mode)
    torch.testing.assert_close(jf(torch.ones(2)), f(torch.ones(2)))
    f.__code__ = other.__code__
    torch.testing.assert_close(jf(torch.ones(2)), f(torch.ones(2)))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_tensor_text_is_refused(mode):
    """str(x), repr(x), "%s" % x of a tensor inside the function were the proxy's name ('t0'), silently."""
    for fn in (lambda x: str(x), lambda x: repr([x]), lambda x: "%s" % x):  # noqa: UP031
        with pytest.raises(jitcore.errors.DataDependentError, match="to text"):
            jitcore.jit(fn, cache=mode)(torch.ones(2))


def _inference_props(out):
    return [(o.is_inference(), o.requires_grad, o.tolist()) if isinstance(o, torch.Tensor) else o for o in out]


def _made_under_inference_mode(x, b):
    with torch.inference_mode():
        y = x * 2
        z = y[0]  # a view of an inference tensor
        v = x.view(3, 1)  # a view of x: what x is
        b.add_(1)  # a normal tensor written under inference mode: normal
    return y, z, v, b, z.is_inference(), v.is_inference(), (y + 1).is_inference(), x.is_inference()


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_inference_mode_inside(mode):
    """Tensors made under torch.inference_mode() inside the function answer is_inference() and come back as inference
    tensors, as in eager (they were ordinary tensors, silently); an inference tensor argument is guarded."""
    jf = jitcore.jit(_made_under_inference_mode, cache=mode)
    with torch.inference_mode():
        frozen = torch.ones(3)
    for x in (torch.ones(3, requires_grad=True), torch.full((3,), 2.0), frozen, torch.ones(3)):
        b1, b2 = torch.zeros(3), torch.zeros(3)
        assert _inference_props(jf(x, b1)) == _inference_props(_made_under_inference_mode(x, b2))


class _Buffers:
    pass


def _array_programs(kind, holder, arr):
    if kind == "closure":
        def f(x, a):
            t = torch.from_numpy(arr)
            t.add_(x)
            return t * 2
    elif kind == "attribute":
        def f(x, a):
            t = torch.as_tensor(holder.arr)
            t.mul_(2).add_(x)
            return t.sum()
    elif kind == "argument":
        def f(x, a):
            t = torch.from_numpy(a)
            t += x
            return t + 0
    else:  # read natively too, then written through the tensor
        def f(x, a):
            s = float(holder.arr.sum())
            t = torch.from_numpy(holder.arr)
            t += x
            return t * s
    return f


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("kind", ["closure", "attribute", "argument", "native_read"])
def test_numpy_array_written_through_from_numpy(kind, mode):
    """torch.from_numpy(arr) / torch.as_tensor(arr) share arr's memory: a write into the tensor inside the function
    reaches arr (it did not: the tensor was a constant of arr's values), and the caller's writes between calls are
    read. The array is an input fetched per call where it goes straight to the conversion (one compile)."""
    worlds = []
    for _ in range(2):
        holder = _Buffers()
        holder.arr = arr = torch.zeros(3).numpy()
        worlds.append((_array_programs(kind, holder, arr), arr))
    (f, expected_arr), (g, arr) = worlds
    jg = jitcore.jit(g, cache=mode)
    for i in range(4):
        x = torch.full((3,), float(i + 1))
        passed = kind == "argument"  # (an array argument's contents are guarded: it is read from outside)
        torch.testing.assert_close(jg(x, arr if passed else None), f(x, expected_arr if passed else None))
        assert (arr == expected_arr).all(), (i, arr, expected_arr)
        arr[0] += 1
        expected_arr[0] += 1
    if kind in ("closure", "attribute") and mode != "no caching":
        assert jitcore.cache_misses(jg) == 1


def _process_cases(d, path, state, cached):
    def touch():
        open(path, "w").close()

    def remove():
        os.remove(path)

    def clear(v):
        state["k"] = v
        cached.cache_clear()

    def argv(n):
        sys.argv[:] = sys.argv[:1] + ["-v"] * n

    return {
        "exists": (lambda x: x + (1.0 if os.path.exists(path) else 2.0), [touch, remove, touch]),
        "isfile": (lambda x: x + (1.0 if os.path.isfile(path) else 2.0), [touch, remove, touch]),
        "pathlib": (lambda x: x + (1.0 if pathlib.Path(path).exists() else 2.0), [touch, remove, touch]),
        "getsize": (lambda x: x + (os.path.getsize(path) if os.path.exists(path) else -1.0),
                    [touch, lambda: open(path, "w").write("abc"), remove]),
        "listdir": (lambda x: x + len(os.listdir(d)), [touch, remove, touch]),
        "scandir": (lambda x: x + len([e.name for e in os.scandir(d)]), [touch, remove]),
        "walk": (lambda x: x + sum(len(files) for _, _, files in os.walk(d)), [touch, remove]),
        "glob": (lambda x: x + len(glob.glob(os.path.join(d, "*"))), [touch, remove]),
        "getcwd": (lambda x: x + len(os.getcwd()), [lambda: os.chdir(d), lambda: os.chdir("/")]),
        "abspath": (lambda x: x + len(os.path.abspath("name")), [lambda: os.chdir(d), lambda: os.chdir("/")]),
        "environ": (lambda x: x + float(os.environ.get("JITCORE_TEST_PROCESS", "1")),
                    [lambda: os.environ.__setitem__("JITCORE_TEST_PROCESS", "5"),
                     lambda: os.environ.pop("JITCORE_TEST_PROCESS")]),
        "lru_cache": (lambda x: x + cached(2), [lambda: clear(5.0), lambda: state.__setitem__("k", 7.0),
                                                lambda: clear(3.0)]),
        "import_argv": (lambda x: x + len(__import__("sys").argv), [lambda: argv(2), lambda: argv(5)]),
    }


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(_process_cases(*([None] * 4))))
def test_process_state_read_per_call(case, mode, tmp_path):
    """Process state read natively inside the function, changed between calls: the filesystem (exists, isfile,
    pathlib, getsize, listdir, scandir, os.walk, glob), the working directory, environment variables, what an
    lru_cache function answers after cache_clear() (and its cached answer without), sys.argv through __import__. Each
    was the first call's answer before (except the environment, a dict: guarded); now it is read again per call."""
    state = {"k": 1.0}
    cached = functools.lru_cache(maxsize=None)(lambda n: state["k"] * n)
    fn, changes = _process_cases(str(tmp_path), str(tmp_path / "flag"), state, cached)[case]
    jf = jitcore.jit(fn, cache=mode)
    cwd, argv = os.getcwd(), list(sys.argv)
    try:
        for i, change in enumerate([None, *changes]):
            if change is not None:
                change()
            torch.testing.assert_close(jf(torch.zeros(2)), fn(torch.zeros(2)), msg=f"{case}, call {i}")
    finally:
        os.chdir(cwd)
        sys.argv[:] = argv
        os.environ.pop("JITCORE_TEST_PROCESS", None)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("container", ["dict", "set"])
def test_key_changed_after_insertion(container, mode):
    """A key whose class hashes in Python, changed while it is in an outside dict or set: Python's lookups then depend
    on the hash it was stored with, which cannot be read: refused, naming what happened. Put in again, it is read as
    eager reads it. (The lookup was the first call's answer, or a crash, before.)"""
    k = Key(1)
    box = {k: 1.0, Key(2): 2.0} if container == "dict" else {k, Key(2)}

    def f(x):
        return x + (1.0 if Key(1) in box else 2.0) + (3.0 if k in box else 4.0)

    def reinsert(v):
        if container == "dict":
            box[k] = box.pop(k)  # (the stored hash is the one k had: pop finds it by it)
            box.pop(k)
            k.v = v
            box[k] = 1.0
        else:
            box.remove(k)
            k.v = v
            box.add(k)

    jf = jitcore.jit(f, cache=mode)
    torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)))
    k.v = 5
    with pytest.raises(jitcore.errors.UnsupportedError, match="changed after it was put in"):
        jf(torch.zeros(2))
    k.v = 1
    torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)))
    reinsert(7)
    torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)))
    reinsert(1)
    torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)))


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_weak_key_dictionary_between_calls(mode):
    """A WeakKeyDictionary keyed by objects hashing in Python, read by lookup and by iteration, its keys' fields and
    its values changed between calls (a lookup crashed on a dead temporary reference, iteration was refused, and the
    keys' fields were the first call's)."""
    held = [Key(1), Key(2)]
    table = weakref.WeakKeyDictionary({held[0]: 1.0})

    def f(x):
        return x + table.get(Key(1), 0.5) + (2.0 if Key(2) in table else 3.0) + sum(k.v for k in table)

    jf = jitcore.jit(f, cache=mode)
    changes = [lambda: setattr(held[0], "v", 2), lambda: table.__setitem__(held[1], 4.0),
               lambda: setattr(held[0], "v", 1), lambda: table.__setitem__(held[0], 6.0), lambda: table.pop(held[1])]
    for i, change in enumerate([None, *changes]):
        if change is not None:
            change()
        torch.testing.assert_close(jf(torch.zeros(2)), f(torch.zeros(2)), msg=f"call {i}")


_INFERENCE_OPS = {  # op over x (an argument) and w, c (inference tensors): eager's autograd saves w or c for some
    "clamp_min_tensor": lambda x, w, c: torch.clamp(x, min=w),
    "mask_index": lambda x, w, c: x[c],
    "mse_loss": lambda x, w, c: torch.nn.functional.mse_loss(x, w, reduction="none"),
    "mul": lambda x, w, c: x * w,
    "matmul": lambda x, w, c: x @ w,
    "add": lambda x, w, c: x + w,
    "where": lambda x, w, c: torch.where(c, x, w),
    "exp_mul": lambda x, w, c: x * w.exp(),
}


def _outcome(fn, *args):
    try:
        return fn(*args).sum()
    except Exception as e:  # (eager's error: the same expected)
        return type(e).__name__


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(4))
def test_inference_tensor_saved_for_backward(seed, mode):
    """An inference tensor (made under torch.inference_mode() outside) that eager's autograd saves for an op's backward
    makes eager raise RuntimeError; the program's backward saved something else (clamp's mask, the index's positions)
    and answered. Now it raises the same error, on every call that needs the gradient, in each cache mode; calls that
    need none (no_grad, x not requiring grad, ordinary tensors) run. A seeded sequence of such calls per op."""
    r = random.Random(seed)
    with torch.inference_mode():
        frozen_w, frozen_c = torch.rand(3, 3) + 0.5, torch.rand(3, 3) > 0.5
    for name, op in _INFERENCE_OPS.items():
        jf = jitcore.jit(lambda x, w, c, op=op: op(x, w, c), cache=mode)
        for i in range(4):
            grad, frozen, no_grad = r.random() < 0.7, r.random() < 0.7, r.random() < 0.2
            w, c = (frozen_w, frozen_c) if frozen else (frozen_w.clone(), frozen_c.clone())
            x = torch.rand(3, 3, requires_grad=grad)
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                expected, got = _outcome(op, x, w, c), _outcome(jf, x, w, c)
            assert_same_outcome(got, expected, f"{name}, call {i} (grad={grad}, inference={frozen}, no_grad={no_grad})")
