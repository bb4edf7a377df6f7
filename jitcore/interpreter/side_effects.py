"""Interpreter stage: writes to objects that live outside the interpreted function.

A write to an external target (attribute, item, global, closure cell, mutating method of a builtin
container) is applied for real, so later reads in the same trace see it, logged as a SideEffect (jitcore's
epilogue replays the log on every call) and undone when interpretation ends, successfully or not.
"""
from __future__ import annotations

import array
import collections
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from jitcore.errors import UnsupportedError

MISSING = type("MISSING", (), {"__repr__": lambda self: "<missing>"})()
NOT_WRITTEN = type("NOT_WRITTEN", (), {"__repr__": lambda self: "<not written>"})()


@dataclass
class SideEffect:
    """One write to an external target, in program order.

    kind: "setattr" | "delattr" | "setitem" | "delitem" | "setglobal" | "delglobal" | "setcell" | "call"
    target: provenance of the written object (for globals: Global(module, name); cells: Closure(...))
    obj: the written object itself (the globals dict for globals, the cell for cells)
    key: attribute name, item key, global name, or method name for kind "call"
    value: the stored value (proxies allowed); args/kwargs: the arguments of a "call" (e.g. list.append)
    """

    kind: str
    target: Any
    obj: Any
    key: Any = None
    value: Any = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __str__(self):
        t = self.target
        if self.kind == "setattr":
            return f"{t}.{self.key} = {self.value!r}"
        if self.kind == "delattr":
            return f"del {t}.{self.key}"
        if self.kind in ("setitem", "setglobal"):
            where = t if self.kind == "setglobal" else f"{t}[{self.key!r}]"
            return f"{where} = {self.value!r}"
        if self.kind in ("delitem", "delglobal"):
            return f"del {t if self.kind == 'delglobal' else f'{t}[{self.key!r}]'}"
        if self.kind == "setcell":
            return f"{t} = {self.value!r}"
        params = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{t}.{self.key}({', '.join(params)})"


def _restore_dict(d, saved):
    d.clear()
    d.update(saved)


def _restore_attr(obj, name, old):
    if old is MISSING:
        if hasattr(obj, name):
            delattr(obj, name)
    else:
        setattr(obj, name, old)


def _restore_ns_key(ns, name, old):
    if old is MISSING:
        ns.pop(name, None)
    else:
        ns[name] = old


class SideEffectLog:
    """The ordered log of side effects plus what is needed to undo them (one snapshot per target)."""

    def __init__(self):
        self.log: list[SideEffect] = []
        self._undo: list = []
        self._snapshotted: set = set()
        self._keepalive: list = []
        self._held_before: dict = {}  # id(obj) -> copies of the dicts its instance dict held, before its first write
        self._before: dict = {}  # id(container) -> its contents, or (id(obj), name) / id(obj) -> attributes, as
        # they were before the call's first write (reads after writes find where a value came from)

    # -- snapshots (first write to a target wins: undo restores the state before interpretation) -------------
    def _once(self, key, obj) -> bool:
        if key in self._snapshotted:
            return False
        self._snapshotted.add(key)
        self._keepalive.append(obj)
        return True

    def snapshot_attrs(self, obj, name):
        """Remember the attribute state of `obj` before its first write."""
        d = getattr(obj, "__dict__", None)
        if isinstance(obj, (type, types.ModuleType)) or not isinstance(d, dict):
            if not self._once((id(obj), name), obj):
                return
            if isinstance(obj, types.ModuleType):
                old = obj.__dict__.get(name, MISSING)
                self._undo.append(lambda: _restore_ns_key(obj.__dict__, name, old))
                return
            if isinstance(obj, type):
                old = obj.__dict__.get(name, MISSING)
            else:
                old = getattr(obj, name, MISSING)
            self._before[(id(obj), name)] = old
            self._undo.append(lambda: _restore_attr(obj, name, old))
            return
        if not self._once(id(obj), obj):
            return
        # whole instance dict, plus the dicts it holds (nn.Module keeps _parameters/_buffers/_modules there)
        saved = self._before[id(obj)] = dict(d)
        subs = [(v, dict(v)) for v in d.values() if type(v) in (dict, OrderedDict)]
        self._held_before[id(obj)] = [old for _, old in subs]
        # the same contents, as containers read through `obj.__dict__[k]` or `module._buffers[k]` see them: a value
        # there that the call wrote is its own, not one the call was given
        for container, contents in ((d, saved), *subs):
            if self._once(id(container), container):
                self._before[id(container)] = contents

        def restore():
            _restore_dict(d, saved)
            for sub, old in subs:
                _restore_dict(sub, old)

        self._undo.append(restore)

    def snapshot_container(self, c):
        """Remember the contents of an external builtin container before its first write."""
        if not self._once(id(c), c):
            return
        if isinstance(c, list):
            old = self._before[id(c)] = list(c)
            self._undo.append(lambda: c.__setitem__(slice(None), old))
        elif isinstance(c, dict):
            old = self._before[id(c)] = dict(c)
            self._undo.append(lambda: _restore_dict(c, old))
        elif isinstance(c, (set, bytearray)):
            old = c.copy()
            self._undo.append(lambda: (c.clear(), c.update(old) if isinstance(c, set) else c.extend(old)))
        elif isinstance(c, (collections.deque, array.array)):  # (positions as a list's: what report_item reads)
            old = self._before[id(c)] = list(c)
            self._undo.append(lambda: (c.clear(), c.extend(old)) if isinstance(c, collections.deque) else
                              c.__setitem__(slice(None), type(c)(c.typecode, old)))
        else:
            self._snapshotted.discard(id(c))
            raise UnsupportedError(
                "side effect",
                f"writing into an external object of type {type(c).__qualname__} (only list, dict, set, deque, "
                "array and bytearray contents can be restored after tracing)",
                hint="copy the object inside the function, or move the write out of the jitted function",
            )

    def snapshot_ns_key(self, ns: dict, name):
        """Remember one key of a namespace dict (module globals) before its first write."""
        if self._once((id(ns), name), ns):
            old = ns.get(name, MISSING)
            self._undo.append(lambda: _restore_ns_key(ns, name, old))

    def snapshot_cell(self, cell):
        if self._once(id(cell), cell):
            try:
                old = cell.cell_contents
            except ValueError:
                old = MISSING

            def restore():
                if old is MISSING:
                    del cell.cell_contents
                else:
                    cell.cell_contents = old

            self._undo.append(restore)

    def contents_before(self, c):
        """The list or dict contents of c before this call's first write into it; None if it was not written."""
        return self._before.get(id(c))

    def attribute_before(self, obj, name):
        """obj.name before this call's first attribute write on obj (MISSING if it had none); NOT_WRITTEN if the call
        wrote no attribute of obj."""
        saved = self._before.get(id(obj))
        if isinstance(saved, dict):
            if name in saved:
                return saved[name]
            for held in self._held_before.get(id(obj), ()):  # found through a dict the object holds (nn.Module's
                if name in held:  # _buffers, _parameters, _modules): what that dict held before the call
                    return held[name]
            return MISSING
        return self._before.get((id(obj), name), NOT_WRITTEN)

    # -- the writes ------------------------------------------------------------------------------------------
    def record(self, effect: SideEffect):
        self.log.append(effect)

    def undo(self):
        """Restore every snapshotted target, newest first. Errors are collected and the first re-raised."""
        first_error = None
        for restore in reversed(self._undo):
            try:
                restore()
            except Exception as e:
                first_error = first_error or e
        self._undo.clear()
        self._snapshotted.clear()
        self._keepalive.clear()
        if first_error is not None:
            raise first_error
