"""Executors: the Executor API. An executor says which ops it can run (with a checker on the actual proxies)
and how: each claimed line is replaced by a call of the executor's own symbol, which prints in the trace. It also
answers the memory passes' questions about its lines (safe defaults here). A worked example: OperatorExecutor.
"""
from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from jitcore.ir.codegen import namespace_import, register_namespace_import
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import BoundSymbol, Symbol

_EXECUTORS: dict[str, Executor] = {}


def register_executor(ex: Executor) -> Executor:
    _EXECUTORS[ex.name] = ex
    return ex


def get_executor(name_or_ex) -> Executor:
    """The executor of a name ("torch", "python", "inductor", "nvfuser", or the name of one of your own), or the
    executor itself; an unknown name raises ValueError listing the known ones. `jit(fn, executors=[...])` takes
    names or objects alike.

    >>> from executors import get_executor
    >>> get_executor("torch").name
    'torch'
    """
    if isinstance(name_or_ex, Executor):
        return name_or_ex
    if name_or_ex in ("inductor", "inductor_ex", "nvfuser", "nvfuser_ex"):
        # cycle with executors/__init__ (it imports this module); the fusion executors load on first use
        import executors

        return getattr(executors, name_or_ex if name_or_ex.endswith("_ex") else f"{name_or_ex}_ex")
    try:
        return _EXECUTORS[name_or_ex]
    except KeyError:
        known = sorted({*_EXECUTORS, "inductor", "nvfuser"})
        raise ValueError(f"unknown executor {name_or_ex!r}; known: {known} (or an Executor object)") from None


class Executor:
    """Base of all executors. `name` prints in traces; `is_available()` says whether it can run here."""

    def __init__(self, name: str):
        self.name = name
        register_executor(self)

    def is_available(self) -> tuple[bool, str]:
        return True, ""

    def can_execute(self, bsym: BoundSymbol) -> bool:
        return False

    # -- the memory passes' questions (transforms/memory.py), asked of the executor that claimed a line ----------
    # The defaults are always safe: an executor that says nothing has no line write into a buffer, makes no
    # memory known to be fresh, reads nothing densely and views nothing, so the passes leave its lines alone.

    def out_form(self, bsym: BoundSymbol):
        """None, or `buffer -> the line computing bsym's single tensor result into buffer` (reuse_buffers)."""
        return None

    def makes_fresh(self, bsym: BoundSymbol) -> bool:
        """Whether the line's tensor results are new memory that aliases none of its inputs (reuse_buffers)."""
        return False

    def reads_dense(self, bsym: BoundSymbol) -> bool:
        """Whether the line's kernel copies a broadcast (stride-0) input into dense memory first (densify)."""
        return False

    def is_view_line(self, bsym: BoundSymbol) -> bool:
        """Whether the line only makes a view of its one tensor input (densify follows inputs through it)."""
        return False

    def densify_line(self, a: TensorProxy, output: TensorProxy) -> BoundSymbol | None:
        """None, or the line `output = dense copy of a when a is a broadcast, else a` run by this executor."""
        return None

    def boxed_form(self, bsym: BoundSymbol, dead: list) -> BoundSymbol | None:
        """None, or the line running bsym with its arguments passed in a list the callee empties, the `dead`
        ones (last used by bsym) deleted before the call: the callee can then free each of them after its own last
        use of it, not at its return (del_last_used)."""
        return None

    def __repr__(self):
        return f"<executor {self.name}>"


@dataclass
class Implementation:
    """How an executor runs one op: `symbol` is what the execution trace calls; `checker` may refuse."""

    symbol: Symbol
    checker: Callable | None = None


class _ExecutorNamespace:
    """What `<executor name>.` resolves to in a printed execution trace: the executor's kernels by name."""

    def __init__(self, ex):
        self._ex = ex

    def __getattr__(self, name):
        try:
            fn = self._ex.kernels[name]
        except KeyError:
            raise AttributeError(f"executor {self._ex.name} has no kernel {name!r}") from None
        # kept as an attribute: a program's later lookups of it are plain attribute reads (a kernel's name never
        # names another kernel: _unique_name)
        setattr(self, name, fn)
        return fn


class OperatorExecutor(Executor):
    """Runs ops one at a time with its own kernels; `implmap` is its table: op id -> Implementation.

    Adding your own, in a few lines (`register_implementation` runs an existing op with your kernel,
    `register_operator` makes a new op):

    >>> import torch, jitcore
    >>> from executors import OperatorExecutor
    >>> from jitcore.ops import ltorch
    >>> myex = OperatorExecutor("myex")
    >>> def my_gelu(a, approximate="none"):      # runs on real tensors
    ...     return torch.nn.functional.gelu(a, approximate=approximate)
    >>> _ = myex.register_implementation(ltorch.gelu, my_gelu,   # float32 only; the rest goes to the next executor
    ...                                  checker=lambda a, approximate="none": a.dtype == torch.float32)
    >>> jfn = jitcore.jit(lambda x: torch.nn.functional.gelu(x), executors=[myex])
    >>> jfn(torch.zeros(2))
    tensor([0., 0.])
    >>> print(jitcore.last_traces(jfn)[-1])
    # Constructed by Delete Last Used (free tensors after their last use) (took 0.02 ms)
    # myex: the kernels of executor 'myex'
    import torch
    def computation(t0):
      # t0: "cpu f32[2]"
      t5 = myex.my_gelu(t0)  # t5: "cpu f32[2]"
        # t5 = ltorch.gelu(t0)
    ...
      return (t5,)
    <BLANKLINE>
    """

    def __init__(self, name: str, namespace_name: str | None = None):
        super().__init__(name)
        # the alias kernels print under; "torch" itself is taken by the torch module
        self.namespace_name = _identifier(namespace_name or name)
        self.implmap: dict[str, Implementation] = {}
        self.kernels: dict[str, Callable] = {}
        self.namespace = _ExecutorNamespace(self)

    def _kernel_symbol(self, name: str, fn: Callable, meta: Callable, path: str | None = None,
                       kernel: Callable | None = None) -> Symbol:
        """A symbol that prints as `<path>(...)` (a public torch function) or `<executor>.<name>(...)`; `kernel`: what
        it runs on real values outside a trace (an op of the executor's own, register_operator)."""
        if path is not None:
            module, _, short = path.rpartition(".")
            return Symbol(f"{self.name}.{name}", short, meta=meta, module=module, namespace=torch, kernel=kernel)
        name = _unique_name(name, self.kernels, fn)
        self.kernels[name] = fn
        alias = self.namespace_name
        if namespace_import(alias) is None:  # (the first executor printing under an alias names it)
            register_namespace_import(alias, f"# {alias}: the kernels of executor {self.name!r}")
        return Symbol(f"{self.name}.{name}", name, meta=meta, module=alias, namespace=self.namespace, kernel=kernel)

    def register_operator(self, name: str, *, meta: Callable | None = None, like: Symbol | None = None,
                          fn: Callable, tags=()) -> Symbol:
        """A new op run by `fn`; callable in jitted code; its meta (output shapes and dtypes from input proxies) is
        `meta` or that of the op `like`. Returns the op: a Symbol to call in the function you jit.

        >>> from executors import OperatorExecutor
        >>> from jitcore.ops import prims
        >>> sqex = OperatorExecutor("sqex")
        >>> square = sqex.register_operator("square", like=prims.neg, fn=lambda a: a * a)
        >>> jf = jitcore.jit(lambda x: square(x) + 1, executors=[sqex])
        >>> jf(torch.full((2,), 3.0))
        tensor([10., 10.])
        """
        meta = meta if meta is not None else like.meta
        if meta is None:
            raise ValueError(f"register_operator({name!r}): give meta= or like= an op that has a meta")
        sym = self._kernel_symbol(name, fn, meta, kernel=fn)  # (its eager kernel is its own: the executor's table)
        sym.tags = frozenset(tags)
        self.implmap[sym.id] = Implementation(sym)
        return sym

    def register_implementation(self, op: Symbol, fn: Callable | Symbol, *, checker: Callable | None = None,
                                name: str | None = None, torch_path: str | None = None):
        """Run the existing op `op` with `fn` (a kernel over real tensors, or a symbol of this executor) where
        `checker` (called with the op's arguments: proxies with shape, dtype, device) accepts; `name` is the kernel's
        name in traces, `torch_path` prints it as that torch function. Returns the kernel's symbol.

        >>> from executors import OperatorExecutor
        >>> from jitcore.ops import ltorch
        >>> tanhex = OperatorExecutor("tanhex")
        >>> _ = tanhex.register_implementation(ltorch.tanh, lambda a: torch.tanh(a), name="my_tanh")
        >>> jf = jitcore.jit(lambda x: torch.tanh(x), executors=[tanhex])
        >>> jf(torch.zeros(1))
        tensor([0.])
        >>> [line for line in str(jitcore.last_traces(jf)[-1]).splitlines() if "my_tanh" in line]
        ['  t1 = tanhex.my_tanh(t0)  # t1: "cpu f32[1]"']
        """
        if isinstance(fn, Symbol):
            sym = fn
        else:
            kname = name or getattr(fn, "__name__", op.name)
            sym = self._kernel_symbol(kname, fn, op.meta or no_meta(op), path=torch_path)
        self.implmap[op.id] = Implementation(sym, checker)
        return sym

    def can_execute(self, bsym: BoundSymbol) -> bool:
        impl = self.implmap.get(bsym.sym.id)
        if impl is None:
            return False
        if impl.checker is None:
            return True
        try:
            return bool(impl.checker(*bsym.args, **bsym.kwargs))
        except Exception:
            return False

    def execute(self, bsym: BoundSymbol) -> BoundSymbol:
        """The line that runs `bsym` with this executor's kernel; the original stays visible as a subsymbol."""
        impl = self.implmap[bsym.sym.id]
        return BoundSymbol(impl.symbol, bsym.args, bsym.kwargs, bsym.output, (bsym,))


def _identifier(name: str) -> str:
    """`name` as a Python identifier the printed trace can call: a lambda's "<lambda>" becomes "lambda_"."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name  # kernels keep their names (`torchex._sum`)
    out = re.sub(r"\W", "_", name).strip("_") or "kernel"
    if out[0].isdigit() or keyword.iskeyword(out) or out in ("lambda", "kernel"):
        out += "_"
    return out


def _unique_name(name: str, kernels: dict, fn) -> str:
    """An identifier for the kernel `fn` that names no other kernel of the executor: two closures both called
    `impl` (or two lambdas) each print, and run, as themselves."""
    base = _identifier(name)
    if base == "_ex" or base.startswith("__"):  # the namespace object's own attributes
        base = "k" + base
    out, i = base, 1
    while out in kernels and kernels[out] is not fn:
        out, i = f"{base}_{i}", i + 1
    return out


def no_meta(op):
    def meta(*args, **kwargs):
        raise NotImplementedError(f"{op.id}: an executor kernel symbol is not traced directly")

    return meta


class FusionExecutor(Executor):
    """Claims ops like an operator executor, then groups claimed lines into fused regions (see regions.py): a
    subclass implements `can_execute(bsym)` and `fuse(trace)` (the claimed trace -> a new trace whose regions are
    lines of their own, `inductor_fusion0(...)`, each with its body printable). executors/inductorex.py is the
    worked example; `jit(fn, executors=["inductor"])` uses it.

    >>> from executors import FusionExecutor, get_executor
    >>> isinstance(get_executor("inductor"), FusionExecutor)
    True
    """

    def fuse(self, trace):
        raise NotImplementedError
