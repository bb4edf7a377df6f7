"""Every public non-callable attribute of torch.Tensor read inside a jitted function, against eager: each is in
CHECKS (functions reading it, run in constant and symbolic values, compared with eager's result, and inputs after
the call), in REFUSED (a clear jitcore error where eager gives a value), or in SKIPPED with its reason. The table
is checked against dir(torch.Tensor), so an attribute a new torch adds is a failure until it is placed.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError

CACHES = ("constant values", "symbolic values")


def _x(*shape, grad=False):
    return torch.randn(*shape).requires_grad_(grad)


def _with_grad(*shape):
    x = torch.randn(*shape, requires_grad=True)
    x.grad = torch.randn(*shape)
    return x


# attribute -> [(fn, make_args)], each fn reads the attribute (some several ways)
CHECKS = {
    "H": [(lambda x: x.H * 2, lambda: (_x(3, 4, grad=True),))],
    "T": [(lambda x: x.T + 1, lambda: (_x(2, 3, 4),))],
    "mT": [(lambda x: x.mT.sin(), lambda: (_x(2, 3, 4, grad=True),))],
    "mH": [(lambda x: x.mH.cos(), lambda: (_x(2, 3, 4),))],
    "data": [(lambda x: x.data * 2, lambda: (_x(3, 4, grad=True),)),
             (lambda x: (x.data.mul_(2), x + 1)[1], lambda: (_x(3, 4),)),  # a write through .data is x's
             (lambda x: (x.data.mul_(2), x * 3)[1], lambda: (_x(3, 4, grad=True),))],
    "device": [(lambda x: (x.device, x * 2 if x.device.type == "cpu" else x), lambda: (_x(3),))],
    "dtype": [(lambda x: (x.dtype, x.to(x.dtype) + 1), lambda: (_x(3),))],
    "grad": [(lambda x: x * 2 if x.grad is None else x.grad * 3, lambda: (_x(3, 4, grad=True),)),
             (lambda x: x.grad * 3 + x, lambda: (_with_grad(3, 4),)),
             (lambda x: (x * 2).grad, lambda: (_x(3, grad=True),))],  # a computed tensor's: None (eager warns)
    "grad_dtype": [(lambda x: (x.grad_dtype, x + 1), lambda: (_x(3, grad=True),))],
    "grad_fn": [(lambda x: (x.grad_fn, x + 1), lambda: (_x(3, grad=True),))],
    "imag": [(lambda x: x.imag, lambda: (_x(3),))],  # eager's RuntimeError for a real tensor
    "real": [(lambda x: x.real * 2, lambda: (_x(3, grad=True),)),
             (lambda x: (x.real.add_(1), x * 1)[1], lambda: (_x(3),))],  # a real tensor's .real is itself
    "is_leaf": [(lambda x: (x.is_leaf, (x * 2).is_leaf, x + 1), lambda: (_x(3, grad=True),))],
    "itemsize": [(lambda x: x * x.itemsize, lambda: (_x(3, 4),))],
    "nbytes": [(lambda x: x * x.nbytes, lambda: (_x(3, 4),)),
               (lambda x: x.sum() + x[1:].nbytes, lambda: (_x(5, 3).double(),))],
    "layout": [(lambda x: (x.layout, x + 1), lambda: (_x(3),))],
    "name": [(lambda x: (x.name, x + 1), lambda: (_x(3),))],
    "ndim": [(lambda x: x.sum(x.ndim - 1), lambda: (_x(3, 4),))],
    "output_nr": [(lambda x: (x.output_nr, x + 1), lambda: (_x(3, grad=True),))],
    "requires_grad": [(lambda x: (x.requires_grad, (x * 2).requires_grad, x + 1), lambda: (_x(3, grad=True),))],
    "retains_grad": [(lambda x: (x.retains_grad, (x * 2).retains_grad, x + 1), lambda: (_x(3, grad=True),))],
    "shape": [(lambda x: x.reshape(x.shape[1], x.shape[0]), lambda: (_x(3, 4),))],
    "volatile": [(lambda x: (x.volatile, x + 1), lambda: (_x(3),))],
    **{flag: [(lambda x, flag=flag: (getattr(x, flag), x + 1), lambda: (_x(3),))]
       for flag in ("is_cpu", "is_cuda", "is_ipu", "is_maia", "is_meta", "is_mkldnn", "is_mps", "is_mtia",
                    "is_nested", "is_quantized", "is_sparse", "is_sparse_csr", "is_vulkan", "is_xla", "is_xpu")},
}

if hasattr(torch.Tensor, "names"):  # (named tensors: torch 2.10 and 2.11 still have them)
    CHECKS["names"] = [(lambda x: (x.names, x.sum(0)), lambda: (_x(2, 3),))]

# attribute -> (fn, make_args, text of the clear error) where jitcore refuses what eager answers
REFUSED = {
    "grad_fn": (lambda x: (x * 2).grad_fn, lambda: (_x(3, grad=True),), "grad_fn"),
    # (it raised AttributeError where eager answers; its value differs per call: refused with the reason)
    "_version": (lambda x: x * x._version, lambda: (_x(3),), "_version"),
}
SKIPPED: dict = {}


def _run(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args), None
        except Exception as e:  # eager's exception is the expected result
            return None, e


def _same(got, want, what):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: {got!r} where eager gives a tensor"
        torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), f"{what}: {got!r} vs eager's {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}[{k}]")
    else:
        assert type(got) is type(want) and got == want, f"{what}: {got!r} vs eager's {want!r}"


def _clones(args):
    out = []
    for a in args:
        c = a.detach().clone().requires_grad_(a.requires_grad)
        if a.grad is not None:
            c.grad = a.grad.clone()
        out.append(c)
    return out


def check_against_eager(fn, make_args, cache, what):
    torch.manual_seed(0)
    args = make_args()
    jfn = jitcore.jit(fn, cache=cache)
    e_args, j_args = _clones(args), _clones(args)
    want, want_exc = _run(fn, e_args)
    got, got_exc = _run(jfn, j_args)
    if want_exc is not None:
        assert got_exc is not None and type(got_exc) is type(want_exc), \
            f"{what}: eager raises {want_exc!r}, jitcore gives {got if got_exc is None else got_exc!r}"
        return
    assert got_exc is None, f"{what}: jitcore raises {got_exc!r}"
    _same(got, want, what)
    for k, (e, j) in enumerate(zip(e_args, j_args)):
        torch.testing.assert_close(j.detach(), e.detach(), msg=lambda m: f"{what}: input {k} after the call: {m}")  # noqa: B023


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("attr", sorted(CHECKS))
def test_attribute_against_eager(attr, cache):
    for i, (fn, make_args) in enumerate(CHECKS[attr]):
        check_against_eager(fn, make_args, cache, f"{attr}[{i}] {cache}")


@pytest.mark.parametrize("attr", sorted(REFUSED))
def test_attribute_refused_clearly(attr):
    fn, make_args, text = REFUSED[attr]
    with pytest.raises(UnsupportedError, match=text):
        jitcore.jit(fn)(*make_args())


def test_every_tensor_attribute_is_placed():
    public = sorted(n for n in dir(torch.Tensor) if not n.startswith("_") and not callable(getattr(torch.Tensor, n)))
    missing = [n for n in public if n not in CHECKS and n not in SKIPPED]
    assert not missing, f"torch.Tensor attributes neither checked nor skipped: {missing}"
    print(f"\ntorch.Tensor attributes covered: {len(CHECKS)} / {len(public)}")
    assert len(CHECKS) == len(public) - len(SKIPPED)


# -- .grad is read per call: an input's .grad is an input of its own (or None), guarded ------------------------------
@pytest.mark.parametrize("cache", CACHES + ("no caching",))
def test_grad_read_follows_the_input_between_calls(cache):
    def f(x):
        g = x.grad
        return x * 2 if g is None else x + g

    jf = jitcore.jit(f, cache=cache)
    x = torch.randn(3, 4, requires_grad=True)
    for grad in (None, torch.ones(3, 4), torch.full((3, 4), 5.0), None):
        x.grad = grad
        torch.testing.assert_close(jf(x), f(x))
    y = torch.randn(5, 4, requires_grad=True)  # another size (symbolic values: the same entry, other sizes)
    y.grad = torch.randn(5, 4)
    torch.testing.assert_close(jf(y), f(y))


def test_parameter_grad_read_inside_a_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            g = self.lin.weight.grad
            out = self.lin(x)
            return out if g is None else out + g.sum()

    m = M()
    jm = jitcore.jit(m)
    x = torch.randn(2, 4)
    for _ in range(3):  # grad None, then accumulated by backward: each call sees the current one
        want = m(x)
        got = jm(x)
        torch.testing.assert_close(got, want)
        want.sum().backward()


def test_nbytes_follows_symbolic_sizes():
    jf = jitcore.jit(lambda x: x.sum() * x.nbytes, cache="symbolic values")
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), x.sum() * x.nbytes)


@pytest.mark.parametrize("make", [lambda: torch.eye(3).to_sparse(), lambda: torch.eye(3).to_sparse_csr(),
                                  lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
                                  lambda: torch.ones(2, 3).to_mkldnn()],
                         ids=["sparse_coo", "sparse_csr", "quantized", "mkldnn"])
def test_tensors_a_proxy_cannot_stand_for_are_refused(make):
    """A proxy answers is_sparse, layout, is_quantized, ... as a dense strided tensor: other inputs are refused."""
    with pytest.raises(UnsupportedError, match="tensor input"):
        jitcore.jit(lambda x: (x.is_sparse, x.layout, x * 2))(make())


def _shapes(x, y):
    s = x.shape
    flags = torch.tensor([isinstance(s, torch.Size), type(s) is torch.Size, isinstance(s[1:], torch.Size),
                          isinstance(s, tuple), type(x.size()) is torch.Size])
    scaled = x * 2 if isinstance(y, torch.Size) else x  # code that branches on what a shape is (HF does)
    return flags, scaled, s, x.size(), s[1:], s + (1,), (1,) + s, torch.Size([s[0], 2]), s.numel(), x.new_zeros(s)


@pytest.mark.parametrize("cache", CACHES + ("no caching",))
def test_shapes_are_torch_sizes_inside_and_out(cache):
    jfn = jitcore.jit(_shapes, cache=cache)
    for shape in [(3, 4), (5, 6), (2, 7)]:  # (symbolic values: the same entry for the last two)
        x = torch.randn(*shape)
        got, expected = jfn(x, x.shape), _shapes(x, x.shape)
        assert [type(v) for v in got] == [type(v) for v in expected]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)


@pytest.mark.skipif(not hasattr(torch.Tensor, "names"), reason="named tensors: torch 2.10-2.11 only")
def test_a_named_tensor_input_is_refused():
    x = torch.randn(2, 3).refine_names("N", "C")
    with pytest.raises(jitcore.UnsupportedError, match="named tensor"):
        jitcore.jit(lambda x: x * 2)(x)
