"""Transforms: common subexpression elimination. A line computing exactly what an earlier line computed (same op,
same arguments, same grad mode where its inputs require grad) is dropped and later uses read the earlier result;
random draws, in-place writes and lines that must stay are never merged, and no line is merged across an in-place
write. A line whose tensor is returned to the user is kept (`return x + 1, x + 1` gives two tensors in eager: a write
into one must not change the other), and so is one that changes the dtype of a tensor needing grad (two
`x.bfloat16()`, autocast's casts of one activation for q, k and v: eager sums their gradients in x's float32, one
merged cast would sum them in bfloat16). Typical catch: the backward of `y * y` computes `g * y` twice.
"""
from __future__ import annotations

from jitcore.ir.context import detached
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_map
from jitcore.ir.symbol import Tag, recorded_without_grad, writes_in_place
from jitcore.ir.trace import Timer, Trace, from_trace

NEVER = frozenset({Tag.RANDOM, Tag.INPLACE, Tag.DONT_DCE})


def _key(x):
    """A hashable stand-in for an argument; proxies by name (never `==` on a proxy: that records an op)."""
    if isinstance(x, Proxy):
        return ("p", x.name)
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_key(e) for e in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _key(v)) for k, v in x.items()))
    if isinstance(x, (int, float, complex, bool, str, type(None))) or x is Ellipsis:
        return (type(x).__name__, repr(x))
    return ("id", id(x))


def line_key(bsym) -> tuple:
    """What decides a line's value: op, arguments, and whether it is a constant for autodiff because it ran without
    grad (`w * 2` under no_grad and `w * 2` with grad are different values when w requires grad)."""
    constant = recorded_without_grad(bsym) and any(
        isinstance(a, TensorProxy) and a.requires_grad for a in bsym.flat_proxy_args())
    return bsym.sym.id, _key(bsym.args), _key(bsym.kwargs), constant


def _never(bsym) -> bool:
    return bool(bsym.sym.tags & NEVER) or any(_never(s) for s in bsym.subsymbols)


def _changes_grad_dtype(bsym) -> bool:
    """Whether a floating output's dtype differs from that of a floating input needing grad: each use's gradient
    goes back through its own cast in eager, to be summed in the input's dtype."""
    needs = {a.dtype for a in bsym.flat_proxy_args()
             if isinstance(a, TensorProxy) and a.requires_grad and a.dtype.is_floating_point}
    return bool(needs) and any(isinstance(o, TensorProxy) and o.dtype.is_floating_point and o.dtype not in needs
                               for o in bsym.flat_proxy_outs())


def rename_args(bsym, names: dict):
    """bsym reading the surviving values: its arguments and those of its decomposition, renamed. Where names renames
    sizes, each tensor its decomposition makes (at any depth; not bsym's own outputs, which later lines read) whose
    shape holds one becomes a same-named copy with the new sizes: a nested composite's body reads the sizes of its
    own inputs, so they must carry the names the renamed body reads (fuzz seed 101285: functionalization renamed i4
    to i43 in cdist's decomposition, but `ltorch.sub(t20, t21)` read i43 while t20 still said i4; DCE then dropped
    the top-level unpack of i43 and nothing defined it for that line)."""
    if not names:
        return bsym
    remade = _remade_tensors(bsym, names)
    return _renamed(bsym, {**names, **remade} if remade else names, remade)


def _renamed(bsym, names: dict, remade: dict):
    def sub(x):
        return names.get(x.name, x) if isinstance(x, Proxy) else x

    args, kwargs = tree_map(sub, (bsym.args, bsym.kwargs))
    output = bsym.output
    if remade:
        output = tree_map(lambda x: remade.get(x.name, x) if isinstance(x, Proxy) else x, output)
    return bsym.from_bsym(args=args, kwargs=kwargs, output=output,
                          subsymbols=tuple(_renamed(s, names, remade) for s in bsym.subsymbols))


def _with_renamed_sizes(o, names: dict):
    """A same-named copy of tensor o with its sizes renamed by names, or None where none is (or o itself is)."""
    shape = getattr(o, "_shape", ())
    new = tuple(names.get(d.name, d) if isinstance(d, NumberProxy) else d for d in shape)
    if o.name in names or all(a is b for a, b in zip(new, shape)):
        return None
    with detached():  # (no name is taken: the copy stands for the same value)
        return o.like(shape=new, name=o.name)


def _remade_tensors(bsym, names: dict) -> dict:
    """name -> a same-named copy, its shape renamed, of each tensor bsym's decomposition makes with a renamed size."""
    own, out = {o.name for o in bsym.flat_proxy_outs()}, {}

    def visit(b):
        for s in b.subsymbols:
            for o in s.flat_proxy_outs():
                copy = _with_renamed_sizes(o, names) if o.name not in own else None
                if copy is not None:
                    out[o.name] = copy
            visit(s)

    visit(bsym)
    return out


def _symbolic_sizes(mine, theirs) -> dict:
    """The dropped tensors' symbolic sizes (computed inside the dropped line: `reshape(x, (-1, 2))` names its own
    `i5`) read as the surviving tensors' sizes, so later lines reading them through shapes stay defined."""
    out = {}
    for m, f in zip(mine, theirs):
        if isinstance(m, TensorProxy) and isinstance(f, TensorProxy):
            for a, b in zip(m.shape, f.shape):
                if isinstance(a, Proxy) and getattr(b, "name", None) != a.name:
                    out[a.name] = b
    return out


def _renamed_outputs(bsym, names: dict):
    """bsym with its own outputs whose shapes hold a renamed size remade with the new sizes (recorded in names, so
    later lines read the remade ones): a line keeping its input's size (slice_scatter of a dropped twin's survivor)
    would otherwise carry the old size while lines reading it compute with the new (fuzz seed 2401)."""
    if not names:
        return bsym
    remade = {o.name: c for o in bsym.flat_proxy_outs() if (c := _with_renamed_sizes(o, names)) is not None}
    if not remade:
        return bsym
    names.update(remade)
    return bsym.from_bsym(output=tree_map(lambda x: remade.get(x.name, x) if isinstance(x, Proxy) else x,
                                          bsym.output))


def cse(trace: Trace, distinct_outputs: bool = True) -> Trace:
    """distinct_outputs: keep every line whose tensor the trace returns (False for a backward, whose gradients
    autograd copies where two are one tensor)."""
    with Timer() as t:
        returned = {p.name for p in tree_flatten(trace.output)[0] if isinstance(p, TensorProxy)} \
            if distinct_outputs else ()
        seen: dict = {}
        names: dict = {}  # dropped output name -> the proxy that replaces it
        kept = []
        for bsym in trace.bound_symbols:
            bsym = _renamed_outputs(rename_args(bsym, names), names)
            outs = bsym.flat_proxy_outs()
            if not outs or _never(bsym):
                kept.append(bsym)
                if writes_in_place(bsym):  # a read after a write is a new value, even with the same arguments
                    seen.clear()
                continue
            key = line_key(bsym)
            first = seen.get(key)
            if first is None or any(o.name in returned for o in outs) or _changes_grad_dtype(bsym):
                seen[key] = bsym
                kept.append(bsym)
                continue
            mine, _ = tree_flatten(bsym.output)
            theirs, _ = tree_flatten(first.output)
            names.update({m.name: f for m, f in zip(mine, theirs) if isinstance(m, Proxy)})
            names.update(_symbolic_sizes(mine, theirs))
        new = from_trace(trace)
        new.bound_symbols = kept
        new.output = tree_map(lambda x: names.get(x.name, x) if isinstance(x, Proxy) else x, trace.output)
    return new.set_provenance("Common Subexpression Elimination", t.seconds)
