"""Ops: THE table from torch callables to jitcore ops (TORCH_MAP) and from Tensor method names to ops
(proxies.TENSOR_METHODS). Both are filled by `@torchsymbol(...)` next to each op's definition; a torch callable
missing here becomes an opaque op (jitcore/ops/opaque.py) so it still runs.
"""
from __future__ import annotations

from jitcore.ir.proxies import TENSOR_METHODS

# torch callable -> Symbol (or a plain function over proxies for a few adapters)
TORCH_MAP: dict = {}


def register_method(name: str, fn):
    """`tensor.<name>(...)` calls fn(tensor, ...)."""
    TENSOR_METHODS.setdefault(name, fn)


def lookup(fn):
    """The op for a torch callable, or None. A callable torch wrapped in another (functools.wraps: importing
    torch._dynamo replaces torch.manual_seed by a wrapper) is the op of the one it wraps."""
    try:
        op = TORCH_MAP.get(fn)
        if op is None and hasattr(fn, "__wrapped__"):
            op = TORCH_MAP.get(fn.__wrapped__)
        return op
    except TypeError:  # unhashable callable
        return None


# torch callable -> a call recording its writes, or None (set by jitcore.ops.torch_inplace)
OPAQUE_INPLACE = None


def dispatch(func, args, kwargs):
    """Called by TensorProxy.__torch_function__: run the mapped op, or an opaque op for unmapped torch callables."""
    op = lookup(func)
    if op is None:
        name = getattr(func, "__name__", None)
        if name is not None and getattr(func, "__objclass__", None) is not None:  # torch.Tensor.foo descriptors
            op = TENSOR_METHODS.get(name)
        if op is None and OPAQUE_INPLACE is not None:
            op = OPAQUE_INPLACE(func)  # torch.i0_(x), torch._foreach_mul_(xs, 2): the writes are recorded
        if op is None:
            from jitcore.ops.opaque import opaque_symbol

            op = opaque_symbol(func)
    return op(*args, **kwargs)


def is_torch_callable(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    if mod == "torch" or mod.startswith(("torch.", "torch._C")):
        return True
    objclass = getattr(fn, "__objclass__", None)
    return objclass is not None and objclass.__name__ in ("Tensor", "TensorBase")


# public paths of torch callables, for printing kernels as `torch.nn.functional.gelu(...)`
_PUBLIC_MODULES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.Tensor")
_paths: dict[int, str] | None = None


def torch_path(fn) -> str | None:
    """`torch.nn.functional.gelu` for F.gelu; None for callables with no public torch path."""
    global _paths
    if _paths is None:
        import importlib

        import torch

        _paths = {}
        for modname in reversed(_PUBLIC_MODULES):
            mod = torch.Tensor if modname == "torch.Tensor" else importlib.import_module(modname)
            for attr in dir(mod):
                if attr.startswith("_") and not attr.startswith("__"):
                    continue
                obj = getattr(mod, attr, None)
                if callable(obj) and not isinstance(obj, type):
                    _paths[id(obj)] = f"{modname}.{attr}"
    return _paths.get(id(fn))
