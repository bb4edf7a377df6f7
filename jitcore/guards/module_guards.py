"""Guards stage: which of a jitted module's prologue guards are module-rooted, i.e. can only change together with the
module state epoch (jitcore/guards/module_state.py), so a call may skip them while the epoch is unchanged
(module_split: the rules).
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from jitcore.guards import kinds, module_state
from jitcore.interpreter import provenance as P

_STORES = ("_parameters", "_buffers", "_modules")
# a module's hook dicts change only through registrations and handle removals, which bump the epoch (read from a bare
# Module: building a Linear here drew its initial weights from the global generator on the user's first call)
_HOOK_DICTS = frozenset(k for k in torch.nn.Module().__dict__ if "hook" in k and k.startswith("_"))
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_NOT = None  # resolve(): not module-rooted


@dataclass
class ModuleSplit:
    """Which guards go to the module-rooted part. items: (provenance, kind) of guards; inputs: input name ->
    position among the module-rooted inputs; watched: names of those whose checks are skipped too (and their exact
    types); aliases: (provenance, name) pairs checked there; anchors: provenances cached for the per-call part."""

    items: set = field(default_factory=set)
    inputs: dict = field(default_factory=dict)
    watched: dict = field(default_factory=dict)
    aliases: set = field(default_factory=set)
    anchors: list = field(default_factory=list)
    spans: list = field(default_factory=list)  # [start, stop) runs of module-rooted inputs, consecutive in the call

    def segment(self, name) -> int | None:
        """The index of the span holding module-rooted input `name` that starts there, else None."""
        j = self.inputs.get(name)
        return next((k for k, (a, _) in enumerate(self.spans) if a == j), None)


class _Resolver:
    """Resolves provenances against the traced call's objects: (kind, value), kind 'module', 'store' (one of a
    module's storage dicts) or 'value'; None when the path is not module-rooted."""

    def __init__(self, fn):
        self.fn, self.memo = fn, {}

    def __call__(self, prov):
        if prov not in self.memo:
            try:
                self.memo[prov] = self._resolve(prov)
            except (AttributeError, LookupError, TypeError):  # (a path that does not resolve is not module-rooted)
                self.memo[prov] = _NOT
        return self.memo[prov]

    def _resolve(self, prov):
        t = type(prov)
        if t is P.Fn:
            return ("module", self.fn) if isinstance(self.fn, torch.nn.Module) else _NOT
        if t is P.Attr and prov.name == "__func__" and type(prov.parent) is P.Attr:
            return self._method(prov.parent)
        if t is P.Attr and prov.name == "__code__":  # the code of a module's method: as that method (replacing a
            parent = self(prov.parent)  # class's function, or its code, is not seen while the epoch is unchanged)
            if parent is _NOT or not isinstance(parent[1], types.FunctionType):
                return _NOT
            return "value", parent[1].__code__
        if t is P.Attr:
            parent = self(prov.parent)
            if parent is _NOT or parent[0] != "module":
                return _NOT
            return _module_attr(parent[1], prov.name)
        if t is P.Item and type(prov.key) is str:
            container = prov.parent.parent if type(prov.parent) is P.DictView else prov.parent
            parent = self(container)
            if parent is _NOT or parent[0] != "store" or prov.key not in parent[1]:
                return _NOT
            return _kind(parent[1][prov.key], False)
        return _NOT


    def _method(self, prov):
        """`module.name.__func__` of a function the module's class defines and its instance dict does not shadow
        (shadowing it is a module setattr, which bumps the epoch; replacing a module class's attribute is not
        seen, as for every class attribute)."""
        owner = self(prov.parent)
        if owner is _NOT or owner[0] != "module":
            return _NOT
        module, cls = owner[1], type(owner[1])
        if prov.name in module.__dict__ or _class_attr(cls, "__getattribute__")[1] is not _OBJECT_GETATTRIBUTE:
            return _NOT
        value = _class_attr(cls, prov.name)[1]
        return ("value", value) if isinstance(value, types.FunctionType) else _NOT


def _class_attr(cls, name):
    for k in cls.__mro__:
        if name in k.__dict__:
            return k, k.__dict__[name]
    return None, None


def _module_attr(module, name):
    cls = type(module)
    if _class_attr(cls, "__getattribute__")[1] is not _OBJECT_GETATTRIBUTE:
        return _NOT
    found, cls_value = _class_attr(cls, name)
    d = module.__dict__
    if name in d:
        if found is not None and (hasattr(type(cls_value), "__set__") or hasattr(type(cls_value), "__delete__")):
            return _NOT  # a data descriptor (property) wins over the instance dict
        return _kind(d[name], name in _STORES or name in _HOOK_DICTS)
    if found is not None:  # a class attribute: torch's own plain defaults only (`_compiled_call_impl = None`)
        library = getattr(found, "__module__", "").startswith("torch.")
        return _kind(cls_value, False) if library and not hasattr(type(cls_value), "__get__") else _NOT
    if _class_attr(cls, "__getattr__")[1] is not torch.nn.Module.__getattr__:
        return _NOT
    for store in _STORES:
        values = d.get(store)
        if values is not None and name in values:
            return _kind(values[name], False)
    return _NOT


def _kind(value, store: bool):
    if store and isinstance(value, dict):
        return "store", value
    return ("module" if isinstance(value, torch.nn.Module) else "value"), value


def module_split(inputs, guards, aliases, roots) -> ModuleSplit | None:
    """The module-rooted part of a prologue (inputs after jitcore.guards.prologue._direct), or None when there is none
    (not a module, or the module state patches are not installed).

    A provenance is module-rooted when it starts at Fn() (the jitted nn.Module) and every step reads a module's
    instance storage: an attribute found in the module's `__dict__` (no class data descriptor shadowing it), a
    plain (non-descriptor) class attribute defined by torch itself (`_compiled_call_impl = None`: torch's
    namespaces are not guarded against monkeypatching anywhere in jitcore) or, through nn.Module.__getattr__, in
    its `_parameters`/`_buffers`/`_modules` dict (no class attribute of that name), or an item of one of those
    dicts (or of their views). Classes overriding `__getattribute__`, or `__getattr__` for the dict lookups,
    stop the chain. Module-rooted guards: the entries of the path kinds with a module_rooted rule
    (jitcore/guards/kinds.py: object identities, scalar values, types, and lengths of the storage dicts or of
    tuples: immutable). Module-rooted tensor inputs are fetched with them; the checks of those whose every metadata
    change bumps the epoch (nn.Parameter, see module_state.watched_parameter_type) are skipped too; others
    (buffers: plain tensors) keep their metadata checks per call, on the cached tensor objects. Every other guard
    stays per call; the deepest module-rooted object on its path (an "anchor": `model.config` for
    `model.config.scale`) is cached with the inputs, so the per-call check does not walk the
    module tree.
    """
    if roots is None or not isinstance(roots.fn, torch.nn.Module) or not module_state.installed:
        return None
    resolve, split = _Resolver(roots.fn), ModuleSplit()
    rest = []
    source = kinds.Sources(guards, list(aliases), roots, False)
    for kind in kinds.at("path"):  # (presence is per call: a class attribute added later is not seen by the epoch)
        for prov, _ in kind.entries(source):
            r = resolve(prov) if kind.module_rooted is not None else _NOT
            if r is not _NOT and kind.module_rooted(r):
                split.items.add((prov, kind.name))
            else:
                rest.append(prov)  # per call: anchored
    for inp in inputs:
        r = resolve(inp.provenance)
        if r is _NOT or not isinstance(r[1], torch.Tensor):
            rest.append(inp.provenance)
            continue
        split.inputs[inp.proxy.name] = len(split.inputs)
        if module_state.watched_parameter_type(type(r[1])):
            split.watched[inp.proxy.name] = type(r[1])
    for prov, name in aliases:
        if name in split.inputs and resolve(prov) is not _NOT:
            split.aliases.add((prov, name))
        else:
            rest.append(prov)
    if not split.inputs and not split.items:
        return None
    previous = None
    for inp in inputs:
        j = split.inputs.get(inp.proxy.name)
        if j is not None and previous is not None and split.spans[-1][1] == j:
            split.spans[-1][1] = j + 1
        elif j is not None:
            split.spans.append([j, j + 1])
        previous = j
    split.anchors = _anchors(rest, resolve)
    return split


def _anchors(provs, resolve) -> list:
    """For each per-call provenance, the deepest module-rooted provenance on its path (itself included), unless
    that is Fn() (the function argument itself)."""
    out = []
    for prov in provs:
        p = prov
        while p is not None and resolve(p) is _NOT:
            p = getattr(p, "parent", None)
            if type(p) is P.DictView:
                p = p.parent
        if p is not None and type(p) is not P.Fn and p not in out:
            out.append(p)
    return out
