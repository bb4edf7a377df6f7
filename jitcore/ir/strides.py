"""IR: the strides of a tensor eager lays out densely (contiguous, or a permutation of contiguous: a transpose,
channels-last), as products of its sizes, symbolic where its sizes are (TensorProxy.stride under symbolic values: one
program over sizes). Imports nothing.
"""
from __future__ import annotations


def dense_strides(sizes, meta) -> tuple | None:
    """Per dim, the product of the sizes of the dims laid out inside it, when `meta` (eager's layout of a tensor with
    these sizes' values) is dense; None for any other layout. Checked on the values first: a layout that is not dense
    records no arithmetic."""
    order = sorted(range(len(sizes)), key=lambda d: (meta.stride(d), -d))
    expected = 1
    for d in order:
        if meta.stride(d) != expected:
            return None
        expected *= meta.shape[d]
    strides, acc = [None] * len(sizes), 1
    for d in order:
        strides[d] = acc
        acc = acc * sizes[d]
    return tuple(strides)
