"""Interpreter stage: the opcode table.

Every opcode handler is registered here by name with the Python versions it applies to
(`@handler("LOAD_FAST", since=(3, 11))`), so handlers for later versions can sit next to the 3.11 ones.
`table_for(version)` gives the name -> (handler, prepare) dict the decoder uses.
"""
from __future__ import annotations

import sys

# opname -> list of (since, until, handler, prepare); `until` is exclusive, None means "still current"
_HANDLERS: dict[str, list[tuple]] = {}


def handler(name: str, since: tuple = (3, 11), until: tuple | None = None, prepare=None):
    """Register `fn(frame, inst)` as the handler of opcode `name` for Python versions [since, until).

    `prepare(inst, code, insts)`, if given, runs once when a code object is decoded (after every jump's target is
    resolved) and may fill `inst.aux` (e.g. the operator function of a BINARY_OP) or `inst.target`, so the handler
    does no lookups at run time.
    """

    def deco(fn):
        _HANDLERS.setdefault(name, []).append((since, until, fn, prepare))
        return fn

    return deco


def table_for(version: tuple | None = None) -> dict:
    """The handler table for `version` (default: the running interpreter): opname -> (handler, prepare)."""
    v = tuple(version or sys.version_info[:2])
    out = {}
    for name, rows in _HANDLERS.items():
        for since, until, fn, prepare in rows:
            if since <= v and (until is None or v < until):
                if name in out:  # two rows for one version: which runs would depend on import order
                    raise AssertionError(f"two handlers of {name} for Python {v}: {out[name][0]} and {fn}")
                out[name] = (fn, prepare)
    return out


def registered_names() -> set[str]:
    return set(_HANDLERS)
