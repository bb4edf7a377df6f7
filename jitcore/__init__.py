"""jitcore: a trace-based JIT compiler for PyTorch. The public surface only; the pipeline is in jitcore/api.py.

The names below load jitcore.api on first use, so that `import executors` (which jitcore.api itself imports)
does not pull the whole pipeline in while it initialises.
"""
# the ops register into the IR's tables (proxies.IR_OPS, TENSOR_METHODS, METHOD_FALLBACKS, the autocast policy) when
# imported: importing any part of jitcore makes the IR complete, as it was when the IR imported the ops itself
# (jitcore.hooks, public: the shipped saved-tensor hooks bf16, float8, cpu_offload; it imports only torch)
from jitcore import hooks, ops  # noqa: F401
from jitcore.errors import DataDependentError, JitError, MetaError, UnsupportedError, VerificationError

_API = ("jit", "examine", "saved_tensor_bytes")
_INSPECTION = (
    "last_traces", "last_backward_traces", "last_prologue_traces", "last_epilogue_traces", "last_compile_stats",
    "cache_hits", "cache_misses", "cache_miss_reasons", "input_specs",
)

__all__ = [
    "DataDependentError",
    "JitError",
    "MetaError",
    "PackageError",
    "UnsupportedError",
    "VerificationError",
    "cache_hits",
    "cache_miss_reasons",
    "cache_misses",
    "examine",
    "explain",
    "hooks",
    "input_specs",
    "jit",
    "last_backward_traces",
    "last_compile_stats",
    "last_epilogue_traces",
    "last_prologue_traces",
    "last_traces",
    "load",
    "repro",
    "save",
    "saved_tensor_bytes",
]


_PACKAGES = ("save", "load", "repro", "PackageError")


# the public names load jitcore.api on first use (module __getattr__): see the docstring
def __getattr__(name):
    if name == "explain":
        from jitcore.explanation import explain  # (imports jitcore.api: loaded on first use, as the names below)

        return explain
    if name in _PACKAGES:
        from jitcore import packages  # (imports jitcore.api: loaded on first use, as the names below)

        return getattr(packages, name)
    if name in _INSPECTION:
        from jitcore.debug import inspection  # (loaded on first use, as jitcore.api below)

        return getattr(inspection, name)
    if name in _API:
        from jitcore import api  # cycle with executors: api imports executors, which import jitcore's IR

        return getattr(api, name)
    raise AttributeError(f"module 'jitcore' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
