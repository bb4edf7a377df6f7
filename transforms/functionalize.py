"""Transforms: functionalization, the first pass. In-place writes (`prims.copy_(value, dst)`, reached by inlining
every composite that contains one) become renamings: later uses of dst, and of every view of the same base, see
the new value. A write into a view scatters the new values back through the view chain into its base (inverse
views; slices become slice_scatter, expansions keep what was written at the places written); other views of that
base are re-derived from the new base when next used. Writes eager refuses (into overlapping memory, into pieces of
split/unbind under autograd) and writes it cannot follow (through opaque views like as_strided) raise
UnsupportedError; a view eager makes that jitcore computes (unfold) is remade after its base is written, and a write
into it is refused. Symbolic sizes stay symbolic: view tracking reads their example values, and pins them only where
eager's answer (whether a written view overlaps itself) may depend on them. Inputs whose values changed are
returned as extra outputs, with their gradient, and the caller's tensors are written back (writebacks).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.ir.arith import concretize, value_of
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import BoundSymbol, Tag, memory_path, recorded_without_grad, view_path, writes_in_place
from jitcore.ir.trace import Timer, Trace, from_trace, tracectx
from jitcore.ir.views import LIKE_OPS, MULTI_INPUT_VIEW_OPS, MULTI_OUTPUT_VIEW_OPS, MULTI_VIEW_OPS, VIEW_OPS, VIEW_PRIMS
from jitcore.ops import ltorch
from jitcore.ops import prims_elementwise as pe
from jitcore.ops import prims_misc as pm
from jitcore.ops.rng_generators import GeneratorProxy
from jitcore.ops.sizes import define_sizes, numbers_before_use
from transforms.cse import rename_args
from transforms.functionalize_views import (
    example_values,
    expanded_dims,
    inverse,
    is_same_dtype_copy,
    places_repeat,
    unbroadcast,
    view_meta,
    within_new_strides,
    written_mask,
)
from transforms.write_history import WriteLog

# ops that are views in eager which jitcore computes as new values (a prim that is no view prim): reads of them
# after a write to their base are remade from it; a write into them cannot be followed (refused)
COMPUTED_VIEW_OPS = {"ltorch.unfold": "prims.unfold"}
# in-place ops eager lets write into a tensor whose elements share memory (one value everywhere)
FILL_OPS = frozenset({"ltorch.fill_", "ltorch.zero_"})
# view ops eager turns into copies for some arguments (an index tensor, a layout reshape cannot view)
COPYING_VIEW_OPS = frozenset(f"ltorch.{n}" for n in ("getitem", "reshape", "reshape_as", "flatten", "ravel"))


@dataclass
class Alias:
    """A logical tensor that is a view: root's name and the view prims from the root to it; meta: a meta tensor with
    the view's strides, built from the sizes' example values (what _overlaps asks of it records its predicates)."""

    root: str
    chain: tuple
    meta: torch.Tensor
    multi: str | None = None  # the multi-output view op (split, unbind, ...) on the way from the root, if any


@dataclass
class Writeback:
    arg_index: int  # position in trace.args of the mutated input
    output_index: int  # position in the functional trace's output of its final value
    recorded: bool = True  # whether autograd recorded a write into it (else it is written back under no_grad)
    copy_of: TensorProxy | None = None  # the new value, where the value written back is a dense copy of it
    # eager's history of the caller's tensor (transforms/write_history.py): version counter moves, whether the last
    # one was by the last write, that write's line, CopySlices, the views remade from it after a write
    versions: int = 1
    last_counts: bool = True
    last_write: object = None
    sliced: bool = False
    regenerated: frozenset = frozenset()


@dataclass
class _State:
    new: Trace
    alias: dict = field(default_factory=dict)  # logical name -> Alias
    cur: dict = field(default_factory=dict)  # logical name -> current value (a proxy of the new trace)
    version: dict = field(default_factory=dict)  # root name -> number of writes so far
    derived: dict = field(default_factory=dict)  # view name -> root version its cur value reflects
    recorded: set = field(default_factory=set)  # roots written at least once by a write autograd records
    copies: dict = field(default_factory=dict)  # name of a dense copy of a new value made for an output -> the value
    producers: dict = field(default_factory=dict)  # name -> the line (at any depth) that computes it
    defined: set = field(default_factory=set)  # names defined by top-level lines of new (up to `seen` lines)
    seen: int = 0
    writer: str = ""  # the in-place op (as the user called it) whose writes are being inlined
    overlay: set = field(default_factory=set)  # detach() outputs written through with a gradient (see _write)
    opaque: dict = field(default_factory=dict)  # root name -> the opaque op that made a view of it (or it a view)
    # name -> (((root, its version then), ...), what made it): a view in eager computed here as a new tensor
    computed: dict = field(default_factory=dict)
    log: WriteLog | None = None  # eager's version counters and grad_fns of the written roots


def functionalize(trace: Trace, input_strides: dict | None = None) -> tuple[Trace, list[Writeback]]:
    """The functional trace and the inputs to write back; the trace itself when it writes nothing."""
    if not any(writes_in_place(b) for b in trace.bound_symbols):
        return trace, []
    with Timer() as t:
        new = from_trace(trace)
        st = _State(new, producers=_producers(trace.bound_symbols), log=WriteLog.of(trace))
        for a in trace.args:
            if isinstance(a, TensorProxy):
                strides = (input_strides or {}).get(a.name)
                st.alias[a.name] = Alias(a.name, (), _meta(a, strides))
                st.cur[a.name] = a
        with tracectx(new), torch.enable_grad():
            work, top = list(reversed(trace.bound_symbols)), {id(b) for b in trace.bound_symbols}
            while work:
                bsym = work.pop()
                st.log.enter(bsym)
                if bsym.sym.id == "prims.copy_":
                    _write(st, bsym)
                elif writes_in_place(bsym):
                    st.writer = bsym.sym.id if id(bsym) in top else st.writer
                    work += reversed(bsym.subsymbols)
                elif not _stale_size(bsym, trace.args):
                    _emit(st, bsym)
            out_leaves, spec = tree_flatten(trace.output)
            outs = [_read(st, x) if isinstance(x, Proxy) else x for x in out_leaves]
            outs = _unaliased_outputs(st, trace, out_leaves, outs)
            writebacks = []
            for i, a in enumerate(trace.args):
                if isinstance(a, TensorProxy) and st.version.get(a.name, 0):
                    recorded = a.name in st.recorded
                    final = _read(st, a)
                    writebacks.append(Writeback(i, len(outs), recorded, st.copies.get(final.name),
                                                **st.log.history(a.name)))
                    if final.requires_grad and not recorded:  # copied back under no_grad: no gradient flows
                        final = pm.stop_gradient(final)  # through it (autograd would pass it zeros)
                    outs.append(final)  # with its gradient: the writeback records the write, like eager
        new.output = tree_unflatten(spec, outs[: len(out_leaves)])
        if writebacks:
            new.output = tuple(outs) if isinstance(new.output, tuple) else (new.output, *outs[len(out_leaves):])
        new.bound_symbols = numbers_before_use(new.bound_symbols, new.args)
        define_sizes(new)  # sizes read by the inlined writes: unpacked before their first use
    new.set_provenance("Functionalization (in-place ops and views)", t.seconds)
    return new, writebacks


# lines whose result the torch executor gives as (a detach of) one of their tensor arguments: its position
_PASSES_ON = {"prims.stop_gradient": 0, "ltorch.detach": 0, "ltorch.data": 0, "prims.no_grad_update": 1}


def _unaliased_outputs(st: _State, trace: Trace, leaves: list, values: list) -> list:
    """values, with a copy for each output whose value is an input (or a view of one) that eager's output is not:
    `t = x * x; t.copy_(x); return t` makes t's value x itself, and handing back x would let a later write into
    one change the other."""
    args = {a.name for a in trace.args if isinstance(a, TensorProxy)}
    made = {o.name: b for b in st.new.bound_symbols for o in b.flat_proxy_outs()}

    def input_under(v):
        while isinstance(v, TensorProxy) and v.name not in args:
            b = made.get(v.name)
            if b is None or (b.sym.id not in VIEW_OPS and b.sym.id not in VIEW_PRIMS and b.sym.id not in _PASSES_ON):
                return None
            tensors = [a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)]
            v = tensors[_PASSES_ON.get(b.sym.id, 0)] if tensors else None
        return v.name if isinstance(v, TensorProxy) else None

    makers = {o.name: b for b in trace.bound_symbols for o in b.flat_proxy_outs()}
    written = {a.name for a in trace.args if isinstance(a, TensorProxy) and st.version.get(a.name, 0)}
    out = []
    for x, v in zip(leaves, values):
        root = input_under(v) if isinstance(v, TensorProxy) and isinstance(x, TensorProxy) else None
        lines, viewed = view_path(makers, x, written) if isinstance(x, TensorProxy) else ([], None)
        al = st.alias.get(x.name) if isinstance(x, TensorProxy) else None
        plain = al is not None and al.chain and not any(p.output.name in st.overlay for p in al.chain)
        if plain and viewed is not None and viewed.name not in written:  # through detach()es (fuzz s173); not one
            lines, viewed = memory_path(makers, x, written)  # written with a gradient (its history is its own)
        if lines and viewed.name in written:
            # a view of an input written into: the epilogue makes it that view of the caller's tensor
            # (jitcore/runtime/epilogue.py view_of_written) from a view of the value written, made here from that value
            # (the view's own value may be one written through it: `t = x[0]; t.fill_(1); return t`)
            if plain and al.root == viewed.name:
                if _maybe_not_dense(st.cur[viewed.name], args, made):
                    # the value written may repeat or skip memory (`x[:] = s.sum()` broadcasts, `x.copy_(y[:, ::2])`
                    # steps): no view of its memory says which view of the caller's tensor the output is, so the
                    # value written back is a dense copy of it, which the output views
                    value = st.cur[viewed.name]
                    st.cur[viewed.name] = ltorch.clone(value)
                    st.copies[st.cur[viewed.name].name] = st.copies.get(value.name, value)
                    made[st.cur[viewed.name].name] = st.new.bound_symbols[-1]
                v = _replay_views(st, lines, st.cur[viewed.name])
        elif root is not None:
            al = st.alias.get(x.name)
            if (al.root if al is not None else x.name) != root:
                v = ltorch.clone(v)
        out.append(v)
    return out


def _maybe_not_dense(v: TensorProxy, args: set, made: dict) -> bool:
    """Whether v's memory may have gaps or repeats at run time: an input, or a view of another tensor (a program's
    computed values are dense)."""
    b = made.get(v.name)
    return v.name in args or b is None or b.sym.id in VIEW_OPS or b.sym.id in _PASSES_ON


def _producers(bsyms, out=None) -> dict:
    """name -> the innermost line computing it (a number a view reads; the value an in-place op writes)."""
    out = {} if out is None else out
    for b in bsyms:
        _producers(b.subsymbols, out)
        for o in b.flat_proxy_outs():
            out.setdefault(o.name, b)
    return out


def _uniform(st: _State, x) -> bool:
    """Whether x holds one value everywhere (fill_, zero_, a number written with setitem): the only writes eager
    allows into a tensor whose elements share memory."""
    b = st.producers.get(x.name)
    if b is None:
        return False
    if b.sym.id == "prims.full":
        return True
    if b.sym.id in ("prims.broadcast_in_dim", "prims.convert_element_type"):
        return all(d == 1 for d in b.args[0].shape) or _uniform(st, b.args[0])
    return False


def _is_size_unpack(bsym) -> bool:
    return bsym.sym is pm.shape


def _stale_size(bsym, args) -> bool:
    """A size unpack of an intermediate: inlined writes may read its sizes earlier, so define_sizes redoes it."""
    return _is_size_unpack(bsym) and not any(bsym.args[0] is a for a in args)


def _define_numbers(st: _State, p: BoundSymbol):
    """Emit the lines computing the numbers p reads that only a decomposition (a comment) computed so far."""
    bsyms = st.new.bound_symbols
    for b in bsyms[st.seen:]:
        st.defined.update(o.name for o in b.flat_proxy_outs())
    st.seen = len(bsyms)
    for a in tree_flatten((p.args, p.kwargs))[0]:
        producer = st.producers.get(a.name) if isinstance(a, NumberProxy) else None
        if producer is None or a.name in st.defined or _is_size_unpack(producer) or any(
                isinstance(o, TensorProxy) for o in producer.flat_proxy_outs() + producer.flat_proxy_args()):
            continue  # define_sizes does those (a run-time size a line makes from a tensor, prims.nonzero's or
            # prims.item_as_size's, is read from a tensor that carries it)
        _define_numbers(st, producer)
        bsyms.append(producer)
        st.defined.update(o.name for o in producer.flat_proxy_outs())
        st.seen = len(bsyms)


def _meta(p: TensorProxy, strides=None) -> torch.Tensor:
    shape = example_values(p._shape)
    if strides is None:
        return torch.empty(shape, dtype=torch.uint8, device="meta")
    return torch.empty_strided(shape, tuple(strides), dtype=torch.uint8, device="meta")


# -- reading: a logical name's current value ---------------------------------------------------------------------
def _read(st: _State, x):
    if not isinstance(x, TensorProxy):
        return st.cur.get(x.name, x) if isinstance(x, Proxy) else x
    al = st.alias.get(x.name)
    _check_not_stale(st, x.name if al is None else al.root)
    if al is None:
        return st.cur.get(x.name, x)
    v = st.version.get(al.root, 0)
    if not al.chain:
        return st.cur.get(x.name, x)
    if st.derived.get(x.name, 0) == v:
        return st.cur.get(x.name, x)
    start, value = 0, st.cur[al.root]
    for k, p in enumerate(al.chain):  # a detach()ed view written with a gradient: its own autograd history
        if p.output.name in st.overlay and st.derived.get(p.output.name) == v:
            start, value = k + 1, st.cur[p.output.name]
    value = _replay_chain(st, Alias(al.root, al.chain[start:], al.meta), value)
    st.cur[x.name], st.derived[x.name] = value, v
    _rename_sizes(st, x, value)
    return value


def _check_not_stale(st: _State, name: str):
    """Refuse a read of a view eager makes that jitcore computed (_untracked_view) after its input was written:
    eager's view shows the write, jitcore's value does not."""
    made = st.computed.get(name)
    if made is not None and any(st.version.get(r, 0) != v for r, v in made[0]):
        raise UnsupportedError("in-place op", f"a read of the result of {made[1]} after a write into its input: "
                               "eager's view shows the write, which jitcore cannot follow into it",
                               hint="clone() the view before writing into its input, or index with Python ints "
                                    "and slices")


def _rename_sizes(st: _State, old: TensorProxy, new: TensorProxy):
    """old's symbolic sizes read as new's: old (a view, now remade from the written base) may never be made in the
    new trace, so a line reading its sizes (the full() of `x[i] = 1.5`) reads those of the tensor replacing it. A
    size the replacing tensor has as a number (the predicates recorded since made it one: `t[1:]` of a t whose size
    a later `range(t.shape[0])` pinned) is read as that number (fuzz seed 103914: the full() kept the old size, whose
    only definition was then its own output's unpack, after it)."""
    for a, b in zip(old._shape, new._shape):
        if isinstance(a, NumberProxy) and ((isinstance(b, NumberProxy) and a.name != b.name) or type(b) is int):
            st.cur[a.name] = b


def _replay(p: BoundSymbol, value):
    return p.sym(value, *p.args[1:], **p.kwargs)


def _subst(st, tree):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(spec, [_read(st, x) if isinstance(x, Proxy) else x for x in leaves])


def _emit(st: _State, bsym: BoundSymbol):
    _define_numbers(st, bsym)  # a line inlined from a write's decomposition may read numbers only a comment made
    args, kwargs = _subst(st, (bsym.args, bsym.kwargs))
    if _gained_grad(bsym, (args, kwargs)):  # a value written with a gradient: record again, outputs need grad too
        with torch.set_grad_enabled(not recorded_without_grad(bsym)):  # ... unless the line ran without grad
            n_lines = len(st.new.bound_symbols)
            out = bsym.sym(*args, **kwargs)
        if Tag.RANDOM in bsym.sym.tags:
            _keep_draws(st, bsym, n_lines, out)
        for old, new in zip(bsym.flat_outs(), tree_flatten(out)[0]):
            if isinstance(old, Proxy):
                st.cur[old.name] = new
            if isinstance(old, TensorProxy) and isinstance(new, TensorProxy):
                _rename_sizes(st, old, new)
    else:
        st.new.bound_symbols.append(bsym.from_bsym(args=args, kwargs=kwargs, subsymbols=_subst_subs(st, bsym)))
        for o in bsym.flat_proxy_outs():
            st.cur.setdefault(o.name, o)
    _track_views(st, bsym)
    if Tag.OPAQUE in bsym.sym.tags:
        _track_opaque_views(st, bsym)


def _track_opaque_views(st: _State, bsym: BoundSymbol):
    """An opaque op whose result is a view of an input (as_strided, ...): writes to either cannot be followed."""
    flat, spec = tree_flatten((bsym.args, bsym.kwargs))
    tensors = [a for a in flat if isinstance(a, TensorProxy)]
    if not tensors:
        return
    metas = [torch.empty(example_values(a._shape), dtype=a.dtype, device="meta") if isinstance(a, TensorProxy)
             else None if isinstance(a, GeneratorProxy) else value_of(a) for a in flat]  # (a draw's generator=)
    margs, mkwargs = tree_unflatten(spec, metas)
    try:
        with torch.no_grad():
            out = bsym.sym.torch_fn(*margs, **mkwargs)
    except Exception:  # no meta kernel (its metadata came from real inputs): assume a view (whatever its schema
        out = None  # says: histogramdd hands back the bin tensors it was given)
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    # a view, an input itself (x.conj() of a real x, resolve_conj(), conj_physical(): eager returns the same tensor),
    # or a tensor sharing an input's memory without being a view for autograd (unsafe_chunk, unsafe_split)
    storages = {m.untyped_storage()._cdata for m in metas if isinstance(m, torch.Tensor) and m.layout == torch.strided}
    # results sharing memory with each other (views of one product of its own): a write into one reaches the others
    # (the same tensor twice is one result: an in-place op's functional form returns what it wrote and its clones)
    strided = [o.untyped_storage()._cdata for o in {id(o): o for o in outs}.values() if o.layout == torch.strided]
    shared = len(set(strided)) < len(strided)
    if out is not None and not shared and not any(_shares_input(o, metas, storages) for o in outs):
        if compat.schema_may_alias(bsym.sym.torch_fn) is not False:  # (its schema says: never a view, for any sizes)
            for x in (n for t in tensors for n in t._shape):  # (the sizes it was decided with: eager may view others)
                if isinstance(x, NumberProxy):
                    concretize(x)
        return
    _refuse_writes_through(st, bsym, tensors, f"{bsym.sym.id.removeprefix('opaque.')} (an op jitcore runs as a whole)")


def _shares_input(o: torch.Tensor, metas: list, storages: set) -> bool:
    """Whether the meta result o may share memory with an input: an input itself, a view of one, or in an input's
    storage. A view of memory of its own (multi_dot's result is a view of the product it made, fuzz seed 547) is a
    new tensor: nothing else reaches its base, so a write into it is an ordinary write."""
    if any(o is m for m in metas):
        return True
    if o.layout != torch.strided or (o._is_view() and o._base.layout != torch.strided):
        return o._is_view()
    return o.untyped_storage()._cdata in storages


def _refuse_writes_through(st: _State, bsym: BoundSymbol, tensors: list, what: str):
    """Writes into bsym's inputs or outputs (which share memory in eager) are refused from here on: `what` made
    the view."""
    for t in tensors:
        st.opaque[_alias_of(st, t).root] = what
    for o in bsym.flat_proxy_outs():
        if isinstance(o, TensorProxy):
            st.opaque[_alias_of(st, o).root] = what


def _gained_grad(bsym, new_args) -> bool:
    new = [a for a in tree_flatten(new_args)[0] if isinstance(a, TensorProxy)]
    old = [a for a in bsym.flat_args() if isinstance(a, TensorProxy)]
    return any(n.requires_grad and not o.requires_grad for n, o in zip(new, old))


def _keep_draws(st: _State, bsym: BoundSymbol, n_lines: int, out):
    """A random op recorded again (its input gained a gradient) keeps the draws it was traced with: how it draws
    (the memory order of eager's value of its input, for rand_like and dropout) was decided from the layout
    eager's tensor has, which the new value (a functional one, laid out otherwise) no longer tells (the
    layout oracle is gone here). Only whether its outputs need a gradient changes (fuzz seed 100799)."""
    added = st.new.bound_symbols[n_lines:]
    if len(added) != 1 or added[0].sym is not bsym.sym or not bsym.subsymbols:
        return
    renames = {o.name: n for o, n in zip(bsym.flat_outs(), tree_flatten(out)[0])
               if isinstance(o, Proxy) and isinstance(n, Proxy)}
    subs = tuple(_rename_bsym(s, renames, outputs=True) for s in _subst_subs(st, bsym))
    st.new.bound_symbols[-1] = added[0].from_bsym(subsymbols=subs)


def _subst_subs(st, bsym):
    """Subsymbols read the inputs under their old names: rename those that changed (the body stays the same)."""
    if not bsym.subsymbols:
        return ()
    renames = {}
    for a in bsym.flat_proxy_args():
        v = _read(st, a)
        if v is not a:
            renames[a.name] = v
            if isinstance(a, TensorProxy) and isinstance(v, TensorProxy):  # (and its sizes: `x.copy_(y)` makes
                for s, n in zip(a._shape, v._shape):  # x's value y, whose symbols are other names of the same sizes;
                    # a number where the new value has one: a size pinned by a predicate, `i0 == 3` of x.unbind(0))
                    if isinstance(s, NumberProxy) and (type(n) is int or (isinstance(n, NumberProxy)
                                                                         and s.name != n.name)):
                        renames.setdefault(s.name, n)
    return rename_args(bsym, renames).subsymbols if renames else bsym.subsymbols  # (with the sizes they make)


def _rename_bsym(bsym, renames, outputs: bool = False):
    def r(tree):
        leaves, spec = tree_flatten(tree)
        return tree_unflatten(spec, [renames.get(x.name, x) if isinstance(x, Proxy) else x for x in leaves])

    args, kwargs = r((bsym.args, bsym.kwargs))
    return bsym.from_bsym(args=args, kwargs=kwargs, output=r(bsym.output) if outputs else bsym.output,
                          subsymbols=tuple(_rename_bsym(s, renames, outputs) for s in bsym.subsymbols))


# -- views ---------------------------------------------------------------------------------------------------------
def _flat_prims(bsym) -> list:
    if bsym.sym.is_prim or not bsym.subsymbols:
        return [bsym]
    return [p for s in bsym.subsymbols for p in _flat_prims(s)]


def _track_views(st: _State, bsym: BoundSymbol):
    """Record the outputs of a view op as aliases of their input's root (with the view prims that make them). An op
    of several tensors (atleast_1d(x, y), broadcast_tensors, meshgrid) views each output from its own input."""
    if bsym.sym.id not in VIEW_OPS and bsym.sym.id not in COMPUTED_VIEW_OPS:
        return
    tensors = [a for a in bsym.flat_proxy_args() if isinstance(a, TensorProxy)]
    if bsym.sym.id in LIKE_OPS:
        tensors = tensors[:1]
    if not tensors:
        return
    prims = [p for p in _flat_prims(bsym) if any(isinstance(o, TensorProxy) for o in p.flat_proxy_outs())]
    # the piece a view op returns whole is the input itself in eager (elsewhere a same-dtype copy is a copy: reshape
    # of a layout eager cannot view)
    whole_pieces = bsym.sym.id in MULTI_VIEW_OPS or bsym.sym.id in MULTI_INPUT_VIEW_OPS
    computed = COMPUTED_VIEW_OPS.get(bsym.sym.id)
    if any(p.sym.id not in VIEW_PRIMS and p.sym.id != computed and not is_same_dtype_copy(p) for p in prims) and (
            bsym.sym.id not in COPYING_VIEW_OPS or _zero_dim_index(bsym)):
        _untracked_view(st, bsym, tensors)  # (narrow and tensor_split at positions a tensor holds: a take)
        return
    if any(p.sym.id not in VIEW_PRIMS and p.sym.id != computed and not (whole_pieces and is_same_dtype_copy(p))
           for p in prims):
        return
    srcs = {t.name: _alias_of(st, t) for t in tensors}
    made = {t.name: (srcs[t.name].chain, srcs[t.name].meta, t.name) for t in tensors}
    for p in prims:
        a = p.args[0]
        if not isinstance(a, TensorProxy) or a.name not in made:
            _untracked_view(st, bsym, tensors)
            return
        chain, meta, origin = made[a.name]
        out_meta = view_meta(p, meta)
        # reshape, flatten, ... decided at trace time from eager's layout (jitcore/frontend/layouts.py), and recorded a
        # copy
        # where eager copies: a reshape left here is a view, as is one inside an op eager always views (diagonal
        # of an expanded tensor); the metas here assume results are contiguous, which eager's need not be
        if out_meta is None:
            out_meta = view_meta(p, meta.contiguous())
        made[p.output.name] = (chain + (p,), out_meta, origin)
    for o in bsym.flat_proxy_outs():
        if o.name in made and o.name not in srcs:
            chain, meta, origin = made[o.name]
            src = srcs[origin]
            multi = None if bsym.sym.id in ("ltorch.detach", "ltorch.data") else (
                bsym.sym.id if bsym.sym.id in MULTI_OUTPUT_VIEW_OPS else src.multi)
            st.alias[o.name] = Alias(src.root, chain, meta, multi)
            st.derived[o.name] = st.version.get(src.root, 0)


def _untracked_view(st: _State, bsym: BoundSymbol, tensors: list):
    """A view in eager that jitcore computes by other ops (a take): a write into it, or a read of it after its input
    was written, cannot be followed (refused in _read and _check_write); otherwise its value is eager's."""
    what = f"{bsym.sym.id.removeprefix('ltorch.')} (a view in eager, which jitcore computes as a new tensor)"
    roots = [_alias_of(st, t).root for t in tensors]
    for o in bsym.flat_proxy_outs():
        if isinstance(o, TensorProxy):
            st.computed[o.name] = (tuple((r, st.version.get(r, 0)) for r in roots), what)


def _zero_dim_index(bsym: BoundSymbol) -> bool:
    """x[t] with t a 0-d integer tensor: eager selects (a view, as with an int); jitcore takes (a copy)."""
    return bsym.sym.id == "ltorch.getitem" and any(
        isinstance(a, TensorProxy) and a.ndim == 0 and a.dtype not in (torch.bool, torch.uint8)
        for a in bsym.flat_proxy_args()[1:])


def _alias_of(st: _State, x: TensorProxy) -> Alias:
    """x's alias record; a tensor the trace made (not a view) is its own root, contiguous like eager's results."""
    al = st.alias.get(x.name)
    if al is None:
        st.alias[x.name] = al = Alias(x.name, (), _meta(x))
        st.cur.setdefault(x.name, x)
    return al


# -- writes ---------------------------------------------------------------------------------------------------------
def _write(st: _State, bsym: BoundSymbol):
    src, dst = bsym.args
    value = _read(st, src)
    if value.dtype != dst.dtype:
        value = pe.convert_element_type(value, dst.dtype)
    # grad mode at the write, and requires_grad of the values as they are now: a tensor that gained a gradient
    # through an earlier write (its proxy, made before, says False) records this write too
    grad_on = not recorded_without_grad(bsym)
    if value.requires_grad and not grad_on:  # written under no_grad: the write carries no grad
        value = pm.stop_gradient(value)
    al = _alias_of(st, dst)
    root = al.root
    old_root = st.cur[root]
    detached = [p for p in al.chain if p.sym.id == "prims.stop_gradient"]  # written through detach() or .data
    differentiable = grad_on and (value.requires_grad or (old_root.requires_grad and not detached))
    _check_write(st, bsym, al, differentiable)
    if al.chain:
        new_root = _scatter_back(st, al.chain, old_root, value)
        st.cur[dst.name] = value
    else:
        new_root = value
    # autograd records the write on dst's own identity; through detach() or .data, never on the root's
    recorded = differentiable and not detached
    if recorded and (not new_root.requires_grad or (new_root is value and (
            (old_root.requires_grad and not _computed_from(st, value, old_root)) or _is_arg(st, root)))):
        # every element overwritten (by values without a gradient, or all of a root in the graph: `y.copy_(v)`,
        # `y[:] = v`): eager's copy sends zeros to the old value, not nothing (not where the values are computed from
        # the old value itself, `x.relu_()`: the old value gets its gradient through them); an argument's new value
        # is a tensor of its own too (written_tails.py runs what reads it on the caller's tensor, not what reads v)
        new_root = _overwritten(old_root, new_root)
    if recorded:
        st.recorded.add(root)
        if al.chain and new_root.requires_grad and (not value.requires_grad or _is_arg(st, root)):
            # the view is in the graph too (its gradient reaches the root), as in eager; and a view of an input
            # read after the write reads the input's new value (transforms/written_tails.py: the caller's tensor)
            st.cur[dst.name] = _replay_chain(st, al, new_root)
    elif old_root.requires_grad or new_root.requires_grad:
        # a write autograd does not record (under no_grad, through .data or detach()): eager keeps the root's
        # autograd identity, so its later uses still send gradients to it, and only to it
        new_root = pm.no_grad_update(old_root, new_root) if old_root.requires_grad else pm.stop_gradient(new_root)
        if al.chain and not differentiable:
            st.cur[dst.name] = _replay_chain(st, al, new_root)
    if differentiable and detached:  # the detach()ed view records the write on itself
        if root in st.recorded and _is_arg(st, root):  # (a wrong gradient to the values written, before)
            raise UnsupportedError("in-place op", "a write with a gradient through detach() of an argument that "
                                   "autograd recorded a write into before: jitcore does not follow that history",
                                   hint="clone() the detached tensor before writing into it")
        _overlay(st, al, al.chain.index(detached[-1]), new_root, value)
    st.cur[root] = new_root
    st.version[root] = st.version.get(root, 0) + 1
    st.log.write(root, al.chain, recorded)
    if al.chain:
        st.derived[dst.name] = st.version[root]
    if differentiable and detached:
        st.derived[detached[-1].output.name] = st.version[root]
    out = bsym.output  # copy_ returns dst's new value: it is the same tensor as dst (an alias of the same view)
    st.alias[out.name] = Alias(root, al.chain, al.meta, al.multi)
    st.cur[out.name] = st.cur[dst.name] if al.chain else new_root
    st.derived[out.name] = st.version[root]


def _is_arg(st: _State, name: str) -> bool:
    return any(a.name == name for a in st.new.args)


def _computed_from(st: _State, value, old) -> bool:
    """Whether the line of the functional trace that computes `value` reads `old` (an in-place op's own result)."""
    for b in reversed(st.new.bound_symbols):
        if any(o.name == value.name for o in b.flat_proxy_outs()):
            return any(a.name == old.name for a in b.flat_proxy_args())
    return False


def _overwritten(old, values):
    """`values` replacing all of `old` in a write autograd records: eager's result still requires grad (its
    grad_fn sends zeros to old), so it is where(True, values, old): values' values, zero gradient to old."""
    everywhere = ltorch.full(tuple(values.shape), True, dtype=torch.bool, device=values.device)
    return ltorch.where(everywhere, values, old)


def _check_write(st: _State, bsym: BoundSymbol, al: Alias, differentiable: bool):
    """The writes eager refuses, and those jitcore cannot follow."""
    src, dst = bsym.args
    op = f"{st.writer.removeprefix('ltorch.')}(): " if st.writer else ""
    strided = any(p.sym.id == "prims.as_strided" for p in al.chain)  # (eager writes any value into these)
    if not within_new_strides(al):
        raise UnsupportedError("in-place op", f"{op}a write into a view made before Tensor.as_strided_ of the tensor "
                               "it views (which requires grad), at places the new strides do not hold once each (or "
                               "of a tensor not laid out contiguously): eager's autograd replays the write over the "
                               "new strides (its backward fails or reads memory it never set there)",
                               hint="clone() the view before writing into it, or make it again after as_strided_")
    if strided and places_repeat(al.meta) and not (_uniform(st, src) and not _read(st, src).requires_grad):
        raise UnsupportedError("in-place op", f"{op}a write of computed values into a view made by as_strided whose "
                               "elements share memory: eager writes its elements one after another, so its result "
                               "depends on the order its kernel visits them", hint="clone() the view before writing "
                               "into it, or write one value everywhere (fill_, zero_, `v[...] = 0`)")
    if not strided and not (st.writer in FILL_OPS and _uniform(st, src)) and _overlaps(st, al, dst) and not (
            not differentiable and _same_place(st, src, dst, al)):
        raise UnsupportedError("in-place op", f"{op}a write into a tensor of shape {tuple(dst.shape)} in which more "
                               "than one element refers to a single memory location (an expand()), like eager, "
                               "which refuses it", hint="clone() the expanded tensor before writing into it")
    if al.root in st.computed:
        raise UnsupportedError("in-place op", f"{op}a write into the result of {st.computed[al.root][1]}: the write "
                               "cannot be followed into its input",
                               hint="clone() it before writing into it, or index with Python ints and slices")
    if al.root in st.opaque:
        name = st.opaque[al.root]
        raise UnsupportedError("in-place op", f"{op}a write into a tensor that shares memory with the result of {name}:"
                               " the write cannot be followed through it",
                               hint=f"clone() the result of {name.split(' (')[0]}, or write with basic indexing or "
                                    "view ops (select, narrow, view, ...)")
    computed = next((p.sym.id for p in al.chain if p.sym.id not in VIEW_PRIMS and not is_same_dtype_copy(p)), None)
    if computed is not None:
        name = next(k for k, v in COMPUTED_VIEW_OPS.items() if v == computed).removeprefix("ltorch.")
        raise UnsupportedError("in-place op", f"{op}a write into the result of {name} (a view of its input in eager, "
                               "which jitcore computes as a new tensor): the write cannot be followed into the input",
                               hint=f"clone() the result of {name} before writing into it")
    if differentiable and al.multi:
        raise UnsupportedError("in-place op", f"{op}a write autograd records into a view made by {al.multi} (a "
                               "function that returns several views), like eager, which refuses it",
                               hint="clone() the piece before writing into it, or use an out-of-place op")


def _same_place(st: _State, src, dst: TensorProxy, al: Alias) -> bool:
    """Whether `src` is the very view written (the same memory, sizes, strides, offset and dtype: `v[0] = t` where
    v[0] and t are one expand() of one tensor): eager's copy_ leaves such a write out, overlapping or not, so its
    values are the tensor's own (its backward raises in eager: a write autograd records is not this). The sizes the
    metas were computed from are pinned."""
    if not isinstance(src, TensorProxy) or src.dtype != dst.dtype:
        return False
    sal = st.alias.get(src.name)
    if sal is None or sal.root != al.root or any(p.sym.id not in VIEW_PRIMS for p in sal.chain):
        return False
    for p in sal.chain:
        for x in tree_flatten((p.args[1:], p.kwargs))[0]:
            if isinstance(x, NumberProxy):
                concretize(x)
    a, b = sal.meta, al.meta
    return (tuple(a.shape), a.stride(), a.storage_offset()) == (tuple(b.shape), b.stride(), b.storage_offset())


def _overlaps(st: _State, al: Alias, dst: TensorProxy) -> bool:
    """Whether elements of the view written share memory (an expand()). The metas hold the sizes' example values;
    only a zero stride makes shared places, and only broadcast_in_dim makes one (or an input's own strides), so a
    chain with neither overlaps for every size (the broadcasts' `size != 1` answers are the predicates this needs).
    Where there is one, the answer may depend on the sizes: every size the meta was computed from is pinned."""
    root = st.alias[al.root].meta
    zero = any(s == 0 and n != 1 for s, n in zip(root.stride(), root.shape)) or any(
        expanded_dims(p, p.args[0]) for p in al.chain)
    if not zero and torch._debug_has_internal_overlap(al.meta) != 1:
        return False
    numbers = (al.chain[0].args[0] if al.chain else dst)._shape + tuple(
        x for p in al.chain for x in tree_flatten((p.args[1:], p.kwargs))[0])
    for x in numbers:
        if isinstance(x, NumberProxy):
            concretize(x)
    return torch._debug_has_internal_overlap(al.meta) == 1


def _overlay(st: _State, al: Alias, k: int, new_root, value):
    """A write with a gradient through detach() (chain[k]): the detached tensor's new value, with that gradient;
    views of it read it (the root's own value takes the write without the gradient)."""
    name, prefix = al.chain[k].output.name, al.chain[: k + 1]
    if name in st.overlay and st.derived.get(name) == st.version.get(al.root, 0) and not any(
            expanded_dims(p, p.args[0]) for p in prefix):
        top = st.cur[name]  # the gradients of earlier writes through it, in memory no other place of it shares
    else:
        top = _replay_chain(st, Alias(al.root, prefix, al.meta), new_root)
    st.cur[name] = _scatter_back(st, al.chain[k + 1:], top, value) if al.chain[k + 1:] else value
    st.overlay.add(name)


def _replay_views(st: _State, lines: list, value):
    """The view made by `lines` (view_path's, from the view back to its root) made again from the root's final
    value by those ops, as the user called them: each a view in eager whatever the value's layout (diagonal's
    decomposition reshapes, which copies a value laid out as a transposed tensor)."""
    for b, out in reversed(lines):
        _define_numbers(st, b)
        flat, spec = tree_flatten(_subst(st, (b.args, b.kwargs)))
        first = next(k for k, a in enumerate(flat) if isinstance(a, TensorProxy))
        flat[first] = value
        args, kwargs = tree_unflatten(spec, flat)
        made = [o for o in tree_flatten(b.sym(*args, **kwargs))[0] if isinstance(o, TensorProxy)]
        value = made[[o.name for o in b.flat_proxy_outs() if isinstance(o, TensorProxy)].index(out.name)]
    return value


def _replay_chain(st: _State, al: Alias, value):
    for k, p in enumerate(al.chain):
        _define_numbers(st, p)
        value = _replay(_current_numbers(st, p), value)
        if k == 0:  # (eager remakes the view from its base: write_history.py)
            st.log.regenerated.add(value.name)
    return value


def _current_numbers(st: _State, p: BoundSymbol) -> BoundSymbol:
    """The view line p with the numbers it reads as they are now named: a size of a tensor a write made anew (the
    cat of a written input: its length is another symbol) reads as that tensor's (fuzz seed 28084: a slice's end read
    a size the program defined only later)."""
    flat, spec = tree_flatten(p.args)
    now = [st.cur.get(a.name, a) if isinstance(a, NumberProxy) else a for a in flat]
    if all(a is b for a, b in zip(flat, now)):
        return p
    return p.from_bsym(args=tree_unflatten(spec, now))


def _scatter_back(st: _State, chain: tuple, top, value):
    """The new value of `top` after writing `value` into its view made by chain."""
    for p in chain:
        _define_numbers(st, p)
    chain = tuple(_current_numbers(st, p) for p in chain)
    values, written = [top], value
    for p in chain[:-1]:
        values.append(_replay(p, values[-1]))
    for k in reversed(range(len(chain))):
        p, base = chain[k], values[k]
        if expanded_dims(p, base):  # several places of the expanded tensor share one element of base
            value = unbroadcast(p, base, value, written_mask(chain[k + 1:], values[k + 1:], written))
        else:
            value = inverse(p, base, value)
    return value
