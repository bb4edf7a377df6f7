"""The jitted module under FSDP2 (torch.distributed.fsdp.fully_shard). A call runs the root's own hooks eagerly
(all-gather of its parameters, input casts), then the program of the model's forward, in which each sharded block's
parameters are gathered at the block's fsdp_unshard line and freed at its fsdp_reshard line (jitcore/ops/sharding.py),
so one block's parameters are unsharded at a time, as in eager FSDP2. The backward gathers each block's parameters
again at its fsdp_regather line and hands its gradients over at its fsdp_post_backward line, where FSDP reduce-
scatters them while the earlier blocks' backward still runs. FSDP's end-of-backward callback reduces the root's.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import textwrap

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.guards import module_state
from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ops.sharding import UNITS, fsdp_reshard_sym, fsdp_unshard_sym

HINT = ("apply fully_shard to the plain model (to its blocks, then to the root) and jit the sharded model: "
        "fully_shard(block) for each block, fully_shard(model), then jitcore.jit(model); or jit a sharded block "
        "inside a sharded model: model.blocks[i] = jitcore.jit(model.blocks[i]) after fully_shard")
_SERIAL = itertools.count()  # one per ShardedCall: its blocks' keys in the UNITS registry


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
    for them while the program is traced: each records the block's fsdp_unshard / fsdp_reshard line (jitcore/ops/
    fsdp.py) and does the casts of its MixedPrecisionPolicy. At run time those lines call unshard / reshard, and the
    backward's lines pre_backward / post_backward: FSDP's own steps of the block's parameter groups."""

    def __init__(self, module, state, key: str):
        self.module, self.state, self.key = module, state, key
        pre = [k for k, h in module._forward_pre_hooks.items() if h == state._pre_forward]
        post = [k for k, h in module._forward_hooks.items() if h == state._post_forward]
        if len(state._modules) != 1 or len(pre) != 1 or len(post) != 1:
            raise UnsupportedError("FSDP2", f"{type(module).__name__} was sharded together with other modules "
                                   "(fully_shard([a, b, ...])): their forward hooks are shared", hint=HINT)
        self.pre_key, self.post_key = pre[0], post[0]
        mp = state._mp_policy
        cast_in = _cast(mp.param_dtype) if mp.cast_forward_inputs and mp.param_dtype is not None else None
        cast_out = _cast(mp.output_dtype) if mp.output_dtype is not None else None
        self.params = {}  # name (FSDP's fqn of the parameter) -> its FSDPParam (at the first call: FSDP names them)

        def pre_stand_in(m, args, kwargs):  # (called natively by the interpreter: on proxies, records lines)
            fsdp_unshard_sym(key, (), ())  # (transforms/fsdp_order.py gives it the parameters the block reads)
            return None if cast_in is None else cast_in((args, kwargs))

        def post_stand_in(m, args, out):
            return self._reshard_line(out if cast_out is None else cast_out(out))

        self.pre_stand_in, self.post_stand_in = pre_stand_in, post_stand_in

    def _reshard_line(self, out):
        """The block's outputs through its fsdp_reshard line, which also names the parameters the block read."""
        oracle = get_tracectx().extra["input_oracle"]
        names, params = [], []
        for name, fp in self.params.items():
            p = oracle(fp.unsharded_param)
            if p is not None:
                names.append(name)
                params.append(p)
        leaves, spec = tree_flatten(out)
        tensors = [x for x in leaves if isinstance(x, TensorProxy)]
        passed = iter(fsdp_reshard_sym(self.key, tuple(tensors), tuple(names), tuple(params)))
        return tree_unflatten(spec, [next(passed) if isinstance(x, TensorProxy) else x for x in leaves])

    @contextlib.contextmanager
    def hooks_inside(self):
        """FSDP's hooks replaced by the stand-ins while the program runs."""
        m = self.module
        pre, post = m._forward_pre_hooks[self.pre_key], m._forward_hooks[self.post_key]
        m._forward_pre_hooks[self.pre_key] = self.pre_stand_in
        m._forward_hooks[self.post_key] = self.post_stand_in
        try:
            yield
        finally:
            m._forward_pre_hooks[self.pre_key] = pre
            m._forward_hooks[self.post_key] = post

    # -- around the program: the module holds its unsharded parameters (their storage freed until fsdp_unshard) ----
    def enter(self):
        if not self.params:
            fps = [fp for group in compat.fsdp_param_groups(self.state) for fp in group.fsdp_params]
            self.params = {_relative(fp._param_fqn, self.key) or str(i): fp for i, fp in enumerate(fps)}
            if len(self.params) != len(fps):
                self.params = {str(i): fp for i, fp in enumerate(fps)}
        for group in compat.fsdp_param_groups(self.state):
            if not all(hasattr(fp, "_unsharded_param") for fp in group.fsdp_params):
                group.unshard()  # the first call: FSDP makes the unsharded parameters at its first all-gather
                group.wait_for_unshard()
                group.reshard()
            if group.is_sharded:
                for fp in group.fsdp_params:
                    p = fp.unsharded_param
                    if p.requires_grad != fp.sharded_param.requires_grad:
                        p.requires_grad_(fp.sharded_param.requires_grad)
                    fp._setattr_on_modules(p)

    def leave(self, failed: bool):
        """After the program: sharded groups hold their sharded parameters again (a block the forward did not run
        still held its unsharded ones); after a failure, every group is resharded."""
        for group in compat.fsdp_param_groups(self.state):
            if failed and not group.is_sharded:
                group._training_state = _idle()
                group.reshard()
            if group.is_sharded:
                for fp in group.fsdp_params:
                    fp._setattr_on_modules(fp.sharded_param)
        if failed:
            self.state._training_state = _idle()

    # -- the lines of jitcore/ops/sharding.py --------------------------------------------------------------------------
    def unshard(self, names) -> tuple:
        self.state._training_state = type(self.state._training_state).FORWARD
        for group in compat.fsdp_param_groups(self.state):
            group.pre_forward(self.module, (), {})  # all-gather (and wait)
        return tuple(self.params[n].unsharded_param for n in names)

    def reshard(self):
        for group in compat.fsdp_param_groups(self.state):
            group.post_forward(self.module, (), None)
        self.state._training_state = _idle()

    def pre_backward(self):
        self.state._pre_backward(None)  # all-gather again (and prefetch the next block's, as in eager)

    def post_backward(self, names, grads):
        seen = set()
        for name, g in zip(names, grads):
            p = self.params[name].unsharded_param
            if not g.is_contiguous() or id(g) in seen:  # (the parameters' layout; a gradient of its own)
                g = g.contiguous() if not g.is_contiguous() else g.clone()
            seen.add(id(g))
            if p.grad is None:
                p.grad = g
            else:
                p.grad += g
        for group in compat.fsdp_param_groups(self.state):
            group.post_backward()  # reduce-scatter (or accumulate) and reshard


def _relative(fqn, key: str):
    """A parameter's path inside its block (FSDP's fqn without the block's own path)."""
    block = key.split(":", 1)[1] + "."
    return fqn[len(block):] if fqn and fqn.startswith(block) else fqn


def _idle():
    return compat.fsdp_training_state().IDLE


class ShardedCall:
    """What a JitModule over a model sharded with fully_shard calls: the model's own __call__ (the root's FSDP hooks,
    eagerly) with its forward replaced, for the call, by `_forward`: the jitted forward (`inner`, a JitFunction over
    the model's forward), whose lines gather and free each sharded submodule's parameters, between each submodule's
    enter (its unsharded parameters in its module, their memory freed) and leave (its sharded ones back)."""

    def __init__(self, model, inner):
        cls = _fsdp_module_class()
        units = [m for m in _modules(model) if isinstance(m, cls) and m is not model]
        if units and not isinstance(model, cls):
            raise UnsupportedError("FSDP2", f"submodules of {type(model).__name__} were sharded with fully_shard, "
                                   "but not the model itself: its forward would run with no FSDP root",
                                   hint="apply fully_shard to the root too (after its blocks), then jitcore.jit(model)")
        self.model, self.inner = model, inner
        names = {id(m): n for n, m in model.named_modules()}
        serial = next(_SERIAL)
        self.units = [_Unit(m, m._get_fsdp_state(), f"fsdp{serial}:{names.get(id(m), type(m).__name__)}")
                      for m in units]
        for unit in self.units:  # (the programs' lines find their block by its key)
            UNITS[unit.key] = unit
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
            unit.enter()
        failed = True
        try:
            with contextlib.ExitStack() as stack:
                for unit in self.units:
                    stack.enter_context(unit.hooks_inside())
                # FSDP writes the modules' parameter tables directly (sharded DTensors <-> unsharded tensors), which
                # the module state epoch does not see: the parameters are fetched afresh on every call
                module_state.bump()
                out = self.inner(*args, **kwargs)
            failed = False
        finally:
            for unit in self.units:
                unit.leave(failed)
        if self.inner._last_entry is not self._described:
            self._describe(self.inner._last_entry)
        return out

    def _describe(self, entry):
        """Comments atop the entry's programs saying where FSDP gathers the parameters and reduces the gradients
        (on every backward trace: the variants built later for absent cotangents copy them)."""
        self._described = entry
        units = [u.key.split(":", 1)[1] for u in self.units]
        cls = _fsdp_module_class()
        own = next(c for c in type(self.model).__mro__ if not issubclass(c, cls)).__name__
        root = isinstance(self.model, cls)
        here = "FSDP2 (jitcore/runtime/fsdp_units.py):"
        forward = [f"{here} before this program FSDP all-gathers the parameters of {own} (its own parameters, by its "
                   "pre-forward hook), eagerly." if root else here]
        backward = [f"FSDP2: before this program FSDP's pre-backward hook has all-gathered the parameters of {own}."
                    if root else "FSDP2:"]
        if units:
            forward.append(f"Each sharded block's parameters ({', '.join(units)}) are all-gathered at its "
                           "fsdp_unshard line, which gives the unsharded parameters its lines read, and freed at its "
                           "fsdp_reshard line.")
            backward.append(f"Each block ({', '.join(reversed(units))}) gathers its parameters again at its "
                            "fsdp_regather line; at its fsdp_post_backward line its gradients reach its parameters "
                            "and FSDP reduce-scatters them into their shards and frees the parameters.")
        if root:
            backward.append(f"After it, FSDP's end-of-backward callback reduce-scatters the gradients of {own} "
                            "(under set_requires_gradient_sync(False) every gradient stays unsharded, accumulating).")
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
    dtensor = compat.dtensor_type()  # (None when torch.distributed.tensor is not imported: no DTensor exists)
    if not isinstance(module, torch.nn.Module) or dtensor is None:
        return
    if any(isinstance(p, dtensor) for p in module.parameters()):
        raise UnsupportedError("FSDP2", f"the parameters of {type(module).__name__} are DTensors (sharded) when the "
                               "jitted program reads them: fully_shard was applied to the jitted module "
                               "(fully_shard(jitcore.jit(block))), whose calls FSDP's hooks never see", hint=HINT)
