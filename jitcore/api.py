"""The faces of jitcore: `jit(fn)` and its callables, JitFunction (a function) and JitModule (an nn.Module). A call
looks its entry up in the cache (the prologues), compiles one on a miss (jitcore/pipeline.py: compile_call, the
stages), then runs it in one place (JitFunction.__call__): the computation, the epilogue, the output structure.
"""
from __future__ import annotations

import functools
import inspect

import torch

from executors.regions import COMPILE_EVENTS
from jitcore import compat, logs, pipeline
from jitcore.debug.inspection import ExamineReport, examine_call, saved_tensor_bytes  # noqa: F401 (its face)
from jitcore.debug.verify import CheckingCache, finish_check, prepare_check
from jitcore.guards import module_state
from jitcore.guards.binding import check_binding
from jitcore.guards.cache import Cache, CacheEntry
from jitcore.interpreter import versions
from jitcore.interpreter.user_traceback import at_user_line, user_frames_first
from jitcore.runtime.checked_runs import RunTimeCheckFailed, run_again
from jitcore.runtime.fsdp_units import ShardedCall, is_sharded


def jit(fn=None, /, *, executors=None, cache: str = "constant values", keep_inputs: str = "int",
        rematerialize: bool | float = True, verify=None, saved_tensor_hooks=None, memory_budget: float | None = None):
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
    keep_inputs: tensor values each entry keeps of its call (input_specs, packages): "int" (default: integer and
        bool tensors, such as token ids and masks), "all" or "none" (metadata only).
    rematerialize: with a backward, the forward saves fewer bytes and the backward recomputes cheap elementwise
        work from them, where that adds at most ~5% to the step's (estimated) time (transforms/rematerialize.py);
        True (default), a number (that fraction instead; float("inf"): save the fewest bytes whatever the recompute
        costs), or False (save exactly what the backward reads). Blocks run through
        torch.utils.checkpoint.checkpoint(..., use_reentrant=False) are recomputed in the backward whatever this says.
    memory_budget: as torch.compile's activation_memory_budget: None or 1 (default): `rematerialize`'s plan; 0: the
        fewest bytes saved (matmuls too are recomputed); b: the least recompute saving <= min + b * (default - min).
    verify: check the compiled programs against eager (jitcore/debug/verify.py). True, or a number of calls N: the
        first call (N calls) of every new cache entry also runs eagerly on copies and is compared (outputs, gradients,
        inputs and module state after the call); a mismatch raises VerificationError with the first differing program
        line and a repro folder. False, or None (default) without JITCORE_VERIFY=1: off, at no cost per call.
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
    given = {"executors": executors, "cache": cache, "keep_inputs": keep_inputs, "rematerialize": rematerialize,
             "verify": verify, "saved_tensor_hooks": saved_tensor_hooks, "memory_budget": memory_budget}
    options = pipeline.compile_options(**given)
    if fn is None:  # @jitcore.jit(...) over a definition: the options are checked here, the function given next
        return functools.partial(jit, **given)
    pipeline.check_callable(fn)
    if isinstance(fn, torch.nn.Module):
        return JitModule(fn, options)
    return jit_function(fn, options)


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

    def __init__(self, fn, options: pipeline.CompileOptions):
        self.fn, self.options = fn, options
        self._cache = Cache(options.cache)
        self._last_entry: CacheEntry | None = None
        self._events_at_call = (0, 0)  # executors.regions.COMPILE_EVENTS when the last call began
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, /, *args, **kwargs):
        if _functorch_active():
            raise pipeline.under_functorch(self.__name__)
        self._events_at_call = tuple(COMPILE_EVENTS)  # last_compile_stats' region counts start here
        found = self._cache.lookup(self.fn, args, kwargs)  # the prologues: (entry, inputs), or None on a miss
        progress = None
        if found is None:  # a miss: compile (an error of the user's code is trimmed to the caller's line, then the
            # user's frames); a compile that takes long shows its progress, the first run's region compiles included
            progress = logs.Progress(self.__name__, regions=functools.partial(_regions_since, COMPILE_EVENTS[0]))
            progress.__enter__()
            try:
                found = self._compile(args, kwargs)
            except BaseException as e:
                progress.__exit__(None, None, None)
                user_frames_first(e)  # (an error the user's code raised: the caller's line, then the user's frames)
                raise
            logs.stage("first run")
        entry, inputs = found
        self._last_entry = entry
        # the run, the one path of every call (inline: this is the hot path): the computation, the epilogue's side
        # effects, the output structure
        try:
            try:
                flat = entry.computation(*inputs)
            except RunTimeCheckFailed as e:  # an answer about a run-time size differs: another entry runs the call
                return run_again(self, entry, args, kwargs, e)
            except Exception as e:  # a kernel failed on this call's values: the traceback shows the user's line
                at_user_line(e, entry.traces[0])
                raise
            if entry.epilogue is not None:
                flat = entry.epilogue(self.fn, args, kwargs, flat)
            return entry.unflatten(flat)
        finally:
            if progress is not None:
                progress.__exit__(None, None, None)

    def _compile(self, args, kwargs, reason=None):
        """A miss: (entry, inputs), the entry compiled for this call and cached (jitcore/pipeline.py)."""
        return pipeline.compile_call(self._cache, self.fn, args, kwargs, self.options, reason)

    def entries(self) -> list:
        """The cache entries in the order they were compiled (under "no caching", the last call's)."""
        return list(reversed(self._cache.entries)) or ([self._last_entry] if self._last_entry else [])

    def restore(self, args, kwargs):
        """Compile and cache the entry for this call without running it and without counting a miss (jitcore.load
        rebuilding a package's entries from their input descriptions)."""
        check_binding(self.fn, args, kwargs)
        return pipeline.add_entry(self._cache, self.fn, args, kwargs, self.options)


class VerifyingJitFunction(JitFunction):
    """A JitFunction made with jit(..., verify=N): the first N calls of each new entry are checked against eager
    (jitcore/debug/verify.py). Its own class, so the hot path of the others pays nothing for it: its cache and
    compile prepare the check of a call (copies, RNG state) before JitFunction.__call__ runs it, then compare."""

    def __init__(self, fn, options: pipeline.CompileOptions):
        super().__init__(fn, options)
        self._cache = CheckingCache(options.cache, self._before_run)
        self._checks_left: dict = {}  # id(entry) -> calls still to check
        self._check = None  # the check prepared for the call being run

    def __call__(self, /, *args, **kwargs):
        self._check = None
        out = super().__call__(*args, **kwargs)
        check, self._check = self._check, None
        return out if check is None else finish_check(check, out)

    def _compile(self, args, kwargs, reason=None):
        found = super()._compile(args, kwargs, reason)
        self._before_run(*found, args, kwargs)
        return found

    def _before_run(self, entry, inputs, args, kwargs):
        left = self._checks_left.get(id(entry), self.options.verify)
        if left > 0:
            self._checks_left[id(entry)] = left - 1
            self._check = prepare_check(self, entry, inputs, args, kwargs)


def jit_function(fn, options: pipeline.CompileOptions) -> JitFunction:
    return (VerifyingJitFunction if options.verify else JitFunction)(fn, options)


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
    return examine_call(fn, args, kwargs, pipeline.resolve_executors(executors))
