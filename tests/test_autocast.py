"""torch.autocast inside the jitted function or around the call: the same casts as eager, recorded in the trace."""
import random

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.pytree import tree_leaves


def inside(a, b, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = a @ b
        h = F.linear(torch.relu(c), w)
        loss = F.mse_loss(h, c[:, :3])  # fp32 policy: computed in float32
    return h, loss, c.dtype


def _inputs(requires_grad=False):
    torch.manual_seed(0)
    return tuple(torch.randn(s, requires_grad=requires_grad) for s in ((4, 5), (5, 6), (3, 6)))


def test_autocast_block_inside_the_function_matches_eager():
    args = _inputs()
    got, want = jitcore.jit(inside)(*args), inside(*args)
    assert got[2] == want[2] == torch.bfloat16
    for g, w in zip(got[:2], want[:2]):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def test_autocast_gradients_match_eager():
    args = _inputs(requires_grad=True)
    h, loss, _ = jitcore.jit(inside)(*args)
    (h.float().sum() + loss).backward()
    got = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    h, loss, _ = inside(*args)
    (h.float().sum() + loss).backward()
    for g, a in zip(got, args):
        assert g.dtype == a.grad.dtype
        torch.testing.assert_close(g, a.grad)


def test_autocast_around_the_call_and_the_state_is_guarded():
    def f(a, b):
        return a @ b

    jf = jitcore.jit(f)
    a, b, _ = _inputs()
    assert jf(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = jf(a, b)
        want = f(a, b)
    assert out.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(out, want)
    assert jf(a, b).dtype == torch.float32
    assert jitcore.cache_misses(jf) == 2


# -- generated: every op in torch's CPU autocast lists that jitcore maps, and composites over them -----------------
def _r(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed + len(shape)))


def _targets(n):
    return torch.arange(n) % 3


def _probs(*shape):
    return torch.rand(shape, generator=torch.Generator().manual_seed(7)) * 0.8 + 0.1


# name -> (function of the inputs, inputs); run in float32 (and in bfloat16 where the op takes low precision)
AUTOCAST_CASES = {
    # lower_precision_fp
    "conv1d": (F.conv1d, lambda: (_r(1, 2, 6), _r(3, 2, 3))),
    "conv2d": (F.conv2d, lambda: (_r(1, 2, 5, 5), _r(3, 2, 2, 2), _r(3))),
    "conv3d": (F.conv3d, lambda: (_r(1, 2, 4, 4, 4), _r(3, 2, 2, 2, 2))),
    "conv_transpose1d": (F.conv_transpose1d, lambda: (_r(1, 2, 5), _r(2, 3, 2))),
    "conv_transpose2d": (F.conv_transpose2d, lambda: (_r(1, 2, 4, 4), _r(2, 3, 2, 2))),
    "conv_transpose3d": (F.conv_transpose3d, lambda: (_r(1, 2, 3, 3, 3), _r(2, 3, 2, 2, 2))),
    "bmm": (torch.bmm, lambda: (_r(2, 3, 4), _r(2, 4, 5))),
    "mm": (torch.mm, lambda: (_r(3, 4), _r(4, 5))),
    "vecdot": (torch.linalg.vecdot, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "baddbmm": (torch.baddbmm, lambda: (_r(2, 3, 5), _r(2, 3, 4), _r(2, 4, 5))),
    "addmm": (torch.addmm, lambda: (_r(3, 5), _r(3, 4), _r(4, 5))),
    "addbmm": (torch.addbmm, lambda: (_r(3, 5), _r(2, 3, 4), _r(2, 4, 5))),
    "linear": (F.linear, lambda: (_r(3, 4), _r(5, 4), _r(5))),
    "matmul": (torch.matmul, lambda: (_r(2, 3, 4), _r(4, 5))),
    "prelu": (F.prelu, lambda: (_r(2, 3, 4), _r(3))),
    "sdpa": (F.scaled_dot_product_attention, lambda: (_r(1, 2, 4, 8), _r(1, 2, 4, 8, seed=1), _r(1, 2, 4, 8, seed=2))),
    # fp32
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2), lambda: (_r(1, 2, 4, 4, 4),)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2), lambda: (_r(1, 2, 4, 4, 4),)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, 2), lambda: (_r(1, 2, 5, 5, 5),)),
    "prod": (torch.prod, lambda: (_r(6) * 0.5 + 1,)),
    "cdist": (torch.cdist, lambda: (_r(3, 4), _r(5, 4))),
    "trace": (torch.trace, lambda: (_r(4, 4),)),
    "mse_loss": (F.mse_loss, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "l1_loss": (F.l1_loss, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "smooth_l1_loss": (F.smooth_l1_loss, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "huber_loss": (F.huber_loss, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "soft_margin_loss": (F.soft_margin_loss, lambda: (_r(3, 4), _r(3, 4, seed=1).sign())),
    "margin_ranking_loss": (F.margin_ranking_loss, lambda: (_r(4), _r(4, seed=1), _r(4, seed=2).sign())),
    "cosine_embedding_loss": (F.cosine_embedding_loss, lambda: (_r(3, 4), _r(3, 4, seed=1), _r(3).sign())),
    "kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"), lambda: (_r(3, 4).log_softmax(-1), _probs(3, 4))),
    "nll_loss": (lambda x: F.nll_loss(x, _targets(4)), lambda: (_r(4, 3).log_softmax(-1),)),
    "cross_entropy": (lambda x: F.cross_entropy(x, _targets(4)), lambda: (_r(4, 3),)),
    "poisson_nll_loss": (F.poisson_nll_loss, lambda: (_r(3, 4), _probs(3, 4))),
    "binary_cross_entropy": (F.binary_cross_entropy, lambda: (_probs(3, 4), _probs(3, 4).round())),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, lambda: (_r(3, 4), _probs(3, 4).round())),
    # composites: eager decomposes some into listed ops (autocast reaches inside), runs others as kernels
    "einsum_contract": (lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda: (_r(3, 4), _r(4, 5))),
    "einsum_batch": (lambda a, b: torch.einsum("bij,bjk->bki", a, b), lambda: (_r(2, 3, 4), _r(2, 4, 5))),
    "einsum_three": (lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), lambda: (_r(3, 4), _r(4, 5), _r(5, 2))),
    "einsum_outer": (lambda a, b: torch.einsum("i,j->ij", a, b), lambda: (_r(3), _r(4))),
    "einsum_one": (lambda a: torch.einsum("ii->i", a), lambda: (_r(4, 4),)),
    "einsum_all": (lambda a, b: torch.einsum("ij,ij->", a, b), lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "tensordot": (lambda a, b: torch.tensordot(a, b, 1), lambda: (_r(3, 4), _r(4, 5))),
    "tensordot_dims": (lambda a, b: torch.tensordot(a, b, ([1, 2], [0, 1])), lambda: (_r(2, 3, 4), _r(3, 4, 5))),
    "bilinear": (F.bilinear, lambda: (_r(3, 4), _r(3, 5), _r(2, 4, 5))),
    "multi_dot": (lambda a, b, c: torch.linalg.multi_dot([a, b, c]), lambda: (_r(3, 4), _r(4, 5), _r(5, 2))),
    "inner": (torch.inner, lambda: (_r(3, 4), _r(5, 4))),
    "mv": (torch.mv, lambda: (_r(3, 4), _r(4))),
    "dot": (torch.dot, lambda: (_r(4), _r(4, seed=1))),
    "outer": (torch.outer, lambda: (_r(3), _r(4))),
    "addmv": (torch.addmv, lambda: (_r(3), _r(3, 4), _r(4))),
    "addr": (torch.addr, lambda: (_r(3, 4), _r(3), _r(4))),
    "kron": (torch.kron, lambda: (_r(2, 3), _r(2, 2))),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 3), lambda: (_r(1, 2, 5, 5),)),
    "cosine_similarity": (F.cosine_similarity, lambda: (_r(3, 4), _r(3, 4, seed=1))),
    "mha_block": (lambda x, w: F.softmax(x @ w, -1) @ w.t(), lambda: (_r(3, 4), _r(4, 4))),
    "gelu": (F.gelu, lambda: (_r(3, 4),)),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (_r(3, 4),)),
    # promote
    "cat_mixed": (lambda a, b: torch.cat([a, b.bfloat16()]), lambda: (_r(2, 3), _r(2, 3))),
    "stack_mixed": (lambda a, b: torch.stack([a.bfloat16(), b]), lambda: (_r(2, 3), _r(2, 3))),
    "stack_mixed_f32_first": (lambda a, b: torch.stack([a, b.bfloat16(), b.double()]), lambda: (_r(2, 3), _r(2, 3))),
    "stack_mixed_half": (lambda a, b: torch.stack([a.half(), b]), lambda: (_r(2, 3), _r(2, 3))),
}
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def _nested(fn, how, dtype):
    """fn called with autocast entered as `how` says: inside the jitted function, around the call, or around the
    call with an autocast(enabled=False) block inside the function."""
    if how == "inside":
        def f(*args):
            with torch.autocast("cpu", dtype=dtype):
                return fn(*args)
    elif how == "disabled_inside":
        def f(*args):
            with torch.autocast("cpu", enabled=False):
                out = fn(*args)
            return out, fn(*args)
    else:
        def f(*args):
            return fn(*args)
    return f


def _outer_ctx(how, dtype):
    import contextlib

    return contextlib.nullcontext() if how == "inside" else torch.autocast("cpu", dtype=dtype)


def _check_autocast(name, how, dtype, input_dtype):
    fn, make = AUTOCAST_CASES[name]
    args = tuple(a.to(input_dtype) if a.is_floating_point() and a.dtype == torch.float32 else a for a in make())
    f = _nested(fn, how, dtype)
    with _outer_ctx(how, dtype):
        try:
            want = f(*args)
        except RuntimeError:  # eager refuses: jit must refuse too
            with pytest.raises(Exception):  # noqa: B017 - any refusal, as long as there is one
                jitcore.jit(f)(*args)
            return
        jf = jitcore.jit(f)
        got = jf(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    traced = [o for o in tree_leaves(jitcore.last_traces(jf)[0].output) if isinstance(o, TensorProxy)]
    assert [p.dtype for p in traced] == [w.dtype for w in want], f"{name}: traced {traced}, eager {want}"
    for g, w in zip(got, want):
        what = f"{name} under {how} autocast({dtype}) on {input_dtype}"
        assert g.dtype == w.dtype, f"{what}: dtype {g.dtype}, eager {w.dtype}"
        low = w.dtype in (torch.bfloat16, torch.float16) or input_dtype != torch.float32 or dtype != torch.float32
        tol = {"atol": 5e-2, "rtol": 3e-2} if low else {}
        torch.testing.assert_close(g, w, **tol, msg=lambda m, what=what: f"{what}: {m}")


@pytest.mark.parametrize("how", ["inside", "around", "disabled_inside"])
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(AUTOCAST_CASES))
def test_autocast_policy_matches_eager(name, dtype, how):
    _check_autocast(name, how, dtype, torch.float32)


@pytest.mark.parametrize("name", sorted(AUTOCAST_CASES))
def test_autocast_on_low_precision_inputs_matches_eager(name):
    _check_autocast(name, "inside", torch.bfloat16, torch.bfloat16)


def _grads(f, args, first_only=False):
    args = [a.detach().requires_grad_(a.is_floating_point() and (i == 0 or not first_only)) for i, a in enumerate(args)]
    out = f(*args)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.float().sum() for o in outs).backward()
    return [a.grad for a in args]


@pytest.mark.parametrize("how", ["inside", "around", "disabled_inside"])
@pytest.mark.parametrize("name", sorted(n for n in AUTOCAST_CASES if "mixed" not in n))
def test_autocast_gradients_per_op_match_eager(name, how):
    fn, make = AUTOCAST_CASES[name]
    f = _nested(fn, how, torch.bfloat16)
    args = make()
    with _outer_ctx(how, torch.bfloat16):
        try:
            want, first_only = _grads(f, args), False
        except RuntimeError:  # a target eager does not differentiate: gradients of the first input only
            want, first_only = _grads(f, args, first_only=True), True
        got = _grads(jitcore.jit(f), args, first_only)
    for g, w in zip(got, want):
        assert (g is None) == (w is None), f"{name} {how}: grad presence differs"
        if w is not None:
            assert g.dtype == w.dtype, f"{name} {how}: grad dtype {g.dtype}, eager {w.dtype}"
            torch.testing.assert_close(g, w, atol=5e-2, rtol=3e-2, msg=lambda m: f"{name} {how}: {m}")


# -- where the gradients of a tensor's several casts are summed -------------------------------------------------------
# Each use of a tensor cast by autocast (or by the user: `x.bfloat16()`) gets its own cast in eager, and each cast's
# backward hands its gradient back in the tensor's own dtype, where autograd sums them; torch's cast cache shares one
# cast of a float32 leaf that requires grad (a parameter) per autocast region instead, its uses' gradients summed in the
# low dtype. CSE used to merge every such cast, so an activation feeding q, k and v had its gradient summed in bfloat16.

SOURCES = ("parameter", "leaf argument", "computed argument", "activation")
USES = {
    "linear": lambda h, w: torch.nn.functional.linear(h, w),
    "matmul": lambda h, w: h @ w.t(),
    "bfloat16()": lambda h, w: h.bfloat16() * 2,
    "to(float16)": lambda h, w: h.to(torch.float16).float() * 3,
    "half()": lambda h, w: h.half().relu() * 2,
    "double()": lambda h, w: h.double().tanh(),
}


def _cast_program(seed):
    r = random.Random(seed)
    source = SOURCES[seed % len(SOURCES)]
    uses = [r.choice(list(USES)) for _ in range(r.randint(2, 4))]
    scales = [r.choice([1.0, -2.0, 3.0, 0.5]) for _ in uses]
    region = r.choice(["inside", "around"])
    if region == "inside" and len(uses) > 1 and r.random() < 0.5:
        region = "two regions"  # (eager's cast cache is cleared when the outermost region exits: the weight, cast
        uses[:2] = r.choice(["linear", "matmul"]), r.choice(["linear", "matmul"])  # in each, is cast twice)
    weight = torch.nn.Parameter(torch.randn(6, 6, generator=torch.Generator().manual_seed(seed)))

    def f(x):
        def body(some):
            h = weight if source == "parameter" else torch.tanh(x) * 3 if source == "activation" else x
            outs = [USES[u](h, weight) for u in some]
            return sum((o.float().sum(-1) * s for o, s in zip(outs, scales)), torch.zeros(()))
        if region == "around":
            return body(uses)
        if region == "two regions":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                first = body(uses[:1])
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return first + body(uses[1:])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return body(uses)

    return f, weight, source, region, f"{source}, uses {uses}, autocast {region}"


def _cast_call(f, weight, source, n, seed):
    leaf = torch.randn(n, 6, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    x = leaf * 1 if source == "computed argument" else leaf
    weight.grad = None
    out = f(x)
    out.sum().backward()
    return out.detach(), leaf.grad, weight.grad


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("seed", range(24))
def test_gradients_of_several_casts_are_summed_as_in_eager(seed, mode):
    f, weight, source, region, what = _cast_program(seed)
    jf = jitcore.jit(f, cache=mode)
    for i, n in enumerate((4, 4, 7, 2)):
        with _outer_ctx("around" if region == "around" else "inside", torch.bfloat16):
            want = _cast_call(f, weight, source, n, seed + i)
            got = _cast_call(jf, weight, source, n, seed + i)
        for name, g, w in zip(("output", "input grad", "weight grad"), got, want):
            where = f"{what}, call {i}: {name}"
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4, msg=lambda m, where=where: f"{where}: {m}")
