"""Complex views (issue 38, item 3): z.real, z.imag, z.H, z.mH, z.conj(), torch.view_as_real, torch.view_as_complex,
read and written, on intermediates and arguments, with their gradients (torch's convention for complex autograd), in
call sequences in every cache mode, against eager. Rotary embeddings as Llama writes them, an FFT filter and an STFT
use them; the lazy conjugate and negative bits of tensors the program makes read as eager's.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES

C64 = torch.complex64


def _cplx(gen, *shape, rg=False):
    z = torch.randn(*shape, 2, generator=gen)
    return torch.view_as_complex(z).clone().requires_grad_(rg)


def _real(gen, *shape, rg=False):
    return torch.randn(*shape, generator=gen).requires_grad_(rg)


def _loss(outs, gen):
    """A real number from every output that requires grad (complex ones through their parts), with random weights."""
    total = 0
    for o in outs:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            r = torch.view_as_real(o.resolve_conj()) if o.is_complex() else o
            total = total + (r * torch.randn(r.shape, generator=gen, dtype=r.dtype)).sum()
    return total


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _same(what, got, exp, bits=True):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: {type(got).__name__}, eager a tensor"
        assert got.dtype == exp.dtype and got.shape == exp.shape, \
            f"{what}: {got.dtype}{tuple(got.shape)} vs eager {exp.dtype}{tuple(exp.shape)}"
        if bits:  # (a gradient's are how eager's engine happened to pass it on: not compared)
            assert (got.is_conj(), got.is_neg()) == (exp.is_conj(), exp.is_neg()), f"{what}: lazy bits differ"
            assert got.requires_grad == exp.requires_grad, f"{what}: requires_grad {got.requires_grad}"
        torch.testing.assert_close(got.detach().resolve_conj().resolve_neg(),
                                   exp.detach().resolve_conj().resolve_neg(), rtol=1e-4, atol=1e-5, msg=what)
    else:
        assert got == exp and type(got) is type(exp), f"{what}: {got!r} vs eager {exp!r}"


def check_calls(fn, make, sizes=(4, 4, 6), modes=CACHE_MODES, **jit_kwargs):
    """Calls of fn with make(gen, n) -> (leaves, args) for each n in sizes, eager and jitted (each cache mode):
    outputs, arguments after the call and the leaves' gradients match (or both raise the same exception type)."""
    for mode in modes:
        jfn = jitcore.jit(fn, cache=mode, **jit_kwargs)
        for k, n in enumerate(sizes):
            sides = []
            for f in (fn, jfn):
                leaves, args = make(torch.Generator().manual_seed(k), n)
                try:
                    out = f(*args)
                except Exception as e:  # compared with the other side's
                    sides.append((e, None, None, None, None))
                    continue
                outs = _flat(out)
                shares = [[o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args
                           if isinstance(a, torch.Tensor)] for o in outs if isinstance(o, torch.Tensor)]
                loss = _loss(outs, torch.Generator().manual_seed(100 + k))
                if isinstance(loss, torch.Tensor):
                    loss.backward()
                grads = [leaf.grad for leaf in leaves]
                sides.append((None, outs, [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args],
                              grads, shares))
            (err_e, out_e, args_e, grads_e, shares_e), (err_j, out_j, args_j, grads_j, shares_j) = sides
            where = f"{fn.__name__}, {mode}, call {k}"
            if err_e is not None or err_j is not None:
                assert err_e is not None and isinstance(err_j, type(err_e)), \
                    f"{where}: eager raised {err_e!r}, jitcore {err_j!r}"
                continue
            assert len(out_j) == len(out_e), where
            for i, (g, e) in enumerate(zip(out_j, out_e)):
                _same(f"{where}: output {i}", g, e)
            for i, (g, e) in enumerate(zip(args_j, args_e)):
                _same(f"{where}: argument {i} after the call", g, e)
            assert shares_j == shares_e, f"{where}: outputs sharing the arguments' memory {shares_j}, eager {shares_e}"
            for i, (g, e) in enumerate(zip(grads_j, grads_e)):
                if (g is None) != (e is None):  # (eager's engine leaves a zero gradient undefined: ord=0 norms)
                    assert not (g if e is None else e).any(), f"{where}: gradient {i} {g} vs eager {e}"
                elif e is not None:
                    _same(f"{where}: gradient of leaf {i}", g, e, bits=False)


def one_complex(rg=True):
    def make(gen, n):
        z = _cplx(gen, 3, n, rg=rg)
        return [z], [z]
    return make


def complex_and_real(rg=True):
    def make(gen, n):
        z, x = _cplx(gen, 3, n, rg=rg), _real(gen, 3, n, rg=rg)
        return [z, x], [z, x]
    return make


def written_complex(gen, n):
    """A complex argument the function writes: a non-leaf of a leaf that requires grad (eager refuses writes into a
    leaf that requires grad), and a real one."""
    z, x = _cplx(gen, 3, n, rg=True), _real(gen, 3, n, rg=True)
    return [z, x], [z * 1, x]


# -- reads ----------------------------------------------------------------------------------------------------------
def parts(z):
    return z.real * 2 + z.imag, z.imag.sum(-1)


def modulus(z):
    return (z * z.conj()).real.sum(), z.abs()


def hermitian(z):
    return (z.H @ z).real, (z.mH @ z).imag, z.adjoint() * 2


def conj_views(z):
    c = z.conj()
    return c.imag * 3, c.real, c * 2, c.T, (c + 1).imag


def as_real(z, x):
    return torch.view_as_real(z * x).flatten(-2), torch.view_as_complex(torch.stack((x, x * 2), -1)) * z


@pytest.mark.parametrize("fn", [parts, modulus, hermitian, conj_views])
def test_reads(fn):
    check_calls(fn, one_complex())


def scalar_views(z):
    """0-d: x.H, x.mH (deprecated) and adjoint() conjugate it."""
    return z.H * 2, z.mH, z.adjoint(), z.real


def test_zero_dim_views():
    check_calls(scalar_views, lambda gen, n: ([z := _cplx(gen, rg=True)], [z]))


def test_view_as_real_and_complex():
    check_calls(as_real, complex_and_real())


def real_of_real_no_grad(x, y):
    """x.real and x.conj() of a real x are x itself, under no_grad too (its gradient flows on)."""
    with torch.no_grad():
        a, b = x.real, y.conj()
    return a * b, a is x, b is y


def test_real_and_conj_of_real_tensors_are_themselves():
    def make(gen, n):
        x, y = _real(gen, 3, n, rg=True), _real(gen, 3, n, rg=True)
        return [x, y], [x, y]
    check_calls(real_of_real_no_grad, make)


def real_inputs(x, y):
    """Gradients reaching real inputs through view_as_complex, torch.complex and torch.polar."""
    a = torch.view_as_complex(torch.stack((x, y), -1))
    b = torch.complex(x, y * 2)
    c = torch.polar(x.abs() + 1, y)
    return (a * b).real, (b * c.conj()).imag, torch.view_as_real(c).sum(-1)


def test_real_inputs_gradients():
    def make(gen, n):
        x, y = _real(gen, 3, n, rg=True), _real(gen, 3, n, rg=True)
        return [x, y], [x, y]
    check_calls(real_inputs, make)


# -- writes into views of intermediates ------------------------------------------------------------------------------
def real_mul_(z):
    y = z * 2
    y.real.mul_(2)
    return y.abs(), y


def imag_setitem(z):
    y = z + 1
    y.imag[0] = 1
    return torch.view_as_real(y), y.imag


def real_iadd(z, x):
    y = z * z
    y.real += x
    y.imag = x * 3
    return y * 2


def via_view_as_real(z, x):
    y = z * 1
    r = torch.view_as_real(y)
    r[..., 0].add_(x)
    r[1].mul_(3)
    return y.conj() * z


def conj_written(z, x):
    y = z * 1
    c = y.conj()
    c.imag.add_(x)  # writes -x into y's imaginary parts
    c.mul_(2)
    return y, c.real


def complex_of_real_written(x, y):
    w = torch.stack((x, y), -1) * 1
    c = torch.view_as_complex(w)
    c.mul_(1j)
    return w, c.abs()


@pytest.mark.parametrize("fn", [real_iadd, via_view_as_real, conj_written])
def test_intermediate_writes_with_real(fn):
    check_calls(fn, complex_and_real())


@pytest.mark.parametrize("fn", [real_mul_, imag_setitem])
def test_intermediate_writes(fn):
    check_calls(fn, one_complex())


def test_view_as_complex_written():
    def make(gen, n):
        x, y = _real(gen, 3, n, rg=True), _real(gen, 3, n, rg=True)
        return [x, y], [x, y]
    check_calls(complex_of_real_written, make)


# -- writes into arguments: the caller sees them -----------------------------------------------------------------------
def arg_real_mul_(z, x):
    z.real.mul_(2)
    z.imag[0] = 1
    return z.abs() + x


def arg_view_as_real(z, x):
    torch.view_as_real(z)[..., 1].add_(x)
    return x * 2


def arg_conj_imag(z, x):
    z.conj().imag.mul_(x)
    return (z * z).real


def arg_views_returned(z, x):
    """Views of a written argument, returned: they view the caller's tensor, as eager's."""
    z.real.mul_(2)
    return z.imag, z.conj(), torch.view_as_real(z)[0], z.real * x


def arg_conjugated_written(z, x):
    z.real.add_(x)
    z.imag[1] = 2
    return z * 1, z.conj(), z[1:], z.real, torch.view_as_real(z.conj()) * 1


def arg_real_of_complex_view(x, y):
    """A real argument written through a complex view of it (a rotation of its pairs)."""
    torch.view_as_complex(x.unflatten(-1, (-1, 2))).mul_(torch.polar(torch.ones(()), y.sum()))
    return x.sum()


@pytest.mark.parametrize("fn", [arg_real_mul_, arg_view_as_real, arg_conj_imag, arg_views_returned])
def test_argument_writes(fn):
    check_calls(fn, written_complex)

    def no_grad_args(gen, n):
        return [], [_cplx(gen, 3, n), _real(gen, 3, n)]
    check_calls(fn, no_grad_args)


def test_argument_with_conjugate_bit_written():
    """An argument passed as z.conj() (a lazy conjugate view of the caller's tensor), written: the caller's tensor
    (and the base it views) see eager's values."""
    def make(gen, n):
        z = _cplx(gen, 3, n)
        return [], [z.conj(), _real(gen, 3, n)]
    check_calls(arg_conjugated_written, make)


def test_real_argument_written_through_view_as_complex():
    def make(gen, n):
        x, y = _real(gen, 3, n, rg=True), _real(gen, 2, rg=True)
        return [x, y], [x * 1, y]
    check_calls(arg_real_of_complex_view, make, sizes=(4, 4, 6, 5))  # (5: eager's error, jitcore's too)


# -- the lazy bits ----------------------------------------------------------------------------------------------------
def bits(z):
    c = z.conj()
    return (c.is_conj(), c.imag.is_neg(), c.real.is_neg(), c.conj().is_conj(), c.T.is_conj(), (c * 1).is_conj(),
            z.H.is_conj(), c.resolve_conj().is_conj(), torch.is_neg(c.imag.resolve_neg()), z.is_conj(), c * 1,
            c.imag[0].is_neg(), c.imag.t().is_neg(), c.mT.reshape(-1).is_conj(), c.flatten().is_conj())


def test_lazy_bits_of_program_tensors():
    check_calls(bits, one_complex(rg=False))


def test_lazy_bits_of_arguments():
    """An argument with the conjugate bit: its bit is guarded, view_as_real of it raises eager's error."""
    def f(z):
        return z.imag * 2, z.is_conj(), z.real.sum()

    def g(z):
        return torch.view_as_real(z) * 2

    seq = [lambda t: t, lambda t: t.conj(), lambda t: t, lambda t: t.conj()]
    for fn in (f, g):
        def make(gen, n):
            z = _cplx(gen, 3, 4, rg=True)
            return [z], [seq[n](z)]
        check_calls(fn, make, sizes=(0, 1, 2, 3))


# -- users' code: rotary embeddings, an FFT filter, an STFT -----------------------------------------------------------
def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def rotary_block(xq, xk):
    freqs_cis = precompute_freqs_cis(xq.shape[-1], xq.shape[1])
    q, k = apply_rotary_emb(xq, xk, freqs_cis)
    return torch.softmax(q @ k.transpose(-2, -1), -1)


def _rotary_inputs(gen, n):
    xq, xk = _real(gen, 2, n, 3, 8, rg=True), _real(gen, 2, n, 3, 8, rg=True)
    return [xq, xk], [xq, xk]


def test_rotary_embedding():
    check_calls(rotary_block, _rotary_inputs)


def test_rotary_embedding_freqs_argument():
    def make(gen, n):
        xq, xk = _real(gen, 2, n, 3, 8, rg=True), _real(gen, 2, n, 3, 8, rg=True)
        return [xq, xk], [xq, xk, precompute_freqs_cis(8, n)]
    check_calls(apply_rotary_emb, make)


def fft_filter(x):
    spec = torch.fft.rfft(x)
    keep = torch.arange(spec.shape[-1]) < spec.shape[-1] // 2
    spec.imag.mul_(0.5)
    low = torch.fft.irfft(spec * keep, n=x.shape[-1])
    return low, torch.fft.rfft(x).abs(), spec.real.sum()


def stft_magnitude(x):
    spec = torch.stft(x, n_fft=8, hop_length=2, window=torch.hann_window(8), return_complex=True)
    return spec.abs(), spec.real.mean(), torch.view_as_real(spec).sum(-1)


def test_fft_filter():
    check_calls(fft_filter, lambda gen, n: ([x := _real(gen, 2, 2 * n, rg=True)], [x]), sizes=(8, 8, 12))


def test_stft():
    check_calls(stft_magnitude, lambda gen, n: ([x := _real(gen, 2, 4 * n, rg=True)], [x]), sizes=(8, 8, 12))


def test_rotary_embedding_inductor():
    """With Inductor first in the list: what it does not compile of the complex ops, the torch executor runs."""
    from executors import inductor_ex, torch_ex

    check_calls(rotary_block, _rotary_inputs, sizes=(4, 4), modes=("constant values",),
                executors=[inductor_ex, torch_ex])


def imag_of_conjugate_fused(z):
    """The imaginary parts of a conjugate view (eager: a view with the lazy negative bit) read by an Inductor region
    (fuzz seed 4 with Inductor: the region read the memory, not the negated values)."""
    return ((z.conj().imag * 2 + 1).sin().exp() * z.real).sum(0)


def test_imag_of_conjugate_into_inductor():
    from executors import inductor_ex, torch_ex

    seq = [lambda t: t, lambda t: t.conj()]  # (then an argument with the conjugate bit itself)
    check_calls(imag_of_conjugate_fused, lambda gen, n: ([z := _cplx(gen, 4, 4, rg=True)], [seq[n](z)]),
                sizes=(0, 1), modes=("constant values",), executors=[inductor_ex, torch_ex])


def _fused_real(x):
    return ((x * 2 + 1).sin().exp() * x).sum(0)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_negative_bit_argument_into_inductor(mode):
    """A real argument with the lazy negative bit (`z.conj().imag`, `torch._neg_view`): an Inductor region read its
    memory as its values (a silent wrong answer, found with the complex views); regions now take its values."""
    from executors import inductor_ex

    jf = jitcore.jit(_fused_real, cache=mode, executors=[inductor_ex])
    gen = torch.Generator().manual_seed(0)
    for kind in ("imag of conj", "plain", "neg view", "imag of conj"):
        z = _cplx(gen, 3, 4)
        x = {"imag of conj": z.conj().imag, "plain": z.imag.clone(), "neg view": torch._neg_view(z.real)}[kind]
        assert x.is_neg() == (kind != "plain")
        torch.testing.assert_close(jf(x), _fused_real(x), msg=kind)


# -- refusals ---------------------------------------------------------------------------------------------------------
def test_view_as_real_of_conjugate_raises_like_eager():
    def f(z):
        return torch.view_as_real(z.conj())

    check_calls(f, one_complex(rg=False), sizes=(4,))


# -- PyTorch's OpInfo samples in complex64: values and gradients (torch's convention) --------------------------------
OPINFO_OPS = ("real", "imag", "conj", "conj_physical", "resolve_conj", "resolve_neg", "view_as_real", "adjoint",
              "mul", "div", "abs", "angle", "sgn", "exp", "pow", "sum", "mean", "matmul", "linalg.vector_norm",
              "linalg.norm", "std", "std_mean", "var_mean", "nn.functional.rms_norm", "isreal", "vdot", "linalg.vecdot",
              "fft.fft", "fft.ifft", "where", "cumprod", "prod", "reciprocal", "rsqrt", "sigmoid", "tanh")


def _opinfos():
    from jitcore import compat

    try:
        db = compat.opinfo_module().op_db
    except ImportError:
        return []
    return [op for op in db if op.name in OPINFO_OPS and torch.complex64 in op.supported_dtypes("cpu")]


@pytest.mark.parametrize("op", _opinfos(), ids=lambda op: f"{op.name}.{op.variant_test_name}".rstrip("."))
def test_opinfo_complex_samples(op):
    from torch.utils import _pytree as pytree

    for sample in list(op.sample_inputs("cpu", C64, requires_grad=op.supports_autograd))[:3]:
        leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

        def fn(*tensors, leaves=leaves, spec=spec, where=where):
            filled = list(leaves)
            for i, x in zip(where, tensors):
                filled[i] = x
            inp, args, kwargs = pytree.tree_unflatten(filled, spec)
            return op.op(inp, *args, **kwargs)

        def make(gen, n, leaves=leaves, where=where):
            ts = [leaves[i].detach().clone().requires_grad_(leaves[i].requires_grad) for i in where]
            return [x for x in ts if x.requires_grad], ts
        check_calls(fn, make, sizes=(0,), modes=("constant values",))
