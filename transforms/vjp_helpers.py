"""Transforms (autodiff): what the VJP rule files and the grad transform share. VJP_RULES is the table every rule
file adds its rows to (`VJP_RULES["prims.foo"] = foo_vjp`, right after the rule); transforms/vjp_rules.py imports
all the rule files, so it is the one table the grad transform reads. Helpers here build the rules of common shapes
(unary and broadcasting binary elementwise ops) and read an op's arguments by name. Imports no other rule file.
"""
from __future__ import annotations

import inspect

from jitcore.ir.proxies import TensorProxy
from jitcore.ops import prims_creation as pc
from jitcore.ops import prims_reduction as pr
from jitcore.ops import prims_shape as ps
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.torch_shape import same_shape
from jitcore.ops.utils import same_size

# op id -> rule(bsym, *output_cotangents) -> the cotangent of each parameter of the op (None where it has none), or
# NotImplemented to send the grad transform through the op's subsymbols
VJP_RULES: dict = {}
# op id -> augment(bsym): the ops whose forward line the grad transform swaps, when a gradient flows, for a kernel
# that also returns what their backward reads: (symbol, args, kwargs, backward(bsym, residuals, *cotangents)), or
# None to decline (then the op is differentiated through its decomposition). One row per op, after its function.
AUGMENTED_FORWARDS: dict = {}

_signatures: dict = {}


def bound_arguments(bsym) -> list:
    """The values of bsym's parameters in signature order (defaults filled in)."""
    sym = bsym.sym
    sig = _signatures.get(sym.id)
    if sig is None:
        sig = _signatures[sym.id] = inspect.signature(sym.meta or sym.fn)
    ba = sig.bind(*bsym.args, **bsym.kwargs)
    ba.apply_defaults()
    return list(ba.arguments.values())


def is_diff(x) -> bool:
    """Whether x is a tensor that needs a gradient."""
    return isinstance(x, TensorProxy) and x.requires_grad


def zeros_like(a):
    """Zeros of a's shape, device and dtype (one prims.full)."""
    return pc.full(tuple(a.shape), 0, device=a.device, dtype=a.dtype)


def call(op, *args, **kwargs):
    """Record a call of torch callable `op` (an aten backward kernel, mostly) as an opaque op."""
    return opaque_symbol(op)(*args, **kwargs)


def numel(t) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n


def mT(x):
    """x with its last two dims swapped."""
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ps.transpose(x, tuple(perm))


def sum_to(x, shape):
    """x summed over the leading and size-1 dims it was broadcast along, to `shape`."""
    lead = x.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                 if not same_size(s, x.shape[lead + i]) and s == 1 and x.shape[lead + i] != 1]
    out = pr.sum(x, tuple(dims)) if dims else x
    return out if same_shape(out.shape, shape) or tuple(out.shape) == tuple(shape) else ps.reshape(out, tuple(shape))


# -- rules of common shapes (as JAX's ad.py builds its jvp rules from a formula) -------------------------------------
def unary(fn):
    """The rule of a unary op from fn(a, out, g) -> the cotangent of a."""

    def rule(bsym, g):
        return (fn(bsym.args[0], bsym.output, g),)

    return rule


def binary(fa, fb):
    """The rule of a binary elementwise op from fa/fb(a, b, out, g) -> the cotangent of a/b (each only computed
    for a tensor that needs a gradient; numbers get none)."""

    def rule(bsym, g):
        a, b = bsym.args
        ga = fa(a, b, bsym.output, g) if is_diff(a) else None
        gb = fb(a, b, bsym.output, g) if is_diff(b) else None
        return ga, gb

    return rule


def no_grad_vjp(bsym, *gs):
    """The rule of an op no argument gets a gradient through."""
    return tuple(None for _ in bsym.args)
