"""Guards stage: the module state epoch. `epoch` is a process-wide integer bumped by every (covered) way a module
tree, its parameters and buffers, or plain attributes stored on a module can change. A jitted module's cache
entry remembers the epoch at which its module-rooted guards last passed (ModuleGuardState); while the epoch is
unchanged, a call skips re-fetching and re-checking parameters, buffers and module attributes
(jitcore/guards/prologue.py splits the guards into that part and the per-call rest).
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import utils as torch_utils
from torch.nn.utils import _named_member_accessor as accessor

epoch = 0  # read by generated prologues as `module_state.epoch`
installed = False
# The epoch of changes made inside code torch.compile traces: Dynamo would guard on the integer `epoch` it reads and
# recompile at every call that changes module state (Llama's forward slices its ModuleList, which registers modules).
# It records an in-place add to this tensor instead, which the compiled code runs at every call without a guard on
# the value; prologues compare its version counter (`traced_epoch._version`) as they compare `epoch`.
traced_epoch = torch.zeros((), dtype=torch.int64)
_compiling = torch.compiler.is_dynamo_compiling  # (only while Dynamo traces: not AOT or make_fx tracing)


def bump(*_args, **_kwargs):
    """Note that some module state may have changed (also usable as a torch registration hook: returns None)."""
    global epoch
    if _compiling():
        traced_epoch.add_(1)
    else:
        epoch += 1


def _bump_after(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bump()
        try:
            return fn(*args, **kwargs)
        finally:
            bump()

    wrapper.__jitcore_bumps__ = True
    return wrapper


def _bump_first(fn):
    """For the hot-ish eager paths (module setattr): one increment, before (no other thread reads in between)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        global epoch
        if _compiling():
            traced_epoch.add_(1)
        else:
            epoch += 1
        return fn(*args, **kwargs)

    wrapper.__jitcore_bumps__ = True
    return wrapper


_PATCHED: list = []  # (owner, name, torch's original, the wrapper installed)


def _patch(owner, name, wrap):
    current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    if getattr(current, "__jitcore_bumps__", False):
        return
    wrapper = wrap(current)
    setattr(owner, name, wrapper)
    _PATCHED.append((owner, name, current, wrapper))


@contextlib.contextmanager
def suspended():
    """torch's originals while jitcore interprets user code: the interpreter then reads torch's own methods (no
    epoch in the trace's guards or side effects); its writes are undone anyway, and the epilogue's replay of them
    runs through the patches again."""
    for owner, name, original, _ in _PATCHED:
        setattr(owner, name, original)
    try:
        yield
    finally:
        for owner, name, _, wrapper in _PATCHED:
            setattr(owner, name, wrapper)


_PARAM_METHODS = ("requires_grad_", "detach_", "set_", "resize_", "resize_as_", "as_strided_", "t_", "transpose_",
                  "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_")
_PARAM_PROPERTIES = ("data", "requires_grad")


def _parameter_property(name):
    base = torch._C.TensorBase.__dict__[name]  # the getset descriptor
    setter = base.__set__

    def fset(self, value):
        bump()
        setter(self, value)

    prop = property(base.__get__, fset, doc=base.__doc__)
    return prop


def _parameter_method(name):
    base = getattr(torch.Tensor, name)  # torch's own (a C method, or Tensor's Python one: detach_)

    def method(self, *args, **kwargs):
        bump()
        return base(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    method.__jitcore_bumps__ = True
    return method


PARAMETER_PATCHES: dict = {}  # name -> the object installed on nn.Parameter (the fast path checks tensors use them)


def install():
    """Patch torch so that every covered module state change bumps `epoch` (idempotent).

    `install()` patches torch once, when the first JitModule is created (not on `import jitcore`); each patch bumps
    the epoch and then does what torch did:
    - `nn.Module.__setattr__` / `__delattr__`: `m.weight = Parameter(...)`, `m.training = ...` (train/eval),
      `m.eps = ...`, `m.__class__ = ...` (parametrize), submodule/buffer assignment; subclasses reach them via super().
    - torch's global registration hooks for parameters, buffers and modules: `register_parameter`,
      `register_buffer`, `add_module` / `register_module` called directly (they write the dicts, not via setattr).
    - `nn.Module._apply` (to/half/double/float/cuda/to_empty/share_memory...: in-place `.data` swaps or
      `torch.utils.swap_tensors`); bumped before and after.
    - container methods that write `_modules` directly: `Sequential.insert`, `ModuleList.insert`,
      `ModuleDict.__delitem__` (and so `pop`), `ModuleDict.clear`. The others go through setattr/add_module.
    - `torch.utils.swap_tensors` (swaps two tensors' contents and metadata in place) and the functions of
      `torch.nn.utils._named_member_accessor` that write `_parameters`/`_buffers`/`_modules` directly
      (`set_tensor`, `swap_tensor`, `swap_submodule`: torch.func.functional_call, stateless reparametrization).
    - on `nn.Parameter` (and so its subclasses), overriding descriptors that delegate to torch's own: the `data` and
      `requires_grad` setters (the getters are torch's C getters, unchanged), and the in-place methods that change a
      tensor's metadata: requires_grad_, detach_, set_, resize_, resize_as_, as_strided_, t_, transpose_, swapdims_,
      swapaxes_, squeeze_, unsqueeze_.
    Not covered (so jitcore keeps checking it on every call): buffers and plain tensors stored on modules are
    ordinary tensors (no per-class hook), so their metadata (dtype, shape, device, requires_grad) is checked per call;
    values reached through non-module objects (`model.config.scale` on a dataclass), class attributes and properties
    of module classes, globals and closures are checked per call. Writes that bypass every patched path are not
    seen: `m.__dict__[k] = v`, `object.__setattr__(m, ...)`, `m._parameters[k] = p` by hand, `torch.Tensor.set_(p, x)`
    called on the base class, `out=` arguments resizing a parameter, assigning to a module class's attributes.
    """
    global installed
    if installed:
        return
    nn, M = torch.nn, torch.nn.Module
    _patch(M, "__setattr__", _bump_first)
    _patch(M, "__delattr__", _bump_first)
    _patch(M, "_apply", _bump_after)
    mod = torch.nn.modules.module
    for register in (mod.register_module_parameter_registration_hook, mod.register_module_buffer_registration_hook,
                     mod.register_module_module_registration_hook):
        register(bump)
    for cls, name in ((nn.Sequential, "insert"), (nn.ModuleList, "insert"), (nn.ModuleDict, "__delitem__"),
                      (nn.ModuleDict, "clear")):
        _patch(cls, name, _bump_after)
    _patch(torch_utils, "swap_tensors", _bump_after)
    # every hook registration (forward, pre-forward, backward, state-dict...) makes a RemovableHandle
    _patch(torch_utils.hooks.RemovableHandle, "__init__", _bump_after)
    _patch(torch_utils.hooks.RemovableHandle, "remove", _bump_after)
    for name in ("set_tensor", "swap_tensor", "swap_submodule"):
        _patch(accessor, name, _bump_after)
    P = nn.Parameter
    for name in _PARAM_PROPERTIES:
        if name not in P.__dict__:
            setattr(P, name, _parameter_property(name))
        PARAMETER_PATCHES[name] = P.__dict__[name]
    for name in _PARAM_METHODS:
        if name not in P.__dict__:
            setattr(P, name, _parameter_method(name))
        PARAMETER_PATCHES[name] = P.__dict__[name]
    installed = True


_watched_types: dict = {}


def watched_parameter_type(cls) -> bool:
    """Whether every metadata change of a tensor of exactly this type bumps the epoch: nn.Parameter and its
    subclasses that do not override a patched descriptor or method."""
    ok = _watched_types.get(cls)
    if ok is None:
        ok = installed and issubclass(cls, torch.nn.Parameter) and all(
            _lookup(cls, name) is obj for name, obj in PARAMETER_PATCHES.items())
        _watched_types[cls] = ok
    return ok


def _lookup(cls, name):
    for k in cls.__mro__:
        if name in k.__dict__:
            return k.__dict__[name]
    return None


class ModuleGuardState:
    """Per cache entry: the epoch at which its module-rooted guards last passed, and what they fetched (the
    module-rooted inputs, in order, and the anchor objects the per-call checks start from). `runs` counts the
    times the module-rooted guards actually ran (tests: a call that skipped them is a hit that did not run)."""

    __slots__ = ("anchors", "epoch", "fn", "guard", "inputs", "runs", "segments", "spans", "traced")

    def __init__(self, guard, spans):
        self.guard = guard  # generated: (fn, args, kwargs) -> (inputs, anchors) or None
        self.spans = [tuple(s) for s in spans]  # runs of inputs the per-call part concatenates (`segments`)
        self.fn = None
        self.epoch = self.traced = -1
        self.inputs = self.segments = self.anchors = None
        self.runs = 0

    def refresh(self, fn, args, kwargs) -> bool:
        """Run the module-rooted guards; on success remember the epoch they passed at and what they fetched."""
        seen, traced = epoch, traced_epoch._version
        self.runs += 1
        self.epoch = -1
        out = self.guard(fn, args, kwargs)
        if out is None:
            return False
        self.inputs, self.anchors = out
        if len(self.spans) > 1:
            self.segments = tuple(self.inputs[a:b] for a, b in self.spans)
        self.fn, self.epoch, self.traced = fn, seen, traced
        return True
