"""Saved-tensor hooks (used by every stage that handles what the forward saves for backward): shipped (pack, unpack)
pairs, `bf16`, `float8` and `cpu_offload`, each usable as `jit(fn, saved_tensor_hooks=jitcore.hooks.bf16)`, as
`torch.autograd.graph.saved_tensors_hooks(*jitcore.hooks.bf16)` around a jitted or an eager call; `eager(pack,
unpack)`, a pair jitcore never traces; and `ambient_hooks()`, the pair a call runs under (what the cache guards).

>>> w = torch.ones(64, 64, requires_grad=True)
>>> f = lambda x: (x @ w).sin()
>>> jf, jf16 = jitcore.jit(f), jitcore.jit(f, saved_tensor_hooks=jitcore.hooks.bf16)
>>> [jitcore.saved_tensor_bytes(lambda: j(torch.ones(64, 64))).nbytes for j in (jf, jf16)]
[32768, 16384]
"""
from __future__ import annotations

import torch

from jitcore import compat

top_hooks = compat.top_saved_tensors_hooks  # (pack, unpack) or None: torch's own lookup
EAGER_MARK = "__jitcore_eager_hook__"


def eager(pack, unpack) -> tuple:
    """(pack, unpack) marked to run as eager hooks on the tensors a jitted call saves (torch calls them with the real
    tensors), never traced into the programs and without a warning: for hooks that observe what is saved (counting
    bytes, logging) rather than change it."""
    setattr(pack, EAGER_MARK, True)
    return pack, unpack


def ambient_hooks():
    """The (pack, unpack) of the innermost torch.autograd.graph.saved_tensors_hooks active now, or None (none
    active, or a pair marked by `eager`, which the programs leave to torch)."""
    top = top_hooks(False)
    if top is None or getattr(top[0], EAGER_MARK, False):
        return None
    return top


# -- bf16: float32 saved as bfloat16 ------------------------------------------------------------------------------
def bf16_pack(t):
    if t.dtype is torch.float32:
        return t.to(torch.bfloat16), torch.float32
    return t


def bf16_unpack(packed):
    if isinstance(packed, tuple):
        data, dtype = packed
        return data.to(dtype)
    return packed


bf16 = (bf16_pack, bf16_unpack)

# -- float8: e4m3 with one scale per tensor (amax scaling) ----------------------------------------------------------
FLOAT8_MIN_NUMEL = 1024  # smaller tensors (biases, statistics) are saved as they are
_FLOAT8 = torch.float8_e4m3fn
_FLOAT8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def float8_pack(t):
    """A floating tensor of at least FLOAT8_MIN_NUMEL elements -> (float8 data, float32 scale, its dtype); others
    (integer, boolean and small tensors) as they are."""
    if not t.is_floating_point() or t.dtype is _FLOAT8 or t.numel() < FLOAT8_MIN_NUMEL:
        return t
    scale = t.abs().amax().float().clamp(min=1e-12) / _FLOAT8_MAX
    return (t.float() / scale).to(_FLOAT8), scale, t.dtype


def float8_unpack(packed):
    if isinstance(packed, tuple):
        data, scale, dtype = packed
        return (data.float() * scale).to(dtype)
    return packed


float8 = (float8_pack, float8_unpack)


# -- cpu_offload: saved tensors kept in host memory until the backward --------------------------------------------
def cpu_offload_pack(t):
    """(the tensor's device, the tensor on the CPU): the copy starts without waiting (non_blocking); a tensor already
    on the CPU is kept as it is."""
    return t.device, t.to("cpu", non_blocking=True)


def cpu_offload_unpack(packed):
    device, t = packed
    return t.to(device, non_blocking=True)


cpu_offload = (cpu_offload_pack, cpu_offload_unpack)
