"""Executors: the torch executor. Every prim runs its eager kernel (given where the prim is defined, jitcore/ops:
`@prim(..., kernel=...)`; a public torch function prints as itself, e.g. torch.add), and every torch-level op that
names a torch function runs it directly (faster than its decomposition, eager's numerics). Its kernels live in its
own table (implmap); it writes none of the IR's.
"""
from __future__ import annotations

import torch

import jitcore.ops  # noqa: F401  (registers every op)
from executors.base import FusionExecutor, OperatorExecutor, no_meta
from executors.regions import boxed_region_line
from jitcore import compat
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import BoundSymbol, Tag
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.prims_elementwise import as_tensor_pair
from jitcore.ops.registry import LTORCH, PRIMS
from jitcore.ops.torch_map import torch_path


class TorchExecutor(OperatorExecutor):
    """The torch executor: its table (implmap) is filled below from each prim's kernel, DIRECT_OVERRIDES and the
    torch-level ops that name a torch function; it also runs every opaque op (a torch callable, which runs as it
    prints)."""

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
    "ltorch.maximum": as_tensor_pair("maximum", torch.maximum, promote=True),
    "ltorch.minimum": as_tensor_pair("minimum", torch.minimum, promote=True),
    # (eager's refusals were raised while tracing; a functional program's values may be conjugated or laid out
    # otherwise than eager's were: the prims' kernels view them all)
    "ltorch.view_as_real": PRIMS["view_as_real"].kernel, "ltorch.view_as_complex": PRIMS["view_as_complex"].kernel,
    "ltorch.imag": PRIMS["imag"].kernel,  # (no lazy negative bit: a fusion region may read the result's memory)
}


def _register_all():
    for op in PRIMS.values():  # (every prim has its eager kernel from its definition)
        torch_ex.register_implementation(op, op.kernel, torch_path=torch_path(op.kernel))
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


def _has_prim(bsym, prim) -> bool:
    return any(s.sym is prim or _has_prim(s, prim) for s in bsym.subsymbols)


def _draws_in_own_order(bsym) -> bool:
    """Whether bsym's torch kernel could draw in another order than eager's: a random *_like op drawing in a
    permuted order, or a random op whose decomposition lays out an input as eager's first (an opaque random op's
    input: opaque._in_eager_order), which its direct kernel (torch's alpha_dropout) would not."""
    return (bsym.sym.id in _DRAWS_LIKE and _has_prim(bsym, PRIMS["transpose"])) or (
        Tag.RANDOM in bsym.sym.tags and _has_prim(bsym, PRIMS["laid_out"]))


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
