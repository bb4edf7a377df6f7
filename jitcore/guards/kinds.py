"""Guards stage: the guard contract, one row per kind of guard. A row says where tracing records the kind (a field of
`Guards`, filled by jitcore/frontend/tracing.py), how the prologue checks it (jitcore/guards/prologue.py loops over
rows), the reason a failed check gives (cache_misses, explain), and whether a jitted module's part of it is checked
only when the module state changed (module-rooted, jitcore/guards/module_guards.py). A new kind is a field and a row
here, its recording in the frontend, and a test.
"""
from __future__ import annotations

import dataclasses
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from jitcore import compat
from jitcore.guards import data_guards, process_state, torch_flags
from jitcore.guards.values import mixes_numbers, same_scalars, value_check
from jitcore.hooks import ambient_hooks, top_hooks
from jitcore.interpreter import provenance as P


@dataclass
class Guards:
    """What the computation assumed about the world outside its inputs (each field is one kind's record: KINDS says
    how the prologue checks it).

    values: provenance -> the scalar the trace baked in (type and value checked);
    objects: provenance -> an object whose identity the trace depends on (functions, modules, ... read from
    globals, closures and attributes); types: provenance -> the type of an object that came in through the
    arguments; lengths: provenance -> len() of an external list/tuple the program iterated or indexed, or of a
    dict the tuple of its keys in order;
    predicates: expressions over input symbols that held (symbolic values).
    """

    values: dict = field(default_factory=dict)
    objects: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)
    lengths: dict = field(default_factory=dict)
    container_types: dict = field(default_factory=dict)  # provenance -> the type of a container lengths guards
    predicates: list = field(default_factory=list)
    # Attr provenance -> whether it exists, where the program depends on that and not on its value (`hasattr(self,
    # "cache")`, `getattr(cfg, "k", 1.0)` taking its default): a call where that differs is another call
    presence: dict = field(default_factory=dict)
    # torch's process-wide settings the program read (`torch.get_num_threads()`, jitcore/guards/torch_flags.py):
    # (reader, args, kwargs) -> value
    flags: dict = field(default_factory=dict)
    data: list = field(default_factory=list)  # jitcore.guards.data_guards.DataGuard: values computed from tensor data
    # (name, name) of two tensor inputs the function found to be different objects (`if x is y:`): a call passing
    # one tensor for both is another call
    distinct: list = field(default_factory=list)
    # input name -> its DataGuard that it is no inference tensor: eager's autograd saves it, the program's may not
    # (the guard is kept unless the forward saves that input itself: torch then raises as eager does)
    not_inference: dict = field(default_factory=dict)
    # the saved_tensors_hooks active around a call that the programs were built for: None (none) or (pack, unpack);
    # False: not checked (no backward, or jit's own pair)
    saved_hooks: object = False
    # (input name, "is_conj" or "is_neg") -> the bit the program read of that tensor input (a proxy does not model
    # a view's lazy conjugation or negation: `z.conj()`, `z.conj().imag` passed in)
    bits: dict = field(default_factory=dict)


class Sources(NamedTuple):
    """What a prologue is built from: the trace's Guards, its aliases ([(provenance, input name)]), the traced call's
    Roots (None: no call shape to check) and whether it is the explain variant."""

    guards: Guards
    aliases: list
    roots: object
    explain: bool


def _never(*_) -> bool:
    return False


def _nothing(_) -> tuple:
    return ()


# Where the prologue checks a kind, in its order: "call" (its own first line: check(entry, explain, printer) -> the
# line), "state" (the one line of process-wide state: check(entry) -> [(condition, reason)]), "path" (values fetched
# through provenance chains, all path kinds together shallowest first: the prologue binds the value, or its parent,
# to a name, check((provenance, value), name) -> [(condition, reason)]), "relation" (after the inputs, one line per
# entry: check(entry, fetch) -> [(condition, reason)], fetch(provenance) -> printer -> its expression) and "folded"
# (checked as the kind `folded_into` names: the compile pipeline moves the entries that matter there).
PLACES = ("call", "state", "path", "relation", "folded")


@dataclass(frozen=True)
class GuardKind:
    """One kind of guard. A condition is text or a callable(printer) -> text that is True on a miss; a reason is
    the miss text (or a Reason: an expression over the prologue's locals that builds it)."""

    name: str
    fields: tuple  # the Guards fields that record it (empty: `recorded` says where it comes from)
    recorded: str  # what one entry is, and where tracing records it
    place: str  # one of PLACES
    miss: str  # the form of its miss reason (cache_misses, explain)
    scope: str  # "per call" or "module-rooted" (module_rooted says when an entry is)
    entries: Callable | None  # Sources -> its entries, in the prologue's order
    check: Callable | None  # its prologue condition (the signature depends on `place`, above)
    module_rooted: Callable | None = None  # path kinds: module_guards' resolution of an entry's path -> whether the
    # entry goes to the module-rooted part (checked only when the module state changed)
    hot_skip: Callable | None = None  # (entry, the types the signature key holds by value) -> whether the hot
    # prologue leaves it out (the cache's signature key checked it)
    fallible: Callable = _never  # entry -> whether its line may raise FETCH_ERRORS (a fetch, a len())
    binds_parent: bool = False  # path kinds: the name is bound to the object the attribute is looked up on
    uses_math: Callable = _never  # entry -> whether its condition calls math.* (`math.sqrt(i2)`)
    reads: Callable = _nothing  # relation kinds: entry -> the input names its condition reads (bound by name even
    # where the module-rooted part fetches those inputs)
    folded_into: str = ""  # place "folded": the kind that checks it


# -- conditions and reasons -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Reason:
    """A miss reason computed when the explain prologue runs: `expr` is a Python expression over its locals."""

    expr: str


def _kwargs_differ(names, printer) -> str:
    """A condition true when the call's keyword names are not exactly `names` (cheapest form for few names)."""
    if not names:
        return "kwargs"
    if len(names) > 3:
        return f"kwargs.keys() != {printer.const(frozenset(names))}"
    return " or ".join([f"len(kwargs) != {len(names)}"] + [f"{k!r} not in kwargs" for k in names])


def _call_shape(entry, explain, printer) -> str:
    """entry: (number of positional arguments, keyword names): the call binds to the parameters as when traced."""
    n, names = entry
    if not explain:
        return f"if len(args) != {n} or {_kwargs_differ(names, printer)}: return None"
    s = "" if n == 1 else "s"
    expected = f"keyword arguments {sorted(names)}" if names else "no keyword arguments"
    return (f"if len(args) != {n}: return {f'call shape: expected {n} positional argument{s}, got '!r} + str(len(args))"
            f"\n  if {_kwargs_differ(names, printer)}: "
            f"return {f'call shape: expected {expected}, got '!r} + str(sorted(kwargs))")


def _saved_hooks(saved_hooks) -> list:
    """The saved_tensors_hooks a program with a backward was built for (None: none), False when it does not matter."""
    if saved_hooks is None:
        # (torch's own lookup first: with no hooks active, the usual case, one C call)
        return [(lambda p: f"({p.const(top_hooks)}(False) is not None and {p.const(ambient_hooks)}() is not None)",
                 "saved-tensor hooks: expected none active")]
    if saved_hooks is not False:
        names = "/".join(getattr(f, "__qualname__", "?") for f in saved_hooks)
        return [(lambda p: f"{p.const(ambient_hooks)}() != {p.const(saved_hooks)}",
                 f"saved-tensor hooks: expected {names} active")]
    return []


def _flag(entry) -> list:
    k, v = entry
    return [(process_state.check if k[0] is process_state.outcome else torch_flags.check)(k, v)]


def _torch_state(_) -> list:
    """Grad mode, default dtype and autocast as they are now (the prologue is built right after the traced call)."""
    out = []
    grad = torch.is_grad_enabled()
    out.append((lambda p: f"{p.const(torch.is_grad_enabled)}() is not {grad}", f"grad mode: expected {grad}"))
    dd = torch.get_default_dtype()
    out.append((lambda p: f"{p.const(torch.get_default_dtype)}() is not {p.const(dd)}",
                f"default dtype: expected {dd}"))
    if not compat.is_any_autocast_enabled():
        out.append((lambda p: f"{p.const(compat.is_any_autocast_enabled)}()", "autocast: expected disabled"))
        return out
    for dev in ("cpu", "cuda"):
        on = torch.is_autocast_enabled(dev)
        out.append((lambda p, d=dev, on=on: f"{p.const(torch.is_autocast_enabled)}({d!r}) is not {on}",
                    f"autocast {dev}: expected enabled={on}"))
        if on:
            dt = torch.get_autocast_dtype(dev)
            out.append((lambda p, d=dev, dt=dt: f"{p.const(torch.get_autocast_dtype)}({d!r}) is not {dt}",
                        f"autocast {dev} dtype: expected {dt}"))
    return out


def _length(entry, name) -> list:
    """Its type is checked on the same line: a tuple after a list, an OrderedDict after a dict."""
    prov, (value, ctype) = entry
    where = str(prov)
    typed = [] if ctype is None else [(lambda p: f"type({name}) is not {p.const(ctype)}",
                                       f"{where}: expected a {ctype.__name__}")]
    if type(value) is tuple:  # a dict: its keys, in order (iteration follows it)
        keys = (lambda p: f"not {p.const(same_scalars)}(tuple({name}), {p.const(value)})") if mixes_numbers(value) \
            else (lambda p: f"tuple({name}) != {p.const(value)}")  # ({1: a} and {1.0: a} have equal keys)
        return [(keys, f"keys of {where}: expected {reprlib.repr(value)}, in this order")] + typed
    return [(f"len({name}) != {value}", f"len({where}): expected {value}")] + typed


def _short(obj) -> str:
    if type(obj) is tuple:  # a function's defaults
        return f"{reprlib.repr(obj)} at {id(obj):#x}"
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{name} at {id(obj):#x}"


def _object(entry, name) -> list:
    prov, value = entry
    return [(lambda p: f"{name} is not {p.const(value)}", f"{prov}: expected the object {_short(value)}")]


def _type(entry, name) -> list:
    prov, value = entry
    return [(lambda p: f"type({name}) is not {p.const(value)}", f"{prov}: expected a {value.__name__}")]


def _value(entry, name) -> list:
    prov, value = entry
    return [(value_check(name, value), f"{prov}: expected {value!r}")]


def _presence(entry, name) -> list:
    """The object the attribute was missing from (or found in): it must still lack (have) it."""
    prov, present = entry
    return [(f"{'not ' if present else ''}hasattr({name}, {prov.name!r})",
             f"{prov}: expected {'an' if present else 'no'} attribute")]


def _alias(entry, fetch) -> list:
    prov, name = entry
    return [(lambda p: f"{fetch(prov)(p)} is not {name}", f"{prov}: expected the same tensor as {name}")]


def _distinct(entry, _) -> list:
    x, y = entry
    return [(f"{x} is {y}", f"{x} and {y}: expected two different tensors")]


_SYMBOL = re.compile(r"\b[if]\d+\b")


def predicate_reason(pred: str):
    """The miss reason of a failed predicate: its text and this call's values of the symbols in it
    (`predicate 16 == i0 (i0=8)`), so the reason says which size broke it."""
    names = list(dict.fromkeys(_SYMBOL.findall(pred)))
    if not names:
        return f"predicate {pred}"
    values = " + ', ' + ".join(f"{n + '='!r} + repr({n})" for n in names)
    return Reason(f"{f'predicate {pred} ('!r} + {values} + ')'")


def _predicate(pred, _) -> list:
    return [(f"not ({pred})", predicate_reason(pred))]


def _data_entries(s: Sources) -> list:
    """One program for all of a call's data guards (they share their lines), one each where a miss is explained."""
    data = s.guards.data
    programs = [g for g in data if hasattr(g.program, "trace")]
    if s.explain or len(programs) < 2:
        return data
    return [g for g in data if not hasattr(g.program, "trace")] + [data_guards.merged(programs)]


def _data(g, _) -> list:
    def text(printer):
        value = f"{printer.const(g.program)}({', '.join(g.inputs)})"
        if data_guards.has_nan(g.value):  # (a NaN read by .item(): `!=` would miss on every call)
            return f"not {printer.const(data_guards.same_value)}({value}, {printer.value(g.value)})"
        return f"{value} != {printer.value(g.value)}"

    return [(text, f"data: {g.text} was {g.value!r}")]


def _key_covered(prov) -> bool:
    """Whether the cache's signature key reads the value at `prov` (an argument itself)."""
    return type(prov) in (P.Arg, P.Kwarg)


def _bit(entry, _) -> list:
    (name, method), value = entry
    return [(f"{name}.{method}() is not {value}", f"{name}.{method}(): expected {value}")]


# -- the rows ---------------------------------------------------------------------------------------------------------
_ALWAYS = lambda *_: True  # noqa: E731
_MODULE = "module-rooted"

KINDS = (
    GuardKind("call_shape", (), "the traced call's Roots: its number of positional arguments and keyword names",
              "call", "call shape: expected N positional arguments / keyword arguments [...], got ...", "per call",
              lambda s: () if s.roots is None else ((len(s.roots.args), tuple(s.roots.kwargs)),), _call_shape,
              hot_skip=_ALWAYS),
    GuardKind("saved_hooks", ("saved_hooks",), "the saved_tensors_hooks pair a program with a backward was built "
              "for (the compile's guards stage)", "state", "saved-tensor hooks: expected ... active", "per call",
              lambda s: (s.guards.saved_hooks,), _saved_hooks),
    GuardKind("flags", ("flags",), "(reader, args, kwargs) -> value of a process-wide setting the program read "
              "(torch_flags.read, process_state.reader, isinstance against an ABC)", "state",
              "<reader>(...): expected <value>", "per call", lambda s: s.guards.flags.items(), _flag),
    GuardKind("torch_state", (), "read when the prologue is built, right after the traced call: grad mode, default "
              "dtype, autocast", "state", "grad mode / default dtype / autocast: expected ...", "per call",
              lambda s: (None,), _torch_state),
    GuardKind("length", ("lengths", "container_types"), "provenance -> len() of an external list/tuple (a dict: its "
              "keys in order) read item by item, and its type (JitContext.finish_guards)", "path",
              "len(<where>): expected N / keys of <where>: expected (...), in this order", _MODULE,
              lambda s: [(p, (n, s.guards.container_types.get(p))) for p, n in s.guards.lengths.items()], _length,
              module_rooted=lambda r: r[0] == "store" or type(r[1]) is tuple, fallible=_ALWAYS),
    GuardKind("object", ("objects",), "provenance -> an object whose identity the trace depends on (read from "
              "globals, closures, attributes; JitContext.on_external_value)", "path",
              "<where>: expected the object <name> at <id>", _MODULE, lambda s: s.guards.objects.items(), _object,
              module_rooted=_ALWAYS),
    GuardKind("type", ("types",), "provenance -> the type of an object reached from the arguments "
              "(JitContext.on_external_value)", "path", "<where>: expected a <type>", _MODULE,
              lambda s: s.guards.types.items(), _type, module_rooted=_ALWAYS),
    GuardKind("value", ("values",), "provenance -> the scalar, scalar tuple, set or copied contents the trace baked "
              "in (JitContext.on_external_value)", "path", "<where>: expected <value>", _MODULE,
              lambda s: s.guards.values.items(), _value, module_rooted=_ALWAYS,
              hot_skip=lambda e, keyed: _key_covered(e[0]) and type(e[1]) in keyed),
    GuardKind("presence", ("presence",), "Attr provenance -> whether the attribute exists, where the program "
              "depends on that (JitContext.on_attr_presence)", "path", "<where>: expected an/no attribute",
              "per call", lambda s: s.guards.presence.items(), _presence, binds_parent=True),
    GuardKind("aliases", (), "(provenance, input name): the same tensor found again elsewhere (TraceResult.aliases)",
              "relation", "<where>: expected the same tensor as <input>", "module-rooted with its input "
              "(module_guards.module_split)", lambda s: s.aliases, _alias,
              fallible=lambda e: type(e[0]) not in (P.Arg, P.Kwarg), reads=lambda e: (e[1],)),
    GuardKind("distinct", ("distinct",), "(name, name): two tensor inputs `a is b` found different "
              "(JitContext.on_is)", "relation", "<x> and <y>: expected two different tensors", "per call",
              lambda s: s.guards.distinct, _distinct, reads=lambda e: e),
    GuardKind("predicates", ("predicates",), "expressions over input symbols that held (symbolic values; the "
              "stages' Predicates)", "relation", "predicate <expr> (<symbol>=<value>, ...)", "per call",
              lambda s: s.guards.predicates, _predicate, uses_math=lambda pred: "math." in pred),
    GuardKind("data", ("data",), "DataGuard: a value computed from tensor data and the program recomputing it "
              "(data_guards.concrete_value, layouts, alignment: `t.data_ptr() % k`)", "relation",
              "data: <what> was <value>", "per call",
              _data_entries, _data, reads=lambda g: g.inputs),
    GuardKind("bits", ("bits",), "(input name, 'is_conj' | 'is_neg') -> the bit the program read of a tensor input "
              "(JitContext._read_bit)", "relation", "<input>.is_conj(): expected <bool>", "per call",
              lambda s: s.guards.bits.items(), _bit, reads=lambda e: (e[0][0],)),
    GuardKind("not_inference", ("not_inference",), "input name -> a DataGuard that it is no inference tensor "
              "(JitContext._guard_inference)", "folded", "data: <input>.is_inference() was False", "per call",
              None, None, folded_into="data"),
)

BY_NAME = {k.name: k for k in KINDS}


def at(place: str) -> tuple:
    """The kinds the prologue checks at `place`, in their order."""
    return tuple(k for k in KINDS if k.place == place)
