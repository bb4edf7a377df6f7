"""Frontend glue: runs the interpreter over the user's function with jitcore's context and returns the
computation Trace. The context maps torch callables to ops (torch_map), turns every external tensor into a
proxy input with its provenance, and records the non-tensor values the trace depends on, for the guards.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from jitcore.epilogue import effect_proxies
from jitcore.interpreter import interpret
from jitcore.interpreter.context import DefaultContext
from jitcore.ops import torch_map
from jitcore.proxies import Proxy, TensorProxy
from jitcore.pytree import tree_flatten
from jitcore.trace import Timer, Trace, tracectx

GUARDED_SCALARS = (int, float, bool, str, complex, type(None), torch.dtype, torch.device)


@dataclass
class TracedInput:
    """A tensor input of the computation: its proxy and where a call finds it (provenance)."""

    proxy: TensorProxy
    provenance: object
    is_parameter: bool = False


@dataclass
class TraceResult:
    trace: Trace
    inputs: list  # TracedInput, in the computation's signature order
    guards: list  # (provenance, value): non-tensor values the trace baked in
    side_effects: list
    output_spec: object = None
    n_outputs: int = 0  # the user's flat outputs come first in trace.output; side-effect values follow


class JitContext(DefaultContext):
    """What the interpreter asks jitcore while it runs user code."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.inputs: list[TracedInput] = []
        self.guards: list = []
        self._proxies: dict[int, TensorProxy] = {}
        self._keepalive: list = []
        self._params: set[int] = set()

    def lookaside(self, fn):
        return torch_map.lookup(fn)

    def should_inline(self, fn) -> bool:
        mod = getattr(fn, "__module__", None) or ""
        if mod.startswith("torch.nn.modules") or mod.startswith("torch.nn.utils.parametriz"):
            return True
        return not (mod == "torch" or mod.startswith("torch."))

    def on_external_value(self, value, provenance):
        if isinstance(value, torch.Tensor):
            return self._tensor_input(value, provenance)
        if isinstance(value, GUARDED_SCALARS) or (isinstance(value, tuple) and _scalar_tuple(value)):
            self.guards.append((provenance, value))
        return value

    def _tensor_input(self, t: torch.Tensor, provenance) -> TensorProxy:
        p = self._proxies.get(id(t))
        if p is None:
            with tracectx(self.trace):
                p = TensorProxy(t.shape, t.dtype, t.device, t.requires_grad)
            self._proxies[id(t)] = p
            self._keepalive.append(t)
            is_param = isinstance(t, torch.nn.Parameter)
            if is_param:
                self._params.add(id(p))
            self.inputs.append(TracedInput(p, provenance, is_param))
        return p

    def isinstance_hook(self, obj, cls):
        if isinstance(obj, TensorProxy):
            classes = cls if isinstance(cls, tuple) else (cls,)
            for c in classes:
                if c is torch.Tensor or (c is torch.nn.Parameter and id(obj) in self._params):
                    return True
                if isinstance(c, type) and issubclass(TensorProxy, c):
                    return True
            return False
        return NotImplemented


def _scalar_tuple(t) -> bool:
    return all(isinstance(x, GUARDED_SCALARS) for x in t)


def trace_function(fn, args, kwargs) -> TraceResult:
    """Interpret fn(*args, **kwargs) and return its computation trace and what a call must supply and check."""
    trace = Trace("computation")
    ctx = JitContext(trace)
    with Timer() as t:
        with tracectx(trace):
            result = interpret(fn, args, kwargs, ctx)
        trace.args = [i.proxy for i in ctx.inputs]
        leaves, spec = tree_flatten(result.output)
        for leaf in leaves:
            if not isinstance(leaf, (Proxy,) + GUARDED_SCALARS) and _contains_proxy(leaf):
                from jitcore.errors import UnsupportedError

                raise UnsupportedError("output", f"the function returned a {type(leaf).__name__} holding tensors",
                                       hint="return tensors in tuples, lists, dicts or namedtuples")
        trace.output = tuple(leaves) + tuple(effect_proxies(result.side_effects))
    trace.set_provenance("Interpretation (jitcore bytecode interpreter)", t.seconds)
    return TraceResult(trace, ctx.inputs, ctx.guards, result.side_effects, spec, len(leaves))


def _contains_proxy(obj) -> bool:
    d = getattr(obj, "__dict__", None)
    return bool(d) and any(isinstance(v, Proxy) for v in d.values())
