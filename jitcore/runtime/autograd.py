"""The torch.autograd.Function wrapper (built by the codegen stage): runs a compiled forward program and, on backward,
the compiled backward program, so jitted calls compose with eager autograd, optimizers and `loss.backward()`. The
backward is differentiable once (create_graph=True through a jitted function raises, rather than a later second
derivative silently missing the jitted part). An output the loss does not reach gets no gradient (None, not zeros):
that backward runs a program without its cotangent (transforms/autodiff.drop_cotangents), built once per pattern.
Under DDP the parameters enter the node detached and their gradients reach them from inside the backward, as soon
as computed (jitcore/ops/grads_ready.py), so DDP's all-reduces start before the backward ends.
Also, at trace time: an op that eager's autograd would save an inference tensor for raises eager's RuntimeError.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch

from jitcore import compat
from jitcore.hooks import eager, top_hooks
from jitcore.ir.arith import value_of
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_map
from jitcore.ops.grads_ready import DELIVERIES, Delivery


class _JitAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, *inputs):
        if program.early_grads:  # (first: the program may raise)
            ctx.early, program.pending_early = program.pending_early, None
        results = program.forward(*inputs)
        n = program.n_outputs
        if program.saved_layout is None:  # every saved value is a tensor (the usual case)
            if program.saves:  # (torch packs them when apply returns: AutogradProgram.saving is around it)
                ctx.save_for_backward(*results[n:])
        else:
            saved = results[n:]
            ctx.save_for_backward(*[s for s, kept in zip(saved, program.saved_layout) if kept is None])
            ctx.saved_others = [None if kept is None else s for s, kept in zip(saved, program.saved_layout)]
        ctx.program = program
        if program.without_none:  # an output the loss does not reach gets None, not a tensor of zeros
            ctx.set_materialize_grads(False)
        outputs = results[:n]
        if program.keep_out_meta:  # zeros for a None cotangent, where no backward without it could be built
            ctx.out_meta = [(o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None for o in outputs]
        if program.no_grad_outputs:
            ctx.mark_non_differentiable(*[outputs[i] for i in program.no_grad_outputs
                                          if isinstance(outputs[i], torch.Tensor)])
        return outputs

    @staticmethod
    def backward(ctx, *cotangents):
        return _node_backward(ctx, *cotangents)


def _node_backward(ctx, *cotangents):
    """The backward node's work (the engine calls it straight from the node: see _JitAutograd._backward_cls)."""
    if _grad_enabled():  # autograd turns grad mode on in backward only for create_graph=True
        raise RuntimeError(
            "jitcore: double backward is not supported: a backward with create_graph=True reached a jitted "
            "function, whose compiled backward is differentiable once. Compute higher-order gradients eagerly "
            "(call the original function) or take first-order gradients only.")
    program = ctx.program
    if program.saved_layout is not None:
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if s is None else s for s in ctx.saved_others]
        del tensors
    elif program.saves:
        saved = list(ctx.saved_tensors)
    else:
        saved = []
    # unless the graph is retained (retain_graph=True), ctx drops its references now; the backward program
    # empties `saved` on entry, so each saved tensor is freed right after its last use, as eager autograd does
    ctx.maybe_clear_saved_tensors()
    cts = list(cotangents) if program.all_outputs_grad else [
        c for c, rg in zip(cotangents, program.output_requires_grad) if rg]
    if not program.early_grads:
        return _run_backward(ctx, program, cotangents, saved, cts)
    if ctx.early is None:
        DELIVERIES.append(None)  # a program with grads_ready lines called outside DDP: they hand nothing over
        try:
            return _run_backward(ctx, program, cotangents, saved, cts)
        finally:
            DELIVERIES.pop()
    delivery = Delivery(*ctx.early)  # the program's grads_ready lines hand the parameters their gradients
    DELIVERIES.append(delivery)
    try:
        grads = list(_run_backward(ctx, program, cotangents, saved, cts))
    finally:
        DELIVERIES.pop()
    rest = [pos for pos in delivery.params if pos not in delivery.done]  # (a program without the lines)
    delivery.hand_over(rest, [grads[pos + 1] for pos in rest])
    delivery.flush()
    for pos in delivery.params:  # (the node's inputs were detached: autograd has nowhere to send these)
        grads[pos + 1] = None
    return tuple(grads)


class _JitAutogradEarly(_JitAutograd):
    """_JitAutograd for a call whose parameters enter detached (DDP): `anchor`, a leaf that requires grad, keeps the
    outputs' history when no other input requires grad; it receives no gradient."""

    @staticmethod
    def forward(ctx, program, anchor, *inputs):
        return _JitAutograd.forward(ctx, program, *inputs)

    @staticmethod
    def backward(ctx, *cotangents):
        return (None, *_node_backward(ctx, *cotangents))


_ANCHOR = torch.empty(0, requires_grad=True)


def _run_backward(ctx, program, cotangents, saved, cts) -> tuple:
    """(None, *one gradient per input) of the backward program that fits the cotangents autograd passed."""
    backward, program.last_without = program.backward, None
    if program.without_none:  # only then can autograd pass None (an output the loss does not reach)
        for c in cts:
            if c is None:
                break
        else:
            return (None, *backward(saved, cts))
        present = tuple(c is not None for c in cts)
        without, none_grads = program.backward_without(present)
        if without is None:  # symbolic sizes: the whole backward, with zeros made here, and eager's Nones
            grads = program.backward(saved, _zeros_for_none(ctx, program, cotangents))
            return (None, *[None if n else g for g, n in zip(grads, none_grads)])
        program.last_without, backward = present, without
        cts = [c for c in cts if c is not None]
    return (None, *backward(saved, cts))


_grad_enabled = torch.is_grad_enabled
# the engine calls the backward node's `apply`; torch's (BackwardCFunction.apply) looks up which user function to
# call on every backward: ours is known, so the node calls it directly
_JitAutograd._backward_cls.apply = _node_backward


def _zeros_for_none(ctx, program, cotangents) -> list:
    """The cotangents with zeros (shaped like the outputs, kept by forward) where autograd passed None."""
    cts = [torch.zeros(*ctx.out_meta[i][0], dtype=ctx.out_meta[i][1], device=ctx.out_meta[i][2]) if c is None else c
           for i, c in enumerate(cotangents)]
    return cts if program.all_outputs_grad else [c for c, rg in zip(cts, program.output_requires_grad) if rg]


class AutogradProgram:
    """forward(*inputs) -> (*outputs, *saved); backward(saved, cotangents) -> one grad per input (two lists,
    emptied by the program as it unpacks them)."""

    def __init__(self, forward, backward, n_outputs: int, output_requires_grad: list, saved_is_tensor: list,
                 build_backward_without=None, saving=None, early_grads: tuple = (), enables_grad: bool = False,
                 nograd_views: tuple = (), extra_grads: tuple = ()):
        self.forward, self.backward = forward, backward
        # saving: None, or a context manager factory around the autograd.Function's apply (the saved-tensor hooks
        # in force when torch packs what its forward saved, as apply returns): without_ambient_hooks when the
        # programs already pack with the active torch pair (so it does not pack twice), hooks_around(pack, unpack)
        # for a jit(saved_tensor_hooks=...) pair that runs eagerly
        self.saving = saving
        # input positions of parameters whose gradients the backward hands over itself under DDP (early_grads.py);
        # pending_early: this call's {position: parameter}, from __call__ to the autograd.Function's forward
        self.early_grads, self.pending_early = early_grads, None
        # present (one bool per cotangent) -> [traces, ..., program] of the backward for calls where autograd
        # passed None for the cotangents marked False; last_without: the pattern the last backward ran, if any
        self._build_without, self._without, self.last_without = build_backward_without, {}, None
        self.without_none = build_backward_without is not None
        self.keep_out_meta = getattr(build_backward_without, "needs_shapes", False)
        self.n_outputs, self.output_requires_grad = n_outputs, list(output_requires_grad)
        # the per-call work is decided here, once: which saved values go through save_for_backward (tensors) and
        # which are kept on ctx as they are (None: all of them are tensors), which outputs carry no gradient
        self.saved_layout = None if all(saved_is_tensor) else [None if t else "value" for t in saved_is_tensor]
        self.saves = bool(saved_is_tensor)
        self.no_grad_outputs = tuple(i for i, rg in enumerate(self.output_requires_grad) if not rg)
        self.all_outputs_grad = not self.no_grad_outputs
        self.enables_grad = enables_grad  # a program traced with grad mode off whose outputs need grad (see __call__)
        self.nograd_views = nograd_views  # output positions of views made under no_grad
        self.extra_grads = extra_grads  # GradsApart: the input positions taken again, one per extra gradient

    def backward_without(self, present: tuple):
        """(the backward program for calls whose cotangents are None where `present` is False (one per output
        with a gradient), compiled once per pattern, None) or, where it needs zeros of sizes it is not given,
        (None, which gradients are None)."""
        built = self._without.get(present)
        if built is None:
            traces = self._build_without(present)
            if traces[-1].zeros_from_runtime:  # (None, which gradients are None)
                built = (traces, None, tuple(g is None for g in traces[-1].output))
            else:
                built = (traces, traces[-1].python_callable(), None)
            self._without[present] = built
        return built[1:]

    def without_traces(self, present: tuple) -> list:
        return list(self._without[present][0])

    def __call__(self, *inputs):
        given = inputs  # (the caller's: parameters may enter the node detached)
        if torch.is_grad_enabled():  # inside apply, the programs run with grad mode off
            if self.early_grads and ddp_overlaps():
                inputs = self._detach_parameters(inputs)
                if self.pending_early is not None:
                    if self.saving is not None:
                        with self.saving():
                            return self._without_history(given, _apply_early(self, _ANCHOR, *inputs))
                    return self._without_history(given, _apply_early(self, _ANCHOR, *inputs))
            if self.saving is not None:
                with self.saving():
                    return self._without_history(given, _apply(self, *inputs))
            return self._without_history(given, _apply(self, *inputs))
        if self.enables_grad:  # traced under no_grad, but torch.enable_grad() inside made outputs that need grad
            with torch.enable_grad(), self.saving() if self.saving is not None else nullcontext():
                return self._without_history(given, _apply(self, *inputs))
        return self._without_history(given, self.forward(*inputs)[: self.n_outputs])

    def _detach_parameters(self, inputs) -> list:
        """inputs with the parameters of early_grads detached (the node has no edge to them: their gradients reach
        them from inside the backward), those parameters kept for this call's autograd.Function (pending_early)."""
        inputs, early = list(inputs), {}
        for pos in self.early_grads:
            p = inputs[pos]
            if p.requires_grad and p.is_leaf:
                # the gradient reaches p through a view of it: the engine makes the view's gradient (an alias of the
                # program's), which AccumulateGrad can keep as p.grad, as it keeps eager's, instead of a copy
                early[pos] = p.view_as(p)
                inputs[pos] = p.detach()
        # batches of at most 1 MiB (and of half DDP's bucket size): a bucket's all-reduce starts soon after the
        # program computes its last gradient, and the per-call cost stays a few engine calls per MiB
        ddp = torch.nn.parallel.DistributedDataParallel._active_ddp_module
        self.pending_early = (early, min(2**20, ddp.bucket_bytes_cap // 2)) if early else None
        return inputs

    def _without_history(self, inputs, outputs):
        return without_history(outputs, self.nograd_views, inputs) if self.nograd_views else outputs


class GradsApart(AutogradProgram):
    """An AutogradProgram whose backward returns some inputs' gradient contributions apart (transforms/autodiff.py
    grad_transform: leaves whose grad_dtype is not their dtype): the node takes each such input once more per extra
    contribution (extra_grads: their positions), so autograd's engine sums them as it sums eager's, each cast to the
    leaf's grad_dtype first. The forward program reads the first inputs only (first_inputs)."""

    extra_grads: tuple = ()

    def __call__(self, *inputs):
        return super().__call__(*inputs, *[inputs[i] for i in self.extra_grads])


def first_inputs(program, n: int):
    """program(*inputs[:n]): a forward program called with the extra inputs of GradsApart."""
    def run(*inputs):
        return program(*inputs[:n])
    return run


def without_history(outputs, positions: tuple, inputs):
    """Views made under no_grad of tensors that require grad: eager's have no grad_fn (no gradient reaches what they
    view), whatever the program computed them from, and require grad as their root base does (the input they view,
    or its own base when that input is itself a view: a transposed leaf `b.t().requires_grad_()` of a `b` without
    grad gives views that do not)."""
    outputs = list(outputs)
    for i, at in positions:
        o = outputs[i]
        if not isinstance(o, torch.Tensor) or not (o.is_floating_point() or o.is_complex()):
            continue
        if at is None:
            wanted = True
        else:
            root = inputs[at]._base if inputs[at]._base is not None else inputs[at]
            wanted = root.requires_grad
        if wanted and (o.grad_fn is not None or not o.requires_grad):
            outputs[i] = (o.detach() if o.grad_fn is not None or not o.is_leaf else o).requires_grad_(True)
        elif not wanted and o.requires_grad:
            outputs[i] = o.detach()
    return tuple(outputs)


class WithoutHistory:
    """A program without autodiff whose outputs include views made under no_grad (see without_history)."""

    def __init__(self, program, positions: tuple):
        self.program, self.positions = program, positions

    def __call__(self, *inputs):
        return without_history(self.program(*inputs), self.positions, inputs)


@contextmanager
def without_ambient_hooks():
    """The innermost saved_tensors_hooks set aside around the autograd.Function's apply (torch packs what forward
    saved as apply returns): the program packed those values with that pair already, so torch must not pack them a
    second time (pack runs once per saved tensor). torch.autograd.graph.disable_saved_tensors_hooks cannot do it: it
    refuses while hooks are set. Nothing inside apply saves otherwise: the programs run with grad mode off."""
    top = top_hooks(False)
    if top is None:
        yield
        return
    compat.pop_saved_tensors_hooks()
    try:
        yield
    finally:
        compat.push_saved_tensors_hooks(*top)


def hooks_around(pack, unpack):
    """A jit(saved_tensor_hooks=(pack, unpack)) pair the interpreter could not trace: torch runs it on the real tensors
    the wrapper saves (the innermost hooks, in place of any active around the call, as an inner
    saved_tensors_hooks block does in eager)."""
    return lambda: torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def ddp_overlaps() -> bool:
    """Whether this call runs inside DistributedDataParallel's forward, with a reducer that takes gradients as they
    come: DDP(jitcore.jit(model)) without find_unused_parameters (whose search of the autograd graph, from the
    outputs, must find the parameters as inputs of the jitted node)."""
    ddp = torch.nn.parallel.DistributedDataParallel._active_ddp_module
    return ddp is not None and not ddp.find_unused_parameters


# torch's own Function.apply minus its Python wrapper, whose per-call work (binding default arguments, unwrapping
# functorch tensors) applies only under torch.func transforms, which jitted calls refuse (jitcore/api.py)
_apply = super(torch.autograd.Function, _JitAutograd).apply
_apply_early = super(torch.autograd.Function, _JitAutogradEarly).apply


@dataclass(frozen=True)
class SavedTensors:
    nbytes: int  # of every tensor saved for backward (a tensor saved twice counts twice)
    distinct_nbytes: int  # of the distinct storages they hold
    count: int


def saved_tensor_bytes(call) -> SavedTensors:
    """What call() (a forward under grad mode: eager, torch.compile'd or jitted) saves for backward, counted as
    autograd saves it (torch.autograd.graph.saved_tensors_hooks: eager's graph and the jitted autograd.Function's
    ctx.save_for_backward both go through them). Returns nbytes (every saved tensor's bytes), distinct_nbytes (each
    storage once) and count.

    >>> w = torch.ones(4, 4, requires_grad=True)
    >>> jitcore.saved_tensor_bytes(lambda: (torch.ones(2, 4) @ w).sin())
    SavedTensors(nbytes=64, distinct_nbytes=64, count=2)
    """
    total, count, storages = 0, 0, {}

    def pack(t):
        nonlocal total, count
        total += t.numel() * t.element_size()
        count += 1
        s = t.untyped_storage()
        storages[(s.data_ptr(), s.nbytes())] = s.nbytes()
        return t

    # (eager: the hooks observe, jitcore does not trace them into the programs; they see what those save, packed)
    with torch.autograd.graph.saved_tensors_hooks(*eager(pack, _identity)):
        call()
    return SavedTensors(total, sum(storages.values()), count)


def _identity(t):
    return t


def refuse_inference_saves(bsym, made: dict, guard_not_inference):
    """Eager's autograd refuses to save an inference tensor (made under torch.inference_mode()) for an op's backward;
    the program's own backward may save something else (a mask instead of clamp's bound), and would answer. For a line
    of the user's recorded with grad on, reading a tensor that requires grad: its torch function run on meta tensors
    like its inputs (inference ones, made: the trace's INFERENCE names, made under inference mode) tells whether eager
    raises; if so the same RuntimeError is raised now, so no program is cached and every call raises as eager does.
    An argument tensor that requires no grad and that eager would save is guarded not to be an inference tensor
    (guard_not_inference(proxy)): a later call passing one is another call."""
    fn = getattr(bsym.sym, "torch_fn", None)
    leaves = [a for a in tree_flatten((bsym.args, bsym.kwargs))[0] if isinstance(a, TensorProxy)]
    if fn is None or not any(a.requires_grad for a in leaves):
        return
    error = _saves_inference(fn, bsym, made) if any(a.name in made for a in leaves) else None
    if error is not None:
        raise RuntimeError(error) from None
    for a in leaves:
        if not a.requires_grad and a.name not in made and \
                _saves_inference(fn, bsym, {**made, a.name: True}) is not None:
            guard_not_inference(a)


_SAVED_INFERENCE = "Inference tensors cannot be saved for backward"


class _Unknown(Exception):
    pass


def _saves_inference(fn, bsym, made: dict) -> str | None:
    """eager's error, when fn over meta tensors like bsym's arguments (those named in made made under inference mode)
    raises as it does when it saves an inference tensor for backward; else None."""
    def meta(a):
        """a as a meta tensor or a plain number: the values the proxies hold now, read without recording a
        predicate or a data guard (symbolic sizes stay symbolic)."""
        if isinstance(a, NumberProxy):
            a = value_of(a)
            if not isinstance(a, (int, float, bool)):
                raise _Unknown
            return a
        if not isinstance(a, TensorProxy):
            return a
        shape = tuple(value_of(s) for s in a.shape)
        if not all(type(s) is int for s in shape):
            raise _Unknown
        if a.name in made:
            with torch.inference_mode():
                return torch.empty(shape, dtype=a.dtype, device="meta")
        return torch.empty(shape, dtype=a.dtype, device="meta", requires_grad=a.requires_grad)

    try:
        args, kwargs = tree_map(meta, bsym.args), tree_map(meta, bsym.kwargs)
    except _Unknown:  # (a size only the run knows: nothing is known, the program decides)
        return None
    try:
        fn(*args, **kwargs)
    except Exception as e:  # (an op meta tensors cannot run: nothing is known, the program decides)
        return str(e) if isinstance(e, RuntimeError) and _SAVED_INFERENCE in str(e) else None
    return None
