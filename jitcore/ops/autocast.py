"""Ops: autocast. Inside `torch.autocast(...)` (entered in the traced function, or around the call), torch casts
the inputs of listed ops before running them; jitcore records the same casts explicitly in the trace, as torch's
dispatcher decides them: a listed op is cast and runs below autocast, and so does any op eager runs as a kernel of its
own, while autocast reaches inside the composites eager decomposes (TRANSPARENT). Fusion executors and the backward
see the casts.

POLICY maps (device type, op name) to "lower" (floating inputs other than float64 cast to the autocast dtype),
"fp32" (such inputs cast to float32) or "promote" (floating inputs cast to their widest dtype); the lists follow
torch's autocast op reference for CPU and CUDA. The policy is installed into the IR (jitcore/ir/symbol.py, whose
Symbol.__call__ applies it) with symbol.register_autocast when this module is imported; the IR keeps its tracing
state (how deep inside an op autocast does not reach) in a ContextVar, and this module rebinds nothing there.

As torch's cast cache: a float32 leaf that requires grad (a parameter) is cast to the autocast dtype once per traced
program (with grad enabled), and each later op reads that cast, so the gradients of its uses are summed in the
autocast dtype as in eager; any other tensor is cast again at each op, its uses' gradients summed in its own dtype
(CSE keeps those casts).
"""
from __future__ import annotations

import contextlib

import torch

from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import register_autocast
from jitcore.ops.registry import OPS
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.utils import check

_LOWER = {
    "cpu": "conv1d conv2d conv3d bmm mm vecdot baddbmm addmm addbmm linear matmul rmatmul conv_transpose1d "
           "conv_transpose2d conv_transpose3d prelu scaled_dot_product_attention",
    "cuda": "matmul rmatmul addbmm addmm addmv addr baddbmm bmm conv1d conv2d conv3d conv_transpose1d "
            "conv_transpose2d conv_transpose3d linear mm mv prelu scaled_dot_product_attention",
}
_FP32 = {
    "cpu": "avg_pool3d binary_cross_entropy prod cdist trace mse_loss cosine_embedding_loss nll_loss "
           "poisson_nll_loss smooth_l1_loss cross_entropy l1_loss huber_loss margin_ranking_loss soft_margin_loss "
           "kl_div binary_cross_entropy_with_logits max_pool3d adaptive_avg_pool3d",
    "cuda": "pow rpow rtruediv acos asin binary_cross_entropy_with_logits cosh cosine_embedding_loss cdist "
            "cosine_similarity cross_entropy cumprod cumsum dist erfinv exp expm1 group_norm kl_div l1_loss "
            "layer_norm log log_softmax log10 log1p log2 margin_ranking_loss mse_loss nll_loss norm normalize "
            "poisson_nll_loss prod reciprocal rsqrt sinh smooth_l1_loss soft_margin_loss softmax softmin softplus "
            "sum tan",
}
_PROMOTE = {
    "cpu": "stack index_copy",
    "cuda": "addcdiv addcmul atan2 bilinear cross dot tensordot cat stack index_copy index_put scatter_add",
}
# composites eager decomposes above the autocast layer (CompositeImplicitAutograd) into the listed ops jitcore's
# decompositions call too, so autocast reaches their inner ops (einsum's contractions, tensordot's matmul); the body
# of any other op runs below autocast, as an eager kernel of its own does (adaptive_avg_pool's matmul is not cast)
TRANSPARENT = frozenset(f"ltorch.{n}" for n in "einsum tensordot".split())

POLICY: dict[tuple[str, str], str] = {}
for _dev in ("cpu", "cuda"):
    POLICY.update({(_dev, f"ltorch.{n}"): "lower" for n in _LOWER[_dev].split()})
    POLICY.update({(_dev, f"ltorch.{n}"): "fp32" for n in _FP32[_dev].split()})
    POLICY.update({(_dev, f"ltorch.{n}"): "promote" for n in _PROMOTE[_dev].split()})
AUTOCAST_OPS = frozenset(op for _, op in POLICY)


def _eligible(x) -> bool:
    return isinstance(x, TensorProxy) and x.dtype.is_floating_point and x.dtype is not torch.float64


def autocast_args(sym, args, kwargs):
    """(args, kwargs, listed): args/kwargs with torch's autocast casts for op `sym` applied, and whether autocast
    lists `sym` for its tensors' device (its body then runs below autocast, as torch's kernels do)."""
    leaves, spec = tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, TensorProxy)]
    if not tensors:
        return args, kwargs, False
    dev = tensors[0].device.type
    policy = POLICY.get((dev, sym.id)) if torch.is_autocast_enabled(dev) else None
    if policy is None:
        return args, kwargs, False
    target = _target(policy, dev, tensors)
    if target is None:
        return args, kwargs, True
    cached = target == torch.get_autocast_dtype(dev) and torch.is_autocast_cache_enabled()
    cast = [_cast(x, target, cached) if _eligible(x) and x.dtype != target else x for x in leaves]
    return (*tree_unflatten(spec, cast), True)


def _cast(x: TensorProxy, target, cached: bool):
    """x cast to target; from the trace's cast cache where torch's cached_cast keeps it (a float32 leaf needing grad,
    cast to the autocast dtype, with grad enabled: one made under no_grad is not kept for later uses)."""
    trace = get_tracectx()
    if not (cached and trace is not None and torch.is_grad_enabled() and x.dtype is torch.float32
            and x.requires_grad and x.is_leaf):
        return to_dtype(x, target)
    casts = trace.extra.setdefault("autocast_casts", {})
    key = (x.name, target)
    if key not in casts:
        casts[key] = to_dtype(x, target)
    return casts[key]


def region_exit(exit_method):
    """A stand-in for torch.autocast's `__exit__` bound to its region, run in a traced function: it leaves the region
    natively, and after the outermost region (where eager's exit clears torch's cast cache, so the next region casts
    its parameters afresh) drops the trace's cache of casts too: a parameter used in two regions then has its
    gradients summed per region in the cast dtype, and across regions in float32, as in eager."""
    def leave(*args, **kwargs):
        result = exit_method(*args, **kwargs)
        depth = torch.autocast_increment_nesting()  # (the nesting after the exit, plus one: read, then put back)
        torch.autocast_decrement_nesting()
        trace = get_tracectx()
        if depth == 1 and trace is not None:
            trace.extra.pop("autocast_casts", None)
        return result

    return leave


def _target(policy, dev, tensors):
    if policy == "lower":
        return torch.get_autocast_dtype(dev)
    if policy == "fp32":
        return torch.float32
    floats = [x.dtype for x in tensors if x.dtype.is_floating_point]
    return _prioritize(floats, torch.get_autocast_dtype(dev)) if floats else None


def _prioritize(floats, low):
    """The widest of floats as torch's autocast `promote` decides it, left to right: float64 wins, float32 beats the
    autocast dtype, and any other floating dtype in the lead is an error (as in eager)."""
    current = floats[0]
    for d in floats[1:]:
        check(current in (torch.float64, torch.float32, low),
              lambda current=current: f"autocast promote: {current} among {floats} under autocast {low}: eager raises "
                      "(Unexpected floating ScalarType in at::autocast::prioritize)")
        if current is torch.float64:
            continue
        if d is torch.float64 or (current is low and d is torch.float32):
            current = d
    return current


def outside_autocast(program):
    """program run with autocast off when autocast is on now (the cache guards that state, so it is on at every call
    of this entry): its trace holds autocast's casts already, and a kernel must not cast again what the trace
    decided (a line inside `autocast(enabled=False)`, a listed op inside a composite eager runs as one kernel)."""
    devices = [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
    if not devices:
        return program

    def run(*args):
        with contextlib.ExitStack() as stack:
            for d in devices:
                stack.enter_context(torch.autocast(d, enabled=False))
            return program(*args)

    return run


# (as Symbols: an id in POLICY that names no op fails here, at import)
register_autocast([OPS[op] for op in sorted(AUTOCAST_OPS)], [OPS[op] for op in sorted(TRANSPARENT)], autocast_args)
