"""Frontend: in-place metadata changes of a tensor object (`x.unsqueeze_(0)`, `x.t_()`, `x.resize_(n)`, recorded by
jitcore/ops/metadata_inplace.py as the view the tensor becomes). The user's code holds one proxy object per tensor,
so the two proxies trade places: the user's object takes the view's name and metadata (later reads and writes of it
are of the view, with eager's aliasing), the view's object takes the old name and stands for the old tensor in every
line recorded so far and as the input the prologue unpacks. The changes of an input's tensor are kept
(JitContext.metadata_changes) for the epilogue to replay on the caller's tensor after the call.
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ir.arith import concretize
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import writes_in_place

_SLOTS = ("name", "_shape", "_size", "dtype", "device", "requires_grad")


def rebind_tensor(ctx, proxy: TensorProxy, view: TensorProxy, change: tuple):
    """`proxy` (the object the user's code holds) becomes `view`; change: (method, args, kwargs, grad mode)."""
    if type(proxy) is not TensorProxy or type(view) is not TensorProxy:
        raise UnsupportedError("in-place metadata change", f"Tensor.{change[0]} of a {type(proxy).__name__}")
    is_input = any(p is proxy for p in ctx._proxies.values())
    if is_input:  # replayed by the epilogue on the caller's tensor: with this call's numbers (guarded)
        name, args, kwargs, grad = change
        change = (name, _concrete(args), _concrete(kwargs), grad)
    elif not _same_size_resize(change[0], proxy, view):  # (eager moves the version counter of what it views: an
        # input's, the epilogue says)
        line = next((b for b in reversed(ctx.trace._scopes[-1]) if any(o is view for o in b.flat_outs())), None)
        if line is not None:
            line.moves_version = True
    for slot in _SLOTS:
        a, b = getattr(proxy, slot), getattr(view, slot)
        setattr(proxy, slot, b)
        setattr(view, slot, a)
    swap = {id(proxy): view, id(view): proxy}
    done = set()  # (a line is swapped once: the data guards' programs share the recording's lines)
    for scope in ctx.trace._scopes:
        for b in scope:
            _swap_refs(b, swap, done)
    for guard in ctx.guards.data:  # their programs' own lines (a run-time size's shape read, fuzz seed 158), inputs
        program = getattr(guard.program, "trace", None)  # and outputs, printed again when the guards merge
        if program is not None:
            for b in program.bound_symbols:
                _swap_refs(b, swap, done)
            program.args = [swap.get(id(a), a) for a in program.args]
            leaves, spec = tree_flatten(program.output)
            program.output = tree_unflatten(spec, [swap.get(id(x), x) for x in leaves])
    for inp in ctx.inputs:
        if inp.proxy is proxy:
            inp.proxy = view
    if is_input:
        ctx.metadata_changes.setdefault(id(proxy), (proxy, []))[1].append(change)
        ctx.metadata_names.setdefault(id(proxy), []).append(proxy.name)


def _same_size_resize(name: str, old: TensorProxy, new: TensorProxy) -> bool:
    """A resize_ to the sizes the tensor has: eager's leaves it (and its version counter) as it is (under symbolic
    values the answer is a predicate the cache checks)."""
    return name in ("resize_", "resize_as_") and len(old._shape) == len(new._shape) and all(
        a is b or bool(a == b) for a, b in zip(old._shape, new._shape))


def _concrete(tree):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(spec, [concretize(x) if isinstance(x, NumberProxy) else x for x in leaves])


def _swap_refs(bsym, swap: dict, done: set):
    """bsym (and its subsymbols), each proxy object in swap replaced by its partner (in place: the recording's lines
    are the same objects for every stage holding them), unless done has it."""
    if id(bsym) in done:
        return
    done.add(id(bsym))
    for field in ("args", "kwargs", "output"):
        tree = getattr(bsym, field)
        leaves, spec = tree_flatten(tree)
        if any(id(x) in swap for x in leaves):
            setattr(bsym, field, tree_unflatten(spec, [swap.get(id(x), x) for x in leaves]))
    for s in bsym.subsymbols:
        _swap_refs(s, swap, done)


def input_metadata_changes(ctx) -> list:
    """(input position, the name of the tensor the caller's tensor becomes, its changes in order) for each input
    whose tensor the function changed in place."""
    out = []
    for k, (inp, value) in enumerate(zip(ctx.inputs, ctx._values)):
        now = ctx._proxies.get(id(value))
        if now is not None and now is not inp.proxy and id(now) in ctx.metadata_changes:
            out.append((k, now.name, tuple(ctx.metadata_changes[id(now)][1])))
    return out


def refuse_reads_after_change(ctx, trace):
    """An argument that requires grad and is no leaf (x = w * 2 made by the caller), whose metadata the function
    changed in place and then read with a result that requires grad: eager's reads after the change hang off the
    caller's x as it becomes (its grad_fn the change's), so `autograd.grad(loss, x)` counts them; here they read the
    input before the epilogue replays the change on the caller's tensor, and that gradient would miss them. Refused;
    leaves, tensors that do not require grad, and reads without grad (no_grad, detach) are as eager's."""
    for inp, value in zip(ctx.inputs, ctx._values):
        now = ctx._proxies.get(id(value))
        if now is None or now is inp.proxy or id(now) not in ctx.metadata_changes:
            continue
        names = set(ctx.metadata_names.get(id(now), ()))
        if not names or not value.requires_grad:
            continue
        read = next((b for b in trace.bound_symbols if _reads_with_grad(b, names)), None)
        if read is None or ctx.leaf_input(inp.proxy):
            continue
        method, arg = ctx.metadata_changes[id(now)][1][0][0], str(inp.provenance)
        raise UnsupportedError(
            "in-place metadata change",
            f"Tensor.{method} of argument {arg}, which requires grad and is not a leaf, then read "
            f"({read.sym.id}) with a result that requires grad: eager's later reads hang off the caller's tensor as "
            "it is after the change, and jitcore's read it before, so the gradient with respect to the argument after "
            "the call would miss them",
            hint=f"change the metadata of a view instead (x = x.{method.rstrip('_')}(...)), or pass a leaf or a "
                 "detached tensor")


def _reads_with_grad(bsym, names: set) -> bool:
    """Whether the line reads the tensor after a change (one of names) into a result that requires grad: not the next
    change itself, nor a write into it (`x[0] = w`: written back before the epilogue's replay, as tested; what reads
    the written value runs in a tail, refused for a changed input: pipeline._refuse_restrided_tails)."""
    args = bsym.flat_proxy_args()
    if not any(a.name in names for a in args) or any(o.name in names for o in bsym.flat_proxy_outs()):
        return False
    if writes_in_place(bsym) and args[0].name in names:
        return False
    return any(isinstance(o, TensorProxy) and o.requires_grad for o in bsym.flat_proxy_outs())
