"""Executors: the torch executor. A torch kernel for every prim (KERNELS, keyed by op id), and a direct call of
the torch function for every torch-level op that names one (faster than its decomposition, eager's numerics).

It also fills jitcore.ir.symbol.EAGER_KERNELS, so printed traces over prims run as plain Python programs.
"""
from __future__ import annotations

import math

import torch

import jitcore.ops  # noqa: F401  (registers every op)
from executors.base import FusionExecutor, OperatorExecutor, no_meta
from executors.regions import boxed_region_line
from jitcore import compat
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import EAGER_KERNELS, BoundSymbol, Tag
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import LTORCH, PRIMS
from jitcore.ops.torch_map import torch_path


class TorchExecutor(OperatorExecutor):
    """The torch executor: its table (implmap) is filled below from KERNELS, DIRECT_OVERRIDES and the torch-level
    ops that name a torch function; it also runs every opaque op (a torch callable, which runs as it prints)."""

    def can_execute(self, bsym: BoundSymbol) -> bool:
        return _is_opaque(bsym) or (super().can_execute(bsym) and not _draws_in_own_order(bsym))

    def traceable_line(self, bsym: BoundSymbol) -> BoundSymbol:
        """The line running bsym with the op's one torch kernel: what a fusion executor's region body is made of
        (the kernels chosen by input are tuned for eager execution, and graph compilers do better without them)."""
        # an opaque op already is the torch call; it runs as it prints
        return bsym if _is_opaque(bsym) else super().execute(bsym)

    def execute(self, bsym: BoundSymbol) -> BoundSymbol:
        choose = BY_INPUT.get(bsym.sym.id)
        chosen = choose(bsym) if choose is not None else None
        return chosen if chosen is not None else self.traceable_line(bsym)

    # -- the memory passes' questions (see Executor and transforms/memory.py) -----------------------------------
    def out_form(self, bsym: BoundSymbol):
        return out_form(bsym)

    def makes_fresh(self, bsym: BoundSymbol) -> bool:
        return makes_fresh(bsym)

    def reads_dense(self, bsym: BoundSymbol) -> bool:
        return bsym.sym.id in DENSE_READERS

    def is_view_line(self, bsym: BoundSymbol) -> bool:
        return bsym.sym.id in VIEW_LINES

    def densify_line(self, a: TensorProxy, output: TensorProxy) -> BoundSymbol:
        line = densify.bind(a, output=output)
        line.claimed_by = self
        return line

    def write_form(self, bsym: BoundSymbol, targets: dict) -> BoundSymbol | None:
        return write_form(bsym, targets)


torch_ex = TorchExecutor("torch", namespace_name="torchex")


class TorchLinesFusionExecutor(FusionExecutor):
    """A fusion executor whose claimed lines run the torch executor's kernels (inductor, nvFuser): a line of it
    left unfused is a torch executor line, so the torch executor answers the memory passes' questions about it; a
    fused region's line gets the Executor defaults (no reuse, nothing known fresh, no dense reads, no view)."""

    def execute(self, bsym: BoundSymbol) -> BoundSymbol:
        line = torch_ex.traceable_line(bsym)
        line = line.from_bsym() if line is bsym else line  # an opaque line runs as it prints: mark a copy
        line.executor = self.name
        return line

    def _torch_line(self, bsym: BoundSymbol) -> bool:
        return bsym.region_trace is None

    def out_form(self, bsym: BoundSymbol):
        return torch_ex.out_form(bsym) if self._torch_line(bsym) else None

    def makes_fresh(self, bsym: BoundSymbol) -> bool:
        return self._torch_line(bsym) and torch_ex.makes_fresh(bsym)

    def reads_dense(self, bsym: BoundSymbol) -> bool:
        return self._torch_line(bsym) and torch_ex.reads_dense(bsym)

    def is_view_line(self, bsym: BoundSymbol) -> bool:
        return self._torch_line(bsym) and torch_ex.is_view_line(bsym)

    def densify_line(self, a: TensorProxy, output: TensorProxy) -> BoundSymbol:
        return torch_ex.densify_line(a, output)

    def boxed_form(self, bsym: BoundSymbol, dead: list) -> BoundSymbol | None:
        return None if self._torch_line(bsym) else boxed_region_line(bsym, dead)

    def write_form(self, bsym: BoundSymbol, targets: dict) -> BoundSymbol | None:
        return torch_ex.write_form(bsym, targets) if self._torch_line(bsym) else None


# -- kernels that are not a torch function of the same signature -------------------------------------------------
def _div(a, b):
    if isinstance(a, torch.Tensor) and not (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.div(a, b, rounding_mode="trunc")
    if isinstance(b, torch.Tensor) and not (b.dtype.is_floating_point or b.dtype.is_complex):
        return torch.div(a, b, rounding_mode="trunc")
    return torch.true_divide(a, b)


def _where(pred, a, b):
    return torch.where(pred, a, b)


def _convert_element_type(a, dtype):
    return a.to(dtype)


def _device_put(a, device):
    return a.to(device)


def _broadcast_in_dim(a, shape, broadcast_dimensions):
    if len(broadcast_dimensions) == len(shape):  # same rank: the dims map in order, size-1 dims grow
        return a.expand(shape)
    view_shape = [1] * len(shape)
    for n, d in zip(a.shape, broadcast_dimensions):
        view_shape[d] = n
    return a.reshape(view_shape).expand(shape)


# -- shape --------------------------------------------------------------------------------------------------------
_INDEXES: dict = {}  # (start, end, strides) -> the tuple of slices (a program's lines repeat theirs on every call)


def _slice(a, start_indices, end_indices, strides=None):
    key = (start_indices, end_indices, strides)
    try:
        index = _INDEXES.get(key)
    except TypeError:  # (bounds given as lists)
        key, index = None, None
    if index is None:
        steps = strides or (1,) * len(start_indices)
        index = tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, steps))
        if key is not None:
            if len(_INDEXES) > 4096:  # (symbolic sizes: new bounds on every call)
                _INDEXES.clear()
            _INDEXES[key] = index
    return a[index]


def _pad(a, padding_value, padding_config):
    """lax.pad semantics: (lo, hi, interior) per dim; negative lo/hi crop after interior padding."""
    if all(interior == 0 for _, _, interior in padding_config):
        flat = [p for lo, hi, _ in reversed(padding_config) for p in (lo, hi)]
        return torch.constant_pad_nd(a, flat, padding_value)
    grown, place, crop = [], [], []
    for n, (lo, hi, interior) in zip(a.shape, padding_config):
        size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * interior
        grown.append(size)
        place.append(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (interior + 1) + min(n, 1), interior + 1))
        crop.append(slice(max(-lo, 0), size - max(-hi, 0)))
    out = torch.full(grown, padding_value, dtype=a.dtype, device=a.device)
    out[tuple(place)] = a
    return out[tuple(crop)]


# -- reductions: dims=() reduces nothing (torch reads an empty dim list as "all dims") ------------------------------
def _sum(a, dims):
    if not dims:
        return torch.sum(a.unsqueeze(-1), -1, dtype=a.dtype)
    if a.is_floating_point():  # keeps its dtype without being told (integers and bools would become int64)
        return torch.sum(a, dims)
    return torch.sum(a, dims, dtype=a.dtype)


def _prod(a, dims):
    if not dims:
        return torch.prod(a.unsqueeze(-1), -1, dtype=a.dtype)
    if len(dims) == a.ndim:
        return torch.prod(a, dtype=a.dtype)
    if len(dims) == 1:
        return torch.prod(a, dims[0], dtype=a.dtype)
    kept = [d for d in range(a.ndim) if d not in dims]
    moved = a.permute(kept + list(dims)).reshape([a.shape[d] for d in kept] + [-1])
    return torch.prod(moved, -1, dtype=a.dtype)


def _amax(a, dims):
    return torch.amax(a, dims) if dims else a.clone()


def _amin(a, dims):
    return torch.amin(a, dims) if dims else a.clone()


def _var(a, dims, *, correction):
    return torch.var(a, dims, correction=correction) if dims else torch.var(a.unsqueeze(-1), -1, correction=correction)


def _var_mean(a, dims, *, correction):
    if not dims:
        return torch.var_mean(a.unsqueeze(-1), -1, correction=correction)
    return torch.var_mean(a, dims, correction=correction)


def _sort(a, dim, descending, stable):
    return torch.sort(a, dim=dim, descending=descending, stable=stable)


def _cumsum(a, dim):
    return torch.cumsum(a, dim, dtype=a.dtype)


def _cumprod(a, dim):
    return torch.cumprod(a, dim, dtype=a.dtype)


# -- indexing: torch puts dim before index ---------------------------------------------------------------------------
def _take(a, index, dim):
    return torch.index_select(a, dim, index)


def _take_along_axis(a, index, dim):
    return torch.gather(a, dim, index)


def _scatter(a, index, src, dim):
    return torch.scatter(a, dim, index, src)


def _scatter_add(a, index, src, dim):
    return torch.scatter_add(a, dim, index, src)


def _nonzero(a):
    rows = torch.nonzero(a)
    return rows, rows.shape[0]


def _item_as_size(a):
    n = int(a.item())
    if n < 0:
        raise RuntimeError(f"a size computed from a tensor's value is negative ({n})")
    return n


def _index_add(a, index, source, dim):
    return torch.index_add(a, dim, index, source)


def _index_put(a, indices, values, accumulate):
    # torch.index_put's Python binding refuses None entries; the aten op takes them
    return torch.ops.aten.index_put.default(a, list(indices), values, accumulate)


# -- creation ---------------------------------------------------------------------------------------------------------
def _iota(length, *, start, step, device, dtype):
    acc = torch.float64 if dtype.is_floating_point else torch.complex128 if dtype.is_complex else torch.int64
    return (torch.arange(length, device=device, dtype=acc) * step + start).to(dtype)


def _uniform(shape, minval, maxval, *, device, dtype, generator=None):
    return torch.empty(shape, device=device, dtype=dtype).uniform_(minval, maxval, generator=generator)


def _normal(shape, mean, std, *, device, dtype, generator=None):
    return torch.empty(shape, device=device, dtype=dtype).normal_(mean, std, generator=generator)


def _normal_serial(shape, mean, std, *, device, dtype, generator=None):
    n = math.prod(shape)  # every other element of a buffer: not contiguous, so normal_ draws element by element
    return torch.empty(2 * n, device=device, dtype=dtype)[::2].normal_(mean, std, generator=generator).reshape(shape)


def _bernoulli(shape, p, *, device, dtype, generator=None):
    return torch.empty(shape, device=device, dtype=dtype).bernoulli_(p, generator=generator)


def _bernoulli_tensor(prob, shape, *, dtype, generator=None):
    return torch.empty(shape, device=prob.device, dtype=dtype).bernoulli_(prob, generator=generator)


def _sample(kind, shape, params, *, device, dtype, generator=None):
    return getattr(torch.empty(shape, device=device, dtype=dtype), kind + "_")(*params, generator=generator)


# -- misc -------------------------------------------------------------------------------------------------------------
def _shape(a):
    return tuple(a.shape)


def _inference_tensor(a):
    with torch.inference_mode():
        return a.clone()


def _no_grad_update(dst, values):
    return values


def _copy_(src, dst):
    return dst.copy_(src)


# collectives (jitcore/ops/prims_distributed.py): torch's functional collectives, on contiguous tensors as c10d's
def _all_reduce(a, reduce_op, group_name):
    return torch.ops._c10d_functional.all_reduce(a.contiguous(), reduce_op, group_name)


def _all_gather_into_tensor(a, group_size, group_name):
    return torch.ops._c10d_functional.all_gather_into_tensor(a.contiguous(), group_size, group_name)


def _reduce_scatter_tensor(a, reduce_op, group_size, group_name):
    return torch.ops._c10d_functional.reduce_scatter_tensor(a.contiguous(), reduce_op, group_size, group_name)


def _wait_tensor(a):
    return torch.ops._c10d_functional.wait_tensor(a)


def _as_tensor_pair(name, fn, promote=False):
    """A binary torch function that takes only tensors, accepting a Python number on either side (as a 0-d
    tensor of the other side's dtype, or of the promoted dtype when `promote`)."""

    def kernel(a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.scalar_tensor(a, dtype=torch.result_type(a, b) if promote else b.dtype, device=b.device)
        if not isinstance(b, torch.Tensor):
            b = torch.scalar_tensor(b, dtype=torch.result_type(a, b) if promote else a.dtype, device=a.device)
        return fn(a, b)

    kernel.__name__ = name
    return kernel


# op id -> kernel over real tensors (a public torch function prints as itself, e.g. torch.add)
KERNELS: dict = {
    "prims.abs": torch.abs, "prims.neg": torch.neg, "prims.exp": torch.exp, "prims.exp2": torch.exp2,
    "prims.expm1": torch.expm1, "prims.log": torch.log, "prims.log1p": torch.log1p, "prims.log2": torch.log2,
    "prims.log10": torch.log10, "prims.sin": torch.sin, "prims.cos": torch.cos, "prims.tan": torch.tan,
    "prims.asin": torch.asin, "prims.acos": torch.acos, "prims.atan": torch.atan, "prims.sinh": torch.sinh,
    "prims.cosh": torch.cosh, "prims.tanh": torch.tanh, "prims.asinh": torch.asinh, "prims.acosh": torch.acosh,
    "prims.atanh": torch.atanh, "prims.sqrt": torch.sqrt, "prims.rsqrt": torch.rsqrt,
    "prims.reciprocal": torch.reciprocal, "prims.sigmoid": torch.sigmoid, "prims.erf": torch.erf,
    "prims.erfc": torch.erfc, "prims.erfinv": torch.erfinv, "prims.lgamma": torch.lgamma,
    "prims.digamma": torch.digamma, "prims.sign": torch.sign, "prims.floor": torch.floor, "prims.ceil": torch.ceil,
    "prims.round": torch.round, "prims.trunc": torch.trunc, "prims.bitwise_not": torch.bitwise_not,
    "prims.signbit": torch.signbit, "prims.isfinite": torch.isfinite,
    "prims.add": torch.add, "prims.sub": torch.sub, "prims.mul": torch.mul, "prims.div": _div,
    "prims.remainder": torch.remainder, "prims.fmod": _as_tensor_pair("fmod", torch.fmod), "prims.pow": torch.pow,
    "prims.atan2": _as_tensor_pair("atan2", torch.atan2), "prims.maximum": _as_tensor_pair("maximum", torch.maximum),
    "prims.minimum": _as_tensor_pair("minimum", torch.minimum),
    "prims.copysign": _as_tensor_pair("copysign", torch.copysign),
    "prims.nextafter": _as_tensor_pair("nextafter", torch.nextafter),
    "prims.bitwise_and": _as_tensor_pair("bitwise_and", torch.bitwise_and),
    "prims.bitwise_or": _as_tensor_pair("bitwise_or", torch.bitwise_or),
    "prims.bitwise_xor": _as_tensor_pair("bitwise_xor", torch.bitwise_xor),
    "prims.bitwise_left_shift": _as_tensor_pair("bitwise_left_shift", torch.bitwise_left_shift),
    "prims.bitwise_right_shift": _as_tensor_pair("bitwise_right_shift", torch.bitwise_right_shift),
    "prims.eq": torch.eq, "prims.ne": torch.ne, "prims.lt": torch.lt, "prims.le": torch.le, "prims.gt": torch.gt,
    "prims.ge": torch.ge, "prims.where": _where, "prims.convert_element_type": _convert_element_type,
    "prims.device_put": _device_put,
    "prims.broadcast_in_dim": _broadcast_in_dim, "prims.reshape": torch.reshape,
    # shape
    "prims.transpose": torch.permute, "prims.squeeze": torch.squeeze, "prims.slice": _slice, "prims.cat": torch.cat,
    "prims.pad": _pad, "prims.flip": torch.flip, "prims.unfold": torch.Tensor.unfold,
    # reductions, scans, sorting
    "prims.sum": _sum, "prims.prod": _prod, "prims.amax": _amax, "prims.amin": _amin, "prims.var": _var,
    "prims.var_mean": _var_mean, "prims.argmax": torch.argmax, "prims.argmin": torch.argmin,
    "prims.topk": torch.topk, "prims.sort": _sort, "prims.cumsum": _cumsum, "prims.cumprod": _cumprod,
    # indexing
    "prims.take": _take, "prims.take_along_axis": _take_along_axis, "prims.scatter": _scatter,
    "prims.scatter_add": _scatter_add, "prims.index_add": _index_add, "prims.index_put": _index_put,
    "prims.nonzero": _nonzero,
    # nn
    "prims.matmul": torch.matmul, "prims.linear": torch.nn.functional.linear, "prims.convolution": torch.convolution,
    "prims.embedding": torch.nn.functional.embedding,
    # creation
    "prims.full": torch.full, "prims.empty": torch.empty, "prims.iota": _iota, "prims.uniform": _uniform,
    "prims.normal": _normal, "prims.normal_serial": _normal_serial, "prims.randint": torch.randint,
    "prims.tensor_from_sequence": torch.tensor,
    "prims.bernoulli": _bernoulli, "prims.bernoulli_tensor": _bernoulli_tensor,
    "prims.sample": _sample,
    # misc
    "prims.shape": _shape, "prims.copy_": _copy_, "prims.stop_gradient": torch.detach,
    "prims.no_grad_update": _no_grad_update, "prims.item_as_size": _item_as_size,
    "prims.inference_tensor": _inference_tensor,
    # collectives
    "prims.all_reduce": _all_reduce, "prims.all_gather_into_tensor": _all_gather_into_tensor,
    "prims.reduce_scatter_tensor": _reduce_scatter_tensor, "prims.wait_tensor": _wait_tensor,
}

# torch-level ops whose direct torch call must differ from the torch callable they stand for: traces are
# functional, so a view of a value that eager would have made contiguous first is a reshape here
def _view(a, *shape):
    return a.reshape(*shape)


def _view_as(a, other):
    return a.reshape(other.shape)


def _in_contiguous_order(fn):
    """A random *_like op or dropout whose traced draw order is the contiguous one (its decomposition has no transpose,
    `_draws_in_own_order`) run by torch's kernel on a contiguous input: the kernel draws in its input's memory order,
    and the tensor jitcore computes at run time can have other strides than eager's value had (functionalization hands
    `x.t().fill_(1); torch.randn_like(x)` the transpose of the filled tensor; a fused region's output has its own)."""
    def run(a, *args, **kwargs):
        return fn(a.contiguous(), *args, **kwargs)

    return run


DIRECT_OVERRIDES: dict = {
    "ltorch.view": _view, "ltorch.view_as": _view_as,
    "ltorch.rand_like": _in_contiguous_order(torch.rand_like),
    "ltorch.randn_like": _in_contiguous_order(torch.randn_like),
    "ltorch.randint_like": _in_contiguous_order(torch.randint_like),
    "ltorch.dropout": _in_contiguous_order(torch.nn.functional.dropout),
    "ltorch.maximum": _as_tensor_pair("maximum", torch.maximum, promote=True),
    "ltorch.minimum": _as_tensor_pair("minimum", torch.minimum, promote=True),
}

def _register_all():
    for op_id, kernel in KERNELS.items():
        op = PRIMS[op_id.split(".", 1)[1]]
        torch_ex.register_implementation(op, kernel, torch_path=torch_path(kernel))
        EAGER_KERNELS[op_id] = kernel
    for op_id, kernel in DIRECT_OVERRIDES.items():
        torch_ex.register_implementation(LTORCH[op_id.split(".", 1)[1]], kernel, name=op_id.split(".", 1)[1])
    for sym in LTORCH.values():
        if sym.torch_fn is not None and sym.id not in torch_ex.implmap:
            torch_ex.register_implementation(sym, sym.torch_fn, torch_path=torch_path(sym.torch_fn),
                                             name=sym.name)


_register_all()


# random ops that fill torch.empty_like(input): their decomposition draws in the memory order eager's value of the
# input has (known when the line was traced; a transpose after the draw where that is not the contiguous order), and
# runs where that order is not the contiguous one. Where it is, torch's kernel runs (dropout's fused kernel on CUDA)
# on a contiguous input (DIRECT_OVERRIDES, _in_contiguous_order), whatever strides jitcore's value has at run time.
_DRAWS_LIKE = frozenset({"ltorch.rand_like", "ltorch.randn_like", "ltorch.randint_like", "ltorch.dropout"})


def _has_transpose(bsym) -> bool:
    return any(s.sym is PRIMS["transpose"] or _has_transpose(s) for s in bsym.subsymbols)


def _draws_in_own_order(bsym) -> bool:
    return bsym.sym.id in _DRAWS_LIKE and _has_transpose(bsym)


def _is_opaque(bsym) -> bool:
    return Tag.OPAQUE in bsym.sym.tags


# -- kernels chosen by input: a faster sequence of torch calls where the line's inputs allow it -------------------
# Chosen when the line is claimed, so the trace names the kernel that runs.
def _split(bsym):
    """torch.split(a, 128, 2) as torch.Tensor.split_with_sizes(a, [128, 128, 128], 2): the same views, without
    torch.split's two Python frames (~4 us a call)."""
    a, dim = bsym.args[0], bsym.kwargs.get("dim", bsym.args[2] if len(bsym.args) > 2 else 0)
    d = dim % a.ndim if a.ndim else 0
    sizes = [o.shape[d] for o in bsym.output]
    if not all(type(n) is int for n in sizes):
        return None
    return BoundSymbol(split_with_sizes, (a, sizes, dim), {}, bsym.output, (bsym,))


split_with_sizes = torch_ex._kernel_symbol("split_with_sizes", torch.Tensor.split_with_sizes,
                                           no_meta(LTORCH["split"]), path="torch.Tensor.split_with_sizes")
# op id -> choose(bsym): the line running bsym with another kernel (or other arguments), or None for the usual one
BY_INPUT: dict = {"ltorch.split": _split}


# -- results written into a dead input's memory (transforms/memory.reuse_buffers) ----------------------------------
# torch functions that compute elementwise (each output element from the same element of each input) and take out=
OUT_FUNCTIONS = frozenset({
    "add", "sub", "mul", "div", "true_divide", "neg", "abs", "reciprocal", "pow", "remainder", "fmod", "atan2",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "sigmoid", "erf", "erfc", "erfinv",
    "floor", "ceil", "round", "trunc", "frac", "sign", "square", "clamp", "clamp_min", "clamp_max",
    "lerp", "hypot", "logaddexp", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_not",
    "lgamma", "digamma", "xlogy", "nan_to_num", "copysign",
})


def _aten_out_overload(fn):
    """(overload, out argument name) writing the same result into a given tensor, for a pointwise aten op."""
    if not isinstance(fn, compat.OpOverload) or torch.Tag.pointwise not in fn.tags:
        return None
    names = [a.name for a in fn._schema.arguments]
    packet = fn.overloadpacket
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        outs = [a.name for a in schema.arguments if a.is_out]
        if len(outs) == 1 and [a.name for a in schema.arguments if not a.is_out] == names:
            return getattr(packet, overload), outs[0]
    return None


_ATEN_OUT: dict = {}


# torch functions (by printed path) whose results never alias their inputs, beside OUT_FUNCTIONS (a table: the
# torch executor's kernel modules add theirs)
FRESH_FUNCTIONS = {"torch.matmul", "torch.nn.functional.linear", "torch.cat", "torch.convolution", "torch.conv1d",
                   "torch.conv2d", "torch.conv3d", "torchex.batch_norm_train", "torchex.native_batch_norm_backward"}


def makes_fresh(bsym) -> bool:
    """Whether the line's tensor results are new memory that aliases none of its inputs (see reuse_buffers)."""
    sym = bsym.sym
    if f"{sym.module}.{sym.name}" in FRESH_FUNCTIONS and sym.id.startswith("torch."):
        return True
    fn = sym.torch_fn
    if not isinstance(fn, compat.OpOverload) or fn.namespace != "aten":
        return False
    schema = fn._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def out_form(bsym):
    """None, or `buffer -> the line computing bsym's single tensor result into buffer` (see reuse_buffers)."""
    if not isinstance(bsym.output, TensorProxy) or "out" in bsym.kwargs:
        return None
    sym = bsym.sym
    if sym.module == "torch" and sym.name in OUT_FUNCTIONS and sym.id == f"torch.{sym.name}":
        return lambda buffer: bsym.from_bsym(kwargs={**bsym.kwargs, "out": buffer})
    if sym.id == "torch.relu" and len(bsym.args) == 1 and not bsym.kwargs:  # relu is clamp_min(x, 0)
        return lambda buffer: bsym.from_bsym(sym=opaque_symbol(torch.ops.aten.clamp_min.out), args=(bsym.args[0], 0),
                                             kwargs={"out": buffer})
    fn = sym.torch_fn
    if fn is None or not isinstance(fn, compat.OpOverload):
        return None
    if fn not in _ATEN_OUT:
        _ATEN_OUT[fn] = _aten_out_overload(fn)
    found = _ATEN_OUT[fn]
    if found is None:
        return None
    overload, name = found
    return lambda buffer: bsym.from_bsym(sym=opaque_symbol(overload), kwargs={**bsym.kwargs, name: buffer})


# kernel symbol id -> (line, targets) -> None or the line writing the results named by targets into those inputs
WRITE_FORMS: dict = {}


def write_form(bsym, targets: dict):
    """None, or the line computing bsym with its k-th tensor result written into targets[k], an input the program
    writes back (transforms/memory.write_into_inputs): a kernel's own in-place form (WRITE_FORMS), or the out=
    form of a line with one result."""
    form = WRITE_FORMS.get(bsym.sym.id)
    if form is not None:
        return form(bsym, targets)
    if list(targets) != [0] or len(bsym.flat_proxy_outs()) != 1:
        return None
    make = out_form(bsym)
    return None if make is None else make(targets[0])


# -- inputs made dense once (transforms/memory.densify_broadcast_inputs) ---------------------------------------------
def _densify(a):
    """`a`, or a dense copy of it when it is a broadcast (a stride is 0): BLAS would copy it on every matmul."""
    return a.contiguous() if 0 in a.stride() else a


densify = torch_ex.register_operator("densify", meta=lambda a: a, fn=_densify)
# lines whose kernel copies a broadcast input into dense memory first, and lines that only view their input
DENSE_READERS = frozenset({"torch.matmul", "torch.linear"})
VIEW_LINES = frozenset({"torch.permute", "torch.reshape", "torch.transpose", "torch.view", "torch.t"})
