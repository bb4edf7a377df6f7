"""Numbers inside list, tuple and dict arguments that ops read directly (`x.reshape(shape)`, `F.pad(x, pads)`,
`torch.tensor(values)`, `x.sum(dim=d["dims"])`): each is guarded, so a call with other numbers is another call.
Before, only the container's length was: `x.reshape([4, 3])` after `x.reshape([3, 4])` reused the first shape,
silently; so did `x.view(*shape)` and `f(**options)` (the call opcodes unpacked them natively). A seeded
generator writes programs that hand such containers to ops and calls each with several containers of the same
lengths, against eager."""
from __future__ import annotations

import abc
import collections
import collections.abc
import math
import random

import pytest
import torch
import torch.nn.functional as F

import jitcore
from tests.fuzz import CACHE_MODES

# (statement over x (a 2-d tensor of 12 elements) and the argument `a`, the argument's maker from a Random)
TEMPLATES = [
    ("y = x.reshape(a)", lambda r: r.choice([[3, 4], [4, 3], [2, 6], [6, 2], [12, 1]])),
    ("y = x.reshape(-1).view(*a)", lambda r: r.choice([(3, 4), (4, 3), (2, 6)])),
    ("y = x.permute(a)", lambda r: r.choice([[0, 1], [1, 0]])),
    ("y = x.sum(dim=a)", lambda r: r.choice([[0], [1], [0, 1], (1,)])),
    ("y = F.pad(x, a)", lambda r: [r.randrange(3) for _ in range(2 * r.choice([1, 2]))]),
    ("y = x + torch.tensor(a)", lambda r: [r.uniform(-2, 2) for _ in range(4)]),
    ("y = x.repeat(a)", lambda r: [r.randrange(1, 3), r.randrange(1, 3)]),
    ("y = x.flip(a)", lambda r: r.choice([[0], [1], [0, 1]])),
    ("y = torch.roll(x, a['shifts'], a['dims'])", lambda r: {"shifts": [r.randrange(-3, 4)], "dims": [r.randrange(2)]}),
    ("y = x.narrow(a[0], a[1], a[2])", lambda r: [0, r.randrange(2), 1 + r.randrange(2)]),
    ("y = x.new_full(a['size'], a['fill'])", lambda r: {"size": [r.randrange(1, 4), 2], "fill": r.choice([1.5, -2.0])}),
    ("y = x.split(a, 1)[0]", lambda r: r.choice([[1, 3], [2, 2], [3, 1]])),
    ("y = torch.tensor(a).sum() * x", lambda r: [[r.uniform(-1, 1), r.uniform(-1, 1)], [r.uniform(-1, 1), 0.5]]),
    ("y = x.clamp(*a)", lambda r: (r.uniform(-1, 0), r.uniform(0, 1))),
    # unpacked into calls: `*a` of a list and `**a` of a dict, read natively by the call opcodes
    ("y = x.reshape(-1).view(*a)", lambda r: r.choice([[3, 4], [4, 3], [2, 6]])),
    ("y = torch.zeros(*a) + x.sum()", lambda r: r.choice([[3, 4], [4, 3], [2, 6]])),
    ("y = x.reshape(-1).view(*a[1:], a[0])", lambda r: r.choice([[3, 4], [4, 3], [2, 6]])),
    ("y = _scaled(x, **a)", lambda r: {"scale": r.uniform(-2, 2), "shift": r.choice([0.0, 1.0])}),
    ("y = _scaled(x, **{**a, 'shift': 0.5})", lambda r: {"scale": r.uniform(-2, 2)}),
]


def _scaled(x, scale, shift=0.0):
    return x * scale + shift


def _program(seed: int):
    r = random.Random(seed)
    statement, make = TEMPLATES[seed % len(TEMPLATES)]
    source = f"def f(x, a):\n    {statement}\n    return y * 2\n"
    scope = {"torch": torch, "F": F, "_scaled": _scaled}
    exec(compile(source, f"<container program {seed}>", "exec"), scope)
    return scope["f"], source, [make(r) for _ in range(5)]


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(2 * len(TEMPLATES)))
def test_numbers_in_container_arguments_are_guarded(seed, mode):
    fn, source, arguments = _program(seed)
    jfn = jitcore.jit(fn, cache=mode)
    x = torch.arange(12.0).reshape(3, 4)
    for a in arguments:
        try:
            expected = fn(x, a)
        except Exception:
            continue
        torch.testing.assert_close(jfn(x, a), expected, msg=lambda m, a=a: f"{source}with a={a!r}: {m}")


# Python reading a list argument: by item, whole (compared, searched, concatenated, copied) or through builtins
READS = ["sum(a)", "max(a)", "sorted(a)[0]", "math.prod(a)", "a.index(max(a))", "a.count(a[0])", "(3 in a) * 1.0",
         "any(v > 2 for v in a) * 1.0", "sum(i * v for i, v in enumerate(a))", "float(a == [1, 2, 3])",
         "float([1, 2, 3] != a)", "a[::-1][0]", "sum(a[1:])", "(a + [5])[-2]", "(a * 2)[4]", "float(a < [2])",
         "a.copy()[2]", "([0] + a)[1]", "str(a).count('2')", "sum(dict(zip('abc', a)).values())"]


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@pytest.mark.parametrize("read", READS)
def test_a_list_argument_read_whole_is_guarded(read, mode):
    import math

    scope = {"math": math}
    exec(compile(f"def f(x, a):\n    return x * ({read})\n", "<read>", "exec"), scope)
    fn = scope["f"]
    jfn = jitcore.jit(fn, cache=mode)
    x = torch.ones(2)
    for a in ([1, 2, 3], [3, 1, 2], [0, 5, 2], [1, 2, 3]):
        torch.testing.assert_close(jfn(x, list(a)), fn(x, list(a)), msg=lambda m, a=a: f"{read} with a={a}: {m}")


# A container argument's type: only its length (a dict's keys) was guarded, so a tuple after a list of the same
# length, an OrderedDict or defaultdict after a dict, or a set after a list reused the first call's answer to
# `isinstance(xs, list)`, `type(d) is dict`, `isinstance(xs, Sequence)` silently.
class Pair(tuple):
    pass


class Record(dict):
    pass


def _containers(t: torch.Tensor) -> dict:
    return {
        "list": [t, t], "tuple": (t, t), "tuple subclass": Pair((t, t)), "namedtuple": torch.return_types.max((t, t)),
        "dict": {0: t, 1: t}, "OrderedDict": collections.OrderedDict({0: t, 1: t}),
        "defaultdict": collections.defaultdict(int, {0: t, 1: t}), "dict subclass": Record({0: t, 1: t}),
        "set": {0, 1}, "frozenset": frozenset({0, 1}), "range": range(2),
    }


TYPE_READS = {
    "isinstance list": "2 if isinstance(c, list) else 3",
    "isinstance tuple": "2 if isinstance(c, tuple) else 3",
    "isinstance dict": "2 if isinstance(c, dict) else 3",
    "isinstance Sequence": "2 if isinstance(c, collections.abc.Sequence) else 3",
    "isinstance Mapping": "2 if isinstance(c, collections.abc.Mapping) else 3",
    "type is": "2 if type(c) in (list, dict) else 3",
    "type name": "len(type(c).__name__)",
}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("read", sorted(TYPE_READS))
def test_container_argument_type_is_guarded(read, mode):
    scope = {"collections": collections}
    exec(f"def f(x, c):\n    return x * ({TYPE_READS[read]}) + len(c)\n", scope)
    f = scope["f"]
    jf = jitcore.jit(f, cache=mode)
    r = random.Random(read)
    kinds = list(_containers(torch.ones(1)))
    for i in range(12):
        kind = r.choice(kinds)
        x = torch.arange(3.0)
        c = _containers(x[:1])[kind]
        torch.testing.assert_close(jf(x, c), f(x, c), msg=lambda m, i=i, kind=kind: f"call {i} ({kind}): {m}")


def test_abc_registration_while_tracing_is_the_registry_the_guard_reads():
    """An ABC registration while the function is traced (here in the function; a lazy import of torch._dynamo by the
    first meta kernel, in practice) after an `isinstance` against an ABC: the guard kept the token read before it,
    and the first call failed ("a fresh prologue rejected its own call")."""
    class Base(abc.ABC):  # noqa: B024  (an ABC only to register classes with)
        pass

    class Registered:
        pass

    def f(x, items):
        seq = isinstance(items, collections.abc.Sequence)
        Base.register(Registered)
        return x * (2 if seq else 3)

    jf = jitcore.jit(f)
    for items in ([1], (1,), {1}, [1]):
        torch.testing.assert_close(jf(torch.ones(1), items), f(torch.ones(1), items))


# Values `==` finds equal that eager tells apart: 1, 1.0 and True as dict keys, tuple or set items, and 0.0 / -0.0 as
# a float (an argument, or concretized under symbolic values by str()). Their guards compared with `==`: the first
# call's answer to `isinstance(k, float)`, `str(v)` or `1 / v` was reused silently.
EQUAL_VALUES = {
    "dict keys": ([{1: 0}, {1.0: 0}, {True: 0}, {1: 0}], "sum(2 if isinstance(k, float) else 3 for k in c)"),
    "tuple items": ([(1, 2), (1.0, 2), (True, 2), (1, 2.0)], "sum(len(type(k).__name__) for k in c)"),
    "set items": ([{1, 2}, {1.0, 2}, {True, 2}, {1, 2}], "sum(len(type(k).__name__) for k in c)"),
    "signed zero": ([0.0, -0.0, 0.0, -0.0], "len(str(c)) + math.copysign(1.0, c)"),
    "signed zero in a tuple": ([(0.0,), (-0.0,), (0.0,)], "math.copysign(1.0, c[0])"),
}


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("case", sorted(EQUAL_VALUES))
def test_values_equal_under_eq_but_not_to_eager(case, mode):
    values, read = EQUAL_VALUES[case]
    scope = {"math": math}
    exec(f"def f(x, c):\n    return x * ({read})\n", scope)
    f = scope["f"]
    jf = jitcore.jit(f, cache=mode)
    for i, c in enumerate(values * 2):
        x = torch.arange(3.0)
        torch.testing.assert_close(jf(x, c), f(x, c), msg=lambda m, i=i, c=c: f"call {i} ({c!r}): {m}")
