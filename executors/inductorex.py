"""Executors: the inductor executor. Claims the lines whose whole decomposition is made of prims Inductor can
fuse (elementwise, reductions, shape ops, gathers; matmul/linear optionally), groups them into dependency-safe
regions (executors/regions.py), and runs each region's program -- plain torch calls, the torch executor's
kernels -- compiled by Inductor (`torch._inductor.compile` of the region's aten graph). Compiled regions are
cached by their canonical text, so the same region in another function or cache entry reuses the compiled code.
"""
from __future__ import annotations

import contextlib
import shutil
import warnings

import torch

from executors.regions import Region, canonical_key, fuse_regions, has_side_effect
from executors.torchex import TorchLinesFusionExecutor, torch_ex
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.symbol import BoundSymbol, Tag
from jitcore.ir.trace import Trace
from jitcore.ops.opaque import aten_effects
from jitcore.ops.registry import PRIMS

_ELEMENTWISE = frozenset(s.id for s in PRIMS.values() if Tag.ELEMENTWISE in s.tags)
# prims whose lines only move or view data: a region of these alone is not worth a compiled call
SHAPE_PRIMS = frozenset(f"prims.{n}" for n in (
    "broadcast_in_dim", "reshape", "transpose", "squeeze", "slice", "cat", "pad", "flip", "stop_gradient"))
FUSIBLE_PRIMS = _ELEMENTWISE | SHAPE_PRIMS | frozenset(f"prims.{n}" for n in (
    "where", "convert_element_type", "sum", "prod", "amax", "amin", "var", "var_mean", "argmax", "argmin",
    "full", "iota", "take", "take_along_axis", "embedding"))
MATMUL_PRIMS = frozenset({"prims.matmul", "prims.linear"})
_OK_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                        torch.bfloat16, torch.float32, torch.float64})


def leaf_ids(bsym: BoundSymbol) -> set[str]:
    """The op ids at the bottom of a line's decomposition (the line itself when it has none)."""
    if not bsym.subsymbols:
        return {bsym.sym.id}
    return {i for s in bsym.subsymbols for i in leaf_ids(s)}


def _tensors_ok(bsym: BoundSymbol) -> bool:
    """Tensors in and out (on one CPU or CUDA device, dtypes Inductor compiles); integer inputs may be symbolic
    values (sizes): the region is then compiled for dynamic shapes. A float or bool symbolic value is refused:
    Inductor would specialize on it, a recompile per value."""
    args, outs = bsym.flat_proxy_args(), bsym.flat_proxy_outs()
    if not outs or not all(isinstance(p, TensorProxy) for p in outs):
        return False
    if not all(isinstance(p, (TensorProxy, IntegerProxy)) for p in args):
        return False
    tensors = [p for p in args + outs if isinstance(p, TensorProxy)]
    devices = {p.device.type for p in tensors}
    return len(devices) == 1 and devices <= {"cpu", "cuda"} and all(p.dtype in _OK_DTYPES for p in tensors)


def is_pure_aten(fn) -> bool:
    """An aten operator overload with fixed output shapes, no mutation and no randomness."""
    if not isinstance(fn, torch._ops.OpOverload) or fn.namespace != "aten" or aten_effects(fn):
        return False
    return torch.Tag.dynamic_output_shape not in fn.tags and torch.Tag.data_dependent_output not in fn.tags


class InductorExecutor(TorchLinesFusionExecutor):
    """Fusion regions compiled by Inductor. fuse_matmul: whether matmul/linear join regions."""

    def __init__(self, name: str = "inductor", *, fuse_matmul: bool = True, min_compute_ops: int = 2):
        super().__init__(name)
        self.fuse_matmul, self.min_compute_ops = fuse_matmul, min_compute_ops

    def is_available(self) -> tuple[bool, str]:
        try:
            import torch._inductor  # noqa: F401
        except Exception as e:
            return False, f"torch._inductor cannot be imported ({e})"
        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return False, "no C++ compiler found (torch.compile's CPU backend needs g++ or clang++)"
        return True, ""

    def fusible_ids(self) -> frozenset:
        return FUSIBLE_PRIMS | MATMUL_PRIMS if self.fuse_matmul else FUSIBLE_PRIMS

    def can_execute(self, bsym: BoundSymbol) -> bool:
        if Tag.OPAQUE in bsym.sym.tags:
            # aten operators (the backward kernels autodiff calls) are Inductor's own input language
            return is_pure_aten(bsym.sym.torch_fn) and not has_side_effect(bsym) and _tensors_ok(bsym)
        if bsym.sym.id not in torch_ex.implmap:
            return False  # the region runs the torch executor's kernel for each line
        if not torch_ex.can_execute(bsym) or has_side_effect(bsym) or not _tensors_ok(bsym):
            return False
        return leaf_ids(bsym) <= self.fusible_ids()

    def claimed(self, bsym: BoundSymbol) -> bool:
        return bsym.extra.get("executor") == self.name and "region_trace" not in bsym.extra

    def worth_fusing(self, region: Region) -> bool:
        compute = sum(1 for b in region.members if not leaf_ids(b) <= SHAPE_PRIMS)
        return compute >= self.min_compute_ops

    def fuse(self, trace: Trace) -> Trace:
        return fuse_regions(trace, self.claimed, compile_region, prefix=f"{self.name}_fusion",
                            executor_name=self.name, keep=self.worth_fusing,
                            pass_name=f"Fusion ({self.name}: regions compiled by Inductor)")


# -- compiled regions, cached across jitted functions by canonical text ---------------------------------------------
COMPILED: dict = {}  # canonical key -> CompiledRegion
# eager's numerics: a value the program rounds to half precision is rounded inside fused kernels too (Inductor's
# default keeps it in float32 across fused ops, so results drift from eager's)
COMPILE_OPTIONS = {"emulate_precision_casts": True}
STATS = {"compiled": 0, "reused": 0, "fallbacks": 0}


@contextlib.contextmanager
def _quiet():
    """Torch's own deprecation notices from inside the compiler (under -W error they would read as a failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


class CompiledRegion:
    """Runs a region's program compiled by Inductor; falls back to eager (with a warning) if compiling fails.

    Static regions (every size a number in the region's text, part of its cache key): the program is traced to an
    aten FX graph (make_fx over fake tensors) and compiled with `torch._inductor.compile`, not through
    torch.compile's frame evaluation: a call then costs a few microseconds instead of Dynamo's guard checks
    (~50 us), which matters with several regions per step. The compiled code also assumes the inputs' strides, so
    each stride pattern met gets its own compiled variant (the only guard, checked per call).

    Dynamic regions (symbolic sizes, under cache="symbolic values"): compiled by torch.compile with
    dynamic=True, whose guards decide when a new size needs new code (sizes 0 and 1, say); other sizes reuse it.
    """

    def __init__(self, fn, key, dynamic: bool = False):
        self.eager_fn, self.key, self.dynamic = fn, key, dynamic
        self.variants: dict = {}  # input strides -> compiled callable (static regions)
        self.compiled_dynamic = None

    def _failed(self, e: Exception):
        warnings.warn(f"inductor: compiling a fusion region failed ({type(e).__name__}: {e}); it runs eagerly",
                      stacklevel=4)
        STATS["fallbacks"] += 1
        return self.eager_fn

    def _compile(self, args, strides):
        try:
            from torch.fx.experimental.proxy_tensor import make_fx

            with _quiet():
                graph = make_fx(self.eager_fn, tracing_mode="fake")(*args)
                run = torch._inductor.compile(graph, list(args), options=COMPILE_OPTIONS)
        except Exception as e:
            run = self._failed(e)
        self.variants[strides] = run
        return run

    def _call_dynamic(self, args):
        if self.compiled_dynamic is None:
            self.compiled_dynamic = torch.compile(self.eager_fn, dynamic=True, fullgraph=True,
                                                  options=COMPILE_OPTIONS)
        try:
            with _quiet():
                return self.compiled_dynamic(*args)
        except Exception as e:  # a compile error surfaces at the call that compiles
            self.compiled_dynamic = self._failed(e)
            return self.compiled_dynamic(*args)

    def __call__(self, *args):
        # regions run inside the forward/backward of an autograd.Function (or with no autodiff): never record
        with torch.no_grad():
            if self.dynamic:
                return self._call_dynamic(args)
            strides = tuple([a.stride() for a in args])
            run = self.variants.get(strides)
            if run is None:
                run = self._compile(args, strides)
            return run(*args)


def is_dynamic(sub: Trace) -> bool:
    """Whether a region takes symbolic values or has tensors whose sizes are symbolic."""
    proxies = list(sub.args) + [o for b in sub.bound_symbols for o in b.flat_proxy_outs()]
    return any(not isinstance(p, TensorProxy) or not all(isinstance(d, int) for d in p._shape) for p in proxies)


def compile_region(sub: Trace):
    key = canonical_key(sub)
    found = COMPILED.get(key)
    if found is not None:
        STATS["reused"] += 1
        return found
    STATS["compiled"] += 1
    region = COMPILED[key] = CompiledRegion(sub.python_callable(), key, dynamic=is_dynamic(sub))
    return region


inductor_ex = InductorExecutor()

__all__ = ["FUSIBLE_PRIMS", "InductorExecutor", "canonical_key", "compile_region", "inductor_ex"]
