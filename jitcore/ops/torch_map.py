"""Ops: THE table from torch callables to jitcore ops (TORCH_MAP) and from Tensor method names to ops
(proxies.TENSOR_METHODS). Both are filled by `@torchsymbol(...)` next to each op's definition; a torch callable
missing here goes to FUNCTION_FALLBACKS (an in-place call recording its writes, else an opaque op) so it still runs.
`dispatch` is the IR's "torch_function" op: TensorProxy.__torch_function__ records through it.
"""
from __future__ import annotations

from jitcore.ir.proxies import (
    TENSOR_METHODS,
    Fallbacks,
    NumberProxy,
    TensorProxy,
    register_ir_op,
    register_tensor_method,
)
from jitcore.ir.pytree import tree_flatten

# torch callable -> Symbol (or a plain function over proxies for a few adapters)
TORCH_MAP: dict = {}


def register_method(name: str, fn):
    """`tensor.<name>(...)` calls fn(tensor, ...); a name another op has already is an error."""
    register_tensor_method(name, fn)


def lookup(fn):
    """The op for a torch callable, or None. A callable torch wrapped in another (functools.wraps: importing
    torch._dynamo replaces torch.manual_seed by a wrapper) is the op of the one it wraps. An op with a signature
    comes as a call that checks its keywords bind (see OverloadAware); a call with out= writes its result there."""
    try:
        op = TORCH_MAP.get(fn)
        if op is None and hasattr(fn, "__wrapped__"):
            op = TORCH_MAP.get(fn.__wrapped__)
    except TypeError:  # unhashable callable
        return None
    if op is None:
        return op
    call = _AWARE.get(fn)
    if call is None:
        call = _AWARE[fn] = OverloadAware(op, fn)
    return call


class OverloadAware:
    """A torch callable's op, called as torch would be: keywords its signature does not take belong to another of
    torch's overloads (torch.max(x, other=y), torch.tensor_split(x, sections=2), linalg.matrix_norm(input=A)), and
    that call runs as the torch callable itself (FUNCTION_FALLBACKS: an opaque op), not as a TypeError eager lacks."""

    def __init__(self, op, fn):
        self.op, self.fn = op, fn
        self.signature = getattr(op, "signature", None)
        name = getattr(fn, "__name__", "") or ""
        self.inplace = name.endswith("_") and not name.endswith("__")  # torch.relu_(x): hands back x

    def __call__(self, *args, **kwargs):
        if kwargs:
            if kwargs.get("out") is not None:
                return OUT_CALL[0](self, self.fn, args, kwargs)
            try:
                if self.signature is not None:
                    self.signature.bind(*args, **kwargs)
            except TypeError:
                fallback = FUNCTION_FALLBACKS(self.fn)
                if fallback is not None:
                    return fallback(*args, **kwargs)
        out = self.op(*args, **kwargs)
        if (self.inplace or kwargs.get("inplace") is True) and type(out) is TensorProxy:
            target = args[0] if args else kwargs.get("input", kwargs.get("self"))
            if type(target) is TensorProxy:  # (F.relu(x, inplace=True) too): eager hands back the tensor it wrote
                return target
        return out


_AWARE: dict = {}
# call_with_out(call, fn, args, kwargs): a call with out= (jitcore/ops/out_args.py registers it; it builds on ops
# defined after this table)
OUT_CALL: list = [None]


# torch callables with no op, asked in this order: "inplace" (jitcore/ops/torch_inplace.py: a callable writing into
# its arguments, torch.i0_(x), torch._foreach_mul_(xs, 2), as its functional form plus the writes), then "opaque"
# (jitcore/ops/opaque.py: any torch callable as an opaque op)
FUNCTION_FALLBACKS = Fallbacks("torch callables with no op", ("inplace", "opaque"))


def dispatch(func, args, kwargs):
    """Called by TensorProxy.__torch_function__: run the mapped op, or an opaque op for unmapped torch callables."""
    if kwargs and kwargs.get("out") is not None:  # the functional call, written into out (jitcore/ops/out_args.py)
        return OUT_CALL[0](lambda *a, **k: dispatch(func, a, k), func, args, kwargs)
    op = lookup(func)
    if op is None:
        name = getattr(func, "__name__", None)
        if name is not None and getattr(func, "__objclass__", None) is not None:  # torch.Tensor.foo descriptors
            op = TENSOR_METHODS.get(name)
        if op is None:
            op = FUNCTION_FALLBACKS(func)
        if op is None:
            raise RuntimeError(f"no op and no fallback for torch callable {func!r}: jitcore/ops/opaque.py registers "
                               "the opaque fallback when jitcore.ops is imported")
    return op(*args, **kwargs)




register_ir_op("torch_function", dispatch)


def with_number_proxies(fn):
    """A torch builtin with no op, as the interpreter calls it: with a symbolic number among its arguments
    (`torch._foreach_mul_(ts, k)`, k a FloatProxy under cache="symbolic values"), torch's argument parser, which takes
    no proxy for a number, would raise before __torch_function__ sends the call here: such a call goes to `dispatch`
    itself (the fallbacks then take the number as any argument). None for other callables (run natively)."""
    if type(fn) is not type(len) or not is_torch_callable(fn):
        return None

    def call(*args, **kwargs):
        if any(isinstance(a, NumberProxy) for a in tree_flatten((args, kwargs))[0]) and any(
                isinstance(a, TensorProxy) for a in tree_flatten((args, kwargs))[0]):
            return dispatch(fn, args, kwargs)
        return fn(*args, **kwargs)

    return call


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
            # torch's public modules by name (not project modules), read once on first use
            mod = torch.Tensor if modname == "torch.Tensor" else importlib.import_module(modname)
            for attr in dir(mod):
                if attr.startswith("_") and not attr.startswith("__"):
                    continue
                obj = getattr(mod, attr, None)
                if callable(obj) and not isinstance(obj, type):
                    _paths[id(obj)] = f"{modname}.{attr}"
    return _paths.get(id(fn))
