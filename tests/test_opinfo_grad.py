"""Gradients against eager over PyTorch's OpInfo database: every OpInfo that supports autograd on float32 (ops our
table maps, and the rest, which run as opaque torch ops) is differentiated under jitcore.jit and under eager through
a random-weighted sum of its differentiable outputs. Values and NaN positions must match within OpInfo's own float32
tolerances. Ops with points where eager picks a subgradient (norms and std at 0, activations at their kinks) also get
samples filled with those points. The CI part takes the first samples of each op; `-m slow` sweeps every sample.
Every op not compared is named below with the reason.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import jitcore
from jitcore import compat
from jitcore.errors import DataDependentError, MetaError, UnsupportedError
from tests.test_opinfo import SKIP, XFAIL, _call, _id, _outputs, common

device_type = compat.opinfo_device_type()  # (tests.test_opinfo skipped this module already without expecttest)

GRAD_OPS = [op for op in common.op_db if op.supports_autograd and op.name not in SKIP
            and torch.float32 in op.supported_dtypes("cpu")]
CI_SAMPLES = 2
# torch.testing's float32 defaults, which OpInfo tests use unless an op's decorators override them
DEFAULT_TOL = (1e-5, 1.3e-6)

# ops whose gradient cannot match eager's: jitcore refuses (UnsupportedError naming the op) when a gradient flows
# through them. OpInfo name -> why. (None today: every mapped op's gradient matches.)
REFUSED: dict[str, str] = {}
# ops jitcore refuses loudly, on every path (not a gradient mismatch): OpInfo name -> (the error, why)
LOUD = {
    **dict.fromkeys(("to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce"),
                    (UnsupportedError, "sparse tensors: an opaque op without a meta kernel is learnt from a run on "
                                       "real values, which jitcore does for strided tensors only")),
    **dict.fromkeys(("_native_batch_norm_legit", "_batch_norm_with_update"),
                    (RuntimeError, "opaque op that writes its running stats: the backward recomputes it after the "
                                   "write-back, and torch's version counter refuses (jitcore/ops/opaque.py)")),
    **dict.fromkeys(("nn.functional.pad.reflect", "nn.functional.pad.replicate", "nn.functional.pad.circular"),
                    (MetaError, "negative padding (cropping) only in constant mode (the forward sweep's XFAIL too)")),
    "repeat_interleave": (UnsupportedError, "repeats given as a tensor: the output size depends on its values"),
    "nn.functional.batch_norm": (MetaError, "an empty 1-D input, which eager accepts, is refused"),
    "gather": (MetaError, "an empty index of another rank than input, which eager accepts, is refused"),
    "tensordot": (MetaError, "contracting a size-1 dim with a larger one, which eager broadcasts, is refused"),
    **dict.fromkeys(("masked.mean", "masked.var", "masked.std"),
                    (MetaError, "torch.masked's Python code hands div a real tensor it made while "
                                               "tracing (interpreter: a tensor constant not turned into a proxy)")),
}
# samples whose eager and jitted forward draw different random numbers: the gradients are not comparable
RANDOM = {
    "nn.functional.multi_head_attention_forward": "dropout_p > 0 in training, and OpInfo's op reseeds the generator "
                                                  "(wrapper_set_seed: torch code run natively while tracing)",
    "nn.functional.fractional_max_pool3d": "draws random pooling regions (forward differs from eager's)",
    "nn.functional.fractional_max_pool2d": "draws random pooling regions (some samples' forward differs from eager's)",
    "svd_lowrank": "projects on random matrices it draws itself",
}
# ops with points where eager's gradient is a chosen subgradient (a norm or std at 0, an activation at its bounds):
# each of their samples is also run with its input filled by cycling through each tuple of values
_ZERO_CONST = ((0.0,), (1.5,))
EDGES = dict.fromkeys((
    "abs", "sqrt", "std", "var", "std_mean", "var_mean", "norm", "linalg.norm", "linalg.vector_norm",
    "linalg.matrix_norm", "nn.functional.normalize", "dist", "cdist", "nn.functional.pdist", "renorm",
    "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.instance_norm", "nn.functional.batch_norm",
    "nn.functional.rms_norm", "nn.functional.pairwise_distance", "nn.functional.cosine_similarity", "max", "min",
    "amax", "amin", "sgn", "sign", "nn.functional.l1_loss", "nn.functional.mse_loss", "nn.functional.smooth_l1_loss",
    "nn.functional.huber_loss", "pow", "float_power", "rsqrt", "hypot", "logsumexp", "cumprod", "prod",
    "linalg.multi_dot", "nn.functional.embedding_bag", "nextafter", "atan2", "copysign", "fmax", "fmin", "maximum",
    "minimum", "xlogy", "special.xlog1py", "nn.functional.kl_div", "mean", "sum", "median", "nanmedian", "kthvalue",
    "sort", "topk", "where", "masked_fill", "frexp", "ldexp", "nn.functional.softplus",
    "nn.functional.elu"), _ZERO_CONST)
EDGES.update({  # activations and clamps at their kinks (and on both sides)
    "nn.functional.relu": ((0.0, 1.0, -1.0),), "nn.functional.relu6": ((0.0, 6.0, 3.0, -1.0, 7.0),),
    "nn.functional.hardtanh": ((-1.0, 1.0, 0.0, -2.0, 2.0),), "nn.functional.hardsigmoid": ((-3.0, 3.0, 0.0, 4.0),),
    "nn.functional.hardswish": ((-3.0, 3.0, 0.0, 4.0, -4.0),), "nn.functional.leaky_relu": ((0.0, 1.0, -1.0),),
    "nn.functional.hardshrink": ((0.5, -0.5, 0.0, 1.0),), "nn.functional.softshrink": ((0.5, -0.5, 0.0, 1.0),),
    "nn.functional.celu": ((0.0, 1.0, -1.0),), "nn.functional.selu": ((0.0, 1.0, -1.0),),
    "nn.functional.threshold": ((0.0, 1.0, -1.0),), "nn.functional.prelu": ((0.0, 1.0, -1.0),),
    "clamp": ((0.0, 1.0, -1.0, 0.5, -0.5),), "clamp_min": ((0.0, 1.0, -1.0),), "clamp_max": ((0.0, 1.0, -1.0),),
    "nn.functional.logsigmoid": ((0.0, 30.0, -30.0),), "nn.functional.mish": ((0.0, 30.0, -30.0),),
    "nn.functional.silu": ((0.0,),), "nn.functional.gelu": ((0.0,),), "round": ((0.5, 1.5),), "frac": ((1.0, 0.0),),
    "floor": ((1.0,),), "ceil": ((1.0,),), "trunc": ((1.0,),), "fmod": ((0.0, 2.0),), "remainder": ((0.0, 2.0),),
})


def _tolerance(op):
    """(atol, rtol) for float32: torch.testing's defaults, raised to the largest float32 toleranceOverride the OpInfo
    declares for any of its tests."""
    atol, rtol = DEFAULT_TOL
    for info in op.decorators:
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, device_type.toleranceOverride) and torch.float32 in dec.d:
                atol, rtol = max(atol, dec.d[torch.float32].atol), max(rtol, dec.d[torch.float32].rtol)
    return atol, rtol


def _grad_samples(op, limit):
    try:
        samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=True), limit))
    except Exception as e:
        pytest.skip(f"sample_inputs failed: {type(e).__name__}: {e}")
    out = [(f"sample {i}", s) for i, s in enumerate(samples)]
    for values in EDGES.get(op.name, ()):
        out += [(f"sample {i} at {values}", _filled(s, values)) for i, s in enumerate(samples)]
    return out


def _filled(sample, values):
    """The sample with its input tensor filled by cycling through `values` (a leaf that still requires grad)."""
    inp = sample.input
    if not isinstance(inp, torch.Tensor) or not inp.dtype.is_floating_point:
        return sample
    cycle = torch.tensor(values, dtype=inp.dtype).repeat(inp.numel() // len(values) + 1)[:inp.numel()]
    new = cycle.reshape(inp.shape).requires_grad_(inp.requires_grad)
    return type(sample)(new, args=sample.args, kwargs=sample.kwargs)


def _diff_outputs(out):
    return [(i, o) for i, o in enumerate(_outputs(out)) if o.requires_grad and o.dtype.is_floating_point]


def _grads(outs, weights, leaves):
    """d(sum_i <w_i, out_i>)/d leaves, zeros where a leaf is not reached."""
    pairs = [(o, w) for o, w in zip(outs, weights) if o is not None and o.requires_grad]
    got = torch.autograd.grad([o for o, _ in pairs], leaves, [w for _, w in pairs], allow_unused=True) if pairs \
        else [None] * len(leaves)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(got, leaves)]


def _check_grad(op, sample, tol):
    if sample.kwargs.get("dropout_p", 0) > 0:  # sdpa: OpInfo's op reseeds the generator inside (wrapper_set_seed,
        return  # torch code that runs natively while tracing); tests/test_random_stream.py compares sdpa's dropout
    fn, args = _call(op, sample)
    leaves = [a for a in args if a.requires_grad and a.dtype.is_floating_point]
    try:
        torch.manual_seed(1)  # ops that draw random numbers draw the same ones in both runs
        expected = _diff_outputs(fn(*args))
        weights = [torch.randn_like(o) for _, o in expected]
        want = _grads([o for _, o in expected], weights, leaves)
    except Exception:
        return  # eager refuses this sample (or its gradient: running stats that require grad)
    if not leaves or not expected:
        return
    try:
        torch.manual_seed(1)
        got_all = _outputs(jitcore.jit(fn, cache="no caching")(*args))
    except DataDependentError:
        return  # documented: output shapes that depend on values need the data
    got_by_index = dict(_diff_outputs(got_all))
    got = _grads([got_by_index.get(i) for i, _ in expected], weights, leaves)
    for k, (w, g) in enumerate(zip(want, got)):
        torch.testing.assert_close(g, w, atol=tol[0], rtol=tol[1], equal_nan=True,
                                   msg=lambda m, k=k: f"gradient of tensor argument {k}: {m}")


def _run(op, limit):
    name = _id(op)
    if name in XFAIL:
        pytest.xfail(XFAIL[name])
    if name in RANDOM:
        pytest.skip(RANDOM[name])
    torch.manual_seed(0)
    tol = _tolerance(op)
    for where, sample in _grad_samples(op, limit):
        if name in REFUSED:
            with pytest.raises(UnsupportedError, match=op.name):
                _check_grad(op, sample, tol)
            continue
        try:
            _check_grad(op, sample, tol)
        except LOUD.get(name, ((),))[0]:
            continue  # refused loudly, for the reason LOUD names
        except Exception as e:
            raise AssertionError(f"{name} {where} ({sample}): {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("op", GRAD_OPS, ids=_id)
def test_opinfo_grad_matches_eager(op):
    _run(op, CI_SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("op", GRAD_OPS, ids=_id)
def test_opinfo_grad_matches_eager_all_samples(op):
    _run(op, None)
