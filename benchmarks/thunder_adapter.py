"""Benchmarks: the optional lightning-thunder comparison. Never a dependency: `available()` says whether it imports.

thunder 0.2.6 looks up the named-tensor methods that torch 2.13 removed (align_as, align_to, refine_names, rename,
rename_, has_names) while it imports; `load()` restores them as stubs that raise if called, only when they are
missing, and only in this adapter (nothing else in the project sees them).
"""
from __future__ import annotations

import functools
import warnings

import torch

REMOVED_NAMED_TENSOR_METHODS = ("align_as", "align_to", "refine_names", "rename", "rename_", "has_names")


def _stub(name: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"Tensor.{name}: named tensors were removed from torch (stub for thunder's import)")

    method.__name__ = method.__qualname__ = name  # thunder checks the name of every torch method it maps
    return method


def _restore_named_tensor_stubs() -> list[str]:
    added = [n for n in REMOVED_NAMED_TENSOR_METHODS if not hasattr(torch.Tensor, n)]
    for name in added:
        setattr(torch.Tensor, name, _stub(name))
    return added


@functools.cache
def load():
    """The thunder module (raises ImportError when it is not installed)."""
    _restore_named_tensor_stubs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "transformer_engine module not found!" and other CUDA-only notes
        import thunder

    return thunder


def available() -> tuple[bool, str]:
    try:
        thunder = load()
    except Exception as e:
        return False, f"{type(e).__name__}: {str(e)[:120]}"
    return True, getattr(thunder, "__version__", "?")


def version() -> str | None:
    ok, what = available()
    return what if ok else None


def jit(fn, **options):
    """thunder.jit with its defaults (its torch executor plus whatever fusion executors it enables on CPU), and
    `options` (cache="symbolic values" for the shape suite)."""
    return load().jit(fn, **options)


def cache_misses(jfn) -> int | None:
    try:
        return load().cache_misses(jfn)
    except Exception:
        return None
