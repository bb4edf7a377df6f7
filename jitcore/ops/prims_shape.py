"""Ops: shape prims (broadcast_in_dim, reshape, ...). They change metadata and layout, never values.
"""
from __future__ import annotations

from jitcore.ops.registry import prim
from jitcore.ops.utils import check, numel, requires_grad
from jitcore.proxies import TensorProxy


@prim("broadcast_in_dim")
def broadcast_in_dim(a, shape, broadcast_dimensions):
    """a placed into `shape`: a's dim i becomes output dim broadcast_dimensions[i] (size equal or 1)."""
    check(isinstance(a, TensorProxy), lambda: f"prims.broadcast_in_dim: expected a tensor, got {a!r}")
    shape, bdims = tuple(shape), tuple(broadcast_dimensions)
    check(len(bdims) == a.ndim, lambda: f"prims.broadcast_in_dim: {a.ndim} dims but broadcast_dimensions={bdims}")
    check(list(bdims) == sorted(set(bdims)) and all(0 <= d < len(shape) for d in bdims),
          lambda: f"prims.broadcast_in_dim: broadcast_dimensions {bdims} must be increasing dims of {shape}")
    for i, d in enumerate(bdims):
        check(a.shape[i] == 1 or a.shape[i] == shape[d],
              lambda: f"prims.broadcast_in_dim: cannot broadcast {tuple(a.shape)} to {shape} (dim {i})")
    return a.like(shape=shape, requires_grad=requires_grad(a))


@prim("reshape")
def reshape(a, shape):
    """a with a new shape of the same number of elements (no -1 here; ltorch resolves it)."""
    check(isinstance(a, TensorProxy), lambda: f"prims.reshape: expected a tensor, got {a!r}")
    shape = tuple(shape)
    check(all(isinstance(s, int) and s >= 0 for s in shape), lambda: f"prims.reshape: invalid shape {shape}")
    check(numel(shape) == a.numel(), lambda: f"shape '{list(shape)}' is invalid for input of size {a.numel()}")
    return a.like(shape=shape, requires_grad=requires_grad(a))
