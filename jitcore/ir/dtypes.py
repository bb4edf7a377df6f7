"""dtypes: torch's own dtype objects, plus the categories and type promotion the op metas use.

Promotion follows torch exactly: tensors with dims outrank 0-d tensors, which outrank Python numbers, and a
lower-ranked participant only matters when it brings a higher category (bool < int < float < complex).
"""
from __future__ import annotations

import enum

import torch

bool8 = torch.bool
float_dtypes = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
low_precision = (torch.float16, torch.bfloat16)
complex_dtypes = (torch.complex64, torch.complex128)
int_dtypes = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

_SHORT = {
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
    torch.complex64: "c64", torch.complex128: "c128", torch.bool: "b8", torch.uint8: "u8",
    torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
}


def short_name(dtype: torch.dtype) -> str:
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def category(dtype) -> int:
    """0 bool, 1 integer, 2 float, 3 complex (dtype or Python type)."""
    if dtype is bool or dtype is torch.bool:
        return 0
    if dtype is int:
        return 1
    if dtype is float:
        return 2
    if dtype is complex:
        return 3
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def is_float(dtype) -> bool:
    return category(dtype) == 2


def is_inexact(dtype) -> bool:
    return category(dtype) >= 2


def to_real(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def to_complex(dtype: torch.dtype) -> torch.dtype:
    return {torch.float64: torch.complex128}.get(dtype, torch.complex64)


def default_for(category_: int) -> torch.dtype:
    """The dtype a Python number of this category becomes when it decides the result."""
    if category_ == 0:
        return torch.bool
    if category_ == 1:
        return torch.int64
    if category_ == 2:
        return torch.get_default_dtype()
    return to_complex(torch.get_default_dtype())


class Promotion(enum.Enum):
    """How an elementwise op maps its promoted input dtype to its computation and result dtypes."""

    DEFAULT = "default"  # add, mul, where: result is the promoted dtype
    INT_TO_FLOAT = "int_to_float"  # sin, exp, div: integers and bools compute in the default float dtype
    ALWAYS_BOOL = "always_bool"  # comparisons, isnan
    COMPLEX_TO_FLOAT = "complex_to_float"  # abs: complex gives its real dtype
    BOOL_TO_LONG = "bool_to_long"  # sum-like: bool becomes int64
    NO_OPMATH = "no_opmath"  # same as DEFAULT, computed in the input dtype


def _tensor_like(x):
    if isinstance(x, (int, float, complex)):  # bool is an int
        return False
    return hasattr(x, "dtype") and hasattr(x, "shape")


def promote_dtypes(*args) -> torch.dtype:
    """The dtype torch would give for an elementwise op over tensors/proxies and Python numbers."""
    dim_t = zero_t = scalar_t = None
    for a in args:
        if a is None:
            continue
        if _tensor_like(a):
            if len(a.shape) > 0:
                dim_t = _promote(dim_t, a.dtype)
            else:
                zero_t = _promote(zero_t, a.dtype)
        else:
            scalar_t = _promote(scalar_t, default_for(category(python_type_of(a))))
    result = _combine(dim_t, _combine(zero_t, scalar_t))
    if result is None:
        raise ValueError("type promotion needs at least one argument")
    return result


def _promote(a, b):
    return b if a is None else torch.promote_types(a, b)


def _to_complex_keep_width(dtype: torch.dtype) -> torch.dtype:
    return {torch.float16: torch.complex32, torch.float64: torch.complex128}.get(dtype, torch.complex64)


def _combine(higher, lower):
    """Combine the result of a higher-ranked group with a lower-ranked one, as torch's ResultTypeState does."""
    if higher is None:
        return lower
    if lower is None or higher.is_complex:
        return higher
    if lower.is_complex:
        return _to_complex_keep_width(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def python_type_of(x):
    """bool/int/float/complex for a Python number or number proxy."""
    for t in (bool, int, float, complex):
        if isinstance(x, t):
            return t
    pt = getattr(x, "python_type", None)
    if pt is not None:
        return pt
    raise TypeError(f"expected a number, got {type(x).__name__}")


def result_dtypes(kind: Promotion, *args) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) for an elementwise op of promotion `kind` over args."""
    dt = promote_dtypes(*args)
    if kind is Promotion.INT_TO_FLOAT and category(dt) < 2:
        dt = torch.get_default_dtype()
    if kind is Promotion.ALWAYS_BOOL:
        return dt, torch.bool
    if kind is Promotion.COMPLEX_TO_FLOAT:
        return dt, to_real(dt)
    if kind is Promotion.BOOL_TO_LONG and dt is torch.bool:
        return torch.int64, torch.int64
    return dt, dt


def computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision math is done in float32, as torch's kernels do, and rounded once at the end."""
    return torch.float32 if dtype in low_precision else dtype
