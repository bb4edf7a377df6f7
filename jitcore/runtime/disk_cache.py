"""Runtime support: jitcore's cache folder on disk ($JITCORE_CACHE_DIR, by default ~/.cache/jitcore), shared by the
compiled regions (executors/inductor_kernels.py) and the layout answers (jitcore/frontend/layouts.py), and the one way
to write a file there so that another process never reads it half written.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path | None:
    """jitcore's cache folder ($JITCORE_CACHE_DIR, by default ~/.cache/jitcore), or None when JITCORE_REGION_CACHE=0
    turns jitcore's caches on disk off (compiled regions: executors/inductor_kernels.py; these answers)."""
    if os.environ.get("JITCORE_REGION_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    return Path(os.environ.get("JITCORE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jitcore"))


def write_atomically(path: Path, data: bytes):
    """Write a file of jitcore's cache folder so that a reader never sees it half written (another process may be
    writing the same file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
