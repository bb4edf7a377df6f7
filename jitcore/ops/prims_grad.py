"""Ops: kernels only the grad transform records. torch's CPU flash-attention pair, which the VJP rule of
scaled_dot_product_attention swaps in (its forward also returns the logsumexp the backward reads). They are opaque
ops: each runs as the torch call it wraps, with a meta over proxies registered here (so symbolic sizes reach them: a
run on meta tensors needs concrete sizes). aten's other backward kernels have theirs in jitcore/ops/opaque.py.
"""
from __future__ import annotations

import torch

from jitcore.ops.opaque import register_opaque_meta

aten = torch.ops.aten


# -- attention: torch's CPU flash kernels (out and logsumexp saved, like eager's autograd) -------------------------
def _last_dim_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def sdpa_flash_cpu(query, key, value, dropout_p, is_causal, scale):
    """The CPU flash-attention forward (reads rows along the last dim: it needs unit stride there)."""
    q, k, v = (_last_dim_contiguous(t) for t in (query, key, value))
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, scale=scale)


def sdpa_flash_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale):
    g, q, k, v, o = (_last_dim_contiguous(t) for t in (grad_out, query, key, value, out))
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, o, logsumexp, dropout_p, is_causal,
                                                                     scale=scale)


def _sdpa_flash_cpu_meta(query, key, value, dropout_p, is_causal, scale):
    rg = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    out = query.like(shape=tuple(query.shape[:-1]) + (value.shape[-1],), requires_grad=rg)
    return out, query.like(shape=tuple(query.shape[:-1]), dtype=torch.float32, requires_grad=False)


def _sdpa_flash_cpu_backward_meta(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale):
    return tuple(t.like(requires_grad=False) for t in (query, key, value))


register_opaque_meta(sdpa_flash_cpu, _sdpa_flash_cpu_meta, pure=True)
register_opaque_meta(sdpa_flash_cpu_backward, _sdpa_flash_cpu_backward_meta, pure=True)
