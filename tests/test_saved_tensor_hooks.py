"""Saved-tensor hooks inside the programs (jit(saved_tensor_hooks=...), torch.autograd.graph.saved_tensors_hooks around
a call, jitcore.hooks): gradients equal eager's under the same hooks, pack and unpack run once per saved tensor, the
cache keys on the hooks, untraceable hooks run eagerly with a warning, the traces show the pack and unpack lines."""
import warnings

import pytest
import torch

import jitcore
import jitcore.hooks as H

saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks

# pack and unpack as torch ops that count their runs: traced as opaque ops, so the count is of the runs of the
# compiled programs (a Python counter in a hook would be a side effect, which keeps the hook out of the programs)
TALLY = {"pack": 0, "unpack": 0}


@torch.library.custom_op("jitcore_tests::tally_pack", mutates_args=())
def tally_pack(t: torch.Tensor) -> torch.Tensor:
    TALLY["pack"] += 1
    return t.to(torch.bfloat16).clone()


@tally_pack.register_fake
def _(t):
    return t.to(torch.bfloat16).clone()


@torch.library.custom_op("jitcore_tests::tally_unpack", mutates_args=())
def tally_unpack(t: torch.Tensor) -> torch.Tensor:
    TALLY["unpack"] += 1
    return t.to(torch.float32).clone()


@tally_unpack.register_fake
def _(t):
    return t.to(torch.float32).clone()


def tally_hooks():
    return (lambda t: tally_pack(t)), (lambda t: tally_unpack(t))


def mlp(x, w1, w2):
    h = torch.nn.functional.gelu(x @ w1)
    return (torch.tanh(h @ w2) * h.sum(-1, keepdim=True)).sum()


def leaves(*shapes, dtype=torch.float32):
    torch.manual_seed(0)
    return [torch.randn(*s, dtype=dtype, requires_grad=True) for s in shapes]


def grads(fn, args, hooks=None):
    if hooks is None:
        out = fn(*args)
    else:
        with saved_tensors_hooks(*hooks):
            out = fn(*args)
    return out, torch.autograd.grad(out, args)


def assert_close_grads(got, want, tol=1e-5):
    (out, gs), (eout, egs) = got, want
    torch.testing.assert_close(out, eout, rtol=tol, atol=tol)
    for g, e in zip(gs, egs):
        torch.testing.assert_close(g, e, rtol=tol, atol=tol)


def assert_grads_within(got, want, rel):
    """Lossy hooks: the program saves other tensors than eager's graph (its own VJP rules, rematerialization), so
    their rounding lands elsewhere; the gradients agree within the packed format's error."""
    (out, gs), (eout, egs) = got, want
    torch.testing.assert_close(out, eout, rtol=1e-4, atol=1e-4)
    for g, e in zip(gs, egs):
        assert ((g - e).norm() / e.norm()).item() < rel


# lossless pairs (eager's gradients exactly, whichever tensors are saved), told apart in the traces
def wide_pack(t):
    return t.to(torch.float64), t.dtype


def wide_unpack(p):
    return p[0].to(p[1])


def doubling_pack(t):
    return t * 8.0  # (a power of two: exact)


def doubling_unpack(t):
    return t / 8.0


WIDE, DOUBLING = (wide_pack, wide_unpack), (doubling_pack, doubling_unpack)


@pytest.mark.parametrize("name", ["bf16", "float8", "cpu_offload"])
@pytest.mark.parametrize("how", ["option", "ambient"])
def test_shipped_hooks_give_eagers_gradients(name, how):
    hooks = getattr(H, name)
    args = leaves((16, 64), (64, 64), (64, 32))
    want = grads(mlp, args, hooks)
    if how == "option":
        jf = jitcore.jit(mlp, saved_tensor_hooks=hooks)
        got = [grads(jf, args) for _ in range(2)]
    else:
        jf = jitcore.jit(mlp)
        got = [grads(jf, args, hooks) for _ in range(2)]
    for g in got:
        assert_grads_within(g, want, {"bf16": 1e-2, "float8": 0.1, "cpu_offload": 1e-6}[name])
        assert_grads_within(g, grads(mlp, args), {"bf16": 1e-2, "float8": 0.1, "cpu_offload": 1e-6}[name])
    assert jitcore.cache_misses(jf) == 1
    if name != "cpu_offload":  # (on the CPU, offloading keeps the tensors as they are: no lines)
        low = "bfloat16" if name == "bf16" else "float8_e4m3fn"
        assert low in str(jitcore.last_traces(jf)[-1])
        assert "Saved-tensor hooks" in "".join(map(str, jitcore.last_traces(jf)))
        assert "Saved-tensor hooks" in "".join(map(str, jitcore.last_backward_traces(jf)))
    if name == "float8":  # the packed tensors are float8 in the programs
        assert "float8_e4m3fn" in str(jitcore.last_backward_traces(jf)[-1])


def test_float8_saves_a_third_and_stays_within_float8_error():
    args = leaves((64, 256), (256, 256), (256, 128))
    plain, packed = jitcore.jit(mlp), jitcore.jit(mlp, saved_tensor_hooks=H.float8)
    unpacked = jitcore.saved_tensor_bytes(lambda: plain(*args)).nbytes
    small = jitcore.saved_tensor_bytes(lambda: packed(*args)).nbytes
    assert small <= unpacked / 3, (small, unpacked)
    _, exact = grads(mlp, args)
    _, approx = grads(packed, args)
    for g, e in zip(approx, exact):
        assert ((g - e).norm() / e.norm()).item() < 0.1  # e4m3: 3 mantissa bits


def test_pack_and_unpack_run_once_per_saved_tensor_per_call():
    pack, unpack = tally_hooks()
    args = leaves((8, 32), (32, 32), (32, 16))
    jf = jitcore.jit(mlp, saved_tensor_hooks=(pack, unpack))
    for call in range(3):
        TALLY.update(pack=0, unpack=0)
        n = jitcore.saved_tensor_bytes(lambda: jf(*args).backward()).count  # (counts what the wrapper saves)
        assert TALLY == {"pack": n, "unpack": n}, (call, TALLY, n)
    forward, backward = str(jitcore.last_traces(jf)[-1]), str(jitcore.last_backward_traces(jf)[-1])
    assert forward.count("tally_pack_default(") == n and backward.count("tally_unpack_default(") == n


def test_ambient_hooks_traced_in_are_not_applied_again_by_torch():
    """The program packs with the active pair; the wrapper's save_for_backward must not run pack a second time."""
    pack, unpack = tally_hooks()
    args = leaves((8, 32), (32, 32), (32, 16))
    jf = jitcore.jit(mlp)
    want = grads(mlp, args, (pack, unpack))
    TALLY.update(pack=0, unpack=0)
    got = grads(jf, args, (pack, unpack))
    n = sum(line.count("tally_pack_default(") for line in str(jitcore.last_traces(jf)[-1]).splitlines()
            if not line.lstrip().startswith("#"))
    assert TALLY == {"pack": n, "unpack": n} and n > 0
    assert_grads_within(got, want, 1e-2)


def test_hooks_are_part_of_the_cache_key():
    args = leaves((8, 32), (32, 32), (32, 16))
    jf = jitcore.jit(mlp)
    sequence = [None, WIDE, WIDE, DOUBLING, None, DOUBLING, WIDE]
    misses = [1, 2, 2, 3, 3, 3, 3]
    for hooks, n in zip(sequence, misses):
        assert_close_grads(grads(jf, args, hooks), grads(mlp, args, hooks))
        assert jitcore.cache_misses(jf) == n
        forward = str(jitcore.last_traces(jf)[-1])
        assert ("torch.float64)" in forward) == (hooks is WIDE) and ("8.0)" in forward) == (hooks is DOUBLING)
        assert ("Saved-tensor hooks" in "".join(map(str, jitcore.last_traces(jf)))) == (hooks is not None)
    other = (lambda t: wide_pack(t), wide_unpack)  # the same work, another function: another program
    assert_close_grads(grads(jf, args, other), grads(mlp, args, other))
    assert jitcore.cache_misses(jf) == 4
    assert "saved-tensor hooks" in jitcore.cache_miss_reasons(jf)[-1]


def test_hooks_without_grad_change_nothing():
    args = [a.detach() for a in leaves((8, 32), (32, 32), (32, 16))]
    jf = jitcore.jit(mlp)
    jf(*args)
    with saved_tensors_hooks(*H.float8):
        torch.testing.assert_close(jf(*args), mlp(*args))
    assert jitcore.cache_misses(jf) == 1


def branchy_pack(t):
    """float64 for big float32 tensors, doubled big others, small ones as they are (all lossless)."""
    if t.numel() < 300:
        return t
    if t.dtype == torch.float32:
        return t.to(torch.float64), t.dtype
    return t * 4.0, None


def branchy_unpack(p):
    if not isinstance(p, tuple):
        return p
    return p[0] / 4.0 if p[1] is None else p[0].to(p[1])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_a_hook_branching_on_dtype_and_size(cache):
    jf = jitcore.jit(mlp, cache=cache, saved_tensor_hooks=(branchy_pack, branchy_unpack))
    for rows, dtype in [(4, torch.float32), (16, torch.float32), (5, torch.float32), (16, torch.float64),
                        (3, torch.float64)]:
        args = leaves((rows, 32), (32, 32), (32, 16), dtype=dtype)
        assert_close_grads(grads(jf, args), grads(mlp, args, (branchy_pack, branchy_unpack)))
        text = str(jitcore.last_traces(jf)[-1])
        assert ("torch.float64)" in text) == (dtype == torch.float32)
        assert ("4.0)" in text) == (dtype == torch.float64)
        returned = jitcore.last_traces(jf)[-1].output
        assert any(getattr(o, "name", None) == "t0" for o in returned) == (rows * 32 < 300)  # x as it is, when small
    # symbolic sizes: the hook's `numel() < 300` is a predicate the prologue checks (rows 5 reuses rows 4's program)
    assert jitcore.cache_misses(jf) == (4 if cache == "symbolic values" else 5)


def counting_hooks():
    calls = {"pack": 0, "unpack": 0}

    def pack(t):
        calls["pack"] += 1  # a side effect: the hook runs eagerly
        return t.to(torch.float64), t.dtype

    def unpack(p):
        calls["unpack"] += 1
        return p[0].to(p[1])

    return calls, (pack, unpack)


def reading_data_pack(t):
    if t.abs().max() > 1e4:  # Python reads the tensor's data
        return t
    return t.to(torch.float64)


def reading_data_unpack(t):
    return t.to(torch.float32).clone()


@pytest.mark.parametrize("how", ["option", "ambient"])
def test_untraceable_hooks_run_eagerly_with_a_warning(how):
    calls, hooks = counting_hooks()
    args = leaves((8, 32), (32, 32), (32, 16))
    want = grads(mlp, args, hooks)
    jf = jitcore.jit(mlp, saved_tensor_hooks=hooks) if how == "option" else jitcore.jit(mlp)
    with pytest.warns(UserWarning, match="saved-tensor hooks .* cannot be put into the compiled programs") as w:
        calls.update(pack=0, unpack=0)
        got = grads(jf, args, None if how == "option" else hooks)
    assert w[0].filename == __file__  # the warning names the user's call
    assert_close_grads(got, want)
    n = len(jitcore.last_traces(jf)[-1].output) - 1  # the values the forward saves (all tensors here)
    assert calls == {"pack": n, "unpack": n}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, at the compile
        assert_close_grads(grads(jf, args, None if how == "option" else hooks), want)


def test_a_hook_reading_tensor_data_runs_eagerly():
    args = leaves((8, 32), (32, 32), (32, 16))
    jf = jitcore.jit(mlp, saved_tensor_hooks=(reading_data_pack, reading_data_unpack))
    with pytest.warns(UserWarning, match="reading_data_pack"):
        got = grads(jf, args)
    assert_close_grads(got, grads(mlp, args, (reading_data_pack, reading_data_unpack)))


def test_with_the_option_active_hooks_see_the_packed_tensors():
    args = leaves((64, 256), (256, 256), (256, 128))
    jf = jitcore.jit(mlp, saved_tensor_hooks=H.bf16)
    seen = []
    with saved_tensors_hooks(*H.eager(lambda t: seen.append(t.dtype) or t, lambda t: t)):
        jf(*args).backward()
    assert seen and set(seen) == {torch.bfloat16}


def test_cpu_offload_packs_to_the_cpu():
    t = torch.randn(4, 5)
    device, packed = H.cpu_offload_pack(t)
    assert packed.device.type == "cpu" and device == t.device
    torch.testing.assert_close(H.cpu_offload_unpack((device, packed)), t)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_offload_on_a_gpu():
    torch.manual_seed(0)
    args = [torch.randn(*s, device="cuda", requires_grad=True) for s in ((16, 64), (64, 64), (64, 32))]
    on_cpu = []

    def watch(t):  # what the wrapper saves: the program's packed (offloaded) tensors
        on_cpu.append(t.device.type)
        return t

    jf = jitcore.jit(mlp, saved_tensor_hooks=H.cpu_offload)
    with saved_tensors_hooks(*H.eager(watch, lambda t: t)):
        got = grads(jf, args)
    assert on_cpu and set(on_cpu) == {"cpu"}
    assert "cpu" in str(jitcore.last_traces(jf)[-1])
    assert_close_grads(got, grads(mlp, args, H.cpu_offload))
    for g in got[1]:
        assert g.device.type == "cuda"


def test_a_bad_hooks_option_is_refused():
    with pytest.raises(ValueError, match="saved_tensor_hooks"):
        jitcore.jit(mlp, saved_tensor_hooks=H.bf16_pack)


def test_a_fusion_executor_claims_the_pack_and_unpack_lines():
    args = leaves((16, 64), (64, 64), (64, 32))
    jf = jitcore.jit(mlp, executors=["inductor"], saved_tensor_hooks=H.float8)
    assert_grads_within(grads(jf, args), grads(mlp, args, H.float8), 0.1)
    forward, backward = (_code(t[-1]) for t in (jitcore.last_traces(jf), jitcore.last_backward_traces(jf)))
    # the float8 casts are fused into the regions that compute the saved tensors (and read them back)
    assert "float8_e4m3fn" in forward and "torch.Tensor.to(" not in forward
    assert "torch.Tensor.float(" not in backward and "float8_e4m3fn" in str(jitcore.last_backward_traces(jf)[-1])


def _code(trace) -> str:
    """The trace's lines that run (with the types noted after them), without the decompositions printed as comments."""
    return "\n".join(line for line in str(trace).splitlines() if not line.lstrip().startswith("#"))


def _double_sum(x):
    return (x * x).sum()


def test_packages_record_the_hooks(tmp_path):
    jf = jitcore.jit(_double_sum, saved_tensor_hooks=H.bf16)
    x = torch.randn(3, 4, requires_grad=True)
    jf(x)
    folder = jitcore.save(jf, tmp_path / "pkg")
    loaded = jitcore.load(folder, _double_sum)  # the pair found again by its names
    assert loaded.options.saved_tensor_hooks == H.bf16
    assert_grads_within(grads(loaded, [x]), grads(_double_sum, [x], H.bf16), 1e-2)
    assert jitcore.cache_misses(loaded) == 0
    with pytest.raises(jitcore.PackageError, match="saved_tensor_hooks"):
        jitcore.load(folder, _double_sum, saved_tensor_hooks=H.float8)


def _product(x, w):
    return (x * w).sum()


def test_verify_runs_eager_under_the_same_hooks():
    """Rounding what is saved changes the gradients; the program saves what eager's mul saves (x and w), so eager
    under the same pair is the oracle verify=True compares with (without the pair it would report a mismatch)."""
    rounding = (lambda t: t.round(), lambda t: t)
    args = [t * 4 for t in leaves((8, 32), (8, 32))]
    args = [a.detach().requires_grad_() for a in args]
    jf = jitcore.jit(_product, verify=True, saved_tensor_hooks=rounding)
    got = grads(jf, args)
    assert_close_grads(got, grads(_product, args, rounding))
    assert not torch.equal(got[1][0], args[1])  # (the rounding shows)
