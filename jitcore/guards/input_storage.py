"""Guards stage: input storage. What a cache entry remembers of the call it was compiled for, on the CPU, so that
the call can be rebuilt without the user's tensors: to compile ahead of the first real call (warm-up), to reproduce
a compiled call in a bug report, or to run a program again with another executor.

Each tensor argument is described by its shape, strides, storage offset, dtype, device, requires_grad and type
(Parameter or Tensor); what else the call passed is kept as it was. Tensor values are kept by the jit option
`keep_inputs`: "int" (the default) keeps integer and boolean tensors (token ids, indices and masks decide what
embedding, gather and masking do: dummy values would compute something else), "all" keeps every tensor, "none"
keeps metadata only. `InputSpec.materialize()` rebuilds (args, kwargs) on their devices: kept values where kept,
ones elsewhere (zeros for integer tensors, which are valid indices).

A program whose control flow or output sizes depend on tensor values (data guards, `nonzero`, `masked_select`,
...) is marked when it is compiled; materializing it when some tensor's values were not kept is refused with the
reason, since other values would make another program.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from jitcore.errors import JitError
from jitcore.ir.pytree import tree_flatten, tree_unflatten

KEEP_INPUTS = ("int", "all", "none")


def check_keep_inputs(keep: str):
    if keep not in KEEP_INPUTS:
        raise ValueError(f"unknown keep_inputs option {keep!r}; valid options are {', '.join(map(repr, KEEP_INPUTS))}")


def _keeps(t: torch.Tensor, keep: str) -> bool:
    if keep == "all":
        return True
    return keep == "int" and not (t.dtype.is_floating_point or t.dtype.is_complex)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor argument: its metadata, and its values (a CPU copy) when they were kept."""

    shape: tuple
    stride: tuple
    storage_offset: int
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    parameter: bool  # an nn.Parameter (rebuilt as one)
    value: torch.Tensor | None = None  # contiguous CPU copy of the values, or None (not kept)
    layout: torch.layout = torch.strided  # (sparse and other layouts are described, never rebuilt)

    @staticmethod
    def of(t: torch.Tensor, keep: str) -> TensorSpec:
        if t.layout is not torch.strided:  # no strides to describe (jitcore refuses such inputs when it traces)
            return TensorSpec(tuple(t.shape), (), 0, t.dtype, t.device, t.requires_grad, False, None, t.layout)
        value = None
        if _keeps(t, keep):
            value = t.detach().to("cpu", copy=True).contiguous()
        return TensorSpec(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device,
                          t.requires_grad, isinstance(t, torch.nn.Parameter), value)

    def materialize(self) -> torch.Tensor:
        """A tensor with this metadata on its device: the kept values, else ones (zeros for integer dtypes)."""
        if self.layout is not torch.strided:
            raise JitError(f"a {self.layout} tensor argument cannot be rebuilt from its description")
        extent = self.storage_offset + 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride) if n > 0)
        if any(n == 0 for n in self.shape):
            extent = self.storage_offset
        base = torch.empty(extent, dtype=self.dtype, device=self.device)  # (set_: no view of it, as an argument that
        t = torch.empty(0, dtype=self.dtype, device=self.device).set_(  # is a view may compile another entry)
            base.untyped_storage(), self.storage_offset, self.shape, self.stride)
        if self.value is not None:
            t.copy_(self.value.to(self.device))
        elif self.dtype.is_floating_point or self.dtype.is_complex or self.dtype is torch.bool:
            t.fill_(1)
        else:
            t.fill_(0)
        if self.parameter:
            return torch.nn.Parameter(t, requires_grad=self.requires_grad)
        return t.requires_grad_(self.requires_grad) if self.requires_grad else t

    def __repr__(self):
        kept = "values kept" if self.value is not None else "metadata only"
        grad = ", requires_grad" if self.requires_grad else ""
        kind = "Parameter" if self.parameter else "Tensor"
        return (f"{kind}(shape={list(self.shape)}, stride={list(self.stride)}, dtype={self.dtype}, "
                f"device='{self.device}'{grad}; {kept})")


@dataclass
class InputSpec:
    """The arguments of the call a cache entry was compiled for (see the module docstring)."""

    args: tuple
    kwargs: dict
    keep: str
    value_dependent: str = ""  # why the program depends on tensor values ("" when it does not)
    dropped: list = field(default_factory=list)  # the tensor arguments whose values were not kept
    grad_enabled: bool = True  # the grad mode of the call (the entry's guards check it)
    autocast: tuple = ()  # (device type, dtype) of each autocast region the call was made in

    def modes(self):
        """A context manager entering the grad mode and autocast regions the call was made in."""
        stack = contextlib.ExitStack()
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        for device_type, dtype in self.autocast:
            stack.enter_context(torch.autocast(device_type, dtype=dtype))
        return stack

    def tensors(self) -> list[TensorSpec]:
        leaves, _ = tree_flatten((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, TensorSpec)]

    def materialize(self) -> tuple[tuple, dict]:
        """(args, kwargs) rebuilt on their devices: call the jitted function with them to compile its entry."""
        if self.value_dependent and self.dropped:
            raise JitError(
                f"this program {self.value_dependent}, and the values of {', '.join(self.dropped)} were not kept "
                f"(keep_inputs={self.keep!r}): other values would make another program. Jit with "
                "keep_inputs='all' to keep every tensor's values")
        leaves, spec = tree_flatten((self.args, self.kwargs))
        args, kwargs = tree_unflatten(spec, [x.materialize() if isinstance(x, TensorSpec) else x for x in leaves])
        return tuple(args), dict(kwargs)

    def __repr__(self):
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        note = f"  # {self.value_dependent}" if self.value_dependent else ""
        return f"InputSpec({', '.join(parts)}){note}"


def describe(args, kwargs, keep: str) -> InputSpec:
    """The InputSpec of a call (taken before the call runs: the program may write into its inputs)."""
    dropped = []

    def spec_of(value, where):
        leaves, spec = tree_flatten(value)
        out = []
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                x = TensorSpec.of(x, keep)
                if x.value is None:
                    dropped.append(where if len(leaves) == 1 else f"{where} (tensor {i} inside)")
            out.append(x)
        return tree_unflatten(spec, out)

    args = tuple(spec_of(a, f"args[{i}]") for i, a in enumerate(args))
    kwargs = {k: spec_of(v, f"kwargs[{k!r}]") for k, v in kwargs.items()}
    autocast = tuple((d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d))
    return InputSpec(args, kwargs, keep, "", dropped, torch.is_grad_enabled(), autocast)


def value_dependence(traced) -> str:
    """Why a traced program depends on tensor values ("" when it does not)."""
    reasons = []
    if any(g.on_values for g in traced.guards.data):
        reasons.append("branches on tensor values (data guards)")
    if traced.trace.run_time_sizes:
        reasons.append("has sizes that depend on tensor values (nonzero, masked_select, ...)")
    return " and ".join(reasons)
