"""Guards stage: Python values that depend on tensor data (`if mask.all():`, `x.item()`). While tracing, jitcore
has the call's real inputs, so it computes such a value from them with the part of the trace that produces it,
bakes the value into the trace, and guards it: the prologue recomputes that small program on each call's inputs and
a different value is a miss (the function is traced again and takes the other branch). Never a wrong answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from jitcore.errors import DataDependentError
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.symbol import BoundSymbol, Tag, viewed_tensor, writes_in_place
from jitcore.ir.trace import Trace, detached
from jitcore.ir.views import VIEW_OPS
from jitcore.ops import per_call
from jitcore.ops import prims_misc as pm

_CONVERT = {"bool": bool, "int": int, "float": float, "index": int, "item": lambda t: t.item(),
            "tolist": lambda t: t.tolist()}


@dataclass
class DataGuard:
    """program(*inputs) recomputes the value; `inputs` are the computation's input names it reads (or expressions
    over the prologue's size symbols)."""

    program: object
    inputs: tuple
    value: object
    text: str  # the value's program, for reason strings and inspection
    on_values: bool = True  # False: it reads metadata only (strides, contiguity, is_leaf), not tensor values


def has_nan(value) -> bool:
    """Whether a guarded value holds a NaN (`x.item()` of a NaN), which `!=` never finds equal to itself."""
    if isinstance(value, (float, complex)):
        return value != value
    return isinstance(value, (tuple, list)) and any(has_nan(v) for v in value)


def same_value(a, b) -> bool:
    """a == b, NaN equal to NaN: the check of a guarded value that holds a NaN."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if a == b:
        return True
    if not (isinstance(a, (float, complex)) and type(a) is type(b)):
        return False
    return all(x == y or (x != x and y != y) for x, y in ((a.real, b.real), (a.imag, b.imag)))


def _needed(trace: Trace, target) -> list:
    """The recorded lines (including those of composites still being recorded) that produce `target`, with the
    in-place writes into it or into any tensor it shares memory with (through views) made before it is read. A size
    known only at run time (`u0`) is produced by the first line whose output tensor has it: a `prims.shape` line
    that reads it from that tensor follows the line (no line of the trace makes it while tracing)."""
    lines = [b for scope in trace._scopes for b in scope]
    carriers = _run_time_carriers(lines)
    roots = _alias_roots(lines)
    needed, kept = {target.name}, []
    needed_roots = {roots.get(target.name, target.name)}
    for bsym in reversed(lines):
        sizes = [t for t in carriers.get(id(bsym), ()) if any(s.name in needed for s in _run_time_sizes(t))]
        written = _written(bsym)
        if any(o.name in needed for o in bsym.flat_proxy_outs()) or sizes or (
                written is not None and roots.get(written.name, written.name) in needed_roots):
            kept.append(bsym)
            args = bsym.flat_proxy_args()
            needed.update(a.name for a in args)
            needed_roots.update(roots.get(a.name, a.name) for a in args if isinstance(a, TensorProxy))
            kept[-1:-1] = [_read_sizes(t) for t in sizes]
    return kept[::-1]


def _written(bsym):
    """The tensor an in-place line writes into (its first tensor; prims.copy_'s dst), or None."""
    if not writes_in_place(bsym):
        return None
    if bsym.sym is pm.copy_:
        return bsym.args[1]
    return next((a for a in bsym.flat_proxy_args() if isinstance(a, TensorProxy)), None)


def _alias_roots(lines) -> dict:
    """Tensor name -> the tensor whose memory it shares: outputs of views (jitcore/ir/views.py) and of in-place
    writes share their first tensor's."""
    roots = {}
    for b in lines:
        first = next((a for a in b.flat_proxy_args() if isinstance(a, TensorProxy)), None)
        shares = first is not None and (b.sym.id in VIEW_OPS or writes_in_place(b))
        for o in b.flat_proxy_outs():
            if isinstance(o, TensorProxy):
                base = viewed_tensor(b, o) if shares and b.sym.id in VIEW_OPS else None
                base = first if base is None else base
                roots[o.name] = roots.get(base.name, base.name) if shares else o.name
    return roots


def _read_sizes(t: TensorProxy) -> BoundSymbol:
    """`(u0, _) = prims.shape(t)`: t's run-time sizes read from it (the other sizes are not rebound)."""
    out = tuple(s if isinstance(s, NumberProxy) and s.runtime else getattr(s, "value", s) for s in t._shape)
    return BoundSymbol(pm.shape, (t,), {}, out)


def _run_time_sizes(t: TensorProxy) -> list:
    return [s for s in t._shape if isinstance(s, NumberProxy) and s.runtime]


def _run_time_carriers(lines) -> dict:
    """id(line) -> the tensors it makes that first carry a run-time size (that line produces the size)."""
    seen, out = set(), {}
    for b in lines:
        for t in b.flat_proxy_outs():
            if isinstance(t, TensorProxy):
                new = [s for s in _run_time_sizes(t) if s.name not in seen]
                if new:
                    seen.update(s.name for s in new)
                    out.setdefault(id(b), []).append(t)
    return out


def _random(bsym) -> bool:
    """Whether the line draws: a composite tagged RANDOM whose decomposition draws nothing (sdpa or dropout with
    p=0) does not."""
    if bsym.subsymbols:
        return any(_random(s) for s in bsym.subsymbols)
    return Tag.RANDOM in bsym.sym.tags


def concrete_value(ctx, proxy: TensorProxy, kind: str):
    """The Python value `kind` ("bool", "int", "float", "index", "item") of `proxy` for this call, guarded.

    Refused (DataDependentError, quoting the user's line): values that come from random ops or from in-place writes
    into the inputs, or that need inputs other than the function's arguments (or the symbols of their sizes and of
    number arguments, under symbolic values), or anything when no real inputs are at hand (examine())."""
    what = {"bool": "a Python bool (e.g. `if tensor:`)", "item": "tensor.item()", "tolist": "tensor.tolist()"}.get(
        kind, f"a Python {kind}")
    if kind == "index" and (proxy.dtype.is_floating_point or proxy.dtype.is_complex or proxy.numel() != 1):
        raise TypeError("only integer tensors of a single element can be converted to an index")  # (as eager)
    if kind not in ("item", "tolist") and proxy.numel() != 1:
        if kind == "bool":
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        raise ValueError("only one element tensors can be converted to Python scalars")
    try:
        return guarded_value(ctx, [proxy], _CONVERT[kind], kind, f"converting a tensor to {what}")
    except WrittenInputs:
        if kind == "float" or (kind == "item" and proxy.numel() == 1 and proxy.dtype.is_floating_point):
            # a float read after writes into the inputs (BatchNorm(momentum=None)'s 1 / float(num_batches_tracked)):
            # read when the program runs, for arithmetic only (control flow on it is refused: jitcore/ir/arith.py)
            return per_call.tensor_number(proxy, kind)
        raise


class _NotThisCall:
    """What a data guard's program gives when a line of it fails on this call's values: a line that runs only with
    the values it was traced with (a resize_ of a run-time size that an earlier value of the same program fixed,
    fuzz seed 158). Equal to nothing, so the check is a miss (the prologue's `!=`), never an error."""

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        return "<not this call's values>"


NOT_THIS_CALL = _NotThisCall()


class WrittenInputs(DataDependentError):
    """A value that comes from in-place writes into the program's inputs: no prologue can compute it beforehand."""


def guarded_value(ctx, wanted: list, convert, kind: str, what: str):
    """convert(*values of `wanted` in this call), computed from the call's real inputs and guarded: the prologue
    recomputes it on every call, and a different value is a miss. Refused as concrete_value says."""
    lines = _lines_for(ctx.trace, wanted)
    drawn = next((b for b in lines if _random(b)), None)
    if drawn is not None:
        raise DataDependentError(f"{what} needs its value, which comes from random ops here ({drawn.sym.name})")
    real = {i.proxy.name: (i, v) for i, v in zip(ctx.inputs, ctx._values)}
    free = _free(lines, wanted)
    roots, inputs = _alias_roots(lines), {a.name for a in free}
    for b in lines:  # writes into tensors the program makes are its own; into its inputs, the prologue cannot
        w = _written(b)
        if w is not None and roots.get(w.name, w.name) in inputs:
            raise WrittenInputs(f"{what} needs its value, which comes from in-place writes into {w.name} here")
    for a in free:
        if isinstance(a, NumberProxy) and a.runtime:
            raise DataDependentError(f"{what} needs {a.name}, a size known only at run time, and no line makes it")
        if isinstance(a, NumberProxy) and a.expr is not None:  # a symbol the prologue binds (an input's size, a
            continue  # number argument) or an expression over them: the check reads it as predicates do
        entry = real.get(a.name)
        if isinstance(a, NumberProxy) or entry is None:  # (any tensor input: an argument, a module's parameter or
            raise DataDependentError(f"{what} needs its value, which depends on something other than the function's "
                                     f"tensor inputs ({a.name})")  # buffer, a global: the prologue binds each)
    program = Trace("data_guard")
    program.args, program.bound_symbols = free, lines
    program.output = wanted[0] if len(wanted) == 1 else tuple(wanted)
    program.names = set(ctx.trace.names)
    fn = program.python_callable()
    single = len(wanted) == 1

    def recompute(*tensors):
        with torch.no_grad():
            try:
                values = fn(*tensors)
            except RuntimeError:
                return NOT_THIS_CALL
            return convert(values) if single else convert(*values)

    recompute.__qualname__ = recompute.__name__ = f"data_guard[{_describe(program, kind)}]"
    recompute.trace = program  # the program that recomputes the value, printable
    recompute.convert = (lambda v: convert(v)) if single else (lambda vs: convert(*vs))
    with detached():
        now = [a.value if isinstance(a, NumberProxy) else real[a.name][1] for a in free]
        value = recompute(*now)
        if value is NOT_THIS_CALL:  # (while tracing, a failing line is an error of its own: raised as it is)
            fn(*now)
    reads = tuple(a.name if not isinstance(a, NumberProxy) or a.expr == a.name else f"({a.expr})" for a in free)
    ctx.guards.data.append(DataGuard(recompute, reads, value, _describe(program, kind)))
    return value


def merged(guards: list) -> DataGuard:
    """One guard checking all of `guards` (a call's values, in order) with one program: their programs share the
    lines that compute the same values (an MoE layer's routing, read by each of its experts' guards), which then run
    once per call instead of once per guard. Each program is a prefix-closed part of the same trace, so running them
    one after the other, skipping a line whose values an earlier one made, computes every value as each would."""
    program = Trace("data_guards")
    program.names = set().union(*(g.program.trace.names for g in guards))
    args, reads, made = [], [], set()
    for g in guards:
        for a, r in zip(g.program.trace.args, g.inputs):
            if a.name not in made:
                made.add(a.name)
                args.append(a)
                reads.append(r)
    lines = []
    for g in guards:
        for b in g.program.trace.bound_symbols:
            outs = [o.name for o in b.flat_proxy_outs()]
            if outs and all(o in made for o in outs):
                continue
            made.update(outs)
            lines.append(b)
    program.args, program.bound_symbols = args, lines
    program.output = tuple(g.program.trace.output for g in guards)
    fn = program.python_callable()
    converts = [g.program.convert for g in guards]

    def recompute(*tensors):
        with torch.no_grad():
            try:
                values = fn(*tensors)
            except RuntimeError:
                return NOT_THIS_CALL
            return tuple(c(v) for c, v in zip(converts, values))

    recompute.__qualname__ = recompute.__name__ = f"data_guards[{len(guards)} values]"
    recompute.trace = program
    recompute.convert = tuple
    return DataGuard(recompute, tuple(reads), tuple(g.value for g in guards), f"{len(guards)} values: " +
                     "; ".join(g.text for g in guards))


def _lines_for(trace, wanted) -> list:
    """The recorded lines that produce any of `wanted`, in program order."""
    lines, seen, order = [], set(), {id(b): i for i, b in enumerate(b for scope in trace._scopes for b in scope)}
    for p in wanted:
        needed = _needed(trace, p)
        for i, b in enumerate(needed):
            synthetic = id(b) not in order  # a run-time size's shape line: right after the line that makes its tensor
            order.setdefault(id(b), order[id(needed[i - 1])] + 0.5 if i else -1)
            key = ("shape", b.args[0].name) if synthetic else id(b)
            if key not in seen:
                seen.add(key)
                lines.append(b)
    return sorted(lines, key=lambda b: order[id(b)])


def _free(lines, wanted) -> list:
    """The values the lines read and do not make (by name: `==` on proxies records an op), then the wanted values
    no line makes (a line handing back its input, broadcast_tensors, does not make it)."""
    made, free, seen = set(), [], set()
    for b in lines:
        for a in b.flat_proxy_args():
            if a.name not in made and a.name not in seen:
                seen.add(a.name)
                free.append(a)
        made.update(o.name for o in b.flat_proxy_outs())
    for p in wanted:  # (each once: `torch.equal(x, x)` wants x twice)
        if p.name not in made and p.name not in seen:
            seen.add(p.name)
            free.append(p)
    return free


def real_values(ctx, wanted: list) -> list:
    """The values the tensors `wanted` hold in this call, computed from clones of its real inputs by the part of the
    trace that produces them (random draws and writes included: the RNG state is restored after). For what an op's
    outputs look like when it has no meta kernel (jitcore/ops/opaque.py): nothing is guarded here, so the caller
    uses only what does not depend on these values. None where an input is not at hand (examine(), or a value
    that comes from outside the arguments)."""
    # a value drawn per call (random.random()) is read as drawn while tracing, not drawn again: Python's generator
    # state stays as eager leaves it (fuzz seed 601)
    lines = _lines_for(ctx.trace, wanted)
    earlier = _earlier_draws(ctx.trace, lines)
    if earlier:
        lines = _lines_for(ctx.trace, [*wanted, *earlier])
    lines = [b for b in lines if b.sym.id != "python.per_call_value"]
    real = {i.proxy.name: v for i, v in zip(ctx.inputs, ctx._values)}
    free = _free(lines, wanted)
    if any(not isinstance(a, NumberProxy) and a.name not in real for a in free):
        return None
    program = Trace("real_values")
    program.args, program.bound_symbols, program.output = free, lines, tuple(wanted)
    program.names = set(ctx.trace.names)
    fn = program.python_callable()
    inputs = [a.value if isinstance(a, NumberProxy) else real[a.name] for a in free]
    state = torch.get_rng_state()
    try:
        with detached(), torch.no_grad():
            return list(fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
    finally:
        torch.set_rng_state(state)


def _earlier_draws(trace, lines: list) -> list:
    """The values of the draws the program makes before the last draw among `lines` that `lines` do not make: a
    value drawn after other draws is drawn at its place in the generator's sequence, as when the program runs (the
    count of a mask of `rand_like` after an earlier `rand_like`: run-time size checks hold it to the value seen)."""
    drawn = [b for b in lines if _random(b)]
    if not drawn:
        return []
    order = [b for scope in trace._scopes for b in scope]
    at = {id(b): i for i, b in enumerate(order)}
    last = max(at.get(id(b), -1) for b in drawn)
    have = {id(b) for b in lines}
    return [o for b in order[:last] if _random(b) and id(b) not in have and b.sym.id != "python.per_call_value"
            for o in b.flat_proxy_outs()]


def _describe(program: Trace, kind: str) -> str:
    ops = [b.sym.name for b in program.bound_symbols]
    outs = program.output if isinstance(program.output, tuple) else (program.output,)
    return f"{kind}({' -> '.join(ops) or ', '.join(o.name for o in outs)})"


__all__ = ["DataGuard", "Proxy", "concrete_value", "guarded_value", "has_nan", "merged", "real_values", "same_value"]
