"""IR values: proxies stand for runtime values while a trace is recorded.

TensorProxy carries shape (ints or IntegerProxy), dtype and device (torch's own objects) and requires_grad;
its methods and operators dispatch through TENSOR_METHODS, the table jitcore/ops/torch_map.py fills, so
`x.unsqueeze(1)` on a proxy records the same op as `torch.unsqueeze(x, 1)`. The IR imports nothing above it: the
few ops it records itself (number arithmetic, __torch_function__, an alias) it finds in IR_OPS, which jitcore/ops
fills at import like TENSOR_METHODS; Tensor methods with no op go to METHOD_FALLBACKS, an ordered chain.
"""
from __future__ import annotations

import optree
import torch

from jitcore.errors import DataDependentError, UnsupportedError
from jitcore.ir import arith
from jitcore.ir import devices as _devices
from jitcore.ir import dtypes as _dtypes
from jitcore.ir.context import get_tracectx, services
from jitcore.ir.pytree import NAMESPACE
from jitcore.ir.strides import dense_strides
from jitcore.ir.tables import enter


class Fallbacks:
    """An ordered chain of factories, asked in turn for a key (a Tensor method name, a torch callable): the first
    answer that is not None wins. The order is fixed when the chain is made, so it does not depend on which module
    registers first."""

    def __init__(self, what: str, order: tuple[str, ...]):
        self.what, self.order = what, tuple(order)
        self.factories: dict = {}
        self._chain: tuple = ()

    def register(self, name: str, factory, *, replace: bool = False):
        """factory(key) -> a callable for key, or None to leave it to the next fallback."""
        if name not in self.order:
            raise ValueError(f"{self.what}: unknown fallback {name!r} (the chain's order is {self.order})")
        enter(self.factories, f"{self.what}: fallback", name, factory, replace=replace)
        self._chain = tuple(self.factories[n] for n in self.order if n in self.factories)
        return factory

    def __call__(self, key):
        for factory in self._chain:
            fn = factory(key)
            if fn is not None:
                return fn
        return None


# -- the tables jitcore/ops fills when it is imported, each only through its register_* function below -------------
# (tests/test_architecture.py checks that no other module writes them). Reads stay plain dict lookups.
# name -> callable(self, *args, **kwargs); filled by jitcore.ops.torch_map (register_tensor_method)
TENSOR_METHODS: dict = {}
# property name -> callable(self) for tensor properties that are ops (x.T, x.mT); filled by jitcore.ops
TENSOR_PROPERTIES: dict = {}
# torch.Tensor attributes a proxy's own attributes shadow (a proxy's `name` is its name in the trace): name -> what
# the user's code reads instead, callable(proxy); the interpreter's attribute load asks this table first
SHADOWED_TENSOR_ATTRS: dict = {}
# tensor attributes whose assignment is a write (`z.real = v`: eager copies v into the view): name -> callable(self,
# value); filled by jitcore.ops.torch_inplace; the interpreter's attribute store asks it
TENSOR_SETTERS: dict = {}


def register_tensor_method(name: str, fn, *, replace: bool = False):
    """`proxy.<name>(...)` (and an operator dunder `__add__`) calls fn(proxy, ...). Returns fn."""
    return enter(TENSOR_METHODS, "Tensor method", name, fn, replace=replace)


def register_tensor_property(name: str, fn, *, replace: bool = False):
    """`proxy.<name>` (a property that is an op: x.T, x.mT) is fn(proxy). Returns fn."""
    return enter(TENSOR_PROPERTIES, "Tensor property", name, fn, replace=replace)


def register_tensor_setter(name: str, fn, *, replace: bool = False):
    """`proxy.<name> = value` calls fn(proxy, value) (a write, as eager's property setter). Returns fn."""
    return enter(TENSOR_SETTERS, "Tensor attribute setter", name, fn, replace=replace)


def register_shadowed_attr(name: str, fn, *, replace: bool = False):
    """The user's `tensor.<name>` reads fn(proxy) where the proxy's own attribute would shadow torch's. Returns fn."""
    return enter(SHADOWED_TENSOR_ATTRS, "shadowed Tensor attribute", name, fn, replace=replace)


def _version_refused(proxy):
    raise UnsupportedError("tensor attribute", "reading a tensor's ._version inside a jitted function: its version "
                           "counter counts the in-place writes made to it in this process, which differ on every "
                           "call (and a traced program's writes are not made one by one as eager's)",
                           hint="read x._version outside the jitted function and pass what you need as an argument")


register_shadowed_attr("name", lambda proxy: None)  # eager: None (torch sets it for no user tensor)
register_shadowed_attr("_version", _version_refused)
# Tensor methods with no entry in TENSOR_METHODS, asked in this order: "inplace" (jitcore/ops/torch_inplace.py: an
# in-place method as its functional form over a clone plus the write; metadata in-place methods refused), then
# "opaque" (jitcore/ops/opaque.py: any torch.Tensor method as an opaque op)
METHOD_FALLBACKS = Fallbacks("Tensor methods with no op", ("inplace", "opaque"))

# The ops the IR records through itself: role -> (how the IR calls it, the module that registers it at import)
IR_OP_ROLES = {
    "number_op": ("call(name, *args): Python arithmetic or a comparison on number proxies",
                  "jitcore/ops/prims_python.py"),
    "torch_function": ("dispatch(func, args, kwargs): a torch callable called on a proxy (__torch_function__)",
                       "jitcore/ops/torch_map.py"),
    "reshape": ("reshape(x, shape): the alias a no-grad self view records (jitcore/ir/symbol.py)",
                "jitcore/ops/prims_shape.py"),
}
IR_OPS: dict = {}  # role -> the op; see register_ir_op


def register_ir_op(role: str, fn, *, replace: bool = False):
    """Register fn as the op the IR records through for `role` (one of IR_OP_ROLES)."""
    if role not in IR_OP_ROLES:
        raise ValueError(f"unknown IR op role {role!r}; the roles are {sorted(IR_OP_ROLES)}")
    return enter(IR_OPS, "IR op role", role, fn, replace=replace)


def ir_op(role: str):
    """The op registered for `role`; a clear error when none is (jitcore.ops was not imported)."""
    fn = IR_OPS.get(role)
    if fn is None:
        what, owner = IR_OP_ROLES[role]
        raise RuntimeError(f"the IR records {role!r} ({what}) through an op that is not registered: {owner} "
                           "registers it when jitcore.ops is imported")
    return fn


class Proxy:
    """A named stand-in for a value; names are unique within the trace that made the proxy."""

    __slots__ = ("name",)
    prefix = "p"

    def __init__(self, name: str | None = None):
        trace = get_tracectx()
        if name is None:
            if trace is None:
                raise RuntimeError("proxies are made inside a trace (jitcore.ir.trace.tracectx)")
            name = trace.make_name(self.prefix)
        elif trace is not None:
            trace.add_name(name)
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def replace_name(self, name: str):
        """A copy of this proxy under another name (used by passes that rename)."""
        raise NotImplementedError


class NumberProxy(Proxy, arith.SymbolicNumber):
    """A Python number whose value may change between calls (cache="symbolic values").

    `value` is the value seen while tracing; `expr` its expression over the prologue's input symbols; `lower`
    a lower bound the prologue checks (2 for symbolic sizes). `runtime`: the number depends on a size known only
    when the program runs (the row count of `nonzero`, see run_time_size): the prologue cannot compute it, so
    Python's concrete answers about it go through the data guards instead of predicates. Arithmetic and
    comparisons record PYTHON ops (the "number_op" IR op, jitcore/ops/prims_python.py); a concrete answer (`if`,
    `range`, an index) records a predicate (jitcore/ir/arith.py).
    """

    __slots__ = ("expr", "lower", "python_type", "runtime", "value")

    def __init__(self, value, python_type, name=None):
        super().__init__(name)
        self.value, self.python_type = value, python_type
        self.expr, self.lower, self.runtime = self.name, None, False

    def type_string(self) -> str:
        return self.python_type.__name__

    def replace_name(self, name):
        p = type(self)(self.value, name=name)
        p.expr, p.lower, p.runtime = self.expr, self.lower, self.runtime
        return p

    # -- a concrete answer records the predicate that held (jitcore/ir/arith.py) --------------------------------
    def __bool__(self):
        return bool(_py("ne", self, 0))

    def __int__(self):
        return int(arith.concretize(self))

    def __float__(self):
        return float(arith.concretize(self))

    def __complex__(self):
        return complex(arith.concretize(self))

    def __hash__(self):
        return hash(arith.concretize(self))

    def __str__(self):  # str() of a value drawn per call (random, clocks) needs that value: refused
        if self.expr is None:
            arith.refuse(self)
        if arith.USER_TEXT.get():  # the user's str(n), f"{n!s}", "%s" % n, str(x.shape): the value's text
            return str(arith.concretize(self))
        return self.name

    def __repr__(self):
        if arith.USER_TEXT.get():
            if self.expr is None:
                arith.refuse(self)
            return repr(arith.concretize(self))
        return self.name

    def __format__(self, spec):
        return format(arith.concretize(self), spec)

    def as_float(self):
        """float(self) as a number proxy (float() itself must return a float: the interpreter's float() calls this)."""
        return _py("float", self._symbolic())

    def _symbolic(self):
        """self, if it has an expression over the inputs; a per-call value converted to a Python number is refused."""
        if self.expr is None:
            arith.refuse(self)
        return self

    # roundings of a float stay symbolic (an int proxy); of an int they are the number itself
    def __round__(self, ndigits=None):
        if ndigits is not None:
            return round(arith.concretize(self), ndigits)
        return self._symbolic() if self.python_type is int else _py("round", self._symbolic())

    def __trunc__(self):
        return self._symbolic() if self.python_type is int else _py("trunc", self._symbolic())

    def __floor__(self):
        return self._symbolic() if self.python_type is int else _py("floor", self._symbolic())

    def __ceil__(self):
        return self._symbolic() if self.python_type is int else _py("ceil", self._symbolic())


def _py(name, *args):
    """Record Python number op `name` (add, lt, neg, ...) on number proxies: the "number_op" IR op."""
    fn = IR_OPS.get("number_op") or ir_op("number_op")
    return fn(name, *args)


_NUMBER_TYPES = (int, float, bool, NumberProxy)


def _number_dunder(name, reflected=False):
    def f(self, other):
        if not isinstance(other, _NUMBER_TYPES):
            return NotImplemented
        return _py(name, other, self) if reflected else _py(name, self, other)

    f.__name__ = f"__r{name}__" if reflected else f"__{name}__"
    return f


def _unary_dunder(name):
    def f(self):
        return _py(name, self)

    return f


for _n in ("add", "sub", "mul", "floordiv", "mod", "truediv", "pow"):
    setattr(NumberProxy, f"__{_n}__", _number_dunder(_n))
    setattr(NumberProxy, f"__r{_n}__", _number_dunder(_n, reflected=True))
NumberProxy.__divmod__ = lambda self, other: (self // other, self % other)
NumberProxy.__rdivmod__ = lambda self, other: (other // self, other % self)
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(NumberProxy, f"__{_n}__", _number_dunder(_n))
for _n in ("neg", "abs", "pos"):
    setattr(NumberProxy, f"__{_n}__", _unary_dunder(_n))


def _bitwise(name, reflected=False):
    """`i0 & 3`, `1 << i0`, ...: of ints (Python's bitwise operators; a float operand raises TypeError as eager's)."""
    number = _number_dunder(name, reflected)

    def f(self, other):
        if self.python_type is float or isinstance(other, float) or (
                isinstance(other, NumberProxy) and other.python_type is float):
            return NotImplemented
        return number(self, other)

    f.__name__ = number.__name__
    return f


for _n in ("and", "or", "xor", "lshift", "rshift"):
    setattr(NumberProxy, f"__{_n}__", _bitwise(_n))
    setattr(NumberProxy, f"__r{_n}__", _bitwise(_n, reflected=True))


def _invert(self):
    if self.python_type is float:
        raise TypeError("bad operand type for unary ~: 'float'")
    return _py("invert", self)


NumberProxy.__invert__ = _invert
del _n


class IntegerProxy(NumberProxy):
    __slots__ = ()
    prefix = "i"

    def __init__(self, value, name=None):
        super().__init__(int(value), int, name)

    def __index__(self):
        return arith.concretize(self)

    # the rest of int's API: the number itself (real, numerator, conjugate()) or its value's answer, specialised
    real = numerator = property(lambda self: self)
    imag = property(lambda self: 0)
    denominator = property(lambda self: 1)

    def conjugate(self):
        return self

    def bit_length(self):
        return arith.concretize(self).bit_length()

    def bit_count(self):
        return arith.concretize(self).bit_count()

    def as_integer_ratio(self):
        return self, 1

    def to_bytes(self, *args, **kwargs):
        return arith.concretize(self).to_bytes(*args, **kwargs)


def run_time_size(value: int, upper=None) -> IntegerProxy:
    """A size known only when the program runs (the row count of `nonzero`, of a boolean-mask selection): named
    `u0`, `u1`, ..., >= 0, never bound by the prologue. The program reads it from the tensor that has it
    (jitcore/ops/sizes.py define_sizes); later ops use it symbolically, in every cache mode. `value` is this
    call's (the data guards' answer when Python needs it: jitcore/guards/data_guards.py); `upper`: what it is at most
    on every call (an int or an expression's text: the numel of the tensor a count counts), for the bounds analysis."""
    trace = get_tracectx()
    name = trace.make_name("u")
    trace.names.discard(name)  # (reserved by make_name; the proxy adds it back)
    p = IntegerProxy(value, name=name)
    p.lower, p.runtime = 0, True
    if trace.run_time_sizes is None:
        trace.run_time_sizes = {}
    trace.run_time_sizes[name] = 0  # (its lower bound, for jitcore/ir/arith.py; and for
    arith.declare_lower(name, 0)  # the passes after tracing, which ask in other traces)
    if upper is not None:
        arith.declare_upper(name, upper)
    return p


class FloatProxy(NumberProxy):
    __slots__ = ()
    prefix = "f"

    def __init__(self, value, name=None):
        super().__init__(float(value), float, name)

    # the rest of float's API: the number itself (real, conjugate()) or its value's answer, specialised
    real = property(lambda self: self)
    imag = property(lambda self: 0.0)

    def conjugate(self):
        return self

    def is_integer(self):
        return arith.concretize(self).is_integer()

    def as_integer_ratio(self):
        return arith.concretize(self).as_integer_ratio()

    def hex(self):
        return arith.concretize(self).hex()


class BoolProxy(NumberProxy):
    """The result of a comparison; `cmp` = (op, a, b) it came from; `implied`: decided by known bounds."""

    __slots__ = ("cmp", "implied")
    prefix = "b"

    def __init__(self, value, name=None):
        super().__init__(bool(value), bool, name)
        self.cmp, self.implied = None, False

    def __bool__(self):
        return arith.truth(self)

    def __index__(self):
        return int(self.__bool__())


class SymbolicSize(tuple):
    """torch.Size with symbolic entries (a tensor proxy's shape under cache="symbolic values"): the interpreter's
    `type()` and `isinstance()` answer torch.Size (jitcore/frontend/tracing.py), and slicing, `+` and `*` give a size
    again, as torch.Size's do; a jitted function returning one returns a torch.Size (jitcore/ir/pytree.py)."""

    __slots__ = ()

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return SymbolicSize(r) if type(i) is slice else r

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return SymbolicSize(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return SymbolicSize(tuple(other) + tuple(self))

    def __mul__(self, n):
        return SymbolicSize(tuple(self) * n)

    __rmul__ = __mul__

    def numel(self):
        return _prod(self)

    def __repr__(self):
        return f"torch.Size([{', '.join(map(str, self))}])"


def as_size(entries):
    """torch.Size of `entries`, or a SymbolicSize where one is a proxy."""
    entries = tuple(entries)
    for e in entries:
        if type(e) is not int:
            return SymbolicSize(entries)
    return torch.Size(entries)


# torch.Size and its symbolic stand-in are pytree nodes: their entries may be symbolic sizes, and a jitted function
# that returns a shape returns a torch.Size (rebuilt from the entries the program computed), as eager's does
for _cls in (torch.Size, SymbolicSize):
    optree.register_pytree_node(_cls, lambda s: (tuple(s), None, None), lambda _, c: as_size(c), namespace=NAMESPACE)
del _cls


class TensorProxy(Proxy):
    """A tensor seen while tracing: shape, dtype, device, requires_grad; no data."""

    __slots__ = ("__weakref__", "_shape", "_size", "device", "dtype", "requires_grad")
    prefix = "t"
    __array_priority__ = 1000  # as torch.Tensor's: `np.float32(2) - x` defers to x.__rsub__ instead of converting x

    def __init__(self, shape, dtype: torch.dtype, device, requires_grad: bool = False, name: str | None = None):
        super().__init__(name)
        self._shape = tuple(shape)
        concrete = True
        for s in self._shape:
            if type(s) is not int:
                concrete = False
                if not isinstance(s, IntegerProxy):
                    raise TypeError(f"shape entries are ints, got {s!r} in {shape}")
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        # torch.Size when every size is known, like a tensor's; a tuple holding IntegerProxy otherwise
        self._size = torch.Size(self._shape) if concrete else SymbolicSize(self._shape)
        self.dtype = dtype
        self.device = device if type(device) is torch.device and device.type != "cuda" else _devices.to_device(device)
        self.requires_grad = bool(requires_grad) and _dtypes.is_inexact(dtype)

    # -- metadata, as torch.Tensor exposes it ------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self._size

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self._shape[canonical_dim(dim, len(self._shape))]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    ndimension = dim

    def numel(self) -> int:
        return _prod(self._shape)

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def get_device(self) -> int:
        return -1 if self.device.type == "cpu" else self.device.index

    # x.is_cuda, x.is_cpu, x.is_meta, ...: the device's type (filled in below the class)


    @property
    def layout(self):
        return torch.strided

    # a proxy stands for a dense, strided, unquantized, non-nested tensor (inputs of other layouts are refused)
    is_sparse = is_sparse_csr = is_quantized = is_mkldnn = property(lambda self: False)
    # a dense stand-in for nn.TransformerEncoder's nested batch (jitcore/ops/torch_misc.py) answers True
    is_nested = property(lambda self: (trace := get_tracectx()) is not None and self.name in trace.extra.get(
        "nested_masks", ()))

    @property
    def volatile(self) -> bool:  # removed from torch: always False (eager warns)
        return False

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self):
        """numel * itemsize, as eager (a view counts its own elements): recorded arithmetic under symbolic sizes."""
        return self.numel() * self.dtype.itemsize

    # -- autograd state of the tensor a proxy stands for ---------------------------------------------------------
    def _input_attr(self, name: str, default):
        """An input's attribute read from the tensor it stands for (the frontend's services report it as a value read
        from that input, so it is an input or a guard of its own); `default` for computed tensors."""
        return services().input_attribute(self, name, default)

    @property
    def grad(self):
        """An input's current .grad (a tensor input read through `.grad`, or None, guarded); None for a tensor the
        function computed (eager: a non-leaf's or a new leaf's .grad is None)."""
        return self._input_attr("grad", None)

    @property
    def retains_grad(self) -> bool:
        return self._input_attr("retains_grad", False)

    @property
    def grad_dtype(self):
        if not self.is_leaf:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        return self._input_attr("grad_dtype", self.dtype)

    @property
    def output_nr(self) -> int:
        if self.is_leaf:
            return 0
        self.grad_fn  # noqa: B018  (refused with the reason)

    @property
    def is_leaf(self) -> bool:
        """As eager: tensors that need no grad are leaves; computed ones that need grad are not; an input is what
        the tensor it stands for is (asked to the frontend's services, which guard it)."""
        if not self.requires_grad:
            return True
        known = services().leaf_input(self)
        return False if known is None else known

    def is_inference(self) -> bool:
        """As eager: a tensor made under torch.inference_mode() (and views of one); an input is what the tensor it
        stands for is (asked to the frontend's services, which guard it)."""
        return services().inference_of(self)

    @property
    def grad_fn(self):
        if self.is_leaf:
            return None
        raise UnsupportedError("autograd graph", f"{self.name}.grad_fn inside a jitted function: the autograd graph "
                               "of a jitted call is made when it runs (one node for the whole program)",
                               hint="test `x.requires_grad` or `x.is_leaf` instead, or read grad_fn outside")

    def type_string(self) -> str:
        dims = ", ".join(str(s) for s in self._shape)
        return f"{_devices.short_name(self.device)} {_dtypes.short_name(self.dtype)}[{dims}]"

    def replace_name(self, name):
        return TensorProxy(self._shape, self.dtype, self.device, self.requires_grad, name=name)

    def like(self, shape=None, dtype=None, device=None, requires_grad=None, name=None) -> TensorProxy:
        """A new proxy with this one's metadata except where given."""
        return TensorProxy(
            self._shape if shape is None else shape,
            self.dtype if dtype is None else dtype,
            self.device if device is None else device,
            self.requires_grad if requires_grad is None else requires_grad,
            name=name,
        )

    # -- methods go through the ops table --------------------------------------------------------------------
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        fn = TENSOR_METHODS.get(name)
        if fn is not None:
            return _BoundMethod(fn, self, name)
        prop = TENSOR_PROPERTIES.get(name)
        if prop is not None:
            return prop(self)
        if callable(getattr(torch.Tensor, name, None)):
            fn = METHOD_FALLBACKS(name)
            if fn is not None:
                return _BoundMethod(fn, self, name)
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")

    def __hash__(self):
        return id(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch.* called on a proxy from code we run natively records the mapped op (or an opaque op)."""
        return ir_op("torch_function")(func, args, kwargs or {})

    def _concrete(self, kind: str, what: str):
        """The value Python needs now, from the services of the trace being recorded (jitcore/guards/data_guards.py:
        computed from the call's real inputs and guarded), or a DataDependentError outside the recording."""
        return services().concrete_value(self, kind, what)

    def __bool__(self):
        return self._concrete("bool", "converting a tensor to a Python bool (e.g. `if tensor:`)")

    def __int__(self):
        return self._concrete("int", "converting a tensor to a Python int")

    def __float__(self):
        return self._concrete("float", "converting a tensor to a Python float")

    def __index__(self):
        return self._concrete("index", "using a tensor as a Python index")

    def item(self):
        return self._concrete("item", "tensor.item()")

    def tolist(self):
        return self._concrete("tolist", "tensor.tolist()")

    def numpy(self, *, force: bool = False):
        raise DataDependentError("tensor.numpy() inside a jitted function needs its data (an array shares the "
                                 "tensor's memory, which the traced program does not have)")


    # -- layout: eager's strides, from the services of the trace being recorded (jitcore/frontend/layouts.py) -------
    def eager_layout(self, level: str = "contiguous"):
        """A meta tensor with the sizes and strides eager's value would have (its inputs guarded), or None."""
        return services().eager_layout(self, level)

    def _layout(self, level: str, what: str):
        meta = self.eager_layout(level)
        if meta is None:
            raise UnsupportedError("tensor layout", f"{what} depends on the memory layout of {self.name}, which is "
                                   "not known here (it comes from an op jitcore cannot lay out like eager)",
                                   hint="call .contiguous() first, or compute it outside the jitted function")
        return meta

    def stride(self, dim: int | None = None):
        dense = self._dense_strides() if dim is None or -self.ndim <= dim < self.ndim else None
        if dense is not None:
            return dense if dim is None else dense[dim]
        meta = self._layout("exact", "tensor.stride()")
        return meta.stride() if dim is None else meta.stride(dim)

    def _dense_strides(self):
        """Under symbolic sizes, a densely laid-out tensor's strides over its sizes (jitcore/ir/strides.py), its
        inputs guarded as for is_contiguous(); None for any other layout (its exact strides are read, guarded)."""
        if not any(isinstance(s, NumberProxy) for s in self._shape):
            return None
        meta = self.eager_layout("contiguous")
        return None if meta is None else dense_strides(self._shape, meta)

    def storage_offset(self) -> int:
        return self._layout("exact", "tensor.storage_offset()").storage_offset()

    def is_contiguous(self, memory_format=torch.contiguous_format) -> bool:
        return self._layout("contiguous", "tensor.is_contiguous()").is_contiguous(memory_format=memory_format)

    def data_ptr(self):
        """An Address: only its alignment (`% k`, `& (k - 1)`) is answered, as eager's tensor has it (guarded)."""
        return services().data_ptr(self)

    def untyped_storage(self):
        raise UnsupportedError("tensor memory", "tensor.untyped_storage() / storage() inside a jitted function: "
                               "the traced program has no storage to give",
                               hint="read storages (and their data_ptr) outside the jitted function")

    storage = _typed_storage = untyped_storage

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(TENSOR_METHODS["unbind"](self, 0))

    def __repr__(self):
        if arith.USER_TEXT.get():  # the user's str(x), repr(x), "%s" % x: eager's text shows the values (not a name)
            raise DataDependentError("converting a tensor to text (str, repr or %-formatting) needs its data")
        return self.name

    def __format__(self, spec):
        raise DataDependentError("formatting a tensor's value (f-string or format) needs its data")

    def __array__(self, *args, **kwargs):
        raise DataDependentError("converting a tensor to numpy needs its data")


def _device_flag(kind: str):
    return property(lambda self: self.device.type == kind, doc=f"x.is_{kind}: whether the tensor is on a {kind} device")


for _kind in ("cpu", "cuda", "meta", "xpu", "mps", "ipu", "maia", "mtia", "xla", "vulkan"):
    setattr(TensorProxy, f"is_{_kind}", _device_flag(_kind))
del _kind


class _BoundMethod:
    """`proxy.method` as a callable; also answers __name__ and __self__ like a bound method."""

    __slots__ = ("__name__", "__self__", "fn")

    def __init__(self, fn, obj, name):
        self.fn, self.__self__, self.__name__ = fn, obj, name

    def __call__(self, *args, **kwargs):
        out = self.fn(self.__self__, *args, **kwargs)
        if type(out) is TensorProxy and self.__name__[-1] == "_" and self.__name__[-2:] != "__":
            return self.__self__  # an in-place method hands back the tensor it wrote (`y = x.add_(1)`: y is x)
        return out

    def __repr__(self):
        return f"<method Tensor.{self.__name__} of {self.__self__.name}>"


_INPLACE_DUNDERS = frozenset(f"__i{n}__" for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul", "lshift", "rshift"))


def _dunder(method_name, reflected=False):
    inplace = method_name in _INPLACE_DUNDERS

    def f(self, *args):
        fn = TENSOR_METHODS[method_name]
        if reflected:
            return fn(self, args[0])
        out = fn(self, *args)
        return self if inplace and type(out) is TensorProxy else out  # `x += y` keeps x the same tensor

    return f


# operator dunders -> TENSOR_METHODS entries (torch_map registers '__add__' etc. next to 'add')
for _d in (
    "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod", "rmod",
    "pow", "rpow", "matmul", "rmatmul", "and", "rand", "or", "ror", "xor", "rxor", "lshift", "rlshift",
    "rshift", "rrshift", "neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt", "ge", "getitem",
    "setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor",
    "imatmul", "ilshift", "irshift",
):
    setattr(TensorProxy, f"__{_d}__", _dunder(f"__{_d}__"))
del _d


def canonical_dim(dim: int, rank: int, wrap_scalar: bool = True) -> int:
    """A dim in [0, rank), accepting negatives; rank 0 accepts 0 and -1 like torch."""
    if isinstance(dim, NumberProxy):  # a dim is structure: specialise it
        dim = dim.__index__()
    r = max(rank, 1) if wrap_scalar else rank
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def _prod(sizes):
    """The product of sizes (ints or IntegerProxy); with proxies, the arithmetic is recorded."""
    out = None
    for s in sizes:
        out = s if out is None else out * s
    return 1 if out is None else out


def is_proxy(x) -> bool:
    return isinstance(x, Proxy)


def proxy_for_tensor(t: torch.Tensor, name: str | None = None) -> TensorProxy:
    return TensorProxy(t.shape, t.dtype, t.device, t.requires_grad, name=name)
