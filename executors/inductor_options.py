"""Executors: the options Inductor compiles a region with, and which wrapper a CPU region's compiled module gets:
Inductor's C++ wrapper (its kernels and the code calling them one C++ source, one compiler run) or its Python wrapper
(a Python function calling each kernel, each kernel a compiler run of its own), chosen by how many kernels the region
makes (few_kernels; executors/cpu_compiler.py at_most_kernels checks the guess); and keep_zero_products, the one
rewrite of a region's aten graph that keeps eager's numerics where an Inductor pass would not.
"""
from __future__ import annotations

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import Trace
from jitcore.ops.registry import PRIMS

# eager's numerics: a value the program rounds to half precision is rounded inside fused kernels too (Inductor's
# default keeps it in float32 across fused ops, so results drift from eager's)
COMPILE_OPTIONS = {"emulate_precision_casts": True}
# CPU regions: Inductor's C++ wrapper, so a region's kernels and the code calling them are one C++ source, built by one
# compiler run (with the Python wrapper each kernel is a compiler run of its own, and each run parses the same large
# headers again: the GPT-2 block's backward region was 8 runs, seconds each). GPU regions keep the Python wrapper
# (their kernels are Triton's; a C++ wrapper would add a compiler run), and so do dynamic regions (torch 2.13's C++
# wrapper fails on the symbolic sizes of the graphs compile_symbolic makes).
# A region of at most MAX_KERNELS kernels (few_kernels) takes the Python wrapper instead: a compiler run then builds a
# kernel alone, with Inductor's precompiled prefix header, as torch.compile's does (the 1024x1024 chain: 0.9 s of
# compiler CPU against 1.5 s with the C++ wrapper's code beside it; the MLP's forward, one kernel and four addmm
# calls: 1.0 s against 1.6), two kernels build side by side in Inductor's threads, and a call costs no more (8x8
# chain, one thread: 10.0 us against 12.1).
CPU_OPTIONS = {"cpp_wrapper": True}
FEW_KERNELS_OPTIONS = {"cpp_wrapper": False}
# backward regions keep the program's order of their lines: jitcore's schedule (transforms/schedule.py) already
# orders the backward for memory (a weight's gradient right after the input gradient it pairs with, so the
# activations both read die early). Inductor's own reorders (for peak memory by its estimate, and for locality)
# moved the GPT-2 block's MLP weight gradients past the attention backward, holding two 1 MiB activations across it:
# peak 5.29 MiB against 5.02 in program order (torch.compile: 5.27). Forward regions keep Inductor's reorders (HF
# GPT-2's forward was 3% slower without them).
PROGRAM_ORDER = {"reorder_for_peak_memory": False, "reorder_for_locality": False}


# the rewrites of a region's graph before Inductor compiles it, named in the key of the compiled regions on disk
# (executors/inductor_kernels.py): a region compiled before a rewrite existed is compiled again
GRAPH_REWRITES = ("keep_zero_products",)


def keep_zero_products(graph):
    """graph (an aten fx.GraphModule) with each product by the integer 0 of a floating or complex tensor made a product
    by 0.0: Inductor's joint-graph constant folding replaces `mul(x, 0)` by zeros (a peephole for an int zero), where
    eager's `x * 0` is nan wherever x is inf or nan (fuzz seed 2120: `t4.select(0, 0) * 0` of a division by zero).
    0.0 neither promotes such a tensor nor matches that peephole. An integer tensor's product stays (it is 0)."""
    changed = False
    for node in graph.graph.nodes:
        val = node.meta.get("val") if node.op == "call_function" else None
        if node.target not in (torch.ops.aten.mul.Tensor, torch.ops.aten.mul.Scalar) or \
                not isinstance(val, torch.Tensor) or not (val.dtype.is_floating_point or val.dtype.is_complex):
            continue
        args = tuple(0.0 if type(a) in (int, bool) and a == 0 else a for a in node.args)
        if any(type(a) is not type(b) for a, b in zip(args, node.args)):
            node.args, changed = args, True
    if changed:
        graph.recompile()
    return graph


def compile_options(device_type: str, dynamic: bool = False, program_order: bool = False) -> dict:
    """The options a region on this device type is compiled with (part of the on-disk cache's key); program_order:
    the region is in a backward program (see PROGRAM_ORDER)."""
    options = {**COMPILE_OPTIONS, **CPU_OPTIONS} if device_type == "cpu" and not dynamic else dict(COMPILE_OPTIONS)
    return {**options, **PROGRAM_ORDER} if program_order else options


_ELEMENTWISE = frozenset(s.id for s in PRIMS.values() if Tag.ELEMENTWISE in s.tags)
# prims Inductor computes inside a pointwise loop nest without a loop of their own: views and index arithmetic
_VIEWS = frozenset(f"prims.{n}" for n in ("broadcast_in_dim", "reshape", "transpose", "squeeze", "stop_gradient"))
_POINTWISE = _ELEMENTWISE | frozenset({"prims.where", "prims.convert_element_type"})  # (selects, casts)
_REDUCTIONS = frozenset(f"prims.{n}" for n in ("sum", "prod", "amax", "amin"))
_LIBRARY = frozenset({"prims.matmul", "prims.linear"})  # calls of a library kernel, no loop nest of Inductor's
MAX_KERNELS = 2  # at most this many C++ kernels: the Python wrapper (each a build, side by side in Inductor's threads)


def _shape(p: TensorProxy) -> tuple:
    return _key(p.shape)


def _key(values) -> tuple:
    """Sizes (or dims) as a key: a symbolic one by its name (a comparison of symbolic sizes would record a predicate
    the entry's guards then check: the guess must not change what a program assumes)."""
    return tuple(d if type(d) is int else f"symbolic {getattr(d, 'name', id(d))}" for d in values)


def _loop_kinds(bsym, kinds: set) -> bool:
    """Adds to `kinds` the loop nests bsym's leaves make, by kind: ("pointwise", output shape), ("reduction", input
    shape, dims, output shape); views and library calls make none. False: a leaf of another kind (no guess made)."""
    if Tag.OPAQUE in bsym.sym.tags:
        fn = getattr(bsym.sym, "torch_fn", None)
        if not any(t.name == "pointwise" for t in getattr(fn, "tags", ())):
            return False
        kinds.update(("pointwise", _shape(p)) for p in tree_leaves(bsym.output) if isinstance(p, TensorProxy))
        return True
    if bsym.subsymbols:
        return all(_loop_kinds(s, kinds) for s in bsym.subsymbols)
    op = bsym.sym.id
    if op in _VIEWS or op in _LIBRARY:
        return True
    outs = [_shape(p) for p in tree_leaves(bsym.output) if isinstance(p, TensorProxy)]
    if op in _POINTWISE:
        kinds.update(("pointwise", s) for s in outs)
        return True
    if op in _REDUCTIONS and isinstance(bsym.args[0], TensorProxy):
        kinds.update(("reduction", _shape(bsym.args[0]), _key(bsym.args[1]), s) for s in outs)
        return True
    return False


def few_kernels(sub: Trace) -> bool:
    """Whether a region likely makes at most MAX_KERNELS C++ kernels once Inductor fuses it. Inductor fuses the
    pointwise lines of one shape into a loop nest, a reduction into the nest of its input, and makes one kernel of
    nests whose code is the same (the MLP's three GELUs between its linears: one kernel called three times; its
    backward's four bias gradients: one more), so the guess counts the kinds of loop nest the lines make (pointwise
    by shape; reductions by input shape, dims, output shape), views and library calls (matmul, linear) none.
    A guess: the compile checks it (at_most_kernels) and takes the C++ wrapper when the code has more kernels; a
    line of another kind (an index op, a scan, an opaque op that is not pointwise) makes no guess (False)."""
    kinds: set = set()
    if not all(_loop_kinds(b, kinds) for b in sub.bound_symbols):
        return False
    return len(kinds) <= MAX_KERNELS and any(isinstance(p, TensorProxy) for p in tree_leaves(sub.output))
