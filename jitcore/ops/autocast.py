"""Ops: autocast. Inside `torch.autocast(...)` (entered in the traced function, or around the call), torch casts
the inputs of listed ops before running them; jitcore records the same casts explicitly in the trace, at the
outermost op only (as torch's dispatcher does), so fusion executors and the backward see them.

POLICY maps (device type, op name) to "lower" (floating inputs other than float64 cast to the autocast dtype),
"fp32" (such inputs cast to float32) or "promote" (floating inputs cast to their widest dtype); the lists follow
torch's autocast op reference for CPU and CUDA.
"""
from __future__ import annotations

import torch

from jitcore.proxies import TensorProxy
from jitcore.pytree import tree_flatten, tree_unflatten

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
_PROMOTE = "addcdiv addcmul atan2 bilinear cross dot tensordot cat stack index_copy index_put scatter_add"

POLICY: dict[tuple[str, str], str] = {}
for _dev in ("cpu", "cuda"):
    POLICY.update({(_dev, f"ltorch.{n}"): "lower" for n in _LOWER[_dev].split()})
    POLICY.update({(_dev, f"ltorch.{n}"): "fp32" for n in _FP32[_dev].split()})
    POLICY.update({(_dev, f"ltorch.{n}"): "promote" for n in _PROMOTE.split()})
AUTOCAST_OPS = frozenset(op for _, op in POLICY)


def _eligible(x) -> bool:
    return isinstance(x, TensorProxy) and x.dtype.is_floating_point and x.dtype is not torch.float64


def autocast_args(sym, args, kwargs):
    """args/kwargs with torch's autocast casts applied for op `sym`, or unchanged when autocast does not apply."""
    leaves, spec = tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, TensorProxy)]
    if not tensors:
        return args, kwargs
    dev = tensors[0].device.type
    if dev not in ("cpu", "cuda") or not torch.is_autocast_enabled(dev):
        return args, kwargs
    policy = POLICY.get((dev, sym.id))
    if policy is None:
        return args, kwargs
    if policy == "lower":
        target = torch.get_autocast_dtype(dev)
    elif policy == "fp32":
        target = torch.float32
    else:
        floats = [x.dtype for x in tensors if x.dtype.is_floating_point]
        target = floats[0] if floats else None
        for d in floats[1:]:
            target = torch.promote_types(target, d)
    if target is None:
        return args, kwargs
    from jitcore.ops.torch_elementwise import to_dtype

    cast = [to_dtype(x, target) if _eligible(x) and x.dtype != target else x for x in leaves]
    return tree_unflatten(spec, cast)


def _install():
    from jitcore import symbol

    symbol.AUTOCAST_OPS, symbol.autocast_args = AUTOCAST_OPS, autocast_args


_install()
