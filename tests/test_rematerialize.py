"""Rematerialization (transforms/rematerialize.py): the forward saves fewer bytes, the backward recomputes cheap work
from them, and every call still matches eager: outputs, gradients (bitwise with the torch executor), inputs after the
call; random draws are never recomputed, in-place writes of inputs hold, symbolic sizes keep working."""
from __future__ import annotations

import pytest
import torch

import jitcore
from executors import inductor_ex
from transforms.rematerialize import RECOMPUTABLE_PRIMS, leaf_ids

CACHES = ("constant values", "symbolic values")
ALL = float("inf")  # rematerialize=inf: the fewest bytes saved, whatever the recomputation costs


def chain(x):
    for _ in range(3):
        x = torch.tanh(torch.sin(x))
    return x * 2


def _grads_like_eager(fn, jfn, shapes, exact=True, seed=None, extra=()):
    """Call eager and jitted on fresh leaves of each shape; compare outputs, gradients and inputs after the call."""
    for shape in shapes:
        x = torch.randn(*shape, requires_grad=True)
        xe, xj = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
        ee, ej = [e.clone() for e in extra], [e.clone() for e in extra]
        if seed is not None:
            torch.manual_seed(seed)
        want = fn(xe, *ee)
        want.sum().backward()
        if seed is not None:
            torch.manual_seed(seed)
        got = jfn(xj, *ej)
        got.sum().backward()
        def check(a, b):
            torch.testing.assert_close(a, b, **({"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}))

        check(got, want)
        check(xj.grad, xe.grad)
        for a, b in zip(ej, ee):
            check(a, b)


def _saved(jfn) -> list:
    """Names of the values the last entry's forward saves for the backward."""
    bw = jitcore.last_backward_traces(jfn)[-1]
    n = dict(bw.arg_groups)["saved"]
    return [p.name for p in bw.args[:n]]


@pytest.mark.parametrize("cache", CACHES)
def test_torch_executor_recomputes_the_chain_bitwise_like_eager(cache):
    jfn = jitcore.jit(chain, cache=cache, rematerialize=ALL)
    _grads_like_eager(chain, jfn, [(4, 5), (6, 5), (4, 5), (3, 7)])
    assert _saved(jfn) == [jitcore.last_traces(jfn)[-1].args[0].name]  # the input alone
    header = str(jitcore.last_backward_traces(jfn)[1]).splitlines()[0]
    assert "Rematerialization (saved 1 values" in header and "instead of 4" in header


@pytest.mark.parametrize("cache", CACHES)
def test_default_and_off_give_eagers_gradients(cache):
    for remat in (True, False, 0.0):
        jfn = jitcore.jit(chain, cache=cache, rematerialize=remat)
        _grads_like_eager(chain, jfn, [(4, 5), (6, 5)])
    off = jitcore.jit(chain, rematerialize=False)
    off(torch.randn(2, 3, requires_grad=True)).sum().backward()
    assert not any("Rematerialization" in str(t).splitlines()[0] for t in jitcore.last_backward_traces(off))
    assert len(_saved(off)) == 4


def test_bytes_saved_drop():
    x = torch.randn(64, 64, requires_grad=True)
    off, on = jitcore.jit(chain, rematerialize=False), jitcore.jit(chain, rematerialize=ALL)
    eager = jitcore.saved_tensor_bytes(lambda: chain(x)).nbytes
    before = jitcore.saved_tensor_bytes(lambda: off(x)).nbytes
    after = jitcore.saved_tensor_bytes(lambda: on(x)).nbytes
    assert after == x.numel() * 4 < before <= eager


def _draws_random(bsym) -> bool:
    if bsym.subsymbols:
        return any(_draws_random(s) for s in bsym.subsymbols)
    return "random" in {t.value for t in bsym.sym.tags}


@pytest.mark.parametrize("cache", CACHES)
def test_random_draws_are_saved_never_recomputed(cache):
    def fn(x):
        y = torch.sin(x) * 3
        y = torch.nn.functional.dropout(y, p=0.5, training=True)
        z = torch.rand_like(y) * y
        return torch.tanh(z + y)

    jfn = jitcore.jit(fn, cache=cache, rematerialize=ALL)
    _grads_like_eager(fn, jfn, [(8, 16), (8, 16), (4, 16)], seed=7)
    bw = jitcore.last_backward_traces(jfn)[1]
    assert not any(_draws_random(b) for b in bw.bound_symbols)


@pytest.mark.parametrize("cache", CACHES)
def test_inputs_written_in_place_are_recomputed_from_what_they_were(cache):
    def fn(x, buf):
        y = torch.sin(x + buf)  # (x * buf would save buf: eager then refuses the write)
        buf.add_(1.0)  # after the forward, before the backward: the recompute must read the old values
        return torch.tanh(y) * buf

    jfn = jitcore.jit(fn, cache=cache, rematerialize=ALL)
    _grads_like_eager(fn, jfn, [(3, 4), (5, 4)], extra=(torch.randn(4),))


@pytest.mark.parametrize("cache", CACHES)
def test_recomputed_lines_read_symbolic_sizes(cache):
    def fn(x):
        b, n = x.shape
        y = torch.sin(x).reshape(b * n).expand(2, b * n)
        y = torch.exp(y.transpose(0, 1)) * 0.5
        return y.reshape(n, b, 2).tanh()

    jfn = jitcore.jit(fn, cache=cache, rematerialize=ALL)
    _grads_like_eager(fn, jfn, [(3, 4), (5, 6), (2, 9), (3, 4)])
    if cache == "symbolic values":
        assert jitcore.cache_misses(jfn) == 1


def test_matmul_and_reductions_are_saved_not_recomputed():
    def fn(x, w):
        h = torch.sin(x @ w)
        return torch.softmax(h, dim=-1) * h.sum(-1, keepdim=True)

    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    jfn = jitcore.jit(fn, rematerialize=ALL)
    jfn(x, w).sum().backward()
    fw = next(t for t in jitcore.last_traces(jfn) if "Forward pass of the grad" in str(t).splitlines()[0])
    made = {o.name for b in fw.bound_symbols for o in b.flat_proxy_outs()}
    bw = jitcore.last_backward_traces(jfn)[1]
    recomputed = [b for b in bw.bound_symbols if any(o.name in made for o in b.flat_proxy_outs())]
    assert recomputed  # sin(x @ w), from the saved matmul
    for b in recomputed:
        assert leaf_ids(b) <= RECOMPUTABLE_PRIMS | {"prims.shape"}, b.sym.id


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="rematerialize"):
        jitcore.jit(chain, rematerialize="yes")


@pytest.mark.parametrize("cache", CACHES)
def test_inductor_fuses_the_recomputation_with_eagers_gradients(cache):
    jfn = jitcore.jit(chain, cache=cache, executors=[inductor_ex], rematerialize=ALL)
    _grads_like_eager(chain, jfn, [(16, 8), (24, 8)], exact=False)
    assert len(_saved(jfn)) == 1


def test_mlp_with_inductor_saves_less_by_default():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256))
    x = torch.randn(128, 256)
    on, off = jitcore.jit(model, executors=[inductor_ex]), jitcore.jit(model, executors=[inductor_ex],
                                                                        rematerialize=False)
    off(x).sum().backward()
    model.zero_grad()
    on(x).sum().backward()
    assert jitcore.saved_tensor_bytes(lambda: on(x)).nbytes < jitcore.saved_tensor_bytes(lambda: off(x)).nbytes
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):  # within 1e-5 of the largest gradient
        assert (g - p.grad).abs().max() <= 1e-5 * p.grad.abs().max()


def test_a_package_keeps_the_option(tmp_path):
    jfn = jitcore.jit(chain, rematerialize=False)
    jfn(torch.randn(3, 4, requires_grad=True)).sum().backward()
    jitcore.save(jfn, tmp_path / "pkg")
    loaded = jitcore.load(tmp_path / "pkg", chain)
    loaded(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert len(_saved(loaded)) == 4 and jitcore.cache_misses(loaded) == 0
    with pytest.raises(jitcore.PackageError, match="rematerialize"):
        jitcore.load(tmp_path / "pkg", chain, rematerialize=True)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_gpu_program_recomputes_transcendental_math_where_a_cpu_program_saves(device):
    """The cost model by device: fused into a GPU's kernels, sin and tanh cost the memory traffic they already pay,
    so the backward recomputes the whole chain from the input (as torch.compile's partitioner does there); on the
    CPU their math costs more than 5% of the step, so the forward saves what the backward reads. Traced on proxies
    (no GPU needed: nothing runs)."""
    from jitcore.ir.proxies import TensorProxy
    from jitcore.ir.trace import Trace, tracectx
    from jitcore.ops import ltorch
    from transforms.autodiff import grad_transform
    from transforms.rematerialize import rematerialize, saved_bytes

    trace = Trace("computation")
    with tracectx(trace):
        x = TensorProxy((512, 512), torch.float32, torch.device(device), requires_grad=True)
        trace.args = [x]
        y = x
        for _ in range(5):
            y = ltorch.tanh(ltorch.sin(y))
        trace.output = y
    split = grad_transform(trace)
    fused, _, _ = rematerialize(split, fused=True)
    unfused, _, _ = rematerialize(split, fused=False)
    assert saved_bytes(unfused.saved) == saved_bytes(split.saved)  # (unfused, each recomputed line is a kernel)
    if device == "cuda":
        assert [p.name for p in fused.saved] == [x.name]
    else:
        assert saved_bytes(fused.saved) == saved_bytes(split.saved)


@pytest.mark.parametrize("cache", CACHES)
def test_an_inference_tensor_input_is_never_saved_in_place_of_what_eager_saves(cache):
    """`x * w.exp()` with w made under inference_mode: eager saves exp's result; recomputing exp from a saved w made
    autograd refuse to save an inference tensor (RuntimeError where eager trains)."""
    with torch.inference_mode():
        w = torch.randn(64, 64) * 0.1

    def f(x):
        return torch.tanh(x * w.exp())

    jf = jitcore.jit(f, cache=cache, executors=[inductor_ex], rematerialize=ALL)
    for n in (64, 64):
        x = torch.randn(n, 64, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        jf(x).sum().backward()
        f(xe).sum().backward()
        torch.testing.assert_close(x.grad, xe.grad, rtol=1e-4, atol=1e-5)


# reductions whose gradient goes where the input equals the result (ties share it), of elementwise math that Inductor
# computes with kernels of its own (its exp can differ from torch's in the last bit)
EXTREMA = {"amax": lambda t: t.amax(-1), "amin": lambda t: t.amin(-1), "max_dim": lambda t: t.max(-1).values,
           "min_all": lambda t: t.min(), "amax_keepdim": lambda t: t.amax(-1, keepdim=True)}
MATH = {"exp": torch.exp, "sigmoid": torch.sigmoid, "tanh_sin": lambda x: torch.tanh(torch.sin(x))}


@pytest.mark.parametrize("cache", ("constant values", "symbolic values", "no caching"))
@pytest.mark.parametrize("reduce", sorted(EXTREMA))
@pytest.mark.parametrize("math", sorted(MATH))
def test_a_value_the_backward_compares_with_its_extremum_is_saved_not_recomputed(math, reduce, cache):
    """amax's gradient is where `y == amax(y)`: a y recomputed in the backward by Inductor's kernel and compared
    with the amax torch computed from the forward's y found no equal element in some rows (a NaN gradient)."""
    def f(x):
        return EXTREMA[reduce](MATH[math](x))

    jf = jitcore.jit(f, cache=cache, executors=[inductor_ex, "torch"])
    for seed in range(4):
        x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(seed))
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = f(xe), jf(xj)
        g = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed))
        want.backward(g)
        got.backward(g)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xj.grad, xe.grad, msg=lambda m, s=seed: f"call {s}: {m}")
