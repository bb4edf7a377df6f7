"""Executors (nvFuser): a text-recording stand-in for nvFuser's FusionDefinition. The translator rows call it
exactly as they call the real one, and it writes the nvFuser Python frontend program they would build
(`T2 = fd.ops.add(T0, T1)`), so the lowering is readable and testable without CUDA or nvFuser.
"""
from __future__ import annotations

import math


class TextValue:
    """A value of the recorded program: prints as its name (T0 for tensors, S1 for scalars)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


class _Enum:
    """Stands for nvFuser's DataType: `DataType.Float` prints as itself."""

    def __init__(self, prefix: str):
        self._prefix = prefix

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return TextValue(f"{self._prefix}.{name}")


TextDataType = _Enum("DataType")


def _fmt(x) -> str:
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(e) for e in x) + "]"
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else f"float('{x}')"
    return repr(x)


class _Ops:
    def __init__(self, fd: TextFusion):
        self._fd = fd

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._fd._call(f"fd.ops.{name}", args, kwargs, n_out=_N_OUTPUTS.get(name, 1))


_N_OUTPUTS = {"var_mean": 2}


class TextFusion:
    """Records FusionDefinition calls; `str(fd)` is the program as nvFuser's Python frontend text."""

    def __init__(self):
        self.lines: list[str] = []
        self.ops = _Ops(self)
        self._n = 0

    def _new(self, prefix: str) -> TextValue:
        v = TextValue(f"{prefix}{self._n}")
        self._n += 1
        return v

    def _call(self, callee, args, kwargs, n_out=1, prefix="T"):
        outs = [self._new(prefix) for _ in range(n_out)]
        parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
        self.lines.append(f"{', '.join(o.name for o in outs)} = {callee}({', '.join(parts)})")
        return outs[0] if n_out == 1 else tuple(outs)

    def define_tensor(self, **kwargs) -> TextValue:
        return self._call("fd.define_tensor", (), kwargs)

    def define_scalar(self, value, dtype=None) -> TextValue:
        return self._call("fd.define_scalar", (value,), {"dtype": dtype}, prefix="S")

    def add_output(self, value) -> None:
        self.lines.append(f"fd.add_output({value.name})")

    def __str__(self) -> str:
        return "\n".join(["with FusionDefinition() as fd:"] + [f"    {line}" for line in self.lines]) + "\n"
