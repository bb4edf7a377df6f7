"""Ops: neural-network prims (matmul, linear, convolution, embedding). Strict like every prim: one dtype across
tensor inputs; ltorch promotes and handles unbatched inputs first. Shapes follow torch's own functions.
"""
from __future__ import annotations

import torch

from jitcore.errors import MetaError
from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ops.registry import prim
from jitcore.ops.utils import broadcast_shapes, check, requires_grad, same_device


def _shape(t) -> tuple:
    return tuple(t.shape)


def _tensors(op, *named):
    for what, t in named:
        if not isinstance(t, TensorProxy):
            raise MetaError(f"prims.{op}: expected {what} to be a tensor, got {t!r}")
    ts = [t for _, t in named]
    check(len({t.dtype for t in ts}) == 1,
          lambda: f"prims.{op}: expected one dtype, got {', '.join(f'{w}: {t.dtype}' for w, t in named)}")
    check(ts[0].dtype is not dtypes.torch.bool, lambda: f"prims.{op}: not implemented for 'Bool'")
    return same_device(f"prims.{op}", *ts)


def _matmul_shape(a, b) -> tuple:
    sa, sb = _shape(a), _shape(b)
    check(a.ndim >= 1 and b.ndim >= 1,
          lambda: f"prims.matmul: both arguments need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    k_a = sa[-1]
    k_b = sb[0] if b.ndim == 1 else sb[-2]
    check(k_a == k_b, lambda: f"prims.matmul: shapes {sa} and {sb} cannot be multiplied ({k_a} != {k_b})")
    if a.ndim == 1 and b.ndim == 1:
        return ()
    if b.ndim == 1:
        return sa[:-1]
    if a.ndim == 1:
        return sb[:-2] + sb[-1:]
    batch = broadcast_shapes(matmul.id, sa[:-2], sb[:-2])
    return tuple(batch) + (sa[-2], sb[-1])


@prim("prims.matmul", kernel=torch.matmul)
def matmul(a, b):
    """torch.matmul: dot, matrix-vector, matrix-matrix and batched products with broadcast batch dims."""
    device = _tensors("matmul", ("a", a), ("b", b))
    return TensorProxy(_matmul_shape(a, b), a.dtype, device, requires_grad(a, b))


@prim("prims.linear", kernel=torch.nn.functional.linear)
def linear(a, w, bias):
    """torch.nn.functional.linear: a @ w.T + bias; w is (out, in) or (in,); bias may be None."""
    named = [("input", a), ("weight", w)] + ([("bias", bias)] if bias is not None else [])
    device = _tensors("linear", *named)
    check(a.ndim >= 1 and 1 <= w.ndim <= 2,
          lambda: f"prims.linear: expected input of at least 1 dim and weight of 1 or 2 dims, got {_shape(a)} and "
                  f"{_shape(w)}")
    check(a.shape[-1] == w.shape[-1],
          lambda: f"prims.linear: mat1 and mat2 shapes cannot be multiplied (input {_shape(a)}, weight {_shape(w)})")
    shape = _shape(a)[:-1] + (_shape(w)[:1] if w.ndim == 2 else ())
    check(w.ndim == 2 or bias is None, "prims.linear: a 1-D weight takes no bias (add it after)")
    if bias is not None:
        check(broadcast_shapes(linear.id, shape, _shape(bias)) == tuple(shape),
              lambda: f"prims.linear: bias {_shape(bias)} does not broadcast to the output shape {shape}")
    return TensorProxy(shape, a.dtype, device, requires_grad(a, w, bias))


def _per_dim(op, name, value, n) -> tuple:
    v = (value,) if isinstance(value, int) else tuple(value)
    check(len(v) in (1, n) and all(isinstance(x, int) for x in v),
          lambda: f"prims.{op}: expected {name} to be an int or {n} ints, got {value!r}")
    return v * n if len(v) == 1 else v


def _conv_out_size(n, k, s, p, d, op, transposed) -> int:
    if transposed:
        return (n - 1) * s - 2 * p + d * (k - 1) + op + 1
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


@prim("prims.convolution", kernel=torch.convolution)
def convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """torch.convolution on batched input (N, C, *spatial); padding is ints (ltorch resolves 'same'/'valid')."""
    named = [("input", a), ("weight", weight)] + ([("bias", bias)] if bias is not None else [])
    device = _tensors("convolution", *named)
    n = weight.ndim - 2
    check(n >= 1 and a.ndim == weight.ndim,
          lambda: f"prims.convolution: expected {weight.ndim}-dimensional input for {weight.ndim}-dimensional weight "
                  f"{list(weight.shape)}, but got {a.ndim}-dimensional input of size {list(a.shape)} instead")
    s, p, d = (_per_dim("convolution", nm, v, n) for nm, v in
               (("stride", stride), ("padding", padding), ("dilation", dilation)))
    op = _per_dim("convolution", "output_padding", output_padding, n)
    check(all(x > 0 for x in s + d) and all(x >= 0 for x in p + op) and isinstance(groups, int) and groups > 0,
          lambda: f"prims.convolution: invalid stride {s}, padding {p}, dilation {d}, output_padding {op} or groups "
                  f"{groups}")
    c_in = a.shape[1]
    w_in = weight.shape[0] if transposed else weight.shape[1] * groups
    c_out = weight.shape[1] * groups if transposed else weight.shape[0]
    check(c_in == w_in and (c_in if transposed else c_out) % groups == 0,
          lambda: f"prims.convolution: input {_shape(a)} has {c_in} channels but weight {_shape(weight)} with groups="
                  f"{groups} expects {w_in}")
    check(not transposed or all(o < max(si, di) for o, si, di in zip(op, s, d)),
          lambda: f"prims.convolution: output padding {op} must be smaller than either stride {s} or dilation {d}")
    if bias is not None:
        check(_shape(bias) == (c_out,), lambda: f"prims.convolution: bias {_shape(bias)} must have shape ({c_out},)")
    spatial = tuple(_conv_out_size(a.shape[2 + i], weight.shape[2 + i], s[i], p[i], d[i], op[i], transposed)
                    for i in range(n))
    if any(x <= 0 for x in spatial):
        raise MetaError(f"prims.convolution: output size {spatial} is too small for input {_shape(a)} and weight "
                        f"{_shape(weight)} (stride {s}, padding {p}, dilation {d})")
    return TensorProxy((a.shape[0], c_out) + spatial, a.dtype, device, requires_grad(a, weight, bias))


@prim("prims.embedding", kernel=torch.nn.functional.embedding)
def embedding(a, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """torch.nn.functional.embedding: rows of the 2-D weight at the integer indices a."""
    check(isinstance(a, TensorProxy) and dtypes.category(a.dtype) == 1,
          lambda: f"prims.embedding: expected integer indices, got {getattr(a, 'dtype', a)!r}")
    check(isinstance(weight, TensorProxy) and weight.ndim == 2,
          lambda: f"prims.embedding: weight must be 2-D, got {getattr(weight, 'shape', weight)!r}")
    device = same_device(embedding.id, a, weight)
    return TensorProxy(_shape(a) + (weight.shape[1],), weight.dtype, device, requires_grad(weight))
