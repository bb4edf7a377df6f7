"""Interpreter stage: load/store/delete opcodes for locals, cells, globals, names, attributes, items, imports.

Values loaded from outside (globals, builtins, cells of functions made outside, attributes and items of
external objects, imported modules) are reported to the context; writes to external targets are side
effects (see side_effects.py). 3.12 adds the method bit of LOAD_ATTR, LOAD_SUPER_ATTR, LOAD_FAST_CHECK/AND_CLEAR,
BINARY_SLICE/STORE_SLICE and the class-scope loads (LOAD_LOCALS, LOAD_FROM_DICT_OR_*); 3.13 the two-locals forms and
the NULL pushed after the callable (bytecode.CALLABLE_FIRST).
"""
from __future__ import annotations

import sys
import types

from jitcore.interpreter import access, bytecode
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.handlers import handler
from jitcore.interpreter.provenance import Attr, Module
from jitcore.interpreter.side_effects import SideEffect

_CellType = types.CellType


# -- fast locals -----------------------------------------------------------------------------------------------
def _unbound_local(name):
    return UnboundLocalError(f"cannot access local variable '{name}' where it is not associated with a value")


@handler("LOAD_FAST")
@handler("LOAD_FAST_BORROW", since=(3, 14))  # (a reference CPython need not count: the same load here)
def LOAD_FAST(frame, inst):
    v = frame.localsplus[inst.arg]
    if v is NULL:
        raise _unbound_local(inst.argval)
    frame.stack.append(v)


@handler("LOAD_FAST_CHECK", since=(3, 12))
def LOAD_FAST_CHECK(frame, inst):
    LOAD_FAST(frame, inst)


@handler("LOAD_FAST_AND_CLEAR", since=(3, 12))
def LOAD_FAST_AND_CLEAR(frame, inst):
    """An inlined comprehension saves the variable it shadows (NULL when unbound) and unbinds it."""
    ls = frame.localsplus
    frame.stack.append(ls[inst.arg])
    ls[inst.arg] = NULL


@handler("LOAD_FAST_LOAD_FAST", since=(3, 13))
@handler("LOAD_FAST_BORROW_LOAD_FAST_BORROW", since=(3, 14))  # (borrowed references: the same loads here)
def LOAD_FAST_LOAD_FAST(frame, inst):
    ls, arg = frame.localsplus, inst.arg
    a, b = ls[arg >> 4], ls[arg & 15]
    if a is NULL or b is NULL:
        raise _unbound_local(inst.argval[0] if a is NULL else inst.argval[1])
    frame.stack += (a, b)


@handler("STORE_FAST")
def STORE_FAST(frame, inst):
    frame.localsplus[inst.arg] = frame.stack.pop()


@handler("STORE_FAST_LOAD_FAST", since=(3, 13))
def STORE_FAST_LOAD_FAST(frame, inst):
    ls, arg, stack = frame.localsplus, inst.arg, frame.stack
    ls[arg >> 4] = stack.pop()
    v = ls[arg & 15]
    if v is NULL:
        raise _unbound_local(inst.argval[1])
    stack.append(v)


@handler("STORE_FAST_STORE_FAST", since=(3, 13))
def STORE_FAST_STORE_FAST(frame, inst):
    ls, arg, stack = frame.localsplus, inst.arg, frame.stack
    ls[arg >> 4] = stack.pop()
    ls[arg & 15] = stack.pop()


@handler("DELETE_FAST")
def DELETE_FAST(frame, inst):
    if frame.localsplus[inst.arg] is NULL:
        raise _unbound_local(inst.argval)
    frame.localsplus[inst.arg] = NULL


# -- cells -----------------------------------------------------------------------------------------------------
@handler("MAKE_CELL")
def MAKE_CELL(frame, inst):
    v = frame.localsplus[inst.arg]
    frame.localsplus[inst.arg] = _CellType() if v is NULL else _CellType(v)


@handler("COPY_FREE_VARS")
def COPY_FREE_VARS(frame, inst):
    closure = frame.fn.__closure__
    start = frame.info.free_start
    frame.localsplus[start:start + inst.arg] = closure
    frame.rt.register_closure(frame.fn, closure)


def _cell_value(frame, inst):
    cell = frame.localsplus[inst.arg]
    try:
        v = cell.cell_contents
    except ValueError:
        v = NULL
    if v is NULL:
        if inst.arg >= frame.info.free_start:
            raise NameError(f"cannot access free variable '{inst.argval}' where it is not associated with a "
                            "value in enclosing scope", name=inst.argval)
        raise _unbound_local(inst.argval)
    prov = frame.rt.ext_cells.get(id(cell)) if frame.rt.ext_cells else None
    if prov is not None:
        v = frame.rt.report(v, prov)
    return v


@handler("LOAD_DEREF")
def LOAD_DEREF(frame, inst):
    frame.stack.append(_cell_value(frame, inst))


@handler("LOAD_CLASSDEREF", until=(3, 12))  # (3.12+: LOAD_LOCALS, LOAD_FROM_DICT_OR_DEREF)
def LOAD_CLASSDEREF(frame, inst):
    ns = frame.f_locals
    if ns is not None and inst.argval in ns:
        frame.stack.append(ns[inst.argval])
    else:
        frame.stack.append(_cell_value(frame, inst))


@handler("LOAD_FROM_DICT_OR_DEREF", since=(3, 12))
def LOAD_FROM_DICT_OR_DEREF(frame, inst):
    ns = frame.stack.pop()
    v = _mapping_get(ns, inst.argval)
    frame.stack.append(v if v is not NULL else _cell_value(frame, inst))


@handler("STORE_DEREF")
def STORE_DEREF(frame, inst):
    cell = frame.localsplus[inst.arg]
    v = frame.stack.pop()
    rt = frame.rt
    prov = rt.ext_cells.get(id(cell)) if rt.ext_cells else None
    if prov is not None:
        rt.effects.snapshot_cell(cell)
        cell.cell_contents = v
        rt.effects.record(SideEffect("setcell", prov, cell, inst.argval, v))
    else:
        cell.cell_contents = v


@handler("DELETE_DEREF")
def DELETE_DEREF(frame, inst):
    cell = frame.localsplus[inst.arg]
    try:
        del cell.cell_contents
    except ValueError:
        cell = None
    if cell is None:
        raise _unbound_local(inst.argval)


@handler("LOAD_CLOSURE", until=(3, 13))  # (3.13+: a pseudo-op, LOAD_FAST in co_code)
def LOAD_CLOSURE(frame, inst):
    frame.stack.append(frame.localsplus[inst.arg])


# -- globals and names ------------------------------------------------------------------------------------------
def _load_global(frame, name):
    rt = frame.rt
    g = frame.globals
    v = g.get(name, NULL)
    if v is not NULL:
        return rt.report(v, rt.global_prov(g, name, False))
    v = frame.builtins.get(name, NULL)
    if v is NULL:
        raise NameError(f"name '{name}' is not defined", name=name)
    return rt.report(v, rt.global_prov(g, name, True))


@handler("LOAD_GLOBAL", until=(3, 13))
def LOAD_GLOBAL(frame, inst):
    if inst.arg & 1:
        frame.stack.append(NULL)
    frame.stack.append(_load_global(frame, inst.argval))


def _prepare_load_global(inst, code, insts):
    if not inst.arg & 1:
        inst.fn = _LOAD_GLOBAL_VALUE


@handler("LOAD_GLOBAL", since=(3, 13), prepare=_prepare_load_global)
def LOAD_GLOBAL_313(frame, inst):
    """3.13: the NULL goes above the value (the callable first); without the low bit, the value alone."""
    frame.stack += (_load_global(frame, inst.argval), NULL)


def _LOAD_GLOBAL_VALUE(frame, inst):
    frame.stack.append(_load_global(frame, inst.argval))


@handler("STORE_GLOBAL")
def STORE_GLOBAL(frame, inst):
    rt, g, name = frame.rt, frame.globals, inst.argval
    v = frame.stack.pop()
    rt.effects.snapshot_ns_key(g, name)
    g[name] = v
    rt.effects.record(SideEffect("setglobal", rt.global_prov(g, name, False), g, name, v))


@handler("DELETE_GLOBAL")
def DELETE_GLOBAL(frame, inst):
    rt, g, name = frame.rt, frame.globals, inst.argval
    if name not in g:
        raise NameError(f"name '{name}' is not defined", name=name)
    rt.effects.snapshot_ns_key(g, name)
    del g[name]
    rt.effects.record(SideEffect("delglobal", rt.global_prov(g, name, False), g, name))


@handler("LOAD_NAME")
def LOAD_NAME(frame, inst):
    ns = frame.f_locals
    if ns is None:
        raise SystemError(f"no locals when loading {inst.argval!r}")
    v = ns.get(inst.argval, NULL) if type(ns) is dict else _mapping_get(ns, inst.argval)
    frame.stack.append(v if v is not NULL else _load_global(frame, inst.argval))


@handler("LOAD_FROM_DICT_OR_GLOBALS", since=(3, 12))
def LOAD_FROM_DICT_OR_GLOBALS(frame, inst):
    ns = frame.stack.pop()
    v = _mapping_get(ns, inst.argval)
    frame.stack.append(v if v is not NULL else _load_global(frame, inst.argval))


@handler("LOAD_LOCALS", since=(3, 12))
def LOAD_LOCALS(frame, inst):
    if frame.f_locals is None:
        raise SystemError("no locals found")
    frame.stack.append(frame.f_locals)


def _mapping_get(ns, name):
    try:
        return ns[name]
    except KeyError:
        return NULL


@handler("STORE_NAME")
def STORE_NAME(frame, inst):
    if frame.f_locals is None:
        raise SystemError(f"no locals found when storing {inst.argval!r}")
    frame.f_locals[inst.argval] = frame.stack.pop()


@handler("DELETE_NAME")
def DELETE_NAME(frame, inst):
    ns = frame.f_locals
    if ns is None or inst.argval not in ns:
        raise NameError(f"name '{inst.argval}' is not defined", name=inst.argval)
    del ns[inst.argval]


@handler("SETUP_ANNOTATIONS")
def SETUP_ANNOTATIONS(frame, inst):
    ns = frame.f_locals
    if ns is None:
        raise SystemError("no locals found when setting up annotations")
    if "__annotations__" not in ns:
        ns["__annotations__"] = {}


# -- attributes and items -----------------------------------------------------------------------------------------
@handler("LOAD_ATTR", until=(3, 12))
def LOAD_ATTR(frame, inst):  # (3.12+: the handler of LOAD_ATTR without the method bit, picked when decoded)
    frame.stack[-1] = access.load_attr(frame.rt, frame.stack[-1], inst.argval)


def _method(rt, obj, name):
    """`obj.name` about to be called: (function, obj) for a method bound to obj, else (NULL, the attribute)."""
    value = access.get_attr(rt, obj, name)
    if type(value) is types.MethodType and value.__self__ is obj:
        func = value.__func__
        prov = rt.external.get(id(obj))
        if prov is not None:  # which function `obj.name` finds (the class's, not one the instance shadows it with)
            func = access.report_method(rt, value, prov, name)
        return func, obj
    prov = rt.external.get(id(obj))
    if prov is not None and not access._is_bound_to(value, obj):
        value = rt.report(value, Attr(prov, name))
    return NULL, value


@handler("LOAD_METHOD", until=(3, 12))
def LOAD_METHOD(frame, inst):
    stack = frame.stack
    stack[-1], v = _method(frame.rt, stack[-1], inst.argval)
    stack.append(v)


def _prepare_load_attr(inst, code, insts):
    if not inst.arg & 1:  # (the low bit: a method load, the handler registered; else a plain attribute)
        inst.fn = LOAD_ATTR


@handler("LOAD_ATTR", since=(3, 12), until=(3, 13), prepare=_prepare_load_attr)
def LOAD_METHOD_312(frame, inst):
    """3.12: LOAD_ATTR with the low bit set loads a method, pushing (NULL, attribute) or (function, self) as 3.11's
    LOAD_METHOD did."""
    stack = frame.stack
    stack[-1], v = _method(frame.rt, stack[-1], inst.argval)
    stack.append(v)


@handler("LOAD_ATTR", since=(3, 13), prepare=_prepare_load_attr)
def LOAD_METHOD_313(frame, inst):
    """3.13: a method load pushes (attribute, NULL) or (function, self)."""
    stack = frame.stack
    null_or_func, v = _method(frame.rt, stack[-1], inst.argval)
    if null_or_func is NULL:
        stack[-1] = v
        stack.append(NULL)
    else:
        stack[-1] = null_or_func
        stack.append(v)


@handler("LOAD_SUPER_ATTR", since=(3, 12))
def LOAD_SUPER_ATTR(frame, inst):
    """`super().name` / `super(cls, obj).name`: the stack holds the global `super`, the class and the first argument
    (oparg & 2: two arguments written; else the zero-argument form, which these are). oparg & 1: a method load,
    pushed as (NULL, bound method) before 3.13 and (bound method, NULL) since."""
    stack, rt = frame.stack, frame.rt
    self_ = stack.pop()
    cls = stack.pop()
    global_super = stack.pop()
    if inst.arg & 2 or global_super is super:
        sup = rt.call(global_super, (cls, self_), {})
    else:  # a `super` of the program's own, called as written
        sup = rt.call(global_super, (), {})
    value = access.load_attr(rt, sup, inst.argval)
    if not inst.arg & 1:
        stack.append(value)
    elif bytecode.CALLABLE_FIRST:
        stack += (value, NULL)
    else:
        stack += (NULL, value)


@handler("STORE_ATTR")
def STORE_ATTR(frame, inst):
    stack = frame.stack
    obj = stack.pop()
    value = stack.pop()
    access.store_attr(frame.rt, obj, inst.argval, value)


@handler("DELETE_ATTR")
def DELETE_ATTR(frame, inst):
    access.delete_attr(frame.rt, frame.stack.pop(), inst.argval)


@handler("BINARY_SUBSCR", until=(3, 14))  # (3.14: BINARY_OP's NB_SUBSCR, which runs this handler)
def BINARY_SUBSCR(frame, inst):
    stack = frame.stack
    key = stack.pop()
    stack[-1] = access.get_item(frame.rt, stack[-1], key)


@handler("STORE_SUBSCR")
def STORE_SUBSCR(frame, inst):
    stack = frame.stack
    key = stack.pop()
    container = stack.pop()
    value = stack.pop()
    access.set_item(frame.rt, container, key, value)


@handler("BINARY_SLICE", since=(3, 12))
def BINARY_SLICE(frame, inst):
    stack = frame.stack
    end = stack.pop()
    start = stack.pop()
    stack[-1] = access.get_item(frame.rt, stack[-1], slice(start, end))


@handler("STORE_SLICE", since=(3, 12))
def STORE_SLICE(frame, inst):
    stack = frame.stack
    end = stack.pop()
    start = stack.pop()
    container = stack.pop()
    value = stack.pop()
    access.set_item(frame.rt, container, slice(start, end), value)


@handler("DELETE_SUBSCR")
def DELETE_SUBSCR(frame, inst):
    stack = frame.stack
    key = stack.pop()
    access.del_item(frame.rt, stack.pop(), key)


# -- imports -----------------------------------------------------------------------------------------------------
@handler("IMPORT_NAME")
def IMPORT_NAME(frame, inst):
    stack = frame.stack
    fromlist = stack.pop()
    level = stack[-1]
    imp = frame.builtins.get("__import__", NULL)
    if imp is NULL:
        raise ImportError("__import__ not found")
    mod = imp(inst.argval, frame.globals, frame.f_locals, fromlist, level)
    name = getattr(mod, "__name__", None)
    if isinstance(mod, types.ModuleType) and sys.modules.get(name) is mod:
        mod = frame.rt.report(mod, Module(name))
    stack[-1] = mod


@handler("IMPORT_FROM")
def IMPORT_FROM(frame, inst):
    mod = frame.stack[-1]
    name = inst.argval
    rt = frame.rt
    v = getattr(mod, name, NULL)
    if v is NULL:
        pkg = getattr(mod, "__name__", None)
        v = sys.modules.get(f"{pkg}.{name}", NULL) if isinstance(pkg, str) else NULL
        if v is NULL:
            where = getattr(mod, "__file__", None) or "unknown location"
            raise ImportError(f"cannot import name '{name}' from '{pkg}' ({where})", name=pkg)
    prov = rt.external.get(id(mod))
    if prov is not None:
        v = rt.report(v, Attr(prov, name))
    frame.stack.append(v)


@handler("IMPORT_STAR", until=(3, 12))  # (3.12+: CALL_INTRINSIC_1 INTRINSIC_IMPORT_STAR)
def IMPORT_STAR(frame, inst):
    import_star(frame, frame.stack.pop())


def import_star(frame, mod):
    ns = frame.f_locals
    if ns is None:
        raise SystemError("no locals found during 'import *'")
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [k for k in mod.__dict__ if not k.startswith("_")]
    for k in names:
        ns[k] = getattr(mod, k)


@handler("LOAD_ASSERTION_ERROR", until=(3, 14))  # (3.14: LOAD_COMMON_CONSTANT)
def LOAD_ASSERTION_ERROR(frame, inst):
    frame.stack.append(AssertionError)


@handler("LOAD_BUILD_CLASS")
def LOAD_BUILD_CLASS(frame, inst):
    bc = frame.builtins.get("__build_class__", NULL)
    if bc is NULL:
        raise NameError("__build_class__ not found")
    frame.stack.append(bc)
