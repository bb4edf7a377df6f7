"""Interpreter stage: opcodes that build and unpack containers (3.11-3.14).

BUILD_*, the comprehension helpers (LIST_APPEND, SET_ADD, MAP_ADD), the star/double-star helpers
(LIST_EXTEND, SET_UPDATE, DICT_UPDATE, DICT_MERGE, LIST_TO_TUPLE), UNPACK_SEQUENCE / UNPACK_EX, and 3.14's
t-strings (BUILD_INTERPOLATION, BUILD_TEMPLATE).
Unpacking an external sequence reports its items (Item provenance).
"""
from __future__ import annotations

from jitcore.interpreter import access, bytecode
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.ops_call import func_str

try:
    from string import templatelib  # (3.14)
except ImportError:
    templatelib = None


def _pop_n(stack, n):
    if n == 0:
        return []
    items = stack[-n:]
    del stack[-n:]
    return items


@handler("BUILD_TUPLE")
def BUILD_TUPLE(frame, inst):
    frame.stack.append(tuple(_pop_n(frame.stack, inst.arg)))


@handler("BUILD_LIST")
def BUILD_LIST(frame, inst):
    frame.stack.append(_pop_n(frame.stack, inst.arg))


@handler("BUILD_SET")
def BUILD_SET(frame, inst):
    frame.stack.append(set(_pop_n(frame.stack, inst.arg)))


@handler("BUILD_MAP")
def BUILD_MAP(frame, inst):
    items = _pop_n(frame.stack, 2 * inst.arg)
    frame.stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})


@handler("BUILD_CONST_KEY_MAP", until=(3, 14))  # (3.14: BUILD_MAP)
def BUILD_CONST_KEY_MAP(frame, inst):
    stack = frame.stack
    keys = stack.pop()
    values = _pop_n(stack, inst.arg)
    stack.append(dict(zip(keys, values)))


@handler("BUILD_SLICE")
def BUILD_SLICE(frame, inst):
    frame.stack.append(slice(*_pop_n(frame.stack, inst.arg)))


@handler("LIST_TO_TUPLE", until=(3, 12))  # (3.12+: CALL_INTRINSIC_1 INTRINSIC_LIST_TO_TUPLE)
def LIST_TO_TUPLE(frame, inst):
    frame.stack[-1] = tuple(frame.stack[-1])


# -- t-strings (3.14, PEP 750): the Template holds the values themselves (proxies among them) --------------------
_CONVERSION_CHARS = (None, "s", "r", "a")


@handler("BUILD_INTERPOLATION", since=(3, 14))
def BUILD_INTERPOLATION(frame, inst):
    stack = frame.stack
    spec = stack.pop() if inst.arg & 1 else ""
    expression = stack.pop()
    stack[-1] = templatelib.Interpolation(stack[-1], expression, _CONVERSION_CHARS[inst.arg >> 2], spec)


@handler("BUILD_TEMPLATE", since=(3, 14))
def BUILD_TEMPLATE(frame, inst):
    stack = frame.stack
    interpolations = stack.pop()
    strings = stack[-1]
    parts = [strings[0]]
    for i, s in zip(interpolations, strings[1:]):
        parts += (i, s)
    stack[-1] = templatelib.Template(*parts)


@handler("LIST_APPEND")
def LIST_APPEND(frame, inst):
    v = frame.stack.pop()
    frame.stack[-inst.arg].append(v)


@handler("SET_ADD")
def SET_ADD(frame, inst):
    v = frame.stack.pop()
    frame.stack[-inst.arg].add(v)


@handler("MAP_ADD")
def MAP_ADD(frame, inst):
    stack = frame.stack
    value = stack.pop()
    key = stack.pop()
    stack[-inst.arg][key] = value


def _iterate(rt, obj, what):
    if not hasattr(type(obj), "__iter__") and not hasattr(type(obj), "__getitem__"):
        raise TypeError(f"{what} must be an iterable, not {type(obj).__name__}")
    return access.get_iter(rt, obj)


@handler("LIST_EXTEND")
def LIST_EXTEND(frame, inst):
    it = frame.stack.pop()
    frame.stack[-inst.arg].extend(_iterate(frame.rt, it, "Value after *"))


@handler("SET_UPDATE")
def SET_UPDATE(frame, inst):
    it = frame.stack.pop()
    frame.stack[-inst.arg].update(_iterate(frame.rt, it, "Value after *"))


@handler("DICT_UPDATE")
def DICT_UPDATE(frame, inst):
    update = frame.stack.pop()
    if not hasattr(update, "keys"):
        raise TypeError(f"'{type(update).__name__}' object is not a mapping")
    if id(update) in frame.rt.external:  # `{**d}` of an argument: its values read with provenance (guarded)
        update = {k: access.get_item(frame.rt, update, k) for k in update.keys()}
    frame.stack[-inst.arg].update(update)


@handler("DICT_MERGE")
def DICT_MERGE(frame, inst):
    stack = frame.stack
    update = stack.pop()
    target = stack[-inst.arg]
    fn = stack[-inst.arg - (3 if bytecode.CALLABLE_FIRST else 2)]  # (the callable, for the error's text)
    if not hasattr(update, "keys"):
        raise TypeError(f"{func_str(fn)} argument after ** must be a mapping, not {type(update).__name__}")
    external = id(update) in frame.rt.external  # `f(**d)` of an argument: its values read with provenance
    for k in update.keys():
        if k in target:
            raise TypeError(f"{func_str(fn)} got multiple values for keyword argument '{k}'")
        target[k] = access.get_item(frame.rt, update, k) if external else update[k]


def _collect(rt, seq, n_min, exact):
    """Up to n_min + 1 items of `seq` (all of them if not `exact`)."""
    if type(seq) in (tuple, list) and id(seq) not in rt.external:
        return list(seq)
    if not hasattr(type(seq), "__iter__") and not hasattr(type(seq), "__getitem__"):
        raise TypeError(f"cannot unpack non-iterable {type(seq).__name__} object")
    it = access.get_iter(rt, seq)
    if not exact:
        return list(it)
    out = []
    for v in it:
        out.append(v)
        if len(out) > n_min:
            break
    return out


@handler("UNPACK_SEQUENCE")
def UNPACK_SEQUENCE(frame, inst):
    stack = frame.stack
    n = inst.arg
    items = _collect(frame.rt, stack.pop(), n, True)
    if len(items) != n:
        if len(items) < n:
            raise ValueError(f"not enough values to unpack (expected {n}, got {len(items)})")
        raise ValueError(f"too many values to unpack (expected {n})")
    items.reverse()
    stack.extend(items)


@handler("UNPACK_EX")
def UNPACK_EX(frame, inst):
    stack = frame.stack
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = _collect(frame.rt, stack.pop(), before + after, False)
    if len(items) < before + after:
        raise ValueError(f"not enough values to unpack (expected at least {before + after}, got {len(items)})")
    tail = items[len(items) - after:] if after else []
    middle = items[before:len(items) - after]
    stack.extend(reversed(tail))
    stack.append(middle)
    stack.extend(reversed(items[:before]))


