"""IR ops: Symbol (an op: id, name, meta or decomposition, tags) and BoundSymbol (one line of a trace).

Calling a Symbol while a trace is active records it: a prim runs its meta function to make output proxies; a
composite runs its Python body over other symbols, and what the body records becomes its subsymbols. Called
with no active trace (a printed trace run as a program), prims run their eager kernel and composites run
their body.
"""
from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from jitcore.compat import is_any_autocast_enabled
from jitcore.errors import MetaError
from jitcore.ir.codegen import bsym_lines
from jitcore.ir.context import get_tracectx
from jitcore.ir.proxies import Proxy, TensorProxy, ir_op
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.views import VIEW_OPS, VIEW_PRIMS

# the autocast policy, registered by jitcore.ops.autocast (register_autocast): the op ids whose inputs torch's autocast
# casts, the function that casts them, and the composites whose bodies autocast reaches (eager decomposes them above
# its dispatcher's autocast layer). Empty until registered: no op is cast.
AUTOCAST_OPS: frozenset = frozenset()
AUTOCAST_TRANSPARENT: frozenset = frozenset()
autocast_args = None
# how many enclosing op bodies autocast does not reach (an op autocast handled, or an eager kernel of its own)
_autocast_below = 0


def register_autocast(ops, transparent, cast_args):
    """Install the autocast policy: `ops` (op ids) have their inputs cast by cast_args(sym, args, kwargs) ->
    (args, kwargs, listed); the composites in `transparent` record their body in place of themselves under autocast."""
    global AUTOCAST_OPS, AUTOCAST_TRANSPARENT, autocast_args
    AUTOCAST_OPS, AUTOCAST_TRANSPARENT, autocast_args = frozenset(ops), frozenset(transparent), cast_args


# op id -> callable running the op on real tensors; the torch executor fills it (see executors/torchex.py)
EAGER_KERNELS: dict[str, Callable] = {}

# BoundSymbol.extra key, set on a line recorded with grad mode off (no_grad, inference_mode, set_grad_enabled(False)):
# such a line and the same line recorded with grad are different values for autodiff, and passes keep them apart
NO_GRAD = "no_grad"
# BoundSymbol.extra key, set on a line recorded inside torch.utils.checkpoint.checkpoint: the backward recomputes it
# rather than the forward saving its outputs (transforms/rematerialize.py)
CHECKPOINTED = "checkpointed"


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


def _numpy_scalars(sym, args, kwargs):
    """NumPy scalars passed to an op are the Python numbers torch takes them as (`x * np.float32(2)` promotes like
    `x * 2.0`); ops that make a tensor from data keep the scalar's dtype."""
    def scalar(a) -> bool:
        return type(a).__module__ == "numpy" and hasattr(a, "item") and getattr(a, "shape", None) == ()

    if sym.id in KEEPS_NUMPY_DTYPE and args and scalar(args[0]) and kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.from_numpy(args[0].reshape(1)).dtype}
    return tuple(a.item() if scalar(a) else a for a in args), {k: v.item() if scalar(v) else v
                                                              for k, v in kwargs.items()}


class Symbol:
    """An op. `meta` for prims (outputs from inputs' metadata), `fn` for composites (body over other ops).

    id: stable op id ("prims.add", "ltorch.gelu"); module: the alias it prints under ("prims", "torch"),
    resolved when a trace runs through `namespace` (an object holding the op as an attribute, or a module).
    """

    def __init__(self, id: str, name: str, *, meta=None, fn=None, tags=(), module="prims", namespace=None,
                 printer=None, call_ctx=None, torch_fn=None):
        if (meta is None) == (fn is None):
            raise ValueError(f"symbol {id}: give exactly one of meta (a prim) or fn (a composite)")
        self.id, self.name, self.meta, self.fn = id, name, meta, fn
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
            if _autocast_below == 0 and is_any_autocast_enabled() and _records_user_code(trace):
                return self._call_under_autocast(trace, args, kwargs)
            return self._record(trace, args, kwargs)
        except MetaError as e:  # the outermost op call it leaves: what the interpreter asks torch about (eager's type)
            e.op_call = (self, args, kwargs)
            raise

    def _call_under_autocast(self, trace, args, kwargs):
        """As torch's dispatcher: a listed op's inputs are cast and its body runs below autocast; so does the body
        of any op that is a kernel of its own in eager; a composite eager decomposes lets autocast reach inside."""
        global _autocast_below
        listed = False
        if self.id in AUTOCAST_OPS:
            args, kwargs, listed = autocast_args(self, args, kwargs)
        if self.id in AUTOCAST_TRANSPARENT and not listed:
            # its lines are recorded in place of it: its torch kernel, run by an executor outside autocast, would not
            # cast what autocast casts inside it
            return self.fn(*args, **kwargs)
        _autocast_below += 1
        try:
            return self._record(trace, args, kwargs)
        finally:
            _autocast_below -= 1

    def _record(self, trace, args, kwargs):
        if any(type(a).__module__ == "numpy" for a in (*args, *kwargs.values())):
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
            if not _nograd_self_view(self, out):
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
        kernel = EAGER_KERNELS.get(self.id)
        if kernel is None:
            raise NotImplementedError(f"{self.id} has no eager kernel (import executors.torchex)")
        return kernel(*args, **kwargs)

    def bind(self, *args, output, subsymbols=(), **kwargs) -> BoundSymbol:
        """A BoundSymbol for this op without running anything (passes use it to build new lines)."""
        return BoundSymbol(self, *self.canonical(args, kwargs), output, tuple(subsymbols))


def _records_user_code(trace) -> bool:
    """Whether trace is the interpreter's, recording the user's function (its data oracle is set only then): autocast
    is the user's state, recorded as explicit casts there; passes that record ops later (autodiff) never cast."""
    return "data_oracle" in trace.extra


def _in_context(bsym: BoundSymbol) -> BoundSymbol:
    """bsym marked with the grad mode it is recorded under (see NO_GRAD); its outputs noted as inference tensors (the
    trace's INFERENCE set of names) where eager's are."""
    if not torch.is_grad_enabled():
        bsym.extra[NO_GRAD] = True
    trace = get_tracectx()
    made = trace.extra.get(INFERENCE) if trace is not None else None
    if made is not None:
        mode = torch.is_inference_mode_enabled()
        if mode or made:
            _note_inference(bsym, made, mode)
        if not mode and torch.is_grad_enabled() and trace.at_top_level():
            # a user's op with grad on: eager may save an inference tensor for its backward (and raise)
            trace.extra[INFERENCE_SAVES](bsym)
    return bsym


# Trace.extra key (the interpreter's trace): name -> True for the tensors eager makes as inference tensors (under
# torch.inference_mode(), or views of one), False for views of an inference tensor the function was given
INFERENCE = "inference_tensors"
# Trace.extra key (the interpreter's trace): bsym -> None, raising eager's error where eager's autograd would save an
# inference tensor for the op's backward (jitcore/runtime/autograd.py, refuse_inference_saves)
INFERENCE_SAVES = "inference_saves"
# Trace.extra key (kept by every pass): the names of the program's inputs that are inference tensors
INFERENCE_INPUTS = "inference_inputs"


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
    return bool(bsym.extra.get(NO_GRAD))


def is_eager_view(bsym) -> bool:
    """Whether the line's output is a view in eager of its (first) tensor argument: a view op whose decomposition
    only re-indexes its input (view prims and number arithmetic; x[index_tensor] is a new tensor), other than
    detach (a tensor of its own for autograd)."""
    return bsym.sym.id in VIEW_OPS and bsym.sym.id not in ("ltorch.detach", "prims.stop_gradient") and \
        _views_only(bsym)


def _views_only(bsym) -> bool:
    if not bsym.subsymbols:
        return bsym.sym.id in VIEW_PRIMS or bsym.sym.id in VIEW_OPS or Tag.PYTHON in bsym.sym.tags
    return all(_views_only(s) for s in bsym.subsymbols)


def viewed_tensor(bsym):
    """The tensor a view line views: its first tensor argument (None when it has none)."""
    return next((a for a in bsym.flat_proxy_args() if isinstance(a, TensorProxy)), None)


def view_path(makers: dict, p, stop=frozenset()) -> tuple[list, object]:
    """([(line, its output), ...] from p back towards its root, the tensor p is a view of in eager), following views
    back (makers: proxy name -> the line making it) until a name in stop or a tensor that is not a view; ([], p)
    when p is not a view."""
    lines = []
    while p.name not in stop:
        b = makers.get(p.name)
        viewed = viewed_tensor(b) if b is not None and is_eager_view(b) else None
        if viewed is None:
            break
        lines.append((b, p))
        p = viewed
    return lines, p


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
    return (not torch.is_grad_enabled() and sym.id in VIEW_OPS and isinstance(out, TensorProxy)
            and out.requires_grad)


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
    extra: dict = field(default_factory=dict)  # pass-specific annotations (e.g. saved-for-backward)

    def __post_init__(self):
        self.args = tuple(self.args)
        self.kwargs = dict(self.kwargs)

    def from_bsym(self, **changes) -> BoundSymbol:
        fields = {"sym": self.sym, "args": self.args, "kwargs": self.kwargs, "output": self.output,
                  "subsymbols": self.subsymbols, "header": self.header, "extra": dict(self.extra)}
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
