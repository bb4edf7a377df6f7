"""Ops: in-place torch ops (`x.add_(y)`, `x += y`, `x[i] = v`, `x.zero_()`, `x.copy_(y)`, ...). Each is a composite
tagged INPLACE whose body computes the functional result and writes it with `prims.copy_(value, x)`, the one
in-place prim; transforms/functionalize.py turns those writes into renamings (and view scatters) so the trace the
rest of the pipeline sees is functional. Also slice_scatter/select_scatter, the functional inverses of views, and the
"inplace" fallbacks (asked before the opaque ones) for in-place Tensor methods and torch callables with no op.
"""
from __future__ import annotations

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.ir import proxies
from jitcore.ir.proxies import TENSOR_METHODS, TensorProxy, register_tensor_method
from jitcore.ir.symbol import Tag
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops import prims_shape as ps
from jitcore.ops import torch_complex, torch_map
from jitcore.ops import torch_elementwise as te
from jitcore.ops.metadata_inplace import SHAPE_METHODS, metadata_function, metadata_method
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.rng_generators import gen_kwargs
from jitcore.ops.torch_creation import draw_like, fill_order
from jitcore.ops.torch_elementwise import to_dtype
from jitcore.ops.torch_index import (
    check_put_dtype,
    getitem,
    grad_fills_into_integers,
    key_index_kinds,
    setitem,
)
from jitcore.ops.torch_shape import size_max
from jitcore.ops.utils import check, is_number, same_size, slice_indices, type_name

T = torch.Tensor
INPLACE = (Tag.INPLACE,)

# in-place methods that change a tensor's metadata (shape, strides, requires_grad) rather than its values
_METADATA_INPLACE = frozenset({
    "squeeze_", "unsqueeze_", "transpose_", "t_", "swapaxes_", "swapdims_", "resize_", "resize_as_", "as_strided_",
    "set_", "detach_", "requires_grad_", "share_memory_", "retain_grad_", "rename_", "refine_names_", "align_to_",
})
# of those, the ones that change what later code sees (the others are named-tensor or storage-sharing calls), which
# are refused; the shape ones (SHAPE_METHODS) run: jitcore/ops/metadata_inplace.py
_METADATA_REFUSED = frozenset({"set_", "detach_", "requires_grad_"})


def write(op: str, self, value):
    """self <- value (eager's in-place semantics: value's dtype must cast to self's, its shape must be self's)."""
    check(isinstance(self, TensorProxy), lambda: f"{op}: expected a tensor to write into, got {type(self).__name__}")
    if isinstance(value, TensorProxy):
        check(torch.can_cast(value.dtype, self.dtype),
              lambda: f"{op}: result type {type_name(value.dtype)} can't be cast to the desired output type "
                      f"{type_name(self.dtype)}")
        check(tuple(value.shape) == tuple(self.shape) or _broadcasts_to(value.shape, self.shape),
              lambda: f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
                      f"{list(value.shape)}")
        value = te.expand_to(to_dtype(value, self.dtype), tuple(self.shape))
    else:
        value = pc.full(tuple(self.shape), value, device=self.device, dtype=self.dtype)
    return pm.copy_(value, self)


def cast_write(op: str, self, value):
    """self <- value with copy_'s semantics: value (a tensor of any dtype and device, broadcast to self's shape)
    converted to self's dtype, as eager's `x.copy_(v)` and `x[basic key] = v` do; a number written as self's dtype."""
    if not isinstance(value, TensorProxy):
        return write(op, self, value)
    value = te.expand_to(value, tuple(self.shape))
    if value.device != self.device:
        value = pe.device_put(value, self.device)
    return pm.copy_(to_dtype(value, self.dtype), self)


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(same_size(s, t) or s == 1 or s == t for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))))


# -- foo_ for each functional op foo that torch has an in-place variant of (the rows are below, after setitem_) -----
# in-place variants whose result dtype must be self's exactly (eager refuses even a cast that can_cast allows)
_EXACT_RESULT_DTYPE = frozenset({"float_power"})


# in-place fills of a value (eager's masked_fill_, index_put_, index_fill_, fill_, x[mask] = v): into an integer
# tensor, a value that requires grad gives eager's integer tensor autograd history (which its own backward then
# refuses: an integer gradient); jitcore's integer tensors carry none, as every other op's (tests/fuzz.py
# _integer_history), where the functional forms raise eager's "Autograd not support dtype"
_FILL_VALUE = frozenset({"masked_fill", "index_put", "index_fill"})


def _inplace_of(name: str, functional):
    def body(self, *args, **kwargs):
        if name in _FILL_VALUE and isinstance(self, TensorProxy):  # (eager's functional fill raises there)
            with grad_fills_into_integers():
                value = functional(self, *args, **kwargs)
        else:
            value = functional(self, *args, **kwargs)
        if name in _EXACT_RESULT_DTYPE and isinstance(value, TensorProxy):
            check(value.dtype == self.dtype, lambda: f"the base given to {name}_ has dtype {type_name(self.dtype)} "
                  f"but the operation's result requires dtype {type_name(value.dtype)}")
        return write(f"{name}_", self, value)

    body.__name__ = f"{name}_"
    body.__doc__ = f"self.{name}_(...): {name} written into self."
    return body


def _torch_inplace_aliases(name: str) -> tuple:
    fns = [getattr(T, f"{name}_")]
    for mod in (torch, torch.nn.functional):
        f = getattr(mod, f"{name}_", None)
        if callable(f) and not isinstance(f, type):
            fns.append(f)
    return tuple(fns)


def _inplace(op_id: str):
    """The op `self.foo_(...)` (op_id "ltorch.foo_"): the functional Tensor method foo's result written into self."""
    iname = op_id.removeprefix("ltorch.")
    name = iname.removesuffix("_")
    return torchsymbol(*_torch_inplace_aliases(name), id=op_id, method=iname, tags=INPLACE)(
        _inplace_of(name, TENSOR_METHODS[name]))


# -- in-place ops with no functional twin in the table ------------------------------------------------------------
@torchsymbol(T.copy_, method="copy_", tags=INPLACE, id="ltorch.copy_")
def copy_(self, src, non_blocking=False):
    if not isinstance(src, TensorProxy):
        return write("copy_", self, src)
    check(_broadcasts_to(src.shape, self.shape),
          lambda: f"copy_: the size of src {list(src.shape)} must be broadcastable to self {list(self.shape)}")
    return cast_write("copy_", self, src)


@torchsymbol(T.zero_, torch.zero_, method="zero_", tags=INPLACE, id="ltorch.zero_")
def zero_(self):
    return write("zero_", self, 0)


@torchsymbol(T.fill_, torch.fill_, method="fill_", tags=INPLACE, id="ltorch.fill_")
def fill_(self, value):
    if isinstance(value, TensorProxy):
        check(value.ndim == 0, lambda: f"fill_ only supports 0-dimension value tensor but got tensor with "
                                       f"{value.ndim} dimensions.")
        return write("fill_", self, te.expand_to(to_dtype(value, self.dtype), tuple(self.shape)))
    return write("fill_", self, value)


def _fill(self, draw, serial_normal=None):
    """draw(shape) written into self in the order eager's in-place fill visits self's memory (see fill_order): drawn
    contiguous in that order, then permuted back. serial_normal: normal_'s draw for a non-contiguous self (eager's
    CPU normal_ batches its draws only into a contiguous tensor)."""
    order = fill_order(self)
    if order and serial_normal is not None and self.device.type == "cpu":
        draw = serial_normal
    return draw_like(self, draw, order or ())


@torchsymbol(T.uniform_, method="uniform_", tags=INPLACE + (Tag.RANDOM,), id="ltorch.uniform_")
def uniform_(self, from_=0, to=1, *, generator=None):
    return write("uniform_", self, _fill(self, lambda shape: pc.uniform(
        shape, float(from_), float(to), device=self.device, dtype=self.dtype, **gen_kwargs(generator))))


@torchsymbol(T.normal_, method="normal_", tags=INPLACE + (Tag.RANDOM,), id="ltorch.normal_")
def normal_(self, mean=0, std=1, *, generator=None):
    def draw(shape, how=pc.normal):
        return how(shape, float(mean), float(std), device=self.device, dtype=self.dtype, **gen_kwargs(generator))

    return write("normal_", self, _fill(self, draw, lambda shape: draw(shape, pc.normal_serial)))


@torchsymbol(T.bernoulli_, method="bernoulli_", tags=INPLACE + (Tag.RANDOM,), id="ltorch.bernoulli_")
def bernoulli_(self, p=0.5, *, generator=None):
    gen = gen_kwargs(generator)
    if isinstance(p, TensorProxy):  # eager's draws: bernoulli_(Tensor p) / bernoulli_(float p) on self's dtype
        prob = p if p.dtype.is_floating_point else to_dtype(p, torch.float32)
        return write("bernoulli_", self, pc.bernoulli_tensor(prob, tuple(self.shape), dtype=self.dtype, **gen))
    return write("bernoulli_", self, _fill(self, lambda shape: pc.bernoulli(
        shape, float(p), device=self.device, dtype=self.dtype, **gen)))


_REQUIRED = object()


def _sampler_param(op, pname, value) -> float:
    check(value is not _REQUIRED, lambda: f"{op}() missing required argument '{pname}'")
    check(is_number(value), lambda: f"{op}: {pname} must be a number, got {value!r}")
    return float(value)


def _sampler(op_id: str, spec: tuple):
    """Tensor.<kind>_ (op_id "ltorch.<kind>_"): eager's draw on self's shape and dtype (prims.sample); spec: its
    parameters (name, default), in order."""
    name = op_id.removeprefix("ltorch.")
    kind = name.removesuffix("_")

    def body(self, *args, generator=None, **kwargs):
        check(len(args) <= len(spec) and set(kwargs) <= {n for n, _ in spec},
              lambda: f"{name}() got unexpected arguments {args!r} {kwargs!r}")
        params = tuple(_sampler_param(name, pname, args[i] if i < len(args) else kwargs.get(pname, default))
                       for i, (pname, default) in enumerate(spec))
        return write(name, self, _fill(self, lambda shape: pc.sample(kind, shape, params, device=self.device,
                                                                     dtype=self.dtype, **gen_kwargs(generator))))

    body.__name__ = name
    return torchsymbol(getattr(T, name), method=name, id=op_id, tags=INPLACE + (Tag.RANDOM,))(body)


exponential_ = _sampler("ltorch.exponential_", (("lambd", 1.0),))
cauchy_ = _sampler("ltorch.cauchy_", (("median", 0.0), ("sigma", 1.0)))
log_normal_ = _sampler("ltorch.log_normal_", (("mean", 1.0), ("std", 2.0)))
geometric_ = _sampler("ltorch.geometric_", (("p", _REQUIRED),))


# -- x[key] = value ---------------------------------------------------------------------------------------------------
def _basic_key(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or (isinstance(k, (int, slice)) and not isinstance(k, bool)) for k in items)


@torchsymbol(T.__setitem__, id="ltorch.setitem_", tags=INPLACE)  # (`x[k] = v` calls it: __setitem__ below)
def setitem_(self, indices, value):
    """`self[indices] = value`: a write into the view self[indices] for basic keys, else the functional setitem."""
    if _basic_key(indices):
        view = getitem(self, indices)
        if isinstance(value, TensorProxy):
            check(_broadcasts_to(value.shape, view.shape) or value.numel() == view.numel() == 1 or
                  _strip_ones(value.shape) == _strip_ones(view.shape),
                  lambda: f"setitem: shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast "
                          f"to indexing result of shape {list(view.shape)}")
            if not _broadcasts_to(value.shape, view.shape):
                value = ps.reshape(value, tuple(view.shape))
        return cast_write("setitem_", view, value)  # (eager copies into the view: any dtype casts)
    out = setitem(self, indices, value)
    check_put_dtype(self, key_index_kinds(indices), value if isinstance(value, TensorProxy) else None)
    return write("setitem_", self, out)


def _strip_ones(shape):
    s = list(shape)
    while s and s[0] == 1:
        s.pop(0)
    return tuple(s)


# -- functional inverses of views (what a write into a view does to its base) ----------------------------------------
def _scatter_slice(input, src, dim, start, end, step):
    """input with input[..., start:end:step, ...] (at dim) replaced by src, as pad + where (fusible).

    The result has input's own size proxies: the padded size at dim is `start + hi + n + (n - 1) * (step - 1)`, which
    is `size` for every call but is a new proxy (its expression simplifies to size's); where() with input as its
    first value takes input's shape (prims.where's result has the shape of its first value), so later lines and the
    decompositions reading the result's sizes read size itself, not a number only this decomposition computes
    (fuzz seed 101285: cdist of a tensor written by a slice assignment)."""
    size = input.shape[dim]
    n = src.shape[dim]
    if n == 0:
        return input
    config = [(0, 0, 0)] * input.ndim
    config[dim] = (start, size - (start + (n - 1) * step + 1), step - 1)
    placed = ps.pad(to_dtype(src, input.dtype), 0, config)
    keep = ps.pad(pc.full(tuple(src.shape), False, device=input.device, dtype=torch.bool), True, config)
    out = te.where(keep, input, placed)
    check(all(a is b or (type(a) is int and a == b) for a, b in zip(out._shape, input._shape)),
          lambda: f"slice_scatter: the result's shape {tuple(out.shape)} is not the input's {tuple(input.shape)}")
    return out


@torchsymbol(torch.slice_scatter, T.slice_scatter, method="slice_scatter", id="ltorch.slice_scatter")
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    d = dim % max(input.ndim, 1)
    s, e, st = slice_indices(slice(start, end, step), input.shape[d])  # symbolic bounds stay symbolic
    return _scatter_slice(input, src, d, s, size_max(s, e), st)


@torchsymbol(torch.select_scatter, T.select_scatter, method="select_scatter", id="ltorch.select_scatter")
def select_scatter(input, src, dim, index):
    d = dim % max(input.ndim, 1)
    i = index % input.shape[d]
    shape = list(input.shape)
    shape[d] = 1
    return _scatter_slice(input, ps.reshape(src, tuple(shape)), d, i, i + 1, 1)


# foo_ for each Tensor method foo with an op and an in-place twin in torch (tests/test_registry.py checks that none
# is missing); made after setitem_ so the ops keep their order in the registry
exp_ = _inplace("ltorch.exp_")
conj_physical_ = _inplace("ltorch.conj_physical_")
exp2_ = _inplace("ltorch.exp2_")
expm1_ = _inplace("ltorch.expm1_")
log_ = _inplace("ltorch.log_")
log1p_ = _inplace("ltorch.log1p_")
log2_ = _inplace("ltorch.log2_")
log10_ = _inplace("ltorch.log10_")
sin_ = _inplace("ltorch.sin_")
cos_ = _inplace("ltorch.cos_")
tan_ = _inplace("ltorch.tan_")
asin_ = _inplace("ltorch.asin_")
arcsin_ = _inplace("ltorch.arcsin_")
acos_ = _inplace("ltorch.acos_")
arccos_ = _inplace("ltorch.arccos_")
atan_ = _inplace("ltorch.atan_")
arctan_ = _inplace("ltorch.arctan_")
sinh_ = _inplace("ltorch.sinh_")
cosh_ = _inplace("ltorch.cosh_")
tanh_ = _inplace("ltorch.tanh_")
asinh_ = _inplace("ltorch.asinh_")
arcsinh_ = _inplace("ltorch.arcsinh_")
acosh_ = _inplace("ltorch.acosh_")
arccosh_ = _inplace("ltorch.arccosh_")
atanh_ = _inplace("ltorch.atanh_")
arctanh_ = _inplace("ltorch.arctanh_")
sqrt_ = _inplace("ltorch.sqrt_")
rsqrt_ = _inplace("ltorch.rsqrt_")
reciprocal_ = _inplace("ltorch.reciprocal_")
sigmoid_ = _inplace("ltorch.sigmoid_")
erf_ = _inplace("ltorch.erf_")
erfc_ = _inplace("ltorch.erfc_")
erfinv_ = _inplace("ltorch.erfinv_")
lgamma_ = _inplace("ltorch.lgamma_")
digamma_ = _inplace("ltorch.digamma_")
neg_ = _inplace("ltorch.neg_")
negative_ = _inplace("ltorch.negative_")
abs_ = _inplace("ltorch.abs_")
absolute_ = _inplace("ltorch.absolute_")
sign_ = _inplace("ltorch.sign_")
bitwise_not_ = _inplace("ltorch.bitwise_not_")
floor_ = _inplace("ltorch.floor_")
ceil_ = _inplace("ltorch.ceil_")
trunc_ = _inplace("ltorch.trunc_")
round_ = _inplace("ltorch.round_")
logical_not_ = _inplace("ltorch.logical_not_")
square_ = _inplace("ltorch.square_")
frac_ = _inplace("ltorch.frac_")
nan_to_num_ = _inplace("ltorch.nan_to_num_")
add_ = _inplace("ltorch.add_")
sub_ = _inplace("ltorch.sub_")
subtract_ = _inplace("ltorch.subtract_")
mul_ = _inplace("ltorch.mul_")
multiply_ = _inplace("ltorch.multiply_")
div_ = _inplace("ltorch.div_")
divide_ = _inplace("ltorch.divide_")
true_divide_ = _inplace("ltorch.true_divide_")
floor_divide_ = _inplace("ltorch.floor_divide_")
remainder_ = _inplace("ltorch.remainder_")
fmod_ = _inplace("ltorch.fmod_")
pow_ = _inplace("ltorch.pow_")
atan2_ = _inplace("ltorch.atan2_")
arctan2_ = _inplace("ltorch.arctan2_")
copysign_ = _inplace("ltorch.copysign_")
nextafter_ = _inplace("ltorch.nextafter_")
bitwise_and_ = _inplace("ltorch.bitwise_and_")
bitwise_or_ = _inplace("ltorch.bitwise_or_")
bitwise_xor_ = _inplace("ltorch.bitwise_xor_")
bitwise_left_shift_ = _inplace("ltorch.bitwise_left_shift_")
bitwise_right_shift_ = _inplace("ltorch.bitwise_right_shift_")
eq_ = _inplace("ltorch.eq_")
ne_ = _inplace("ltorch.ne_")
not_equal_ = _inplace("ltorch.not_equal_")
lt_ = _inplace("ltorch.lt_")
less_ = _inplace("ltorch.less_")
le_ = _inplace("ltorch.le_")
less_equal_ = _inplace("ltorch.less_equal_")
gt_ = _inplace("ltorch.gt_")
greater_ = _inplace("ltorch.greater_")
ge_ = _inplace("ltorch.ge_")
greater_equal_ = _inplace("ltorch.greater_equal_")
logical_and_ = _inplace("ltorch.logical_and_")
logical_or_ = _inplace("ltorch.logical_or_")
logical_xor_ = _inplace("ltorch.logical_xor_")
clamp_ = _inplace("ltorch.clamp_")
clip_ = _inplace("ltorch.clip_")
clamp_min_ = _inplace("ltorch.clamp_min_")
clamp_max_ = _inplace("ltorch.clamp_max_")
lerp_ = _inplace("ltorch.lerp_")
addcmul_ = _inplace("ltorch.addcmul_")
addcdiv_ = _inplace("ltorch.addcdiv_")
hypot_ = _inplace("ltorch.hypot_")
xlogy_ = _inplace("ltorch.xlogy_")
float_power_ = _inplace("ltorch.float_power_")
heaviside_ = _inplace("ltorch.heaviside_")
deg2rad_ = _inplace("ltorch.deg2rad_")
rad2deg_ = _inplace("ltorch.rad2deg_")
sinc_ = _inplace("ltorch.sinc_")
logit_ = _inplace("ltorch.logit_")
sgn_ = _inplace("ltorch.sgn_")
cumsum_ = _inplace("ltorch.cumsum_")
cumprod_ = _inplace("ltorch.cumprod_")
scatter_ = _inplace("ltorch.scatter_")
scatter_add_ = _inplace("ltorch.scatter_add_")
index_add_ = _inplace("ltorch.index_add_")
index_copy_ = _inplace("ltorch.index_copy_")
index_fill_ = _inplace("ltorch.index_fill_")
index_put_ = _inplace("ltorch.index_put_")
masked_fill_ = _inplace("ltorch.masked_fill_")
masked_scatter_ = _inplace("ltorch.masked_scatter_")
tril_ = _inplace("ltorch.tril_")
triu_ = _inplace("ltorch.triu_")
addmm_ = _inplace("ltorch.addmm_")
addmv_ = _inplace("ltorch.addmv_")
baddbmm_ = _inplace("ltorch.baddbmm_")
addbmm_ = _inplace("ltorch.addbmm_")
addr_ = _inplace("ltorch.addr_")
relu_ = _inplace("ltorch.relu_")

# augmented assignment on tensors is in place (x += y is x.add_(y), with x rebound to the result)
_AUGMENTED = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
              "__ifloordiv__": "floor_divide_", "__imod__": "remainder_", "__ipow__": "pow_",
              "__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
              "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_"}
for _dunder, _name in _AUGMENTED.items():
    if _name in TENSOR_METHODS:
        register_tensor_method(_dunder, TENSOR_METHODS[_name])
# `x[k] = v` on a proxy is this in-place write, not the functional ltorch.setitem (torch_index.py) registered first
register_tensor_method("__setitem__", setitem_, replace=True)


# -- in-place Tensor methods with no op: run the opaque method on a clone, then write the result -----------------------
_OPAQUE_INPLACE: dict = {}


def _metadata_inplace(name: str):
    """x.set_(y), x.detach_(), x.requires_grad_() inside a jitted function: the tensor keeps its identity but changes
    storage or autograd state, which the trace (values flow through renamings) cannot express.
    A call that changes nothing runs as the no-op it is; any other raises, never a silently stale tensor."""
    method = getattr(T, name)

    def call(self, *args, **kwargs):
        if _metadata_unchanged(name, method, self, args, kwargs):
            return self
        raise UnsupportedError(
            "in-place metadata change",
            f"Tensor.{name} changes a tensor's {_WHAT_CHANGES.get(name, 'shape or strides')} in place",
            hint=_HINTS.get(name, f"use the out-of-place form and rebind the name: `y = y.{name[:-1]}(...)`"))

    return call


_WHAT_CHANGES = {"detach_": "autograd history", "requires_grad_": "requires_grad flag", "set_": "storage"}
_HINTS = {
    "detach_": "use `y = y.detach()`",
    "requires_grad_": "make the tensor require grad outside the jitted function (a leaf created inside one has "
                      "no .grad to fill), or use `y = y.detach().requires_grad_()` eagerly",
    "set_": "assign a new tensor instead: `y = other`",
}


def _metadata_unchanged(name, method, self, args, kwargs) -> bool:
    """Whether the call would leave `self` as it is (autograd state)."""
    if not isinstance(self, TensorProxy):
        return False
    if name == "requires_grad_":
        flag = args[0] if args else kwargs.get("requires_grad", True)
        return isinstance(flag, bool) and flag == self.requires_grad
    if name == "detach_":
        return not self.requires_grad
    return False


def _inplace_method(name: str):
    """The "inplace" Tensor-method fallback (proxies.METHOD_FALLBACKS, asked before the opaque one): a metadata
    in-place method refused, an in-place method as the opaque method over a clone plus the write; None for any other
    method (the opaque fallback takes it)."""
    if name in SHAPE_METHODS:
        return metadata_method(name)
    if name in _METADATA_REFUSED:
        return _metadata_inplace(name)
    if not name.endswith("_") or name.startswith("_") or name in _METADATA_INPLACE:
        return None
    if name in _OPAQUE_INPLACE:
        return _OPAQUE_INPLACE[name]
    method = getattr(T, name)

    def functional(x, *args, **kwargs):
        return method(x.clone(), *args, **kwargs)

    functional.__name__ = f"{name}functional"
    functional.stands_for = method  # the torch method it runs (opaque.draws_random asks it)
    op = opaque_symbol(functional)

    def call(self, *args, **kwargs):
        return write(name, self, op(self, *args, **kwargs))

    _OPAQUE_INPLACE[name] = call
    return call


proxies.METHOD_FALLBACKS.register("inplace", _inplace_method)


# -- torch functions with no op that write into arguments (torch.i0_, torch._foreach_mul_, native_batch_norm's running
# stats, aten in-place overloads): the functional form over clones, then the writes ---------------------------------
_OPAQUE_INPLACE_FUNCTIONS: dict = {}


def _schema_of(fn):
    if isinstance(fn, compat.OpOverload):
        return fn._schema
    packet = fn if isinstance(fn, compat.OpOverloadPacket) else None
    if packet is None and type(fn) is type(torch.add) and getattr(fn, "__module__", None) == "torch":
        try:  # torch.native_batch_norm: the aten operator of the same name
            packet = getattr(torch.ops.aten, fn.__name__)
        except (AttributeError, RuntimeError):
            return None
    if not isinstance(packet, compat.OpOverloadPacket) or not packet.overloads():
        return None
    names = packet.overloads()
    return getattr(packet, "default" if "default" in names else names[0])._schema


def _written_arguments(fn) -> list[tuple[int, str]] | None:
    """(position, name) of the arguments torch callable fn writes into, from its aten schema, or the first one for a
    torch builtin named like an in-place function; None when it writes none."""
    schema = _schema_of(fn)
    if schema is not None:
        written = [(i, a.name) for i, a in enumerate(schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only]
        return written or None
    name = getattr(fn, "__name__", "")
    if type(fn) is type(torch.add) and name.endswith("_") and not name.endswith("__") and name not in _METADATA_INPLACE:
        return [(0, "self")]
    return None


def _targets(written, args, kwargs) -> list:
    """The written arguments of this call; None where the call passes no tensor there (an overload with other
    parameters, e.g. _native_batch_norm_legit without running stats, whose schema is not the default's)."""
    found = [args[i] if i < len(args) else kwargs.get(name) for i, name in written]
    return [t if isinstance(t, (list, tuple)) or hasattr(t, "shape") else None for t in found]


def _with_targets(written, args, kwargs, values):
    args, kwargs = list(args), dict(kwargs)
    for (i, name), v in zip(written, values):
        if v is None:
            continue
        if i < len(args):
            args[i] = v
        elif name in kwargs:
            kwargs[name] = v
    return args, kwargs


def _clone(t):
    return [x.clone() for x in t] if isinstance(t, (list, tuple)) else None if t is None else t.clone()


def opaque_inplace_call(fn):
    """For a torch callable with no op that writes into some of its arguments (tensors or lists of tensors): a call
    recording its functional form (an opaque op over clones of those arguments, returning its results and the written
    clones) and the writes back, so later reads see them; None for callables that write nothing."""
    try:
        found = _OPAQUE_INPLACE_FUNCTIONS.get(fn)
    except TypeError:
        return None
    if found is not None:
        return found or None
    if type(fn) is type(torch.add) and getattr(fn, "__name__", "") in SHAPE_METHODS:  # torch.as_strided_(x, ...)
        _OPAQUE_INPLACE_FUNCTIONS[fn] = found = metadata_function(fn)
        return found
    written = _written_arguments(fn)
    if written is None:
        _OPAQUE_INPLACE_FUNCTIONS[fn] = False  # asked once per callable
        return None
    name = getattr(fn, "__name__", str(fn))

    def functional(*args, **kwargs):
        clones = [_clone(t) for t in _targets(written, args, kwargs)]
        args, kwargs = _with_targets(written, args, kwargs, clones)
        return fn(*args, **kwargs), clones

    functional.__name__ = f"{name}functional".replace(".", "_")
    functional.stands_for = fn
    op = opaque_symbol(functional)

    def call(*args, **kwargs):
        result, values = op(*args, **kwargs)
        written_back = []
        for target, value in zip(_targets(written, args, kwargs), values):
            if isinstance(target, (list, tuple)):
                for t, v in zip(target, value):
                    write(name, t, v)
            elif target is not None:
                written_back.append(write(name, target, value))
        # an in-place function returns the tensor it wrote (torch.i0_(x) is x)
        return written_back[0] if name.endswith("_") and written_back and isinstance(result, TensorProxy) else result

    _OPAQUE_INPLACE_FUNCTIONS[fn] = call
    return call


torch_map.FUNCTION_FALLBACKS.register("inplace", opaque_inplace_call)


# -- `z.real = v`, `z.imag = v`: eager's setters copy v into the view -------------------------------------------------
def _part_setter(part):
    def set_part(z, value):
        copy_(part(z), value)

    return set_part


proxies.register_tensor_setter("real", _part_setter(torch_complex.real))
proxies.register_tensor_setter("imag", _part_setter(torch_complex.imag))
