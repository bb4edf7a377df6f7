"""IR: what `tensor.data_ptr()` gives inside a jitted function. The traced program has no address, but code reads one
for its alignment only (transformers' MoE: `weight.data_ptr() % 16 != 0`), and that residue is known: an Address
answers `addr % k` and `addr & (k - 1)` for k a power of two (up to the allocator's alignment) with the residue eager's
tensor has, and `addr != 0` (`== 0`, its truth) as whether its memory is allocated, which the frontend computes and
guards (jitcore/frontend/alignment.py). Any other use of it (int(), other comparisons, hashing, printing, other
arithmetic) raises UnsupportedError, at the user's line.
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ir import arith
from jitcore.ir.context import get_tracectx
from jitcore.ir.pytree import tree_flatten

HINT = ("test alignment as `t.data_ptr() % k` or `t.data_ptr() & (k - 1)` (k a power of two), or read the address "
         "outside the jitted function")


def address_error(name: str, what: str) -> UnsupportedError:
    return UnsupportedError("tensor memory", f"{what} of {name}.data_ptr() inside a jitted function: the traced "
                            "program has no memory address to give (the tensor it will run on does not exist yet); "
                            "only its alignment is known (`% k`, `& (k - 1)`)", hint=HINT)


def refuse_address(name: str, what: str):
    raise address_error(name, what)


def address_in(tree) -> Address | None:
    """The first Address among the leaves of `tree` (an op's arguments), if any."""
    return next((x for x in tree_flatten(tree)[0] if type(x) is Address), None)


class Address:
    """`t.data_ptr()` of a tensor of the trace being recorded: `residue(k)` (the frontend's) answers `addr % k`."""

    __slots__ = ("name", "nonzero", "residue")

    def __init__(self, name: str, residue, nonzero=None):
        self.name, self.residue = name, residue  # residue: k (a power of two) -> eager's data_ptr() % k, guarded
        self.nonzero = nonzero  # () -> eager's data_ptr() != 0 (the frontend's, guarded where it reads the tensor)

    def _is_nonzero(self, what: str) -> bool:
        if get_tracectx() is None or self.nonzero is None:
            refuse_address(self.name, what)
        return self.nonzero()

    def __ne__(self, other):
        if type(other) is int and other == 0:
            return self._is_nonzero("`!= 0`")
        refuse_address(self.name, "`__ne__` (but `!= 0`)")

    def __eq__(self, other):
        if type(other) is int and other == 0:
            return not self._is_nonzero("`== 0`")
        refuse_address(self.name, "`__eq__` (but `== 0`)")

    def __bool__(self):
        return self._is_nonzero("its truth value")

    def _modulus(self, k, op: str) -> int:
        if get_tracectx() is None:  # (kept past its recording: a global written natively)
            refuse_address(self.name, "using outside its jitted call")
        if type(k) is not int and hasattr(k, "expr"):  # a symbolic number: its value, specialised
            k = k.__index__()
        if type(k) is not int or k < 1 or k & (k - 1):
            refuse_address(self.name, f"`{op} {k!r}` (not a power of two)")
        return k

    def __mod__(self, k):
        return self.residue(self._modulus(k, "%"))

    def __and__(self, mask):
        if type(mask) is not int and hasattr(mask, "expr"):
            mask = mask.__index__()
        if type(mask) is not int or mask < 0:
            refuse_address(self.name, f"`& {mask!r}`")
        return self.residue(self._modulus(mask + 1, "&"))  # (addr & (k - 1) == addr % k)

    __rand__ = __and__

    def __hash__(self):  # noqa: PLE0309  (it raises: an address is no key)
        refuse_address(self.name, "hashing")

    def __repr__(self):
        if arith.USER_TEXT.get():  # the user's str(addr), print(addr): eager's text is the number
            refuse_address(self.name, "converting to text")
        return f"<address of {self.name}>"

    def __format__(self, spec):
        refuse_address(self.name, "formatting")


def _refusing(dunder: str):
    what = {"__bool__": "its truth value", "__int__": "int()", "__index__": "using as an int", "__float__": "float()",
            "__complex__": "complex()"}.get(dunder, f"`{dunder}`")

    def f(self, *args):
        refuse_address(self.name, what)

    f.__name__ = dunder
    return f


for _d in ("lt", "le", "gt", "ge", "int", "index", "float", "complex", "add", "radd", "sub",
           "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "rmod", "divmod", "rdivmod", "pow",
           "rpow", "lshift", "rlshift", "rshift", "rrshift", "or", "ror", "xor", "rxor", "neg", "pos", "abs",
           "invert", "round", "trunc", "floor", "ceil"):
    setattr(Address, f"__{_d}__", _refusing(f"__{_d}__"))
del _d
