"""IR ops: Symbol (an op: id, name, meta or decomposition, tags) and BoundSymbol (one line of a trace).

Calling a Symbol while a trace is active records it: a prim runs its meta function to make output proxies; a
composite runs its Python body over other symbols, and what the body records becomes its subsymbols. Called
with no active trace (a printed trace run as a program), prims run their eager kernel and composites run
their body.
"""
from __future__ import annotations

import contextvars
import enum
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from jitcore.compat import is_any_autocast_enabled
from jitcore.errors import MetaError
from jitcore.ir.codegen import bsym_lines
from jitcore.ir.context import get_tracectx, services
from jitcore.ir.proxies import Proxy, TensorProxy, ir_op
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.views import MULTI_INPUT_VIEW_OPS, MULTI_VIEW_OPS, SAME_TENSOR_VIEW_OPS, VIEW_OPS, VIEW_PRIMS

# the autocast policy, registered once by jitcore.ops.autocast (register_autocast): "ops", the ids of the ops whose
# inputs torch's autocast casts; "cast_args", the function that casts them; "transparent", the composites whose bodies
# autocast reaches (eager decomposes them above its dispatcher's autocast layer). Empty until registered: none is cast.
AUTOCAST_POLICY: dict = {"ops": frozenset(), "transparent": frozenset(), "cast_args": None}
# tracing state: how many enclosing op bodies autocast does not reach (an op autocast handled, or an eager kernel of
# its own); per context, so a trace recorded in another thread or task starts at 0
_AUTOCAST_BELOW: contextvars.ContextVar[int] = contextvars.ContextVar("jitcore_autocast_below", default=0)


def register_autocast(ops, transparent, cast_args, *, replace: bool = False):
    """Install the autocast policy: the prims and composites `ops` (Symbols) have their inputs cast by
    cast_args(sym, args, kwargs) -> (args, kwargs, listed); the composites in `transparent` (Symbols) record their
    body in place of themselves under autocast. A second policy is an error unless `replace`."""
    ops, transparent = tuple(ops), tuple(transparent)
    bad = [s for s in ops + transparent if not isinstance(s, Symbol)]
    if bad:
        raise TypeError(f"autocast policy: expected the ops as Symbols (a defined op), got {bad[:3]!r}")
    if not callable(cast_args):
        raise TypeError(f"autocast policy: cast_args must be a callable, got {cast_args!r}")
    if AUTOCAST_POLICY["cast_args"] is not None and not replace:
        raise ValueError("autocast policy is registered already; pass replace=True to replace it")
    AUTOCAST_POLICY.update(ops=frozenset(s.id for s in ops), transparent=frozenset(s.id for s in transparent),
                           cast_args=cast_args)




class Tag(enum.Enum):
    NON_DIFFERENTIABLE = "non_differentiable"  # outputs carry no gradient (shape, comparisons, argmax)
    RANDOM = "random"  # draws random numbers
    INPLACE = "inplace"  # writes one of its inputs
    OPAQUE = "opaque"  # a torch callable with no decomposition: metadata from meta tensors
    CREATION = "creation"  # makes a tensor from no tensor inputs
    PYTHON = "python"  # number or collection arithmetic; no tensor
    DONT_DCE = "dont_dce"  # kept even when its outputs are unused
    ELEMENTWISE = "elementwise"  # each output element from the same-index element of each input (same shape)
    EFFECTS = "effects"  # an opaque op that may write memory or draw random numbers: fusion never moves it


# ops whose data argument keeps a NumPy scalar's dtype (torch.tensor(np.float64(1)) is float64)
KEEPS_NUMPY_DTYPE = {"ltorch.tensor", "ltorch.as_tensor", "ltorch.asarray", "ltorch.scalar_tensor"}


# a type of array value made inside a traced function (jitcore/frontend/ndarrays.py) -> to_tensor(a, args): what an op
# handed one takes it as (eager's torch converts a numpy array to a tensor); filled by register_array_argument
ARRAY_ARGUMENTS: dict = {}


def register_array_argument(cls, to_tensor) -> None:
    ARRAY_ARGUMENTS[cls] = to_tensor


def _numpy_scalars(sym, args, kwargs):
    """NumPy scalars passed to an op are the Python numbers torch takes them as (`x * np.float32(2)` promotes like
    `x * 2.0`); ops that make a tensor from data keep the scalar's dtype. Arrays made inside the traced function
    (ARRAY_ARGUMENTS) become tensors."""
    def scalar(a) -> bool:
        return type(a).__module__ == "numpy" and hasattr(a, "item") and getattr(a, "shape", None) == ()

    if any(type(a) in ARRAY_ARGUMENTS for a in (*args, *kwargs.values())):
        args = tuple(ARRAY_ARGUMENTS[type(a)](a, args) if type(a) in ARRAY_ARGUMENTS else a for a in args)
        kwargs = {k: ARRAY_ARGUMENTS[type(v)](v, args) if type(v) in ARRAY_ARGUMENTS else v for k, v in kwargs.items()}
    if sym.id in KEEPS_NUMPY_DTYPE and args and scalar(args[0]) and kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.from_numpy(args[0].reshape(1)).dtype}
    return tuple(a.item() if scalar(a) else a for a in args), {k: v.item() if scalar(v) else v
                                                              for k, v in kwargs.items()}


class Symbol:
    """An op. `meta` for prims (outputs from inputs' metadata), `fn` for composites (body over other ops).

    id: stable op id ("prims.add", "ltorch.gelu"); module: the alias it prints under ("prims", "torch"),
    resolved when a trace runs through `namespace` (an object holding the op as an attribute, or a module).
    kernel: a prim's eager kernel, given where the prim is defined (`@prim(..., kernel=torch.add)`): what it runs
    on real values with no trace active, what the torch executor runs it with, what the layout oracle replays.
    """

    def __init__(self, id: str, name: str, *, meta=None, fn=None, tags=(), module="prims", namespace=None,
                 printer=None, call_ctx=None, torch_fn=None, kernel=None):
        if (meta is None) == (fn is None):
            raise ValueError(f"symbol {id}: give exactly one of meta (a prim) or fn (a composite)")
        if kernel is not None and (meta is None or not callable(kernel)):
            raise TypeError(f"symbol {id}: an eager kernel is a callable, given for a prim (one with a meta), "
                            f"got {kernel!r}" + ("" if meta is not None else " for a composite"))
        self.id, self.name, self.meta, self.fn, self.kernel = id, name, meta, fn, kernel
        self.tags = frozenset(tags)
        self.module, self.namespace, self.printer = module, namespace, printer
        self.call_ctx, self.torch_fn = call_ctx, torch_fn
        self._signature = None

    @property
    def signature(self) -> inspect.Signature | None:
        """The signature of the op's meta (a prim) or body (a composite): the one its lines are bound by."""
        if self._signature is None:
            try:
                self._signature = inspect.signature(self.meta or self.fn)
            except (TypeError, ValueError):
                self._signature = False
        return self._signature or None

    def canonical(self, args, kwargs) -> tuple[tuple, dict]:
        """(args, kwargs) with each required parameter given by keyword moved to its position: `F.linear(x, weight=w)`
        records the line `F.linear(x, w)`, so VJP rules and executor kernels find an op's inputs where its signature
        puts them, however the user passed them. An argument with a default keeps how it was given (torch takes some
        only by keyword: F.gelu's approximate, Tensor.half's memory_format); rules read those through the binding
        (transforms/vjp_helpers.bound_arguments)."""
        if not kwargs:
            return tuple(args), {}
        sig = self.signature
        args, kwargs = list(args), dict(kwargs)
        if sig is None:
            return tuple(args), kwargs
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for p in list(sig.parameters.values())[len(args):]:
            if p.kind not in positional or p.default is not inspect.Parameter.empty or p.name not in kwargs:
                break
            args.append(kwargs.pop(p.name))
        return tuple(args), kwargs

    @property
    def is_prim(self) -> bool:
        return self.meta is not None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}" if self.module else self.name

    def __repr__(self) -> str:
        return f"[Symbol {self.id}]"

    def __call__(self, *args, **kwargs):
        trace = get_tracectx()
        if trace is None:
            return self.eager(*args, **kwargs)
        try:
            if is_any_autocast_enabled() and _AUTOCAST_BELOW.get() == 0 and _records_user_code(trace):
                return self._call_under_autocast(trace, args, kwargs)
            return self._record(trace, args, kwargs)
        except MetaError as e:  # the outermost op call it leaves: what the interpreter asks torch about (eager's type)
            e.op_call = (self, args, kwargs)
            raise

    def _call_under_autocast(self, trace, args, kwargs):
        """As torch's dispatcher: a listed op's inputs are cast and its body runs below autocast; so does the body
        of any op that is a kernel of its own in eager; a composite eager decomposes lets autocast reach inside."""
        listed = False
        if self.id in AUTOCAST_POLICY["ops"]:
            args, kwargs, listed = AUTOCAST_POLICY["cast_args"](self, args, kwargs)
        if self.id in AUTOCAST_POLICY["transparent"] and not listed:
            # its lines are recorded in place of it: its torch kernel, run by an executor outside autocast, would not
            # cast what autocast casts inside it
            return self.fn(*args, **kwargs)
        token = _AUTOCAST_BELOW.set(_AUTOCAST_BELOW.get() + 1)
        try:
            return self._record(trace, args, kwargs)
        finally:
            _AUTOCAST_BELOW.reset(token)

    def _record(self, trace, args, kwargs):
        if any(type(a).__module__ == "numpy" or type(a) in ARRAY_ARGUMENTS for a in (*args, *kwargs.values())):
            args, kwargs = _numpy_scalars(self, args, kwargs)
        if self.meta is not None:
            out = self.meta(*args, **kwargs)
            trace.record(_in_context(BoundSymbol(self, *self.canonical(args, kwargs), out)))
            return out
        with trace.subsymbol_scope() as subs:
            out = self.fn(*args, **kwargs)
        args, kwargs = self.canonical(args, kwargs)
        subs = _prune_number_ops(subs, out)  # size checks that only decided a branch (symbolic values) go first
        if _is_passthrough(out, (args, kwargs), subs):
            if not _nograd_self_view(self, out) and not _user_self_view(self, out, trace):
                return out
            with trace.subsymbol_scope() as subs:  # eager's view is a tensor of its own (requires grad, no history)
                out = _alias(out)
        trace.record(_in_context(BoundSymbol(self, args, kwargs, out, subs)))
        return out

    def eager(self, *args, **kwargs):
        """Run on real values: the torch executor's kernel for prims, the body for composites."""
        if self.meta is None:
            # a torch-level op on real tensors is the torch call it stands for
            return self.torch_fn(*args, **kwargs) if self.torch_fn is not None else self.fn(*args, **kwargs)
        kernel = self.kernel
        if kernel is None:
            raise NotImplementedError(f"{self.id} has no eager kernel (its definition gives none)")
        return kernel(*args, **kwargs)

    def bind(self, *args, output, subsymbols=(), **kwargs) -> BoundSymbol:
        """A BoundSymbol for this op without running anything (passes use it to build new lines)."""
        return BoundSymbol(self, *self.canonical(args, kwargs), output, tuple(subsymbols))


def _records_user_code(trace) -> bool:
    """Whether trace is the interpreter's, recording the user's function (jitcore/ir/services.py): autocast is the
    user's state, recorded as explicit casts there; passes that record ops later (autodiff) never cast."""
    return services().records_user_code


def _in_context(bsym: BoundSymbol) -> BoundSymbol:
    """bsym marked with the grad mode it is recorded under (BoundSymbol.no_grad); its outputs noted as inference
    tensors (the services' inference_tensors) where eager's are."""
    if not torch.is_grad_enabled():
        bsym.no_grad = True
    found = services()
    made = found.inference_tensors
    if made is not None:
        mode = torch.is_inference_mode_enabled()
        if mode or made:
            _note_inference(bsym, made, mode)
        if not mode and torch.is_grad_enabled() and get_tracectx().at_top_level():
            # a user's op with grad on: eager may save an inference tensor for its backward (and raise)
            found.refuse_inference_saves(bsym)
    return bsym


def _note_inference(bsym, made: dict, mode: bool):
    """A view or an in-place write is an inference tensor when the tensor it views or writes is; another op's outputs
    are when recorded under inference mode."""
    if is_eager_view(bsym) or writes_in_place(bsym):
        base = viewed_tensor(bsym)
        flag = made.get(base.name) if base is not None else None
    else:
        flag = True if mode else None
    if flag is not None:
        for o in bsym.flat_proxy_outs():
            if isinstance(o, TensorProxy):
                made[o.name] = flag


def recorded_without_grad(bsym) -> bool:
    """Whether bsym was recorded with grad mode off: its outputs are constants for autodiff."""
    return bsym.no_grad


def is_eager_view(bsym) -> bool:
    """Whether the line's output is a view in eager of its (first) tensor argument: a view op whose decomposition
    only re-indexes its input (view prims and number arithmetic; x[index_tensor] is a new tensor), other than
    detach (a tensor of its own for autograd)."""
    whole = bsym.sym.id in MULTI_VIEW_OPS or bsym.sym.id in MULTI_INPUT_VIEW_OPS
    return bsym.sym.id in VIEW_OPS and bsym.sym.id not in ("ltorch.detach", "ltorch.data", "prims.stop_gradient") and \
        _views_only(bsym, whole)


def _views_only(bsym, whole: bool = False) -> bool:
    """whole: the line is a view op of several outputs, whose piece returned whole (`x.chunk(1)[0]`, a split wider
    than x) is a same-dtype copy in jitcore's decomposition and x itself in eager (fuzz seed 2932: returned after a
    write into x, it must share the caller's x's memory)."""
    if not bsym.subsymbols:
        return bsym.sym.id in VIEW_PRIMS or bsym.sym.id in VIEW_OPS or Tag.PYTHON in bsym.sym.tags or (
            whole and bsym.sym.id == "prims.convert_element_type" and bsym.args[1] == bsym.args[0].dtype)
    return all(_views_only(s, whole) for s in bsym.subsymbols)


def viewed_tensor(bsym, out=None):
    """The tensor a view line views: its first tensor argument (None when it has none); for a view op of several
    tensors (atleast_1d(x, y), broadcast_tensors, meshgrid), the one its output `out` is made from."""
    tensors = [a for a in bsym.flat_proxy_args() if isinstance(a, TensorProxy)]
    if out is None or len(tensors) < 2 or bsym.sym.id not in MULTI_INPUT_VIEW_OPS:
        return tensors[0] if tensors else None
    args = {t.name: t for t in tensors}
    makers = {o.name: p for p in _leaf_lines(bsym) for o in p.flat_proxy_outs()}
    name = out.name
    while name not in args and name in makers:
        first = next((a for a in makers[name].flat_proxy_args() if isinstance(a, TensorProxy)), None)
        if first is None:
            return None
        name = first.name
    return args.get(name)


def _leaf_lines(bsym) -> list:
    if not bsym.subsymbols:
        return [bsym]
    return [p for s in bsym.subsymbols for p in _leaf_lines(s)]


def view_path(makers: dict, p, stop=frozenset()) -> tuple[list, object]:
    """([(line, its output), ...] from p back towards its root, the tensor p is a view of in eager), following views
    back (makers: proxy name -> the line making it) until a name in stop or a tensor that is not a view; ([], p)
    when p is not a view."""
    lines = []
    while p.name not in stop:
        b = makers.get(p.name)
        viewed = viewed_tensor(b, p) if b is not None and is_eager_view(b) else None
        if viewed is None:
            break
        lines.append((b, p))
        p = viewed
    return lines, p


def memory_path(makers: dict, p, stop=frozenset()) -> tuple[list, object]:
    """view_path's (lines, tensor viewed), through detach()es too (a detach shares its input's memory): a view of
    `x.detach()` handed back shares the caller's x's memory in eager (fuzz s173: `x.detach().reshape(4, -1)` returned
    after a write into x)."""
    lines, viewed = view_path(makers, p, stop)
    while viewed.name not in stop:
        b = makers.get(viewed.name)
        if b is None or b.sym.id not in ("ltorch.detach", "ltorch.data", "prims.stop_gradient"):
            break
        more, under = view_path(makers, viewed_tensor(b, viewed), stop)
        lines, viewed = [*lines, (b, viewed), *more], under
    return lines, viewed


def view_root(makers: dict, p, stop=frozenset()):
    """The tensor p is a view of in eager (see view_path); p itself when it is not a view."""
    return view_path(makers, p, stop)[1]


def writes_in_place(bsym) -> bool:
    """Whether the line (or a line of its decomposition) writes into a tensor (Tag.INPLACE)."""
    return Tag.INPLACE in bsym.sym.tags or any(writes_in_place(s) for s in bsym.subsymbols)


def _is_passthrough(out, args, subs) -> bool:
    """A composite that recorded nothing and made no new value records nothing itself (`x.contiguous()`,
    `unbind` of an empty dim)."""
    if subs:
        return False
    inputs = {id(a) for a in tree_leaves((args,)) if isinstance(a, Proxy)}
    return all(id(o) in inputs for o in tree_leaves(out) if isinstance(o, Proxy))


def _nograd_self_view(sym, out) -> bool:
    """A view op that gave back its input (`x.view(x.shape)`) under no_grad, of a tensor that requires grad: eager's
    result is another tensor than its input (it requires grad with no grad_fn, and no gradient reaches the input)."""
    return (not torch.is_grad_enabled() and sym.id in VIEW_OPS and sym.id not in SAME_TENSOR_VIEW_OPS
            and isinstance(out, TensorProxy) and out.requires_grad)


def _user_self_view(sym, out, trace) -> bool:
    """A view op of the user's function that gave back its input (`x[:]`, `x.view(x.shape)`, `x.transpose(0, -1)` of
    a 1-d x): eager's result is another tensor object, which an in-place metadata change of either (`x.t_()`) does
    not reach (jitcore/ops/metadata_inplace.py), so it is one here too; not `x.real`/`x.conj()` of a real x, which
    eager hands back as x itself (SAME_TENSOR_VIEW_OPS)."""
    return (sym.id in VIEW_OPS and sym.id not in SAME_TENSOR_VIEW_OPS and isinstance(out, TensorProxy)
            and trace.at_top_level() and services().records_user_code)


def _alias(x):
    """x as a new tensor of its own: prims.reshape to its own shape (the "reshape" IR op)."""
    return ir_op("reshape")(x, tuple(x.shape))


def _prune_number_ops(subs, out) -> tuple:
    """The decomposition without Python number ops whose results nothing in it uses: size checks that only
    decided a branch are guards (the prologue holds them), not computation."""
    if not any(Tag.PYTHON in b.sym.tags for b in subs):
        return tuple(subs)
    used = {id(o) for o in tree_leaves(out)}
    kept = []
    for b in reversed(subs):
        if Tag.PYTHON in b.sym.tags and Tag.DONT_DCE not in b.sym.tags and not any(
                id(o) in used for o in b.flat_outs()):
            continue
        kept.append(b)
        used.update(id(a) for a in b.flat_args())
    return tuple(reversed(kept))


@dataclass(eq=False)
class BoundSymbol:
    """One line of a trace: `output = sym(*args, **kwargs)`, with the lines it decomposes into."""

    sym: Symbol
    args: tuple
    kwargs: dict
    output: Any
    subsymbols: tuple = ()
    header: str = ""
    # -- what passes and the recording note on the line (from_bsym copies each) -------------------------------------
    # recorded with grad mode off (no_grad, inference_mode, set_grad_enabled(False)): the line and the same line
    # recorded with grad are different values for autodiff, and passes keep them apart
    no_grad: bool = False
    # recorded inside torch.utils.checkpoint.checkpoint: the backward recomputes it rather than the forward saving its
    # outputs (transforms/rematerialize.py)
    checkpointed: bool = False
    # ((code, instruction), ...) of the user's frames the line comes from, outermost first (Trace.record)
    user_stack: tuple = ()
    # the forward line of a differentiated op: (its backward, the original line, its residuals) (transforms/autodiff.py)
    vjp: tuple | None = None
    # the executor that runs this line (executors/claim.py; transforms/memory.py asks it)
    claimed_by: Any = None
    # the name of the fusion executor a line is given to, and on its fused region's line (executors/regions.py)
    executor: str | None = None
    # a fused region's line: the region as a printable, runnable sub-Trace (executors/regions.py)
    region_trace: Any = None
    # a prologue check that may fail on an input the cache takes (not an argument's own): jitcore/guards/prologue.py
    fallible: bool = False
    # an in-place metadata change of a view (`x[0].t_()`), recorded as the view it makes: eager moves the version
    # counter the view shares with its base (transforms/write_history.py)
    moves_version: bool = False

    def __post_init__(self):
        self.args = tuple(self.args)
        self.kwargs = dict(self.kwargs)

    def from_bsym(self, **changes) -> BoundSymbol:
        fields = {"sym": self.sym, "args": self.args, "kwargs": self.kwargs, "output": self.output,
                  "subsymbols": self.subsymbols, "header": self.header, "no_grad": self.no_grad,
                  "checkpointed": self.checkpointed, "user_stack": self.user_stack, "vjp": self.vjp,
                  "claimed_by": self.claimed_by, "executor": self.executor, "region_trace": self.region_trace,
                  "fallible": self.fallible, "moves_version": self.moves_version}
        fields.update(changes)
        return BoundSymbol(**fields)

    def flat_args(self) -> list:
        return tree_leaves((self.args, self.kwargs))

    def flat_outs(self) -> list:
        return tree_leaves(self.output)

    def flat_proxy_args(self) -> list:
        return [a for a in self.flat_args() if isinstance(a, Proxy)]

    def flat_proxy_outs(self) -> list:
        return [o for o in self.flat_outs() if isinstance(o, Proxy)]

    def __repr__(self) -> str:
        return "\n".join(bsym_lines(self, indent=0))
