"""Ops: torch-level attention (F.scaled_dot_product_attention), written like torch's math backend: scale split
as sqrt on q and k, boolean or additive masks, causal masks, grouped-query heads, rows with every key masked give
zeros (torch's safe softmax), dropout on the weights, and half precision computed in float32.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_python as pp
from jitcore.ops import prims_shape as ps
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import add, div, eq, exp, expand_to, ge, mul, sub, to_dtype, where
from jitcore.ops.torch_nn_activation import dropout
from jitcore.ops.utils import check

F = torch.nn.functional


def _repeat_heads(t, groups):
    """(..., Hk, S, E) -> (..., Hk * groups, S, E), each head repeated `groups` times in place (repeat_interleave)."""
    if groups == 1:
        return t
    *batch, h, s, e = t.shape
    t = expand_to(ps.reshape(t, (*batch, h, 1, s, e)), (*batch, h, groups, s, e))
    return ps.reshape(t, (*batch, h * groups, s, e))


def _check_sdpa(query, key, value, attn_mask, is_causal, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not (isinstance(t, TensorProxy) and t.ndim >= 2):
            check(False, f"scaled_dot_product_attention: expected {name} to be a tensor of at least 2 dims, got {t!r}")
    check(query.dtype == key.dtype == value.dtype and query.dtype.is_floating_point,
          lambda: f"Expected query, key, and value to have the same dtype, but got query.dtype: {query.dtype} "
                  f"key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    check(query.shape[-1] == key.shape[-1] and key.shape[-2] == value.shape[-2],
          lambda: f"scaled_dot_product_attention: shapes do not match: query {tuple(query.shape)}, key "
                  f"{tuple(key.shape)}, value {tuple(value.shape)}")
    check(not (is_causal and attn_mask is not None),
          "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if enable_gqa and query.ndim >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        check(hk > 0 and hq % hk == 0 and value.shape[-3] == hk,
              lambda: f"scaled_dot_product_attention: number of heads in key and value ({hk}, {value.shape[-3]}) must "
                      f"divide the number of heads in query ({hq})")


def _causal_bias(q_len, kv_len, like):
    """0 where key j <= query i (top-left aligned), -inf elsewhere."""
    i = nh.unsqueeze(nh.iota(q_len, like), 1)
    j = nh.unsqueeze(nh.iota(kv_len, like), 0)
    return where(ge(i, j), 0.0, -math.inf)


def _safe_softmax(scores):
    """softmax over the last dim; rows whose every entry is -inf give 0 (not nan), like torch's math backend."""
    d = scores.ndim - 1
    m = nh.amax(scores, d, keepdim=True)
    all_masked = eq(m, -math.inf)
    e = exp(sub(scores, where(all_masked, 0.0, m)))
    return div(e, where(all_masked, 1.0, nh.sum_(e, d, keepdim=True)))


@torchsymbol(F.scaled_dot_product_attention, tags=(Tag.RANDOM,), id="ltorch.scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                 scale=None, enable_gqa=False):
    _check_sdpa(query, key, value, attn_mask, is_causal, enable_gqa)
    q, k, v = nh.upcast(query), nh.upcast(key), nh.upcast(value)
    if enable_gqa and query.ndim >= 3:
        k = _repeat_heads(k, query.shape[-3] // key.shape[-3])
        v = _repeat_heads(v, query.shape[-3] // value.shape[-3])
    if scale is None:  # 1 / sqrt(E), recorded when E is symbolic (not pinned); positive: no predicate on its sign
        scale, negative = 1.0 / pp.sqrt(query.shape[-1]), False
    else:
        negative = scale < 0
    root = pp.sqrt(abs(scale))
    q = mul(q, -root if negative else root)
    scores = pn.matmul(q, nh.swap(mul(k, root), k.ndim - 2, k.ndim - 1))
    if is_causal:
        scores = add(scores, _causal_bias(query.shape[-2], key.shape[-2], scores))
    if attn_mask is not None:
        if attn_mask.dtype is torch.bool:
            scores = where(attn_mask, scores, -math.inf)
        else:
            scores = add(scores, nh.upcast(attn_mask))
    weights = _safe_softmax(scores)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return to_dtype(pn.matmul(weights, v), query.dtype)
