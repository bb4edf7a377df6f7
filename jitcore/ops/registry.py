"""Ops: how an op is defined. `@prim` turns a meta function into a prim; `@torchsymbol` turns a Python body over
other ops into a torch-level composite and enters the torch callables it stands for into jitcore/ops/torch_map.py.

Every op is defined once, in one jitcore/ops/*.py file, with a stable id (`prims.add`, `ltorch.gelu`) written out in
full, as a string, where it is defined, so grepping the id finds the definition.
"""
from __future__ import annotations

from jitcore.ir.codegen import register_namespace_import
from jitcore.ir.symbol import Symbol, Tag
from jitcore.ops import torch_map


class OpNamespace:
    """The object a trace's `prims.` / `ltorch.` resolves to when it runs: attributes are the ops."""

    def __init__(self, name: str, table: dict[str, Symbol]):
        self._name, self._table = name, table

    def __getattr__(self, name):
        try:
            return self._table[name]
        except KeyError:
            raise AttributeError(f"{self._name} has no op {name!r}") from None

    def __dir__(self):
        return list(self._table)

    def __repr__(self):
        return f"<jitcore op namespace {self._name}>"


PRIMS: dict[str, Symbol] = {}
LTORCH: dict[str, Symbol] = {}
prims_ns = OpNamespace("prims", PRIMS)
ltorch_ns = OpNamespace("ltorch", LTORCH)
register_namespace_import("prims", "from jitcore.ops import prims")
register_namespace_import("ltorch", "from jitcore.ops import ltorch")

# every op by id (`prims.add`) -> Symbol: the registry test walks this
OPS: dict[str, Symbol] = {}


def _register(table, sym):
    if sym.id in OPS:
        raise ValueError(f"op {sym.id} is defined twice")
    table[sym.name] = sym
    OPS[sym.id] = sym
    return sym


def _name_of(op_id: str, namespace: str) -> str:
    """The name a trace prints after `namespace.` for op id `op_id`; a clear error when the id is not in it."""
    if not isinstance(op_id, str) or not op_id.startswith(f"{namespace}."):
        raise ValueError(f"op id {op_id!r} must start with {namespace + '.'!r} (the full id, as traces print it)")
    name = op_id[len(namespace) + 1:]
    if not name.isidentifier():
        raise ValueError(f"op id {op_id!r}: {name!r} is not a Python identifier")
    return name


def prim(id: str, *, kernel, tags=()):
    """Decorator: the decorated function is the meta of a new prim with the full id `id` (`prims.add`) and eager
    kernel `kernel` (what it runs on real tensors: a torch function, or a small function over torch's); returns the
    Symbol. The id is written out in full where the prim is defined, so grepping it finds the definition."""
    name = _name_of(id, "prims")
    if not callable(kernel):
        raise TypeError(f"prim {id}: its eager kernel must be a callable, got {kernel!r}")

    def wrap(meta):
        sym = Symbol(id, name, meta=meta, tags=tags, module="prims", namespace=prims_ns, kernel=kernel)
        sym.__doc__ = meta.__doc__
        return _register(PRIMS, sym)

    return wrap


def torchsymbol(*torch_fns, id: str, method: str | tuple = (), tags=(), is_prim_like=False):
    """Decorator: a torch-level op with the full id `id` (`ltorch.gelu`) whose body (Python over other ops) is its
    decomposition. The id is written out in full where the op is defined (the body's name may differ from its last
    part), so grepping it finds the definition.

    torch_fns: the torch callables it stands for (torch.add, torch.Tensor.add, F.gelu); the first one is the
    torch executor's direct kernel, so the body's signature must match that callable's signature.
    method: Tensor method names (and dunders, e.g. "__add__") that call it with the tensor as first argument.
    """
    methods = (method,) if isinstance(method, str) else tuple(method)
    sym_name = _name_of(id, "ltorch")

    def wrap(fn):
        sym = Symbol(id, sym_name, fn=fn, tags=tags, module="ltorch", namespace=ltorch_ns,
                     torch_fn=torch_fns[0] if torch_fns else None)
        sym.__doc__ = fn.__doc__
        _register(LTORCH, sym)
        for f in torch_fns:
            torch_map.TORCH_MAP.setdefault(f, sym)
        for m in methods:
            torch_map.register_method(m, sym)
        return sym

    return wrap


def composite_tags(*tags):
    return frozenset(tags)


__all__ = ["LTORCH", "OPS", "PRIMS", "OpNamespace", "Tag", "prim", "torchsymbol"]
