"""Executors (nvFuser): THE translator table, op id -> row emitting nvFuser ops on an `fd` object, and the
lowering of a region (sub-Trace) through it. `fd` is either nvFuser's real FusionDefinition or TextFusion, a
stand-in that records the same calls as nvFuser Python frontend text, so CPU tests read exactly what the GPU
path builds. Rows have checkers (dtypes, arguments nvFuser cannot take); an op with no row is not claimed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.symbol import BoundSymbol

# torch dtype -> nvFuser DataType member name
DTYPE_NAMES = {torch.bool: "Bool", torch.int32: "Int32", torch.int64: "Int", torch.float16: "Half",
               torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
               torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}
_SCALAR_DTYPES = {bool: "Bool", int: "Int", float: "Double", complex: "ComplexDouble"}


@dataclass
class Row:
    """How nvFuser runs one prim: emit(lw, *args, **kwargs) -> nvFuser value(s); checker may refuse."""

    emit: Callable
    checker: Callable | None = None


TRANSLATORS: dict[str, Row] = {}


def _row(op_id: str, checker=None):
    def wrap(fn):
        TRANSLATORS[op_id] = Row(fn, checker)
        return fn

    return wrap


# -- elementwise: nvFuser names (prim name -> fd.ops name) ---------------------------------------------------------
_UNARY = {n: n for n in ("abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan",
                         "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sqrt", "rsqrt",
                         "reciprocal", "sigmoid", "erf", "erfc", "erfinv", "lgamma", "digamma", "sign", "floor",
                         "ceil", "round", "trunc", "bitwise_not", "signbit", "isfinite")}
_BINARY = {n: n for n in ("add", "sub", "mul", "div", "remainder", "fmod", "pow", "atan2", "eq", "ne", "lt", "le",
                          "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                          "bitwise_right_shift", "nextafter")}
_BINARY.update(maximum="maximum", minimum="minimum")


def _unary_row(nv_name):
    return lambda lw, a: getattr(lw.fd.ops, nv_name)(lw.value(a))


def _binary_row(nv_name):
    return lambda lw, a, b: getattr(lw.fd.ops, nv_name)(lw.value(a), lw.value(b))


for _p, _nv in _UNARY.items():
    TRANSLATORS[f"prims.{_p}"] = Row(_unary_row(_nv))
for _p, _nv in _BINARY.items():
    TRANSLATORS[f"prims.{_p}"] = Row(_binary_row(_nv))


@_row("prims.where")
def _where(lw, pred, a, b):
    return lw.fd.ops.where(lw.value(pred), lw.value(a), lw.value(b))


@_row("prims.convert_element_type", checker=lambda a, dtype: dtype in DTYPE_NAMES)
def _cast(lw, a, dtype):
    if not isinstance(a, TensorProxy):
        return lw.fd.define_scalar(a, dtype=lw.dtype(dtype))
    return lw.fd.ops.cast(lw.value(a), dtype=lw.dtype(dtype))


@_row("prims.stop_gradient")
def _stop_gradient(lw, a):
    return lw.value(a)


# -- shape ------------------------------------------------------------------------------------------------------------
@_row("prims.broadcast_in_dim")
def _broadcast_in_dim(lw, a, shape, broadcast_dimensions):
    return lw.fd.ops.broadcast_in_dim(lw.value(a), shape=list(shape), broadcast_dims=list(broadcast_dimensions))


@_row("prims.reshape")
def _reshape(lw, a, shape):
    return lw.fd.ops.reshape(lw.value(a), new_shape=list(shape))


@_row("prims.transpose")
def _permute(lw, a, permutation):
    return lw.fd.ops.permute(lw.value(a), dims=list(permutation))


@_row("prims.squeeze")
def _squeeze(lw, a, dims):
    return lw.fd.ops.squeeze(lw.value(a), dims=list(dims))


@_row("prims.slice", checker=lambda a, start_indices, end_indices, strides=None: all(s > 0 for s in (strides or ())))
def _slice(lw, a, start_indices, end_indices, strides=None):
    strides = list(strides) if strides else [1] * len(start_indices)
    return lw.fd.ops.slice(lw.value(a), start_indices=list(start_indices), end_indices=list(end_indices),
                           strides=strides)


@_row("prims.cat")
def _cat(lw, tensors, dim):
    return lw.fd.ops.cat([lw.value(t) for t in tensors], dim=dim)


def _pad_ok(a, padding_value, padding_config):
    return all(interior == 0 and lo >= 0 and hi >= 0 for lo, hi, interior in padding_config)


@_row("prims.pad", checker=_pad_ok)
def _pad(lw, a, padding_value, padding_config):
    widths = [w for lo, hi, _ in reversed(padding_config) for w in (lo, hi)]
    return lw.fd.ops.pad(lw.value(a), widths, lw.scalar(padding_value, a.dtype))


# -- reductions: nvFuser keeps dims sorted; dims=() would mean "none" for us and is refused -----------------------
def _dims_ok(a, dims, **kw):
    return len(dims) > 0


def _reduction_row(nv_name):
    def emit(lw, a, dims):
        return getattr(lw.fd.ops, nv_name)(lw.value(a), dims=sorted(dims), keepdim=False, dtype=lw.null_dtype())

    return emit


for _p, _nv in {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}.items():
    TRANSLATORS[f"prims.{_p}"] = Row(_reduction_row(_nv), _dims_ok)


@_row("prims.var", checker=_dims_ok)
def _var(lw, a, dims, *, correction):
    return lw.fd.ops.var(lw.value(a), dims=sorted(dims), correction=correction, keepdim=False)


@_row("prims.var_mean", checker=_dims_ok)
def _var_mean(lw, a, dims, *, correction):
    return lw.fd.ops.var_mean(lw.value(a), dims=sorted(dims), correction=correction, keepdim=False)


# -- creation, indexing, matmul -------------------------------------------------------------------------------------
@_row("prims.full", checker=lambda shape, fill_value, *, device, dtype: dtype in DTYPE_NAMES)
def _full(lw, shape, fill_value, *, device, dtype):
    return lw.fd.ops.full(shape=list(shape), fill_value=lw.scalar(fill_value, dtype), dtype=lw.dtype(dtype))


@_row("prims.iota", checker=lambda length, *, start, step, device, dtype: dtype in (torch.int32, torch.int64))
def _iota(lw, length, *, start, step, device, dtype):
    return lw.fd.ops.iota(lw.scalar(length, torch.int64), lw.scalar(start, dtype), lw.scalar(step, dtype),
                          dtype=lw.dtype(dtype))


@_row("prims.take")
def _take(lw, a, index, dim):
    return lw.fd.ops.index_select(lw.value(a), lw.value(index), dim)


@_row("prims.take_along_axis")
def _take_along_axis(lw, a, index, dim):
    return lw.fd.ops.take_along_axis(lw.value(a), lw.value(index), dim)


@_row("prims.matmul", checker=lambda a, b: a.ndim >= 1 and b.ndim >= 1)
def _matmul(lw, a, b):
    return lw.fd.ops.matmul(lw.value(a), lw.value(b))


@_row("prims.linear")
def _linear(lw, a, w, bias):
    if bias is None:
        return lw.fd.ops.linear(lw.value(a), lw.value(w))
    return lw.fd.ops.linear(lw.value(a), lw.value(w), lw.value(bias))


# -- the lowering --------------------------------------------------------------------------------------------------
def translatable(bsym: BoundSymbol) -> bool:
    """Whether every prim in the line's decomposition has a row whose checker accepts it."""
    row = TRANSLATORS.get(bsym.sym.id)
    if row is not None:
        if row.checker is None:
            return True
        try:
            return bool(row.checker(*bsym.args, **bsym.kwargs))
        except Exception:
            return False
    return bool(bsym.subsymbols) and all(translatable(s) for s in bsym.subsymbols)


def prim_lines(bsym: BoundSymbol) -> list:
    """The lines to translate: the line itself when it has a row, else its decomposition, recursively."""
    if bsym.sym.id in TRANSLATORS:
        return [bsym]
    return [p for s in bsym.subsymbols for p in prim_lines(s)]


def tensor_signature(t) -> tuple:
    """(dtype, shape with -1 for sizes other than 1, contiguity, is_cpu) of a tensor or TensorProxy (contiguous)."""
    shape = tuple(t.shape)
    strides = tuple(t.stride()) if isinstance(t, torch.Tensor) else None
    is_cpu = t.device.type == "cpu"
    return t.dtype, tuple(1 if s == 1 else -1 for s in shape), contiguity(shape, strides), is_cpu


def contiguity(shape, strides) -> tuple:
    """nvFuser's per-dim contiguity: None for size-1 dims; True where a dim is dense over the next kept dim."""
    if strides is None:
        return tuple(None if s == 1 else True for s in shape)
    out, expected = [], 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size == 1:
            out.append(None)
            continue
        out.append(stride == expected)
        expected = stride * size
    return tuple(reversed(out))


class Lowering:
    """State of one translation: the fd, nvFuser's DataType (real or text), and proxy name -> nvFuser value."""

    def __init__(self, fd, datatype):
        self.fd, self.datatype = fd, datatype
        self.values: dict[str, object] = {}

    def dtype(self, torch_dtype):
        return getattr(self.datatype, DTYPE_NAMES[torch_dtype])

    def null_dtype(self):
        return self.datatype.Null

    def scalar(self, x, torch_dtype=None):
        if isinstance(x, Proxy):
            return self.values[x.name]
        if torch_dtype is not None and not isinstance(x, bool):
            kind = complex if torch_dtype.is_complex else float if torch_dtype.is_floating_point else type(x)
            return self.fd.define_scalar(kind(x), dtype=getattr(self.datatype, _SCALAR_DTYPES[kind]))
        return self.fd.define_scalar(x, dtype=getattr(self.datatype, _SCALAR_DTYPES[type(x)]))

    def value(self, x):
        if isinstance(x, Proxy):
            return self.values[x.name]
        return self.scalar(x)

    def define_input(self, proxy, signature):
        dtype, shape, contig, is_cpu = signature
        self.values[proxy.name] = self.fd.define_tensor(shape=list(shape), contiguity=list(contig),
                                                        dtype=self.dtype(dtype), is_cpu=is_cpu)

    def bind(self, output, nv_out):
        outs = output if isinstance(output, (tuple, list)) else (output,)
        nvs = nv_out if isinstance(nv_out, (tuple, list)) else (nv_out,)
        for o, v in zip(outs, nvs):
            if isinstance(o, Proxy):
                self.values[o.name] = v


def lower_region(sub, fd, datatype, signatures=None) -> None:
    """Define the region `sub` (a Trace) on `fd`: inputs, one row call per prim, outputs."""
    lw = Lowering(fd, datatype)
    for i, a in enumerate(sub.args):
        lw.define_input(a, signatures[i] if signatures else tensor_signature(a))
    for line in sub.bound_symbols:
        for p in prim_lines(line):
            lw.bind(p.output, TRANSLATORS[p.sym.id].emit(lw, *p.args, **p.kwargs))
    outs = sub.output if isinstance(sub.output, tuple) else (sub.output,)
    for o in outs:
        fd.add_output(lw.values[o.name])
