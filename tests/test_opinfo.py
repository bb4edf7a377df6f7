"""PyTorch's OpInfo database as a test source: every OpInfo whose torch callable our ops table covers
(torch_map.TORCH_MAP) runs under jitcore.jit on its float32 samples (forward; gradients: test_opinfo_grad.py).
The CI part takes the first samples of each op; `-m slow` sweeps every sample. Known failures are listed with a reason.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils import _pytree as pytree

import jitcore
from jitcore import compat
from jitcore.errors import DataDependentError
from jitcore.ops import torch_map

try:
    common = compat.opinfo_module()
except ImportError:
    pytest.skip("needs expecttest", allow_module_level=True)

# op name (OpInfo.name, or name.variant) -> why it does not match eager here
XFAIL = {
    "linspace.tensor_overload": "start/end given as 0-d tensors: the decomposition needs Python numbers",
    "logspace.tensor_overload": "start/end given as 0-d tensors: the decomposition needs Python numbers",
}
# ops whose outputs are not a function of the inputs alone (random), or that sample data-dependent shapes
SKIP = {"bernoulli", "normal", "rand_like", "randn_like", "randint_like", "empty_like", "empty", "new_empty",
        "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout", "nn.functional.rrelu", "uniform", "multinomial", "cauchy",
        "exponential", "geometric", "log_normal", "empty_strided", "empty_permuted", "randint", "randn", "rand"}
CI_SAMPLES = 2


def _covered():
    ops = []
    for op in common.op_db:
        if op.op in torch_map.TORCH_MAP and torch.float32 in op.supported_dtypes("cpu") and op.name not in SKIP:
            ops.append(op)
    return ops


OPS = _covered()


def _id(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _samples(op, limit=None, requires_grad=False):
    try:
        return list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad), limit))
    except Exception as e:
        pytest.skip(f"sample_inputs failed: {type(e).__name__}: {e}")


def _call(op, sample):
    """(fn, tensors): every tensor of the sample (inside lists, tuples and kwargs too) is a separate argument of fn,
    which puts them back in place and calls the op."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*tensors):
        filled = list(leaves)
        for i, t in zip(where, tensors):
            filled[i] = t
        inp, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op.op(inp, *args, **kwargs)

    return fn, tuple(leaves[i] for i in where)


def _outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outputs(o)]
    return []


def _check_forward(op, sample):
    fn, args = _call(op, sample)
    try:
        expected = fn(*args)
    except Exception:
        return  # eager refuses this sample (error inputs are tested elsewhere)
    try:
        got = jitcore.jit(fn, cache="no caching")(*args)
    except DataDependentError:
        return  # documented: ops whose output shape depends on values need the data (e.g. nonzero)
    exp, act = _outputs(expected), _outputs(got)
    assert len(exp) == len(act), f"{len(act)} outputs, eager gives {len(exp)}"
    for e, a in zip(exp, act):
        assert a.shape == e.shape and a.dtype == e.dtype, f"{a.shape} {a.dtype} vs eager {e.shape} {e.dtype}"
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4, equal_nan=True)


def _run_forward(op, limit):
    samples = _samples(op, limit)
    for i, sample in enumerate(samples):
        try:
            _check_forward(op, sample)
        except Exception as e:
            raise AssertionError(f"{_id(op)} sample {i} ({sample}): {type(e).__name__}: {e}") from e


def _maybe_xfail(op):
    reason = XFAIL.get(_id(op))
    if reason is not None:
        pytest.xfail(reason)


@pytest.mark.parametrize("op", OPS, ids=_id)
def test_opinfo_forward(op):
    _maybe_xfail(op)
    _run_forward(op, CI_SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS, ids=_id)
def test_opinfo_forward_all_samples(op):
    _maybe_xfail(op)
    _run_forward(op, None)
