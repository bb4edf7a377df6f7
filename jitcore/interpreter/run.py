"""Interpreter stage: the run loop and the call policy.

`Runtime` holds one interpretation's state (context, external values and their provenance, the side-effect
log, the handled-exception stack). `run_frame` executes a frame opcode by opcode, routing exceptions through
the code's exception table; `Runtime.call` decides, for every call the program makes, whether to interpret
the callee, call it natively, or use a lookaside.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import sys
import sysconfig
import types
import weakref

from jitcore.errors import JitError, MetaError, UnsupportedError
from jitcore.interpreter import eager_errors, user_traceback
from jitcore.interpreter.frame import CO_ASYNC, NULL, Frame, bind_args, code_info, with_caller_module
from jitcore.interpreter.protocol import listens
from jitcore.interpreter.provenance import Arg, Attr, Call, Closure, Fn, Global, Item, Kwarg
from jitcore.interpreter.side_effects import SideEffectLog
from jitcore.ir.arith import as_user

RETURNED, YIELDED, GENERATOR = 1, 2, 3

# Deepest nesting of interpreted calls we allow (each costs ~5 Python frames of the interpreter).
MAX_DEPTH = 1000
RECURSION_LIMIT = 12 * MAX_DEPTH

_REF_CALL = weakref.ReferenceType.__call__
_NATIVE_TYPES = frozenset({
    types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType,
})
_FunctionType, _MethodType, _partial = types.FunctionType, types.MethodType, functools.partial

def _dirs(*paths) -> tuple:
    return tuple(os.path.normpath(p) + os.sep for p in paths if p)


_PATHS = sysconfig.get_paths()
_OWN_DIRS = _dirs(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # jitcore/
    os.path.dirname(getattr(importlib.util.find_spec("torch"), "origin", None) or ""),
)
_SITE_DIRS = _dirs(_PATHS.get("purelib"), _PATHS.get("platlib"))
_STDLIB_DIRS = _dirs(_PATHS.get("stdlib"), _PATHS.get("platstdlib"))


def is_user_file(filename: str) -> bool:
    """Whether errors should name this file: user code and third-party packages, not torch, jitcore, stdlib."""
    p = os.path.normpath(filename)
    if p.startswith(_OWN_DIRS):
        return False
    return p.startswith(_SITE_DIRS) or not p.startswith(_STDLIB_DIRS)


def is_stdlib_file(filename: str) -> bool:
    """Whether this file is the standard library's (a frozen module's too: `<frozen genericpath>`)."""
    if filename.startswith("<frozen "):
        return True
    p = os.path.normpath(filename)
    return p.startswith(_STDLIB_DIRS) and not p.startswith(_SITE_DIRS)


def type_lookup(t, name):
    """`name` looked up on the type `t` along its MRO, without descriptors applied; NULL if absent."""
    for k in t.__mro__:
        d = k.__dict__
        if name in d:
            return d[name]
    return NULL


class Runtime:
    """The state of one interpret() call."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.external: dict[int, object] = {}
        self.keepalive: list = []
        self.effects = SideEffectLog()
        self.exc_stack: list[list] = [[None]]
        self.frame: Frame | None = None
        self.depth = 0
        self.created_fns: set[int] = set()
        self.lazy_annotations: dict = {}  # id(function made here) -> its __annotate__, until its annotations are read
        self.defaults_owners: dict = {}  # id(function) -> the provenance of its owner (set_root)
        self.ext_cells: dict[int, object] = {}
        self.views: dict[int, tuple] = {}
        self.entered: dict = {}  # code objects of user files interpreted (in order): what a package's checks hash
        self._seen_code: set = set()
        self._code_read: set = set()  # ids of functions from outside whose __code__ was reported
        self.fallback_where: str | None = None
        self.unwound: dict[int, tuple] = {}  # id(exception) -> (exception, where it left interpreted frames)
        self._tcache: dict = {}
        self._gprov: dict = {}
        # the hooks (jitcore/interpreter/protocol.py, InterpreterHooks), bound once
        self.lookaside = ctx.lookaside
        self.should_inline = ctx.should_inline
        self.on_external_value = ctx.on_external_value
        self.isinstance_hook = ctx.isinstance_hook
        self.issubclass_hook = ctx.issubclass_hook
        self.type_hook = ctx.type_hook
        self.on_attr_presence = ctx.on_attr_presence
        self.proxy_attr = ctx.proxy_attr
        self.on_is = ctx.on_is if listens(ctx, "on_is") else None  # `a is b` of two different objects (IS_OP)
        self.notify_native = listens(ctx, "on_call_native")
        ctx.attach_runtime(self)

    # -- provenance ------------------------------------------------------------------------------------------
    def report(self, value, prov):
        """Tell the context an external value was loaded; remember its provenance; return what ctx returns. A value
        of the program (a proxy, a proxy's bound method) read from an external object is one the call stored there
        (`self.b = self.b + x`, through a setter that wrote elsewhere): the program's, not an input. (A jitted
        module or function is reported like any object: its wrapped model is read through it.)"""
        if type(value).__module__ == "jitcore.ir.proxies":  # (a proxy, a proxy's method, a SymbolicSize)
            return value
        new = self.on_external_value(value, prov)
        ext = self.external
        if id(value) not in ext:
            ext[id(value)] = prov
            self.keepalive.append(value)
        if new is not value and id(new) not in ext and not _is_jitcore_obj(new):
            ext[id(new)] = prov
            self.keepalive.append(new)
        return new

    def register(self, value, prov):
        """Remember `value` as external with `prov` without asking the context (e.g. a method's __func__)."""
        if id(value) not in self.external:
            self.external[id(value)] = prov
            self.keepalive.append(value)

    def global_prov(self, globals_: dict, name: str, builtin: bool):
        key = (id(globals_), name, builtin)
        p = self._gprov.get(key)
        if p is None:
            module = "builtins" if builtin else globals_.get("__name__", "?")
            mod = sys.modules.get(module)
            if builtin or (mod is not None and getattr(mod, "__dict__", None) is globals_):
                p = Global(module, name)
            else:  # a namespace that is no module's (exec'd code): the prologue reads that dict itself
                p = Global(module, name, id(globals_), globals_)
            self._gprov[key] = p
        return p

    def lookup(self, t, name):
        """type_lookup cached for the duration of this interpretation."""
        key = (t, name)
        v = self._tcache.get(key, NULL)
        if v is NULL:
            v = self._tcache[key] = type_lookup(t, name)
        return v

    def topmost_exc(self):
        for cell in reversed(self.exc_stack):
            if cell[0] is not None:
                return cell[0]
        return None

    # -- calls ------------------------------------------------------------------------------------------------
    def call(self, fn, args: tuple, kwargs: dict):
        """Call `fn(*args, **kwargs)` from interpreted code, following the call policy (see module docs)."""
        inline = getattr(type(fn), "__jitcore_inline__", None)
        if inline is not None:  # a jitted function or module called inside: its source is one program with ours
            return self.call_inlined(fn, inline, args, kwargs)
        repl = self.lookaside(fn)
        if repl is not None:
            return repl(*args, **kwargs)
        look = LOOKASIDES.get(id(fn))  # builtins, and a few Python functions (inspect.currentframe, ...)
        if look is not None:
            return look(self, args, kwargs)
        t = type(fn)
        if t is _FunctionType:
            return self.call_function(fn, args, kwargs)
        if t is _MethodType:
            func = fn.__func__
            prov = self.external.get(id(fn))
            owner = fn.__self__
            if prov is not None:
                if type(prov.root()) in (Arg, Kwarg):  # a bound method handed in: which function runs is read
                    func = self.report(func, Attr(prov, "__func__"))
                else:
                    self.register(func, Attr(prov, "__func__"))
                if id(owner) not in self.external:  # `jit(obj.method)`: the object is external too
                    owner = self.report(owner, Attr(prov, "__self__"))
            return self.call(func, (owner, *args), kwargs)
        if isinstance(fn, weakref.ReferenceType) and not args and not kwargs and \
                self.lookup(t, "__call__") is _REF_CALL:  # what a weak reference refers to, as the program reads it
            return self._referent(fn)
        if t in _NATIVE_TYPES:
            return self.call_native(fn, args, kwargs)
        by_type = CALLABLE_OBJECTS.get(t)
        if by_type is not None:
            return by_type(self, fn, args, kwargs)
        if t is _partial:
            prov = self.external.get(id(fn))
            if prov is None:
                return self.call(fn.func, _partial_args(fn.args, args), {**fn.keywords, **kwargs})
            # a partial from outside: its function and bound arguments are read from it (guarded, or inputs)
            func = self.report(fn.func, Attr(prov, "func"))
            bound = self.report(fn.args, Attr(prov, "args"))
            bound = tuple(self.report(a, Item(Attr(prov, "args"), i)) for i, a in enumerate(bound))
            kw = self.report(fn.keywords, Attr(prov, "keywords"))
            kw = {k: self.report(v, Item(Attr(prov, "keywords"), k)) for k, v in kw.items()}
            return self.call(func, _partial_args(bound, args), {**kw, **kwargs})
        if isinstance(fn, type):
            return self.instantiate(fn, args, kwargs)
        if _is_jitcore_obj(fn):
            return self.call_native(fn, args, kwargs)
        inline = getattr(fn, "_torchdynamo_inline", None) if t.__module__ == "torch.jit" else None
        if type(inline) is _FunctionType:  # a torch.jit.script function: its Python source, interpreted
            prov = self.external.get(id(fn))
            if prov is not None:
                self.register(inline, Attr(prov, "_torchdynamo_inline"))
            return self.call_function(inline, args, kwargs)
        call = self.lookup(t, "__call__")
        if type(call) is _FunctionType:
            return self.call(call, (fn, *args), kwargs)
        return self.call_native(fn, args, kwargs)

    def _referent(self, ref):
        """`ref()`: a tensor input's proxy; for a reference from outside (a WeakValueDictionary's), what it refers to,
        reported as read through it (`ref().scale` is guarded: the referent can be another object on a later call)."""
        value = ref()
        found = self.ctx.referent(value)
        if found is not value:
            return found
        prov = self.external.get(id(ref))
        return value if prov is None else self.report(value, Call(prov))

    def call_inlined(self, jitted, name: str, args, kwargs):
        """`jitted(*args)` where `jitted` is a jitcore.jit function or module: what it wraps (its attribute `name`)
        is interpreted in this program, read through `jitted` like any attribute; its own cache is not used."""
        inner = jitted.__dict__[name]
        prov = self.external.get(id(jitted))
        if prov is not None:
            inner = self.report(inner, Attr(prov, name))
        return self.call(inner, args, kwargs)

    def read_whole(self, *objs):
        """Native code is about to read these objects whole (`shape == [1, 2]`, `3 in dims`, `shape + [1]`): the
        context guards what an external list, tuple or dict among them holds, as if read item by item."""
        if self.notify_native and any(id(o) in self.external for o in objs):
            self.ctx.on_call_native(None, objs, {})

    def call_native(self, fn, args, kwargs):
        if self.notify_native:
            self.ctx.on_call_native(fn, args, kwargs)
        spec = CONTAINER_METHODS.get(id(fn))
        if spec is not None and args and (id(args[0]) in self.external or _writes_globals(spec, args[0])):
            return spec(self, fn, args, kwargs)
        t = type(fn)
        if t is types.BuiltinMethodType or t is types.MethodWrapperType:
            owner = fn.__self__
            if (id(owner) in self.external and not isinstance(owner, types.ModuleType)) or (
                    type(owner) is dict and "__name__" in owner and _writes_globals(_mutator_of(owner, fn), owner)):
                cls = fn.__objclass__ if t is types.MethodWrapperType else type(owner)
                unbound = type_lookup(cls, fn.__name__)
                spec = CONTAINER_METHODS.get(id(unbound))
                if spec is not None:
                    return spec(self, unbound, (owner, *args), kwargs)
        if t is types.BuiltinMethodType and fn.__name__ in BUILTIN_METHODS:  # (`sep.join(o)`: o's __iter__ interpreted)
            r = BUILTIN_METHODS[fn.__name__](self, fn, args, kwargs)
            if r is not NULL:
                return r
        return as_user(fn, *args, **kwargs)  # (str(n) of a symbolic size is its value's text: jitcore/ir/arith.py)

    def call_function(self, fn, args, kwargs):
        """Interpret a Python function (or call it natively when it is jitcore's or ctx says so)."""
        mod = fn.__module__
        if (mod is not None and mod.startswith("jitcore.")) or not self.should_inline(fn):
            return self.call_native(fn, args, kwargs)
        code = fn.__code__
        if code not in self._seen_code:
            self._seen_code.add(code)
            if is_user_file(code.co_filename):
                self.entered[code] = None
        prov = self.external.get(id(fn))
        if prov is not None and code in self.entered and id(fn) not in self._code_read:
            # which code runs is read from the function (`helper.__code__ = other.__code__` between calls), and so
            # are the defaults that fill its parameters (`helper.__defaults__ = (5.0,)`)
            self._code_read.add(id(fn))
            self.report(code, Attr(prov, "__code__"))
            self.defaults_owners.setdefault(id(fn), prov)
        info = code_info(code)
        if info.flags & CO_ASYNC:
            raise UnsupportedError(
                "callable",
                f"async function {fn.__qualname__} (coroutines and async generators are not interpreted)",
                hint="call it outside the jitted function",
            )
        frame = Frame(self, code, info, fn.__globals__, fn)
        bind_args(fn, code, args, kwargs, frame.localsplus)
        if (fn.__defaults__ or fn.__kwdefaults__) and id(fn) in self.defaults_owners:
            self._report_defaults(fn, code, len(args), kwargs, frame.localsplus)
        return self.run(frame)

    def set_root(self, fn):
        """The called object: its defaults, a bound method's function's or an object's `forward`'s are guarded,
        and those of the functions they wrap (functools.wraps' `__wrapped__`); other functions' defaults are read
        as they are when traced."""
        roots = [(fn, Fn())]
        if type(fn) is types.MethodType:
            roots.append((fn.__func__, Attr(Fn(), "__func__")))
        forward = inspect.getattr_static(fn, "forward", None)
        if type(forward) is _FunctionType and "forward" not in getattr(fn, "__dict__", {}):
            roots.append((forward, Attr(Attr(Fn(), "forward"), "__func__")))
        owners = {}
        for f, prov in roots:
            for _ in range(8):  # decorators stacked on the function
                owners[id(f)] = prov
                f, prov = inspect.getattr_static(f, "__wrapped__", None), Attr(prov, "__wrapped__")
                if type(f) is not _FunctionType:
                    break
        self.defaults_owners = owners

    def _report_defaults(self, fn, code, n: int, kwargs: dict, ls: list):
        """The defaults that filled parameters of a call of a function in defaults_owners are values read from
        outside: reported as `<owner>.__defaults__[i]` / `<owner>.__kwdefaults__[name]` (the defaults tuple itself
        too, whose length decides which parameters they fill), so the context guards them or makes them inputs."""
        prov, argc, names = self.defaults_owners[id(fn)], code.co_argcount, code.co_varnames
        defaults = fn.__defaults__ or ()
        first, posonly = argc - len(defaults), code.co_posonlyargcount
        used = [j for j in range(max(n, first), argc) if j < posonly or names[j] not in kwargs]
        if used:
            tprov = Attr(prov, "__defaults__")
            self.report(defaults, tprov)
            for j in used:
                ls[j] = self.report(defaults[j - first], Item(tprov, j - first))
        kwdefaults = fn.__kwdefaults__ or {}
        for j in range(argc, argc + code.co_kwonlyargcount):
            if names[j] not in kwargs and names[j] in kwdefaults:
                ls[j] = self.report(kwdefaults[names[j]], Item(Attr(prov, "__kwdefaults__"), names[j]))

    def user_stack(self) -> tuple:
        """((code, instruction), ...) of the interpreted frames, outermost first: where a line being recorded comes
        from (jitcore/interpreter/user_traceback.py at_user_line shows it when that line fails at run time)."""
        out, frame = [], self.frame
        while frame is not None:
            out.append((frame.code, frame.insts[max(frame.ip - 1, 0)]))
            frame = frame.parent
        return tuple(reversed(out))

    def user_globals(self) -> tuple:
        """The globals of the interpreted frames, outermost first (as user_stack lists them)."""
        out, frame = [], self.frame
        while frame is not None:
            out.append(frame.globals)
            frame = frame.parent
        return tuple(reversed(out))

    def run(self, frame):
        """Run a fresh frame to its end; returns its value, or an interpreted generator for generator code."""
        if self.depth >= MAX_DEPTH:
            raise RecursionError(f"maximum interpreted call depth ({MAX_DEPTH}) exceeded")
        parent = self.frame
        frame.parent = parent
        self.frame = frame
        self.depth += 1
        try:
            sig = run_frame(frame)
        finally:
            self.frame = parent
            self.depth -= 1
        if sig == RETURNED:
            return frame.retval
        from jitcore.interpreter.generators import InterpGenerator  # cycle: generators.py runs frames with run_frame

        return InterpGenerator(self, frame)

    def instantiate(self, cls, args, kwargs):
        """`cls(*args, **kwargs)`: interpret Python-level __new__/__init__, else call natively."""
        meta = type(cls)
        if meta is not type:
            mcall = self.lookup(meta, "__call__")
            if type(mcall) is _FunctionType:
                return self.call(mcall, (cls, *args), kwargs)
        new = self.lookup(cls, "__new__")
        init = self.lookup(cls, "__init__")
        if isinstance(new, staticmethod):
            new = new.__func__
        if type(new) is not _FunctionType and type(init) is not _FunctionType:
            if issubclass(cls, type) and len(args) == 3:  # a metaclass making a class: its __module__ as eager's
                args = (*args[:2], with_caller_module(self.frame, cls, args[1], args[2]))
            return self.call_native(cls, args, kwargs)
        if type(new) is _FunctionType:
            obj = self.call(new, (cls, *args), kwargs)
        elif new is object.__new__:
            obj = object.__new__(cls)
        else:
            obj = cls.__new__(cls, *args, **kwargs)
        if not isinstance(obj, cls):
            return obj
        init = self.lookup(type(obj), "__init__")
        if type(init) is _FunctionType:
            res = self.call(init, (obj, *args), kwargs)
            if res is not None:
                raise TypeError(f"__init__() should return None, not '{type(res).__name__}'")
        elif init is not object.__init__:
            type(obj).__init__(obj, *args, **kwargs)
        return obj

    # -- cells of functions created outside ----------------------------------------------------------------------
    def register_closure(self, fn, cells):
        if id(fn) in self.created_fns:
            return
        parent = self.external.get(id(fn))
        for name, cell in zip(fn.__code__.co_freevars, cells):
            if id(cell) not in self.ext_cells:
                self.ext_cells[id(cell)] = Closure(parent, fn.__qualname__, name)
                self.keepalive.append(cell)


_PLACEHOLDER = getattr(functools, "Placeholder", NULL)  # (3.14: partial(f, Placeholder, 2)(x) is f(x, 2))


def _partial_args(bound: tuple, args: tuple) -> tuple:
    """The positional arguments a functools.partial with arguments `bound` passes when called with `args`."""
    if _PLACEHOLDER is NULL or not any(a is _PLACEHOLDER for a in bound):
        return bound + args
    holes = sum(a is _PLACEHOLDER for a in bound)
    if len(args) < holes:
        raise TypeError(f"missing positional arguments in 'partial' call; expected at least {holes}, got {len(args)}")
    rest = iter(args)
    filled = tuple(next(rest) if a is _PLACEHOLDER else a for a in bound)
    return filled + tuple(rest)


def _is_jitcore_obj(obj) -> bool:
    mod = getattr(type(obj), "__module__", None) or ""
    if mod.startswith("jitcore.") or mod == "jitcore":
        return True
    mod = getattr(obj, "__module__", None)
    return isinstance(mod, str) and mod.startswith("jitcore.") and not isinstance(obj, type)


def _set_context(exc, handled):
    """CPython's implicit exception chaining: `exc.__context__ = handled`, cutting cycles."""
    o = handled
    while True:
        ctx = o.__context__
        if ctx is None:
            break
        if ctx is exc:
            o.__context__ = None
            break
        o = ctx
    exc.__context__ = handled


def handle_exception(frame, exc, idx) -> bool:
    """Route `exc` raised at instruction `idx` to its handler in this frame; False if there is none."""
    entry = frame.info.handlers[idx]
    if entry is None:
        return False
    target, depth, lasti = entry
    stack = frame.stack
    del stack[depth:]
    if lasti:
        stack.append(idx)
    stack.append(exc)
    frame.ip = target
    return True


def annotate(frame, exc, inst):
    """Give a JitError the location of the innermost user frame it passes through."""
    if getattr(exc, "where", "") is not None or not hasattr(exc, "with_where"):
        return
    where = frame.where(inst)
    if is_user_file(frame.code.co_filename):
        exc.with_where(where)
    elif frame.rt.fallback_where is None:
        frame.rt.fallback_where = where


def run_frame(frame, throw=None):
    """Execute `frame` until it returns, yields or raises. `throw`: an exception to raise at the resume point."""
    insts = frame.insts
    if throw is not None:
        idx = max(frame.ip - 1, 0)
        if not handle_exception(frame, throw, idx):
            if isinstance(throw, JitError):
                annotate(frame, throw, insts[idx])
            user_traceback.arrived(frame, insts[idx], throw)
            user_traceback.record(frame.rt, frame, throw)
            raise throw
    while True:
        inst = insts[frame.ip]
        frame.ip += 1
        try:
            sig = inst.fn(frame, inst)
        except BaseException as exc:
            e = eager_errors.as_eager(exc) if type(exc) is MetaError else exc  # eager's exception type
            rt = frame.rt
            if e.__context__ is None:
                handled = rt.topmost_exc()
                if handled is not None and handled is not e:
                    _set_context(e, handled)
            if isinstance(e, JitError):  # where it was raised, before a with/finally cleanup re-raises it
                annotate(frame, e, inst)
            user_traceback.arrived(frame, inst, e)
            if handle_exception(frame, e, inst.idx):
                continue
            user_traceback.record(rt, frame, e)
            if e is not exc:
                raise e from exc.__cause__
            raise
        if sig is not None:
            return sig


# filled by lookasides.py / containers.py (imported by the package __init__)
LOOKASIDES: dict[int, object] = {}
CONTAINER_METHODS: dict[int, object] = {}


def _mutator_of(owner, fn):
    return CONTAINER_METHODS.get(id(type_lookup(type(owner), fn.__name__)))


def _writes_globals(spec, obj) -> bool:
    """Whether spec (a CONTAINER_METHODS handler) is a mutator called on a module's globals dict: it records the write
    as a global's (`globals().__setitem__("G", v)` is `global G; G = v`)."""
    if not getattr(spec, "writes_globals", False) or type(obj) is not dict:
        return False
    mod = sys.modules.get(obj.get("__name__")) if type(obj.get("__name__")) is str else None
    return mod is not None and getattr(mod, "__dict__", None) is obj
BUILTIN_METHODS: dict[str, object] = {}  # method name -> handler(rt, fn, args, kwargs) of a bound builtin, or NULL
# callable objects whose call reads its argument (operator.attrgetter, itemgetter): type -> handler(rt, fn, args,
# kwargs)
CALLABLE_OBJECTS: dict[type, object] = {}
