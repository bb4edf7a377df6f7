"""Guards stage: the prologue Trace. From the inputs' provenance and what the computation assumed (Guards: each kind
of guard a row of jitcore/guards/kinds.py, whose rows this loops over), it builds a straight-line program
`prologue(fn, args, kwargs)` that fetches every input and checks every assumption; it returns the inputs, or None on
a miss (a value that can no longer be fetched included: never an exception). The explain variant returns the failed
check's text; the hot variant leaves out what the cache's key checked.
"""
from __future__ import annotations

import dataclasses
import math
import sys

import torch

from jitcore.guards import kinds, module_state
from jitcore.guards.cache import KEY_VALUE_TYPES, SYMBOLIC_VALUE_TYPES
from jitcore.guards.kinds import Reason, Sources
from jitcore.guards.module_guards import module_split
from jitcore.guards.module_state import ModuleGuardState
from jitcore.interpreter import provenance as P
from jitcore.ir.codegen import bsym_lines
from jitcore.ir.proxies import IntegerProxy, Proxy, TensorProxy
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
from jitcore.ir.trace import Timer, Trace
from jitcore.ops.rng_generators import GeneratorProxy


def provenance_expr(prov, printer, bound: dict | None = None) -> str:
    """The Python expression that fetches `prov` from a call's (fn, args, kwargs) in generated code.

    bound: provenance -> a local name already holding it (common prefixes are fetched once)."""
    if bound and prov in bound:
        return bound[prov]
    t = type(prov)
    if t is _CellProv:
        return f"{printer.const(prov.cell)}.cell_contents"
    if t is P.Arg:
        return f"args[{prov.index}]"
    if t is P.Kwarg:
        return f"kwargs[{prov.name!r}]"
    if t is P.Fn:
        return "fn"
    if t is P.Attr:
        base = provenance_expr(prov.parent, printer, bound)
        return f"{base}.{prov.name}" if prov.name.isidentifier() else f"getattr({base}, {prov.name!r})"
    if t is P.Item and not isinstance(prov.key, P.SliceKey):
        parent = prov.parent.parent if type(prov.parent) is P.DictView else prov.parent
        key = printer.const(prov.key.obj) if type(prov.key) is P.ObjectKey else printer.value(prov.key)
        return f"{provenance_expr(parent, printer, bound)}[{key}]"
    if t is P.StoredKey:
        parent = provenance_expr(prov.parent, printer, bound)
        return f"{printer.const(P.stored_key)}({parent}, {printer.const(prov.key.obj)})"
    if t is P.Converted:
        return f"{printer.const(prov.fn)}({provenance_expr(prov.parent, printer, bound)})"
    if t is P.Call:
        args = (provenance_expr(a, printer, bound) if isinstance(a, P.Provenance) else printer.value(a)
                for a in prov.args)
        return f"{provenance_expr(prov.parent, printer, bound)}({', '.join(args)})"
    if t is P.Global and prov.namespace is not None:
        return f"{printer.const(prov.namespace)}[{prov.name!r}]"
    if t is P.Global and prov.module != "builtins":
        mod = sys.modules.get(prov.module)
        if mod is not None:
            return f"{printer.const(mod.__dict__)}[{prov.name!r}]"
    if t is P.Module:
        return printer.const(sys.modules[prov.name])
    return f"{printer.const(prov)}.load({printer.const(P.Roots)}(args, kwargs, fn))"


# -- the prologue's lines: `name = <provenance>` and `if <failed>: return None` ------------------------------------
def _print_bind(bsym, printer):
    name, prov, bound = bsym.args
    return f"{name} = {provenance_expr(prov, printer, bound)}"


def _print_check(bsym, printer):
    """args: (conditions [(text or callable(printer) -> text, reason)], hot); one line, or one per reason."""
    conds, explain = bsym.args[0], bsym.kwargs.get("explain")
    texts = [(c(printer) if callable(c) else c, why) for c, why in conds]
    if explain:  # a reason is text, or a Reason: an expression that builds it from this call's values
        return "\n  ".join(f"if {c}: return {why.expr if isinstance(why, Reason) else repr(why)}" for c, why in texts)
    return f"if {' or '.join(c for c, _ in texts)}: return None"


def _print_call_shape(bsym, printer):
    """args: the call_shape kind's entry (jitcore/guards/kinds.py)."""
    return kinds.BY_NAME["call_shape"].check(bsym.args, bsym.kwargs.get("explain"), printer)


def _print_comment(bsym, printer):
    return f"# {bsym.args[0]}"


def _sym(name, printer, call_ctx=None):
    return Symbol(f"prologue.{name}", name, meta=lambda *a, **k: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                  printer=printer, call_ctx=call_ctx)


# What reading a provenance chain raises once it no longer resolves: an attribute gone (AttributeError), a dict key
# missing (KeyError), a list shorter (IndexError), an object no longer subscriptable or sized (TypeError: `None[0]`,
# `len(3)`), a closure cell emptied by `del` (ValueError). The prologue turns exactly these into a miss.
FETCH_ERRORS = (AttributeError, KeyError, IndexError, TypeError, ValueError)
_FETCH_ERRORS_TEXT = f"({', '.join(e.__name__ for e in FETCH_ERRORS)})"


def _print_fetches(bsym, printer):
    """args: (the lines that fetch values through provenance chains, and the checks between them): one try block;
    a chain that no longer resolves returns None (explain: the reason)."""
    lines, explain = bsym.args[0], bsym.kwargs.get("explain")
    body = [f"  {line}" for inner in lines for text in bsym_lines(inner, 1, printer) for line in text.split("\n")]
    handler = ("return 'a guarded value can no longer be fetched (' + type(e).__name__ + ': ' + str(e) + ')'"
               if explain else "return None")
    return "\n".join(["try:  # a provenance chain that no longer resolves is a miss (FETCH_ERRORS), not an error",
                      *body, f"  except {_FETCH_ERRORS_TEXT}{' as e' if explain else ''}: {handler}"])


bind = _sym("bind", _print_bind)
check = _sym("check", _print_check)
check_math = _sym("check", _print_check, call_ctx={"math": math})  # a predicate over math.sqrt(i2), ...
comment = _sym("comment", _print_comment)
call_shape = _sym("call_shape", _print_call_shape)
fetches = _sym("fetches", _print_fetches)
fetches_math = _sym("fetches", _print_fetches, call_ctx={"math": math})


def _fallible(bsym) -> bool:
    """Whether a prologue line may raise FETCH_ERRORS: it reads an attribute, item, global or closure cell (an
    argument, `fn` and an imported module are always there once the call's shape matched), or a length."""
    if bsym.sym is bind:
        return type(bsym.args[1]) not in (P.Arg, P.Kwarg, P.Fn, P.Module)
    return bsym.fallible


def _guard_fetches(b: list, start: int, kw: dict):
    """Put b[start:] in one `fetches` block when one of its lines may raise FETCH_ERRORS (a block holding a predicate
    over math.sqrt(i2) names math for the program, as that line would)."""
    if any(_fallible(x) for x in b[start:]):
        sym = fetches_math if any(x.sym is check_math for x in b[start:]) else fetches
        b[start:] = [BoundSymbol(sym, (b[start:],), kw, None)]


def _tensor_checks(name: str, t: TensorProxy, covered: bool, where: str, exact_type=None) -> list:
    """Conditions that fail when the tensor `name` does not match the proxy `t` (type, metadata, sizes)."""
    if covered:
        return []
    sym = any(isinstance(s, IntegerProxy) for s in t._shape)
    shape = f"{name}.dim() != {len(t._shape)}" if sym else f"{name}.shape != {tuple(t._shape)!r}"
    if exact_type is not None:
        def kind(p):
            return f"type({name}) is not {p.const(exact_type)}"
    else:
        kind = f"not isinstance({name}, torch.Tensor)"
    if t.device.type == "cpu":
        device = f"not {name}.is_cpu"
    else:
        def device(p):
            return f"{name}.device != {p.value(t.device)}"
    rg = f"not {name}.requires_grad" if t.requires_grad else f"{name}.requires_grad"

    def meta(p):  # the dtype as a bound constant: a global lookup instead of torch.<dtype>
        return f"{shape} or {name}.dtype is not {p.const(t.dtype)}"

    return [(kind, f"{where}: expected a {getattr(exact_type, '__name__', 'tensor')}"),
            (meta, f"{where}: expected a tensor {t.type_string()}"),
            (device, f"{where}: expected device {t.device}"),
            (rg, f"{where}: expected requires_grad={t.requires_grad}")]


def _size_lines(name: str, t: TensorProxy, b: list, kw: dict, sizes_unchecked: bool):
    """`(i0, _s1) = t0.shape` and the checks: 0/1 sizes equal, symbolic sizes >= 2. sizes_unchecked: the sizes
    of a tensor with no symbolic size were not checked yet (the signature key has only its rank)."""
    if not any(isinstance(s, IntegerProxy) for s in t._shape):
        if sizes_unchecked:
            conds = [(f"{name}.shape != {tuple(t._shape)!r}", f"{name}: expected sizes {tuple(t._shape)}")]
            b.append(BoundSymbol(check, (conds,), kw, None))
        return
    targets, conds = [], []
    for d, s in enumerate(t._shape):
        if isinstance(s, IntegerProxy):
            targets.append(s.name)
            conds.append((f"{s.name} < 2", f"{name}.shape[{d}]: expected >= 2 (sizes 0 and 1 are specialised)"))
        else:
            targets.append(f"_{name}_{d}")
            conds.append((f"_{name}_{d} != {s}", f"{name}.shape[{d}]: expected {s}"))
    lhs = f"({targets[0]},)" if len(targets) == 1 else ", ".join(targets)
    b.append(BoundSymbol(comment, (f"sizes of {name}",), {}, None))
    b.append(BoundSymbol(_assign, (lhs, f"{name}.shape"), {}, None))
    b.append(BoundSymbol(check, (conds,), kw, None))


_assign = _sym("assign", lambda bsym, printer: f"{bsym.args[0]} = {bsym.args[1]}")


def _direct(inp, roots):
    """A parameter or buffer read as `module.name` is fetched from the module's `_parameters`/`_buffers` dict
    (what nn.Module.__getattr__ would do, without its Python-level call on every prologue run)."""
    prov = inp.provenance
    if roots is None or type(prov) is not P.Attr or type(inp.proxy) is not TensorProxy:
        return inp
    try:
        owner = prov.parent.load(roots)
    except FETCH_ERRORS:  # (the traced call's own objects: resolves unless a property raises)
        return inp
    if not isinstance(owner, torch.nn.Module) or prov.name in owner.__dict__:
        return inp
    for store in ("_parameters", "_buffers"):
        if prov.name in owner.__dict__.get(store, ()):
            return dataclasses.replace(inp, provenance=P.Item(P.Attr(prov.parent, store), prov.name))
    return inp


def _exact_type(inp, roots):
    """The exact tensor type of an argument (the trace may depend on it: isinstance(x, nn.Parameter))."""
    if roots is None or not _key_covered(inp.provenance):
        return None
    try:
        return type(inp.provenance.load(roots))
    except FETCH_ERRORS:  # (the traced call's own arguments: resolves)
        return None


def _depth(prov) -> int:
    parent = getattr(prov, "parent", None)
    return 0 if parent is None else 1 + _depth(parent)


def _key_covered(prov) -> bool:
    return type(prov) in (P.Arg, P.Kwarg)


class _Binder:
    """Names the provenance prefixes used more than once, so each object is fetched once."""

    def __init__(self, provs, b):
        uses: dict = {}
        for prov in provs:
            seen = set()
            while prov is not None:
                parent = getattr(prov, "parent", None)
                if parent is not None and type(parent) is not P.DictView and parent not in seen:
                    seen.add(parent)
                    uses[parent] = uses.get(parent, 0) + 1
                prov = parent
        self.shared = {p for p, n in uses.items() if n > 1 and type(p) not in (P.Fn, P.Arg, P.Kwarg)}
        self.bound: dict = {}
        self.b = b

    def expr(self, prov) -> str:
        """A bound name or expression for prov, binding shared ancestors first."""
        chain, p = [], getattr(prov, "parent", None)
        while p is not None and p not in self.bound:
            chain.append(p)
            p = getattr(p, "parent", None)
        for anc in reversed(chain):
            if anc in self.shared and anc not in self.bound:
                name = f"o{len(self.bound)}"
                self.b.append(BoundSymbol(bind, (name, anc, dict(self.bound)), {}, None))
                self.bound[anc] = name
        return prov

    def bind(self, name, prov):
        self.expr(prov)
        self.b.append(BoundSymbol(bind, (name, prov, dict(self.bound)), {}, None))
        self.bound[prov] = name


def build_prologue(inputs, guards, explain: bool = False, aliases=(), roots=None, hot: bool = False,
                   symbolic: bool = False, split=None, state=None) -> Trace:
    """The prologue trace for a computation whose inputs are `inputs` (TracedInput) and whose assumptions are
    `guards` (jitcore.guards.kinds.Guards). aliases: [(provenance, input name)], places where the same tensor object
    was found a second time (f(x, x), tied weights): a call must pass the same object there. roots: the traced
    call's Roots (to resolve closure cells). hot: leave out what the cache's signature key checked (symbolic: the
    key has ranks, not sizes). split (jitcore.guards.module_guards.ModuleSplit) and state (its
    module_state.ModuleGuardState): leave out the module-rooted part; take its inputs and anchors from `state`,
    running it (build_module_guards) only when the module state epoch changed since it last passed."""
    with Timer() as t:
        trace = Trace("prologue")
        trace.args = ["fn", "args", "kwargs"]
        kw = {"explain": True} if explain else {}
        b = trace.bound_symbols
        source = Sources(guards, list(aliases), roots, explain)
        keyed = SYMBOLIC_VALUE_TYPES if symbolic else KEY_VALUE_TYPES  # what the signature key holds by value
        for kind in kinds.at("call"):  # (the signature key has the call's shape: the hot variant leaves it out)
            b += [BoundSymbol(call_shape, e, kw, None) for e in kind.entries(source)
                  if not (hot and kind.hot_skip is not None and kind.hot_skip(e, keyed))]
        b.append(BoundSymbol(check, ([c for kind in kinds.at("state") for e in kind.entries(source)
                                      for c in kind.check(e)],), kw, None))
        start = len(b)  # what follows fetches values through provenance chains
        inputs = [_direct(i, roots) for i in inputs]
        items = _items(source)
        if split is not None:
            items = [it for it in items if (it[1][0], it[1][1].name) not in split.items]
            source = source._replace(aliases=[a for a in source.aliases if a not in split.aliases])
        module_inputs = split.inputs if split is not None else {}
        provs = [i.provenance for i in inputs if i.proxy.name not in module_inputs] + [it[1][0] for it in items]
        binder = _Binder(provs + [p for p, _ in source.aliases], b)
        if split is not None:
            b.append(BoundSymbol(_module_state_lines, (state, split.anchors), {}, None))
            binder.bound.update({prov: f"a{i}" for i, prov in enumerate(split.anchors)})
        for n, (prov, kind, value) in items:
            if not (hot and kind.hot_skip is not None and kind.hot_skip((prov, value), keyed)):
                b += _guard_lines(binder, prov, kind, value, n, kw, roots)
        relations = [(kind, e) for kind in kinds.at("relation") for e in kind.entries(source)]
        # the inputs the relation checks read by name (those data guards recompute their values from, alias checks
        # compare: a module's list of its own weights, nn.RNNBase's _flat_weights): bound by name even when the
        # module-rooted part fetches them
        read = {n for kind, e in relations for n in kind.reads(e)}
        for inp in inputs:
            b += _input_lines(inp, binder, kw, hot, symbolic, roots, split, read)
        b += _relation_lines(relations, binder, kw)
        _guard_fetches(b, start, kw)
        trace.output = None if explain else _output(inputs, split)
    return trace.set_provenance(f"Prologue construction (guards{', hot path' if hot else ''}"
                                f"{', per call: module-rooted guards skipped while unchanged' if split else ''})",
                                t.seconds)


def _items(source) -> list:
    """(n, (provenance, kind, value)) for every entry of the path kinds (jitcore/guards/kinds.py), shallowest first;
    n names its value (`g{n}`)."""
    items = [(prov, kind, value) for kind in kinds.at("path") for prov, value in kind.entries(source)]
    items.sort(key=lambda it: _depth(it[0]))
    return list(enumerate(items))


def _input_lines(inp, binder, kw, hot, symbolic, roots, split, read=frozenset()) -> list:
    start, b = len(binder.b), binder.b
    name, covered = inp.proxy.name, hot and _key_covered(inp.provenance)
    if split is not None and name in split.inputs:  # fetched by the module-rooted part
        if name not in split.watched:  # not an nn.Parameter: its metadata can change unseen, checked per call
            b.append(BoundSymbol(_assign, (name, f"m[{split.inputs[name]}]"), {}, None))
            b.append(BoundSymbol(check, (_tensor_checks(name, inp.proxy, False, str(inp.provenance)),), kw, None))
        elif name in read:  # a parameter a data guard reads (its metadata is watched; its values are not)
            b.append(BoundSymbol(_assign, (name, f"m[{split.inputs[name]}]"), {}, None))
        out = b[start:]
        del b[start:]
        return out
    binder.bind(name, inp.provenance)
    if isinstance(inp.proxy, TensorProxy):
        conds = _tensor_checks(name, inp.proxy, covered, str(inp.provenance), _exact_type(inp, roots))
        if conds:
            b.append(BoundSymbol(check, (conds,), kw, None))
        _size_lines(name, inp.proxy, b, kw, covered and symbolic)
    elif isinstance(inp.proxy, GeneratorProxy):  # a torch.Generator the program draws from: its type and device
        gen, dev = torch.Generator, inp.proxy.device
        conds = [] if covered else [(lambda p: f"type({name}) is not {p.const(gen)}", f"{name}: expected a Generator")]
        conds.append((lambda p: f"{name}.device != {p.const(dev)}", f"{name}: expected a generator on {dev}"))
        b.append(BoundSymbol(check, (conds,), kw, None))
    elif not covered:
        ty = inp.proxy.python_type.__name__
        b.append(BoundSymbol(check, ([(f"type({name}) is not {ty}", f"{name}: expected a {ty}")],), kw, None))
    out = b[start:]
    del b[start:]
    return out


def _relation_lines(relations, binder, kw) -> list:
    """One check line per entry of the relation kinds [(kind, entry)] (aliases, distinct tensors, predicates, data
    guards): their conditions fetch a provenance through the names bound so far (as they are when printed)."""
    def fetch(prov):
        return lambda p: provenance_expr(prov, p, binder.bound)

    return [BoundSymbol(check_math if kind.uses_math(e) else check, (kind.check(e, fetch),), kw, None,
                        fallible=kind.fallible(e)) for kind, e in relations]


def _output(inputs, split):
    """The returned inputs; under a split, each run of module-rooted inputs is one cached tuple (`m`, the only
    run, or `s[k]`), concatenated with the per-call ones: `(t0,) + m`."""
    if split is None:
        return tuple(_Name(i.proxy.name) for i in inputs)
    whole = len(split.spans) == 1
    parts: list = []
    for inp in inputs:
        name = inp.proxy.name
        if name not in split.inputs:
            if parts and type(parts[-1]) is list:
                parts[-1].append(name)
            else:
                parts.append([name])
        elif (k := split.segment(name)) is not None:
            parts.append("m" if whole else f"s[{k}]")
    texts = [p if type(p) is str else f"({', '.join(p)}{',' if len(p) == 1 else ''})" for p in parts]
    return _Name(" + ".join(texts) if len(texts) > 1 else texts[0])


def _print_module_state(bsym, printer):
    state, anchors = bsym.args
    st, ms = printer.const(state), printer.const(module_state)
    lines = ["# module-rooted guards (module_guards): skipped while no module state changed since they passed",
             f"if {ms}.epoch != {st}.epoch or {ms}.traced_epoch._version != {st}.traced or fn is not {st}.fn:",
             f"  if not {st}.refresh(fn, args, kwargs): return None",
             f"m = {st}.inputs"]
    if len(state.spans) > 1:
        lines.append(f"s = {st}.segments")
    if anchors:
        names = ", ".join(f"a{i}" for i in range(len(anchors)))
        lines.append(f"{names}{',' if len(anchors) == 1 else ''} = {st}.anchors  # {', '.join(map(str, anchors))}")
    return "\n  ".join(lines)


_module_state_lines = _sym("module_state", _print_module_state)


def build_module_guards(inputs, guards, split, aliases=(), roots=None) -> Trace:
    """The module-rooted part of a split prologue: `module_guards(fn, args, kwargs)` fetches the module-rooted
    inputs and anchors and checks the module-rooted guards; returns ((inputs...), (anchors...)) or None."""
    with Timer() as t:
        trace = Trace("module_guards")
        trace.args = ["fn", "args", "kwargs"]
        b = trace.bound_symbols
        inputs = [i for i in (_direct(i, roots) for i in inputs) if i.proxy.name in split.inputs]
        source = Sources(guards, [a for a in aliases if a in split.aliases], roots, False)
        items = [it for it in _items(source) if (it[1][0], it[1][1].name) in split.items]
        provs = [i.provenance for i in inputs] + [it[1][0] for it in items] + [p for p, _ in source.aliases]
        binder = _Binder(provs + list(split.anchors), b)
        for n, (prov, kind, value) in items:
            b += _guard_lines(binder, prov, kind, value, n, {}, roots)
        for inp in inputs:
            name = inp.proxy.name
            binder.bind(name, inp.provenance)
            exact = split.watched.get(name)
            if exact is None:  # an nn.Parameter there is a miss: the entry that skips its checks is found instead
                cond = (lambda p, name=name: f"type({name}) is {p.const(torch.nn.Parameter)}",
                        f"{inp.provenance}: not an nn.Parameter (its checks run on every call)")
                b.append(BoundSymbol(check, ([cond],), {}, None))
            else:
                conds = _tensor_checks(name, inp.proxy, False, str(inp.provenance), exact)
                b.append(BoundSymbol(check, (conds,), {}, None))
        aliases = kinds.BY_NAME["aliases"]  # (the one relation kind checked there)
        b += _relation_lines([(aliases, e) for e in aliases.entries(source)], binder, {})
        names = []
        for prov in split.anchors:
            if prov not in binder.bound:
                binder.bind(f"a{len(names)}", prov)
            names.append(binder.bound[prov])
        _guard_fetches(b, 0, {})
        trace.output = (tuple(_Name(i.proxy.name) for i in inputs), tuple(_Name(n) for n in names))
    return trace.set_provenance("Prologue construction (module-rooted guards: run when the module state epoch "
                                "changed)", t.seconds)


def _guard_lines(binder, prov, kind, value, n, kw, roots) -> list:
    """`g{n} = <provenance>` (or its parent's, for a kind that binds_parent) and the kind's check of it."""
    start = len(binder.b)
    name = f"g{n}"
    if kind.binds_parent:
        binder.bind(name, prov.parent)
    elif type(prov) is P.Closure and roots is not None:
        binder.b.append(BoundSymbol(bind, (name, _CellProv(prov, roots), {}), {}, None))
    else:
        binder.bind(name, prov)
    out = binder.b[start:]
    del binder.b[start:]
    return out + [BoundSymbol(check, (kind.check((prov, value), name),), kw, None,
                              fallible=kind.fallible((prov, value)))]


class _CellProv(P.Provenance):
    """A closure cell resolved when the prologue is built: `<cell>.cell_contents` (the function is fixed)."""

    def __init__(self, prov, roots):
        self.prov, self.cell = prov, _cell(prov, roots)

    def __hash__(self):
        return hash(self.prov)

    def __eq__(self, other):
        return isinstance(other, _CellProv) and other.prov == self.prov

    def __str__(self):
        return str(self.prov)


def _cell(prov, roots):
    fn = prov.parent.load(roots)
    fn = getattr(fn, "__func__", fn)
    return fn.__closure__[fn.__code__.co_freevars.index(prov.name)]


class _Name(Proxy):
    """A bare name in generated code (the prologue's unpacked inputs are not proxies of the prologue)."""

    prefix = "n"


@dataclasses.dataclass
class Prologues:
    """A cache entry's prologue programs. traces: [hot, full] or, for a module with module-rooted guards,
    [hot, module_guards, full] (hot and full then run module_guards only when the module state changed)."""

    hot: object
    full: object
    explain: object
    traces: list
    state: object = None  # module_state.ModuleGuardState when split


def build_prologues(inputs, guards, aliases, roots, symbolic: bool) -> Prologues:
    split = module_split([_direct(i, roots) for i in inputs], guards, aliases, roots)
    common = {"aliases": aliases, "roots": roots}
    explain = build_prologue(inputs, guards, explain=True, **common)
    if split is None:
        full = build_prologue(inputs, guards, **common)
        hot = build_prologue(inputs, guards, hot=True, symbolic=symbolic, **common)
        return Prologues(hot.python_callable(), full.python_callable(), explain.python_callable(), [hot, full])
    module = build_module_guards(inputs, guards, split, **common)
    state = ModuleGuardState(module.python_callable(), split.spans)
    full = build_prologue(inputs, guards, split=split, state=state, **common)
    hot = build_prologue(inputs, guards, hot=True, symbolic=symbolic, split=split, state=state, **common)
    return Prologues(hot.python_callable(), full.python_callable(), explain.python_callable(), [hot, module, full],
                     state)
