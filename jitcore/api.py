"""The pipeline, top to bottom. `jit(fn)` -> on each call, a cache lookup (the prologue) -> on a miss,
`compile_entry` runs the stages: interpret (the function into a computation trace) -> transforms (functionalize,
dce, cse, autodiff) -> claim (executors take every op) -> memory (buffer reuse, del-last-used) -> codegen (callables,
the autograd wrapper) -> guards (prologues, epilogue) -> run the computation, replay its side effects. Read this first.
"""
from __future__ import annotations

import functools
import inspect
import logging
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from executors import python_ex, torch_ex
from executors.ahead import compile_ahead
from executors.base import Executor, FusionExecutor, get_executor
from executors.claim import claim
from executors.regions import COMPILE_EVENTS
from jitcore import compat, logs
from jitcore.debug.inspection import ExamineReport, examine_call
from jitcore.debug.verify import checked_call, external_effect, verify_calls
from jitcore.errors import UnsupportedError
from jitcore.frontend.tracing import TraceResult, define_sizes, prune_sizes, trace_function
from jitcore.guards import module_state
from jitcore.guards.binding import check_binding
from jitcore.guards.cache import Cache, CacheEntry
from jitcore.guards.input_storage import check_keep_inputs, describe, value_dependence
from jitcore.guards.predicates import Predicates, recording
from jitcore.guards.prologue import Prologues, build_prologues
from jitcore.interpreter import versions
from jitcore.interpreter.provenance import Roots
from jitcore.interpreter.user_traceback import at_user_line, user_frames_first
from jitcore.ir import lint as ir_lint
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.autocast import outside_autocast
from jitcore.runtime.autograd import AutogradProgram, WithoutHistory, ddp_overlaps, saved_tensor_bytes  # noqa: F401 (public)
from jitcore.runtime.epilogue import build_epilogue, nograd_views_of, returned_inputs, views_of_written, writeback_specs
from jitcore.runtime.fsdp_units import ShardedCall, is_sharded, refuse_unhooked_shards
from transforms.autodiff import Split, drop_cotangents, grad_transform
from transforms.cse import cse
from transforms.dce import dce
from transforms.early_grads import with_grads_ready
from transforms.fsdp_order import check_backward_order, thread_sharded_params
from transforms.functionalize import functionalize, save_written_inputs_by_copy
from transforms.memory import del_last_used, densify_broadcast_inputs, reuse_buffers, write_into_inputs
from transforms.rematerialize import BUDGET, checkpointed, rematerialize
from transforms.saved_hooks import SavedHooks, hooks_for, saving, traced_or_warn
from transforms.schedule import schedule


@dataclass(frozen=True)
class CompileOptions:
    executors: tuple
    cache: str
    keep_inputs: str = "int"
    rematerialize: bool | float = True  # what the forward saves: transforms/rematerialize.py
    verify: int = 0  # how many calls of each new entry also run eagerly and are compared (jitcore/debug/verify.py)
    saved_tensor_hooks: tuple | None = None  # (pack, unpack) put into the programs (transforms/saved_hooks.py)


def jit(fn=None, /, *, executors=None, cache: str = "constant values", keep_inputs: str = "int",
        rematerialize: bool | float = True, verify=None, saved_tensor_hooks=None):
    """A callable computing fn's results with traced, transformed and claimed programs; nn.Modules stay modules.

    fn: a function, a callable object or an nn.Module (a jitted module keeps the original's parameters, buffers,
    train/eval and state_dict). Generator and coroutine functions are refused: jit the loop body. A jitted function
    or module called inside another jitted program is part of that program (inlined; its own cache is untouched).
    Without fn, a decorator with these options: `@jitcore.jit(cache="symbolic values")`.

    Options (keyword-only):

    executors: who runs the ops, a priority list of executor objects or names (one alone needs no list):
        "inductor" (fusion regions compiled by torch.compile's Inductor, CPU and GPU), "nvfuser" (fusion regions,
        CUDA only), "torch" (torch kernels), "python" (number and shape arithmetic), or an executor of your own
        (`executors.OperatorExecutor`). The torch and python executors always come last as the fallback;
        None (default): only them.
    cache: when a call reuses a compiled program. "constant values" (default): sizes and Python numbers are part of
        the program, a new value compiles again; "symbolic values": sizes and Python ints/floats are symbols, the
        prologue checks the predicates Python's answers relied on (`i0 > 2`), so new sizes usually reuse the
        program; "no caching": every call traces again.
    keep_inputs: which tensor values each cache entry keeps of the call it was compiled for (`input_specs`, packages):
        "int" (default: integer and boolean tensors, such as token ids and masks), "all" or "none" (metadata only).
    rematerialize: with a backward, the forward saves fewer bytes and the backward recomputes cheap elementwise
        work from them, where that adds at most ~5% to the step's (estimated) time (transforms/rematerialize.py);
        True (default), a number (that fraction instead; float("inf"): save the fewest bytes whatever the recompute
        costs), or False (save exactly what the backward reads). Blocks run through
        torch.utils.checkpoint.checkpoint(..., use_reentrant=False) are recomputed in the backward whatever this says.
    verify: check the compiled programs against eager (jitcore/debug/verify.py). True, or a number of calls N: the first
        call (N calls) of every new cache entry also runs eagerly on copies and is compared (outputs, gradients,
        inputs and module state after the call); a mismatch raises VerificationError with the first differing
        program line and a repro folder. False, or None (default) with no JITCORE_VERIFY=1 in the environment: off,
        at no cost per call.
    saved_tensor_hooks: (pack, unpack), as for torch.autograd.graph.saved_tensors_hooks: each tensor the forward
        saves for backward is packed right after its last use in the forward and unpacked right before its first use
        in the backward. Both are traced into the programs (they print in last_traces / last_backward_traces and
        executors claim their ops; they may branch on the tensor's dtype and sizes). Shipped pairs: jitcore.hooks.bf16,
        jitcore.hooks.float8 (per-tensor scale), jitcore.hooks.cpu_offload. Without this option, the pair of a
        torch.autograd.graph.saved_tensors_hooks block around a call is traced in the same way (the cache keys on the
        identity of pack and unpack). A pair that cannot be traced runs eagerly on the saved tensors, with a warning.
        With this option, hooks active around a call apply to what the program saves (its packed tensors), as for any
        torch.autograd.Function.

    >>> import torch, jitcore
    >>> def foo(a, b):
    ...     return a.unsqueeze(1) + b
    >>> jfoo = jitcore.jit(foo, cache="symbolic values")
    >>> jfoo(torch.ones(3, 4), torch.ones(3, 1, 4)).shape
    torch.Size([3, 1, 4])
    >>> jfoo(torch.ones(5, 6), torch.ones(5, 1, 6)).shape   # new sizes, the same program
    torch.Size([5, 1, 6])
    >>> jitcore.cache_misses(jfoo)
    1
    """
    versions.check_jit()  # (a Python the interpreter cannot run: refused; 3.12: said once to be untested)
    options = CompileOptions(_resolve_executors(executors), cache, keep_inputs, _remat_option(rematerialize),
                             verify_calls(verify), _hooks_option(saved_tensor_hooks))
    Cache(cache)  # validates the option now, not at the first call
    check_keep_inputs(keep_inputs)
    if fn is None:  # @jitcore.jit(...) over a definition: the options are checked here, the function given next
        return functools.partial(jit, executors=executors, cache=cache, keep_inputs=keep_inputs,
                                 rematerialize=rematerialize, verify=verify, saved_tensor_hooks=saved_tensor_hooks)
    _check_callable(fn)
    if isinstance(fn, torch.nn.Module):
        return JitModule(fn, options)
    return jit_function(fn, options)


def _check_callable(fn):
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


def _remat_option(value) -> bool | float:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value >= 0:
        return float(value)
    raise ValueError(f"jit(rematerialize=...): expected True, False or a non-negative number, got {value!r}")


def _hooks_option(value):
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(callable(f) for f in value):
        return tuple(value)
    raise ValueError(f"jit(saved_tensor_hooks=...): expected a (pack, unpack) pair of callables, got {value!r}")


def _fuses(executors) -> bool:
    """Whether a fusion executor is in the list: it fuses lines the backward recomputes into its regions."""
    return any(isinstance(e, FusionExecutor) for e in executors)


def _resolve_executors(executors) -> tuple:
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


# -- the jitted callables: a module wraps a JitFunction over the model ------------------------------------------
def _model_method(model, name: str, value) -> bool:
    """Whether `value` is a method of the model's own classes (not nn.Module's, not forward): `generate`."""
    if not inspect.ismethod(value) or value.__self__ is not model or name in ("forward", "__call__"):
        return False
    return not hasattr(torch.nn.Module, name)


class JitModule(torch.nn.Module):
    """The jitted nn.Module: wraps `model`; calls go through a JitFunction over `model.__call__` (hooks included).

    Parameters and buffers stay the original's (they are inputs of the trace, never constants), so optimizers,
    state_dict and train/eval work on the same tensors as before.
    """

    __jitcore_inline__ = "_model"  # called inside a jitted program, the model is interpreted there (run.py)

    def __init__(self, model: torch.nn.Module, options):
        module_state.install()  # the module state epoch: parameters are not re-checked on every call
        super().__init__()

        self.__dict__["_model"] = model  # not a registered submodule: state_dict keys stay the model's own
        # the model's own parameter and buffer tables: what writes them through the wrapper (torch.func's
        # functional_call, stateless reparametrization, `jm.weight = Parameter(...)`) changes the model it runs
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers
        if is_sharded(model):  # FSDP2: its hooks run eagerly around a program of the model's forward
            self.__dict__["_jfn"] = ShardedCall(model, jit_function(type(model).forward.__get__(model), options))
        else:
            self.__dict__["_jfn"] = jit_function(model, options)

    def forward(self, /, *args, **kwargs):
        return self._jfn(*args, **kwargs)

    def __call__(self, /, *args, **kwargs):  # straight to the cache: no nn.Module dispatch on the hot path
        return self.__dict__["_jfn"](*args, **kwargs)

    # inspection entry points read these, so jitcore.last_traces(jmodule) works like for functions
    @property
    def _last_entry(self):
        return self._jfn._last_entry

    @property
    def _cache(self):
        return self._jfn._cache

    @property
    def training(self):
        return self._model.training

    @training.setter
    def training(self, value):
        if "_model" in self.__dict__:
            self._model.training = value

    def train(self, mode: bool = True):
        self._model.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def _apply(self, fn, recurse=True):
        self._model._apply(fn, recurse)
        return self

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__["_model"]
            value = getattr(model, name)
        if _model_method(model, name, value):  # `jm.generate(...)`: its calls of the model run compiled
            return self._calling_jitted_forward(value)
        return value

    @property
    def jitted_forward(self) -> JitFunction:
        """The model's forward, jitted with this module's options: what the model's own methods (HF `generate`)
        run when they call the model through `jm` (`jm.generate(...)`); its cache is its own (cache_misses(...))."""
        jf = self.__dict__.get("_jitted_forward")
        if jf is None:
            model = self.__dict__["_model"]
            jf = self.__dict__["_jitted_forward"] = jit_function(type(model).forward.__get__(model),
                                                                  self.__dict__["_jfn"].options)
        return jf

    def _calling_jitted_forward(self, method):
        """method (of the model) run with the model's forward replaced by jitted_forward while it runs, so the
        model calls it makes (`self(**inputs)` in a decode loop) run compiled code."""
        @functools.wraps(method)
        def call(*args, **kwargs):
            model = self.__dict__["_model"]
            if "forward" in model.__dict__:  # already redirected (a nested call), or the user's own forward
                return method(*args, **kwargs)
            model.forward = self.jitted_forward
            try:
                return method(*args, **kwargs)
            finally:
                model.__dict__.pop("forward", None)

        return call

    def __getitem__(self, index):  # Sequential / ModuleList / ModuleDict indexing reaches the model's children
        return self._model[index]

    def __iter__(self):
        return iter(self._model)

    def __repr__(self):
        return f"JitModule({self._model!r})"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._model)))


_DELEGATED = (
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules", "state_dict", "load_state_dict", "zero_grad", "requires_grad_", "get_submodule",
    "get_parameter", "get_buffer", "extra_repr", "register_buffer", "register_parameter", "add_module",
    "register_module", "get_extra_state", "set_extra_state",
)  # nn.Module methods that act on the wrapped model


def _delegate(name):
    def method(self, *args, **kwargs):
        return getattr(self.__dict__["_model"], name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The wrapped model's `{name}`."
    return method


for _name in _DELEGATED:
    setattr(JitModule, _name, _delegate(_name))
del _name


_functorch_active = compat.functorch_transforms_active


def _regions_since(start: int) -> int:
    """Fusion regions compiled since COMPILE_EVENTS[0] was `start` (a compile's progress shows it)."""
    return COMPILE_EVENTS[0] - start


class JitFunction:
    """The jitted callable: its cache of compiled entries and the last entry used (for inspection)."""

    __jitcore_inline__ = "fn"  # called inside a jitted program, `fn` is interpreted there (interpreter/run.py)

    def __init__(self, fn, options: CompileOptions):
        self.fn, self.options = fn, options
        self._cache = Cache(options.cache)
        self._last_entry: CacheEntry | None = None
        self._events_at_call = (0, 0)  # executors.regions.COMPILE_EVENTS when the last call began
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
        self._events_at_call = tuple(COMPILE_EVENTS)  # last_compile_stats' region counts start here
        found = self._cache.lookup(self.fn, args, kwargs)  # the prologues: (entry, inputs), or None on a miss
        if found is None:  # a miss: compile and run here (no frame of its own between the caller's and the user's
            # in a traceback); a compile that takes long shows its progress, the first run's region compiles included
            with logs.Progress(self.__name__, regions=functools.partial(_regions_since, COMPILE_EVENTS[0])):
                entry, inputs = self._compile(args, kwargs)
                self._last_entry = entry
                logs.stage("first run")
                try:
                    flat = entry.computation(*inputs)
                except Exception as e:  # as below
                    at_user_line(e, entry.traces[0])
                    raise
                if entry.epilogue is not None:
                    flat = entry.epilogue(self.fn, args, kwargs, flat)
                return entry.unflatten(flat)
        entry, inputs = found
        self._last_entry = entry
        # run (inline: this is the hot path): the computation, the epilogue's side effects, the output structure
        try:
            flat = entry.computation(*inputs)
        except Exception as e:  # a kernel failed on this call's values: the traceback shows the user's line
            at_user_line(e, entry.traces[0])
            raise
        if entry.epilogue is not None:
            flat = entry.epilogue(self.fn, args, kwargs, flat)
        return entry.unflatten(flat)

    def _run(self, entry, inputs, args, kwargs):
        """Run an entry's computation and epilogue for a call (what __call__ does inline)."""
        try:
            flat = entry.computation(*inputs)
        except Exception as e:
            at_user_line(e, entry.traces[0])
            raise
        if entry.epilogue is not None:
            flat = entry.epilogue(self.fn, args, kwargs, flat)
        return entry.unflatten(flat)

    def entries(self) -> list:
        """The cache entries in the order they were compiled (under "no caching", the last call's)."""
        return list(reversed(self._cache.entries)) or ([self._last_entry] if self._last_entry else [])

    def restore(self, args, kwargs):
        """Compile and cache the entry for this call without running it and without counting a miss (jitcore.load
        rebuilding a package's entries from their input descriptions)."""
        check_binding(self.fn, args, kwargs)
        return self._add_entry(args, kwargs)

    def _add_entry(self, args, kwargs):
        """Compile an entry for this call, with the description of its inputs, and cache it."""
        spec = describe(args, kwargs, self.options.keep_inputs)  # (before the call: it may write into them)
        entry = compile_entry(self.fn, args, kwargs, self.options)
        spec.value_dependent = entry.value_dependent
        entry.input_spec = spec
        self._cache.add(entry, args, kwargs)
        return entry

    def _compile(self, args, kwargs):
        """A miss: eager's TypeError if the call does not bind; else record why, compile an entry for this call,
        cache it, and return it with the inputs its prologue fetched."""
        check_binding(self.fn, args, kwargs)  # a call that does not bind raises eager's TypeError
        refuse_unhooked_shards(self.fn)
        self._cache.record_miss(self.fn, args, kwargs)
        try:
            entry = self._add_entry(args, kwargs)
        except Exception as e:  # raised in the user's code while tracing: the traceback shows the user's frames
            user_frames_first(e)
            raise
        inputs = entry.prologue(self.fn, args, kwargs)
        if inputs is None:
            why = entry.explain(self.fn, args, kwargs)
            raise AssertionError(f"jitcore internal error: a fresh prologue rejected its own call ({why})")
        if _fuses(self.options.executors):  # its fusion regions' C++ builds, side by side before the first run
            compile_ahead(entry, inputs)
        return entry, inputs


class VerifyingJitFunction(JitFunction):
    """A JitFunction made with jit(..., verify=N): the first N calls of each new entry are checked against eager
    (jitcore/debug/verify.py). Its own class, so the hot path of the others pays nothing for it."""

    def __init__(self, fn, options: CompileOptions):
        super().__init__(fn, options)
        self._checks_left: dict = {}  # id(entry) -> calls still to check

    def __call__(self, /, *args, **kwargs):
        if _functorch_active():
            return super().__call__(*args, **kwargs)  # (raises)
        self._events_at_call = tuple(COMPILE_EVENTS)
        found = self._cache.lookup(self.fn, args, kwargs)
        entry, inputs = self._compile(args, kwargs) if found is None else found
        self._last_entry = entry
        left = self._checks_left.get(id(entry), self.options.verify)
        if left <= 0:
            return self._run(entry, inputs, args, kwargs)
        self._checks_left[id(entry)] = left - 1
        return checked_call(self, entry, inputs, args, kwargs)


def jit_function(fn, options: CompileOptions) -> JitFunction:
    return (VerifyingJitFunction if options.verify else JitFunction)(fn, options)


# -- the pipeline: compile_entry runs the stages in order, each timed under its name in last_compile_stats ---------
def compile_entry(fn, args, kwargs, options: CompileOptions) -> CacheEntry:
    """One call's inputs -> a cache entry: interpret -> transforms -> claim -> memory -> codegen -> guards."""
    symbolic = options.cache == "symbolic values"
    stats = {}
    recorded = Predicates()
    with recording(recorded):  # symbolic values: every concrete answer Python needs becomes a predicate
        with _stage(stats, "interpret"):
            traced = trace_function(fn, args, kwargs, symbolic=symbolic)
        sized = symbolic or bool(traced.trace.extra.get("run_time_sizes"))  # sizes the program reads as values
        with _stage(stats, "transforms"):
            program = transform(traced, sized, options, hooks_for(options.saved_tensor_hooks))
        with _stage(stats, "claim"):
            claimed = claim_program(program, options, sized)
        with _stage(stats, "memory"):
            executable = memory_passes(program, claimed)
        with _stage(stats, "codegen"):
            computation = codegen(traced, program, executable, options)
        predicates = list(recorded.items)  # what the stages above assumed of the symbolic values
        with _stage(stats, "guards"):
            copied = [w for w in program.writebacks if w.output_index not in executable.written_in_place]
            saved = {p.name for p in program.split.saved if isinstance(p, Proxy)} if program.split else set()
            guarded = guard(traced, copied, predicates, Roots(args, kwargs, fn), symbolic,
                            _hooks_guard(program, options), autodiff=program.split is not None, saved=saved)
    prologues, epilogue = guarded.prologues, guarded.epilogue
    entry = CacheEntry(prologues.hot, computation, traced.output_spec, traced.n_outputs, executable.traces,
                       prologues.traces, prologues.explain, executable.backward_traces,
                       epilogue=guarded.run_epilogue, epilogue_traces=[epilogue] if epilogue else [], stats=stats,
                       mutated_inputs=tuple(w.arg_index for w in program.writebacks), check=prologues.full,
                       module_state=prologues.state, value_dependent=value_dependence(traced),
                       external_effect=external_effect(traced.side_effects, fn) if options.verify else "")
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


@dataclass(frozen=True)
class Program:
    """The transforms stage's result: the computation as the transforms left it, before any executor claimed it."""

    traces: list  # one per pass: interpreted, (functional,) dce, cse, (autodiff forward); the last is claimed
    backward_traces: list  # [autodiff backward, its cse] ([] without autodiff)
    split: Split | None  # the autodiff split (saved values, outputs that carry gradients); None without autodiff
    writebacks: list  # transforms.functionalize's writebacks: the inputs the program writes into
    hooks: SavedHooks | None = None  # the saved-tensor hooks of the programs (None: none, or no backward)
    early_grads: tuple = ()  # input positions whose gradients the backward hands over as computed (under DDP)


def _hooks_guard(program: Program, options: CompileOptions):
    """What the prologue checks of the saved_tensors_hooks active around a call: False (nothing: no backward, or
    jit's own pair, which takes their place), None (none active) or the (pack, unpack) the program was built for."""
    if program.split is None or options.saved_tensor_hooks is not None:
        return False
    return None if program.hooks is None else (program.hooks.pack, program.hooks.unpack)


def transform(traced: TraceResult, symbolic: bool, options: CompileOptions, hooks: SavedHooks | None = None) -> Program:
    """Stage "transforms": functionalize (in-place writes become writebacks), dce, cse, and autodiff when a gradient
    can flow (the joint trace splits into a forward and a backward; rematerialization then chooses what the forward
    saves by cost)."""
    traces = [traced.trace]
    blocks = thread_sharded_params(traced.trace)  # FSDP2: each sharded block reads its parameters as gathered
    if blocks is not traced.trace:
        traces.append(blocks)
    functional, writebacks = functionalize(traces[-1], traced.input_strides)
    if functional is not traces[-1]:
        traces.append(functional)
        _check_written_inputs(traced, writebacks)
    traces.append(dce(traces[-1]))
    traces.append(cse(traces[-1]))
    if not _needs_autodiff(traces[-1]):
        return Program([*traces[:-1], _with_sizes(traces[-1])] if symbolic else traces, [], None, writebacks)
    split = grad_transform(traces[-1])
    backward = [split.backward]
    if options.rematerialize is not False or checkpointed(split.forward):  # (False: the user's checkpoints only)
        traces.append(_with_sizes(split.forward) if symbolic else split.forward)  # the grad transform's stays
        remat = options.rematerialize
        budget = BUDGET if remat is True else None if remat is False else remat
        split, _, remat_backward = rematerialize(split, _fuses(options.executors), budget)
        backward.append(remat_backward)
    forward = split.forward
    if writebacks:  # the epilogue overwrites them before the backward runs
        written = {traced.trace.args[w.arg_index].name for w in writebacks}
        forward = save_written_inputs_by_copy(forward, split.n_outputs, written)
    backward.append(cse(backward[-1], distinct_outputs=False))
    if hooks is not None:
        hooked = traced_or_warn(Split(forward, backward[-1], split.n_outputs, split.saved, split.output_requires_grad),
                             hooks, symbolic)
        if hooked is None:
            hooks = replace(hooks, traced=False)
        else:
            traces.append(_with_sizes(forward) if symbolic else forward)
            split, forward = hooked, hooked.forward
            backward.append(hooked.backward)
    if blocks is not traced.trace:
        check_backward_order(backward[-1], forward)
    early = _early_grad_positions(traced)
    if early:  # the last backward without them stays the base of the backward_without variants
        backward.append(with_grads_ready(backward[-1], early))
    return Program([*traces, _with_sizes(forward) if symbolic else forward], backward, split, writebacks, hooks,
                   early)


def _early_grad_positions(traced: TraceResult) -> tuple:
    """Under DDP (and not find_unused_parameters, whose search of the graph needs the parameters as inputs of the
    autograd node): the positions of the parameters that require grad, whose gradients the backward hands over as
    soon as it computes them (transforms/early_grads.py), so DDP's all-reduces overlap the backward."""
    if not ddp_overlaps():
        return ()
    return tuple(i for i, inp in enumerate(traced.inputs) if inp.is_parameter and inp.proxy.requires_grad)


@dataclass(frozen=True)
class Claimed:
    forward: Trace
    backward: Trace | None


def claim_program(program: Program, options: CompileOptions, symbolic: bool) -> Claimed:
    """Stage "claim": each op of the forward (and backward) taken by the first executor that can run it."""
    forward = claim(program.traces[-1], options.executors)
    if symbolic:
        prune_sizes(forward)  # (claim's new trace, before anything else sees it)
    backward = claim(program.backward_traces[-1], options.executors) if program.split is not None else None
    return Claimed(forward, backward)


def _with_sizes(trace: Trace) -> Trace:
    """The trace (same header) with every symbolic size its lines, its claimed decompositions or the backward read
    computed once, at the top (define_sizes, on a copy: the trace it was given stays as it is)."""
    new = from_trace(trace)
    new.bound_symbols = list(trace.bound_symbols)
    new.provenance = trace.provenance
    return define_sizes(new)


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
    targets = [(args[w.arg_index], w.output_index) for w in program.writebacks]
    forward, written = _after_claim(claimed.forward, targets)
    return Executable([*program.traces, *forward], backward, written)


def codegen(traced: TraceResult, program: Program, executable: Executable, options: CompileOptions):
    """Stage "codegen": the callable that runs a call's computation: the forward program as Python, inside the
    torch.autograd.Function of jitcore/runtime/autograd.py when there is a backward."""
    forward = outside_autocast(executable.traces[-1].python_callable())
    nograd_views = nograd_views_of(traced.trace)
    split = program.split
    if split is None:
        return WithoutHistory(forward, nograd_views) if nograd_views else forward
    plain_backward = program.backward_traces[-2 if program.early_grads else -1]  # (without grads_ready lines)
    computation = AutogradProgram(forward, outside_autocast(executable.backward_traces[-1].python_callable()),
                                  split.n_outputs,
                                  split.output_requires_grad,
                                  [isinstance(p, TensorProxy) for p in split.saved],
                                  _backward_without(plain_backward, options, program.early_grads),
                                  saving(program.hooks), program.early_grads)
    computation.enables_grad = not torch.is_grad_enabled()  # (the cache guards the grad mode)
    computation.nograd_views = nograd_views
    return computation


@dataclass(frozen=True)
class Guarded:
    prologues: Prologues  # the checks (and unpacking of inputs) a call passes to reuse the entry
    epilogue: Trace | None  # the side effects replayed after each call; None when the function has none
    run_epilogue: object  # the epilogue's callable (None likewise)


def guard(traced: TraceResult, writebacks: list, predicates: list, roots: Roots, symbolic: bool,
          saved_hooks=False, autodiff: bool = False, saved=frozenset()) -> Guarded:
    """Stage "guards": the prologues (every guard of the trace, the predicates the stages recorded, the saved-tensor
    hooks the programs were built for) and the epilogue (side effects and writebacks of inputs). saved: the names
    the forward saves for backward (an input among them needs no guard that it is no inference tensor)."""
    data = traced.guards.data + [g for name, g in traced.guards.not_inference.items() if name not in saved]
    guards = replace(traced.guards, predicates=predicates, saved_hooks=saved_hooks, data=data)
    prologues = build_prologues(traced.inputs, guards, traced.aliases, roots, symbolic)
    index = {p.name: i for i, p in reversed(list(enumerate(traced.trace.output))) if isinstance(p, Proxy)}
    inputs = {i.proxy.name: i.provenance for i in traced.inputs if isinstance(i.proxy, TensorProxy)}
    epilogue = build_epilogue(traced.side_effects, index, writeback_specs(traced, writebacks), traced.escapes,
                              returned_inputs(traced, writebacks, autodiff), inputs,
                              views_of_written(traced, writebacks))
    return Guarded(prologues, epilogue, epilogue.python_callable() if epilogue else None)


def _backward_without(backward: Trace, options: CompileOptions, early_grads: tuple = ()):
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


# -- inspection (the accessors of the last call are in jitcore/debug/inspection.py) --------------------------------
def examine(fn, *args, executors=None, **kwargs) -> ExamineReport:
    """Which ops fn(*args, **kwargs) uses, whether each is supported, which executor would run it (`executors` as
    for `jit`), and what falls back to opaque. Traces once without running; prints nothing, returns the report.
    (`jitcore.explain(jfn, *args)` is the report of a jitted function, calling it if needed.)

    >>> def f(x):
    ...     return torch.nn.functional.gelu(x).sum()
    >>> print(jitcore.examine(f, torch.ones(2)))
    op                                       count  executor
    ----------------------------------------------------------------
    ltorch.gelu                                  1  torch
    ltorch.sum                                   1  torch
    2 distinct ops, 2 calls; 0 opaque (none)
    """
    return examine_call(fn, args, kwargs, _resolve_executors(executors))
