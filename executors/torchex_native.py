"""Executors: the torch executor's fused native kernels for the composites whose decomposition is slower than
eager's one kernel: batch norm's training forward and backward (torch.native_batch_norm on copies of the running
stats, aten.native_batch_norm_backward), and the gradient ops named by an aten backward kernel (threshold_backward,
silu_backward, ..., run as that kernel's opaque op). Each composite keeps its torch-level body as subsymbols, so an
executor ahead of torch (a fusion executor) may take the body instead; the torch executor claims the whole line
where the checker accepts its inputs, and decomposes it otherwise.
"""
from __future__ import annotations

import torch

from executors.base import no_meta
from executors.torchex import WRITE_FORMS, torch_ex
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import LTORCH

aten = torch.ops.aten
_NATIVE_DTYPES = (torch.float32, torch.float64)
_NATIVE_BATCH_NORM_BACKWARD = aten.native_batch_norm_backward.default  # (the overload: no resolution per call)


def _same_float(input, *others) -> bool:
    """input is float32/float64 and every other tensor (or None) has its dtype and device."""
    return input.dtype in _NATIVE_DTYPES and all(
        t is None or (t.dtype == input.dtype and t.device == input.device) for t in others)


def _batch_norm_train(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten's training batch norm on copies of the running stats: the program is functional, and the epilogue writes
    the new stats into the module's buffers."""
    new_mean, new_var = running_mean.clone(), running_var.clone()
    out, mean, rstd = torch.native_batch_norm(input, weight, bias, new_mean, new_var, True, momentum, eps)
    return out, mean, rstd, new_mean, new_var


def _batch_norm_train_update(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten's training batch norm updating the running stats it is given, as eager's does: the line that computes
    the new stats when the program writes them back into the module's buffers (transforms/memory.write_into_inputs),
    which it then does not copy."""
    out, mean, rstd = torch.native_batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, rstd, running_mean, running_var


def _batch_norm_train_checker(input, weight, bias, running_mean, running_var, momentum, eps):
    return _same_float(input, weight, bias, running_mean, running_var)


def _batch_norm_backward(grad, input, weight, save_mean, save_rstd, output_mask):
    return _NATIVE_BATCH_NORM_BACKWARD(grad, input, weight, None, None, save_mean, save_rstd, True, 0.0, output_mask)


def _batch_norm_backward_checker(grad, input, weight, save_mean, save_rstd, output_mask):
    return _same_float(input, grad, weight, save_mean, save_rstd)


_TRAIN = torch_ex.register_implementation(LTORCH["batch_norm_train"], _batch_norm_train,
                                          checker=_batch_norm_train_checker, name="batch_norm_train")
_UPDATE = torch_ex.register_operator("batch_norm_train_update", meta=no_meta(LTORCH["batch_norm_train"]),
                                     fn=_batch_norm_train_update)


def _batch_norm_write_form(bsym, targets):
    """The update form when the new running mean and var (results 3, 4) go back into the stats it reads (args 3,
    4): both, or neither (the copies are what keep an old value that is still read)."""
    stats = bsym.args[3:5]
    if set(targets) != {3, 4} or any(getattr(targets[k], "name", None) != getattr(s, "name", 0)
                                     for k, s in zip((3, 4), stats)):
        return None
    return bsym.from_bsym(sym=_UPDATE)


WRITE_FORMS[_TRAIN.id] = _batch_norm_write_form
torch_ex.register_implementation(LTORCH["batch_norm_backward"], _batch_norm_backward,
                                 checker=_batch_norm_backward_checker, name="native_batch_norm_backward")


# the gradient ops that name their aten kernel run it as that kernel's opaque op, which the memory passes know (fresh
# results; an out= overload for the pointwise ones, so a dying gradient's memory is reused)
for _name in ("threshold_backward", "silu_backward", "hardswish_backward", "hardsigmoid_backward",
              "max_pool2d_backward"):
    torch_ex.register_implementation(LTORCH[_name], opaque_symbol(LTORCH[_name].torch_fn))
