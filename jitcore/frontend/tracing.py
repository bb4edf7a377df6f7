"""Frontend glue: runs the interpreter over the user's function with jitcore's context and returns the
computation Trace. The context maps torch callables to ops (torch_map), turns every external tensor into a
proxy input with its provenance, and records the non-tensor values the trace depends on, for the guards.
"""
from __future__ import annotations

import abc
import contextvars
import enum
import functools
import io
import types
from dataclasses import dataclass, field

import torch
import torch.utils.checkpoint as _checkpoint

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.frontend import arrays, ndarrays, numpy_calls, standins
from jitcore.frontend.jit_services import JitServices
from jitcore.frontend.layouts import Layouts
from jitcore.frontend.ndarrays import NdarrayProxy
from jitcore.frontend.rebind import input_metadata_changes, refuse_reads_after_change
from jitcore.guards import data_guards, module_state, process_state, torch_flags
from jitcore.guards.cache import storage_address as _storage_address  # (its home: the cache checks aliasing)
from jitcore.guards.data_guards import DataGuard
from jitcore.guards.kinds import Guards
from jitcore.guards.values import COPIED_CONTAINERS, Members, contents_copy, is_ndarray
from jitcore.interpreter import interpret
from jitcore.interpreter.protocol import InterpreterHooks
from jitcore.interpreter.provenance import Arg, Attr, Closure, DictView, Fn, Global, Item, Kwarg, Roots
from jitcore.interpreter.run import is_user_file
from jitcore.ir import arith, ranges
from jitcore.ir.data_ptr import Address
from jitcore.ir.proxies import FloatProxy, IntegerProxy, NumberProxy, Proxy, SymbolicSize, TensorProxy
from jitcore.ir.pytree import register_containers, tree_flatten
from jitcore.ir.trace import Timer, Trace, get_tracectx, tracectx
from jitcore.ops import autocast, log_calls, per_call, prims, rng_generators, torch_complex, torch_creation, torch_map
from jitcore.ops.opaque import FUNCTION_APPLY, user_function_call
from jitcore.ops.sizes import define_sizes
from jitcore.runtime.epilogue import Escapes, effect_proxies

_AUTOCAST = torch.amp.autocast_mode.autocast

_TENSOR_CLASSES = (torch.Tensor, torch._C.TensorBase)


GUARDED_SCALARS = (int, float, bool, str, complex, type(None), torch.dtype, torch.device)
_CONTAINERS = (list, tuple, dict)
_LIBRARIES = ("torch", "jitcore", "builtins", "math", "operator", "functools", "itertools", "collections", "typing",
              "numbers", "warnings", "inspect", "types", "enum", "dataclasses", "abc", "numpy", "einops")
_NO_IDENTITY = (types.ModuleType, list, tuple, dict, set, frozenset, type({}.values()), type({}.items()),
                type({}.keys()))

# values handed in whose type does not say what calling them does (two functions, two builtins, two classes): an
# argument among them is guarded by identity, not by type
_CALLED_BY_IDENTITY = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                       types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType, type,
                       types.CodeType)
# ... and values whose identity the trace bakes in: a process group (a collective over another group of the same type
# is another program)
_BY_IDENTITY = _CALLED_BY_IDENTITY + ((torch.distributed.ProcessGroup,) if torch.distributed.is_available() else ())


@dataclass
class TracedInput:
    """An input of the computation (a tensor, or a number under symbolic values): its proxy and where a call
    finds it (provenance)."""

    proxy: Proxy
    provenance: object
    is_parameter: bool = False


@dataclass
class TraceResult:
    trace: Trace
    inputs: list  # TracedInput, in the computation's signature order
    guards: Guards
    side_effects: list
    output_spec: object = None
    n_outputs: int = 0  # the user's flat outputs come first in trace.output; side-effect values follow
    input_strides: dict = field(default_factory=dict)  # tensor input name -> its strides when traced
    input_storages: list = field(default_factory=list)  # per input: storage address (None: numbers, empty tensors)
    aliases: list = field(default_factory=list)  # (provenance, input name): the same tensor found again elsewhere
    escapes: Escapes | None = None  # objects handed back or stored: fetched again or built afresh by the epilogue
    # names of the leaf inputs that require grad whose grad_dtype is not their dtype when traced: their gradient's
    # contributions stay apart, for autograd's engine to sum (transforms/autodiff.py grad_transform)
    grads_apart: frozenset = frozenset()
    # (input position, name of the tensor the caller's tensor becomes, its changes): x.unsqueeze_(0) of an input
    restrided: list = field(default_factory=list)


def _in_checkpoint_sequential(fn) -> bool:
    """torch.utils.checkpoint.checkpoint_sequential or a function it defines (the segments it checkpoints)."""
    return getattr(fn, "__module__", None) == _checkpoint.__name__ and \
        getattr(fn, "__qualname__", "").startswith("checkpoint_sequential")


class JitContext(InterpreterHooks):
    """What the interpreter asks jitcore while it runs user code: the hooks of InterpreterHooks
    (jitcore/interpreter/protocol.py), and what the guards need recorded (Guards, jitcore/guards/kinds.py).

    symbolic: cache="symbolic values": sizes of argument tensors (other than 0 and 1) and int/float arguments
    become number proxies; state tensors (parameters, buffers, globals) keep constant sizes.
    """

    returns_generators = False  # a returned generator would run after the trace: refused by interpret()

    def __init__(self, trace: Trace, symbolic: bool = False):
        self.trace, self.symbolic = trace, symbolic
        self.inputs: list[TracedInput] = []
        self.guards = Guards()
        self.context_vars = torch_flags.ContextVars()
        self._containers: dict = {}  # provenance -> external list/tuple/dict seen
        self._container_ids: dict = {}  # id -> (container, provenance), to find tensors inside containers
        self._library: dict = {}  # provenance of a module -> whether it is torch's / the stdlib's
        self._proxies: dict[int, TensorProxy] = {}
        self._numbers: dict = {}  # provenance -> NumberProxy
        self._keepalive: list = []
        self._values: list = []  # per input, the real value it was traced with
        self._params: set[int] = set()
        self.aliases: list = []
        self._arrays: dict = {}  # id(numpy array from outside) -> the input proxy of torch.from_numpy of it
        self._runtime = None  # the interpreter's Runtime, attached when it starts (attach_runtime)
        # name -> True for the tensors eager makes as inference tensors, False for (views of) inference tensor inputs
        self.inference_tensors: dict = {}
        self.metadata_changes: dict = {}  # id(proxy of an input's tensor) -> (it, its in-place metadata changes)
        self.metadata_names: dict = {}  # id(that proxy) -> the names it took, one per change

    def pinned(self, prov) -> bool:
        """Whether a call's object at `prov` is the one this trace saw: its identity is guarded, or it is not
        reached from the arguments (globals, closures, the function's own attributes)."""
        return prov in self.guards.objects or type(prov.root()) not in (Arg, Kwarg)

    def lookaside(self, fn):
        op = self._lookaside(fn)
        arrays_op = numpy_calls.lookaside(fn, op, self.on_call_native)  # numpy on arrays made from tensors, x.numpy()
        if arrays_op is not None:
            op = arrays_op
        if op is not None and ranges.unread(self.trace):  # list(range(n)) nothing has read yet (jitcore/ir/ranges.py)
            return standins.range_lists_pinned(op, torch_creation.takes_ranges(torch_map.lookup(fn)))
        return op

    def on_call_native(self, fn, args, kwargs):
        """Native code reads a list's items directly: a RangeList handed to it records its predicates first, and the
        items of a list, tuple or dict the call was given (`x.reshape(shape_arg)`) are guarded, as if read one by
        one."""
        if ranges.unread(self.trace):
            ranges.pin_within((args, kwargs))
        if self._container_ids:
            owner = getattr(fn, "__self__", None) if getattr(fn, "__name__", None) in _READS_WHOLE else None
            for a in (owner, *args, *kwargs.values()):
                if type(a) in (tuple, list, dict) and id(a) in self._container_ids:
                    self._proxify(a)

    def _lookaside(self, fn):
        try:
            hash(fn)
        except TypeError:  # (a weak reference to an unhashable object, WeakKeyDictionary's iteration guard: none here)
            return None
        if fn is _checkpoint.checkpoint:
            return self._checkpoint
        if fn is torch.utils.hooks.BackwardHook:  # nn.Module's call sets up its backward hooks
            return standins.BackwardHookStandIn
        if fn in _BIT_READERS or (type(getattr(fn, "__self__", None)) is TensorProxy and fn.__name__ in _BITS):
            return functools.partial(self._read_bit, fn)  # x.is_conj(), torch.is_neg(x)
        refused = standins.refused_inside(fn, self._user_caller)
        if refused is not None:
            return refused
        if isinstance(getattr(fn, "__self__", None), _AUTOCAST) and getattr(fn, "__name__", "") == "__exit__":
            return autocast.region_exit(fn)  # leaving an autocast region: after the outermost, its casts are not reused
        if fn is torch.Size:  # torch.Size([i0, 2]) keeps its symbolic entries (a SymbolicSize)
            return standins.size
        if fn is FUNCTION_APPLY:  # MyFunction.apply(x): run by torch at run time, with the user's backward
            return user_function_call
        applied = compat.builtin_apply_class(fn)  # (the same on torch 2.15, where apply is a builtin method)
        if applied is not None:
            return functools.partial(user_function_call, applied)
        if fn in arrays.CONVERSIONS:  # torch.from_numpy(arr): a tensor input sharing the array's memory
            return arrays.array_tensor(self, fn, self._runtime)
        if fn is torch.Generator:  # a new generator on every call (jitcore/ops/rng_generators.py)
            return rng_generators.new_generator_line
        if fn in torch_flags.READERS:  # read now, and checked by the prologue on every call
            return lambda *args, **kwargs: torch_flags.read(self.guards.flags, fn, args, kwargs)
        if fn in process_state.READERS:  # os.stat, os.listdir, os.getcwd, ...: read now, checked on every call
            return process_state.reader(self.guards.flags, fn, self._runtime.frame)
        if fn in torch_flags.SETTERS:
            return torch_flags.refuse_setter(fn)
        if type(getattr(fn, "__self__", None)) is contextvars.ContextVar:  # var.get(): guarded; var.set(): refused
            return self.context_vars.method(fn, self._runtime)
        op = torch_map.lookup(fn)
        if op is None:  # print() and values that change per call (random, clocks) asked for by user code
            op = per_call.lookaside(fn, self._user_caller)
        if op is None:  # logger.info(...): a line logging the call's values on every call
            op = log_calls.lookaside(fn)
        if op is None and type(fn) is types.MethodDescriptorType and fn.__objclass__ in _TENSOR_CLASSES:
            op = standins.unbound_tensor_method(fn)  # torch.Tensor.t_(y): the method as y.t_() would find it
        if op is None and standins.draws_random_torch(fn) and not self.should_inline(fn):
            op = standins.tensorless_draw(fn)  # torch.randperm(n): recorded, never run now and folded into a constant
        if op is None:  # torch._foreach_mul_(ts, k), k symbolic: sent to the fallbacks, not to torch's parser
            op = torch_map.with_number_proxies(fn)
        if not self._container_ids:
            return op
        if op is None:  # a torch callable run natively (`_VF.lstm(x, hx, ...)`) gets the tensors of `hx` as inputs too
            if not torch_map.is_torch_callable(fn) or self.should_inline(fn):
                return None
            op = fn
        return lambda *args, **kwargs: op(*self._proxify(args), **self._proxify(kwargs))

    def _checkpoint(self, function, *args, use_reentrant=None, context_fn=_checkpoint.noop_context_fn,
                    determinism_check="default", debug=False, early_stop=True, **kwargs):
        """torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False): function interpreted here, its
        lines marked checkpointed, so that the backward recomputes them instead of the forward saving their
        outputs. Random draws inside are saved, not drawn again: the backward sees the forward's masks, as eager's
        preserve_rng_state=True replays them."""
        if use_reentrant is not False:
            raise UnsupportedError(
                "checkpoint", f"torch.utils.checkpoint.checkpoint with use_reentrant={use_reentrant} (the reentrant "
                "variant runs its own autograd.Function and backward pass, which a traced program does not)",
                hint="pass use_reentrant=False: the jitted backward then recomputes the block")
        if context_fn is not _checkpoint.noop_context_fn:
            raise UnsupportedError("checkpoint", "torch.utils.checkpoint.checkpoint with a context_fn",
                                   hint="checkpoint without context_fn (selective checkpointing is not supported)")
        kwargs.pop("preserve_rng_state", None)
        lines = get_tracectx().bound_symbols
        start = len(lines)
        out = self._runtime.call(function, args, kwargs)
        for bsym in lines[start:]:
            bsym.checkpointed = True
        return out

    def attach_runtime(self, rt):
        self._runtime = rt

    def _user_caller(self) -> bool:
        """Whether the call being made comes from user code (not from the stdlib: logging's clock reads stay)."""
        frame = getattr(self, "_runtime", None) and self._runtime.frame
        return frame is None or is_user_file(frame.code.co_filename)

    def _proxify(self, obj):
        """Tensors inside external lists/tuples/dicts handed to an op (`torch.cat(list_arg)`) become proxy
        inputs, found through the container's provenance."""
        t = type(obj)
        if t is tuple or t is list:
            known = self._container_ids.get(id(obj))
            items = [self._proxify_item(x, known, i) for i, x in enumerate(obj)]
            return t(items) if any(a is not b for a, b in zip(items, obj)) else obj
        if t is dict:
            known = self._container_ids.get(id(obj))
            pairs = [(k, self._proxify_item(v, known, k)) for k, v in obj.items()]  # (no lookups: a key may have moved)
            return dict(pairs) if any(p is not v for (_, p), v in zip(pairs, obj.values())) else obj
        return obj

    def input_proxy(self, t):
        """The proxy of tensor t when the program already reads it as an input (by identity), else None."""
        return self._proxies.get(id(t))

    def referent(self, obj):
        """`ref()` of a weak reference to a tensor the program reads (nn.RNNBase's refs to its weights): its input,
        as `getattr(module, name)` gives it, so `ref() is weight` answers as in eager."""
        if isinstance(obj, torch.Tensor):
            proxy = self._proxies.get(id(obj))
            if proxy is not None:
                return proxy
        return obj

    def _proxify_item(self, x, known, key):
        if isinstance(x, torch.Tensor):
            if known is not None:
                return self._tensor_input(x, Item(known[1], key))
            proxy = self._proxies.get(id(x))
            if proxy is not None:
                return proxy
            prov = self._provenance_of(x)  # a list built natively from an external one: `[x] + self.weights`
            return x if prov is None else self._tensor_input(x, prov)
        if known is not None and self._held_before_call(known[0], key, x):  # a number (`torch.tensor(list_arg)`
            x = self.on_external_value(x, Item(known[1], key))  # reads them all) or a nested list: guarded
        return self._proxify(x) if type(x) in (tuple, list, dict) else x

    def _held_before_call(self, container, key, x) -> bool:
        """Whether container[key] held x when the call began (a container the call wrote into holds its own values
        too: those are the program's, derived from what it read, not something to guard)."""
        runtime = getattr(self, "_runtime", None)
        before = runtime.effects.contents_before(container) if runtime is not None else None
        if before is None:
            return True
        try:
            return before[key] is x
        except (KeyError, IndexError, TypeError):
            return False

    def _provenance_of(self, t):
        """Where an external container seen so far holds tensor t (the same object), or None."""
        for container, prov in list(self._container_ids.values()):
            items = container.items() if isinstance(container, dict) else enumerate(container)
            for key, value in items:
                if value is t:
                    return Item(prov, key)
        return None

    def should_inline(self, fn) -> bool:
        if isinstance(fn, torch.nn.Module) and type(fn).__module__.startswith("torch.distributed.fsdp"):
            return True  # the user's module in FSDP2's class (FSDP<Block>, made by fully_shard): nn.Module's call
        if _in_checkpoint_sequential(fn):  # its Python source: its checkpoint() calls come to _checkpoint
            return True
        mod = getattr(fn, "__module__", None) or ""
        if mod.startswith(("torch.nn.modules", "torch.nn.utils.parametriz", "torch.distributions",
                           "torch.nn.utils.weight_norm", "torch.nn.utils.spectral_norm")) or \
                _private_helper(fn, mod):
            return True
        return not (mod == "torch" or mod.startswith("torch."))

    def on_external_value(self, value, provenance):
        if isinstance(value, torch.Tensor):
            return self._tensor_input(value, provenance)
        t = type(value)
        if t is torch.Generator:
            return self._generator_input(value, provenance)
        if self.symbolic and (t is int or t is float) and type(provenance) in (Arg, Kwarg):
            return self._number_input(value, provenance)
        if _native_iterator(t):
            raise UnsupportedError("iterator from outside", f"{provenance} is an iterator ({t.__name__}): each "
                                   "call consumes it, so its items differ from call to call, and the traced program "
                                   "would replay the first call's items without advancing it",
                                   hint="pass its items (list(it)), or call next() outside and pass the value")
        g = self.guards
        if not _refetchable(provenance):  # a closure cell of a function with no provenance: a call cannot re-fetch it
            return value
        if t is tuple and type(provenance) is Attr and provenance.name == "__defaults__":
            g.objects.setdefault(provenance, value)  # the jitted function's defaults: guarded by identity
            return value
        if isinstance(value, GUARDED_SCALARS) and type(provenance) is Item and type(g.objects.get(provenance.parent)) \
                is tuple:
            return value  # an item of a tuple guarded by identity (immutable): checked with it
        if isinstance(value, enum.Enum):  # members are singletons: guarded by identity
            g.objects.setdefault(provenance, value)
        elif isinstance(value, GUARDED_SCALARS) or (t is tuple and _scalar_tuple(value)):
            g.values.setdefault(provenance, value)
        elif (t is set or t is frozenset) and all(_by_value_or_identity(x) for x in value):  # (`k in skip`, len(s):
            g.values.setdefault(provenance, t(value))  # native reads): its items, as now
        elif t is set or t is frozenset:  # (`key in s` of objects hashed in Python): the objects it holds
            g.values.setdefault(provenance, Members(value))
        elif t in COPIED_CONTAINERS and all(isinstance(x, GUARDED_SCALARS) for x in value):  # a deque, array or
            g.values.setdefault(provenance, contents_copy(value))  # bytearray read natively (len, iteration, in)
        elif is_ndarray(value) and type(provenance) in (Arg, Kwarg) and \
                (array := arrays.argument_array(self, value, provenance)) is not None:
            return array  # an argument: numpy on it is traced (jitcore/frontend/ndarrays.py)
        elif is_ndarray(value) and value.dtype.hasobject is False:  # (`w.sum()`, `w[1]`: read natively) its contents,
            if not arrays.converted_next(self._runtime.frame, value):  # unless it goes straight to from_numpy
                g.values.setdefault(provenance, value.copy())
        elif isinstance(value, _CONTAINERS):
            self._containers.setdefault(provenance, value)
            self._container_ids.setdefault(id(value), (value, provenance))
        elif t is types.ModuleType:
            self._library.setdefault(provenance, value.__name__.startswith(_LIBRARIES))
        elif not isinstance(value, _NO_IDENTITY) and not isinstance(value, Proxy):
            root = provenance.root()
            if type(root) in (Arg, Kwarg) and not isinstance(value, _BY_IDENTITY):
                g.types.setdefault(provenance, t)
            elif (provenance != root or type(root) is not Fn) and not self._from_library(provenance):
                g.objects.setdefault(provenance, value)
        return value

    def on_attr_presence(self, provenance, present: bool):
        if _refetchable(provenance.parent) and not self._from_library(provenance):
            self.guards.presence.setdefault(provenance, present)

    def proxy_attr(self, proxy, name):
        """A Python attribute of the tensor an input proxy stands for (`x.scale = 2.0` set by the caller): reported
        as a value read from it; an absent one is guarded absent (one its class defines and the proxy does not
        model stays an AttributeError, as before)."""
        found = [(inp, t) for inp, t in zip(self.inputs, self._values) if inp.proxy is proxy]
        if not found:
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        inp, value = found[0]
        d = getattr(value, "__dict__", None) or {}
        prov = Attr(inp.provenance, name)
        if name in d:
            return self._runtime.report(d[name], prov)
        if not hasattr(type(value), name):
            self.on_attr_presence(prov, False)
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")

    def _from_library(self, prov) -> bool:
        """Read from torch's (or the stdlib's) own namespaces: `torch.sin`, a global of torch.nn.functional.
        Monkeypatching those between calls is not guarded; names in the user's modules and objects are."""
        if type(prov) is Global:
            return prov.module == "builtins" or prov.module.startswith(_LIBRARIES)
        return type(prov) is Attr and self._library.get(prov.parent, False)

    def _tensor_input(self, t: torch.Tensor, provenance) -> TensorProxy:
        p = self._proxies.get(id(t))
        if p is None:
            _refuse_unmodelled(t)
            shape = tuple(t.shape)
            if self.symbolic and type(provenance.root()) in (Arg, Kwarg):
                shape = tuple(s if s < 2 else self._size_symbol(s) for s in shape)
            with tracectx(self.trace):
                p = TensorProxy(shape, t.dtype, t.device, t.requires_grad)
            self._proxies[id(t)] = p
            self._keepalive.append(t)
            is_param = isinstance(t, torch.nn.Parameter)
            if is_param:
                self._params.add(id(p))
            self.inputs.append(TracedInput(p, provenance, is_param))
            self._values.append(t)
            if t.is_inference():  # (views of it are inference tensors too, made by the program from it as eager's)
                self.inference_tensors[p.name] = False
                self._guard_inference(p, t)
        elif all(i.provenance != provenance for i in self.inputs if i.proxy is p) and \
                (provenance, p.name) not in self.aliases:
            self.aliases.append((provenance, p.name))
        return p

    def _generator_input(self, gen: torch.Generator, provenance) -> rng_generators.GeneratorProxy:
        """A torch.Generator from outside: an input of the program (a call's generator object is the one drawn from;
        jitcore/ops/rng_generators.py)."""
        p = self._proxies.get(id(gen))
        if p is None:
            if not _refetchable(provenance):
                raise UnsupportedError("torch.Generator", f"a generator found at {provenance}, which a later call "
                                       "cannot fetch again", hint="pass the generator as an argument")
            with tracectx(self.trace):
                p = rng_generators.generator_input(gen)
            self._proxies[id(gen)] = p
            self._keepalive.append(gen)
            self.inputs.append(TracedInput(p, provenance))
            self._values.append(gen)
        elif all(i.provenance != provenance for i in self.inputs if i.proxy is p) and \
                (provenance, p.name) not in self.aliases:
            self.aliases.append((provenance, p.name))
        return p

    def _read_bit(self, fn, *args):
        """`x.is_conj()`, `torch.is_neg(x)`, ... : of a tensor input, the bit of the tensor passed (guarded); of a
        tensor the program made, as eager's would have it (the lines that made it: jitcore/ops/torch_complex.py)."""
        x = fn.__self__ if type(getattr(fn, "__self__", None)) is TensorProxy else args[0] if args else None
        if type(x) is not TensorProxy:
            return fn(*args)
        return torch_complex.lazy_bits(x)[_BITS.index(fn.__name__)]

    def input_bit(self, x, name: str) -> bool | None:
        """The lazy bit `name` ("is_conj", "is_neg") of the tensor an input proxy stands for, guarded
        (Guards.bits); None for a tensor the program made."""
        for inp, value in zip(self.inputs, self._values):
            if inp.proxy is x:
                bit = getattr(value, name)()
                self.guards.bits.setdefault((x.name, name), bit)
                return bit
        return None

    def on_is(self, a, b):
        """`a is b` was False: where a and b are two tensor inputs, a call that passes one tensor for both would take
        the other branch, so the prologue checks they are still two."""
        if type(a) is TensorProxy and type(b) is TensorProxy:
            names = {i.proxy.name for i in self.inputs}
            pair = tuple(sorted((a.name, b.name)))
            if a.name in names and b.name in names and pair not in self.guards.distinct:
                self.guards.distinct.append(pair)

    def concrete_value(self, proxy, kind: str):
        """What Python needs of a tensor's data (`if mask.all():`), computed from this call's inputs and guarded."""
        return data_guards.concrete_value(self, proxy, kind)

    def real_values(self, proxies, guard=None):
        """This call's values of some tensors of the trace (for an op with no meta kernel), or None. guard: (convert,
        text): instead, convert(*values), guarded by the prologue (what an op's output sizes depend on)."""
        if guard is not None:
            return data_guards.guarded_value(self, list(proxies), guard[0], "sizes", guard[1])
        return data_guards.real_values(self, proxies)

    def run_time_value(self, number, convert, what: str):
        """What Python needs of a number that depends on a run-time size (`len(x[mask])`, `if n > 0:`): computed
        from this call's inputs and guarded, like a tensor's data."""
        return data_guards.guarded_value(self, [number], convert, "size", what)

    def inference_of(self, proxy) -> bool:
        """`x.is_inference()`: a tensor the function made is one when made under torch.inference_mode() (or a view
        of one); an input is what the tensor it stands for is, guarded."""
        value = self.real_value(proxy)
        if not isinstance(value, torch.Tensor):
            return proxy.name in self.inference_tensors
        self._guard_inference(proxy, value)
        return value.is_inference()

    def guard_not_inference(self, proxy) -> bool:
        """For an input tensor eager's autograd would save for backward: a call passing an inference tensor there is
        another call (eager raises), unless the program saves it too (Guards.not_inference). False for a proxy that
        is not an input."""
        value = self.real_value(proxy)
        if not isinstance(value, torch.Tensor) or self._proxies.get(id(value)) is not proxy:
            return False
        self.guards.not_inference.setdefault(proxy.name, DataGuard(
            _is_inference, (proxy.name,), False, f"{proxy.name}.is_inference()", on_values=False))
        return True

    def _guard_inference(self, proxy, value):
        if all(g.program is not _is_inference or g.inputs != (proxy.name,) for g in self.guards.data):
            self.guards.data.append(DataGuard(_is_inference, (proxy.name,), value.is_inference(),
                                              f"{proxy.name}.is_inference()", on_values=False))

    def leaf_input(self, proxy):
        """Whether the tensor an input proxy stands for is a leaf of autograd (argument tensors are guarded on it);
        None for proxies that are not inputs."""
        value = self.real_value(proxy)
        if not isinstance(value, torch.Tensor):
            return None
        inp = next(i for i in self.inputs if i.proxy is proxy)
        if self.is_argument_input(inp) and all(g.program is not _is_leaf or g.inputs != (proxy.name,)
                                               for g in self.guards.data):
            self.guards.data.append(DataGuard(_is_leaf, (proxy.name,), value.is_leaf, f"{proxy.name}.is_leaf",
                                              on_values=False))
        return value.is_leaf

    def input_attribute(self, proxy, name: str, default):
        """`x.grad` (and other autograd attributes) of an input: read from the tensor it stands for and reported as
        a value read from that input (a tensor becomes an input, None or a flag a guard); `default` for proxies that
        are not inputs (tensors the function computed)."""
        value = self.real_value(proxy)
        if not isinstance(value, torch.Tensor):
            return default
        inp = next(i for i in self.inputs if i.proxy is proxy)
        return self.on_external_value(getattr(value, name), Attr(inp.provenance, name))

    def real_value(self, proxy):
        """The real value an input proxy was traced with (None for proxies that are not inputs)."""
        for i, v in zip(self.inputs, self._values):
            if i.proxy is proxy:
                return v
        return None

    @staticmethod
    def is_argument_input(traced_input) -> bool:
        return type(traced_input.provenance.root()) in (Arg, Kwarg)

    def _size_symbol(self, size: int) -> IntegerProxy:
        with tracectx(self.trace):
            p = IntegerProxy(size)
        p.lower = 2  # the prologue checks it (sizes 0 and 1 are specialised)
        arith.declare_lower(p.name, p.lower)
        return p

    def _number_input(self, value, provenance):
        p = self._numbers.get(provenance)
        if p is None:
            with tracectx(self.trace):
                p = IntegerProxy(value) if type(value) is int else FloatProxy(value)
            if type(value) is int:
                arith.declare_int(p.name)  # (the prologue checks its type: the bounds analysis reads it as an int)
            self._numbers[provenance] = p
            self.inputs.append(TracedInput(p, provenance))
            self._values.append(value)
        return p

    def type_hook(self, obj):
        """The class eager's object has: torch.Tensor or nn.Parameter for a tensor proxy, int/float/bool for a
        symbolic number, range and list for the stand-ins of jitcore/ir/ranges.py."""
        if isinstance(obj, TensorProxy):
            return torch.nn.Parameter if id(obj) in self._params else torch.Tensor
        if isinstance(obj, NumberProxy):
            return type(obj.value)
        if type(obj) is Address:  # `t.data_ptr()`: an int in eager
            return int
        if type(obj) is NdarrayProxy:  # an array made from a tensor: numpy.ndarray, or its numpy scalar type
            return obj.eager_type
        t = ranges.stands_for(obj)
        return t if t is not type(obj) else NotImplemented

    def isinstance_hook(self, obj, cls):
        if type(obj) is NdarrayProxy:
            return isinstance(obj.eager_type, type) and issubclass(obj.eager_type, cls)
        self._abc_read(cls)
        if isinstance(obj, TensorProxy):
            classes = cls if isinstance(cls, tuple) else (cls,)
            for c in classes:
                if c is torch.Tensor or (c is torch.nn.Parameter and id(obj) in self._params):
                    return True
                if isinstance(c, abc.ABCMeta):  # (an ABC torch.Tensor was registered with answers as eager's does)
                    if issubclass(torch.nn.Parameter if id(obj) in self._params else torch.Tensor, c):
                        return True
                elif isinstance(c, type) and issubclass(TensorProxy, c):
                    return True
            return False
        if isinstance(obj, NumberProxy):
            return isinstance(obj.value, cls)
        if type(obj) is Address:
            return isinstance(0, cls)
        if type(obj) is SymbolicSize:  # a shape with symbolic entries is a torch.Size to the program
            return isinstance(standins.A_SIZE, cls)
        return NotImplemented

    def issubclass_hook(self, cls, classinfo):
        self._abc_read(classinfo)
        return NotImplemented

    def _abc_read(self, classinfo):
        """isinstance/issubclass against an ABC: its answer depends on what was registered with it (`MyABC.register(C)`
        after the first call), which abc's cache token counts: the prologue checks the token (Guards.flags)."""
        classes = classinfo if type(classinfo) is tuple else (classinfo,)
        if any(isinstance(c, abc.ABCMeta) or type(c) is tuple for c in classes):
            self.guards.flags.setdefault((abc.get_cache_token, (), ()), abc.get_cache_token())

    def finish_guards(self) -> Guards:
        """Length guards for every external container an item was loaded from (iteration or indexing); a dict's
        guard is its keys in order (iterating it, its values or items follows insertion order)."""
        g = self.guards
        token = (abc.get_cache_token, (), ())
        if token in g.flags:  # the registry as the trace leaves it: a registration while tracing (a lazy import of
            g.flags[token] = abc.get_cache_token()  # torch._dynamo, `Base.register(C)` in the function) counts
        # a container's truthiness or length decides code too (`if self._forward_hooks:`): guard every one seen, and
        # its type (`isinstance(xs, list)`, `type(d) is dict`: a tuple or an OrderedDict of the same length differs)
        for prov, value in self._containers.items():
            g.lengths.setdefault(prov, _extent(value))
            g.container_types.setdefault(prov, type(value))
        provs = [i.provenance for i in self.inputs] + list(g.values) + list(g.objects) + list(g.types)
        provs += list(self._containers)
        for prov in provs:
            while prov is not None:
                parent = getattr(prov, "parent", None)
                if type(prov) is Item and parent is not None:
                    container = parent.parent if type(parent) is DictView else parent
                    value = self._containers.get(container)
                    if value is not None:  # iteration and indexing look alike here: guard both
                        g.lengths.setdefault(container, _extent(value))
                prov = parent
        return g


def _extent(container):
    """What a container's guard checks: its length, or for a dict its keys in order (a dict passed with the same keys
    in another order iterates differently: `torch.stack(list(d.values()))`)."""
    return tuple(container) if isinstance(container, dict) else len(container)


def _is_leaf(t) -> bool:
    return t.is_leaf


def _is_inference(t) -> bool:
    return t.is_inference()


_BITS = ("is_conj", "is_neg")  # a tensor's lazy conjugate and negation bits (Guards.bits)
_BIT_READERS = frozenset({torch.is_conj, torch.is_neg, torch.Tensor.is_conj, torch.Tensor.is_neg})


# methods of a list, tuple or dict that read it whole, natively (`shape.copy()`, `dims.index(2)`)
_READS_WHOLE = frozenset({"copy", "index", "count", "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                          "__ge__", "__add__", "__mul__", "__rmul__", "__hash__", "__repr__", "__str__", "values",
                          "items"})


def _stable_identities(guards, roots):
    """Objects whose provenance gives a new object on every fetch (a property, a custom __getattribute__ making
    views) cannot be guarded by identity: they are guarded by type instead."""
    for prov, obj in list(guards.objects.items()):
        try:
            again = prov.load(roots)
        except Exception:
            continue
        if again is not obj:
            del guards.objects[prov]
            guards.types.setdefault(prov, type(obj))


def _native_iterator(t) -> bool:
    """An iterator whose state is not Python attributes (a generator, list_iterator, zip, map, itertools.count...).
    Files are not: they iterate over their lines, but code reads them to write to them (logging's handlers read
    sys.stderr, print(..., file=f))."""
    nxt = getattr(t, "__next__", None)
    return nxt is not None and not isinstance(nxt, types.FunctionType) and not t.__module__.startswith("jitcore") \
        and not issubclass(t, io.IOBase)


def _refetchable(prov) -> bool:
    """False for a value found in a closure cell of a function that has no provenance (e.g. the function a
    decorator wrapped, reached through a class): the prologue could not fetch it again to check it."""
    while prov is not None:
        if type(prov) is Closure and prov.parent is None:
            return False
        prov = getattr(prov, "parent", None)
    return True


def _refuse_unmodelled(t: torch.Tensor):
    """A proxy stands for a dense strided tensor (its is_sparse, layout, ... answer so): other inputs are refused."""
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        raise UnsupportedError("tensor input", "an uninitialized parameter or buffer (a lazy module before its first "
                               "call)", hint="call the module once eagerly (it then becomes the ordinary module), "
                                             "then jit it")
    kind = "nested" if t.is_nested else "quantized" if t.is_quantized else None if t.layout is torch.strided else \
        str(t.layout).removeprefix("torch.")
    if kind is None and any(n is not None for n in getattr(t, "names", ())):  # (named tensors: torch 2.10-2.11)
        kind = "named"
    if kind is not None:
        raise UnsupportedError("tensor input", f"a {kind} tensor: jitcore traces dense, strided tensors",
                               hint="convert it first (to_dense(), dequantize()), or run this call eagerly")


def _private_helper(fn, mod: str) -> bool:
    """A private helper of torch.nn.functional that never hands itself to __torch_function__ (F._canonical_mask,
    F._none_or_dtype, called by modules): run natively it would see proxies as non-tensors, so it is interpreted.
    So is F.multi_head_attention_forward, Python over ops jitcore has (its has_torch_function check answers as in
    eager: jitcore/ops/torch_misc.py), so symbolic sizes and fusion reach inside it."""
    if fn is _MHA_FORWARD:
        return True
    code = getattr(fn, "__code__", None)
    return mod == "torch.nn.functional" and fn.__name__.startswith("_") and code is not None and \
        not any(n.startswith("has_torch_function") for n in code.co_names)


_MHA_FORWARD = torch.nn.functional.multi_head_attention_forward


def _by_value_or_identity(x) -> bool:
    """A set's item that compares as the set's copy holds it: a scalar, or an object that hashes and compares by
    identity (its class defines neither __eq__ nor __hash__)."""
    t = type(x)
    return isinstance(x, GUARDED_SCALARS) or (t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__)


def _scalar_tuple(t) -> bool:
    return all(isinstance(x, GUARDED_SCALARS) for x in t)


def trace_function(fn, args, kwargs, symbolic: bool = False) -> TraceResult:
    """Interpret fn(*args, **kwargs) and return its computation trace and what a call must supply and check.

    symbolic: cache="symbolic values" (predicates go to the active jitcore.ir.arith.recording sink)."""
    trace = Trace("computation")
    ctx = JitContext(trace, symbolic)
    with Timer() as t:
        found = JitServices(ctx, Layouts(ctx))  # what the IR and the ops ask while recording (jitcore/ir/services.py)
        with tracectx(trace, found), module_state.suspended():
            result = interpret(fn, args, kwargs, ctx)
            ctx.context_vars.check_restored()
            ranges.pin_live(trace)  # list(range(n)) still alive may escape: its values are this call's
        ndarrays.refuse_grad_aliased_writes(trace)
        trace.args = [i.proxy for i in ctx.inputs]
        made = ctx.inference_tensors
        # inputs that are inference tensors (guarded): rematerialization never saves one (autograd refuses it)
        trace.inference_inputs = frozenset(n for n, made_here in made.items() if made_here is False)
        rt = ctx._runtime
        trace.entered_code = list(rt.entered) if rt is not None else []  # (jitcore/packages.py checks them)
        trace.meta_results = list(found.layouts.used)  # (a package carries them: jitcore/frontend/layouts.py)
        output = arrays.given_arrays(result.output, ctx._arrays)  # an array argument returned: the caller's own
        output = ndarrays.from_numpy_outputs(output)  # torch.from_numpy(a) returned: a storage of its own, as eager's
        register_containers(output)  # ModelOutput and other dataclass outputs flatten and rebuild
        escapes = Escapes(result.external, ctx.pinned)  # objects handed back: fetched again or built afresh per call
        leaves, spec = tree_flatten(escapes.given_containers(output))
        leaves = [x if isinstance(x, GUARDED_SCALARS) or (isinstance(x, Proxy) and not escapes.is_local(x))
                  else escapes.output(i, x) for i, x in enumerate(leaves)]
        if made:  # tensors eager made under torch.inference_mode() are handed back as inference tensors
            with tracectx(trace):
                leaves = [prims.inference_tensor(x) if isinstance(x, TensorProxy) and made.get(x.name) else x
                          for x in leaves]
        arrays.refuse_stored_arrays(result.side_effects)  # (an array made from a tensor kept outside: not modelled)
        stored = effect_proxies(result.side_effects, escapes)
        trace.output = tuple(leaves) + tuple(stored) + tuple(escapes.proxies)
        if symbolic or trace.run_time_sizes:
            define_sizes(trace)
    if found.default_device is not None:  # a tensor made on the default device (torch_creation._device)
        ctx.guards.flags.setdefault((torch.get_default_device, (), ()), found.default_device)
    refuse_reads_after_change(ctx, trace)
    ctx.finish_guards()
    _stable_identities(ctx.guards, Roots(tuple(args), dict(kwargs), fn))
    trace.set_provenance("Interpretation (jitcore bytecode interpreter)", t.seconds)
    pairs = list(zip(ctx.inputs, ctx._values))
    strides = {i.proxy.name: tuple(t.stride()) for i, t in pairs if isinstance(t, torch.Tensor)}
    storages = [_storage_address(t) if isinstance(t, torch.Tensor) else None for _, t in pairs]
    apart = frozenset(i.proxy.name for i, t in pairs if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf
                      and compat.leaf_grad_dtype(t) != t.dtype)
    return TraceResult(trace, ctx.inputs, ctx.guards, result.side_effects, spec, len(leaves), strides, storages,
                       ctx.aliases, escapes, apart, input_metadata_changes(ctx))


def prune_sizes(trace: Trace) -> Trace:
    """Drop the size unpacks (`prims.shape`, as claimed by an executor) whose sizes no line that runs reads: after
    the claim pass, decompositions that were not taken are comments."""
    def is_shape(b):
        return b.sym is prims.shape or (len(b.subsymbols) == 1 and b.subsymbols[0].sym is prims.shape)

    used = {x.name for x in tree_flatten(trace.output)[0] if isinstance(x, Proxy)}
    used.update(x.name for b in trace.bound_symbols if not is_shape(b) for x in b.flat_proxy_args())
    trace.bound_symbols[:] = [b for b in trace.bound_symbols
                              if not is_shape(b) or any(o.name in used for o in b.flat_proxy_outs())]
    return trace
