"""Fuzzer statement class (tests/fuzz_classes.py): NumPy on tensors inside the function (issue 38 item 6). A variable
goes to numpy (`v.detach().numpy()`, `np.asarray(v.detach())`), through numpy ufuncs, reductions (axis=, keepdims=),
promotions with Python numbers (int / 2 is float64), layout and combining functions, and comes back as a tensor
(`torch.from_numpy`, `torch.as_tensor`); or a write through the array reaches the tensor it came from (they share
memory), or a numpy scalar scales a tensor. Only lines eager accepts are kept (gen.try_lines).
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

UFUNCS = ("np.sin({a})", "np.exp({a})", "np.tanh({a})", "np.abs({a})", "np.sqrt(np.abs({a}))", "np.square({a})",
          "np.maximum({a}, 0)", "np.minimum({a}, 0.5)", "np.floor({a})", "np.sign({a})", "np.log1p(np.abs({a}))",
          "np.where({a} > 0, {a}, 0.5)", "np.clip({a}, -1, 1)", "-{a}", "({a} > 0)", "np.isfinite({a})")
ARITH = ("{a} + 1.5", "{a} * 2", "{a} / 2", "{a} // 2", "2.0 - {a}", "{a} ** 2", "{a} % 3", "{a} + {a}",
         "{a} * np.float32(0.5)", "{a} + np.arange({n})")
REDUCTIONS = ("np.sum({a}{ax})", "np.mean({a}{ax})", "np.max({a}{ax})", "np.min({a}{ax})", "{a}.sum({ax0})",
              "np.std({a}{ax})", "np.var({a}{ax})", "np.prod({a}{ax})", "np.any({a} > 0{ax})", "np.argmax({a}{axi})",
              "np.cumsum({a}{axi})")
LAYOUT = ("np.transpose({a})", "{a}.T", "{a}.reshape(-1)", "np.reshape({a}, ({n}, -1))", "{a}[1:]", "{a}[..., 0]",
          "np.expand_dims({a}, 0)", "np.concatenate([{a}, {a}])", "np.stack([{a}, {a}], axis=-1)",
          "{a} @ {a}.T", "np.ascontiguousarray({a})", "{a}.astype(np.float32)", "np.array({a})",
          "np.zeros_like({a}) + 1", "{a}.ravel()")
WRITES = ("{a}[0] = 2.5", "{a} *= 2", "{a} += 1", "{a}[...] = np.tanh({a})", "{a}[{a} > 0] = 0", "{a}.fill(3)")
BACK = ("torch.from_numpy(np.asarray({e}))", "torch.as_tensor({e})", "torch.tensor({e})")
TO_NUMPY = ("{v}.detach().numpy()", "np.asarray({v}.detach())", "{v}.numpy(force=True)")


def _array(gen, v: str) -> str:
    return gen.rng.choice(TO_NUMPY).format(v=v)


def _axis(gen, v: str) -> tuple[str, str, str]:
    """(`, axis=d[, keepdims=True]`, its positional form for a method, `, axis=d` alone) or empty ones."""
    rank = gen.env[v].dim()
    if rank == 0 or gen.rng.random() < 0.3:
        return "", "", ""
    d = gen.rng.randrange(-rank, rank)
    keep = ", keepdims=True" if gen.rng.random() < 0.3 else ""
    return f", axis={d}{keep}", f"axis={d}{keep}", f", axis={d}"


@statement_class("numpy", 2)
def numpy_round_trip(gen) -> list[str] | None:
    """A tensor through numpy and back, a write through its array, or a numpy scalar scaling a tensor."""
    rng = gen.rng
    v = gen.var(lambda t: t.dtype.is_floating_point or t.dtype in (gen.env["torch"].int64, gen.env["torch"].bool))
    if v is None:
        return None
    name, a = gen.fresh(), gen.fresh()
    lines = ["import numpy as np", f"{a} = {_array(gen, v)}"]
    kind = rng.choices(("ufunc", "arith", "reduce", "layout", "write", "scalar"), weights=(4, 3, 3, 3, 2, 1))[0]
    n = gen.env[v].shape[0] if gen.env[v].dim() else 1
    if kind == "write":  # (into a tensor that requires grad it is refused: eager's autograd would not see it)
        w = gen.var(lambda t: not t.requires_grad and t.dim() > 0 and t.stride().count(0) == 0)
        if w is None:
            return None
        lines = ["import numpy as np", f"{a} = {_array(gen, w)}", rng.choice(WRITES).format(a=a)]
        return [w] if gen.try_lines(lines) else None
    if kind == "scalar":
        lines.append(f"{name} = {v} * np.sum({a})")
        return [name] if gen.try_lines(lines) else None
    if kind == "reduce":
        ax, ax0, axi = _axis(gen, v)
        expr = rng.choice(REDUCTIONS).format(a=a, ax=ax, ax0=ax0, axi=axi)
    else:
        table = {"ufunc": UFUNCS, "arith": ARITH, "layout": LAYOUT}[kind]
        expr = rng.choice(table).format(a=a, n=n)
    if rng.random() < 0.4:  # two steps in numpy
        expr = rng.choice(UFUNCS + ARITH).format(a=f"({expr})", n=n)
    lines.append(f"{name} = {rng.choice(BACK).format(e=expr)}")
    return [name] if gen.try_lines(lines) else None
