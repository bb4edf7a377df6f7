"""The pipeline, top to bottom: `jit(fn)` -> on each call, a cache lookup (prologue) -> on a miss, interpret
the function into a computation trace, run the transforms, let the executors claim every op, generate code ->
run the computation and replay the function's side effects (epilogue). Read this file first.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from executors import python_ex, torch_ex
from executors.base import get_executor
from executors.claim import claim
from jitcore.autograd import AutogradProgram, WithoutHistory
from jitcore.epilogue import build_epilogue
from jitcore.errors import UnsupportedError
from jitcore.frontend import define_sizes, prune_sizes, trace_function
from jitcore.guards.binding import check_binding
from jitcore.guards.cache import Cache, CacheEntry
from jitcore.guards.predicates import Predicates, recording
from jitcore.guards.prologue import build_prologues
from jitcore.interpreter.provenance import Roots
from jitcore.ir import lint as ir_lint
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import recorded_without_grad
from jitcore.ir.trace import Timer, Trace
from jitcore.ir.views import VIEW_OPS
from jitcore.ops.autocast import outside_autocast
from transforms.autodiff import drop_cotangents, grad_transform
from transforms.cse import cse
from transforms.dce import dce
from transforms.functionalize import functionalize, save_written_inputs_by_copy
from transforms.memory import del_last_used, densify_broadcast_inputs, reuse_buffers


@dataclass(frozen=True)
class CompileOptions:
    executors: tuple
    cache: str


def jit(fn, *, executors=None, cache: str = "constant values"):
    """A callable computing fn's results with traced, transformed and claimed programs; nn.Modules stay modules.

    executors: a priority list of executors (objects or names: "inductor", "torch", ...); the torch and python
    executors always come last as the fallback. cache: "constant values" (default), "symbolic values" or
    "no caching".
    """
    options = CompileOptions(_resolve_executors(executors), cache)
    Cache(cache)  # validates the option now, not at the first call
    if isinstance(fn, torch.nn.Module):
        from jitcore.module import JitModule

        return JitModule(fn, options)
    return JitFunction(fn, options)


def _resolve_executors(executors) -> tuple:
    chosen = [get_executor(e) for e in (executors or ())]
    for ex in chosen:
        ok, why = ex.is_available()
        if not ok:
            raise RuntimeError(f"executor {ex.name!r} cannot be used here: {why}")
    for fallback in (torch_ex, python_ex):
        if fallback not in chosen:
            chosen.append(fallback)
    return tuple(chosen)


_functorch_active = torch._C._are_functorch_transforms_active


class JitFunction:
    """The jitted callable: its cache of compiled entries and the last entry used (for inspection)."""

    def __init__(self, fn, options: CompileOptions):
        self.fn, self.options = fn, options
        self._cache = Cache(options.cache)
        self._last_entry: CacheEntry | None = None
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, /, *args, **kwargs):
        if _functorch_active():
            raise UnsupportedError(
                "torch.func transforms", f"{self.__name__} was called inside a torch.func transform (vmap, grad, vjp, "
                "jacrev, ...): the traced program would run on the transform's wrapped tensors, and its compiled "
                "backward has no per-transform rules",
                hint="call the jitted function outside the transform (take gradients with loss.backward() or "
                     "torch.autograd.grad), or transform the original function")
        cache = self._cache
        entry = cache.mru
        if entry is not None and not entry.mutated_inputs:  # the hot path: the last entry used, checked once
            try:
                inputs = entry.check(self.fn, args, kwargs)
            except Exception:  # a provenance chain that no longer resolves is a miss
                inputs = None
            if inputs is not None:
                cache.hits += 1
                self._last_entry = entry
                flat = entry.computation(*inputs)
                if entry.epilogue is not None:
                    entry.epilogue(self.fn, args, kwargs, flat)
                return entry.unflatten(flat)
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        found = self._cache.lookup(self.fn, args, kwargs)
        if found is None:
            entry, inputs = self._compile(args, kwargs)
        else:
            entry, inputs = found
            if entry.mutated_inputs and inputs_overlap(inputs, entry.mutated_inputs):
                self._cache.misses += 1  # this call aliases a tensor the program writes: trace it as it is
                self._cache.miss_reasons.append("a written input shares storage with another input")
                entry = compile_entry(self.fn, args, kwargs, self.options)
                inputs = entry.prologue(self.fn, args, kwargs)
        self._last_entry = entry
        return run_entry(entry, self.fn, args, kwargs, inputs)

    def _compile(self, args, kwargs):
        check_binding(self.fn, args, kwargs)  # a call that does not bind raises eager's TypeError
        self._cache.record_miss(self.fn, args, kwargs)
        entry = compile_entry(self.fn, args, kwargs, self.options)
        self._cache.add(entry, args, kwargs)
        inputs = entry.prologue(self.fn, args, kwargs)
        if inputs is None:
            why = entry.explain(self.fn, args, kwargs)
            raise AssertionError(f"jitcore internal error: a fresh prologue rejected its own call ({why})")
        return entry, inputs


def compile_entry(fn, args, kwargs, options: CompileOptions) -> CacheEntry:
    """Trace -> transforms -> claim -> codegen, for one call's inputs."""
    predicates = Predicates()
    with recording(predicates):  # symbolic values: every concrete answer Python needs becomes a predicate
        entry = _compile_entry(fn, args, kwargs, options, predicates)
    if ir_lint.CHECK:  # the trace checker (on in the tests): every trace the entry keeps
        ir_lint.lint_traces(entry.traces, entry.backward_traces, entry.prologue_traces, entry.epilogue_traces)
    return entry


def _compile_entry(fn, args, kwargs, options: CompileOptions, predicates) -> CacheEntry:
    stats = {}
    symbolic = options.cache == "symbolic values"
    with Timer() as t:
        traced = trace_function(fn, args, kwargs, symbolic=symbolic)
    stats["interpret"] = t.seconds
    traces = [traced.trace]
    with Timer() as t:
        functional, writebacks = functionalize(traced.trace, traced.input_strides)
        if functional is not traced.trace:
            traces.append(functional)
            _check_written_inputs(traced, writebacks)
        traces.append(dce(traces[-1]))
        traces.append(cse(traces[-1]))
        split = grad_transform(traces[-1]) if _needs_autodiff(traces[-1]) else None
        if split is not None and writebacks:  # the epilogue overwrites them before the backward runs
            written = {traced.trace.args[w.arg_index].name for w in writebacks}
            split.forward = save_written_inputs_by_copy(split.forward, split.n_outputs, written)
    stats["transforms"] = t.seconds
    backward_traces = []
    with Timer() as t:
        if split is not None:
            traces.append(split.forward)
        traces += _claim_forward(traces[-1], options, symbolic)
        if split is not None:
            backward_traces = [split.backward, cse(split.backward, distinct_outputs=False)]
            backward_traces += _after_claim(claim(backward_traces[-1], options.executors))
    stats["claim"] = t.seconds
    with Timer() as t:
        computation = outside_autocast(traces[-1].python_callable())
        nograd_views = _nograd_views(traced.trace)
        if split is not None:
            computation = AutogradProgram(computation, outside_autocast(backward_traces[-1].python_callable()),
                                          split.n_outputs,
                                          split.output_requires_grad,
                                          [isinstance(p, TensorProxy) for p in split.saved],
                                          _backward_without(backward_traces[1], options))
            computation.enables_grad = not torch.is_grad_enabled()  # (the cache guards the grad mode)
            computation.nograd_views = nograd_views
        elif nograd_views:
            computation = WithoutHistory(computation, nograd_views)
        traced.guards.predicates = list(predicates.items)
        traced.trace.extra["predicates"] = traced.guards.predicates
        prologues = build_prologues(traced.inputs, traced.guards, traced.aliases, Roots(args, kwargs, fn), symbolic)
        index = {p.name: i for i, p in reversed(list(enumerate(traced.trace.output))) if isinstance(p, Proxy)}
        epilogue = build_epilogue(traced.side_effects, index, _writeback_specs(traced, writebacks))
        entry = CacheEntry(prologues.hot, computation, traced.output_spec, traced.n_outputs, traces,
                           prologues.traces, prologues.explain, backward_traces,
                           epilogue=epilogue.python_callable() if epilogue else None,
                           epilogue_traces=[epilogue] if epilogue else [], stats=stats,
                           mutated_inputs=tuple(w.arg_index for w in writebacks), check=prologues.full,
                           module_state=prologues.state)
    stats["codegen"] = t.seconds
    return entry


def _claim_forward(trace, options: CompileOptions, symbolic: bool) -> list:
    """[claimed, del-last-used] traces of the program that runs forward."""
    if symbolic:  # sizes the claimed decompositions (or the backward) read: computed once, at the top
        define_sizes(trace)
    claimed = claim(trace, options.executors)
    if symbolic:
        prune_sizes(claimed)
    return _after_claim(claimed)


def _backward_without(backward: Trace, options: CompileOptions):
    """present -> the traces of the backward for calls where the cotangents marked False are None (the last one
    runs; built on first use). Under symbolic sizes, a backward that would read zeros of a size it is not given
    is not built: [the dropped trace] marked "zeros from runtime", which says the gradients that are None."""
    n_saved = dict(backward.extra["arg_groups"])["saved"]
    symbolic = not all(type(d) is int for ct in backward.args[n_saved:] for d in ct.shape)

    def build(present: tuple):
        dropped = drop_cotangents(backward, present)
        if symbolic and _reads_undefined(define_sizes(dropped)):  # zeros of a symbolic size no value gives
            dropped.extra["zeros from runtime"] = True
            return [dropped]
        traces = [dropped, *_after_claim(claim(dropped, options.executors))]
        if ir_lint.CHECK:  # the trace checker (on in the tests), over the traces built on first use
            ir_lint.lint_traces(traces)
        return traces

    build.needs_shapes = symbolic  # a pattern it cannot build: the runtime passes zeros shaped like the outputs
    return build


def _reads_undefined(trace: Trace) -> bool:
    """Whether a line reads a number that neither an argument nor an earlier line (a size unpack included) gives."""
    known = {a.name for a in trace.args}
    for b in trace.bound_symbols:
        if any(isinstance(x, Proxy) and x.name not in known for x in b.flat_args()):
            return True
        known.update(o.name for o in b.flat_proxy_outs())
    return False


def _nograd_views(trace: Trace) -> tuple:
    """Positions of the outputs that are views made with grad mode off of a tensor that requires grad: eager's
    requires grad with no history (grad_fn None), whatever the autograd program says of the tensor it viewed."""

    makers = {o.name: b for b in trace.bound_symbols for o in b.flat_proxy_outs()}
    out = []
    for i, o in enumerate(tree_leaves(trace.output)):
        b = makers.get(o.name) if isinstance(o, TensorProxy) else None
        if b is None or b.sym.id not in VIEW_OPS or b.sym.id in ("ltorch.detach", "prims.stop_gradient"):
            continue
        viewed = next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None)
        if recorded_without_grad(b) and viewed is not None and viewed.requires_grad:
            out.append(i)
    return tuple(out)


def _after_claim(claimed) -> list:
    """[claimed, (inputs densified,) (buffers reused,) del-last-used]: the memory passes over an execution
    trace."""
    from executors.torchex import densify, is_view_line, makes_fresh, out_form, reads_dense

    traces = [claimed]
    dense = densify_broadcast_inputs(claimed, reads_dense, is_view_line, densify)
    if dense is not claimed:
        traces.append(dense)
    reused = reuse_buffers(traces[-1], out_form, makes_fresh)
    if reused is not claimed:
        traces.append(reused)
    return [*traces, del_last_used(traces[-1])]


def _writeback_specs(traced, writebacks) -> list:
    """(provenance, output position, under no_grad) for each input the program wrote into."""
    out = []
    for w in writebacks:
        inp = traced.inputs[w.arg_index]
        out.append((inp.provenance, w.output_index, inp.proxy.requires_grad and not w.recorded))
    return out


def _check_written_inputs(traced, writebacks):
    addresses = traced.input_storages
    for w in writebacks:
        mine = addresses[w.arg_index]
        if mine is not None and sum(a == mine for a in addresses) > 1:
            inp = traced.inputs[w.arg_index]
            raise UnsupportedError("aliased inputs", f"{inp.provenance} is written in place and shares its storage "
                                   f"with another tensor input (two views of one tensor)",
                                   hint="pass one tensor and take the views inside the function, or clone() one")


def inputs_overlap(inputs, mutated) -> bool:
    """Whether a written input shares storage with another input of this call (the program assumed not)."""
    from jitcore.frontend import _storage_address

    addresses = [_storage_address(t) if isinstance(t, torch.Tensor) else None for t in inputs]
    return any(addresses[i] is not None and addresses.count(addresses[i]) > 1 for i in mutated)


def _needs_autodiff(trace) -> bool:
    """Inputs that require grad under grad mode, or outputs that require grad (made under torch.enable_grad()
    inside a call made with grad mode off)."""
    if torch.is_grad_enabled():
        return any(getattr(a, "requires_grad", False) for a in trace.args)
    return any(getattr(o, "requires_grad", False) for o in tree_leaves(trace.output))


def run_entry(entry: CacheEntry, fn, args, kwargs, inputs):
    flat = entry.computation(*inputs)
    if entry.epilogue is not None:
        entry.epilogue(fn, args, kwargs, flat)
    return entry.unflatten(flat)


# -- inspection -------------------------------------------------------------------------------------------------
def _entry(jfn) -> CacheEntry:
    entry = getattr(jfn, "_last_entry", None)
    if entry is None:
        raise ValueError("this function has not been called yet (or is not a jitcore.jit function)")
    return entry


def last_traces(jfn) -> list:
    """The computation traces of the last call, one per pass, in order (the last is what ran)."""
    return list(_entry(jfn).traces)


def last_backward_traces(jfn) -> list:
    """The backward traces of the last call's entry; when its last backward got None for some outputs' gradients
    (outputs the loss does not reach), followed by the traces of the backward that ran instead."""
    entry = _entry(jfn)
    program = entry.computation
    ran = getattr(program, "last_without", None)
    return list(entry.backward_traces) + (program.without_traces(ran) if ran is not None else [])


def last_prologue_traces(jfn) -> list:
    return list(_entry(jfn).prologue_traces)


def last_epilogue_traces(jfn) -> list:
    """The side-effect replay of the last call's entry (empty when the function wrote nothing outside)."""
    return list(_entry(jfn).epilogue_traces)


def last_compile_stats(jfn) -> dict:
    """Seconds spent per stage (interpret, transforms, claim, codegen) compiling the last call's entry."""
    return dict(_entry(jfn).stats)


def _cache_of(jfn) -> Cache:
    cache = getattr(jfn, "_cache", None)
    if cache is None:
        raise ValueError("not a jitcore.jit function")
    return cache


def cache_hits(jfn) -> int:
    return _cache_of(jfn).hits


def cache_misses(jfn) -> int:
    return _cache_of(jfn).misses


def cache_miss_reasons(jfn) -> list[str]:
    return list(_cache_of(jfn).miss_reasons)


def examine(fn, *args, **kwargs):
    """Which ops fn uses, whether each is supported, which executor would run it, and what falls back to opaque."""
    from jitcore.examine import examine as _examine

    return _examine(fn, *args, **kwargs)
