"""Transforms: the grad transform. From a computation trace whose inputs require grad, build a forward trace
(outputs + saved-for-backward) and a backward trace (saved + cotangents -> input grads) by applying each op's VJP
rule (transforms/vjp_rules.py) in reverse. Composites without a rule (or whose rule declines with NotImplemented)
are differentiated through their subsymbols; opaque torch ops through torch.autograd at run time. An op with an
augmented forward (AUGMENTED_FORWARDS: layer_norm, rms_norm, sdpa; random opaque ops) first has its forward line
swapped for a kernel that also returns what its backward needs. Saved-for-backward is exactly what the backward reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_leaves, tree_unflatten
from jitcore.ir.symbol import Tag, is_eager_view, recorded_without_grad
from jitcore.ir.trace import Timer, Trace, from_trace, get_tracectx, tracectx
from jitcore.ops import ltorch, prims
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_creation as pc
from jitcore.ops import torch_elementwise as te
from jitcore.ops.size_checks import checks_into
from transforms.cse import rename_args
from transforms.dce import dce
from transforms.vjp_helpers import bound_arguments
from transforms.vjp_rules import AUGMENTED_FORWARDS, VJP_RULES, opaque_vjp, random_opaque_augment
from transforms.vjp_rules_complex import complex_pullback

SKIP = frozenset({Tag.NON_DIFFERENTIABLE, Tag.CREATION})


@dataclass
class Split:
    forward: Trace  # (*inputs) -> (*outputs, *saved)
    backward: Trace  # (saved, cotangents) -> grads for each forward input (None where it needs none); two lists
    n_outputs: int
    saved: list  # forward proxies the backward reads
    output_requires_grad: list  # per flat output, whether it carries a gradient
    # per backward output after the one per input: the input position whose gradient it is one more contribution
    # to (inputs whose contributions stay apart: see grad_transform)
    extra_grads: tuple = ()


class Apart(tuple):
    """The contributions to one gradient that the backward keeps apart, in the order it computes them."""


def needs_grad(x) -> bool:
    return isinstance(x, TensorProxy) and x.requires_grad


class _Backprop:
    """Walks a trace in reverse, recording the backward into the active (backward) trace."""

    def __init__(self, apart=frozenset()):
        self.cot: dict[str, TensorProxy | Apart] = {}
        self.apart = apart  # names whose contributions are not summed (an Apart of them, where there are several)

    def accumulate(self, p, g):
        if g is None or not needs_grad(p):
            return
        if g.dtype.is_complex != p.dtype.is_complex:  # a real input of a complex op gets the real part (eager's
            g = pcx.real(g) if g.dtype.is_complex else te.to_dtype(g, p.dtype)  # rule), a complex one a complex
        if tuple(g.shape) != tuple(p.shape):
            raise AssertionError(f"gradient of {p.name} has shape {tuple(g.shape)}, expected {tuple(p.shape)}")
        prev = self.cot.get(p.name)
        if prev is None:
            self.cot[p.name] = g
        elif p.name in self.apart:
            self.cot[p.name] = Apart((*prev, g) if isinstance(prev, Apart) else (prev, g))
        else:
            self.cot[p.name] = te.add(prev, g)

    def bsym(self, bsym):
        outs = bsym.output
        flat_outs = tree_leaves(outs)
        gs = [self.cot.get(o.name) if isinstance(o, TensorProxy) else None for o in flat_outs]
        if all(g is None for g in gs) or bsym.sym.tags & SKIP or recorded_without_grad(bsym):
            return  # (a line recorded under no_grad is a constant even where its inputs require grad)
        if not any(needs_grad(a) for a in bsym.flat_proxy_args()):
            return
        aug = bsym.vjp
        if aug is not None:  # a line swapped by an augmented forward: pull back through the original op
            backward, orig, residuals = aug
            ogs = [self.cot.get(o.name) if isinstance(o, TensorProxy) else None for o in tree_leaves(orig.output)]
            self._assign(orig, backward(orig, residuals, *ogs), positional=Tag.OPAQUE in orig.sym.tags)
            return
        rule = VJP_RULES.get(bsym.sym.id)
        grads = complex_pullback(rule, bsym, gs) if rule is not None else NotImplemented
        if grads is not NotImplemented:
            self._assign(bsym, grads)
        elif bsym.subsymbols and not bsym.sym.is_prim:
            for sub in reversed(bsym.subsymbols):
                self.bsym(sub)
        elif Tag.OPAQUE in bsym.sym.tags:
            self._assign(bsym, opaque_vjp(bsym, gs), positional=True)
        else:
            raise UnsupportedError("autodiff", f"no VJP rule for {bsym.sym.id}",
                                   hint="add a rule to transforms/vjp_rules_*.py or tag the op NON_DIFFERENTIABLE")

    def _assign(self, bsym, grads, positional=False):
        """grads: one entry per parameter of the op's signature (for opaque ops: per positional argument, then one
        for the keyword arguments' values when there are any); a list for a list, tuple or dict argument, at any
        depth; None where there is no gradient."""
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        if positional:
            values = list(bsym.args) + ([list(bsym.kwargs.values())] if bsym.kwargs else [])
        else:
            values = bound_arguments(bsym)
        for arg, g in zip(values, grads):
            self._assign_value(arg, g)

    def _assign_value(self, arg, g):
        if g is None:
            return
        if isinstance(arg, (tuple, list, dict)):
            for a, gi in zip(arg.values() if isinstance(arg, dict) else arg, g):
                self._assign_value(a, gi)
        else:
            self.accumulate(arg, g)


def grad_transform(trace: Trace, apart=frozenset()) -> Split:
    """apart: names of inputs (and of values an op passes such an input on as: FSDP2's gathered parameters) whose
    gradient contributions the backward returns apart instead of summing them, so that they are summed as autograd's
    engine sums them: each cast to the leaf's grad_dtype first (jitcore/compat.py leaf_grad_dtype). An input's
    further contributions are the backward's outputs after the one per input (Split.extra_grads)."""
    with Timer() as t:
        fw = from_trace(trace, "forward")
        with tracectx(fw), torch.no_grad():
            bsyms = augment(trace.bound_symbols)
        bw = Trace("backward")
        bw.names, bw._counters = set(fw.names), dict(fw._counters)
        flat_out = list(tree_leaves(trace.output))
        rg = [needs_grad(o) for o in flat_out]
        bp = _Backprop(apart)
        checks: list = []  # (checks of run-time sizes the rules need run at the forward's end: size_checks.py)
        with tracectx(bw), torch.no_grad(), checks_into(trace, checks):  # backward values carry no gradient
            cts = [o.like(requires_grad=False) if r else None for o, r in zip(flat_out, rg)]
            for o, ct in zip(flat_out, cts):
                if ct is not None:
                    bp.accumulate(o, ct)
            for bsym in reversed(bsyms):
                bp.bsym(bsym)
        grads = [bp.cot.get(a.name) if needs_grad(a) else None for a in trace.args]
        extra = [(i, c) for i, g in enumerate(grads) if isinstance(g, Apart) for c in g[1:]]
        grads = [g[0] if isinstance(g, Apart) else g for g in grads]
        bw.output = tuple(grads) + tuple(c for _, c in extra)
        bw = dce(bw)
        saved = free_proxies(bw, {c.name for c in cts if c is not None})
        bw.args = saved + [c for c in cts if c is not None]
        bw.arg_groups = [("saved", len(saved)), ("cotangents", sum(c is not None for c in cts))]
        bsyms += checks
        top = _names_and_sizes([*tree_leaves(trace.args), *(o for b in bsyms for o in b.flat_proxy_outs())])
        fw.bound_symbols = expose(bsyms, {p.name for p in saved}, top)
        fw.output = tuple(flat_out) + tuple(saved)
    fw.set_provenance("Forward pass of the grad transform", t.seconds)
    bw.set_provenance("Backward pass of the grad transform", t.seconds)
    return Split(fw, bw, len(flat_out), saved, rg, tuple(i for i, _ in extra))


def augment(bsyms) -> list:
    """bsyms with each line that has an augmented forward (AUGMENTED_FORWARDS; inputs that need grad) swapped for the
    line it records: same outputs plus residuals for its backward (nested inside composites without a rule too)."""
    out = []
    for bsym in bsyms:
        aug = AUGMENTED_FORWARDS.get(bsym.sym.id)
        if aug is None and Tag.OPAQUE in bsym.sym.tags and Tag.RANDOM in bsym.sym.tags:
            aug = random_opaque_augment
        wants = not recorded_without_grad(bsym) and any(needs_grad(a) for a in bsym.flat_proxy_args())
        if aug is not random_opaque_augment and any(isinstance(a, TensorProxy) and a.dtype.is_complex
                                                     for a in bsym.flat_proxy_args()):
            aug = None  # (their kernels' backwards are real ones: complex values go through the decomposition)
        if wants and aug is not None:
            new = _augmented(bsym, aug)
            if new is not None:
                out.append(new)
                continue
        no_rule = aug is None and bsym.sym.id not in VJP_RULES
        if wants and no_rule and bsym.subsymbols and not bsym.sym.is_prim:
            subs = augment(bsym.subsymbols)
            if any(a is not b for a, b in zip(subs, bsym.subsymbols)):
                bsym = bsym.from_bsym(subsymbols=tuple(subs))
        out.append(bsym)
    return out


def _augmented(bsym, augment_fn):
    """Record augment_fn(bsym) -> (symbol, args, kwargs, backward); the symbol's first outputs stand for bsym's
    outputs (same metadata; they keep bsym's proxies) and the rest are residuals for `backward`."""
    plan = augment_fn(bsym)
    if plan is None:
        return None
    sym, args, kwargs, backward = plan
    trace = get_tracectx()
    with trace.subsymbol_scope():
        new_out = sym(*args, **kwargs)
    new_leaves, spec = tree_flatten(new_out)
    orig = tree_leaves(bsym.output)
    for o, n in zip(orig, new_leaves):
        if o is None and n is None:
            continue  # an absent output (multi_head_attention_forward's weights when need_weights=False)
        if not isinstance(o, TensorProxy) and type(o) is type(n) and o == n:
            continue  # a number among the outputs (a user's autograd.Function returning `n + 1`)
        if o is None or n is None or tuple(o.shape) != tuple(n.shape) or o.dtype != n.dtype:
            raise AssertionError(f"augmented forward of {bsym.sym.id}: {n.type_string()} stands for {o.type_string()}")
    residuals = new_leaves[len(orig):]
    output = tree_unflatten(spec, list(orig) + residuals)
    new = sym.bind(*args, output=output, **kwargs)
    new.vjp = (backward, bsym, residuals)
    if bsym.checkpointed:
        new.checkpointed = True
    return new


def expose(bsyms, needed: set, top: set) -> list:
    """bsyms with each composite that makes a needed value only inside its decomposition replaced by that
    decomposition (as deep as needed), so the forward computes every value the backward reads. A value a line of
    the program also makes (`i11 = 4 % i2`, a size functionalization computes for a write, that an index's
    decomposition computes too) is not a reason: exposing it would define it twice. `top`: the names the program
    has outside any decomposition (its inputs' and lines' values, and their tensors' sizes)."""
    out = []
    for bsym in bsyms:
        own = _names_and_sizes(bsym.flat_proxy_outs())
        inside = (_made_inside(bsym) - own - top) & needed if bsym.subsymbols else set()
        numbers = _number_lines(bsym, inside) if inside and is_eager_view(bsym) else None
        if numbers is not None:  # a view: it stays one line (its prims need not make a view), the numbers beside it
            out += [bsym, *numbers]
        elif inside:
            subs = bsym.subsymbols
            if bsym.checkpointed:  # the lines of a checkpointed line are checkpointed
                subs = [s.from_bsym(checkpointed=True) for s in subs]
            out += expose(subs, needed, top)
        else:
            out.append(bsym)
    return out


def _number_lines(bsym, needed: set) -> list | None:
    """The lines of a view's decomposition that compute numbers from its own inputs and outputs (a slice's end
    `i7 = i6 + 1`, `(i13,) = prims.shape(t2)`), when they make every value in `needed`; else None. Exposing the
    decomposition itself would change what runs: eager's x.diagonal() is a view of any x, its prims (a reshape
    to 1-d, then a strided slice) copy a non-contiguous x, so a write through the result would not reach x (fuzz
    seed 100869, cache="symbolic values", where the backward reads the sizes those lines compute)."""
    known = {p.name for p in bsym.flat_proxy_args()} | {p.name for p in bsym.flat_proxy_outs()}
    lines, made = [], set()

    def visit(b):
        if b.subsymbols and not b.sym.is_prim:
            return all(visit(s) for s in b.subsymbols)
        outs = b.flat_proxy_outs()
        if any(isinstance(o, TensorProxy) for o in outs):
            return True  # a tensor line: stays inside the view
        if any(isinstance(a, TensorProxy) and a.name not in known for a in b.flat_proxy_args()):
            return True  # (the size of a tensor made inside: not computable beside the view)
        lines.append(b)
        made.update(_names_and_sizes(outs))
        return True

    visit(bsym)
    return lines if needed <= made else None


def _made_inside(bsym) -> set:
    """The names a composite's decomposition makes: its lines' outputs, and the symbolic sizes of the tensors they
    make (a slice's length `i7` that the backward's slices read, which no line outputs)."""
    names = set()
    for sub in bsym.subsymbols:
        names |= _names_and_sizes(sub.flat_proxy_outs()) | _made_inside(sub)
    return names


def _names_and_sizes(proxies) -> set:
    """The proxies' names and those of their tensors' symbolic sizes (which the program reads from a tensor)."""
    names = set()
    for p in proxies:
        names.add(p.name)
        if isinstance(p, TensorProxy):
            names.update(s.name for s in p.shape if isinstance(s, Proxy))
    return names


def free_proxies(bw: Trace, exclude: set) -> list:
    """Proxies the backward reads but does not make: what the forward must save (in first-use order)."""
    made, free, seen = set(exclude), [], set()

    def visit(x):
        if isinstance(x, Proxy) and x.name not in made and x.name not in seen:
            seen.add(x.name)
            free.append(x)

    for bsym in bw.bound_symbols:
        for a in bsym.flat_proxy_args():
            visit(a)
        made.update(o.name for o in bsym.flat_proxy_outs())
    for o in tree_leaves(bw.output):
        visit(o)
    return free


def drop_cotangents(bw: Trace, present: tuple) -> Trace:
    """The backward for a call where some outputs got no cotangent: autograd passes None for an output the loss
    does not reach (the logits returned beside the loss, a KV cache). The backward is linear in the cotangents, so a
    line whose cotangent-carrying inputs are all missing computes zeros: it goes, and a gradient that is all such
    zeros is None, as in eager. An accumulation `add(zeros, g)` reads g alone; any other line that mixes zeros with
    a real cotangent reads zeros made once at the top. `present`: one bool per cotangent argument of bw."""
    with Timer() as t:
        n_saved = dict(bw.arg_groups)["saved"]
        cts = bw.args[n_saved:]
        carries = {c.name for c in cts}  # values computed from a cotangent
        zero = {c.name for c, p in zip(cts, present) if not p}  # ... from missing ones only
        names: dict = {}  # a dropped accumulation's output -> the value it passes on
        kept, read = [], {}
        for bsym in bw.bound_symbols:
            bsym = rename_args(bsym, names)
            ins = [a for a in bsym.flat_proxy_args() if a.name in carries]
            if not ins:  # computed from saved values alone
                kept.append(bsym)
                continue
            outs = bsym.flat_proxy_outs()
            carries.update(o.name for o in outs)
            zins = [a for a in ins if a.name in zero]
            if zins and len(zins) == len(ins) and outs and all(isinstance(o, TensorProxy) for o in outs) \
                    and not _adds_uncarried(bsym, carries):
                zero.update(o.name for o in outs)
                continue
            other = _accumulated_onto(bsym, zero) if zins else None
            if other is not None:
                names[bsym.output.name] = other
                continue
            read.update({a.name: a for a in zins})
            kept.append(bsym)
        new = from_trace(bw)
        new.args = bw.args[:n_saved] + [c for c, p in zip(cts, present) if p]
        new.arg_groups = [("saved", n_saved), ("cotangents", len(new.args) - n_saved)]
        zeros = {}
        with tracectx(new):
            for name, z in read.items():
                zeros[name] = pc.full(tuple(z.shape), 0, device=z.device, dtype=z.dtype)
        new.bound_symbols += [rename_args(b, zeros) for b in kept]
        new.output = tuple(_surviving(x, names, zero) for x in bw.output)
        new = dce(new)
    return new.set_provenance(f"Backward without cotangents {sorted(c.name for c, p in zip(cts, present) if not p)} "
                              f"(autograd passed None)", t.seconds)


# ops whose tensor operands are summed: an operand computed from no cotangent is a gradient term of its own (zeros
# for a path the loss reaches through an empty tensor), so the sum is not "zeros from missing cotangents" (None)
_ADDITIVE = frozenset({ltorch.add.id, prims.add.id, ltorch.sub.id, prims.sub.id})


def _adds_uncarried(bsym, carries: set) -> bool:
    """Whether bsym sums a cotangent-carrying value with a tensor computed from saved values alone."""
    return bsym.sym.id in _ADDITIVE and any(
        isinstance(a, TensorProxy) and a.name not in carries for a in bsym.flat_proxy_args())


def _surviving(x, names: dict, zero: set):
    """A gradient output after the drop: its replacement, or None where it is zeros."""
    if not isinstance(x, Proxy):
        return x
    x = names.get(x.name, x)
    return None if x.name in zero else x


def _accumulated_onto(bsym, zero: set):
    """The other operand of `add(z, g)` / `add(g, z)` when z is zeros (same shape and dtype as the sum, no alpha);
    None otherwise."""
    if bsym.sym.id not in (ltorch.add.id, prims.add.id) or bsym.kwargs or len(bsym.args) != 2:
        return None
    a, b = bsym.args
    for z, other in ((a, b), (b, a)):
        if isinstance(z, Proxy) and z.name in zero and isinstance(other, TensorProxy) \
                and other.name not in zero and tuple(other.shape) == tuple(bsym.output.shape) \
                and other.dtype == bsym.output.dtype:
            return other
    return None
