"""Ops: torch-level ops that fit no other family: torch.diff, block_diag, Tensor.sum_to_size, Tensor.type, and the
Python-valued helpers the interpreter maps (torch.numel, torch.is_tensor, torch.is_floating_point, result_type,
has_torch_function, torch._check on symbolic conditions).
Ops whose output sizes depend on tensor values (unique, bincount) are in torch_value_sizes.py.
"""
from __future__ import annotations

import torch

from jitcore.errors import MetaError, UnsupportedError
from jitcore.ir import dtypes
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.trace import get_tracectx
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_elementwise as te
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_map import TORCH_MAP, register_method
from jitcore.ops.torch_reduction import sum as rsum
from jitcore.ops.torch_shape import _cat, _promote_all, copy, dim_of, shape_arg, slice_dim
from jitcore.ops.utils import check, same_size

T = torch.Tensor


@torchsymbol(torch.diff, T.diff, method="diff", id="ltorch.diff")
def diff(input, n=1, dim=-1, prepend=None, append=None):
    check(input.ndim > 0, "diff expects input to be at least one-dimensional")
    check(n >= 0, lambda: f"order must be non-negative but got {n}")
    d = dim_of("diff", dim, input.ndim)
    if n == 0:  # eager: a copy of input, prepend and append ignored
        return copy(input)
    parts = [p for p in (prepend, input, append) if p is not None]
    x = _cat("diff", [te.expand_to(p, _with(input.shape, d, 1)) if p.ndim == 0 else p for p in parts], d) \
        if len(parts) > 1 else input
    for _ in range(n):
        size = x.shape[d]
        if size == 0:
            break
        hi, lo = slice_dim(x, d, 1, size), slice_dim(x, d, 0, size - 1)
        x = te.logical_xor(hi, lo) if x.dtype is torch.bool else te.sub(hi, lo)
    return x


def _with(shape, d, size):
    return tuple(size if i == d else s for i, s in enumerate(shape))


@torchsymbol(torch.block_diag, id="ltorch.block_diag")
def block_diag(*tensors):
    check(len(tensors) > 0, "block_diag: expected at least one tensor")
    mats = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise MetaError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                            f"{t.ndim} dimensions")
        mats.append(ps.reshape(t, (1, 1)) if t.ndim == 0 else ps.reshape(t, (1, t.shape[0])) if t.ndim == 1 else t)
    dtype = _promote_all(mats)
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        w = m.shape[1]
        pad = ((0, 0, 0), (left, cols - left - w, 0))
        rows.append(ps.pad(to_dtype(m, dtype), to_dtype(0, dtype), pad))
        left += w
    return _cat("block_diag", rows, 0)


@torchsymbol(T.sum_to_size, method="sum_to_size", id="ltorch.sum_to_size")
def sum_to_size(self, *size):
    if not size:
        raise TypeError('sum_to_size() missing 1 required positional arguments: "size"')
    size = shape_arg(size)
    check(len(size) <= self.ndim and all(same_size(s, d) or s == 1 or s == d
                                          for s, d in zip(reversed(size), reversed(self.shape))),
          lambda: f"size {{{', '.join(map(str, size))}}} is not expandable to size "
                  f"{{{', '.join(map(str, self.shape))}}}.")
    lead = self.ndim - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if not same_size(s, self.shape[lead + i])
                                      and s == 1 and self.shape[lead + i] != 1)
    if not dims:
        return self
    out = rsum(self, dims, keepdim=True)
    return ps.reshape(out, tuple(size)) if lead else out


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """Tensor.type(): the type string with no argument; a conversion given a dtype or a type name."""
    if dtype is None:
        name = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool"}.get(self.dtype, str(self.dtype))
        prefix = "torch." if self.device.type == "cpu" else f"torch.{self.device.type}."
        return f"{prefix}{name}Tensor"
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.split(".")[-1]).dtype
    elif isinstance(dtype, type):
        dtype = dtype.dtype
    return to_dtype(self, dtype)


register_method("type", _type)


def _is_nonzero(input):
    """A Python bool: the value of a one-element tensor, read through the data guards."""
    return bool(input)


TORCH_MAP[torch.is_nonzero] = _is_nonzero
register_method("is_nonzero", _is_nonzero)


# -- Python-valued helpers: plain functions in the torch map (no op is recorded; the answer is metadata) -------------
def _result_type(tensor1, tensor2):
    return dtypes.promote_dtypes(tensor1, tensor2)


def _has_torch_function(has):
    """torch.overrides.has_torch_function* as eager answers it for the tensors a proxy stands for (plain tensors:
    False), asked by interpreted code (modules choosing their fast path); other objects are asked natively."""
    def answer(*args):
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            args = (tuple(a for a in args[0] if not isinstance(a, TensorProxy)),)
        else:
            args = tuple(a for a in args if not isinstance(a, TensorProxy))
        return False if not args or args == ((),) else has(*args)

    return answer


def _check_with(error_type, cond, message=None):
    """torch._check_with (and torch._check and its kin) on a symbolic condition (a comparison of sizes): the `if`
    records the predicate that held, as any branch on sizes does; a False condition raises eager's error type and
    message through torch's own function, which also answers a tensor or other object as eager does."""
    if isinstance(cond, NumberProxy):
        cond = bool(cond)
    torch._check_with(error_type, cond, message)


def _check_as(error_type):
    return lambda cond, message=None: _check_with(error_type, cond, message)


_TORCH_CHECKS = {RuntimeError: torch._check, IndexError: torch._check_index, ValueError: torch._check_value,
                 TypeError: torch._check_type, NotImplementedError: torch._check_not_implemented}
TORCH_MAP[torch._check_with] = _check_with
TORCH_MAP.update({fn: _check_as(error) for error, fn in _TORCH_CHECKS.items()})


# -- nn.TransformerEncoder's nested fast path (eval, no grad, a padding mask), modelled on dense tensors --------------
# Eager turns the padded batch into a nested tensor of the valid rows, runs each layer's fused kernel on it and pads
# the result with zeros. Here the batch stays dense, its padded rows zero, and the proxy remembers which rows are
# valid: `is_nested` answers True, the layer's fused kernel runs with that padding mask, and to_padded_tensor zeroes
# the padded rows again. The valid rows are eager's (attention only reads valid keys); the padded rows are zeros.
def _nested_masks() -> dict:
    trace = get_tracectx()
    return trace.extra.setdefault("nested_masks", {}) if trace is not None else {}


def _fill_padded_rows(t, valid, padding=0.0):
    return t.masked_fill(valid.logical_not().unsqueeze(-1), padding)


def _nested_from_mask(t, mask, mask_check=True):
    check(t.ndim == 3 and mask.ndim == 2 and tuple(mask.shape) == tuple(t.shape[:2]),
          lambda: f"_nested_tensor_from_mask: expected a (batch, length, features) tensor and a (batch, length) "
                  f"mask, got {tuple(t.shape)} and {tuple(mask.shape)}")
    out = _fill_padded_rows(t, mask)
    _nested_masks()[out.name] = mask
    return out


def _encoder_layer_fwd(src, *args, **kwargs):
    op = opaque_symbol(torch._transformer_encoder_layer_fwd)
    valid = _nested_masks().get(getattr(src, "name", None))
    if valid is None:
        return op(src, *args, **kwargs)
    rest = (list(args) + [None, None])[17:19]  # (mask and mask_type come after the 17 others, or as keywords)
    args, mask = args[:17], kwargs.get("mask", rest[0])
    check(mask is None, "_transformer_encoder_layer_fwd: a mask with a nested input is not supported")
    out = _fill_padded_rows(op(src, *args, mask=valid.logical_not(), mask_type=1), valid)
    _nested_masks()[out.name] = valid
    return out


def _to_padded_tensor(self, padding, output_size=None):
    valid = _nested_masks().get(self.name)
    if valid is None:
        raise UnsupportedError("nested tensors", "to_padded_tensor of a tensor jitcore does not know as nested")
    check(output_size is None or tuple(output_size) == tuple(self.shape),
          lambda: f"to_padded_tensor: output_size {tuple(output_size)} differs from {tuple(self.shape)}")
    return _fill_padded_rows(self, valid, padding)


TORCH_MAP[torch._nested_tensor_from_mask] = _nested_from_mask
TORCH_MAP[torch._transformer_encoder_layer_fwd] = _encoder_layer_fwd
register_method("to_padded_tensor", _to_padded_tensor)


TORCH_MAP.update({
    torch.overrides.has_torch_function: _has_torch_function(torch.overrides.has_torch_function),
    torch.overrides.has_torch_function_unary: _has_torch_function(torch.overrides.has_torch_function_unary),
    torch.overrides.has_torch_function_variadic: _has_torch_function(torch.overrides.has_torch_function_variadic),
    torch.numel: lambda input: input.numel(),
    torch.is_tensor: lambda obj: isinstance(obj, (TensorProxy, torch.Tensor)),
    torch.is_floating_point: lambda input: input.dtype.is_floating_point,
    torch.is_complex: lambda input: input.dtype.is_complex,
    torch.result_type: _result_type,
})


def _backward(self, *args, **kwargs):
    """`loss.backward()` inside a jitted function: the program's backward is built from the whole program once it is
    traced; a backward in the middle of it has nothing to run."""
    raise UnsupportedError(
        "callable", "tensor.backward() inside a jitted function: the program's backward is built from the whole "
                    "program, after it is traced",
        hint="return the loss and call loss.backward() outside the jitted function")


register_method("backward", _backward)


# -- autograd hooks registered on a tensor inside the function: eager's error where eager has one, else refused --------
_HOOK_ERRORS = {  # eager's RuntimeError for a tensor the hook cannot go on
    "register_hook": (lambda t: not t.requires_grad, "cannot register a hook on a tensor that doesn't require "
                                                      "gradient"),
    "retain_grad": (lambda t: not t.requires_grad, "can't retain_grad on Tensor that has requires_grad=False"),
    "register_post_accumulate_grad_hook": (lambda t: not t.is_leaf,
                                           "post accumulate grad hooks cannot be registered on non-leaf tensors"),
}


def _hook_refused(name: str):
    wrong, message = _HOOK_ERRORS[name]

    def call(self, *args, **kwargs):
        if wrong(self):
            raise RuntimeError(message)
        raise UnsupportedError(
            "tensor hook", f"Tensor.{name}() inside a jitted function: the program's backward is one autograd node "
            "built when the function is traced, so a hook or retained gradient on a tensor inside it would never be "
            "run or filled (and on an input it would be added again on every call)",
            hint="register it outside the jitted function, on an input or on an output it returns "
                 "(`y = jf(x); y.register_hook(...)`), or run this code eagerly")

    return call


for _name in _HOOK_ERRORS:
    register_method(_name, _hook_refused(_name))
    TORCH_MAP.setdefault(getattr(T, _name), _hook_refused(_name))  # (torch.Tensor.register_hook(y, fn))
