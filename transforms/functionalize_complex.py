"""Transforms (functionalization): the complex views, which change the element type (conj, real, imag, view_as_real,
view_as_complex): how each lays out the tensor it views (for functionalize.py's overlap check) and how a write into one
scatters back into its base (its inverse).
"""
from __future__ import annotations

import torch

from jitcore.ops import prims_complex as pcx

# complex views (a meta counts one element of the complex tensor as one unit): how each maps the viewed tensor's
# (sizes, strides) to the view's; None where eager's rule refuses that layout (view_as_complex)
COMPLEX_VIEW_STRIDES = {
    "prims.conj": lambda n, s: (n, s),
    "prims.real": lambda n, s: (n, tuple(2 * x for x in s)),
    "prims.imag": lambda n, s: (n, tuple(2 * x for x in s)),
    "prims.view_as_real": lambda n, s: ((*n, 2), (*(2 * x for x in s), 1)),
    "prims.view_as_complex": lambda n, s: (n[:-1], tuple(x // 2 for x in s[:-1]))
    if s[-1] == 1 and all(x % 2 == 0 for x in s[:-1]) else None,
}


def complex_view_meta(pid: str, meta: torch.Tensor):
    """The meta of a view that changes the element size: only its sizes and strides matter (whether places overlap)."""
    got = COMPLEX_VIEW_STRIDES[pid](tuple(meta.shape), tuple(meta.stride()))
    return None if got is None else torch.empty_strided(got[0], got[1], dtype=torch.uint8, device="meta")


# complex views: base with the view replaced by value
COMPLEX_INVERSES = {
    "prims.conj": lambda base, value: pcx.conj_physical(value),  # (a new value: no lazy bit, as eager's base)
    "prims.real": lambda base, value: pcx.complex_(value, pcx.imag(base)),
    "prims.imag": lambda base, value: pcx.complex_(pcx.real(base), value),
    "prims.view_as_real": lambda base, value: pcx.view_as_complex(value),
    "prims.view_as_complex": lambda base, value: pcx.view_as_real(value),
}
