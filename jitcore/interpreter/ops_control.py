"""Interpreter stage: control flow opcodes: jumps, GET_ITER/FOR_ITER/END_FOR and the MATCH_* family (3.11-3.14).

Jump targets were resolved to instruction indices when the code object was decoded (`inst.target`). 3.12 replaced the
forward/backward conditional jumps by one POP_JUMP_IF_* each (3.13 gives them exact bools, after TO_BOOL) and ends
loops with END_FOR, which an exhausted FOR_ITER jumps over.
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.interpreter import access, bytecode
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.handlers import handler


@handler("JUMP_FORWARD")
@handler("JUMP_BACKWARD")
@handler("JUMP_BACKWARD_NO_INTERRUPT")
def JUMP(frame, inst):
    frame.ip = inst.target


@handler("POP_JUMP_FORWARD_IF_TRUE", until=(3, 12))
@handler("POP_JUMP_BACKWARD_IF_TRUE", until=(3, 12))
@handler("POP_JUMP_IF_TRUE", since=(3, 12))
def POP_JUMP_IF_TRUE(frame, inst):
    if access.truth(frame.rt, frame.stack.pop()):
        frame.ip = inst.target


@handler("POP_JUMP_FORWARD_IF_FALSE", until=(3, 12))
@handler("POP_JUMP_BACKWARD_IF_FALSE", until=(3, 12))
@handler("POP_JUMP_IF_FALSE", since=(3, 12))
def POP_JUMP_IF_FALSE(frame, inst):
    if not access.truth(frame.rt, frame.stack.pop()):
        frame.ip = inst.target


@handler("POP_JUMP_FORWARD_IF_NONE", until=(3, 12))
@handler("POP_JUMP_BACKWARD_IF_NONE", until=(3, 12))
@handler("POP_JUMP_IF_NONE", since=(3, 12))
def POP_JUMP_IF_NONE(frame, inst):
    if frame.stack.pop() is None:
        frame.ip = inst.target


@handler("POP_JUMP_FORWARD_IF_NOT_NONE", until=(3, 12))
@handler("POP_JUMP_BACKWARD_IF_NOT_NONE", until=(3, 12))
@handler("POP_JUMP_IF_NOT_NONE", since=(3, 12))
def POP_JUMP_IF_NOT_NONE(frame, inst):
    if frame.stack.pop() is not None:
        frame.ip = inst.target


@handler("JUMP_IF_TRUE_OR_POP", until=(3, 12))
def JUMP_IF_TRUE_OR_POP(frame, inst):
    if access.truth(frame.rt, frame.stack[-1]):
        frame.ip = inst.target
    else:
        frame.stack.pop()


@handler("JUMP_IF_FALSE_OR_POP", until=(3, 12))
def JUMP_IF_FALSE_OR_POP(frame, inst):
    if not access.truth(frame.rt, frame.stack[-1]):
        frame.ip = inst.target
    else:
        frame.stack.pop()


@handler("GET_ITER")
def GET_ITER(frame, inst):
    frame.stack[-1] = access.get_iter(frame.rt, frame.stack[-1])


# what follows a loop's FOR_ITER target: END_FOR, then (3.13) POP_TOP or (3.14) POP_ITER for the iterator
_LOOP_ENDS = {(3, 12): ("END_FOR",), (3, 13): ("END_FOR", "POP_TOP"), (3, 14): ("END_FOR", "POP_ITER")}


def _prepare_for_iter(inst, code, insts):
    """3.12+: the target is the loop's END_FOR; an exhausted FOR_ITER pops the iterator and goes past it (3.12: END_FOR
    pops two; 3.13: END_FOR and the POP_TOP after it pop one each; 3.14: POP_ITER instead of POP_TOP), as CPython
    does."""
    skip = _LOOP_ENDS[min(bytecode.VERSION, (3, 14))]
    t = inst.target
    if tuple(i.opname for i in insts[t:t + len(skip)]) != skip:
        raise UnsupportedError("opcode", f"FOR_ITER at offset {inst.offset} of {code.co_qualname} does not end at "
                               f"{' + '.join(skip)}")
    inst.target = t + len(skip)


@handler("FOR_ITER", until=(3, 12))
@handler("FOR_ITER", since=(3, 12), prepare=_prepare_for_iter)
def FOR_ITER(frame, inst):
    stack = frame.stack
    v = next(stack[-1], NULL)
    if v is NULL:
        stack.pop()
        frame.ip = inst.target
    else:
        stack.append(v)


@handler("END_FOR", since=(3, 12), until=(3, 13))
def END_FOR_312(frame, inst):
    del frame.stack[-2:]


@handler("END_FOR", since=(3, 13))
def END_FOR(frame, inst):
    frame.stack.pop()


# -- structural pattern matching ----------------------------------------------------------------------------------
_TPFLAGS_SEQUENCE = 1 << 5
_TPFLAGS_MAPPING = 1 << 6
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


@handler("MATCH_MAPPING")
def MATCH_MAPPING(frame, inst):
    frame.stack.append(bool(type(frame.stack[-1]).__flags__ & _TPFLAGS_MAPPING))


@handler("MATCH_SEQUENCE")
def MATCH_SEQUENCE(frame, inst):
    frame.stack.append(bool(type(frame.stack[-1]).__flags__ & _TPFLAGS_SEQUENCE))


@handler("MATCH_KEYS")
def MATCH_KEYS(frame, inst):
    stack = frame.stack
    keys, subject = stack[-1], stack[-2]
    stack.append(_match_keys(subject, keys))


def _match_keys(subject, keys):
    if not keys:
        return ()
    get = subject.get
    dummy = object()
    seen, values = set(), []
    for k in keys:
        if k in seen:
            raise ValueError(f"mapping pattern checks duplicate key ({k!r})")
        seen.add(k)
        v = get(k, dummy)
        if v is dummy:
            return None
        values.append(v)
    return tuple(values)


@handler("MATCH_CLASS")
def MATCH_CLASS(frame, inst):
    stack = frame.stack
    names = stack.pop()
    cls = stack.pop()
    subject = stack[-1]
    stack[-1] = _match_class(frame.rt, subject, cls, inst.arg, names)


def _match_class(rt, subject, cls, count, names):
    if not isinstance(cls, type):
        raise TypeError("called match pattern must be a class")
    if not isinstance(subject, cls):
        return None
    seen, attrs = set(), []
    if count:
        match_args = getattr(cls, "__match_args__", NULL)
        match_self = match_args is NULL and issubclass(cls, _MATCH_SELF)
        if match_args is NULL:
            match_args = ()
        if not isinstance(match_args, tuple):
            raise TypeError(f"{cls.__name__}.__match_args__ must be a tuple (got {type(match_args).__name__})")
        allowed = 1 if match_self else len(match_args)
        if count > allowed:
            s = "" if allowed == 1 else "s"
            raise TypeError(f"{cls.__name__}() accepts {allowed} positional sub-pattern{s} ({count} given)")
        if match_self:
            attrs.append(subject)
        for name in () if match_self else match_args[:count]:
            if not isinstance(name, str):
                raise TypeError(f"__match_args__ elements must be strings (got {type(name).__name__})")
            v = _match_attr(rt, subject, cls, name, seen)
            if v is NULL:
                return None
            attrs.append(v)
    for name in names:
        v = _match_attr(rt, subject, cls, name, seen)
        if v is NULL:
            return None
        attrs.append(v)
    return tuple(attrs)


def _match_attr(rt, subject, cls, name, seen):
    if name in seen:
        raise TypeError(f"{cls.__name__}() got multiple sub-patterns for attribute '{name}'")
    seen.add(name)
    try:
        return access.load_attr(rt, subject, name)
    except AttributeError:
        return NULL
