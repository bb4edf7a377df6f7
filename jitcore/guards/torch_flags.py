"""Guards stage: torch's process-wide settings that user code reads inside a jitted function (`torch.get_num_threads()`,
`torch.get_float32_matmul_precision()`, `torch.is_anomaly_enabled()`, ...). The frontend records each value read
(Guards.flags: (reader, arguments) -> value) and the prologue checks it on every call of the programs that read it,
so a call after the setting changed is another call, never the first call's answer. The setters of the same settings
are refused inside a jitted function: run natively while tracing, they would not run on later calls. Also a
contextvars.ContextVar's value read by `var.get()` (guarded through Call provenance; a var left changed is refused).
"""
from __future__ import annotations

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.interpreter.provenance import Attr, Call

_PLAIN = (int, float, bool, str, complex, type(None), torch.dtype, torch.device)


def _optional(owner, *names) -> list:
    return [getattr(owner, n) for n in names if hasattr(owner, n)]


# readers whose value the prologue checks (their arguments, if any, are constants: a device type)
READERS = frozenset({
    torch.are_deterministic_algorithms_enabled, torch.is_deterministic_algorithms_warn_only_enabled,
    torch.get_deterministic_debug_mode, torch.get_num_threads, torch.get_num_interop_threads,
    torch.get_float32_matmul_precision, torch.is_anomaly_enabled, torch.is_anomaly_check_nan_enabled,
    torch.is_warn_always_enabled, torch.get_default_device, torch.is_autocast_enabled, torch.get_autocast_dtype,
    torch.is_inference_mode_enabled,  # (grad mode alone does not tell no_grad from inference_mode)
    *_optional(torch, "is_autocast_cpu_enabled", "is_autocast_cache_enabled", "get_autocast_cpu_dtype",
               "get_autocast_gpu_dtype", "is_autocast_xla_enabled", "get_autocast_xla_dtype",
               "is_autocast_ipu_enabled", "get_autocast_ipu_dtype"),
    *_optional(torch._C, "_get_cublas_allow_tf32", "_get_cudnn_enabled", "_get_cudnn_benchmark",
               "_get_cudnn_deterministic", "_get_cudnn_allow_tf32", "_get_mkldnn_enabled",
               "_get_cublas_allow_fp16_reduced_precision_reduction",
               "_get_cublas_allow_bf16_reduced_precision_reduction", "_get_float32_matmul_precision",
               "_get_deterministic_algorithms", "_get_deterministic_algorithms_warn_only"),
})

# setters of those settings: refused inside (the program would not set them again on later calls)
SETTERS = frozenset({
    torch.set_num_threads, torch.set_num_interop_threads, torch.set_float32_matmul_precision,
    torch.use_deterministic_algorithms, torch.set_deterministic_debug_mode, torch.set_warn_always,
    torch.set_default_device,
    *_optional(torch, "set_autocast_dtype", "set_autocast_cpu_dtype", "set_autocast_gpu_dtype",
               "set_autocast_cache_enabled", "set_autocast_enabled", "set_autocast_cpu_enabled",
               "set_flush_denormal", "set_anomaly_enabled"),
    *_optional(torch._C, "_set_cublas_allow_tf32", "_set_cudnn_enabled", "_set_cudnn_benchmark",
               "_set_cudnn_deterministic", "_set_cudnn_allow_tf32", "_set_mkldnn_enabled",
               "_set_float32_matmul_precision", "_set_deterministic_algorithms"),
})


def refuse_setter(fn):
    name = f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__name__', fn)}"

    def refuse(*args, **kwargs):
        raise UnsupportedError(
            "global torch setting", f"{name}(...) inside a jitted function: it would run once, while the function "
                                    "is traced, and not on later calls",
            hint="change the setting outside the jitted function (a program reading it is checked per call)")

    return refuse


def key(fn, args: tuple, kwargs: dict):
    """The (reader, arguments) a value read is recorded under, or None when an argument is not a plain constant."""
    items = args + tuple(kwargs.items())
    plain = (str, int, bool, type(None), torch.device)
    if not all(isinstance(a, plain) or (type(a) is tuple and isinstance(a[1], plain)) for a in items):
        return None
    return fn, args, tuple(kwargs.items())


def check(flag_key, value):
    """(condition, reason) for the prologue: true when the setting no longer has the value the program read."""
    fn, args, kwargs = flag_key
    text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs])
    where = f"{getattr(fn, '__name__', fn)}({text})"
    if fn is torch.get_default_device and value == torch.device("cpu"):
        # (the Python reader costs microseconds: with no torch function mode active, the default device is the CPU)
        def cond(p):
            return f"({p.const(compat.torch_function_stack_depth)}() and {p.const(fn)}() != {p.const(value)})"
    elif value is None or isinstance(value, (bool, torch.dtype)):
        def cond(p):
            return f"{p.const(fn)}({text}) is not {p.const(value)}"
    else:
        def cond(p):
            return f"{p.const(fn)}({text}) != {p.const(value)}"
    return cond, f"{where}: expected {value!r}"


def read(flags: dict, fn, args: tuple, kwargs: dict):
    """A setting read by user code: its value now, recorded in flags for the prologue (the first read's value: the
    setting as the call found it)."""
    value = fn(*args, **kwargs)
    k = key(fn, args, kwargs)
    if k is None:
        raise UnsupportedError("global torch setting", f"{fn.__name__}() with arguments that are not constants",
                               hint="pass a constant (a device type such as 'cpu')")
    flags.setdefault(k, value)
    return value


_UNSET = object()


class ContextVars:
    """The contextvars.ContextVar calls of one trace. `var.get()` of a var from outside the call has not set: its value
    now, read again and checked by the prologue (Call provenance). `var.set()` and `var.reset()` run now, natively (a
    library's scoped use, set then reset, as transformers' output recorders do); a call that leaves a var changed is
    refused at the end of the trace (the program would not set it on later calls)."""

    def __init__(self):
        self.before: dict = {}  # id(var) -> (var, its value before this call first set it)

    def method(self, method, runtime):
        var, name = method.__self__, method.__name__
        if name in ("set", "reset"):
            def write(*args, **kwargs):
                self.before.setdefault(id(var), (var, var.get(_UNSET)))
                return method(*args, **kwargs)

            return write
        prov = runtime.external.get(id(var))

        def get(*args):
            value = method(*args)
            if prov is None or id(var) in self.before or not all(isinstance(a, _PLAIN) for a in args):
                return value
            return runtime.report(value, Call(Attr(prov, "get"), args))

        return get if name == "get" else method

    def check_restored(self):
        for var, old in self.before.values():
            if var.get(_UNSET) is not old:
                raise UnsupportedError("context variable", f"the jitted function leaves the ContextVar {var.name} set "
                                       "to another value: it would be set once, while tracing, not on later calls",
                                       hint="set it outside the jitted function, or reset it (var.reset(token)) "
                                            "before returning")
