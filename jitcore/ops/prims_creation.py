"""Ops: creation prims (full, empty, iota, uniform, normal, randint, bernoulli, sample, tensor_from_sequence): tensors
from no tensor inputs (bernoulli_tensor: from a tensor of probabilities). Shapes are tuples of ints, device a
torch.device, dtype a torch.dtype. The random ones draw from torch's default generator when they run (or from the
generator= the user gave: jitcore/ops/rng_generators.py), with the very kernel eager calls (so
torch.manual_seed reproduces eager's values and generator state).
"""
from __future__ import annotations

import torch

from jitcore.ir import devices
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Tag
from jitcore.ops.registry import prim
from jitcore.ops.utils import check, is_int, is_number, requires_grad

CREATION = (Tag.CREATION,)
RANDOM = (Tag.CREATION, Tag.RANDOM)


def _out(op, shape, device, dtype) -> TensorProxy:
    check(isinstance(shape, (tuple, list)) and all(is_int(s) and s >= 0
                                                   for s in shape),
          lambda: f"prims.{op}: shape must be a tuple of non-negative ints, got {shape!r}")
    check(isinstance(dtype, torch.dtype), lambda: f"prims.{op}: dtype must be a torch.dtype, got {dtype!r}")
    return TensorProxy(tuple(shape), dtype, devices.to_device(device), False)


@prim("prims.full", tags=CREATION)
def full(shape, fill_value, *, device, dtype):
    """A tensor of `shape` filled with fill_value."""
    check(is_number(fill_value), lambda: f"prims.full: fill_value must be a number, got {fill_value!r}")
    return _out("full", shape, device, dtype)


@prim("prims.empty", tags=CREATION)
def empty(shape, *, device, dtype):
    """An uninitialized tensor of `shape`."""
    return _out("empty", shape, device, dtype)


@prim("prims.iota", tags=CREATION)
def iota(length, *, start, step, device, dtype):
    """start + step * arange(length) (computed in float64/int64, then cast to dtype, like torch.arange on CPU)."""
    check(is_int(length) and length >= 0, lambda: f"prims.iota: length must be an int >= 0, got {length!r}")
    check(is_number(start) and is_number(step), lambda: f"prims.iota: start and step must be numbers: {start}, {step}")
    return _out("iota", (length,), device, dtype)


def _check_float(op, dtype):
    check(isinstance(dtype, torch.dtype) and dtype.is_floating_point,
          lambda: f"prims.{op}: expected a floating point dtype, got {dtype}")


@prim("prims.uniform", tags=RANDOM)
def uniform(shape, minval, maxval, *, device, dtype, generator=None):
    """Samples from U[minval, maxval) (torch's Tensor.uniform_)."""
    _check_float("uniform", dtype)
    check(is_number(minval) and is_number(maxval) and minval <= maxval,
          lambda: f"prims.uniform: expects minval <= maxval, got {minval!r} and {maxval!r}")
    return _out("uniform", shape, device, dtype)


@prim("prims.normal", tags=RANDOM)
def normal(shape, mean, std, *, device, dtype, generator=None):
    """Samples from N(mean, std**2) (torch's Tensor.normal_)."""
    _check_float("normal", dtype)
    check(is_number(mean) and is_number(std) and std >= 0,
          lambda: f"prims.normal: expects std >= 0.0, got mean {mean!r} and std {std!r}")
    return _out("normal", shape, device, dtype)


@prim("prims.normal_serial", tags=RANDOM)
def normal_serial(shape, mean, std, *, device, dtype, generator=None):
    """Samples from N(mean, std**2) drawn one element at a time, in order: eager's CPU normal_ on a tensor that is
    not contiguous (a contiguous one of 16 or more elements is drawn in batches, as prims.normal does)."""
    _check_float("normal_serial", dtype)
    check(is_number(mean) and is_number(std) and std >= 0,
          lambda: f"prims.normal_serial: expects std >= 0.0, got mean {mean!r} and std {std!r}")
    return _out("normal_serial", shape, device, dtype)


@prim("prims.randint", tags=RANDOM)
def randint(low, high, shape, *, device, dtype, generator=None):
    """Integers drawn uniformly from [low, high) (torch.randint)."""
    check(isinstance(low, int) and isinstance(high, int) and low < high,
          lambda: f"prims.randint: random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return _out("randint", shape, device, dtype)


@prim("prims.bernoulli", tags=RANDOM)
def bernoulli(shape, p, *, device, dtype, generator=None):
    """1 with probability p (a number), else 0: torch.empty(shape).bernoulli_(p), the draw eager's dropout and
    torch.bernoulli(t, p) make."""
    check(is_number(p) and 0 <= p <= 1, lambda: f"prims.bernoulli: expects 0 <= p <= 1, but got p={p!r}")
    check(not dtype.is_complex, lambda: f"prims.bernoulli: expected a real dtype, got {dtype}")
    return _out("bernoulli", shape, device, dtype)


@prim("prims.bernoulli_tensor", tags=(Tag.RANDOM,))
def bernoulli_tensor(prob, shape, *, dtype, generator=None):
    """1 with the probabilities in prob (broadcast to shape), else 0: torch.empty(shape).bernoulli_(prob), the draw
    torch.bernoulli(prob) and Tensor.bernoulli_(prob) make."""
    check(isinstance(prob, TensorProxy) and prob.dtype.is_floating_point,
          lambda: f"prims.bernoulli_tensor: expected a floating point tensor of probabilities, got {prob!r}")
    check(not dtype.is_complex, lambda: f"prims.bernoulli_tensor: expected a real dtype, got {dtype}")
    out = _out("bernoulli_tensor", shape, prob.device, dtype)
    # like eager, the result requires grad when prob does (its gradient is zero: transforms/vjp_rules.py)
    return out.like(requires_grad=requires_grad(prob) and dtype.is_floating_point)


SAMPLERS = ("exponential", "cauchy", "log_normal", "geometric")  # Tensor.<kind>_ draws that take only numbers


@prim("prims.sample", tags=RANDOM)
def sample(kind, shape, params, *, device, dtype, generator=None):
    """torch.empty(shape).<kind>_(*params) for kind in SAMPLERS (Tensor.exponential_(lambd), cauchy_(median,
    sigma), log_normal_(mean, std), geometric_(p)): eager's own draw; the arguments are checked as eager checks them."""
    check(kind in SAMPLERS, lambda: f"prims.sample: kind must be one of {SAMPLERS}, got {kind!r}")
    check(isinstance(params, tuple) and all(is_number(v) for v in params),
          lambda: f"prims.sample: params must be a tuple of numbers, got {params!r}")
    out = _out("sample", shape, device, dtype)
    problem = _sampler_problem(kind, params, dtype)
    check(problem is None, lambda: problem)
    return out


def _sampler_problem(kind, params, dtype) -> str | None:
    """Eager's own complaint about these arguments (its checks run on a meta tensor), or None."""
    try:
        getattr(torch.empty(0, device="meta", dtype=dtype), kind + "_")(*params)
    except RuntimeError as e:
        return str(e)
    return None


def _sequence_shape(seq) -> tuple:
    if is_number(seq):  # a Python number or a number proxy (a symbolic value)
        return ()
    check(isinstance(seq, (list, tuple)), lambda: f"prims.tensor_from_sequence: expected numbers or lists, got {seq!r}")
    shapes = [_sequence_shape(s) for s in seq]
    check(len(set(shapes)) <= 1,
          lambda: f"prims.tensor_from_sequence: expected a rectangular sequence, got element shapes {shapes}")
    return (len(seq),) + (shapes[0] if shapes else ())


@prim("prims.tensor_from_sequence", tags=CREATION)
def tensor_from_sequence(seq, *, dtype, device):
    """torch.tensor of a (nested) list of Python numbers."""
    return _out("tensor_from_sequence", _sequence_shape(seq), device, dtype)
