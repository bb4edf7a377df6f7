"""Tests: every row of the VJP table (transforms/vjp_rules*.py) against torch.autograd. Each sample is a plain torch
function run jitted and eagerly on the same inputs; values and the gradients of random cotangents must agree.
Prim rows are checked with the composite rows switched off, so the walk reaches the prim; each sample must make
the op it stands for appear in the traced program.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore import compat
from jitcore.errors import UnsupportedError
from transforms.vjp_rules import VJP_RULES

G = torch.Generator().manual_seed(0)


def t(*shape, low=-2.0, high=2.0, dtype=torch.float64, grad=True):
    x = (torch.rand(shape, generator=G, dtype=torch.float64) * (high - low) + low).to(dtype)
    return x.requires_grad_(grad)


def idx(high, *shape):
    return torch.randint(0, high, shape, generator=G)


def _clone(x):
    return x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in _tensors(x)]
    return []


def _ops_in(bsyms) -> set:
    ids = set()
    for b in bsyms:
        ids.add(b.sym.id)
        ids |= _ops_in(b.subsymbols)
    return ids


def grads_match(fn, *args, rtol=1e-7, atol=1e-7, cache="constant values", op_id=None):
    """fn jitted vs eager on copies of args: outputs, then grads of random cotangents w.r.t. args needing grad."""
    jargs, eargs = [_clone(a) for a in args], [_clone(a) for a in args]
    jfn = jitcore.jit(fn, cache=cache)
    jout, eout = _tensors(jfn(*jargs)), _tensors(fn(*eargs))
    assert len(jout) == len(eout)
    for j, e in zip(jout, eout):
        assert j.dtype == e.dtype and j.shape == e.shape
        torch.testing.assert_close(j, e, rtol=rtol, atol=atol, equal_nan=True)
    if op_id is not None:
        assert op_id in _ops_in(jitcore.last_traces(jfn)[0].bound_symbols), f"{op_id} is not in the traced program"
    pairs = [(j, e) for j, e in zip(jout, eout) if e.requires_grad]
    assert all(j.requires_grad for j, _ in pairs)
    if not pairs:
        return jfn
    cts = [torch.randn(e.shape, generator=G, dtype=torch.float64).to(e.dtype) for _, e in pairs]
    jin = [a for a in jargs if isinstance(a, torch.Tensor) and a.requires_grad]
    ein = [a for a in eargs if isinstance(a, torch.Tensor) and a.requires_grad]
    jg = torch.autograd.grad([j for j, _ in pairs], jin, cts, allow_unused=True)
    eg = torch.autograd.grad([e for _, e in pairs], ein, cts, allow_unused=True)
    for a, gj, ge in zip(ein, jg, eg):
        gj = torch.zeros_like(a) if gj is None else gj
        ge = torch.zeros_like(a) if ge is None else ge
        assert gj.dtype == ge.dtype and gj.shape == ge.shape
        torch.testing.assert_close(gj, ge, rtol=rtol, atol=atol, equal_nan=True)
    return jfn


# -- samples: op id -> [(torch function, args factory)] -------------------------------------------------------------
POS = {"low": 0.5, "high": 2.0}
UNIT = {"low": -0.9, "high": 0.9}
UNARY_DOMAIN = {"log": POS, "log1p": POS, "log2": POS, "log10": POS, "sqrt": POS, "rsqrt": POS, "reciprocal": POS,
                "asin": UNIT, "acos": UNIT, "atanh": UNIT, "erfinv": UNIT, "acosh": {"low": 1.5, "high": 3.0},
                "lgamma": POS, "digamma": POS}
UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "reciprocal", "sigmoid", "erf",
         "erfc", "erfinv", "lgamma", "digamma", "sign", "floor", "ceil", "round", "trunc"]
SAMPLES: dict = {}
for _name in UNARY:
    _dom = UNARY_DOMAIN.get(_name, {})
    SAMPLES[f"prims.{_name}"] = [(getattr(torch, _name), lambda d=_dom: (t(3, 4, **d),)),
                                 (getattr(torch, _name), lambda d=_dom: (t(**d),))]

BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "atan2": torch.atan2,
          "remainder": torch.remainder, "fmod": torch.fmod, "maximum": torch.maximum, "minimum": torch.minimum,
          "copysign": torch.copysign}
for _name, _fn in BINARY.items():
    SAMPLES[f"prims.{_name}"] = [(_fn, lambda: (t(3, 4, low=0.5), t(4, low=0.5))),
                                 (_fn, lambda: (t(3, 1, low=0.5), t(1, 4, low=0.5, grad=False))),
                                 (_fn, lambda: (t(2, 3, low=0.5), t(low=0.5)))]
SAMPLES["prims.pow"] = [(torch.pow, lambda: (t(3, 4, **POS), t(4))),
                        (torch.pow, lambda: (t(3, 4, **POS), t(grad=False))),
                        (lambda a: a ** 3, lambda: (t(5),)), (lambda b: 2.0 ** b, lambda: (t(5),))]
SAMPLES["prims.where"] = [(lambda c, a, b: torch.where(c > 0, a, b), lambda: (t(3, 4, grad=False), t(3, 1), t(4))),
                          (lambda a: torch.where(a > 0, a, 0.0), lambda: (t(5),))]
SAMPLES["prims.convert_element_type"] = [(lambda a: a.float() * 2, lambda: (t(3, 4),)),
                                         (lambda a: a.to(torch.bfloat16).double(), lambda: (t(3),))]
SAMPLES["prims.broadcast_in_dim"] = [(lambda a: a.expand(3, 2, 4), lambda: (t(2, 1),)),
                                     (lambda a, b: a + b, lambda: (t(3, 1, 4), t(2, 1)))]
SAMPLES["prims.reshape"] = [(lambda a: a.reshape(6, 2), lambda: (t(3, 4),)),
                            (lambda a: a.view(-1), lambda: (t(2, 3),))]
SAMPLES["prims.squeeze"] = [(lambda a: a.squeeze(1), lambda: (t(3, 1, 4),)),
                            (lambda a: a.squeeze(), lambda: (t(1, 2, 1),))]
SAMPLES["prims.transpose"] = [(lambda a: a.permute(2, 0, 1), lambda: (t(2, 3, 4),)),
                              (lambda a: a.t(), lambda: (t(3, 4),))]
SAMPLES["prims.flip"] = [(lambda a: torch.flip(a, (0, 2)), lambda: (t(2, 3, 4),))]
SAMPLES["prims.slice"] = [(lambda a: a[1:3, ::2], lambda: (t(4, 5),)), (lambda a: a[..., -2:], lambda: (t(2, 3),)),
                          (lambda a: a[2:2], lambda: (t(4),))]
def _as_strided_read(a):
    b = a * 1  # (a tensor the program owns: as_strided_ over it is prims.as_strided)
    b.as_strided_((2, 3), (1, 2), 1)
    return b * 2


def _as_strided_overlapping_read(a):
    b = a * 1
    b.as_strided_((3, 3), (1, 1))  # places repeat: their gradients add up
    return b.exp()


def _as_strided_old_view_read(a):
    b = a * 1
    v = b[1:]  # (made before: read after, it is prims.as_strided with grad_within b's new view)
    b.as_strided_((2, 2), (4, 1), 1)
    return v * 2


SAMPLES["prims.as_strided"] = [(_as_strided_read, lambda: (t(3, 4),)), (_as_strided_overlapping_read, lambda: (t(6),)),
                               (_as_strided_old_view_read, lambda: (t(3, 4),))]

SAMPLES["prims.cat"] = [(lambda a, b: torch.cat([a, b, a], 1), lambda: (t(2, 3), t(2, 1)))]
SAMPLES["prims.pad"] = [(lambda a: F.pad(a, (1, 2, 0, 1)), lambda: (t(2, 3),)),
                        (lambda a: F.pad(a, (-1, 1)), lambda: (t(2, 4),))]
SAMPLES["prims.unfold"] = [(lambda a: a.unfold(1, 2, 1), lambda: (t(2, 5),))]
SAMPLES["prims.sum"] = [(lambda a: a.sum(1), lambda: (t(3, 4),)), (lambda a: a.sum(), lambda: (t(2, 3),)),
                        (lambda a: a.mean((0, 2), keepdim=True), lambda: (t(2, 3, 4),))]
SAMPLES["prims.amax"] = [(lambda a: a.amax(1), lambda: (t(3, 4),)),
                         (lambda a: torch.max(a, 0).values, lambda: (t(3, 4),))]
SAMPLES["prims.amin"] = [(lambda a: a.amin(0), lambda: (t(3, 4),)), (lambda a: torch.min(a), lambda: (t(5),))]
SAMPLES["prims.var"] = [(lambda a: a.var(1), lambda: (t(3, 4),)),
                        (lambda a: a.std(0, correction=0), lambda: (t(3, 4),))]
SAMPLES["prims.var_mean"] = [(lambda a: torch.var_mean(a, 1), lambda: (t(3, 4),)),
                             (lambda a: torch.var_mean(a, 1)[1], lambda: (t(3, 4),)),
                             (lambda a: torch.var_mean(a, 0)[0], lambda: (t(3, 4),))]
SAMPLES["prims.cumsum"] = [(lambda a: torch.cumsum(a, 1), lambda: (t(3, 4),))]
SAMPLES["prims.cumprod"] = [(lambda a: torch.cumprod(a, 0), lambda: (t(3, 4),))]
SAMPLES["prims.prod"] = [(lambda a: torch.prod(a, 1), lambda: (t(3, 4),)), (lambda a: a.prod(), lambda: (t(4),))]
SAMPLES["prims.topk"] = [(lambda a: torch.topk(a, 2, dim=1), lambda: (t(3, 5),)),
                         (lambda a: torch.topk(a, 2, dim=0).values, lambda: (t(3, 5),))]
SAMPLES["prims.sort"] = [(lambda a: torch.sort(a, 1, descending=True), lambda: (t(3, 5),)),
                         (lambda a: torch.sort(a, 0)[0], lambda: (t(3, 5),))]
SAMPLES["prims.take"] = [(lambda a, i: torch.index_select(a, 0, i), lambda: (t(4, 3), idx(4, 6)))]
SAMPLES["prims.take_along_axis"] = [(lambda a, i: torch.gather(a, 1, i), lambda: (t(3, 4), idx(4, 3, 5)))]
SAMPLES["prims.scatter"] = [(lambda a, s: torch.scatter(a, 1, torch.tensor([[0, 2], [1, 3], [3, 0]]), s),
                             lambda: (t(3, 4), t(3, 2)))]
SAMPLES["prims.scatter_add"] = [(lambda a, i, s: torch.scatter_add(a, 1, i, s),
                                 lambda: (t(3, 4), idx(4, 3, 5), t(3, 5)))]
SAMPLES["prims.index_add"] = [(lambda a, i, s: torch.index_add(a, 0, i, s), lambda: (t(4, 3), idx(4, 5), t(5, 3)))]
SAMPLES["prims.index_put"] = [(lambda a, v: a.index_put((torch.tensor([0, 2]),), v), lambda: (t(4, 3), t(2, 3))),
                              (lambda a, v: a.index_put((torch.tensor([0, 0]),), v, accumulate=True),
                               lambda: (t(4, 3), t(2, 3)))]
SAMPLES["prims.stop_gradient"] = [(lambda a, b: a.detach() * b + a, lambda: (t(3), t(3)))]


class _Cube(torch.autograd.Function):  # a user's Function runs as an opaque op that may draw (its inputs laid out)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


# (its input laid out as eager's transposed one: jitcore's value after the copy_ is a's own, contiguous)
SAMPLES["prims.laid_out"] = [(lambda a: _Cube.apply(torch.zeros(4, 3, dtype=a.dtype).t().copy_(a * 2)) * a,
                              lambda: (t(3, 4),))]

SAMPLES["prims.embedding"] = [(F.embedding, lambda: (idx(5, 2, 3), t(5, 4)))]
SAMPLES["prims.convolution"] = [(F.conv2d, lambda: (t(2, 3, 5, 5), t(4, 3, 3, 3), t(4))),
                                (lambda x, w: F.conv1d(x, w, stride=2, padding=1), lambda: (t(2, 2, 7), t(3, 2, 3))),
                                (lambda x, w: F.conv_transpose2d(x, w, stride=2),
                                 lambda: (t(1, 2, 3, 3), t(2, 3, 2, 2)))]
SAMPLES["prims.linear"] = [(F.linear, lambda: (t(2, 3, 4), t(5, 4), t(5))), (F.linear, lambda: (t(4), t(5, 4)))]
_MATMUL_SHAPES = [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
                  ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3))]
SAMPLES["prims.matmul"] = [(torch.matmul, lambda a=a, b=b: (t(*a), t(*b))) for a, b in _MATMUL_SHAPES]
# -- composite rows
SAMPLES["ltorch.linear"] = SAMPLES["prims.linear"] + [(F.linear, lambda: (t(3, 4), t(5, 4, grad=False), t(5)))]
SAMPLES["ltorch.matmul"] = SAMPLES["prims.matmul"] + [(lambda a, b: a @ b, lambda: (t(3, 4), t(4, 2, grad=False)))]
SAMPLES["ltorch.mm"] = [(torch.mm, lambda: (t(3, 4), t(4, 2)))]
SAMPLES["ltorch.bmm"] = [(torch.bmm, lambda: (t(2, 3, 4), t(2, 4, 5)))]
SAMPLES["ltorch.softmax"] = [(lambda a: F.softmax(a, 1), lambda: (t(3, 4),)),
                             (lambda a: a.softmax(-1), lambda: (t(2, 3, 4),)),
                             (lambda a: F.softmax(a, 0, dtype=torch.float32), lambda: (t(3, 4),)),
                             (lambda a: F.softmax(a, 0), lambda: (t(),))]
SAMPLES["ltorch.log_softmax"] = [(lambda a: F.log_softmax(a, 1), lambda: (t(3, 4),)),
                                 (lambda a: torch.log_softmax(a, 0), lambda: (t(5),))]
SAMPLES["ltorch.gelu"] = [(F.gelu, lambda: (t(3, 4),)), (lambda a: F.gelu(a, approximate="tanh"), lambda: (t(6),))]
SAMPLES["ltorch.silu"] = [(F.silu, lambda: (t(3, 4),))]
SAMPLES["ltorch.tanh"] = [(torch.tanh, lambda: (t(3, 4),)), (lambda a: F.tanh(a) * a, lambda: (t(5),))]
SAMPLES["ltorch.sigmoid"] = [(torch.sigmoid, lambda: (t(3, 4),)), (lambda a: a.sigmoid() * a, lambda: (t(5),))]
SAMPLES["ltorch.batch_norm_train"] = [  # F.batch_norm in training mode with running stats records this op
    (lambda x, w, b: F.batch_norm(x, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), w, b, True),
     lambda: (t(4, 3, 2, 2), t(3), t(3))),
    (lambda x: F.batch_norm(x, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), None, None, True),
     lambda: (t(5, 3),))]
SAMPLES["ltorch.hardswish"] = [(F.hardswish, lambda: (t(3, 4, low=-4.0, high=4.0),))]
SAMPLES["ltorch.adaptive_avg_pool2d"] = [(lambda x: F.adaptive_avg_pool2d(x, 1) * x, lambda: (t(2, 3, 4, 5),)),
                                         (lambda x: F.adaptive_avg_pool2d(x, (1, 1)), lambda: (t(3, 4, 4),)),
                                         (lambda x: F.adaptive_avg_pool2d(x, 2), lambda: (t(2, 3, 5, 4),))]
SAMPLES["ltorch.hardsigmoid"] = [(F.hardsigmoid, lambda: (t(3, 4, low=-4.0, high=4.0),))]
SAMPLES["ltorch.relu"] = [(F.relu, lambda: (t(3, 4),)), (torch.relu, lambda: (t(5),))]
SAMPLES["ltorch.layer_norm"] = [(lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: (t(2, 3, 4), t(4), t(4))),
                                (lambda x: F.layer_norm(x, (3, 4)), lambda: (t(2, 3, 4),)),
                                (lambda x, w: F.layer_norm(x, [4], w, eps=1e-3), lambda: (t(3, 4, grad=False), t(4)))]
SAMPLES["ltorch.rms_norm"] = [(lambda x, w: F.rms_norm(x, (4,), w, 1e-6), lambda: (t(2, 3, 4), t(4))),
                              (lambda x: F.rms_norm(x, (3, 4)), lambda: (t(2, 3, 4),))]
_SDPA = F.scaled_dot_product_attention
SAMPLES["ltorch.scaled_dot_product_attention"] = [
    (lambda q, k, v: _SDPA(q, k, v, is_causal=True), lambda: (t(2, 2, 5, 4), t(2, 2, 5, 4), t(2, 2, 5, 4))),
    (lambda q, k, v: _SDPA(q, k, v, scale=0.3), lambda: (t(1, 2, 3, 4), t(1, 2, 6, 4), t(1, 2, 6, 4, grad=False))),
    (lambda q, k, v: _SDPA(q.transpose(-1, -2), k, v), lambda: (t(1, 2, 4, 3), t(1, 2, 3, 4), t(1, 2, 3, 4))),
    (lambda q, k, v, m: _SDPA(q, k, v, attn_mask=m), lambda: (t(2, 3, 4), t(2, 5, 4), t(2, 5, 4), t(3, 5, grad=False))),
]
_CE = F.cross_entropy
SAMPLES["ltorch.cross_entropy"] = [
    (lambda x, y: _CE(x, y), lambda: (t(5, 4), idx(4, 5))),
    (lambda x, y: _CE(x, y, ignore_index=1, reduction="sum"), lambda: (t(6, 3), idx(3, 6))),
    (lambda x, y, w: _CE(x, y, w, reduction="none", label_smoothing=0.2),
     lambda: (t(5, 4), idx(4, 5), t(4, **POS, grad=False))),
    (lambda x, y, w: _CE(x, y, w, ignore_index=0, label_smoothing=0.1),
     lambda: (t(2, 4, 3), idx(4, 2, 3), t(4, **POS, grad=False))),
    (lambda x, y: _CE(x, y), lambda: (t(4), torch.tensor(2))),
    (lambda x, y: _CE(x, y, ignore_index=2), lambda: (t(3, 4), torch.full((3,), 2))),  # every target ignored
    (lambda x, y: _CE(x, y.softmax(1)), lambda: (t(3, 4), t(3, 4, grad=False))),  # probability targets: subsymbols
]
SAMPLES["ltorch.embedding"] = [(lambda i, w: F.embedding(i, w, padding_idx=-1), lambda: (idx(5, 3, 2), t(5, 4))),
                               (lambda i, w: F.embedding(i, w, scale_grad_by_freq=True), lambda: (idx(3, 7), t(3, 2)))]
SAMPLES["ltorch.split"] = [(lambda a: torch.split(a, 2, 1), lambda: (t(3, 5),)),
                           (lambda a: torch.split(a, [1, 3], 0)[1], lambda: (t(4, 2),))]
SAMPLES["ltorch.split_with_sizes"] = [(lambda a: a.split_with_sizes([2, 1], -1)[0], lambda: (t(2, 3),))]
SAMPLES["ltorch.chunk"] = [(lambda a: a.chunk(3, 0)[2] * 2, lambda: (t(7, 2),))]
SAMPLES["ltorch.tensor_split"] = [(lambda a: torch.tensor_split(a, [1, 4], 1), lambda: (t(2, 5),))]
SAMPLES["ltorch.unbind"] = [(lambda a: a.unbind(1), lambda: (t(2, 3),)), (lambda a: a.unbind(0)[1], lambda: (t(3, 2),))]
# -- rows written as eager's formula where a decomposition's gradient differs at edge points (vjp_rules_edges.py)
_ZROW = {"low": 0.0, "high": 0.0}  # rows of zeros: std 0, norm 0
SAMPLES["prims.nextafter"] = [(torch.nextafter, lambda: (t(3, 4), t(4))),
                              (lambda a, b: torch.nextafter(a, a.detach() * (b > 0)), lambda: (t(5), t(5)))]
SAMPLES["ltorch.std"] = [(lambda a: a.std(1), lambda: (t(3, 4),)),
                         (lambda a, z: torch.cat([a, z]).std(-1, correction=0, keepdim=True),
                          lambda: (t(2, 4), t(2, 4, **_ZROW)))]
SAMPLES["ltorch.std_mean"] = [(lambda a: torch.std_mean(a, 0), lambda: (t(3, 4),)),
                              (lambda a: torch.std_mean(a * 0, (0, 1))[0], lambda: (t(3, 4),))]
SAMPLES["ltorch.vector_norm"] = [(lambda a: torch.linalg.vector_norm(a, 2, -1), lambda: (t(3, 4),)),
                                 (lambda a: torch.linalg.vector_norm(a * 0, 3, 0, True), lambda: (t(3, 4),)),
                                 (lambda a: torch.linalg.vector_norm(a, 0.5), lambda: (t(3, 4),))]
SAMPLES["ltorch.norm"] = [(lambda a: a.norm(), lambda: (t(3, 4),)), (lambda a: torch.norm(a * 0, 1.5, 1),
                                                                      lambda: (t(3, 4),))]
SAMPLES["ltorch.max"] = [(lambda a: torch.max(a.round(), 1), lambda: (t(3, 4),)),
                         (lambda a: a.max(0, keepdim=True).values, lambda: (t(3, 4),))]
SAMPLES["ltorch.min"] = [(lambda a: torch.min(a.round(), -1), lambda: (t(3, 4),))]
SAMPLES["ltorch.xlogy"] = [(torch.xlogy, lambda: (t(3, 4), t(4, **POS))),
                           (lambda a, b: torch.xlogy(a * (a > 0), b), lambda: (t(3, 4), t(3, 4)))]
SAMPLES["ltorch.xlog1py"] = [(torch.special.xlog1py, lambda: (t(3, 4), t(4, **POS))),
                             (lambda a: torch.special.xlog1py(a * (a > 0), -1.0), lambda: (t(5),))]
SAMPLES["ltorch.logsigmoid"] = [(F.logsigmoid, lambda: (t(3, 4),)), (lambda a: F.logsigmoid(a * 0), lambda: (t(4),))]
# -- complex views (torch's convention: the gradient of a real loss is dL/dx + i dL/dy)
def _z(*shape):
    return torch.view_as_complex(t(*shape, 2, grad=False)).requires_grad_()


SAMPLES["prims.conj"] = [(lambda z: z.conj() * (1 + 2j), lambda: (_z(3, 4),))]
SAMPLES["prims.conj_physical"] = [(lambda z: torch.conj_physical(z) * (1 + 2j), lambda: (_z(3, 4),))]
SAMPLES["prims.real"] = [(lambda z: z.real, lambda: (_z(3, 4),))]
SAMPLES["prims.imag"] = [(lambda z: z.imag * 2, lambda: (_z(3, 4),))]
SAMPLES["prims.view_as_real"] = [(lambda z: torch.view_as_real(z * z), lambda: (_z(3, 4),))]
SAMPLES["prims.view_as_complex"] = [(lambda x: torch.view_as_complex(x) * (1 - 1j), lambda: (t(3, 2),))]
SAMPLES["prims.complex"] = [(lambda x, y: torch.complex(x, y) * (2 - 1j), lambda: (t(3, 4), t(4)))]
NO_SAMPLE = {"prims.device_put": "a second device is needed to move a tensor",
             "prims.copy_": "in-place writes into inputs; its rule passes no gradient",
             "prims.shape": "sizes are Python ints under the default cache: no prims.shape line to differentiate",
             "prims.bernoulli_tensor": "a random draw: tests/test_random_stream.py checks it seeded against eager, "
                                       "its zero gradient included",
             "prims.as_strided_scatter": "functionalization makes it (a write through prims.as_strided); tests/"
                                         "test_as_strided_writes.py checks those writes' gradients against eager",
             "prims.no_grad_update": "functionalization makes it (a write autograd does not record); tests/"
                                     "test_inplace.py checks those writes' gradients against eager",
             **dict.fromkeys(("prims.all_reduce", "prims.all_gather_into_tensor", "prims.reduce_scatter_tensor",
                              "prims.wait_tensor"), "a collective needs a process group of several processes: tests/"
                             "test_distributed.py checks these gradients against eager's with 2 gloo processes"),
             **dict.fromkeys(("fsdp.unshard", "fsdp.reshard"), "FSDP2's block lines need a model sharded with "
                             "fully_shard over several processes: tests/test_distributed.py trains one against eager")}

CASES = [(op_id, i) for op_id in sorted(VJP_RULES) if op_id not in NO_SAMPLE for i in range(len(SAMPLES[op_id]))]


def test_every_rule_has_samples():
    missing = [op_id for op_id in VJP_RULES if op_id not in SAMPLES and op_id not in NO_SAMPLE]
    assert not missing, f"VJP rows without samples in tests/test_autodiff.py: {missing}"


@pytest.mark.parametrize("op_id,i", CASES, ids=[f"{o}-{i}" for o, i in CASES])
def test_rule_matches_torch_autograd(op_id, i, monkeypatch):
    if op_id.startswith("prims."):  # composite rows off: the walk goes down to the prims
        for key in [k for k in VJP_RULES if k.startswith("ltorch.")]:
            monkeypatch.delitem(VJP_RULES, key)
    fn, make = SAMPLES[op_id][i]
    if op_id == "prims.nextafter" and not compat.eager_has("nextafter gradient"):
        with pytest.raises(UnsupportedError, match=r"the gradient of torch\.nextafter"):  # (as eager refuses it)
            jitcore.jit(fn)(*make()).sum().backward()
        return
    grads_match(fn, *make(), rtol=1e-6, atol=1e-6, op_id=op_id)


BF16 = ["ltorch.linear", "ltorch.matmul", "ltorch.softmax", "ltorch.log_softmax", "ltorch.gelu", "ltorch.silu",
        "ltorch.tanh", "ltorch.sigmoid",
        "ltorch.layer_norm", "ltorch.rms_norm", "ltorch.scaled_dot_product_attention", "ltorch.cross_entropy",
        "prims.sum", "prims.mul", "prims.exp", "prims.var_mean"]


@pytest.mark.parametrize("op_id", BF16)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rule_in_low_precision(op_id, dtype):
    fn, make = SAMPLES[op_id][0]
    args = [a.detach().to(dtype).requires_grad_(a.requires_grad) if a.is_floating_point() else a for a in make()]
    tol = 2e-2 if dtype is torch.bfloat16 else 1e-5
    grads_match(fn, *args, rtol=tol, atol=tol)


def test_composite_with_rule_stays_one_forward_line():
    def fn(x, w, b):
        return F.gelu(F.layer_norm(x, (4,), w, b)).softmax(-1)

    jfn = grads_match(fn, t(2, 3, 4), t(4), t(4))
    fw = "\n".join(line for line in str(jitcore.last_traces(jfn)[-1]).splitlines() if not line.lstrip().startswith("#"))
    assert "native_layer_norm" in fw and "torch.nn.functional.gelu(" in fw and "softmax(" in fw
    assert "var_mean" not in fw and "erf" not in fw
    bw = str(jitcore.last_backward_traces(jfn)[-1])
    assert "native_layer_norm_backward" in bw and "gelu_backward" in bw and "softmax_backward" in bw


def test_sdpa_uses_flash_kernels_and_saves_logsumexp():
    q, k, v = (t(1, 2, 8, 4, dtype=torch.float32) for _ in range(3))
    jfn = grads_match(lambda q, k, v: _SDPA(q, k, v, is_causal=True), q, k, v, rtol=1e-5, atol=1e-5)
    assert "sdpa_flash_cpu(" in str(jitcore.last_traces(jfn)[-1])
    assert "sdpa_flash_cpu_backward(" in str(jitcore.last_backward_traces(jfn)[-1])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_grouped_query_sdpa_uses_flash_kernels_with_eagers_gradients(cache):
    """enable_gqa with fewer key/value heads (Llama's grouped-query attention): the CPU flash kernels take it as
    eager's dispatch hands it to them (it was decomposed into matmuls and a softmax: Llama's [torch] step ran at
    0.88x eager); outputs and gradients bitwise eager's."""
    q, k, v = t(2, 4, 8, 16, dtype=torch.float32), t(2, 2, 8, 16, dtype=torch.float32), t(2, 2, 8, 16,
                                                                                         dtype=torch.float32)
    jfn = grads_match(lambda q, k, v: _SDPA(q, k, v, is_causal=True, enable_gqa=True), q, k, v, rtol=0, atol=0,
                      cache=cache)
    assert "sdpa_flash_cpu(" in str(jitcore.last_traces(jfn)[-1])
    assert "sdpa_flash_cpu_backward(" in str(jitcore.last_backward_traces(jfn)[-1])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_grouped_query_sdpa_over_calls_of_other_shapes_and_grad_modes(cache):
    """Calls as a model makes them: other batch sizes, sequence lengths and head groupings, a call under no_grad,
    equal head counts in between; outputs and gradients equal eager's on each."""
    def f(q, k, v):
        return _SDPA(q, k, v, is_causal=True, enable_gqa=True)

    jf = jitcore.jit(f, cache=cache)
    for i, (b, hq, hk, n, grad) in enumerate([(2, 4, 2, 8, True), (3, 4, 2, 8, True), (2, 4, 2, 5, False),
                                               (2, 6, 3, 7, True), (2, 4, 4, 8, True), (1, 4, 1, 9, True)]):
        g = torch.Generator().manual_seed(i)
        q, k, v = (torch.randn(b, h, n, 16, generator=g, requires_grad=grad) for h in (hq, hk, hk))
        qj, kj, vj = (t.detach().clone().requires_grad_(grad) for t in (q, k, v))
        with torch.set_grad_enabled(grad):
            want, got = f(q, k, v), jf(qj, kj, vj)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.requires_grad == want.requires_grad
        if grad:
            ct = torch.randn(want.shape, generator=g)
            want.backward(ct)
            got.backward(ct)
            for a, e in zip((qj, kj, vj), (q, k, v)):
                torch.testing.assert_close(a.grad, e.grad, rtol=0, atol=0, msg=lambda m, i=i: f"call {i}: {m}")


# -- a leaf's grad_dtype: autograd's engine casts each contribution to it before summing them -------------------------
class _Tied(torch.nn.Module):
    """A language model's tied embedding and output weights (one parameter, read twice)."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.wte(ids))).square().mean()


def _tied_grads(run, dtype, grad_dtype, before_backward=None, steps=1):
    torch.manual_seed(0)
    model = _Tied().to(dtype)
    model.wte.weight.grad_dtype = grad_dtype
    call = run(model)
    for step in range(steps):
        loss = call(torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(step)))
        if before_backward is not None:
            before_backward(model.wte.weight)
        loss.backward()
    return model.wte.weight.grad


@pytest.mark.parametrize("dtype, grad_dtype, steps", [(torch.bfloat16, torch.float32, 1),
                                                      (torch.bfloat16, torch.float32, 2),
                                                      (torch.float32, torch.float64, 1)])
def test_leaf_with_wider_grad_dtype_sums_its_contributions_as_autograd_does(dtype, grad_dtype, steps):
    # eager's engine casts each of the tied weight's two contributions to grad_dtype, then sums them (torch 2.15's
    # FSDP2 sets grad_dtype so on the gathered parameters under a MixedPrecisionPolicy); the jitted gradient is the
    # same bit for bit (the program used to sum them in the weight's dtype: 2.0 apart in bfloat16)
    eager = _tied_grads(lambda m: m, dtype, grad_dtype, steps=steps)
    jitted = _tied_grads(jitcore.jit, dtype, grad_dtype, steps=steps)
    assert jitted.dtype == eager.dtype == grad_dtype
    assert torch.equal(jitted, eager)


def test_leaf_grad_dtype_set_to_none_before_the_backward_sums_in_its_dtype():
    # FSDP2's sync micro-batch (torch 2.15): grad_dtype float32 when the forward runs, None when the backward does:
    # eager sums the contributions in bfloat16 (no casts) and keeps that gradient
    def unset(w):
        w.grad_dtype = None

    eager = _tied_grads(lambda m: m, torch.bfloat16, torch.float32, unset)
    jitted = _tied_grads(jitcore.jit, torch.bfloat16, torch.float32, unset)
    assert jitted.dtype == eager.dtype == torch.bfloat16
    assert torch.equal(jitted, eager)


def test_same_op_contributions_and_inputs_without_grad_dtype():
    def f(w, x):
        return (w * w).sum() + torch.tanh(x @ w).sum()  # mul's two contributions to w, then the matmul's

    grads = {}
    for kind in ("eager", "jitted"):
        w = torch.randn(8, 8, generator=torch.Generator().manual_seed(0)).bfloat16().requires_grad_()
        w.grad_dtype = torch.float32
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)).bfloat16()
        (f if kind == "eager" else jitcore.jit(f))(w, x).backward()
        grads[kind] = w.grad
    assert torch.equal(grads["jitted"], grads["eager"])
    fn = jitcore.jit(f)  # a leaf with the default grad_dtype: one gradient per input, summed by the program
    w = torch.randn(8, 8, requires_grad=True)
    fn(w, torch.randn(4, 8)).backward()
    assert len(jitcore.last_backward_traces(fn)[-1].output) == 2
