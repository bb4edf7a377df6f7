"""Ops: opaque ops. A torch callable with no decomposition still runs: its output metadata comes from calling it
on meta tensors (or fake tensors when it has no meta kernel), the torch executor calls it directly, and it
prints as one line naming the torch function.
"""
from __future__ import annotations

import re

import torch

from jitcore import proxies
from jitcore.errors import UnsupportedError
from jitcore.ops.torch_map import torch_path
from jitcore.pytree import tree_flatten, tree_map, tree_unflatten
from jitcore.symbol import EAGER_KERNELS, Symbol, Tag

_OPAQUE: dict = {}  # torch callable -> Symbol
OPAQUE_OPS: dict[str, Symbol] = {}  # id -> Symbol, for examine() and the registry


def _public_name(fn) -> tuple[str, str, object]:
    """(module path, name, namespace) under which the opaque op prints and runs."""

    path = torch_path(fn)
    if path is not None:
        module, _, name = path.rpartition(".")
        return module, name, torch
    name = re.sub(r"\W", "_", getattr(fn, "__name__", type(fn).__name__))
    return "", f"_opaque_{name}", None


def _to_meta(x):
    if isinstance(x, proxies.TensorProxy):
        if any(not isinstance(s, int) for s in x.shape):
            raise UnsupportedError("opaque op", "symbolic sizes reached an opaque torch op")
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, proxies.NumberProxy):
        return x.value
    return x


def _first_device(flat_args):
    for a in flat_args:
        if isinstance(a, proxies.TensorProxy):
            return a.device
    return torch.device("cpu")


def _make_meta(fn, qualname):
    def meta(*args, **kwargs):
        flat, spec = tree_flatten((args, kwargs))
        margs, mkwargs = tree_unflatten(spec, [_to_meta(a) for a in flat])
        try:
            with torch.no_grad():
                out = fn(*margs, **mkwargs)
        except Exception as e:  # no meta kernel or a real error in the call: name the callable either way
            raise UnsupportedError(
                "torch callable", f"{qualname} could not be run on meta tensors to infer its outputs: {e}",
                hint="add an op for it in jitcore/ops (a decomposition or a prim with a meta)") from e
        device = kwargs.get("device") or _first_device(flat)
        rg = proxies_require_grad(flat)

        def to_proxy(o):
            if isinstance(o, torch.Tensor):
                dev = device if o.device.type == "meta" else o.device
                return proxies.TensorProxy(o.shape, o.dtype, dev, rg and (o.dtype.is_floating_point or o.is_complex()))
            return o

        return tree_map(to_proxy, out)

    return meta


def proxies_require_grad(flat) -> bool:
    return torch.is_grad_enabled() and any(isinstance(a, proxies.TensorProxy) and a.requires_grad for a in flat)


def opaque_symbol(fn) -> Symbol:
    """The opaque op standing for torch callable `fn` (made once per callable)."""
    try:
        sym = _OPAQUE.get(fn)
    except TypeError:
        sym = None
    if sym is not None:
        return sym
    module, name, namespace = _public_name(fn)
    qualname = f"{module}.{name}" if module else name
    sym = Symbol(f"opaque.{qualname}", name, meta=_make_meta(fn, qualname), tags=(Tag.OPAQUE,), module=module,
                 namespace=namespace, call_ctx=None if module else {name: fn}, torch_fn=fn)
    EAGER_KERNELS[sym.id] = fn
    OPAQUE_OPS[sym.id] = sym
    try:
        _OPAQUE[fn] = sym
    except TypeError:
        pass
    return sym


def _opaque_method(name: str):
    method = getattr(torch.Tensor, name)

    def call(self, *args, **kwargs):
        return opaque_symbol(method)(self, *args, **kwargs)

    return call


proxies.OPAQUE_METHOD_FACTORY = _opaque_method


# -- the backward of an opaque op: recompute it under torch.autograd at run time -----------------------------------
def _opaque_vjp_meta(fn, args, kwargs, grads):
    return [a.like(requires_grad=False) if isinstance(a, proxies.TensorProxy) and a.requires_grad else None
            for a in args]


def opaque_vjp(fn, args, kwargs, grads):
    """Recompute fn(*args, **kwargs) with autograd and pull `grads` (one per output) back to its tensor args."""
    with torch.enable_grad():
        inputs = [a.detach().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                  for a in args]
        out = fn(*inputs, **kwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = [a for a in inputs if isinstance(a, torch.Tensor) and a.requires_grad]
        got = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True) if pairs else ()
    got = iter(got)
    result = []
    for a in inputs:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            gi = next(got, None)
            result.append(gi if gi is not None else torch.zeros_like(a))
        else:
            result.append(None)
    return result


opaque_vjp_sym = Symbol("autodiff.opaque_vjp", "opaque_vjp", meta=_opaque_vjp_meta, module="",
                        call_ctx={"opaque_vjp": opaque_vjp}, tags=(Tag.OPAQUE, Tag.NON_DIFFERENTIABLE))
EAGER_KERNELS[opaque_vjp_sym.id] = opaque_vjp
