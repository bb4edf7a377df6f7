"""Fuzzer statement class (tests/fuzz_classes.py): values of another dtype set into a tensor (issue 38 item 1).
Destinations: arguments, intermediates, intermediates of another dtype made for the write (int64, int32, bool,
float64, float32), views of them; keys: ints, slices, Ellipsis, masks, index tensors; forms: `x[key] = v`,
index_put_, masked_fill_, copy_, fill_; values: Python numbers, 0-dim tensors and tensors of the written region's
shape in another dtype (from inputs that may require grad). Only lines eager accepts are kept (gen.try_lines).
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

CASTS = (".long()", ".int()", ".bool()", ".double()", ".float()", " * 1")
BASIC_KEYS = ("[0]", "[1:]", "[::2]", "[-1]", "[..., 0]", "[:, 1]", "[1, 0]", "[:, :2]", "[...]")
NUMBERS = ("2.5", "-1.75", "3", "True", "0", "0.5")
ZERO_DIM = ("{w}.sum()", "{w}.flatten()[0]", "{w}.mean()", "{w}.amax()")


def _destination(gen):
    """(lines making it, the name written into, the name to report as the statement's result)."""
    rng = gen.rng
    v = gen.var(lambda t: t.dim() > 0)
    if v is None:
        return None
    kind = rng.choice(("existing", "cast", "cast", "view"))
    if kind == "existing":
        return [], v, v
    name = gen.fresh()
    if kind == "cast":
        return [f"{name} = {v}{rng.choice(CASTS)}"], name, name
    view = rng.choice((".t()", ".view(-1)", "[0]", ".unsqueeze(0)", ".transpose(0, -1)"))
    return [f"{name} = {v}{rng.choice(CASTS)}"], f"{name}{view}", name


def _value(gen, dest: str | None = None, key: str = ""):
    """A value expression: a Python number, a 0-dim tensor, or (dest given) a tensor shaped like `dest{key}` (the
    same region of a variable shaped like dest, else of dest itself, detached), each in a dtype drawn independently
    of the destination's."""
    rng = gen.rng
    pick = rng.random()
    if pick < 0.25:
        return rng.choice(NUMBERS)
    cast = rng.choice(CASTS + (".to(torch.float64)", ".half()"))
    if pick < 0.6 or dest is None:
        w = gen.var()
        if w is None or rng.random() < 0.2:
            return f"torch.tensor({rng.choice(NUMBERS)}){cast}"
        return f"({rng.choice(ZERO_DIM).format(w=w)}){cast}"
    target = gen.env.get(dest)  # (None for a view expression)
    w = gen.var(lambda t: target is not None and t.shape == target.shape)
    return f"{w}{key}{cast}" if w else f"{dest}{key}.detach(){cast}"


def _statement(gen, dest: str) -> str:
    rng = gen.rng
    form = rng.choices(("basic", "mask", "index", "index_put_", "masked_fill_", "copy_", "fill_"),
                       weights=(8, 3, 2, 2, 2, 2, 1))[0]
    if form == "basic":
        key = rng.choice(BASIC_KEYS)
        return f"{dest}{key} = {_value(gen, dest, key)}"
    if form == "mask":  # a value of one element (masked_fill_'s path: any dtype) or a number
        return f"{dest}[{dest} > 0] = {_value(gen)}"
    if form == "index":  # an index tensor: eager wants the value's dtype to be dest's (or a number)
        return f"{dest}[torch.tensor([0, -1])] = {_value(gen)}"
    if form == "index_put_":
        index = rng.choice(("torch.tensor([1, 0])", f"{dest} < 0"))
        return f"{dest}.index_put_(({index},), {_value(gen)})"
    if form == "masked_fill_":
        return f"{dest}.masked_fill_({dest} < 0, {_value(gen)})"
    if form == "copy_":
        return f"{dest}.copy_({_value(gen, dest)})"
    return f"{dest}.fill_({_value(gen)})"


@statement_class("setitem_dtype", 3)
def setitem_dtype(gen) -> list[str] | None:
    """A write of a value of another dtype into an argument, an intermediate or a view of one."""
    made = _destination(gen)
    if made is None:
        return None
    lines, dest, name = made
    for _attempt in range(3):
        if gen.try_lines([*lines, _statement(gen, dest)]):
            return [name]
    return None
