"""Arguments as torch binds them: every OpInfo whose torch callable our ops table maps, called with each argument
that torch accepts by name given as a keyword (`F.linear(x, weight=w, bias=b)`), runs forward and backward like
eager. VJP rules and executor rows read an op's arguments through its binding (jitcore/ir/symbol.py
`BoundSymbol.bound`), so a keyword argument is the same argument as a positional one.
"""
from __future__ import annotations

import inspect
import itertools

import pytest
import torch
from torch.utils import _pytree as pytree

import jitcore
from jitcore.errors import DataDependentError
from jitcore.ops import torch_map
from tests.test_opinfo import SKIP, XFAIL, _id, _outputs, common

_KEYWORDABLE = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _ops():
    ops = []
    for op in common.op_db:
        sym = torch_map.TORCH_MAP.get(op.op)
        if (getattr(sym, "fn", None) is not None and op.name not in SKIP and _id(op) not in XFAIL
                and torch.float32 in op.supported_dtypes("cpu")):
            ops.append(op)
    return ops


OPS = _ops()


def keyword_call(sym, sample):
    """(positional, keywords) calling the op on the sample with every argument a name can give as a keyword; None
    when the sample does not bind to the op's signature or passes a variable number of positional arguments."""
    try:
        ba = inspect.signature(sym.fn).bind(sample.input, *sample.args, **sample.kwargs)
    except TypeError:
        return None
    pos, kw = [], {}
    for name, value in ba.arguments.items():
        kind = ba.signature.parameters[name].kind
        if kind in _KEYWORDABLE:
            kw[name] = value
        elif kind == inspect.Parameter.VAR_KEYWORD:
            kw.update(value)
        elif kind == inspect.Parameter.POSITIONAL_ONLY and not kw:
            pos.append(value)
        else:
            return None
    return pos, kw


def _tensor_fn(op, pos, kw):
    """(fn, tensors): fn(*tensors) calls the op with the tensors put back in place (keywords stay keywords)."""
    leaves, spec = pytree.tree_flatten((pos, kw))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*tensors):
        filled = list(leaves)
        for i, t in zip(where, tensors):
            filled[i] = t
        p, k = pytree.tree_unflatten(filled, spec)
        return op.op(*p, **k)

    return fn, tuple(leaves[i] for i in where)


def _grads(outs, weights, leaves):
    """d(sum_i <w_i, out_i>)/d leaves, zeros where a leaf is not reached (or an output carries no gradient)."""
    pairs = [(o, w) for o, w in zip(outs, weights) if o.requires_grad]
    got = torch.autograd.grad([o for o, _ in pairs], leaves, [w for _, w in pairs], allow_unused=True) if pairs \
        else [None] * len(leaves)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(got, leaves)]


def _copies(tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _run(fn, tensors, diff=None):
    """(outputs, gradients of a random-weighted sum of the outputs at indices `diff` (eager's differentiable
    outputs), tensors after the call)."""
    leaves = [t for t in tensors if t.requires_grad and t.dtype.is_floating_point]
    torch.manual_seed(1)
    outs = _outputs(fn(*tensors))
    if diff is None:
        diff = [i for i, o in enumerate(outs) if o.requires_grad and o.dtype.is_floating_point]
    torch.manual_seed(2)
    weights = [torch.randn_like(outs[i]) for i in diff]
    grads = _grads([outs[i] for i in diff], weights, leaves) if leaves and diff else []
    return (outs, grads, tensors), diff


def _check(op, sample, cache):
    """"checked", or why the sample was not compared."""
    call = keyword_call(torch_map.TORCH_MAP[op.op], sample)
    if call is None or not call[1]:
        return "unbound"
    fn, tensors = _tensor_fn(op, *call)
    try:
        expected, diff = _run(fn, _copies(tensors))
    except Exception:
        return "eager refuses"  # torch names this argument otherwise, or refuses the sample
    try:
        got, _ = _run(jitcore.jit(fn, cache=cache), _copies(tensors), diff)
    except DataDependentError:
        return "data dependent"
    for what, e, a in zip(("outputs", "gradients", "inputs after the call"), expected, got):
        assert len(a) == len(e), f"{len(a)} {what}, eager gives {len(e)}"
        for k, (x, y) in enumerate(zip(e, a)):
            assert y.shape == x.shape and y.dtype == x.dtype, f"{what} {k}: {y.shape} {y.dtype} vs {x.shape} {x.dtype}"
            torch.testing.assert_close(y, x, atol=1e-4, rtol=1e-4, equal_nan=True,
                                       msg=lambda m, k=k, w=what: f"{w} {k}: {m}")
    return "checked"


@pytest.mark.parametrize("op", OPS, ids=_id)
def test_keyword_arguments_match_eager(op):
    torch.manual_seed(0)
    try:
        samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd), 2))
    except Exception as e:
        pytest.skip(f"sample_inputs failed: {type(e).__name__}: {e}")
    for i, sample in enumerate(samples):
        try:
            _check(op, sample, "constant values")
        except Exception as e:
            raise AssertionError(f"{_id(op)} sample {i} ({sample}): {type(e).__name__}: {e}") from e
