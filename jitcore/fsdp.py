"""The jitted module under FSDP2 (torch.distributed.fsdp.fully_shard): FSDP's hooks run eagerly around the jitted
program, never inside it. A call runs the root's own hooks (all-gather of its parameters, input casts), then every
sharded submodule's pre-forward (all-gather: the parameters become plain unsharded tensors), then the program of the
model's forward over those unsharded parameters (inside it, each sharded submodule keeps only the dtype casts of its
MixedPrecisionPolicy), then each submodule's post-forward (reshard, and the pre-backward hooks that gather the
parameters again before the program's backward). FSDP's end-of-backward callback reduce-scatters the gradients.
"""
from __future__ import annotations

import contextlib
import sys
import textwrap

import torch

from jitcore.errors import UnsupportedError
from jitcore.guards import module_state
from jitcore.ir.proxies import TensorProxy

HINT = ("apply fully_shard to the plain model (to its blocks, then to the root) and jit the sharded model: "
        "fully_shard(block) for each block, fully_shard(model), then jitcore.jit(model); or jit a sharded block "
        "inside a sharded model: model.blocks[i] = jitcore.jit(model.blocks[i]) after fully_shard")


def _fsdp_module_class():
    """FSDP2's FSDPModule, or None when torch.distributed.fsdp was never imported (then nothing is sharded)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return getattr(fsdp, "FSDPModule", None)


def _modules(model):
    """model's submodules, in registration order, through jitted modules (the models they wrap)."""
    for m in model.modules():
        inner = m.__dict__.get("_model") if getattr(type(m), "__jitcore_inline__", None) == "_model" else None
        if inner is not None:
            yield from _modules(inner)
        else:
            yield m


def is_sharded(model) -> bool:
    """Whether fully_shard was applied to model or to one of its submodules."""
    cls = _fsdp_module_class()
    return cls is not None and any(isinstance(m, cls) for m in _modules(model))


def _cast(dtype):
    """FSDP's input/output cast (its _cast_fp_tensor, over tuples, lists and dicts) as code the program records."""
    def cast(x):  # (run natively by the interpreter, as jitcore's code: on proxies, x.to records the cast)
        if isinstance(x, (torch.Tensor, TensorProxy)):
            return x.to(dtype) if x.dtype.is_floating_point and x.dtype != dtype else x
        if isinstance(x, (tuple, list)):
            return type(x)(cast(v) for v in x)
        if isinstance(x, dict):
            return {k: cast(v) for k, v in x.items()}
        return x

    return cast


class _Unit:
    """A sharded submodule: its FSDP state, the keys of FSDP's hooks in its hook tables, and the hooks that stand in
    for them while the program is traced and runs (only the casts of its MixedPrecisionPolicy, or none)."""

    def __init__(self, module, state):
        self.module, self.state = module, state
        pre = [k for k, h in module._forward_pre_hooks.items() if h == state._pre_forward]
        post = [k for k, h in module._forward_hooks.items() if h == state._post_forward]
        if len(state._modules) != 1 or len(pre) != 1 or len(post) != 1:
            raise UnsupportedError("FSDP2", f"{type(module).__name__} was sharded together with other modules "
                                   "(fully_shard([a, b, ...])): their forward hooks are shared", hint=HINT)
        self.pre_key, self.post_key = pre[0], post[0]
        mp = state._mp_policy
        cast_in = _cast(mp.param_dtype) if mp.cast_forward_inputs and mp.param_dtype is not None else None
        cast_out = _cast(mp.output_dtype) if mp.output_dtype is not None else None
        self.pre_stand_in = None if cast_in is None else (lambda m, args, kwargs: cast_in((args, kwargs)))
        self.post_stand_in = None if cast_out is None else (lambda m, args, out: cast_out(out))

    @contextlib.contextmanager
    def hooks_inside(self):
        """FSDP's hooks replaced by the stand-ins (or removed) while the program runs."""
        m = self.module
        pre, post = m._forward_pre_hooks[self.pre_key], m._forward_hooks[self.post_key]
        _swap(m._forward_pre_hooks, self.pre_key, self.pre_stand_in)
        _swap(m._forward_hooks, self.post_key, self.post_stand_in)
        try:
            yield
        finally:
            m._forward_pre_hooks[self.pre_key] = pre
            m._forward_hooks[self.post_key] = post

    def pre_forward(self):
        self.state._pre_forward(self.module, (), {})  # all-gather (no inputs: its post-backward runs at the end)

    def post_forward(self, output):
        """FSDP's post-forward of this module, given the program's outputs (the pre-backward hooks go on them);
        without its output cast, which the stand-in did inside the program."""
        state = self.state
        for group in state._fsdp_param_groups:
            output = group.post_forward(self.module, (), output)
        output = state._register_pre_backward_hook(output)
        state._training_state = type(state._training_state).IDLE
        return output


def _swap(table: dict, key, hook):
    if hook is None:
        del table[key]
    else:
        table[key] = hook


class ShardedCall:
    """What a JitModule over a model sharded with fully_shard calls: the model's own __call__ (the root's FSDP hooks,
    eagerly) with its forward replaced, for the call, by `_forward`: the sharded submodules' pre-forwards, the
    jitted forward (`inner`, a JitFunction over the model's forward) and their post-forwards."""

    def __init__(self, model, inner):
        cls = _fsdp_module_class()
        units = [m for m in _modules(model) if isinstance(m, cls) and m is not model]
        if units and not isinstance(model, cls):
            raise UnsupportedError("FSDP2", f"submodules of {type(model).__name__} were sharded with fully_shard, "
                                   "but not the model itself: its forward would run with no FSDP root",
                                   hint="apply fully_shard to the root too (after its blocks), then jitcore.jit(model)")
        self.model, self.inner = model, inner
        self.units = [_Unit(m, m._get_fsdp_state()) for m in units]
        self.options = inner.options
        self._described = None  # the last cache entry whose programs say where FSDP gathers and reduces

    def __getattr__(self, name):  # the rest is the inner JitFunction's (_last_entry, _cache, entries, ...): what
        inner = self.__dict__.get("inner")  # inspection (last_traces, cache_misses) reads
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __call__(self, /, *args, **kwargs):
        model = self.model
        model.__dict__["forward"] = self._forward
        try:
            return model(*args, **kwargs)
        finally:
            model.__dict__.pop("forward", None)

    def _forward(self, *args, **kwargs):
        for unit in self.units:
            unit.pre_forward()
        with contextlib.ExitStack() as stack:
            for unit in self.units:
                stack.enter_context(unit.hooks_inside())
            # FSDP writes the modules' parameter tables directly (sharded DTensors <-> unsharded tensors), which the
            # module state epoch does not see: the parameters are fetched afresh on every call
            module_state.bump()
            out = self.inner(*args, **kwargs)
        if self.inner._last_entry is not self._described:
            self._describe(self.inner._last_entry)
        for unit in reversed(self.units):
            out = unit.post_forward(out)
        return out

    def _describe(self, entry):
        """Comments atop the entry's programs saying where FSDP gathers the parameters and reduces the gradients
        (on every backward trace: the variants built later for absent cotangents copy them)."""
        self._described = entry
        names = {id(m): n for n, m in self.model.named_modules()}
        units = [names.get(id(u.module), type(u.module).__name__) for u in self.units]
        cls = _fsdp_module_class()
        own = next(c for c in type(self.model).__mro__ if not issubclass(c, cls)).__name__
        own = [f"{own} (its own parameters, by its pre-forward hook)"] if isinstance(self.model, cls) else []
        forward = [f"FSDP2 (jitcore/fsdp.py): before this program FSDP all-gathers the parameters of "
                   f"{', '.join([*own, *units])}, eagerly; the program reads them unsharded (plain tensors)."]
        if units:
            forward.append(f"After it: post-forward of {', '.join(reversed(units))} (reshard), and hooks on the "
                           "outputs that all-gather those parameters again before the backward.")
        reduced = ", ".join([*reversed(units), *(own[:1] and [own[0].split(" ")[0]])])
        backward = [(f"FSDP2: before this program FSDP's pre-backward hooks have all-gathered the parameters of "
                     f"{', '.join(reversed(units))}; after" if units else "FSDP2: after") +
                    f" it, FSDP's end-of-backward callback reduce-scatters the gradients of {reduced} into their "
                    "shards (under set_requires_gradient_sync(False) it keeps them unsharded, accumulating)."]
        if entry.traces:
            entry.traces[-1].extra["comments"] = _wrap(forward)
        for trace in entry.backward_traces:
            trace.extra["comments"] = _wrap(backward)


def _wrap(lines) -> list:
    return [w for line in lines for w in textwrap.wrap(line, 114)]


def refuse_unhooked_shards(fn):
    """On a compile: parameters that are DTensors reach a jitted module only when FSDP's hooks did not run around
    it (fully_shard applied to the jitted module, jit first): refused, naming the order that works."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    dtensor = sys.modules.get("torch.distributed.tensor")  # (not imported: no DTensor exists)
    if not isinstance(module, torch.nn.Module) or dtensor is None:
        return
    if any(isinstance(p, dtensor.DTensor) for p in module.parameters()):
        raise UnsupportedError("FSDP2", f"the parameters of {type(module).__name__} are DTensors (sharded) when the "
                               "jitted program reads them: fully_shard was applied to the jitted module "
                               "(fully_shard(jitcore.jit(block))), whose calls FSDP's hooks never see", hint=HINT)
