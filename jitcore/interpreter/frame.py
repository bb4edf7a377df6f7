"""Interpreter stage: frames and decoded code.

`code_info(code)` decodes a code object once (instructions, jump targets, exception table, line numbers)
and caches it; `Frame` is one activation: its code, fast locals/cells, value stack, instruction pointer.
`bind_args` binds a call's arguments to a function's parameters with CPython's rules and messages.
"""
from __future__ import annotations

import builtins
import functools
import linecache
import sys
import types

from jitcore.errors import UnsupportedError
from jitcore.interpreter import bytecode
from jitcore.interpreter.bytecode import Ins, decode  # noqa: F401  (Ins, decode: this module's names too)
from jitcore.interpreter.handlers import table_for


class _Null:
    """The NULL of CPython's value stack and of unbound local slots."""

    __slots__ = ()

    def __repr__(self):
        return "<NULL>"


NULL = _Null()

CO_VARARGS = 0x04
CO_VARKEYWORDS = 0x08
CO_GENERATOR = 0x20
CO_ASYNC = 0x80 | 0x100 | 0x200  # coroutine, iterable coroutine, async generator

def _unsupported(frame, inst):
    raise UnsupportedError(
        "opcode",
        f"{inst.opname} is not supported by the jitcore interpreter on Python {sys.version_info[0]}."
        f"{sys.version_info[1]}",
        hint="rewrite this construct, or call the function natively (the context's should_inline)",
        where=frame.where(inst),
    )


def parse_exception_table(code) -> list[tuple[int, int, int, int, bool]]:
    """(start, end, target, depth, lasti) entries, offsets in bytes (end exclusive), from `code.co_exceptiontable`."""
    return bytecode.exception_entries(code)


class CodeInfo:
    """A code object decoded once: instructions, handlers per instruction, localsplus layout."""

    def __init__(self, code, table):
        self.code = code
        insts = decode(code)
        off2idx = {i.offset: i.idx for i in insts}
        rows = [table.get(i.opname) for i in insts]
        for i, row in zip(insts, rows):
            i.fn = row[0] if row else _unsupported
            if bytecode.is_jump(i.opname):
                i.target = off2idx[i.argval]
        for i, row in zip(insts, rows):  # (after every jump's target is known: a prepare may read the next ones)
            if row and row[1] is not None:
                row[1](i, code, insts)
        self.insts = insts
        self.handlers = [None] * len(insts)
        for start, end, target, depth, lasti in parse_exception_table(code):
            entry = (off2idx[target], depth, lasti)
            for off in range(start, end, 2):
                idx = off2idx.get(off)
                if idx is not None and self.handlers[idx] is None:
                    self.handlers[idx] = entry
        nlocals = len(code.co_varnames)
        extra_cells = [c for c in code.co_cellvars if c not in code.co_varnames]
        self.names = code.co_varnames + tuple(extra_cells) + code.co_freevars
        self.nlocalsplus = len(self.names)
        self.free_start = nlocals + len(extra_cells)
        self.cell_slots = frozenset(self.names.index(c) for c in code.co_cellvars) | frozenset(
            range(self.free_start, self.nlocalsplus)
        )
        self.flags = code.co_flags


_CODE_CACHE: dict[int, tuple] = {}
_TABLE = None


def code_info(code) -> CodeInfo:
    """The decoded form of `code`, cached by code object identity for the life of the process."""
    hit = _CODE_CACHE.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    global _TABLE
    if _TABLE is None:
        _TABLE = table_for()
    info = CodeInfo(code, _TABLE)
    _CODE_CACHE[id(code)] = (code, info)
    return info


def pending_callables(frame, nargs: int = 1) -> tuple:
    """What the frame's next instruction may call, when it is a call of `nargs` positional arguments and the value
    being loaded now is the last of them (`torch.from_numpy(self.buf)`: the owner `self` may still be on the stack):
    the candidates for the callable (none when the next instruction is not such a call). Versions differ in the
    instruction (3.11: PRECALL) and in the slots below the arguments (bytecode.CALLABLE_FIRST)."""
    insts, ip = frame.insts, frame.ip
    if ip >= len(insts):
        return ()
    nxt = insts[ip]
    if nxt.opname != bytecode.CALL_OPNAME or nxt.arg != nargs:
        return ()
    stack, out = frame.stack, []
    for top in (len(stack) - nargs + 1, len(stack) - nargs):  # (the value's owner on the stack, or not)
        if top < 2:
            continue
        below, above = stack[top - 2], stack[top - 1]
        out.append(below if bytecode.CALLABLE_FIRST or below is not NULL else above)
    return tuple(out)


def _builtins_of(globals_: dict) -> dict:
    b = globals_.get("__builtins__", builtins)
    return b.__dict__ if isinstance(b, types.ModuleType) else b


class Frame:
    """One activation of a code object inside the interpreter."""

    __slots__ = (
        "arrival",
        "builtins",
        "code",
        "f_locals",
        "fn",
        "globals",
        "info",
        "insts",
        "ip",
        "kw_names",
        "localsplus",
        "parent",
        "retval",
        "rt",
        "stack",
        "yielded",
    )

    def __init__(self, rt, code, info, globals_, fn=None, f_locals=None):
        self.rt = rt
        self.code = code
        self.info = info
        self.insts = info.insts
        self.localsplus = [NULL] * info.nlocalsplus
        self.stack = []
        self.ip = 0
        self.globals = globals_
        self.builtins = _builtins_of(globals_)
        self.f_locals = f_locals
        self.fn = fn
        self.kw_names = None
        self.retval = None
        self.yielded = None
        self.parent = None
        self.arrival = None  # (exception, instruction): where the exception being handled arrived here

    def lineno(self, inst=None) -> int:
        if inst is None:
            inst = self.insts[max(self.ip - 1, 0)]
        return inst.lineno

    def where(self, inst=None) -> str:
        """`file:line: source` of `inst` (default: the instruction being executed)."""
        filename = self.code.co_filename
        line = self.lineno(inst)
        src = linecache.getline(filename, line).strip()
        return f"{filename}:{line}: {src}"

    def __repr__(self):
        return f"<Frame {self.code.co_qualname} at {self.code.co_filename}:{self.lineno()}>"


def _names_list(names):
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def _missing(fn, names, kind):
    s = "" if len(names) == 1 else "s"
    return TypeError(f"{fn.__qualname__}() missing {len(names)} required {kind} argument{s}: {_names_list(names)}")


def bind_args(fn, code, args: tuple, kwargs: dict, ls: list):
    """Bind `args`/`kwargs` into the fast-locals list `ls` of a frame of `fn`, as CPython does (a call that does
    not bind raises CPython's own TypeError)."""
    argcount, flags, n = code.co_argcount, code.co_flags, len(args)
    if not kwargs and n == argcount and not flags & (CO_VARARGS | CO_VARKEYWORDS) and not code.co_kwonlyargcount:
        ls[:n] = args
        return
    try:
        _bind_slow(fn, code, args, kwargs, ls)
    except TypeError as e:
        exact = binding_error(fn, args, kwargs)
        raise (e if exact is None else exact) from None


def binding_error(fn, args: tuple, kwargs: dict) -> TypeError | None:
    """The TypeError CPython raises for fn(*args, **kwargs) (a Python function) when the call does not bind, else
    None: the arguments are bound to a stub with fn's parameters, defaults and qualified name."""
    stub = _stub(fn.__code__)
    stub.__qualname__, stub.__name__ = fn.__qualname__, fn.__name__
    stub.__defaults__, stub.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    try:
        stub(*args, **kwargs)
    except TypeError as e:
        return TypeError(*e.args)
    return None


@functools.lru_cache(maxsize=256)
def _stub(code: types.CodeType):
    """A function with code's parameters (positional-only, *args, keyword-only, **kwargs) and an empty body."""
    argc, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    names = code.co_varnames
    params = list(names[:argc])
    if posonly:
        params.insert(posonly, "/")
    rest = argc + kwonly
    if code.co_flags & CO_VARARGS:
        params.append(f"*{names[rest]}")
        rest += 1
    elif kwonly:
        params.append("*")
    params += names[argc:argc + kwonly]
    if code.co_flags & CO_VARKEYWORDS:
        params.append(f"**{names[rest]}")
    namespace: dict = {}
    exec(f"def stub({', '.join(params)}):\n    pass\n", namespace)
    return namespace["stub"]


def _bind_slow(fn, code, args: tuple, kwargs: dict, ls: list):
    argcount, flags, n = code.co_argcount, code.co_flags, len(args)
    kwonly, posonly, varnames = code.co_kwonlyargcount, code.co_posonlyargcount, code.co_varnames
    total = argcount + kwonly
    if n > argcount and not flags & CO_VARARGS:
        given = n
        ndef = len(fn.__defaults__ or ())
        takes = f"from {argcount - ndef} to {argcount}" if ndef else f"{argcount}"
        s = "" if argcount == 1 and not ndef else "s"
        were = "was" if given == 1 else "were"
        raise TypeError(f"{fn.__qualname__}() takes {takes} positional argument{s} but {given} {were} given")
    ls[: min(n, argcount)] = args[:argcount]
    idx = total
    if flags & CO_VARARGS:
        ls[idx] = tuple(args[argcount:])
        idx += 1
    kwdict = None
    if flags & CO_VARKEYWORDS:
        kwdict = ls[idx] = {}
    for k, v in kwargs.items():
        j = _index(varnames, k, posonly, total)
        if j >= 0:
            if ls[j] is not NULL:
                raise TypeError(f"{fn.__qualname__}() got multiple values for argument '{k}'")
            ls[j] = v
        elif kwdict is not None:
            kwdict[k] = v
        elif k in varnames[:posonly]:
            raise TypeError(
                f"{fn.__qualname__}() got some positional-only arguments passed as keyword arguments: '{k}'"
            )
        else:
            raise TypeError(f"{fn.__qualname__}() got an unexpected keyword argument '{k}'")
    if n < argcount:
        defaults = fn.__defaults__ or ()
        first_def = argcount - len(defaults)
        missing = []
        for j in range(n, argcount):
            if ls[j] is NULL:
                if j >= first_def:
                    ls[j] = defaults[j - first_def]
                else:
                    missing.append(varnames[j])
        if missing:
            raise _missing(fn, missing, "positional")
    if kwonly:
        kwdefaults = fn.__kwdefaults__ or {}
        missing = []
        for j in range(argcount, total):
            if ls[j] is NULL:
                name = varnames[j]
                if name in kwdefaults:
                    ls[j] = kwdefaults[name]
                else:
                    missing.append(name)
        if missing:
            raise _missing(fn, missing, "keyword-only")


def _index(names, k, lo, hi) -> int:
    for j in range(lo, hi):
        if names[j] == k:
            return j
    return -1


def frame_locals(frame) -> dict:
    if frame.f_locals is not None:
        return frame.f_locals
    info, ls, out = frame.info, frame.localsplus, {}
    for i, name in enumerate(info.names):
        v = ls[i]
        if i in info.cell_slots and type(v) is types.CellType:
            try:
                v = v.cell_contents
            except ValueError:
                continue
        if v is not NULL:
            out[name] = v
    return out


def with_caller_module(frame, metatype, bases, ns):
    """The namespace of a class made by calling `metatype(name, bases, ns)` (or `type.__new__(metatype, ...)`) from
    interpreted `frame`, with `__module__` added where eager's type.__new__ adds it: absent from ns, the class made by
    type.__new__ itself (not handed to a winning metaclass's own __new__, which runs natively and sees its own
    module), `__name__` in the calling frame's globals. A copy (type.__new__ copies ns too); ns itself otherwise."""
    if frame is None or type(ns) is not dict or "__module__" in ns or "__name__" not in frame.globals:
        return ns
    if not isinstance(metatype, type) or not isinstance(bases, tuple):
        return ns
    winner = metatype
    for b in bases:
        t = type(b)
        if issubclass(t, winner):
            winner = t
        elif not issubclass(winner, t):
            return ns  # (a metaclass conflict: the native call raises eager's TypeError)
    if winner is not metatype and winner.__new__ is not type.__new__:
        return ns  # (type.__new__ hands the call to the winner's own __new__)
    return {**ns, "__module__": frame.globals["__name__"]}
