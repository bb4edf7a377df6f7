"""Ops: opaque ops. A torch callable with no decomposition still runs: its output metadata comes from calling it
on meta tensors (or fake tensors when it has no meta kernel), the torch executor calls it directly, and it
prints as one line naming the torch function. Registered as the last "opaque" fallback for Tensor methods
(proxies.METHOD_FALLBACKS) and torch callables (torch_map.FUNCTION_FALLBACKS) with no op.
"""
from __future__ import annotations

import copy
import itertools
import re
import typing

import torch

from jitcore import compat, logs
from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.ir import arith, proxies
from jitcore.ir.pytree import tree_flatten, tree_map, tree_unflatten
from jitcore.ir.symbol import Symbol, Tag
from jitcore.ir.trace import get_tracectx, services
from jitcore.ops import prims_misc as pm
from jitcore.ops.opaque_symbolic import Untranslated, shape_rule, symbolic_outputs
from jitcore.ops.rng_generators import GeneratorProxy
from jitcore.ops.torch_map import FUNCTION_FALLBACKS, torch_path

_OPAQUE: dict = {}  # torch callable -> Symbol
OPAQUE_OPS: dict[str, Symbol] = {}  # id -> Symbol, for examine() and the registry


def _public_name(fn) -> tuple[str, str, object]:
    """(module path, name, namespace) under which the opaque op prints and runs."""

    path = torch_path(fn)
    if path is not None:
        module, _, name = path.rpartition(".")
        return module, name, torch
    name = re.sub(r"\W", "_", getattr(fn, "__name__", type(fn).__name__))
    return "", f"_opaque_{name}", None


def _to_meta(x, qualname="an opaque torch op"):
    if isinstance(x, proxies.TensorProxy):  # a symbolic size is pinned here (a predicate: one compile per size):
        return torch.empty(tuple(int(s) for s in x.shape), dtype=x.dtype, device="meta")  # the symbolic route
        # (opaque_symbolic.py) did not translate this op's sizes
    if isinstance(x, proxies.NumberProxy):
        return x.value
    if isinstance(x, GeneratorProxy):  # (outputs' metadata need no draw: the program draws from it when it runs)
        return None
    return x


def _first_device(flat_args):
    for a in flat_args:
        if isinstance(a, proxies.TensorProxy):
            return a.device
    return torch.device("cpu")


# torch callable -> meta over proxies, for opaque ops whose meta-tensor run is slow (their meta kernels are
# Python decompositions that import torch._dynamo on first use: seconds of a first call)
KNOWN_METAS: dict = {}


# Python functions that only call pure aten operators (fixed output shapes, no writes into their inputs, no random
# draws): a graph compiler may trace them to aten and compile them with their neighbours (executors/inductorex.py)
PURE_WRAPPERS: set = set()


def is_pure_wrapper(fn) -> bool:
    """Whether fn is in PURE_WRAPPERS."""
    try:
        return fn in PURE_WRAPPERS
    except TypeError:  # (an unhashable callable)
        return False


def register_opaque_meta(fn, meta, *, pure: bool = False):
    """Give the opaque op of `fn` a meta over proxies instead of a run on meta tensors; `pure`: fn only calls pure
    aten operators (PURE_WRAPPERS)."""
    KNOWN_METAS[fn] = meta
    if pure:
        PURE_WRAPPERS.add(fn)
    sym = _OPAQUE.get(fn)
    if sym is not None:
        sym.meta = meta


def _make_meta(fn, qualname):
    known = KNOWN_METAS.get(fn)
    if known is not None:
        return known

    def meta(*args, **kwargs):
        flat, spec = tree_flatten((args, kwargs))
        if any(isinstance(a, proxies.TensorProxy) and not all(type(s) is int for s in a.shape) for a in flat):
            ruled = shape_rule(fn, args, kwargs)  # symbolic sizes: kept symbolic by a rule, or where torch's fake
            if ruled is not None:  # tensors say how the outputs' follow
                return ruled
            try:
                return symbolic_outputs(fn, flat, spec, proxies_require_grad(flat))
            except Untranslated:
                pass
        try:
            margs, mkwargs = tree_unflatten(spec, [_to_meta(a, qualname) for a in flat])
            if not any(isinstance(a, proxies.TensorProxy) for a in flat) and draws_random(fn):
                mkwargs = {**mkwargs, "device": "meta"}  # torch.randperm(n): shapes without a real draw now
            with torch.no_grad():
                out = fn(*margs, **mkwargs)
        except Exception as e:  # no meta kernel (or symbolic sizes): learn the outputs from a real run
            out = _from_real_run(fn, qualname, flat, spec, e)
        device = kwargs.get("device") or _first_device(flat)
        rg = proxies_require_grad(flat)

        def to_proxy(o):
            if isinstance(o, torch.Tensor):
                dev = device if o.device.type == "meta" else o.device
                return proxies.TensorProxy(o.shape, o.dtype, dev, rg and (o.dtype.is_floating_point or o.is_complex()))
            return o

        return tree_map(to_proxy, out)

    return meta


class _ValueDependentShapes(compat.TorchDispatchMode):
    """Notes whether an aten op whose output sizes depend on its inputs' values ran (nonzero, unique, ...)."""

    def __init__(self):
        super().__init__()
        self.found = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.found is None and torch.Tag.dynamic_output_shape in getattr(func, "tags", ()):
            self.found = func
        return func(*args, **(kwargs or {}))


class PythonResult(Exception):
    """The op hands back a Python number (torch.equal, torch.allclose): recorded as a tensor of it and guarded."""

    def __init__(self, value):
        super().__init__(repr(value))
        self.value = value


def _from_real_run(fn, qualname, flat, spec, error):
    """An op with no meta kernel: its outputs' metadata from running it on this call's values (computed from clones
    of the real inputs; the RNG state restored). Sizes this depends on are pinned (symbolic sizes record their
    predicates); outputs whose sizes depend on values, and calls with no real inputs at hand, are refused."""
    found = services()
    refuse = UnsupportedError("torch callable", f"{qualname} could not be run on meta tensors to infer its outputs, "
                              f"nor on this call's values: {error}",
                              hint="add an op for it in jitcore/ops (a decomposition or a prim with a meta)")
    if not found.records_user_code or may_have_effects(fn) or draws_random(fn):
        raise refuse from error
    tensors = [a for a in flat if isinstance(a, proxies.TensorProxy)]
    for t in tensors:  # the outputs' sizes are learnt for these sizes only
        for size in t.shape:
            if not isinstance(size, int):
                arith.concretize(size)
    values = found.real_values(tensors)
    if values is None or any(v.layout != torch.strided for v in values):  # sparse tensors are not traced
        raise refuse from error
    real = iter(values)
    rargs, rkwargs = tree_unflatten(spec, [next(real) if isinstance(a, proxies.TensorProxy) else
                                           arith.concretize(a) if isinstance(a, proxies.NumberProxy) else a
                                           for a in flat])
    state = torch.get_rng_state()
    try:
        with _ValueDependentShapes() as watch, torch.no_grad():
            out = fn(*rargs, **rkwargs)
    except Exception as e:
        raise refuse from e
    finally:
        torch.set_rng_state(state)
    leaves = tree_flatten(out)[0]
    if any(isinstance(o, torch.Tensor) and o.layout != torch.strided for o in leaves):
        raise refuse from error
    if any(isinstance(o, (bool, int, float, complex)) for o in leaves):
        if len(leaves) == 1:
            raise PythonResult(leaves[0])
        raise refuse from error
    if watch.found is not None:  # its output sizes depend on values: sizes known only at run time where torch's
        try:  # fake tensors say which they are; else guarded, the op recomputed in the prologue
            return symbolic_outputs(fn, flat, spec, proxies_require_grad(flat), real=out)
        except Untranslated:
            pass

        def sizes(*values):
            return _output_sizes(fn, spec, flat, values)

        guarded = found.real_values(tensors, guard=(sizes, f"the output sizes of {qualname}"))
        if guarded != _output_sizes(fn, spec, flat, values):
            raise DataDependentError(f"{qualname}: its output sizes differ between runs on the same values")
    return out


def _output_sizes(fn, spec, flat, values) -> tuple:
    real = iter(values)
    args, kwargs = tree_unflatten(spec, [next(real) if isinstance(a, proxies.TensorProxy) else
                                         a.value if isinstance(a, proxies.NumberProxy) else a for a in flat])
    with torch.no_grad():
        out = fn(*args, **kwargs)
    return tuple(tuple(o.shape) for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor))


class ScalarAsTensor:
    """torch callable `stands_for`, whose result is a Python number, handing back a 0-dim tensor of it: the trace
    records this, and Python gets the number through the data guards."""

    DTYPES: typing.ClassVar[dict] = {bool: torch.bool, int: torch.int64, float: torch.float64,
                                     complex: torch.complex128}

    def __init__(self, fn, python_type: type):
        self.stands_for, self.python_type = fn, python_type
        self.__name__ = f"{getattr(fn, '__name__', 'op')}_as_tensor"
        KNOWN_METAS.setdefault(self, self._meta)

    def _meta(self, *args, **kwargs):
        device = _first_device(tree_flatten((args, kwargs))[0])
        return proxies.TensorProxy((), self.DTYPES[self.python_type], device)

    def __call__(self, *args, **kwargs):
        device = next((a.device for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)), None)
        return torch.tensor(self.stands_for(*args, **kwargs), dtype=self.DTYPES[self.python_type], device=device)

    def _key(self):
        return self.stands_for, self.python_type

    def __eq__(self, other):
        return isinstance(other, ScalarAsTensor) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"ScalarAsTensor({getattr(self.stands_for, '__name__', self.stands_for)})"


def proxies_require_grad(flat) -> bool:
    return torch.is_grad_enabled() and any(isinstance(a, proxies.TensorProxy) and a.requires_grad for a in flat)


def _python_draws(fn) -> bool:
    """A torch function written in Python whose parameters name a draw (F.multi_head_attention_forward's
    dropout_p, F.fractional_max_pool2d's _random_samples): it has no schema to ask, so it is taken to draw."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return any("dropout" in p or "random" in p for p in params)


def draws_random(fn) -> bool:
    """Whether torch callable fn draws random numbers: its aten operator (fn itself when it is an overload, else
    the operator named like it) is tagged nondeterministic_seeded. Such an op is tagged RANDOM: passes never merge,
    drop or reorder it, and its backward replays its draws."""
    seeded = torch.Tag.nondeterministic_seeded
    fn = getattr(fn, "stands_for", fn)  # a wrapper (the functional form of an in-place method) names what it runs
    if isinstance(fn, compat.OpOverload):
        return seeded in fn.tags
    if _python_draws(fn):
        return True
    name = getattr(fn, "__name__", "")
    try:
        packet = getattr(torch.ops.aten, name) if name.isidentifier() else None
    except (AttributeError, RuntimeError):
        return False
    if not isinstance(packet, compat.OpOverloadPacket):
        return False
    return any(seeded in getattr(packet, o).tags for o in packet.overloads())


# torch callables with no aten schema and these names (or a trailing "_", torch's in-place convention) may have effects
_EFFECTFUL_NAMES = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential", "print",
                    "sdpa", "attention")


def aten_effects(fn) -> bool | None:
    """For a torch operator overload (torch.ops.aten.x.default): whether it mutates or draws random numbers;
    None for other callables (their schema is unknown)."""
    if not isinstance(fn, compat.OpOverload):
        return None
    return fn._schema.is_mutable or torch.Tag.nondeterministic_seeded in fn.tags


def may_have_effects(fn) -> bool:
    """Whether an opaque call of fn may write memory or draw random numbers: its schema says so for an aten
    overload; any other callable is judged by its name, conservatively (it is then tagged EFFECTS)."""
    schema_says = aten_effects(fn)
    if schema_says is not None:
        return schema_says
    name = getattr(fn, "__name__", "") or ""
    return (name.endswith("_") and not name.endswith("__")) or any(w in name for w in _EFFECTFUL_NAMES)


class _Opaque(Symbol):
    """An opaque op. Called inside torch.autocast (enabled for its tensors' device, outside any other op, as torch's
    dispatcher applies it), it records the op run inside that autocast instead (AutocastCall): the torch kernels
    it calls cast their inputs as in eager, which the trace cannot see from outside."""

    def __call__(self, *args, **kwargs):
        trace = get_tracectx()
        if trace is not None and len(trace._scopes) == 1 and not isinstance(self.torch_fn, AutocastCall):
            dev = _device_of((args, kwargs))
            if dev.type in ("cpu", "cuda") and torch.is_autocast_enabled(dev.type):
                call = AutocastCall(self.torch_fn, dev.type, torch.get_autocast_dtype(dev.type))
                return opaque_symbol(call)(*args, **kwargs)
        if trace is not None and Tag.RANDOM in self.tags:
            args, kwargs = tree_map(_in_eager_order, (args, kwargs))
        try:
            return super().__call__(*args, **kwargs)
        except PythonResult as r:  # torch.equal(a, b): a tensor of the result, read through the data guards
            kind = type(r.value) if type(r.value) in ScalarAsTensor.DTYPES else float
            t = opaque_symbol(ScalarAsTensor(self.torch_fn, kind))(*args, **kwargs)
            return t._concrete("item", f"the Python value {self.name}() returns")


def _in_eager_order(a):
    """A tensor argument of a random opaque op, laid out in memory as eager's value of it is (prims.laid_out): the
    op's draws fill tensors in their input's memory order (rand_like inside a user's autograd.Function), and the
    value jitcore computes at run time may have other strides (a functional value after a write, a fused region's
    output). The order is eager's torch.empty_like's (its layout guarded); a layout not known is left as it is."""
    if not isinstance(a, proxies.TensorProxy) or a.ndim < 2:
        return a
    meta = a.eager_layout()
    if meta is None:
        return a
    return pm.laid_out(a, pm.stride_order(torch.empty_like(meta)))


class AutocastCall:
    """torch callable `stands_for` run inside torch.autocast(device_type, dtype) (its output metadata from fake
    tensors under the same autocast: meta tensors have no autocast)."""

    def __init__(self, fn, device_type: str, dtype: torch.dtype):
        self.stands_for, self.device_type, self.dtype = fn, device_type, dtype
        self.__name__ = f"{getattr(fn, '__name__', 'op')}_autocast_{str(dtype).removeprefix('torch.')}"
        KNOWN_METAS.setdefault(self, _fake_meta(self))

    def __call__(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.stands_for(*args, **kwargs)

    def _key(self):
        return self.stands_for, self.device_type, self.dtype

    def __eq__(self, other):
        return isinstance(other, AutocastCall) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"AutocastCall({getattr(self.stands_for, '__name__', self.stands_for)}, {self.device_type!r}, " \
               f"{self.dtype})"


def _fake_meta(fn):
    """A meta over proxies from running fn on fake tensors of the proxies' devices."""
    def meta(*args, **kwargs):
        flat, spec = tree_flatten((args, kwargs))
        try:
            with compat.fake_tensor_mode():
                fakes = [torch.empty(tuple(_to_meta(a).shape), dtype=a.dtype, device=a.device)
                         if isinstance(a, proxies.TensorProxy) else _to_meta(a) for a in flat]
                margs, mkwargs = tree_unflatten(spec, fakes)
                with torch.no_grad():
                    out = fn(*margs, **mkwargs)
        except Exception as e:  # (it reads real tensors of its own, a module's parameters: a real run tells, except
            name = getattr(fn, "__name__", "op")  # for a user's Function, whose forward may have effects)
            if user_function_op(getattr(fn, "stands_for", fn)) is not None:
                raise UnsupportedError("torch callable", f"{name} could not be run on fake tensors to infer its "
                                       f"outputs: {str(e).splitlines()[0]}", hint="pass the tensors the Function's "
                                       "forward reads (a module's parameters) to apply() as arguments") from e
            out = _from_real_run(fn, name, flat, spec, e)
        rg = proxies_require_grad(flat)
        return tree_map(lambda o: proxies.TensorProxy(o.shape, o.dtype, o.device, rg and (
            o.dtype.is_floating_point or o.is_complex())) if isinstance(o, torch.Tensor) else o, out)

    return meta


def opaque_symbol(fn) -> Symbol:
    """The opaque op standing for torch callable `fn` (made once per callable)."""
    try:
        sym = _OPAQUE.get(fn)
    except TypeError:
        sym = None
    if sym is not None:
        return sym
    module, name, namespace = _public_name(fn)
    qualname = f"{module}.{name}" if module else name
    if is_pure_wrapper(fn):  # (its name or parameters may look like a draw's: it is known not to be one)
        tags = (Tag.OPAQUE,)
    else:
        tags = (Tag.OPAQUE,) + ((Tag.RANDOM,) if draws_random(fn) else ()) + (
            (Tag.EFFECTS,) if may_have_effects(fn) else ())
    sym = _Opaque(f"opaque.{qualname}", name, meta=_make_meta(fn, qualname), tags=tags, module=module,
                 namespace=namespace, call_ctx=None if module else {name: fn}, torch_fn=fn, kernel=fn)
    OPAQUE_OPS[sym.id] = sym
    if logs.enabled("fallbacks"):  # once per torch callable: the symbol is made once
        logs.log("fallbacks", "%s has no jitcore op: it runs as an opaque torch call (called at %s)", qualname,
                 _user_line())
    try:
        _OPAQUE[fn] = sym
    except TypeError:
        pass
    return sym


def _user_line() -> str:
    """"file:line" of the user's line being traced (the interpreter's innermost user frame), else the call site."""
    frames = services().user_stack()
    if frames:
        code, inst = frames[-1]
        return f"{code.co_filename}:{getattr(inst, 'lineno', '?')}"
    return logs.call_site()


def _opaque_method(name: str):
    method = getattr(torch.Tensor, name)

    def call(self, *args, **kwargs):
        return opaque_symbol(method)(self, *args, **kwargs)

    return call


proxies.METHOD_FALLBACKS.register("opaque", _opaque_method)
FUNCTION_FALLBACKS.register("opaque", opaque_symbol)


# -- the backward of an opaque op: recompute it under torch.autograd at run time -----------------------------------
# Its output has one entry per positional argument of the op, then one for its keyword arguments when it has any
# (their values in order, as a list). An entry is the gradient of a tensor argument, a list mirroring a list, tuple or
# dict argument (a dict by its values) at any depth, or None where nothing in the argument gets a gradient: the
# weights torch.lstm receives as a list get theirs.
def _grad_layout(value, leaf):
    """`value` with every tensor replaced by leaf(tensor) and every list, tuple or dict by a list of its entries'
    layouts; None for a value holding no gradient."""
    if isinstance(value, dict):
        value = list(value.values())
    elif not isinstance(value, (list, tuple)):
        return leaf(value)
    items = [_grad_layout(v, leaf) for v in value]
    return items if any(i is not None for i in items) else None


def _grads_of(args, kwargs, leaf) -> list:
    out = [_grad_layout(a, leaf) for a in args]
    return (out + [_grad_layout(list(kwargs.values()), leaf)]) if kwargs else out


def _map_tensors(value, fn, cls=torch.Tensor):
    """`value` with fn applied to each tensor (instance of cls) in it, at any depth of its lists, tuples and dicts
    (types kept), in the order the arguments are written."""
    if isinstance(value, cls):
        return fn(value)
    t = type(value)
    if t is list:
        return [_map_tensors(v, fn, cls) for v in value]
    if t is dict:
        return {k: _map_tensors(v, fn, cls) for k, v in value.items()}
    if isinstance(value, dict):  # OrderedDict, defaultdict...: a copy of the same kind
        new = copy.copy(value)
        for k, v in value.items():
            new[k] = _map_tensors(v, fn, cls)
        return new
    if isinstance(value, tuple):
        items = [_map_tensors(v, fn, cls) for v in value]
        return t(*items) if hasattr(value, "_fields") else t(items)
    return value


def _differentiable(t) -> bool:
    return t.is_floating_point() or t.is_complex()


def _opaque_vjp_meta(fn, args, kwargs, grads, wrt=None):
    def leaf(a):
        return a.like(requires_grad=False) if isinstance(a, proxies.TensorProxy) and a.requires_grad else None

    return _grads_of(args, kwargs, leaf)


def opaque_vjp(fn, args, kwargs, grads, wrt=None):
    """Recompute fn(*args, **kwargs) with autograd and pull `grads` (one per flat output) back to the tensors it
    received, at any depth of its arguments (laid out as described above): those whose positions among the tensors
    are in `wrt` (as traced: the ones that required grad), or every floating one when wrt is None."""
    leaves, index = [], itertools.count()

    def track(t):
        i = next(index)
        if not _differentiable(t) or (wrt is not None and i not in wrt):
            return t
        leaves.append(t.detach().requires_grad_(True))
        return leaves[-1]

    with torch.enable_grad():
        args, kwargs = _map_tensors(args, track), _map_tensors(kwargs, track)
        outs = tree_flatten(fn(*args, **kwargs))[0]
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True) \
            if pairs and leaves else [None] * len(leaves)
    by_id = {id(t): g if g is not None else torch.zeros_like(t) for t, g in zip(leaves, got)}
    return _grads_of(args, kwargs, lambda a: by_id.get(id(a)) if isinstance(a, torch.Tensor) else None)


class _OpaqueVjp(Symbol):
    """The opaque backward op: recorded over proxies, it names the tensors that required grad (`wrt`), so the
    recomputation asks torch for no other gradient (buffers such as batch norm's running stats refuse one)."""

    def __call__(self, fn, args, kwargs, grads, wrt=None):
        if wrt is None:
            found = []
            _map_tensors((args, kwargs), found.append, proxies.TensorProxy)
            if found:
                wrt = tuple(i for i, t in enumerate(found) if t.requires_grad)
        return super().__call__(fn, args, kwargs, grads, **({} if wrt is None else {"wrt": wrt}))


opaque_vjp_sym = _OpaqueVjp("autodiff.opaque_vjp", "opaque_vjp", meta=_opaque_vjp_meta, module="",
                            call_ctx={"opaque_vjp": opaque_vjp}, tags=(Tag.OPAQUE, Tag.NON_DIFFERENTIABLE),
                            kernel=opaque_vjp)


# -- metas of the aten kernels autodiff rules call directly ----------------------------------------------------------
def _like(t, dtype=None, shape=None):
    return None if t is None else t.like(shape=shape, dtype=dtype, requires_grad=False)


def _stats_shape(x, normalized_shape):
    k = len(normalized_shape)
    return tuple(x.shape[: x.ndim - k]) + (1,) * k


def _native_layer_norm_meta(x, normalized_shape, weight, bias, eps):
    rg = proxies_require_grad([x, weight, bias])
    stats = _stats_shape(x, normalized_shape)
    return x.like(requires_grad=rg), _like(x, shape=stats), _like(x, shape=stats)


def _native_layer_norm_backward_meta(g, x, normalized_shape, mean, rstd, weight, bias, mask):
    return (_like(x) if mask[0] else None, _like(weight) if mask[1] and weight is not None else None,
            _like(bias) if mask[2] and bias is not None else None)


def _fused_rms_norm_meta(x, normalized_shape, weight, eps):
    rg = proxies_require_grad([x, weight])
    return x.like(requires_grad=rg), _like(x, dtype=torch.float32, shape=_stats_shape(x, normalized_shape))


def _like_grad(g, *args, **kwargs):
    return _like(g)


def _nll_loss_backward_meta(g, log_probs, *args):
    return _like(log_probs)


def _embedding_dense_backward_meta(g, indices, num_weights, padding_idx, scale_grad_by_freq):
    return _like(g, shape=(num_weights, g.shape[-1]))


def _unfold_backward_meta(g, input_sizes, dim, size, step):
    return _like(g, shape=tuple(input_sizes))


def _convolution_backward_meta(g, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
                               mask):
    """Gradients shaped like the input and the weight, and the bias's sizes; None where mask leaves one out (symbolic
    batch and image sizes pass through, as the input's)."""
    return (_like(x) if mask[0] else None, _like(w) if mask[1] else None,
            _like(g, shape=tuple(bias_sizes)) if mask[2] and bias_sizes is not None else None)


def _grouped_mm_meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm's sizes (its meta kernel takes bf16 only on CPU; eager takes float32 too): (m, n) for a 2-D
    by 3-D product by groups of rows, (g, m, n) for 3-D by 3-D and for 2-D by 2-D groups along k."""
    a, b = mat_a.shape, mat_b.shape
    if mat_a.ndim == 2 and mat_b.ndim == 3:
        shape = (a[0], b[2])
    elif mat_a.ndim == 3 and mat_b.ndim == 3:
        shape = (a[0], a[1], b[2])
    elif mat_a.ndim == 2 and mat_b.ndim == 2 and offs is not None:
        shape = (offs.shape[0], a[0], b[1])
    elif mat_a.ndim == 3 and mat_b.ndim == 2:
        shape = (a[1], b[1])
    else:
        raise UnsupportedError("torch._grouped_mm", f"inputs of {mat_a.ndim} and {mat_b.ndim} dims")
    rg = proxies_require_grad([mat_a, mat_b] + ([bias] if bias is not None else []))
    return proxies.TensorProxy(shape, out_dtype or mat_a.dtype, mat_a.device, rg)


_aten = torch.ops.aten
for _fn, _meta in (
    (torch._grouped_mm, _grouped_mm_meta),
    (_aten.native_layer_norm.default, _native_layer_norm_meta),
    (_aten.native_layer_norm_backward.default, _native_layer_norm_backward_meta),
    (_aten._fused_rms_norm.default, _fused_rms_norm_meta),
    (_aten.gelu_backward.default, _like_grad),
    (_aten.silu_backward.default, _like_grad),
    (_aten.tanh_backward.default, _like_grad),
    (_aten.sigmoid_backward.default, _like_grad),
    (_aten._softmax_backward_data.default, _like_grad),
    (_aten._log_softmax_backward_data.default, _like_grad),
    (_aten.embedding_dense_backward.default, _embedding_dense_backward_meta),
    (_aten.nll_loss_backward.default, _nll_loss_backward_meta),
    (_aten.unfold_backward.default, _unfold_backward_meta),
    (_aten.convolution_backward.default, _convolution_backward_meta),
):
    register_opaque_meta(_fn, _meta)
del _fn, _meta


# -- a random opaque op under autodiff: its backward replays the forward's draws -----------------------------------
def _device_of(args) -> torch.device:
    return next((a.device for a in tree_flatten(args)[0] if isinstance(a, (torch.Tensor, proxies.TensorProxy))),
                torch.device("cpu"))


def _rng_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _with_rng_state_meta(fn, args, kwargs):
    out = opaque_symbol(fn).meta(*args, **kwargs)
    dev = _device_of(args)
    gen = kwargs.get("generator")
    n = gen.state_size if isinstance(gen, GeneratorProxy) else \
        _rng_state(dev).numel() if dev.type in ("cpu", "cuda") else 0
    state = proxies.TensorProxy((n,), torch.uint8, torch.device("cpu"))
    return (*out, state) if isinstance(out, (tuple, list)) else (out, state)


def _given_generator(kwargs):
    gen = kwargs.get("generator")
    return gen if isinstance(gen, torch.Generator) else None


def with_rng_state(fn, args, kwargs):
    """fn(*args, **kwargs)'s results followed by the state of the generator its draws start from (the generator= the
    user gave, else the device's default one)."""
    gen = _given_generator(kwargs)
    if gen is not None:
        state = gen.get_state()
        out = fn(*args, **kwargs)
        return (*out, state) if isinstance(out, (tuple, list)) else (out, state)
    dev = _device_of(args)
    if dev.type not in ("cpu", "cuda"):
        raise UnsupportedError("random op", f"the gradient of {getattr(fn, '__name__', fn)} on {dev} replays its "
                               "random draws, and only CPU and CUDA generator states can be saved",
                               hint="call it outside the jitted function, or on a CPU or CUDA tensor")
    state = _rng_state(dev)
    out = fn(*args, **kwargs)
    return (*out, state) if isinstance(out, (tuple, list)) else (out, state)


def opaque_vjp_replay(fn, args, kwargs, grads, state):
    """opaque_vjp with the generator set to `state` (the forward's draws again), the caller's state left as it was (a
    generator= the user gave: a copy of it at `state` draws instead)."""
    gen = _given_generator(kwargs)
    if gen is not None:
        replay = torch.Generator(gen.device)
        replay.set_state(state)
        return opaque_vjp(fn, args, {**kwargs, "generator": replay}, grads)
    dev = _device_of(args)
    cuda = dev.type == "cuda"
    with torch.random.fork_rng(devices=[dev] if cuda else []):
        if cuda:
            torch.cuda.set_rng_state(state, dev)
        else:
            torch.set_rng_state(state)
        return opaque_vjp(fn, args, kwargs, grads)


with_rng_state_sym = Symbol("autodiff.with_rng_state", "with_rng_state", meta=_with_rng_state_meta, module="",
                            call_ctx={"with_rng_state": with_rng_state}, tags=(Tag.OPAQUE, Tag.RANDOM),
                            kernel=with_rng_state)
opaque_vjp_replay_sym = Symbol("autodiff.opaque_vjp_replay", "opaque_vjp_replay",
                               meta=lambda fn, args, kwargs, grads, state: _opaque_vjp_meta(fn, args, kwargs, grads),
                               module="", call_ctx={"opaque_vjp_replay": opaque_vjp_replay},
                               tags=(Tag.OPAQUE, Tag.NON_DIFFERENTIABLE), kernel=opaque_vjp_replay)


# -- torch.autograd.Function subclasses written by the user -----------------------------------------------------------
_FUNCTIONS: dict = {}  # the user's torch.autograd.Function subclass -> its opaque op


FUNCTION_APPLY = compat.FUNCTION_APPLY  # what `MyFunction.apply(x)` calls, with the class first (None on torch 2.15)


def user_function_call(cls, *args, **kwargs):
    """`cls.apply(*args, **kwargs)` called in traced code (FUNCTION_APPLY's stand-in): the op of a user's Function
    (user_function_op), or, for torch's own Functions, apply run natively as before (their ops on proxies record
    themselves)."""
    sym = user_function_op(cls.apply)
    return sym(*args, **kwargs) if sym is not None else compat.call_apply(cls, *args, **kwargs)


def user_function_op(fn):
    """The op for `fn` when it is `Cls.apply` of a torch.autograd.Function subclass defined outside torch, else None.

    Such a call runs as eager runs it, at run time (torch's own Function machinery calls the user's forward with its
    ctx), and its backward recomputes it with autograd, which calls the user's backward: the gradient is the one the
    user wrote, not the derivative of the forward's ops (interpreting the forward, as for any Python code, silently
    differentiated those instead). Tagged RANDOM, so the recomputation replays the forward's draws (a dropout
    inside), and EFFECTS, so passes keep it where it is (a forward may write its inputs, ctx.mark_dirty)."""
    cls = compat.autograd_function_class(fn)
    if cls is None or cls.__module__.split(".")[0] == "torch":
        return None
    sym = _FUNCTIONS.get(cls)
    if sym is None:
        qualname = f"{cls.__module__}.{cls.__qualname__}"
        name = re.sub(r"\W", "_", cls.__qualname__) + "_apply"
        clashes = sum(1 for c in _FUNCTIONS if c.__qualname__ == cls.__qualname__)
        name = f"{name}{clashes}" if clashes else name  # (classes of one name made again: each its own op)
        sym = _Opaque(f"opaque.autograd_function.{qualname}" + (f".{clashes}" if clashes else ""), name,
                      meta=_function_meta(fn, qualname), tags=(Tag.OPAQUE, Tag.RANDOM, Tag.EFFECTS), module="",
                      namespace=None, call_ctx={name: fn}, torch_fn=fn, kernel=fn)
        OPAQUE_OPS[sym.id] = sym
        _FUNCTIONS[cls] = sym
    return sym


def _function_meta(fn, qualname):
    """The outputs of a user's Function: as any opaque op's, with requires_grad as torch's Function machinery sets it
    (an output the forward marked non-differentiable does not require grad), found by running it on meta tensors
    with grad enabled where the trace's is."""
    base = _make_meta(fn, qualname)

    def meta(*args, **kwargs):
        out = base(*args, **kwargs)
        flat, spec = tree_flatten((args, kwargs))
        if not proxies_require_grad(flat) or any(isinstance(a, proxies.TensorProxy) and
                                                 not all(type(s) is int for s in a.shape) for a in flat):
            return out
        try:
            def leaf(a):  # (not a leaf itself: a forward writing it in place runs as on a computed tensor)
                m = _to_meta(a, qualname)
                return m.requires_grad_(True).clone() if isinstance(a, proxies.TensorProxy) and a.requires_grad else m

            margs, mkwargs = tree_unflatten(spec, [leaf(a) for a in flat])
            with torch.enable_grad():
                outs = tree_flatten(fn(*margs, **mkwargs))[0]
            flags = [o.requires_grad for o in outs if isinstance(o, torch.Tensor)]
        except Exception:
            return out
        given = {id(m) for m in tree_flatten((margs, mkwargs))[0] if isinstance(m, torch.Tensor)}
        if any(id(o) in given for o in outs):
            raise UnsupportedError(
                "autograd.Function", f"{qualname} writes an input in place and returns it (ctx.mark_dirty): its "
                "gradient would be taken by running it again on the written value",
                hint="call it outside the jitted function, or have its forward return a new tensor")
        proxies_out = [o for o in tree_flatten(out)[0] if isinstance(o, proxies.TensorProxy)]
        if len(flags) != len(proxies_out):
            return out
        swap = {id(p): p.like(requires_grad=f) for p, f in zip(proxies_out, flags) if p.requires_grad != f}
        return tree_map(lambda o: swap.get(id(o), o), out) if swap else out

    return meta
