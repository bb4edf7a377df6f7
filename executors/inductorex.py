"""Executors: the inductor executor. Claims the lines whose whole decomposition is made of prims Inductor can
fuse (elementwise, reductions, shape ops, gathers; matmul/linear optionally), groups them into dependency-safe
regions (executors/regions.py), and runs each region's program -- plain torch calls, the torch executor's
kernels -- compiled by Inductor (`torch._inductor.compile` of the region's aten graph; under symbolic values, of
its graph over symbolic sizes, guarded by the shape environment's guards: see CompiledRegion). Compiled regions are
cached by their canonical text, so the same region in another function or cache entry reuses the compiled code.
Programs call a region boxed (`CompiledRegion.boxed`: its arguments in a list it empties), so an argument the program
no longer needs is freed inside the compiled code after its last use there, not when the region returns.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import os
import re
import shutil
import time
import warnings

import torch

from executors import inductor_kernels
from executors.cpu_compiler import at_most_kernels, builds_in_background, own_compile, timed_stages, warm_cpu_compiler
from executors.inductor_options import (
    COMPILE_OPTIONS,
    FEW_KERNELS_OPTIONS,
    MAX_KERNELS,
    compile_options,
    few_kernels,
    keep_zero_products,
)
from executors.regions import COMPILE_EVENTS, Region, canonical_key, fuse_regions, has_side_effect, log_compile
from executors.torchex import TorchLinesFusionExecutor, torch_ex
from jitcore import compat
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.symbol import BoundSymbol, Tag
from jitcore.ir.trace import Trace
from jitcore.ops.opaque import aten_effects, is_pure_wrapper
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
                        torch.bfloat16, torch.float32, torch.float64,
                        torch.float8_e4m3fn, torch.float8_e5m2})  # (float8: casts to and from, jitcore.hooks.float8)


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


_ARITHMETIC = frozenset({"prims.add", "prims.sub", "prims.mul", "prims.div"})


def _bool_arithmetic(bsym) -> bool:
    """Arithmetic on bool tensors (`a + 2 * b` of masks): Inductor's CPU code for it writes out of bounds (torch
    2.13: `aten.add(gt, ne, alpha=2)` of bool tensors corrupts the heap, fuzz seed 494): the torch kernel runs it."""
    if bsym.subsymbols:
        return any(_bool_arithmetic(s) for s in bsym.subsymbols)
    return bsym.sym.id in _ARITHMETIC and any(
        isinstance(p, TensorProxy) and p.dtype is torch.bool for p in bsym.flat_proxy_args() + bsym.flat_proxy_outs())


# aten operators Inductor's CPU code gets wrong (torch 2.13): the torch kernel runs them
_MISCOMPILED = frozenset({torch.ops.aten.unfold_backward.default})


def is_pure_aten(fn) -> bool:
    """An aten operator overload with fixed output shapes, no mutation and no randomness (or a Python function that
    only calls such operators: PURE_WRAPPERS)."""
    if is_pure_wrapper(fn):
        return True
    if not isinstance(fn, compat.OpOverload) or fn.namespace != "aten" or aten_effects(fn):
        return False
    return torch.Tag.dynamic_output_shape not in fn.tags and torch.Tag.data_dependent_output not in fn.tags


def _settle_environment():
    """Set now the environment variables Inductor sets when it first compiles (its cache folder; the pointer its
    C++ kernels read), to the values it would set. `jit` asks is_available before anything is traced, so a program
    that reads os.environ (transformers does) sees at its first call the environment its later calls see: the
    regions compiled lazily during the first call would otherwise change it, and the next call miss its guard."""
    with contextlib.suppress(OSError):  # (a folder it cannot make: its compiles will say so)
        compat.inductor_cache_dir()  # sets TORCHINDUCTOR_CACHE_DIR
    pointer = compat.inductor_tensor_pointer()
    if pointer is not None:  # (torch releases that have it set this variable at every kernel load)
        os.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = str(pointer)


# -- which regions are worth compiling: a rule by op class and cost ---------------------------------------------------
# Measured on CPU, one thread (jit [inductor] against jit [torch] on `tanh(a * b + 1)`, 3 loop ops, and a 5-op
# chain): a compiled region's call costs about 5 us, a torch kernel call about 1.2 us; the 3-op region was 1.19x
# slower at 2x2, 1.04x at 32x32 and 0.52x at 128x128, the 5-op one faster at every size.
FEW_LOOPS = 4  # this many loop ops replace more kernel calls than the region's call costs, at any size
LARGE_NUMEL = 4096  # a tensor this large: memory traffic saved by fusing two loop ops outweighs the call


_MATMUL_ATEN = frozenset({"addmm", "addbmm", "baddbmm", "addmv"})  # decomposed, but to the matmul kernel and an add


def _inductor_loops(fn) -> bool:
    """Whether Inductor turns an aten operator into loops it can fuse (a pointwise operator, or one with a
    decomposition: torch's own table, loaded with torch, so deciding imports nothing), rather than calling a kernel
    as torch does (matmul, attention, convolution: extern kernels and fallbacks)."""
    if is_pure_wrapper(fn) or not isinstance(fn, compat.OpOverload):
        return False  # (the CPU flash-attention wrappers: Inductor calls the same kernels)
    if torch.Tag.pointwise in fn.tags:
        return True
    return fn in compat.decomposition_table() and fn._opname not in _MATMUL_ATEN


def op_class(bsym: BoundSymbol) -> str:
    """What a line is to a compiled region: "view" (moves or relabels data: free either way), "library" (a kernel
    Inductor calls just as the torch executor does: matmul, linear, attention, an aten kernel it does not turn into
    loops), or "loop" (elementwise, reductions, gathers, aten kernels Inductor decomposes): only loops fuse."""
    if Tag.OPAQUE in bsym.sym.tags:
        return "loop" if _inductor_loops(bsym.sym.torch_fn) else "library"
    ids = leaf_ids(bsym)
    if ids <= SHAPE_PRIMS:
        return "view"
    if ids <= SHAPE_PRIMS | MATMUL_PRIMS:
        return "library"
    return "loop"


def computes_cpu_half(region: Region) -> bool:
    """Whether a line of the region makes a float16 or bfloat16 tensor on the CPU."""
    return any(isinstance(p, TensorProxy) and p.dtype in (torch.float16, torch.bfloat16) and p.device.type == "cpu"
               for b in region.members for p in b.flat_proxy_outs())


def region_numel(region: Region) -> int | None:
    """The most elements of a tensor the region reads or makes; None when a size is symbolic (unknown: large)."""
    most = 0
    for b in region.members:
        for p in b.flat_proxy_args() + b.flat_proxy_outs():
            if isinstance(p, TensorProxy):
                if not all(isinstance(d, int) for d in p._shape):
                    return None
                n = 1
                for d in p._shape:
                    n *= d
                most = max(most, n)
    return most


def worth_compiling(classes: list, numel: int | None, min_loops: int = 2) -> bool:
    """The worth-fusing rule: a region gains over the torch executor only from loops fused with each other (views
    cost nothing either way; library kernels are the same calls), so it needs `min_loops` loop ops; and the gain
    must pay the compiled call's cost: FEW_LOOPS loop ops save more kernel calls than it costs, fewer save only
    memory traffic, worth it for a tensor of LARGE_NUMEL elements (or of a symbolic size)."""
    loops = classes.count("loop")
    if loops < min_loops:
        return False
    return loops >= FEW_LOOPS or numel is None or numel >= LARGE_NUMEL


class InductorExecutor(TorchLinesFusionExecutor):
    """Fusion regions compiled by Inductor. fuse_matmul: whether matmul/linear join regions."""

    def __init__(self, name: str = "inductor", *, fuse_matmul: bool = True, min_compute_ops: int = 2):
        super().__init__(name)
        self.fuse_matmul, self.min_compute_ops = fuse_matmul, min_compute_ops

    def is_available(self) -> tuple[bool, str]:
        if inductor_kernels.LOADING[0]:  # a package's compiled regions are being loaded: they need neither Inductor
            return True, ""  # (seconds to import) nor a compiler; a region they lack imports it when it compiles
        why = compat.inductor_importable()
        if why is not None:
            return False, why
        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return False, "no C++ compiler found (torch.compile's CPU backend needs g++ or clang++)"
        _settle_environment()
        return True, ""

    def fusible_ids(self) -> frozenset:
        return FUSIBLE_PRIMS | MATMUL_PRIMS if self.fuse_matmul else FUSIBLE_PRIMS

    def can_execute(self, bsym: BoundSymbol) -> bool:
        if Tag.OPAQUE in bsym.sym.tags:
            # aten operators (the backward kernels autodiff calls) are Inductor's own input language
            return (is_pure_aten(bsym.sym.torch_fn) and bsym.sym.torch_fn not in _MISCOMPILED and
                    not has_side_effect(bsym) and _tensors_ok(bsym))
        if bsym.sym.id not in torch_ex.implmap:
            return False  # the region runs the torch executor's kernel for each line
        if not torch_ex.can_execute(bsym) or has_side_effect(bsym) or not _tensors_ok(bsym):
            return False
        if _bool_arithmetic(bsym):
            return False
        return leaf_ids(bsym) <= self.fusible_ids()

    def claimed(self, bsym: BoundSymbol) -> bool:
        return bsym.executor == self.name and bsym.region_trace is None

    def worth_fusing(self, region: Region) -> bool:
        """The rule (see op_class, worth_compiling): a region is compiled when it has at least `min_compute_ops`
        loop ops, and either FEW_LOOPS of them or a tensor of LARGE_NUMEL elements. Never on a torch whose CPU
        kernels drop eager's half-precision rounding (compat.INDUCTOR_CPU_DROPS_HALF_ROUNDING) when the region
        computes a half-precision value on the CPU: those lines run as eager runs them."""
        if compat.INDUCTOR_CPU_DROPS_HALF_ROUNDING and computes_cpu_half(region):
            return False
        return worth_compiling([op_class(b) for b in region.members], region_numel(region), self.min_compute_ops)

    def fuse(self, trace: Trace) -> Trace:
        make = functools.partial(compile_region, program_order=trace.fn_name == "backward")
        return fuse_regions(trace, self.claimed, make, prefix=f"{self.name}_fusion",
                            executor_name=self.name, keep=self.worth_fusing,
                            pass_name=f"Fusion ({self.name}: regions compiled by Inductor)")


# -- compiled regions, cached across jitted functions by canonical text ---------------------------------------------
COMPILED: dict = {}  # canonical key -> CompiledRegion
# compiled: CompiledRegions made, reused: taken from COMPILED, fallbacks: compiles that failed (the region runs
# eagerly), loaded: variants taken from a package; the compiles themselves are counted in
# executors.regions.COMPILE_EVENTS
STATS = {"compiled": 0, "reused": 0, "fallbacks": 0, "loaded": 0}
MAX_DYNAMIC_VARIANTS = 8  # past this many guarded variants a dynamic region runs eagerly (as Dynamo's limit)


@contextlib.contextmanager
def _quiet():
    """Torch's own deprecation notices from inside the compiler (under -W error they would read as a failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _always(*args):
    return True


class CompiledRegion:
    """Runs a region's program compiled by Inductor; falls back to eager (with a warning) if compiling fails.

    Static regions (every size a number in the region's text, part of its cache key): the program is traced to an
    aten FX graph (make_fx over fake tensors) and compiled with `torch._inductor.compile`, not through
    torch.compile's frame evaluation: a call then costs a few microseconds instead of Dynamo's guard checks
    (~25 us), which matters with several regions per step. The compiled code also assumes the inputs' strides, so
    each stride pattern met gets its own compiled variant (the only guard, checked per call).

    Dynamic regions (symbolic sizes, under cache="symbolic values"): compiled the same way, over fake tensors whose
    sizes are symbols exactly where the region's text has a symbolic size (`dims`; a number stays a number), with
    no duck sizing (two sizes equal at the first call are not assumed equal later). Everything the trace and
    Inductor assumed of the symbols (sizes 0 and 1 specialized, equalities, strides and storage offsets) is the
    shape environment's guard expression, compiled to a Python function and checked on every call; a call it
    rejects compiles another guarded variant. Sizes that only change value reuse the compiled code.
    """

    def __init__(self, fn, key, dims=None, single: bool = False, n_args: int = 0, device_type: str = "cpu",
                 program_order: bool = False, few_kernels: bool = False):
        self.eager_fn, self.key, self.dims = fn, key, dims
        self.dynamic = dims is not None
        self.options = compile_options(device_type, self.dynamic, program_order)  # (the key of the cache on disk)
        # a region likely to have few kernels tries the Python wrapper first (executors/inductor_options.py)
        self.python_wrapper = few_kernels and self.options.get("cpp_wrapper", False)
        self.single, self.n_args = single, n_args  # (one output, not a tuple; how many arguments)
        self.variants: dict = {}  # input strides -> compiled callable (static regions)
        self.guarded: list = []  # [(guard(*args) -> bool, compiled callable)] (dynamic regions)
        self.failures: dict = {}  # strides (None: a dynamic region) -> why compiling failed (the region runs eagerly)
        self._boxed: dict = {}  # id(variant) -> (variant, its boxed call: list of arguments -> outputs)
        self.device_type = device_type
        self.name = getattr(fn, "__name__", "region")  # (the name of the first program's line that made it)
        self.ahead: set = set()  # the strides of the variants compiled ahead of their first run (compile_ahead)

    def to_record(self) -> dict | None:
        """The compiled variants as data for a package (executors/inductor_kernels.py), or None when the region
        compiled none that can be recorded (its key holds objects by identity, or no variant round-trips)."""
        if self.key[1]:
            return None
        if self.dynamic:
            made = [(None, getattr(g, "text", None), run) for g, run in self.guarded if run is not self.eager_fn]
        else:
            made = [(strides, None, run) for strides, run in self.variants.items() if run is not self.eager_fn]
        variants = [{"strides": strides, "guard": None, "failed": why} for strides, why in self.failures.items()]
        for strides, guard, run in made:
            densify = getattr(run, "densify", None)
            record = inductor_kernels.export_variant(getattr(run, "run", run) if densify else run, self.n_args)
            if record is not None:
                variants.append({**record, "strides": strides, "guard": guard, "densify": densify})
        if not variants:
            return None
        return {"text": self.key[0], "dynamic": self.dynamic, "single": self.single, "variants": variants}

    def adopt(self, record: dict, libraries: dict):
        """Take the compiled variants of a record of this region, from a package or the cache on disk (no compile
        at their first run). A variant that does not load is left out: it compiles when a call needs it."""
        for v in record["variants"]:
            if v.get("failed"):  # it did not compile where it was recorded: it runs eagerly here too, untried
                warnings.warn(f"inductor: a fusion region runs eagerly (compiling it failed where the package was "
                              f"made: {v['failed']})", stacklevel=2)
                self._record_failure(v["strides"], v["failed"])
                continue
            try:
                run = inductor_kernels.load_variant(v, libraries, self.single)
                if v.get("densify"):
                    run = _densifying(run, v["densify"], self.single)
                guard = _always if v["guard"] is None else guard_function(self.n_args, v["guard"])
            except Exception as e:  # (a library that will not load here, say: that variant compiles again)
                warnings.warn(f"inductor: a stored compiled region variant could not be loaded ({type(e).__name__}: "
                              f"{e}); it compiles again", stacklevel=2)
                continue
            STATS["loaded"] += 1
            if self.dynamic:
                self.guarded.append((guard, run))
            else:
                self.variants[tuple(tuple(s) for s in v["strides"])] = run

    def _failed(self, e: Exception, strides=None):
        warnings.warn(f"inductor: compiling a fusion region failed ({type(e).__name__}: {e}); it runs eagerly",
                      stacklevel=4)
        return self._record_failure(strides, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def _record_failure(self, strides, why: str):
        """The region runs eagerly for these strides (a static region) or for every call (a dynamic one); a package
        records it (to_record), so a load does not try again."""
        STATS["fallbacks"] += 1
        strides = None if strides is None else tuple(tuple(s) for s in strides)
        self.failures[strides] = why
        if self.dynamic:
            self.guarded.append((_always, self.eager_fn))
        else:
            self.variants[strides] = self.eager_fn
        return self.eager_fn

    def _compile(self, args, strides, ahead: bool = False):
        if any(compat.is_fake(a) for a in args):  # (a fake run reaching the region other than through
            return self.eager_fn  # executors/ahead.py's stand-in: the eager program runs on them, nothing compiles)
        COMPILE_EVENTS[0] += 1
        record = log_compile(self.name)
        pending = []  # (ahead: the C++ builds this compile left running in the background)
        try:
            with _quiet(), own_compile(), builds_in_background(pending) if ahead else contextlib.nullcontext():
                start = time.perf_counter()
                graph = _graph_of(self.eager_fn, "fake", args)
                record["graph"] += time.perf_counter() - start
                warm_cpu_compiler()  # (started when the region was formed; Inductor waits for it where it needs it)
                with timed_stages(record):
                    run = self._compile_graph(graph, args)
        except Exception as e:
            return self._failed(e, strides)
        if pending:
            self.variants[strides] = self._awaiting(run, strides, pending, record)
            return self.variants[strides]
        self._store(run, strides, None)
        self.variants[strides] = run
        return run

    def _compile_graph(self, graph, args):
        """Inductor's compile of the region's graph: with the Python wrapper when the region likely has few kernels
        and its code has (else, the lowering again, with the C++ wrapper: at_most_kernels)."""
        if self.python_wrapper:
            with at_most_kernels(MAX_KERNELS) as over:
                try:
                    return compat.inductor_compile(graph, args, {**self.options, **FEW_KERNELS_OPTIONS})
                except Exception:
                    if not over:
                        raise
            self.python_wrapper = False  # (the region's next variants go to the C++ wrapper at once)
        return compat.inductor_compile(graph, args, self.options)

    def compile_ahead(self, fakes):
        """Called by executors/ahead.py's run of the program over fake tensors, before the region's first run: the
        variant for these arguments' strides is compiled now (its C++ build left in the background), unless the
        region has it; the eager program's outputs over the fakes let the run go on."""
        if not self.dynamic and self.device_type == "cpu" and all(isinstance(a, torch.Tensor) for a in fakes):
            strides = tuple(tuple(a.stride()) for a in fakes)
            if strides not in self.variants:
                with compat.unset_fake_temporarily():
                    self._compile([_example(a) for a in fakes], strides, ahead=True)
                self.ahead.add(strides)
        with torch.no_grad():
            return self.eager_fn(*fakes)

    def _awaiting(self, run, strides, pending, record: dict):
        """The variant `run` whose C++ build is under way: its first call waits for the build (resolve), then it is
        the variant; a build that failed leaves the region eager for these strides, with a warning. The wait and
        the module's load count as the compile's `load` (its builds count in their own threads)."""
        done = []

        def resolve():
            if not done:
                start = time.perf_counter()
                try:
                    for p in pending:
                        p.resolve()
                    record["load"] += time.perf_counter() - start
                except Exception as e:
                    done.append(self._failed(e, strides))
                    return done[0]
                _unwrap_pending(run, pending)
                self.variants[strides] = run
                self._store(run, strides, None)
                done.append(run)
            return done[0]

        def first_call(*args):
            return resolve()(*args)

        first_call.resolve = resolve
        return first_call

    def _adapted(self, args, strides):
        """A variant compiled ahead that these arguments fit once their broadcast ones (a stride 0 on a dimension
        longer than 1, the cotangent of `y.sum()`: memory nothing can write into) are copied to the dense layout
        it was compiled for; None when there is none. The ahead run guesses a cotangent's layout (dense): it is
        known only when the backward is called. The adapted variant is stored as such (the cache on disk)."""
        for ahead in self.ahead:
            copy = []
            for i, (a, want, have) in enumerate(zip(args, ahead, strides)):
                if want == have:
                    continue
                if not _broadcast(a) or not _dense(a.shape, want):
                    break
                copy.append((i, want))
            else:
                run = self.variants.get(ahead)
                if getattr(run, "resolve", None) is not None:  # (its build still under way: awaited now)
                    run = run.resolve()
                if copy and run is not None and run is not self.eager_fn:
                    self._store(run, strides, None, copy)
                    return _densifying(run, copy, self.single)
        return None

    def _store(self, run, strides, guard, densify=None):
        """Write a compiled variant to the cache on disk (executors/inductor_kernels.py), when it can be; `densify`:
        the variant is `run` called with those arguments copied to those strides (_adapted)."""
        if self.key[1] or inductor_kernels.cache_dir() is None:
            return
        record = inductor_kernels.export_variant(run, self.n_args)
        if record is not None:
            inductor_kernels.store(self.key[0], self.options, {**record, "strides": strides, "densify": densify,
                                                                  "guard": getattr(guard, "text", None)})

    def _compile_dynamic(self, args):
        if len(self.guarded) >= MAX_DYNAMIC_VARIANTS:
            warnings.warn(f"inductor: a dynamic fusion region was compiled {MAX_DYNAMIC_VARIANTS} times; further "
                          "calls its guards reject run eagerly", stacklevel=4)
            guard, run = _always, self.eager_fn
        else:
            COMPILE_EVENTS[0] += 1
            record = log_compile(self.name)
            try:
                with _quiet(), own_compile(), timed_stages(record):
                    guard, run = compile_symbolic(self.eager_fn, args, self.dims, self.options)
            except Exception as e:
                return self._failed(e)
            self._store(run, None, guard)
        self.guarded.append((guard, run))
        return run

    def _pick_dynamic(self, args):
        for guard, run in self.guarded:
            try:
                ok = guard(*args)
            except Exception:  # a guard reading what this call's inputs lack (a view's base, say) rejects it
                ok = False
            if ok:
                return run
        return self._compile_dynamic(args)

    def _pick(self, args):
        """The compiled variant (or the eager program) for these arguments, compiling one if none fits."""
        if self.dynamic:
            return self._pick_dynamic(args)
        strides = tuple([a.stride() for a in args])
        run = self.variants.get(strides)
        if run is None:
            run = self._adapted(args, strides) if self.ahead else None
            if run is not None:
                self.variants[strides] = run
            else:
                run = self._compile(args, strides)
        return run

    def __call__(self, *args):
        # regions run inside the forward/backward of an autograd.Function (or with no autodiff): never record
        with torch.no_grad():
            args = _materialized(list(args))
            return self._pick(args)(*args)

    def boxed(self, box: list):
        """The region called with its arguments in a list, which it empties before it computes (Inductor's boxed
        calling convention): an argument the caller holds no other reference to is freed inside the compiled code
        right after its last use there, not when the region returns (the program's boxed region lines, see
        executors/regions.py boxed_region_line)."""
        with torch.no_grad():
            _materialized(box)
            run = self._pick(box)
            found = self._boxed.get(id(run))
            if found is None:
                found = self._boxed[id(run)] = (run, boxed_call(run, self.single))
            return found[1](box)


def _materialized(args: list) -> list:
    """args, each tensor with a lazy negative or conjugate bit (`z.conj().imag`, `torch._neg_view(x)`: a view whose
    values are the negated memory) replaced by its values: compiled code reads a tensor's memory as its values.
    A region has no side effects (has_side_effect), so the copy loses no write. Only a program's own inputs can carry
    the bits (views it makes of them are materialized: jitcore/ops/torch_complex.py)."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and (a.is_neg() or a.is_conj()):
            args[i] = a.resolve_neg().resolve_conj()
    return args


def _example(fake):
    """A real tensor laid out as `fake` is (sizes, strides, storage offset), its memory left unset: what a region
    compiled ahead is traced and compiled with."""
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(fake.shape, fake.stride())) if fake.numel() else 0
    base = torch.empty(fake.storage_offset() + extent, dtype=fake.dtype, device=fake.device)
    return base.as_strided(fake.shape, fake.stride(), fake.storage_offset())


def _broadcast(a) -> bool:
    return any(s == 0 and n > 1 for n, s in zip(a.shape, a.stride()))


def _dense(shape, strides) -> bool:
    """Whether `strides` lay out a tensor of `shape` densely, each element once (a copy into it is exact)."""
    order = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    expected = 1
    for s, n in order:
        if s != expected:
            return False
        expected *= n
    return True


def _densifying(run, copy, single: bool):
    """run called with the arguments at the positions of `copy` copied to the strides given there; called boxed
    (`.boxed(box)`, as the program's region lines call it), the copies go into the box and run's own boxed call
    frees each argument after its last use inside, as for any variant (called with a tuple of them, the saved
    tensors stayed alive to the region's end: the GPT-2 block's backward peaked 5.33 MiB, not 5.02)."""
    def dense(a, strides):
        return torch.empty_strided(a.shape, strides, dtype=a.dtype, device=a.device).copy_(a)

    def densified(*args):
        args = list(args)
        for i, strides in copy:
            args[i] = dense(args[i], strides)
        return run(*args)

    inner = boxed_call(run, single)

    def boxed(box: list):
        for i, strides in copy:
            box[i] = dense(box[i], strides)
        return inner(box)

    densified.run, densified.densify, densified.boxed = run, copy, boxed
    return densified


def _unwrap_pending(run, pending):
    """Put each built entry function where its PendingEntry stood in the compiled wrapper (the closure of its
    `call`, the module's globals), so a call no longer goes through the PendingEntry (which still forwards, where
    it is not found) and the variant exports as one compiled without it (executors/inductor_kernels.py)."""
    graph = inductor_kernels._compiled_graph(run)
    call = getattr(graph, "current_callable", None)
    for cell in getattr(call, "__closure__", None) or ():
        for p in pending:
            if cell.cell_contents is p:
                cell.cell_contents = p.fn
    namespace = getattr(call, "__globals__", None) or {}  # (the module's own name for it: inductor_entry)
    for name, value in list(namespace.items()):
        for p in pending:
            if value is p:
                namespace[name] = p.fn


# functions of what torch._inductor.compile / compile_fx returns that only pass the arguments on (the single
# output's unwrapping, Dynamo's frame-evaluation switch, AOTAutograd's list of parameters, empty here)
_PASS_ON = frozenset({"wrapper", "_fn", "forward"})


def _list_taking(run):
    """The function under what Inductor's compile returned that takes the arguments as one list and empties it
    (AOTAutograd's runtime wrapper, called by Inductor's boxed convention), or None when the wrappers above it are
    not the known ones that only pass the arguments on."""
    f = run
    for _ in range(8):
        if type(f).__name__ == "SerializableCompiledFunction":  # (AOTAutograd's cache hit: the function it holds)
            f = f.compiled_fn
        code = getattr(f, "__code__", None)
        if code is None:
            return None
        if code.co_argcount == 1 and not code.co_flags & inspect.CO_VARARGS and getattr(f, "_boxed_call", False):
            return f
        cells = dict(zip(code.co_freevars, f.__closure__ or ()))
        prepended = "params_buffers_flat" in cells and cells["params_buffers_flat"].cell_contents
        if code.co_name not in _PASS_ON or prepended:
            return None  # (a wrapper that does more than pass the arguments on, or prepends parameters)
        f = getattr(f, "__wrapped__", None)
    return None


def boxed_call(run, single: bool):
    """box -> the outputs of a variant `run` (a compiled one, a loaded one, or the eager program), emptying box."""
    loaded = getattr(run, "boxed", None)  # (a variant from a package or the disk cache: inductor_kernels)
    if loaded is not None:
        return loaded
    inner = _list_taking(run)
    if inner is None:  # the eager program (compiling failed): it gets the arguments, the list is emptied
        def call(box):
            args = tuple(box)
            box.clear()
            return run(*args)

        return call
    if single:  # (the compiled graph returns a list of outputs)
        return lambda box: inner(box)[0]
    return lambda box: tuple(inner(box))


_ARG = re.compile(r"L\['(t\d+)'\]")


def _graph_of(fn, tracing_mode: str, args):
    """The aten graph Inductor compiles for a region function, traced with Inductor's own decompositions applied
    while tracing: a composite later in the region (matmul's choice between a view and a copy) then sees the strides
    Inductor's decompositions give (its `cat` of one non-empty tensor keeps that tensor's strides, where eager's
    is contiguous), not eager's; traced without them, Inductor's later decomposition broke the region's views
    (HF GPT-2's attention: "Cannot view a tensor with shape ...")."""
    from torch.fx.experimental.proxy_tensor import make_fx  # (lazy: loads part of Dynamo; public, 2.10-2.15)

    graph = make_fx(fn, decomposition_table=compat.inductor_decompositions(), tracing_mode=tracing_mode)(*args)
    return keep_zero_products(graph)  # (x * 0 is nan where x is inf, as in eager)


def compile_symbolic(fn, args, dims, options=None):
    """(guard, compiled): fn compiled by Inductor for symbolic sizes where `dims` says (per argument: a tuple of
    bools per tensor dimension, None for an integer, which is a symbol), and the shape environment's guards as a
    function of the same arguments (True: the compiled code is right for them).

    A float computed from a symbol (`x * i` for an integer symbol i) that Inductor's pass turning scalars into
    tensors must specialize makes it ask for a restart of the analysis (TensorifyScalarRestartAnalysis, which Dynamo
    catches); it names the float in Dynamo's TensorifyState, so the second attempt specializes it (its value becomes
    part of the guard). The names added are removed after, as Dynamo clears them after each frame."""
    restart, specialized = compat.tensorify_restart()
    before = set(specialized)
    try:
        for attempt in range(3):
            try:
                return _compile_symbolic(fn, args, dims, options)
            except restart:
                if attempt == 2:
                    raise
    finally:
        specialized.intersection_update(before)


def _compile_symbolic(fn, args, dims, options):
    shapes = compat.symbolic_shapes()
    DimDynamic, LocalSource = shapes.DimDynamic, compat.local_source
    env = shapes.ShapeEnv(duck_shape=False)
    mode = compat.fake_tensor_mode(shape_env=env)
    fakes, checks = [], []
    for i, (a, d) in enumerate(zip(args, dims)):
        source = LocalSource(f"t{i}")
        if d is None:  # an integer: a symbol, or (0 and 1 are specialized) a number the guard checks
            symbol = env.create_symbol(a, source, dynamic_dim=DimDynamic.DYNAMIC)
            fakes.append(env.create_symintnode(symbol, hint=a, source=source))
            if type(fakes[-1]) is int:
                checks.append(f"t{i} == {a}")
        else:
            sizes = [DimDynamic.DYNAMIC if s else DimDynamic.STATIC for s in d]
            # (detached: a region never records autograd, but the wrapper compile_fx returns remakes an output that
            # aliases an input (x.mT) with the requires_grad its fake had, so a variant compiled in a call whose
            # input required grad gave later calls' views requires_grad=True: fuzz seed 27224 with inductor)
            fakes.append(mode.from_tensor(a.detach(), source=source,
                                          symbolic_context=shapes.StatelessSymbolicContext(dynamic_sizes=sizes)))
    warm_cpu_compiler()  # (started when the region was formed; Inductor waits for it where it needs it)
    with compat.tracing_context(mode):
        # (traced in the context of this fake mode: a region whose inputs are all integers, torch.full((1, i0, i1)),
        # has no fake tensor make_fx would find it from, and its own shape environment lacked the symbols' ranges:
        # "vr must not be None for symbol s34")
        graph = _graph_of(fn, "symbolic", fakes)
        # (Inductor's on-disk graph cache re-checks its stored guards against sources it names by position, which
        # are not these: it fails on a hit, so a dynamic region is compiled without it)
        run = compat.compile_fx(graph, fakes, config_patches={**(COMPILE_OPTIONS if options is None else options),
                                                              "fx_graph_cache": False})
    # after compiling, so Inductor's own assumptions are in it too
    placed = [(f, LocalSource(f"t{i}")) for i, f in enumerate(fakes) if type(f) is not int]
    checks += env.produce_guards([f for f, _ in placed], [s for _, s in placed], ignore_static=False)
    if not checks:
        return _always, run
    return guard_function(len(args), _ARG.sub(r"\1", " and ".join(f"({c})" for c in checks))), run


def guard_function(n_args: int, body: str):
    """guard(t0, t1, ...) -> bool from the text of its condition (`guard.text`). The shape environment's helper
    functions (sympy's names: Mod, FloorDiv, ...) are bound only when the text uses one."""
    params = ", ".join(f"t{i}" for i in range(n_args))
    env = {}
    names = set(compile(body, "<guard>", "eval").co_names) - {f"t{i}" for i in range(n_args)}
    if any(not hasattr(builtins, n) and n not in _METHODS for n in names):
        env = dict(compat.symbolic_shapes().SYMPY_INTERP)
    guard = eval(f"lambda {params}: {body}", env)
    guard.text = body
    return guard


_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})  # attribute names a guard reads


def region_dims(sub: Trace):
    """Per argument of a region, which tensor dimensions are symbolic (None for an integer argument); None when
    the region has no symbolic value at all (a static region)."""
    proxies = list(sub.args) + [o for b in sub.bound_symbols for o in b.flat_proxy_outs()]
    if all(isinstance(p, TensorProxy) and all(isinstance(d, int) for d in p._shape) for p in proxies):
        return None
    return tuple(tuple(not isinstance(d, int) for d in a._shape) if isinstance(a, TensorProxy) else None
                 for a in sub.args)


def is_dynamic(sub: Trace) -> bool:
    """Whether a region takes symbolic values or has tensors whose sizes are symbolic."""
    return region_dims(sub) is not None


def region_device(sub: Trace) -> str:
    """The device type of a region's tensors (one device: the executor claims no line mixing them)."""
    for p in list(sub.args) + [o for b in sub.bound_symbols for o in b.flat_proxy_outs()]:
        if isinstance(p, TensorProxy):
            return p.device.type
    return "cpu"


def compile_region(sub: Trace, program_order: bool = False):
    """The CompiledRegion for a region's program (one per text and order, shared by every program that has it);
    program_order: the region is in a backward program (see PROGRAM_ORDER)."""
    key = canonical_key(sub)
    if program_order:
        key = (key[0] + "\n# program order", key[1])
    found = COMPILED.get(key)
    if found is not None:
        STATS["reused"] += 1
        COMPILE_EVENTS[1] += 1
        return found
    STATS["compiled"] += 1
    region = COMPILED[key] = CompiledRegion(sub.python_callable(), key, dims=region_dims(sub),
                                            single=not isinstance(sub.output, tuple), n_args=len(sub.args),
                                            device_type=region_device(sub), program_order=program_order,
                                            few_kernels=few_kernels(sub))
    found = None
    if not key[1]:  # (constants by identity: nothing from another process can match it)
        found = inductor_kernels.take(key[0])  # compiled in another process and loaded from a package (jitcore.load)
        if found is None and not inductor_kernels.LOADING[0]:
            found = inductor_kernels.stored(key[0], region.options, region.single, region.dynamic)  # (the disk cache)
    if found is not None:
        region.adopt(*found)
        COMPILE_EVENTS[1] += 1  # (ready-made, as a region reused in this process)
    elif not inductor_kernels.LOADING[0] and region_device(sub) == "cpu":
        # a CPU region that will compile at its first run: the compiler's checks start now, while the rest of the
        # program is formed (not earlier: a process whose regions all come from the cache on disk needs none)
        warm_cpu_compiler()
    return region


inductor_ex = InductorExecutor()

__all__ = ["FUSIBLE_PRIMS", "InductorExecutor", "canonical_key", "compile_region", "inductor_ex"]
