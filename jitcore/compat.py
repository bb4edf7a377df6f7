"""Torch versions: the one module that knows which torch releases (and Pythons) jitcore supports and what differs
between them. Every place jitcore reaches below torch's public API (Inductor's compile entry points and C++
builder, fake tensors and shape environments, the dispatcher's operator types, autograd and autocast state in
torch._C, functional collectives, the OpInfo database of the tests) takes it from here, so a new torch release is
this file to read. A feature a supported release lacks is refused by name (`require`), never run differently.
"""
from __future__ import annotations

import re
import sys
import warnings

import torch
from torch.utils import _python_dispatch

from jitcore.errors import UnsupportedError

# -- the releases ------------------------------------------------------------------------------------------------------
# Tested on 2.10.0, 2.13.0 and 2.15.0 on Python 3.11 (.ci/torch_venvs.sh builds the venvs for 2.10 and 2.15);
# pyproject.toml declares the same range. 2.11 (the lent GPU machine's, with CUDA 13, on Python 3.12.3) lies inside
# it: its CPU side ran on Python 3.12.1 (.ci/torch_venvs.sh 2.11-py3.12), not yet on a GPU.
OLDEST = (2, 10)
NEWEST = (2, 15)
PYTHONS = ((3, 11), (3, 14))  # the interpreter's bytecode tables (jitcore/interpreter) cover these


def _release(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string ("2.13.0+cpu", "2.15.0a0+git1234" -> (2, 15, 0))."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        return (0, 0, 0)
    return int(m[1]), int(m[2]), int(m[3] or 0)


TORCH = _release(torch.__version__)
LINE = TORCH[:2]  # the release line: (2, 13)


def supported(line: tuple = LINE) -> bool:
    return OLDEST <= tuple(line[:2]) <= NEWEST


def describe_range() -> str:
    return f"torch {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


if not supported():
    warnings.warn(f"jitcore is tested with {describe_range()}; this is torch {torch.__version__}: an internal "
                  "interface jitcore uses may have changed (jitcore/compat.py lists them)", stacklevel=2)
if not PYTHONS[0] <= sys.version_info[:2] <= PYTHONS[1]:
    warnings.warn(f"jitcore is tested with Python {PYTHONS[0][0]}.{PYTHONS[0][1]} to {PYTHONS[1][0]}."
                  f"{PYTHONS[1][1]}; this is Python {sys.version.split()[0]}", stacklevel=2)


def require(feature: str, since: tuple, where: str = ""):
    """Refuse `feature` (what the user asked for) on a torch older than `since` (a release line), by name."""
    if LINE < since:
        raise UnsupportedError("torch version", f"{feature} needs torch {since[0]}.{since[1]} or newer; this is torch "
                               f"{torch.__version__}" + (f" ({where})" if where else ""),
                               hint=f"install a torch release from {since[0]}.{since[1]} to {NEWEST[0]}.{NEWEST[1]}")


# -- what torch computes differently --------------------------------------------------------------------------------
# torch.clamp's gradient where the input equals a bound: up to 2.14 all of it goes to the input; from 2.15 none of it
# for a number bound, and half of it for a tensor bound (the other half to the bound). jitcore's clamp follows the
# installed torch (jitcore/ops/torch_elementwise.py).
CLAMP_TIES_SPLIT = LINE >= (2, 15)


# What eager torch raises on before a release, where jitcore has an answer (tests compare with eager only where
# eager has one; jitcore refuses the nextafter gradient as eager does, see transforms/vjp_rules_elementwise.py).
# Seen absent in 2.10 and present in 2.13 (2.11 and 2.12 were not tested: named from 2.13 on).
EAGER_SINCE = {
    "nextafter gradient": (2, 13),  # 2.10: "the derivative for 'nextafter' is not implemented"
    "aminmax gradient": (2, 13),  # 2.10: "derivative for aten::aminmax is not implemented"
    "isclose of a 0-d tensor with a larger one": (2, 13),  # 2.10: "output with shape [] doesn't match ..."
    # 2.10: waiting on a functional collective's result under grad mode raises "A view was created in no_grad mode
    # and is being modified inplace" (eager, in torch's AsyncCollectiveTensor)
    "functional collectives under autograd": (2, 13),
}


def eager_has(what: str) -> bool:
    return LINE >= EAGER_SINCE[what]


# -- the dispatcher: operator overloads, their schemas and tags (stable 2.10-2.15) -------------------------------------
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket
HigherOrderOperator = torch._ops.HigherOrderOperator
VariableFunctions = torch._C._VariableFunctionsClass  # torch.<fn> as bound C functions (meshgrid, atleast_1d)
schemas_of = torch._C._jit_get_schemas_for_operator  # aten::name -> its schemas (tests)
TorchDispatchMode = _python_dispatch.TorchDispatchMode  # a mode that sees each aten call (loaded with torch)

# -- global state torch keeps in C++ (stable 2.10-2.15) ----------------------------------------------------------------
is_any_autocast_enabled = torch._C._is_any_autocast_enabled
functorch_transforms_active = torch._C._are_functorch_transforms_active
torch_function_stack_depth = torch._C._len_torch_function_stack
top_saved_tensors_hooks = torch._C._autograd._top_saved_tensors_default_hooks  # (pack, unpack) or None
push_saved_tensors_hooks = torch._C._autograd._push_saved_tensors_default_hooks
pop_saved_tensors_hooks = torch._C._autograd._pop_saved_tensors_default_hooks
get_cublas_allow_tf32 = torch._C._get_cublas_allow_tf32
set_cublas_allow_tf32 = torch._C._set_cublas_allow_tf32


# -- torch.autograd.Function.apply ------------------------------------------------------------------------------------
# 2.10-2.14: a classmethod over a Python function (`MyFunction.apply` is a bound method whose __func__ is it); 2.15: a
# C classmethod descriptor (`MyFunction.apply` is a builtin method bound to the class, with no __func__).
_APPLY = torch.autograd.Function.__dict__["apply"]
FUNCTION_APPLY = _APPLY.__func__ if isinstance(_APPLY, classmethod) else None  # the function, where it is Python's
_BUILTIN_METHOD = type(len)


def autograd_function_class(fn) -> type | None:
    """The torch.autograd.Function subclass when fn is its `Cls.apply` (in either form above), else None."""
    cls = getattr(fn, "__self__", None)
    if not isinstance(cls, type) or not issubclass(cls, torch.autograd.Function):
        return None
    if FUNCTION_APPLY is not None:
        return cls if getattr(fn, "__func__", None) is FUNCTION_APPLY else None
    return cls if type(fn) is _BUILTIN_METHOD and fn == _APPLY.__get__(None, cls) else None


def builtin_apply_class(fn) -> type | None:
    """The class when fn is `Cls.apply` as a builtin method (2.15: the interpreter cannot unwrap it into a function
    and its class, as it does a Python bound method); None otherwise, and always on 2.10-2.14."""
    return None if FUNCTION_APPLY is not None else autograd_function_class(fn)


def call_apply(cls, *args, **kwargs):
    """torch's own `cls.apply(*args, **kwargs)`."""
    return _APPLY.__get__(None, cls)(*args, **kwargs)


def inductor_tensor_pointer() -> int | None:
    """The address Inductor's C++ kernels read tensors' data through (Inductor sets it into the environment as
    _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR when it loads a kernel), or None on a release without it."""
    return getattr(torch._C._dynamo.guards, "_torchinductor_pyobject_tensor_data_ptr", None)


# -- fake tensors and shape environments ------------------------------------------------------------------------------
# (imported when first used: torch._subclasses and torch.fx.experimental load part of Dynamo)
def fake_tensor_mode(**kwargs):
    """A FakeTensorMode(**kwargs): shape_env=, allow_non_fake_inputs= (stable 2.10-2.15)."""
    from torch._subclasses.fake_tensor import FakeTensorMode  # (lazy: loads part of Dynamo)

    return FakeTensorMode(**kwargs)


def is_fake(x) -> bool:
    return type(x).__name__ == "FakeTensor"


def unset_fake_temporarily():
    from torch._subclasses.fake_tensor import unset_fake_temporarily as unset  # (lazy: as fake_tensor_mode)

    return unset()


def symbolic_shapes():
    """torch.fx.experimental.symbolic_shapes: ShapeEnv, DimDynamic, StatelessSymbolicContext, SYMPY_INTERP."""
    from torch.fx.experimental import symbolic_shapes as module  # (lazy: as fake_tensor_mode)

    return module


def local_source(name: str):
    """A guard source named as a local variable (shape environments' guards print `L['name']`)."""
    from torch._dynamo.source import LocalSource  # (lazy: Dynamo)

    return LocalSource(name)


def constant_source(name: str):
    from torch._dynamo.source import ConstantSource  # (lazy: Dynamo)

    return ConstantSource(name)


def sympy_functions():
    """(FloorDiv, Mod, PythonMod, Max, Min): torch's sympy functions shape environments write sizes with (torch's own
    Max and Min, not sympy's: 2.10's fake max_pool2d writes its output size as Max(1, s // 2))."""
    from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod  # (lazy: sympy)

    return FloorDiv, Mod, PythonMod, Max, Min


def tensorify_restart():
    """(the exception Inductor's scalar-to-tensor pass raises to restart an analysis, the set of names Dynamo's
    TensorifyState specializes on the next attempt)."""
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis  # (lazy: Dynamo)
    from torch._dynamo.symbolic_convert import TensorifyState

    return TensorifyScalarRestartAnalysis, TensorifyState.force_specializations


def tracing_context(fake_mode):
    """The context Dynamo compiles a frame in, over this fake mode (torch._guards, stable 2.10-2.15)."""
    return torch._guards.tracing(torch._guards.TracingContext(fake_mode))


def decomposition_table() -> dict:
    """torch's own decompositions (torch._decomp.decomposition_table, loaded with torch)."""
    from torch._decomp import decomposition_table as table  # (lazy: loaded by torch already, a lookup)

    return table


# -- Inductor ---------------------------------------------------------------------------------------------------------
# jitcore compiles aten graphs with torch._inductor.compile (a static region) and compile_fx (symbolic sizes, with its
# config_patches), records what they return (CompiledFxGraph: its C++ wrapper source and kernels), and reaches into
# its C++ builder to run its instruction-set checks and precompiled-header builds in threads
# (executors/cpu_compiler.py). Each of these is looked up with getattr where a release may lack it, and jitcore
# then does what Inductor does on its own.
# Inductor's C++ (CPU) kernels and the emulate_precision_casts option jitcore compiles with (a value the program
# rounds to half precision stays rounded inside a fused kernel): 2.13-2.15 honour it (codegen/cpp.py reads it);
# 2.11's ignore it silently (x.to(bfloat16) * 3, then .float(): the product stayed float32, 2e-3 from eager, under
# torch.compile too: their to_dtype caches a float->bf16 conversion's inverse, eliding the round trip, which 2.13's
# skips under the option); 2.10's reject it when generating code (CppVecOverrides.to_dtype: use_compute_types) and the
# region runs eagerly with a warning. 2.12 was not tested: grouped with 2.11. Where this is True, jitcore's Inductor
# executor leaves CPU regions that compute half-precision values unfused (executors/inductorex.py worth_fusing).
INDUCTOR_CPU_DROPS_HALF_ROUNDING = (2, 11) <= LINE < (2, 13)


def inductor_importable() -> str | None:
    """None when torch._inductor imports; else why not."""
    try:
        import torch._inductor  # noqa: F401  (lazy: seconds to import)
    except Exception as e:
        return f"torch._inductor cannot be imported ({e})"
    return None


def inductor_compile(graph, args, options):
    """torch._inductor.compile(graph, args, options=...): a callable over the same arguments."""
    import torch._inductor  # (lazy: seconds to import)

    return torch._inductor.compile(graph, list(args), options=options)


def compile_fx(graph, fakes, config_patches):
    from torch._inductor.compile_fx import compile_fx as compile  # (lazy: Inductor)

    return compile(graph, fakes, config_patches=config_patches)


def inductor_decompositions() -> dict:
    """Inductor's decomposition table. Its max_pool*_with_indices decompositions read `torch._inductor.lowering`
    without importing it (2.10-2.15), and jitcore runs them before compile_fx imports it: it is imported here (else, in
    a process whose first region holds a max_pool2d, "module 'torch._inductor' has no attribute 'lowering'" and the
    region ran eagerly)."""
    import torch._inductor.lowering  # noqa: F401  (lazy: Inductor)
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def inductor_cache_dir() -> str:
    """Inductor's cache folder (setting TORCHINDUCTOR_CACHE_DIR as Inductor does)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # (lazy: Inductor)

    return cache_dir()


def inductor_config():
    import torch._inductor.config as config  # (lazy: Inductor)

    return config


def inductor_config_digest_items() -> list:
    """Inductor's configuration that changes the code it writes, as sorted (name, value) pairs."""
    return sorted(inductor_config().save_config_portable().items())


def extern_kernels():
    """The namespace Inductor's wrappers call library kernels through (extern_kernels.mm, ...)."""
    from torch._inductor.select_algorithm import extern_kernels as ns  # (lazy: Inductor)

    return ns


def inductor_cpp_modules():
    """(codecache, cpp_builder, cpu_vec_isa): Inductor's C++ compile cache, builder and instruction-set checks (with
    torch.utils._filelock, which they use, imported too)."""
    from torch._inductor import codecache, cpp_builder, cpu_vec_isa  # (lazy: Inductor)
    from torch.utils import _filelock  # noqa: F401

    return codecache, cpp_builder, cpu_vec_isa


def wrapper_code_cache():
    """Inductor's cache of C++ wrapper modules (load_pybinding, load_pybinding_async)."""
    return inductor_cpp_modules()[0].CppWrapperCodeCache


def async_compile():
    """Inductor's AsyncCompile (a Python wrapper module's kernels, built in its compile threads; _wait_futures, which
    the module's load calls, waits for them: 2.10-2.15)."""
    from torch._inductor.async_compile import AsyncCompile  # (lazy: Inductor)

    return AsyncCompile


def kernel_future_types() -> tuple:
    """The types of what AsyncCompile puts where a kernel goes before it is built (what its _wait_futures waits on)."""
    from concurrent.futures import Future

    from torch._inductor import async_compile as module  # (lazy: Inductor)

    return tuple(t for t in (Future, getattr(module, "CodeCacheFuture", None)) if isinstance(t, type))


def graph_lowering():
    """Inductor's GraphLowering class (its save_output_code hook sees a compiled module's source before it loads)."""
    from torch._inductor.graph import GraphLowering  # (lazy: Inductor)

    return GraphLowering


def inductor_time_metrics() -> dict:
    """{stage name: [seconds of each run]} of Inductor's timed stages in this process (Dynamo's
    compilation_time_metrics: "GraphLowering.run", "GraphLowering.codegen", "PyCodeCache.load_by_key_path",
    "compile_file" (one C++ compiler run), ...; torch.compiler.reset() empties it)."""
    from torch._dynamo.utils import compilation_time_metrics  # (lazy: loaded with Inductor)

    return compilation_time_metrics


def compiled_graph_type_name() -> str:
    return "CompiledFxGraph"  # what compile/compile_fx wrap their result around (2.10-2.15)


# -- nvFuser -----------------------------------------------------------------------------------------------------------
NVFUSER_TORCH_LINES = ((2, 10),)  # the torch lines nvFuser publishes wheels for (nvfuser-cu128-torch210, -cu130-)


def nvfuser_install_hint() -> str:
    """What to install for nvFuser under this torch, or why there is nothing to install."""
    if LINE in NVFUSER_TORCH_LINES:
        return f"pip install nvfuser-cu128-torch{LINE[0]}{LINE[1]} (or -cu130-, matching torch's CUDA)"
    lines = ", ".join(f"{a}.{b}" for a, b in NVFUSER_TORCH_LINES)
    return f"nvFuser publishes wheels only for torch {lines}; this is torch {torch.__version__}: use 'inductor'"


# -- distributed ------------------------------------------------------------------------------------------------------
def functional_collectives():
    """torch.distributed._functional_collectives (all_reduce, all_gather_tensor, wait_tensor: 2.10-2.15)."""
    import torch.distributed._functional_collectives as funcol  # (lazy: only programs that use them)

    return funcol


# the functional collectives jitcore records, by name; the ones a release lacks are simply not there to call
# (all_gather_single: absent in 2.10, present from 2.13 on; the *_autograd forms: 2.10-2.15)
FUNCTIONAL_GATHERS = ("all_gather_tensor", "all_gather_single", "all_gather_tensor_autograd",
                      "all_gather_single_autograd")
FUNCTIONAL_SCATTERS = ("reduce_scatter_tensor", "reduce_scatter_tensor_autograd", "reduce_scatter_single_autograd")


def functional_group(group, tag: str) -> tuple[str, int]:
    """(group name, group size) of a functional collective's group (a ProcessGroup, a list of ranks, a DeviceMesh):
    funcol._resolve_group_name and c10d._get_group_size_by_name (2.10-2.15)."""
    from torch.distributed import distributed_c10d as c10d  # (lazy: only programs that use collectives)

    name = functional_collectives()._resolve_group_name(group, tag)
    return name, c10d._get_group_size_by_name(name)


def default_process_group():
    from torch.distributed import distributed_c10d as c10d  # (lazy: as functional_group)

    return c10d._get_default_group()


def leaf_grad_dtype(param):
    """The dtype autograd's engine casts each gradient contribution reaching the leaf `param` to, before it sums them
    for its AccumulateGrad: `param.grad_dtype` (2.10-2.15), param's dtype unless set; None lets any dtype through,
    uncast. Where it is not param's dtype the backward keeps param's contributions apart, for the engine (or
    jitcore/runtime/fsdp_units.py, which hands FSDP2 blocks' gradients over itself) to cast and sum
    (transforms/autodiff.py grad_transform). 2.15's FSDP2 sets it on the unsharded parameters under a
    MixedPrecisionPolicy whose reduce_dtype is wider than param_dtype: that dtype (float32 for bfloat16 parameters)
    from the forward on, and None from the block's pre-backward where the backward reduces or a gradient exists
    (set_requires_gradient_sync accumulation makes the first micro-batch's float32). 2.10-2.14's FSDP2 leaves it at
    the parameter's dtype."""
    return param.grad_dtype


def move_version(t, by: int):
    """Move t's version counter (shared with every view of its memory) by `by`, which may be negative: the epilogue
    makes a written input's count eager's (one per in-place op), whatever number of writes the program made.
    `torch._C._autograd._unsafe_set_version_counter(tensors, versions)` takes sequences in 2.10-2.15."""
    torch._C._autograd._unsafe_set_version_counter((t,), (t._version + by,))
    return t


def view_again(x):
    """The view x made again from its base (`x._view_func(x._base)`, 2.10-2.15): torch replays the view ops that made
    x (as_strided where it recorded none), so the result's grad_fn leads to the base, as autograd's regenerated
    grad_fn of a view whose base was written in place does."""
    return x._view_func(x._base)


def fsdp_param_groups(state) -> list:
    """FSDP2's parameter groups of a sharded module's state: `_fsdp_param_groups` (a list: 2.13-2.15) or
    `_fsdp_param_group` (one or None: 2.10)."""
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [] if group is None else [group]


def fsdp_training_state():
    """FSDP2's TrainingState enum (IDLE, FORWARD, ...; torch.distributed.fsdp._fully_shard, 2.10-2.15)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # (lazy: FSDP2 programs only)

    return TrainingState


def dtensor_type():
    """DTensor when torch.distributed.tensor is loaded (FSDP2 shards parameters as DTensors), else None."""
    module = sys.modules.get("torch.distributed.tensor")
    return None if module is None else module.DTensor


# -- torch.compile, for comparison (benchmarks, tests) ----------------------------------------------------------------
def dynamo_counters():
    """Dynamo's event counters (counters["stats"]["calls_captured"], ...; torch._dynamo.utils, 2.10-2.15)."""
    from torch._dynamo.utils import counters  # (lazy: Dynamo)

    return counters


def compile_counter():
    """A torch.compile backend that counts the frames it compiles (torch._dynamo.testing.CompileCounter)."""
    from torch._dynamo.testing import CompileCounter  # (lazy: Dynamo)

    return CompileCounter()


# -- the OpInfo database (tests) ---------------------------------------------------------------------------------------
def opinfo_module():
    """torch.testing._internal.common_methods_invocations (op_db): raises ImportError without expecttest."""
    from torch.testing._internal import common_methods_invocations  # (lazy: seconds; tests only)

    return common_methods_invocations


def opinfo_device_type():
    """torch.testing._internal.common_device_type (instantiate_device_type_tests, ops)."""
    from torch.testing._internal import common_device_type  # (lazy: tests only)

    return common_device_type


__all__ = [
    "LINE", "NEWEST", "OLDEST", "TORCH", "OpOverload", "OpOverloadPacket", "compile_fx", "decomposition_table",
    "describe_range", "fake_tensor_mode", "inductor_compile", "require", "supported",
]


def schema_may_alias(fn) -> bool | None:
    """Whether aten's schema of fn (an overload, or every overload of the aten op named like it) lets an output alias
    an input; None when fn has no aten schema. (A composite's schema may say no and still hand back an input,
    conj_physical of a real tensor: transforms/functionalize.py trusts a "no" only where a meta run confirms it.)"""
    fn = getattr(fn, "stands_for", fn)
    if isinstance(fn, OpOverload):
        overloads = [fn]
    else:
        name = getattr(fn, "__name__", "") or ""
        packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
        if not isinstance(packet, OpOverloadPacket):
            return None
        overloads = [getattr(packet, o) for o in packet.overloads() if "out" not in o]  # (out= ones alias out=)
    return any(r.alias_info is not None for o in overloads for r in o._schema.returns)
