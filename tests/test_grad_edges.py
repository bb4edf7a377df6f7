"""Gradients at the points where eager picks a subgradient (std and norms at 0, max/min at ties, xlogy at x = 0,
activations at their kinks), against eager, over dims, keepdim, corrections, orders and both cache modes. Inputs mix
rows at the edge point with ordinary rows, so one call checks both branches of each rule.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore import compat

CACHES = ("constant values", "symbolic values")


def _edge_input(shape, fill=0.0):
    """A random tensor whose first half along dim 0 is `fill` (a constant row: std 0; at 0: norm 0)."""
    x = torch.randn(shape)
    x[: shape[0] // 2 or 1] = fill
    return x.requires_grad_()


def _check(fn, *args, cache="constant values"):
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def grads(f):
        outs = f(*args)
        outs = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if o.requires_grad]
        torch.manual_seed(0)
        ws = [torch.randn_like(o) for o in outs]
        return torch.autograd.grad(outs, leaves, ws, allow_unused=True)

    want, got = grads(fn), grads(jitcore.jit(fn, cache=cache))
    for w, g in zip(want, got):
        w = torch.zeros_like(leaves[0]) if w is None else w
        g = torch.zeros_like(w) if g is None else g
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5, equal_nan=True)


STD_CASES = list(itertools.product(("std", "std_mean", "var", "var_mean"), (None, 0, -1, (0, 1)), (False, True),
                                   (0, 1, 2)))


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("op,dim,keepdim,correction", STD_CASES)
def test_std_var_at_constant_rows(op, dim, keepdim, correction, cache):
    f = getattr(torch, op)
    x = _edge_input((4, 3, 5), fill=1.5)
    _check(lambda x: f(x, dim=dim, keepdim=keepdim, correction=correction), x, cache=cache)


NORM_CASES = list(itertools.product((2, 0.5, 1.5, 3, 1, float("inf"), -float("inf"), 0), (None, -1, (0, 2)),
                                    (False, True)))


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("ord,dim,keepdim", NORM_CASES)
def test_vector_norm_at_zero(ord, dim, keepdim, cache):
    x = _edge_input((4, 3, 5))
    _check(lambda x: torch.linalg.vector_norm(x, ord, dim, keepdim), x, cache=cache)
    if dim is not None and ord not in (float("inf"), -float("inf")):
        _check(lambda x: torch.norm(x, ord, dim, keepdim), x, cache=cache)


@pytest.mark.parametrize("fn", [
    lambda x: torch.linalg.norm(x), lambda x: torch.linalg.matrix_norm(x), lambda x: x.norm(),
    lambda x: torch.norm(x, "fro", dim=(0, 1)), lambda x: F.normalize(x, dim=-1), lambda x: F.normalize(x, p=3, dim=0),
    lambda x: F.cosine_similarity(x, torch.ones_like(x), dim=-1), lambda x: F.pairwise_distance(x, x.detach()),
    lambda x: torch.cdist(x, x.detach() + 1), lambda x: torch.dist(x, torch.zeros_like(x)),
], ids=lambda f: "")
def test_norm_composites_at_zero(fn):
    _check(fn, _edge_input((4, 5)))


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("op,dim,keepdim", list(itertools.product(("max", "min"), (0, 1, -1), (False, True))))
def test_max_min_along_dim_at_ties(op, dim, keepdim, cache):
    x = torch.randint(0, 3, (4, 6)).float().requires_grad_()  # many ties
    f = getattr(torch, op)
    _check(lambda x: f(x, dim, keepdim)[0], x, cache=cache)
    _check(lambda x: getattr(x, op)(dim=dim, keepdim=keepdim).values, x, cache=cache)
    _check(lambda x: f(x), x, cache=cache)  # full reduction: spread evenly over ties, as eager does


XLOG_CASES = list(itertools.product((torch.xlogy, torch.special.xlog1py), ("x", "y", "both"),
                                    ("tensor", "scalar_y", "broadcast")))


@pytest.mark.parametrize("fn,grad_of,form", XLOG_CASES)
def test_xlogy_at_zero(fn, grad_of, form):
    x = torch.tensor([0.0, 0.0, 0.0, 1.5, 2.0, 0.0]).requires_grad_(grad_of in ("x", "both"))
    y = torch.tensor([0.0, -1.0, 2.0, 3.0, -2.0, float("nan")]).requires_grad_(grad_of in ("y", "both"))
    if form == "scalar_y":
        if grad_of == "y":
            pytest.skip("a Python number has no gradient")
        _check(lambda x: fn(x, 0.0) + fn(x, -1.0) + fn(x, 2.0), x)
        return
    if form == "broadcast":
        x = x.detach().reshape(6, 1).requires_grad_(x.requires_grad)
    if not x.requires_grad:
        _check(lambda y: fn(x, y), y)
    elif not y.requires_grad:
        _check(lambda x: fn(x, y), x)
    else:
        _check(lambda x, y: fn(x, y), x, y)


KINKS = {
    F.hardtanh: (-1.0, 1.0), F.relu6: (0.0, 6.0), F.hardsigmoid: (-3.0, 3.0), F.hardswish: (-3.0, 3.0),
    F.relu: (0.0,), F.logsigmoid: (0.0, 30.0, -30.0), F.leaky_relu: (0.0,), F.elu: (0.0,), F.celu: (0.0,),
    F.selu: (0.0,), F.hardshrink: (0.5, -0.5), F.softshrink: (0.5, -0.5), torch.abs: (0.0,), torch.sqrt: (0.0,),
    lambda x: torch.clamp(x, -1.0, 1.0): (-1.0, 1.0), lambda x: F.hardtanh(x, -2.0, 0.5): (-2.0, 0.5),
    **({lambda x: torch.nextafter(x, torch.zeros_like(x)): (0.0, 1.0)} if compat.eager_has("nextafter gradient")
       else {}),
}


@pytest.mark.parametrize("fn", list(KINKS), ids=lambda f: getattr(f, "__name__", "lambda"))
def test_activations_at_kinks(fn):
    points = torch.tensor(KINKS[fn])
    x = torch.cat([points, points + 1e-3, points - 1e-3, torch.randn(5)]).requires_grad_()
    _check(fn, x)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
def test_abs_of_complex_backward(mode):
    """torch.abs of a complex tensor requiring grad: its gradient is g * z / |z| (sgn), as torch's (it raised: the
    rule used sign, which complex tensors lack)."""
    def f(z):
        return (torch.abs(z) * torch.arange(4.0)).sum()

    jf = jitcore.jit(f, cache=mode)
    for n in (4, 4):
        z = torch.randn(n, dtype=torch.complex64)
        z[1] = 0  # (sgn(0) is 0)
        z.requires_grad_()
        z2 = z.detach().clone().requires_grad_()
        f(z).backward()
        jf(z2).backward()
        torch.testing.assert_close(z2.grad, z.grad)


# a * b ** c over bases and exponents at 0 (a positive, negative and zero exponent each meet a zero base), and ops
# whose gradient is zero everywhere: outputs require grad as eager's do and gradients equal eager's (NaN included)
ZERO_EXPONENT_CASES = {
    "tensor_pow_zero": lambda x, y: x ** 0,
    "tensor_pow_zero_float": lambda x, y: torch.pow(x, 0.0) * y,
    "tensor_pow_tensor": lambda x, y: x ** y,
    "tensor_pow_zeroed_tensor": lambda x, y: torch.pow(x, y * 0),
    "tensor_pow_negative": lambda x, y: x ** (-y.abs() - 1),
    "number_pow_tensor": lambda x, y: 2.0 ** y,
    "zero_pow_tensor": lambda x, y: 0.0 ** y,
    "norm_order_zero": lambda x, y: torch.linalg.vector_norm(x, 0) * y,
    "norm_order_zero_dim": lambda x, y: x.norm(0, dim=0),
    "cdist_order_zero": lambda x, y: torch.cdist(x[None, :, None], y[None, :, None], 0.0),
    "copysign_sign_operand": lambda x, y: torch.copysign(x, y),
}


@pytest.mark.parametrize("cache", [*CACHES, "no caching"])
@pytest.mark.parametrize("name", sorted(ZERO_EXPONENT_CASES))
def test_zero_exponents_and_zero_gradients(name, cache):
    fn = ZERO_EXPONENT_CASES[name]
    x = torch.tensor([0.0, 2.0, -1.5, 0.0, 0.0]).requires_grad_()
    y = torch.tensor([0.0, 1.5, 2.0, -1.0, 3.0]).requires_grad_()
    want, got = fn(x, y), jitcore.jit(fn, cache=cache)(x, y)
    assert got.requires_grad == want.requires_grad
    torch.testing.assert_close(got, want, equal_nan=True)
    _check(fn, x, y, cache=cache)
