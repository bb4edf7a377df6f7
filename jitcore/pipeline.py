"""The compile pipeline: one call's inputs -> a cache entry, as named, timed stages read top to bottom
(`compile_entry`): interpret -> transforms (a table of passes, `PASSES`) -> claim -> memory -> codegen -> guards.
The one module that imports jitcore, transforms and executors together; jitcore/api.py (the faces) calls it on a
miss, and the autograd wrapper calls its backward-variants stage at backward time.
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from executors import python_ex, torch_ex
from executors.ahead import compile_ahead
from executors.base import Executor, FusionExecutor, get_executor
from executors.claim import claim, claim_bsym
from jitcore import logs
from jitcore.debug.verify import external_effect, verify_calls
from jitcore.errors import UnsupportedError
from jitcore.frontend.tracing import TraceResult, define_sizes, prune_sizes, trace_function
from jitcore.guards.binding import check_binding
from jitcore.guards.cache import Cache, CacheEntry, Compiled, EntryRecord
from jitcore.guards.input_storage import check_keep_inputs, describe, value_dependence
from jitcore.guards.predicates import Predicates, recording
from jitcore.guards.prologue import Prologues, build_prologues
from jitcore.interpreter.provenance import Roots
from jitcore.interpreter.user_traceback import user_frames_first
from jitcore.ir import lint as ir_lint
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.autocast import outside_autocast
from jitcore.runtime.autograd import AutogradProgram, GradsApart, WithoutHistory, ddp_overlaps, first_inputs
from jitcore.runtime.checked_runs import checked_run, has_checks, has_checks_line, user_where
from jitcore.runtime.epilogue import (
    TailRun,
    build_epilogue,
    metadata_moves,
    nograd_views_of,
    restrided_specs,
    returned_inputs,
    version_moves,
    views_of_moved,
    views_of_written,
    writeback_specs,
)
from jitcore.runtime.fsdp_units import refuse_unhooked_shards
from jitcore.runtime.view_arguments import checked_moves
from transforms.autodiff import Split, drop_cotangents, grad_transform
from transforms.cse import cse
from transforms.dce import dce
from transforms.early_grads import with_grads_ready
from transforms.fsdp_order import check_backward_order, gathered_apart, thread_sharded_params
from transforms.functionalize import functionalize
from transforms.memory import del_last_used, densify_broadcast_inputs, reuse_buffers, write_into_inputs
from transforms.memory_budget import check_memory_budget, within_budget
from transforms.rematerialize import BUDGET, checkpointed, rematerialize
from transforms.saved_hooks import SavedHooks, hooks_for, saving, traced_or_warn
from transforms.saved_written_inputs import save_written_inputs_by_copy
from transforms.schedule import schedule
from transforms.written_tails import Tail, split_tail


# -- the options of jit() ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileOptions:
    executors: tuple
    cache: str
    keep_inputs: str = "int"
    rematerialize: bool | float = True  # what the forward saves: transforms/rematerialize.py
    verify: int = 0  # how many calls of each new entry also run eagerly and are compared (jitcore/debug/verify.py)
    saved_tensor_hooks: tuple | None = None  # (pack, unpack) put into the programs (transforms/saved_hooks.py)
    memory_budget: float | None = None  # 0..1 of the default plan's saved bytes over the minimal: memory_budget.py


def compile_options(executors, cache, keep_inputs, rematerialize, verify, saved_tensor_hooks,
                    memory_budget=None) -> CompileOptions:
    """jit()'s options, checked now (not at the first call) and resolved (executor names to executors, fallbacks
    appended)."""
    options = CompileOptions(resolve_executors(executors), cache, keep_inputs, remat_option(rematerialize),
                             verify_calls(verify), hooks_option(saved_tensor_hooks), check_memory_budget(memory_budget))
    Cache(cache)  # validates the option
    check_keep_inputs(keep_inputs)
    return options


def check_callable(fn):
    """Generator and coroutine functions are refused at jit(): a call's result is an iterator whose steps run later,
    one at a time, which one traced program cannot be. So is DistributedDataParallel(model): jit the model inside."""
    if isinstance(fn, torch.nn.parallel.DistributedDataParallel):  # its forward drives the reducer's hooks per call
        raise UnsupportedError("callable", "jit() was given a DistributedDataParallel module: DDP's forward prepares "
                               "its gradient reducer and broadcasts buffers on every call, outside any one traced "
                               "program", hint="wrap the jitted model instead: DDP(jitcore.jit(model))")
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    if not inspect.isroutine(target) and not isinstance(target, (type, functools.partial)):
        target = inspect.getattr_static(type(target), "__call__", target)  # a callable object: its __call__
    kinds = ((inspect.isgeneratorfunction, "a generator function"), (inspect.isasyncgenfunction, "an async generator "
             "function"), (inspect.iscoroutinefunction, "a coroutine function"))
    for test, kind in kinds:
        if test(target):
            name = getattr(target, "__qualname__", type(target).__name__)
            raise UnsupportedError("callable", f"jit() was given {kind}, {name}: each step of the iterator it returns "
                                   "runs when the caller asks for it, outside any one traced call",
                                   hint="jit the work of one step (the loop body) and call it from the generator; "
                                        "a generator used inside a jitted function is fine")


def under_functorch(name: str) -> UnsupportedError:
    """The refusal of a jitted call made inside a torch.func transform."""
    return UnsupportedError(
        "torch.func transforms", f"{name} was called inside a torch.func transform (vmap, grad, vjp, jacrev, ...): the "
        "traced program would run on the transform's wrapped tensors, and its compiled backward has no per-transform "
        "rules", hint="call the jitted function outside the transform (take gradients with loss.backward() or "
                      "torch.autograd.grad), or transform the original function")


def remat_option(value) -> bool | float:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value >= 0:
        return float(value)
    raise ValueError(f"jit(rematerialize=...): expected True, False or a non-negative number, got {value!r}")


def hooks_option(value):
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(callable(f) for f in value):
        return tuple(value)
    raise ValueError(f"jit(saved_tensor_hooks=...): expected a (pack, unpack) pair of callables, got {value!r}")


def resolve_executors(executors) -> tuple:
    if isinstance(executors, (str, Executor)):  # executors="inductor": one executor
        executors = [executors]
    chosen = [get_executor(e) for e in (executors or ())]
    for ex in chosen:
        ok, why = ex.is_available()
        if not ok:
            raise RuntimeError(f"executor {ex.name!r} cannot be used here: {why}")
    for fallback in (torch_ex, python_ex):
        if fallback not in chosen:
            chosen.append(fallback)
    return tuple(chosen)


def fuses(executors) -> bool:
    """Whether a fusion executor is in the list: it fuses lines the backward recomputes into its regions."""
    return any(isinstance(e, FusionExecutor) for e in executors)


# -- a miss: compile the entry for a call and cache it -----------------------------------------------------------------
def compile_call(cache: Cache, fn, args, kwargs, options: CompileOptions, reason: str | None = None):
    """A miss: eager's TypeError if the call does not bind; else record why (`reason`, or the cache's), compile an
    entry for this call, cache it, and return it with the inputs its prologue fetched."""
    check_binding(fn, args, kwargs)  # a call that does not bind raises eager's TypeError
    refuse_unhooked_shards(fn)
    cache.record_miss(fn, args, kwargs, reason)
    try:
        entry = add_entry(cache, fn, args, kwargs, options)
    except Exception as e:  # raised in the user's code while tracing: the traceback shows the user's frames
        user_frames_first(e)
        raise
    inputs = entry.prologue(fn, args, kwargs)
    if inputs is None:
        why = entry.explain(fn, args, kwargs)
        raise AssertionError(f"jitcore internal error: a fresh prologue rejected its own call ({why})")
    if fuses(options.executors):  # its fusion regions' C++ builds, side by side before the first run
        compile_ahead(entry, inputs)
    return entry, inputs


def add_entry(cache: Cache, fn, args, kwargs, options: CompileOptions) -> CacheEntry:
    """Compile an entry for this call, with the description of its inputs, and cache it."""
    spec = describe(args, kwargs, options.keep_inputs)  # (before the call: it may write into them)
    entry = compile_entry(fn, args, kwargs, options)
    spec.value_dependent = entry.value_dependent
    entry.input_spec = spec
    cache.add(entry, args, kwargs)
    return entry


# -- the stages: compile_entry runs them in order, each timed under its name in last_compile_stats ---------------------
def compile_entry(fn, args, kwargs, options: CompileOptions) -> CacheEntry:
    """One call's inputs -> a cache entry: interpret -> transforms -> claim -> memory -> codegen -> guards."""
    symbolic = options.cache == "symbolic values"
    stats = {}
    recorded = Predicates()
    with recording(recorded):  # symbolic values: every concrete answer Python needs becomes a predicate
        with _stage(stats, "interpret"):
            traced = trace_function(fn, args, kwargs, symbolic=symbolic)
        sized = symbolic or bool(traced.trace.run_time_sizes)  # sizes the program reads as values
        with _stage(stats, "transforms"):
            program = transform(traced, sized, options, hooks_for(options.saved_tensor_hooks))
        with _stage(stats, "claim"):
            claimed = claim_program(program, options, sized)
        with _stage(stats, "memory"):
            executable = memory_passes(program, claimed)
        with _stage(stats, "codegen"):
            computation = codegen(traced, program, executable, options)
            if has_checks(executable.traces[-1]):  # a failed check leaves the generators as they were
                computation = checked_run(computation)
            tails = [compile_tail(tail, options, sized) for tail in program.tails]
        predicates = list(recorded.items)  # what the stages above assumed of the symbolic values
        with _stage(stats, "guards"):
            copied = [w for w in program.writebacks if w.output_index not in executable.written_in_place]
            saved = {p.name for p in program.split.saved if isinstance(p, Proxy)} if program.split else set()
            guarded = guard(traced, copied, predicates, Roots(args, kwargs, fn), symbolic,
                            _hooks_guard(program, options), autodiff=program.split is not None, saved=saved,
                            tails=tuple(run for run, _ in tails),
                            in_place=[w for w in program.writebacks if w.output_index in executable.written_in_place])
    epilogue = guarded.epilogue
    entry = CacheEntry(
        guarded.prologues,
        Compiled(computation, guarded.run_epilogue, traced.output_spec, traced.n_outputs,
                 mutated_inputs=tuple(sorted({w.arg_index for w in program.writebacks} |
                                             {k for k, _, _ in traced.restrided}))),
        EntryRecord(executable.traces, executable.backward_traces,
                    [t for _, traces in tails for t in traces] + ([epilogue] if epilogue else []), stats,
                    value_dependent=value_dependence(traced),
                    external_effect=external_effect(traced.side_effects, fn) if options.verify else ""))
    if ir_lint.CHECK:  # the trace checker (on in the tests): every trace the entry keeps
        ir_lint.lint_traces(entry.traces, entry.backward_traces, entry.prologue_traces, entry.epilogue_traces)
    _log_compile(fn, entry)
    return entry


@contextmanager
def _stage(stats: dict, name: str):
    logs.stage(name)
    with Timer() as t:
        yield
    stats[name] = t.seconds


def _log_compile(fn, entry: CacheEntry):
    """The topics of a compile (jitcore/logs.py): its final programs, its guards, its seconds per stage."""
    name = getattr(fn, "__qualname__", type(fn).__name__)
    for topic, traces in (("traces", [entry.traces, entry.backward_traces]),
                          ("guards", [entry.prologue_traces])):
        if logs.enabled(topic, logging.DEBUG):  # every pass
            for t in (t for ts in traces for t in ts):
                logs.log(topic, "%s:\n%s", name, t, level=logging.DEBUG)
        elif logs.enabled(topic):  # what runs
            for t in (ts[-1] for ts in traces if ts):
                logs.log(topic, "%s:\n%s", name, t)
    if logs.enabled("compile_times"):
        total = sum(entry.stats.values())
        logs.log("compile_times", "%s: %.1f ms (%s)", name, total * 1e3,
                 ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in entry.stats.items()))


# -- stage "transforms": the pass table --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Program:
    """The transforms stage's result: the computation as the transforms left it, before any executor claimed it."""

    traces: list  # one per pass: interpreted, (functional,) dce, cse, (autodiff forward); the last is claimed
    backward_traces: list  # [autodiff backward, its cse] ([] without autodiff)
    split: Split | None  # the autodiff split (saved values, outputs that carry gradients); None without autodiff
    writebacks: list  # transforms.functionalize's writebacks: the inputs the program writes into
    hooks: SavedHooks | None = None  # the saved-tensor hooks of the programs (None: none, or no backward)
    early_grads: tuple = ()  # input positions whose gradients the backward hands over as computed (under DDP)
    extra_grads: tuple = ()  # per backward output after one per input: the input it is one more contribution to
    tails: tuple = ()  # what reads written inputs' new values, run by the epilogue (transforms/written_tails.py)


@dataclass
class Passing:
    """What the passes of the table read and extend, row by row. Before autodiff each pass appends its trace to
    `traces`; from autodiff on, `forward` is the forward program (a pass that replaces it keeps the one it replaced
    in `traces`) and `backward` the backward's history."""

    traced: TraceResult
    symbolic: bool  # sizes are values of the program: a trace kept in the history gets them defined at the top
    options: CompileOptions
    hooks: SavedHooks | None  # the saved-tensor hooks to put into the programs (hooks_for)
    traces: list = field(default_factory=list)
    writebacks: list = field(default_factory=list)
    sharded: bool = False  # FSDP2 blocks read their parameters gathered
    split: Split | None = None
    forward: Trace | None = None
    backward: list = field(default_factory=list)
    early: tuple = ()  # DDP: input positions whose gradients the backward hands over as computed
    extra_grads: tuple = ()  # the grad transform's Split.extra_grads
    tails: tuple = ()  # written_tails.split_tail's

    def keep(self, trace: Trace) -> None:
        """Append a forward to the history (its sizes defined at the top under symbolic sizes)."""
        self.traces.append(_with_sizes(trace) if self.symbolic else trace)


@dataclass(frozen=True)
class PassRow:
    """One pass of the transforms stage: `applies(passing)` is its condition, `run(passing)` records its result."""

    name: str
    applies: Callable[[Passing], bool]
    run: Callable[[Passing], None]


def _always(p: Passing) -> bool:
    return True


def _with_backward(p: Passing) -> bool:
    return p.split is not None


def _fsdp_blocks(p: Passing):
    """FSDP2: each sharded block reads its parameters as gathered (transforms/fsdp_order.py)."""
    blocks = thread_sharded_params(p.traces[-1])
    if blocks is not p.traces[-1]:
        p.traces.append(blocks)
        p.sharded = True


def _functionalize(p: Passing):
    """In-place writes become writebacks of values the epilogue (or the program) stores into the inputs."""
    functional, p.writebacks = functionalize(p.traces[-1], p.traced.input_strides)
    if functional is not p.traces[-1]:
        p.traces.append(functional)
        _check_written_inputs(p.traced, p.writebacks)


def _tails_apply(p: Passing) -> bool:
    return bool(p.writebacks) and torch.is_grad_enabled() and _needs_autodiff(p.traces[-1])


def _written_tails(p: Passing):
    """What reads the new value of a written input that requires grad runs after the writeback, on the caller's
    tensor (transforms/written_tails.py): gradients through that tensor then reach it, as eager's do."""
    views = {i: value_at for _, value_at, positions, *_ in views_of_written(p.traced, p.writebacks) for i in positions}
    head, p.tails = split_tail(p.traces[-1], p.writebacks, views)
    if p.tails:
        _refuse_restrided_tails(p.traced, p.tails)
        p.traces.append(head)


def _refuse_restrided_tails(traced, tails):
    """A tail reads an input whose metadata the function changed in place: the epilogue makes that change on the
    caller's tensor after the tails ran on it (its views read the layout the program saw), so the tail's uses would
    hang off the tensor's history from before the change, and a gradient with respect to the caller's tensor would
    miss them (eager's later ops use the changed tensor)."""
    changed = {k: changes for k, _, changes in traced.restrided}
    for tail in tails:
        for k, _ in tail.cuts:
            if k in changed:
                raise UnsupportedError(
                    "in-place metadata change", f"Tensor.{changed[k][0][0]} of argument {traced.trace.args[k].name}, "
                    "which the function also writes with a value that requires grad and reads after the write: "
                    "jitcore cannot give the caller's tensor eager's autograd history through both",
                    hint="change the metadata of a view instead (x = x.unsqueeze(0)), or write into a clone")


def _autodiff(p: Passing):
    """The joint trace split into a forward (outputs + saved for backward) and a backward. The gradient
    contributions of leaves whose grad_dtype is not their dtype stay apart (autograd's engine sums them, each cast
    first), except those of parameters DDP's early gradients hand over (grads_ready); under FSDP2 those of their
    gathered parameters too."""
    p.early = _early_grad_positions(p.traced)
    apart = p.traced.grads_apart - {p.traced.inputs[i].proxy.name for i in p.early}  # (their gradients: grads_ready)
    if apart and p.sharded:
        apart = apart | gathered_apart(p.traces[-1], apart)
    p.split = grad_transform(p.traces[-1], apart)
    p.extra_grads = p.split.extra_grads
    p.forward, p.backward = p.split.forward, [p.split.backward]


def _remat_applies(p: Passing) -> bool:
    # (rematerialize=False: only the blocks the user checkpointed are recomputed, unless a memory budget asks more)
    return p.split is not None and (p.options.rematerialize is not False or checkpointed(p.split.forward)
                                    or _below_default(p.options))


def _below_default(options: CompileOptions) -> bool:
    """Whether jit(memory_budget=b) asks for fewer bytes than the default plan (b=1 and None: the default plan)."""
    return options.memory_budget is not None and options.memory_budget < 1


def _remat(p: Passing):
    """What the forward saves, chosen by cost: cheap work is recomputed in the backward (transforms/rematerialize)."""
    p.keep(p.split.forward)  # the grad transform's forward stays in the history
    remat = p.options.rematerialize
    budget = BUDGET if remat is True else None if remat is False else remat
    if _below_default(p.options):  # the least recompute within the byte budget (transforms/memory_budget.py)
        p.split, _, remat_backward = within_budget(p.split, fuses(p.options.executors), p.options.memory_budget, budget)
    else:
        p.split, _, remat_backward = rematerialize(p.split, fuses(p.options.executors), budget)
    p.forward = p.split.forward
    p.backward.append(remat_backward)


def _save_written_inputs(p: Passing):
    """The epilogue overwrites written inputs before the backward runs, or changes their metadata in place (which
    moves their version counter too): the forward saves copies of them."""
    written = {p.traced.trace.args[w.arg_index].name for w in p.writebacks}
    written |= {p.traced.trace.args[k].name for k, _, _ in p.traced.restrided}
    written |= {p.traced.trace.args[k].name for k in metadata_moves(p.traced)}  # (a view of it changed)
    p.forward = save_written_inputs_by_copy(p.forward, p.split.n_outputs, written)


def _backward_cse(p: Passing):
    p.backward.append(cse(p.backward[-1], distinct_outputs=False))


def _saved_hooks(p: Passing):
    """The saved-tensor hooks traced into the programs: pack after a saved value's last forward use, unpack before its
    first backward use; a pair that cannot be traced runs eagerly (with a warning)."""
    s = p.split
    hooked = traced_or_warn(Split(p.forward, p.backward[-1], s.n_outputs, s.saved, s.output_requires_grad), p.hooks,
                            p.symbolic)
    if hooked is None:
        p.hooks = replace(p.hooks, traced=False)
        return
    p.keep(p.forward)
    p.split, p.forward = hooked, hooked.forward
    p.backward.append(hooked.backward)


def _fsdp_backward_order(p: Passing):
    """FSDP2: the backward must reach each block's gradients in an order its reduce-scatters can follow."""
    check_backward_order(p.backward[-1], p.forward)


def _early_grads(p: Passing):
    """DDP: the backward hands over the gradient of each parameter of `p.early` as soon as it computes it
    (transforms/early_grads.py), so DDP's all-reduces overlap the backward; the backward before this pass stays the
    base of the backward variants."""
    p.backward.append(with_grads_ready(p.backward[-1], p.early))


def _early_grad_positions(traced: TraceResult) -> tuple:
    """Under DDP (and not find_unused_parameters, whose search of the graph needs the parameters as inputs of the
    autograd node): the positions of the parameters that require grad, whose gradients the backward hands over as
    soon as it computes them (transforms/early_grads.py)."""
    if not ddp_overlaps():
        return ()
    return tuple(i for i, inp in enumerate(traced.inputs) if inp.is_parameter and inp.proxy.requires_grad)


# The transforms stage, in order: a row runs where its condition holds. Rows below "autodiff" need its split.
PASSES = (
    PassRow("fsdp blocks", _always, _fsdp_blocks),
    PassRow("functionalize", _always, _functionalize),
    PassRow("dce", _always, lambda p: p.traces.append(dce(p.traces[-1]))),
    PassRow("cse", _always, lambda p: p.traces.append(cse(p.traces[-1]))),
    PassRow("written-input tails", _tails_apply, _written_tails),
    PassRow("autodiff", lambda p: _needs_autodiff(p.traces[-1]), _autodiff),
    PassRow("rematerialize", _remat_applies, _remat),
    PassRow("save written inputs", lambda p: p.split is not None and bool(p.writebacks or p.traced.restrided or
                                                                          metadata_moves(p.traced)),
            _save_written_inputs),
    PassRow("backward cse", _with_backward, _backward_cse),
    PassRow("saved-tensor hooks", lambda p: p.split is not None and p.hooks is not None, _saved_hooks),
    PassRow("fsdp backward order", lambda p: p.split is not None and p.sharded, _fsdp_backward_order),
    PassRow("ddp early gradients", lambda p: p.split is not None and bool(p.early), _early_grads),
)


def transform(traced: TraceResult, symbolic: bool, options: CompileOptions, hooks: SavedHooks | None = None) -> Program:
    """Stage "transforms": the rows of PASSES whose condition holds, in order: functionalize (in-place writes become
    writebacks), dce, cse, and autodiff when a gradient can flow (the joint trace splits into a forward and a
    backward; rematerialization then chooses what the forward saves by cost), with the rows FSDP, DDP and
    saved-tensor hooks contribute."""
    p = Passing(traced, symbolic, options, hooks, traces=[traced.trace])
    for row in PASSES:
        if row.applies(p):
            row.run(p)
    if p.split is None:  # the last pass's trace is the program
        forward = p.traces.pop()
        return Program([*p.traces, _with_sizes(forward) if symbolic else forward], [], None, p.writebacks,
                       tails=p.tails)
    return Program([*p.traces, _with_sizes(p.forward) if symbolic else p.forward], p.backward, p.split, p.writebacks,
                   p.hooks, p.early, p.extra_grads, p.tails)


def _check_written_inputs(traced, writebacks):
    addresses = traced.input_storages
    for w in writebacks:
        mine = addresses[w.arg_index]
        if mine is not None and sum(a == mine for a in addresses) > 1:
            inp = traced.inputs[w.arg_index]
            raise UnsupportedError("aliased inputs", f"{inp.provenance} is written in place and shares its storage "
                                   f"with another tensor input (two views of one tensor)",
                                   hint="pass one tensor and take the views inside the function, or clone() one")


def _needs_autodiff(trace) -> bool:
    """Inputs that require grad under grad mode, or outputs that require grad (made under torch.enable_grad()
    inside a call made with grad mode off)."""
    if torch.is_grad_enabled():
        return any(getattr(a, "requires_grad", False) for a in trace.args)
    return any(getattr(o, "requires_grad", False) for o in tree_leaves(trace.output))


def _with_sizes(trace: Trace) -> Trace:
    """The trace (same header) with every symbolic size its lines, its claimed decompositions or the backward read
    computed once, at the top (define_sizes, on a copy: the trace it was given stays as it is)."""
    new = from_trace(trace)
    new.bound_symbols = list(trace.bound_symbols)
    new.provenance = trace.provenance
    return define_sizes(new)


# -- stage "claim" -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claimed:
    forward: Trace
    backward: Trace | None


def claim_program(program: Program, options: CompileOptions, symbolic: bool) -> Claimed:
    """Stage "claim": each op of the forward (and backward) taken by the first executor that can run it."""
    forward = claim(program.traces[-1], options.executors)
    if symbolic:
        prune_sizes(_claimed_sizes(forward, options.executors))  # (claim's new trace, before anything else sees it)
    backward = claim(program.backward_traces[-1], options.executors) if program.split is not None else None
    return Claimed(forward, backward)


def _claimed_sizes(trace: Trace, executors) -> Trace:
    """The claimed trace with the sizes its lines read that only a line inside a composite claimed whole defines
    (`x[mask, 1:] = v`: setitem's decomposition reads the count of mask's nonzero entries, defined inside the getitem
    that an executor claimed) unpacked, claimed too, after the tensor that carries them (define_sizes)."""
    claimed = {id(b) for b in trace.bound_symbols}
    define_sizes(trace)
    trace.bound_symbols[:] = [line for b in trace.bound_symbols
                              for line in ([b] if id(b) in claimed else claim_bsym(b, executors))]
    return trace


# -- stage "memory" ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Executable:
    """The memory stage's result: the full trace histories of the programs that run (the last trace of each)."""

    traces: list  # the computation's passes, then [claimed, (densified,) (rescheduled,) (reused,) (inputs written,)
    # del-last-used]
    backward_traces: list  # likewise for the backward ([] without autodiff)
    written_in_place: frozenset = frozenset()  # output positions of writebacks the program does itself (no copy)


def memory_passes(program: Program, claimed: Claimed) -> Executable:
    """Stage "memory": the memory passes over the claimed traces (see `_after_claim`); in the forward, the lines
    computing values written back into inputs write them there when they can (write_into_inputs)."""
    backward = [] if claimed.backward is None else [*program.backward_traces, *_after_claim(claimed.backward)]
    args = program.traces[0].args
    # (a program that checks run-time sizes may stop part way: its writes into the inputs are the epilogue's)
    targets = [] if has_checks(claimed.forward) else [(args[w.arg_index], w.output_index) for w in program.writebacks]
    forward, written = _after_claim(claimed.forward, targets)
    return Executable([*program.traces, *forward], backward, written)


def _after_claim(claimed, targets=None):
    """[claimed, (inputs densified,) (rescheduled,) (buffers reused,) del-last-used]: the memory passes over an
    execution trace. With targets (the forward's writebacks: input, output position): ([..., (inputs written,)
    del-last-used], the positions written by the program itself)."""
    traces = [claimed]
    # the passes ask the executor that claimed each line (recorded by the claim pass) about its memory
    for memory_pass in (densify_broadcast_inputs, schedule, reuse_buffers):
        new = memory_pass(traces[-1])
        if new is not traces[-1]:
            traces.append(new)
    if targets is None:
        return [*traces, del_last_used(traces[-1])]
    written, positions = write_into_inputs(traces[-1], targets) if targets else (traces[-1], frozenset())
    if written is not traces[-1]:
        traces.append(written)
    return [*traces, del_last_used(traces[-1])], positions


# -- stage "codegen" ---------------------------------------------------------------------------------------------------
def codegen(traced: TraceResult, program: Program, executable: Executable, options: CompileOptions):
    """Stage "codegen": the callable that runs a call's computation: the forward program as Python, inside the
    torch.autograd.Function of jitcore/runtime/autograd.py when there is a backward."""
    forward = outside_autocast(executable.traces[-1].python_callable())
    nograd_views = nograd_views_of(traced.trace)
    split = program.split
    if split is None:
        return WithoutHistory(forward, nograd_views) if nograd_views else forward
    plain_backward = program.backward_traces[-2 if program.early_grads else -1]  # (without grads_ready lines)
    if program.extra_grads:  # (the node takes such an input again per extra gradient: the engine sums them)
        forward = first_inputs(forward, len(traced.trace.args))
    return (GradsApart if program.extra_grads else AutogradProgram)(
        forward, outside_autocast(executable.backward_traces[-1].python_callable()), split.n_outputs,
        split.output_requires_grad, [isinstance(p, TensorProxy) for p in split.saved],
        backward_variants(plain_backward, options, program.early_grads), saving(program.hooks), program.early_grads,
        enables_grad=not torch.is_grad_enabled(),  # (the cache guards the grad mode)
        nograd_views=nograd_views, extra_grads=program.extra_grads)


# -- stage "backward variants", at backward time -----------------------------------------------------------------------
def backward_variants(backward: Trace, options: CompileOptions, early_grads: tuple = ()):
    """The stage that runs at backward time, not at compile time: a builder the autograd wrapper calls, on first use,
    for each pattern of cotangents autograd passes as None (a loss that reached only some outputs). present (one bool
    per cotangent) -> the traces of the backward for those calls (the last one runs): the dropped cotangents' lines
    removed (drop_cotangents), DDP's early gradients, then claim and the memory passes again. Under symbolic sizes,
    a backward that would read zeros of a size it is not given is not built: [the dropped trace] marked "zeros from
    runtime", which says the gradients that are None."""
    n_saved = dict(backward.arg_groups)["saved"]
    symbolic = not all(type(d) is int for ct in backward.args[n_saved:] for d in ct.shape)

    def build(present: tuple):
        dropped = drop_cotangents(backward, present)
        if symbolic and _reads_undefined(define_sizes(dropped)):  # zeros of a symbolic size no value gives
            dropped.zeros_from_runtime = True
            return [dropped]
        ready = with_grads_ready(dropped, early_grads) if early_grads else dropped
        traces = [dropped, *([ready] if ready is not dropped else []), *_after_claim(claim(ready, options.executors))]
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


# -- stage "guards" ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Guarded:
    prologues: Prologues  # the checks (and unpacking of inputs) a call passes to reuse the entry
    epilogue: Trace | None  # the side effects replayed after each call; None when the function has none
    run_epilogue: object  # the epilogue's callable (None likewise)


def guard(traced: TraceResult, writebacks: list, predicates: list, roots: Roots, symbolic: bool,
          saved_hooks=False, autodiff: bool = False, saved=frozenset(), tails: tuple = (), in_place=()) -> Guarded:
    """Stage "guards": the prologues (every guard of the trace, the predicates the stages recorded, the saved-tensor
    hooks the programs were built for) and the epilogue (side effects and writebacks of inputs). saved: the names
    the forward saves for backward (an input among them needs no guard that it is no inference tensor). in_place: the
    writebacks the program does itself (their version counters move in the epilogue)."""
    moves = version_moves(traced, in_place, {w.arg_index for w in writebacks})
    moved, view_guards, remade = checked_moves(traced, moves, roots)
    data = traced.guards.data + [g for name, g in traced.guards.not_inference.items() if name not in saved]
    guards = replace(traced.guards, predicates=predicates, saved_hooks=saved_hooks, data=data + view_guards)
    prologues = build_prologues(traced.inputs, guards, traced.aliases, roots, symbolic)
    index = {p.name: i for i, p in reversed(list(enumerate(traced.trace.output))) if isinstance(p, Proxy)}
    inputs = {i.proxy.name: i.provenance for i in traced.inputs if isinstance(i.proxy, TensorProxy)}
    inputs.update({name: traced.inputs[k].provenance for k, name, _ in traced.restrided})  # (the caller's object)
    epilogue = build_epilogue(traced.side_effects, index, writeback_specs(traced, writebacks), traced.escapes,
                              returned_inputs(traced, writebacks, autodiff), inputs,
                              views_of_written(traced, writebacks) + views_of_moved(traced, remade), tails,
                              restrided_specs(traced),
                              moved)
    return Guarded(prologues, epilogue, epilogue.python_callable() if epilogue else None)


# -- the tail of a program that reads written inputs' new values (transforms/written_tails.py) -------------------------
@dataclass(frozen=True)
class _TailTraced:
    """What the autodiff pass and codegen read of a TraceResult, for a tail."""

    trace: Trace
    grads_apart: frozenset = frozenset()
    inputs: tuple = ()  # (no DDP early gradients: the tail's inputs are no parameters)


def compile_tail(tail: Tail, options: CompileOptions, sized: bool) -> tuple[TailRun, list]:
    """(the runner the epilogue calls, the tail's traces): the tail through autodiff, rematerialization, claim, the
    memory passes and codegen, as the head went (its callers' tensors require grad: it has a backward)."""
    check = next((b for b in tail.trace.bound_symbols if has_checks_line(b)), None)
    if check is not None:  # (it would fail after the writebacks, where the call can no longer run again)
        raise UnsupportedError(
            "data-dependent control flow", "a size known only at run time, counted from an argument's new value "
            "after an in-place write whose value needs gradients, decides Python control flow: its check would run "
            "after the argument was written, where another answer could no longer run the call again",
            hint="count before writing into the argument, or write into a clone of it", where=user_where(check))
    p = Passing(_TailTraced(tail.trace), sized, options, None, traces=[tail.trace])
    _autodiff(p)
    if _remat_applies(p):
        _remat(p)
    _backward_cse(p)
    program = Program([*p.traces, _with_sizes(p.forward) if sized else p.forward], p.backward, p.split, [])
    executable = memory_passes(program, claim_program(program, options, sized))
    run = codegen(_TailTraced(tail.trace), program, executable, options)
    return TailRun(run, tail.cuts, tail.positions, tail.boundary, tail.n_outputs, tail.standins), \
        [executable.traces[-1], executable.backward_traces[-1]]


def _hooks_guard(program: Program, options: CompileOptions):
    """What the prologue checks of the saved_tensors_hooks active around a call: False (nothing: no backward, or
    jit's own pair, which takes their place), None (none active) or the (pack, unpack) the program was built for."""
    if program.split is None or options.saved_tensor_hooks is not None:
        return False
    return None if program.hooks is None else (program.hooks.pack, program.hooks.unpack)
