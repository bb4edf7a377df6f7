"""IR checks: `lint(trace)` verifies a trace's naming invariants, in the style of FX's `graph.lint()`.

The pipeline lints every trace it keeps when `CHECK` is on (the test suite turns it on in tests/conftest.py; the
environment variable JITCORE_LINT=1 turns it on in any process). Off by default: it costs nothing on the hot path.
"""
from __future__ import annotations

import ast
import builtins
import os
import re

from jitcore.ir.codegen import Printer, bsym_call, lhs, trace_source
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves

# whether the pipeline lints the traces it keeps (read at compile time only)
CHECK: bool = os.environ.get("JITCORE_LINT", "") not in ("", "0")

# the op id of the `del` lines transforms/memory.py's del_last_used writes (an op id, not an import: the IR does not
# import transforms)
DEL_OP = "python.del"
_HEADER_NAME = re.compile(r"^# (\w+): ", re.M)
# the op id of a size unpack, `(i0, i1) = prims.shape(t0)` (jitcore/ops/prims_shape.py)
SHAPE_OP = "prims.shape"


class TraceLintError(AssertionError):
    """A trace breaks an invariant of the IR: the message names the trace's pass, the line and the name."""


def lint(trace) -> None:
    """Raise TraceLintError unless `trace` keeps these invariants (returns None when it does):

    1. Each name is defined once: by an argument or by the output of a top-level line, never both or twice
       (the exceptions: a number computed again by the very same line or by a size unpack, see _same_number; a
       line giving back one of its own inputs, see _passes_through).
    2. Each top-level line reads only names defined above it (arguments, earlier outputs); the output reads only
       defined names.
    3. `del` lines delete names that are defined and not yet deleted, and no line (nor the output) reads a name
       after its `del`.
    4. Subsymbols, recursively (a composite's decomposition, a fusion region's members, a claimed line's original):
       each reads only its parent's inputs, the outputs of its earlier siblings, or a size (number proxy) in the
       shape of a tensor it may read; siblings define each name at most once and none redefines a parent input;
       every output of the parent is an output of one of its subsymbols or one of the parent's inputs.
       A subsymbol may also read a number (a NumberProxy, never a tensor) defined at the top level above the line.
       Both number clauses are what holds today (symbolic values): a composite's decomposition reads the sizes of
       its input tensors directly (`prims.reshape(t0, (i0, 1, i1))` under `ltorch.unsqueeze(t0, 1)`) even where
       no top-level line defines them (the decomposition prints as comments; claim() defines the sizes before a
       decomposition runs, see jitcore/frontend/tracing.py's define_sizes); and after functionalization or CSE renamed a
       line's input tensor, its decomposition still reads the sizes under their first names, which the top level
       computes above it (`ltorch.slice_scatter(t2, t25, 0, i3, i4, 1)` whose `prims.full((i21, i9), True, ...)`
       reads i9, a size of the input t25 whose shape now prints as `[i21, i23]`).
    5. Its printed text is valid Python in which every name read is a parameter, assigned by an earlier statement
       and not deleted since, a global the generated code is given, or a builtin. Checked for a trace compiled
       already (the ones that run: its source is at hand) and for a trace whose names are text: the prologue and
       the epilogue (`fn, args, kwargs`: their "proxies" are bare names, `outs[2]`), for which it is the check.
    """
    where = _where(trace)
    proxies = all(isinstance(a, Proxy) for a in trace.args)
    if proxies:
        _check_proxies(trace, where)
    compiled = getattr(trace, "_callable", None)
    if compiled is not None or not proxies:  # printing every pass's trace again would double the tests' compile time
        _check_source(getattr(compiled, "__jitcore_source__", None) or trace_source(trace), where)


def _check_proxies(trace, where):
    defined: set[str] = set()
    for a in trace.args:
        if a.name in defined:
            raise TraceLintError(f"{where}: the argument {a.name} appears twice in the signature")
        defined.add(a.name)
    deleted: dict[str, int] = {}  # name -> index of the line that deleted it
    makers: dict = {}  # name -> the first top-level line that defines it
    numbers = {a.name for a in trace.args if isinstance(a, NumberProxy)}  # numbers a subsymbol may read
    for i, bsym in enumerate(trace.bound_symbols):
        line = _Where(where, "line", i, bsym)  # printed only for a message
        if bsym.sym.id == DEL_OP:
            for a in bsym.flat_args():
                if not isinstance(a, Proxy):
                    raise TraceLintError(f"{line}: deletes {a!r}, which is not a proxy")
                if a.name in deleted:
                    raise TraceLintError(f"{line}: deletes {a.name} a second time (line {deleted[a.name]} did)")
                if a.name not in defined:
                    raise TraceLintError(f"{line}: deletes {a.name}, which is not defined")
                deleted[a.name] = i
            continue
        for a in bsym.flat_proxy_args():
            _check_read(a.name, defined, deleted, line)
        _check_subsymbols(bsym, line, numbers)
        for o in bsym.flat_proxy_outs():
            if o.name in defined and not _same_number(o, bsym, makers.get(o.name)) and not _passes_through(o, bsym):
                raise TraceLintError(f"{line}: defines {o.name}, which is already defined")
            defined.add(o.name)
            makers.setdefault(o.name, bsym)
            if isinstance(o, NumberProxy):
                numbers.add(o.name)
    for o in tree_leaves(trace.output):
        if isinstance(o, Proxy):
            _check_read(o.name, defined, deleted, f"{where}, the output")


def _same_number(o, bsym, first) -> bool:
    """The redefinitions allowed: a number computed again by the very same line (same printed text), or a number
    that one of the two lines reads off a tensor's shape (a size unpack, `(i3,) = prims.shape(t1)`).

    Both happen today, with the same value each time (symbolic values). Functionalization hoists the number lines
    a view's decomposition reads to the top level (transforms/functionalize.py's _define_numbers: `i3 = 2 % i1`
    of `ltorch.select(t1, 1, 2)`, keeping the proxy), and a pass that inlines that decomposition later (the grad
    transform, claim) defines it a second time. The interpreter unpacks the size of a composite's output
    (`(i3,) = prims.shape(t1)` after `t1 = ltorch.flatten(t0)`, whose decomposition computes `i3 = i0 * i1`), and
    the grad transform's forward inlines the decomposition above the unpack (fuzz seed 272). A size known only at
    run time (`u0`, o.runtime) is one count of one tensor: `prims.nonzero` of it defines the same u0 each time
    (`x[m] * w[m]`: two selections by m). Anything else defined twice is an error."""
    if not isinstance(o, NumberProxy) or first is None:
        return False
    if o.runtime and (_counts(bsym) or _is_size_unpack(bsym)) and (_counts(first) or _is_size_unpack(first)):
        return True
    return _is_size_unpack(bsym) or _is_size_unpack(first) or _full_text(bsym) == _full_text(first)


def _counts(bsym) -> bool:
    """prims.nonzero (or an executor's line that runs it)."""
    return bsym.sym.id == "prims.nonzero" or (len(bsym.subsymbols) == 1 and
                                              bsym.subsymbols[0].sym.id == "prims.nonzero")


def _passes_through(o, bsym) -> bool:
    """A composite line may give back one of its own inputs (the same proxy) among its outputs: it rebinds the
    name to the same value.

    It happens today: `(t0, t3, t5) = ltorch.broadcast_tensors(t0, t1, t2)` when t0 has the broadcast shape already
    (the composite returns its input; tests/test_containers.py's broadcast_tensors case)."""
    if not any(a is o for a in bsym.flat_proxy_args()):
        return False
    if not bsym.sym.is_prim:  # a composite's body may return its input
        return True
    # a prim's meta makes new values; an executor's line gives the input back when its original (a subsymbol) does
    return any(_passes_through(o, s) for s in bsym.subsymbols)


def _is_size_unpack(bsym) -> bool:
    """prims.shape, or an executor's line whose one subsymbol is (`torchex._shape`)."""
    while bsym.sym.id != SHAPE_OP:
        if len(bsym.subsymbols) != 1:
            return False
        bsym = bsym.subsymbols[0]
    return True


def _check_read(name, defined, deleted, line):
    if name in deleted:
        raise TraceLintError(f"{line}: reads {name} after its del (line {deleted[name]})")
    if name not in defined:
        raise TraceLintError(f"{line}: reads {name}, which is not defined above")


def _sizes(p) -> list:
    """The number proxies in a tensor proxy's shape (read without recording anything)."""
    if not isinstance(p, TensorProxy):
        return []
    return [d.name for d in p._shape if isinstance(d, Proxy)]


def _check_subsymbols(bsym, line, numbers: set):
    if not bsym.subsymbols:
        return
    inputs = bsym.flat_proxy_args()
    given = {a.name for a in inputs}
    given.update(s for a in inputs for s in _sizes(a))
    readable = given | numbers
    made: set[str] = set()
    for j, sub in enumerate(bsym.subsymbols):
        at = _Where(line, "subsymbol", j, sub)
        if sub.sym.id == DEL_OP:
            raise TraceLintError(f"{at}: a del line among subsymbols")
        for a in sub.flat_proxy_args():
            if a.name not in readable:
                raise TraceLintError(f"{at}: reads {a.name}, which is neither an input of the line nor an output "
                                     f"of an earlier subsymbol")
        _check_subsymbols(sub, at, numbers)
        for o in sub.flat_proxy_outs():
            if o.name in made and not _passes_through(o, sub):
                raise TraceLintError(f"{at}: defines {o.name}, which an earlier subsymbol defines")
            if o.name in {a.name for a in inputs} and not _passes_through(o, sub):
                raise TraceLintError(f"{at}: defines {o.name}, which is an input of the line")
            made.add(o.name)
            readable.add(o.name)
            readable.update(_sizes(o))
    for o in bsym.flat_proxy_outs():
        if o.name not in made and o.name not in given:
            raise TraceLintError(f"{line}: outputs {o.name}, which no subsymbol produces")


def _check_source(source, where):
    """Every name the generated function reads is a parameter, assigned by an earlier statement and not deleted
    since, a global the generated code is given (namespaces and constants, see jitcore/ir/codegen.py) or a
    builtin."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TraceLintError(f"{where}: its text is not valid Python ({e.msg}, line {e.lineno}: {e.text!r})") from None
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    # the globals compile_trace gives it: the namespaces it imports, and the constants and namespaces its header
    # lists (`# _c0: builtin_function_or_method is_grad_enabled`)
    known = set(dir(builtins)) | {m.group(1) for m in _HEADER_NAME.finditer(source[:source.find("\ndef ")])}
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            known.update((a.asname or a.name).split(".")[0] for a in st.names)
    defined = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    if fn.args.vararg:
        defined.add(fn.args.vararg.arg)
    if fn.args.kwarg:
        defined.add(fn.args.kwarg.arg)
    _walk(fn.body, defined, {}, known, where)


def _walk(statements, defined: set, deleted: dict, known: set, where: str):
    for st in statements:
        at = _Statement(where, st)  # printed only for a message
        if isinstance(st, ast.Delete):
            for target in st.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        if n.id in deleted:
                            raise TraceLintError(f"{at}: deletes {n.id} a second time")
                        if n.id not in defined:
                            raise TraceLintError(f"{at}: deletes {n.id}, which is not defined")
                        deleted[n.id] = at
                        defined.discard(n.id)
            continue
        reads, targets, body = _parts(st)
        for expr in reads:
            for name in _loads(expr):
                if name in deleted:
                    raise TraceLintError(f"{at}: reads {name} after its del (`{deleted[name].text()}`)")
                if name not in defined and name not in known:
                    raise TraceLintError(f"{at}: reads {name}, which is not defined above")
        for target in targets:
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    defined.add(n.id)
                    deleted.pop(n.id, None)
                elif isinstance(n, (ast.Subscript, ast.Attribute)):  # `args[0].x = v` reads args
                    for name in _loads(n.value):
                        if name not in defined and name not in known:
                            raise TraceLintError(f"{at}: reads {name}, which is not defined above")
        if body:
            _walk(body, defined, deleted, known, where)  # what a branch assigns counts as defined after it


def _parts(st) -> tuple:
    """(expressions a statement reads before its body, targets it assigns, its body's statements)."""
    if isinstance(st, (ast.If, ast.While)):
        return [st.test], [], [*st.body, *st.orelse]
    if isinstance(st, ast.For):
        return [st.iter], [st.target], [*st.body, *st.orelse]
    if isinstance(st, ast.With):
        return [i.context_expr for i in st.items], [i.optional_vars for i in st.items if i.optional_vars], st.body
    if isinstance(st, ast.Try):
        handlers = [s for h in st.handlers for s in h.body]
        names = [ast.Name(h.name, ast.Store()) for h in st.handlers if h.name]
        return [h.type for h in st.handlers if h.type], names, [*st.body, *handlers, *st.orelse, *st.finalbody]
    if isinstance(st, ast.Assign):
        return [st.value], st.targets, []
    if isinstance(st, ast.AugAssign):  # `x += 1` reads x
        read = ast.Name(st.target.id, ast.Load()) if isinstance(st.target, ast.Name) else st.target
        return [st.value, read], [st.target], []
    if isinstance(st, ast.AnnAssign):
        return [st.value] if st.value is not None else [], [st.target], []
    return [st], [], []


def _loads(node) -> set:
    """Names `node` reads, less those bound inside it (lambda parameters, comprehension targets)."""
    bound, loads = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Lambda):
            bound.update(a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs))
        elif isinstance(n, ast.comprehension):
            bound.update(t.id for t in ast.walk(n.target) if isinstance(t, ast.Name))
        elif isinstance(n, ast.NamedExpr):
            bound.add(n.target.id)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads.add(n.id)
    return loads - bound


class _Statement:
    """`{where}, the statement `del t0``: printed only when a check fails."""

    __slots__ = ("statement", "where")

    def __init__(self, where, statement):
        self.where, self.statement = where, statement

    def text(self) -> str:
        text = ast.unparse(self.statement).splitlines()[0]
        return text if len(text) <= 100 else text[:97] + "..."

    def __str__(self) -> str:
        return f"{self.where}, the statement `{self.text()}`"


class _Where:
    """`{outer}, line 3 (t1 = prims.neg(t0))`: made for every line, printed only when a check fails."""

    __slots__ = ("bsym", "index", "kind", "outer")

    def __init__(self, outer, kind, index, bsym):
        self.outer, self.kind, self.index, self.bsym = outer, kind, index, bsym

    def __str__(self) -> str:
        return f"{self.outer}, {self.kind} {self.index} ({_text(self.bsym)})"


def _where(trace) -> str:
    return f"trace {trace.fn_name!r} [{trace.provenance or 'no provenance'}]"


def _full_text(bsym) -> str:
    """The line as printed (no subsymbols)."""
    try:
        call = bsym_call(bsym, Printer())
    except Exception:  # a line that cannot print is still reported, by its op id
        return f"<{bsym.sym.id}>"
    target = None if bsym.sym.printer is not None else lhs(bsym.output)
    return f"{target} = {call}" if target else call


def _text(bsym) -> str:
    """The line's first printed line, shortened, for messages."""
    text = _full_text(bsym)
    text = text.splitlines()[0] if text else text
    return text if len(text) <= 100 else text[:97] + "..."


def lint_traces(*groups) -> None:
    """lint() every trace of every group (lists of traces: a history, the backward's, the prologues...)."""
    for group in groups:
        for trace in group:
            lint(trace)
