"""Arguments as torch binds them: every OpInfo whose torch callable our ops table maps, called with each argument
that torch accepts by name given as a keyword (`F.linear(x, weight=w, bias=b)`), runs forward and backward like
eager. A line records each required argument given by keyword at its position (jitcore/ir/symbol.py
`Symbol.canonical`) and VJP rules read optional ones through the op's binding (transforms/vjp_helpers.py
`bound_arguments`), so a keyword argument is the same argument as a positional one.
"""
from __future__ import annotations

import inspect
import itertools

import pytest
import torch
from torch.utils import _pytree as pytree

import jitcore
from jitcore import compat
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


# -- the binding itself ------------------------------------------------------------------------------------------------
F = torch.nn.functional
KEYWORD_CALLS = {  # name -> (fn called with keywords, input sizes for a batch of n)
    "linear": (lambda x, w, b: F.linear(x, weight=w, bias=b), lambda n: [(n, 4), (5, 4), (5,)]),
    "matmul": (lambda x, w: torch.matmul(input=x, other=w), lambda n: [(n, 3, 4), (4, 2)]),
    "softmax": (lambda x: F.softmax(input=x, dim=-1), lambda n: [(n, 5)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(input=x, normalized_shape=(4,), weight=w, bias=b, eps=1e-5),
                   lambda n: [(n, 4), (4,), (4,)]),
    "split": (lambda x: torch.split(x, split_size_or_sections=2, dim=1)[1] * 2, lambda n: [(n, 6)]),
    "conv2d": (lambda x, w, b: F.conv2d(input=x, weight=w, bias=b, padding=1), lambda n: [(n, 2, 5, 5), (3, 2, 3, 3),
                                                                                          (3,)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=True, scale=0.3),
             lambda n: [(n, 2, 4, 8)] * 3),
    "gelu": (lambda x: F.gelu(input=x, approximate="tanh"), lambda n: [(n, 3)]),
    "silu": (lambda x: F.silu(input=x), lambda n: [(n, 3)]),
}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("name", list(KEYWORD_CALLS))
def test_keyword_calls_of_ops_with_rules_in_every_cache_mode(name, cache):
    fn, sizes = KEYWORD_CALLS[name]
    jfn = jitcore.jit(fn, cache=cache)
    for n in (2, 3, 2):  # a symbolic entry serves the other size
        tensors = [torch.randn(s, requires_grad=True) for s in sizes(n)]
        (want, grads, _), diff = _run(fn, _copies(tensors))
        (got, got_grads, _), _ = _run(jfn, _copies(tensors), diff)
        for e, a in zip(want + grads, got + got_grads):
            torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)


def test_a_keyword_call_records_the_positional_line():
    """F.linear(input=x, weight=w) and F.linear(x, w) record the same line: required arguments at their positions
    (an optional one given by keyword stays a keyword: torch takes some only so)."""
    def kw(x, w, b):
        return F.linear(input=x, weight=w), F.linear(x, weight=w, bias=b)

    def pos(x, w, b):
        return F.linear(x, w), F.linear(x, w, bias=b)

    args = (torch.randn(2, 3), torch.randn(4, 3), torch.randn(4))
    lines = []
    for fn in (kw, pos):
        jfn = jitcore.jit(fn)
        jfn(*args)
        lines.append([ln.strip() for ln in str(jitcore.last_traces(jfn)[0]).splitlines() if "ltorch.linear" in ln])
    assert lines[0] == lines[1], lines
    assert [ln.split(" = ")[1].split("  #")[0] for ln in lines[0]] == ["ltorch.linear(t0, t1)",
                                                                      "ltorch.linear(t0, t1, bias=t2)"], lines


def _torch_keyword_only(fn) -> set | None:
    """Names torch takes only as keywords in every form of fn: from its Python signature, or its aten schemas."""
    try:
        params = inspect.signature(fn).parameters
        return {n for n, p in params.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}
    except (TypeError, ValueError):
        pass
    schemas = compat.schemas_of(f"aten::{getattr(fn, '__name__', '')}")
    if not schemas:
        return None
    flags: dict = {}
    for s in schemas:
        for a in s.arguments:
            flags.setdefault(a.name, []).append(a.kwarg_only)
    return {n for n, f in flags.items() if all(f)}


def test_ops_take_keyword_only_what_torch_takes_keyword_only():
    """An op takes by keyword only what torch takes by keyword only (F.gelu's approximate): eager's TypeError for
    `F.gelu(x, "tanh")`, and the binding rules read are torch's."""
    from jitcore.ops.registry import LTORCH

    wrong = []
    for sym in LTORCH.values():
        if sym.torch_fn is None or sym.fn is None or sym.signature is None:
            continue
        kw_only = _torch_keyword_only(sym.torch_fn)
        for p in (sym.signature.parameters.values() if kw_only else ()):
            if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name in kw_only:
                wrong.append(f"{sym.id}: {p.name}")
    assert not wrong, wrong


OVERLOADS = {  # torch calls whose keywords name another overload than the op's signature
    "max other": lambda x, y: torch.max(x, other=y),
    "min other": lambda x, y: torch.min(x, other=y),
    "tensor_split sections": lambda x, y: torch.tensor_split(x, sections=2, dim=1)[0] * y[:, :3],
    "hsplit sections": lambda x, y: torch.hsplit(x, sections=2)[1] + 1,
    "matrix_norm input": lambda x, y: torch.linalg.matrix_norm(input=x * y),
}


@pytest.mark.parametrize("name", list(OVERLOADS))
def test_keywords_of_another_torch_overload_run_like_eager(name):
    """torch.max(x, other=y): the op's signature names its second parameter dim, eager takes `other` (another
    overload); the call runs as torch's own callable (an opaque op), forward and backward, not a TypeError."""
    fn = OVERLOADS[name]
    tensors = [torch.randn(4, 6, requires_grad=True), torch.randn(4, 6, requires_grad=True)]
    (want, grads, _), diff = _run(fn, _copies(tensors))
    (got, got_grads, _), _ = _run(jitcore.jit(fn), _copies(tensors), diff)
    for e, a in zip(want + grads, got + got_grads):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
