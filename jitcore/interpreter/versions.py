"""Interpreter stage: which Pythons the interpreter runs on, checked before any bytecode is read.

`refusal()` names what is wrong with the running Python (a version without handlers, a free-threaded build) or gives
None; importing the interpreter on an unsupported version raises it as ImportError, and `check_jit()` (called by
`jitcore.jit`) raises it for a free-threaded build and warns once on a version not yet run on GPU hardware (3.12).
"""
from __future__ import annotations

import sys
import sysconfig
import warnings

from jitcore.errors import UnsupportedError

SUPPORTED = ((3, 11), (3, 12), (3, 13), (3, 14))  # CPython versions with opcode handlers (registry since/until)
# supported, but not tested where users run it: said once at jit()
UNTESTED = {(3, 12): "its tests ran on CPU only (CPython 3.12.1, .ci/py312.sh), not yet on a GPU machine (CUDA paths, "
                     "Python 3.12.3)"}
_NAMES = ", ".join(f"{a}.{b}" for a, b in SUPPORTED)
_warned = False


def free_threaded() -> bool:
    """A free-threaded build (PEP 703: `python3.13t`), whether or not the GIL was turned back on at run time."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return True
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is not None and not is_enabled()


def refusal(version=None, threaded=None) -> str | None:
    """Why jitcore cannot run on this Python (the version, or `version`), or None."""
    v = tuple(version or sys.version_info[:2])
    if v not in SUPPORTED:
        return (f"jitcore's bytecode interpreter runs on CPython {_NAMES}; this is Python {v[0]}.{v[1]} (its bytecode "
                "has no handlers here)")
    if free_threaded() if threaded is None else threaded:
        return (f"jitcore does not support free-threaded Python builds (this is {sys.version.split()[0]} without the "
                f"GIL): use the standard build of CPython {_NAMES}")
    return None


def check_import():
    msg = refusal(threaded=False)
    if msg is not None:
        raise ImportError(msg)


def check_jit():
    """At `jitcore.jit()`: refuse what cannot run; the first time on an untested version, say so."""
    global _warned
    msg = refusal()
    if msg is not None:
        raise UnsupportedError("python version", msg)
    v = sys.version_info[:2]
    if v in UNTESTED and not _warned:
        _warned = True
        warnings.warn(f"jitcore on Python {v[0]}.{v[1]} is untested: {UNTESTED[v]}. Report wrong results or "
                      "errors with the failing function.", RuntimeWarning, stacklevel=3)
