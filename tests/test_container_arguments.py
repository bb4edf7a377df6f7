"""Numbers inside list, tuple and dict arguments that ops read directly (`x.reshape(shape)`, `F.pad(x, pads)`,
`torch.tensor(values)`, `x.sum(dim=d["dims"])`): each is guarded, so a call with other numbers is another call.
Before, only the container's length was: `x.reshape([4, 3])` after `x.reshape([3, 4])` reused the first shape,
silently; so did `x.view(*shape)` and `f(**options)` (the call opcodes unpacked them natively). A seeded
generator writes programs that hand such containers to ops and calls each with several containers of the same
lengths, against eager."""
from __future__ import annotations

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
