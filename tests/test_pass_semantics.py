"""What a line means beyond its op and arguments, kept by every pass (CSE, DCE, functionalization, autodiff, the
memory passes, fusion regions): the grad mode it ran under, the autocast state, its place among random draws and
in-place writes. Generated programs, each with a duplicate of some expression inside and outside a region, are
compared with eager: outputs, requires_grad, the .grad of every input, and torch's RNG state after the call.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore.errors import UnsupportedError

# unary expressions on a (3, 4) tensor; each is computed twice in a program, once in a region and once outside
OPS = {
    "mul2": lambda x: x * 2,
    "sin": torch.sin,
    "exp_method": lambda x: x.exp(),
    "tanh_add": lambda x: torch.tanh(x) + x,
    "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: F.log_softmax(x * 3, -1),
    "layer_norm": lambda x: F.layer_norm(x, (4,)),
    "matmul": lambda x: (x @ x.t()).sum(0).unsqueeze(-1) * x,
    "sum_keepdim": lambda x: x.sum(-1, keepdim=True) * x,
    "view_pow": lambda x: x.view(4, 3).pow(2).view(3, 4),
}


@torch.no_grad()
def _decorated(op, x):
    return op(x)


def _enable_inside_no_grad(op, x):
    with torch.no_grad():
        with torch.enable_grad():
            return op(x)


def _no_grad(op, x):
    with torch.no_grad():
        return op(x)


def _set_grad_enabled(op, x):
    with torch.set_grad_enabled(False):
        return op(x)


def _inference_mode(op, x):
    with torch.inference_mode():
        return op(x)


def _detach(op, x):
    return op(x.detach())


def _toggled(op, x):
    torch.set_grad_enabled(False)
    y = op(x)
    torch.set_grad_enabled(True)
    return y


REGIONS = {"no_grad": _no_grad, "decorated_no_grad": _decorated, "enable_grad_in_no_grad": _enable_inside_no_grad,
           "set_grad_enabled": _set_grad_enabled, "inference_mode": _inference_mode, "detach": _detach,
           "set_grad_enabled_call": _toggled}


def _program(op, region, order):
    """Outputs combine by add, which saves nothing (inference tensors may not be saved for backward)."""
    def f(w, x):
        if order == "region_first":
            a = region(op, w)
            b = op(w)
        elif order == "region_last":
            b = op(w)
            a = region(op, w)
        else:  # the same expression three times: twice outside, once between them in the region
            b = op(w)
            a = region(op, w)
            b = b + op(w)
        return a + b + x, b * 1
    return f


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, generator=g).requires_grad_(), torch.randn(3, 4, generator=g)


def compare(fn, make_inputs, executors=None, cache="constant values", atol=1e-5, calls=2):
    """fn and jit(fn) on fresh inputs, both after torch.manual_seed(7): outputs, requires_grad, every input's .grad
    after backward of the sum of the outputs that require grad, and torch.get_rng_state() after the call and after
    the backward."""
    jfn = jitcore.jit(fn, executors=executors, cache=cache)
    for _ in range(calls):  # the first call compiles, the next one runs the cached entry
        results = []
        for run in (fn, jfn):
            inputs = make_inputs()
            torch.manual_seed(7)
            out = run(*inputs)
            state = torch.get_rng_state()
            outs = out if isinstance(out, tuple) else (out,)
            loss = [o.sum() for o in outs if o.requires_grad]
            if loss:
                sum(loss).backward()
            results.append((outs, (state, torch.get_rng_state()), [i.grad for i in inputs]))
        (e_outs, e_state, e_grads), (j_outs, j_state, j_grads) = results
        for k, (e, j) in enumerate(zip(e_outs, j_outs)):
            assert e.requires_grad == j.requires_grad, f"output {k}: requires_grad {e.requires_grad} in eager"
            assert e.dtype == j.dtype, f"output {k}: dtype {j.dtype}, eager {e.dtype}"
            torch.testing.assert_close(j.detach(), e.detach(), atol=atol, rtol=atol, msg=f"output {k}")
        for k, (e, j) in enumerate(zip(e_grads, j_grads)):
            assert (e is None) == (j is None), f"input {k}: .grad is {j}, eager {e}"
            if e is not None:
                torch.testing.assert_close(j, e, atol=atol, rtol=atol, msg=f"grad of input {k}")
        assert torch.equal(e_state[0], j_state[0]), "torch's RNG state after the call differs from eager's"
        assert torch.equal(e_state[1], j_state[1]), "torch's RNG state after the backward differs from eager's"
    return jfn


@pytest.mark.parametrize("order", ["region_first", "region_last", "between"])
@pytest.mark.parametrize("region", sorted(REGIONS))
@pytest.mark.parametrize("op", sorted(OPS))
def test_duplicate_inside_and_outside_a_grad_mode_region(op, region, order):
    compare(_program(OPS[op], REGIONS[region], order), _inputs)


@pytest.mark.parametrize("cache", ["symbolic values", "no caching"])
@pytest.mark.parametrize("op", ["mul2", "softmax", "layer_norm"])
def test_no_grad_duplicates_in_other_cache_modes(op, cache):
    compare(_program(OPS[op], _no_grad, "between"), _inputs, cache=cache)


def test_ppo_ratio_with_old_log_probs_under_no_grad():
    """The old policy's log-probabilities are a constant: the loss trains through the new ones only."""
    def loss(logits, adv):
        with torch.no_grad():
            old = F.log_softmax(logits, -1)
        new = F.log_softmax(logits, -1)
        ratio = (new - old).exp()
        return -(torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)).mean()

    compare(loss, _inputs)


# -- calls made with grad mode off ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(OPS))
def test_enable_grad_inside_a_call_made_under_no_grad(op):
    def f(w, x):
        a = OPS[op](w) + x
        with torch.enable_grad():
            b = OPS[op](w) + x
        return a, b

    jfn = jitcore.jit(f)
    for _ in range(2):
        results = []
        for run in (f, jfn):
            w, x = _inputs()
            with torch.no_grad():
                a, b = run(w, x)
            assert not a.requires_grad and b.requires_grad
            b.sum().backward()
            results.append((a, b, w.grad))
        torch.testing.assert_close(results[1], results[0])


# -- random draws --------------------------------------------------------------------------------------------------
DRAWS = {
    "rand": lambda x: torch.rand(3, 4),
    "randn": lambda x: torch.randn(3, 4),
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "randint": lambda x: torch.randint(0, 9, (3, 4)).float(),
    "normal": lambda x: torch.normal(0.5, 2.0, (3, 4)),
    "uniform_": lambda x: torch.empty(3, 4).uniform_(-1, 1),
    "normal_": lambda x: torch.zeros(3, 4).normal_(),
}
USES = {
    "twice": lambda d, w: (w * d(w), w + d(w)),  # the same draw twice: two different values
    "unused": lambda d, w: (d(w), w * 2)[1:],  # a draw nothing reads still advances the generator
    "unused_between": lambda d, w: (lambda a, _, c: (w * a + c,))(d(w), d(w), d(w)),
    "in_no_grad": lambda d, w: (w * _no_grad(d, w), w * d(w)),
    "order": lambda d, w: (lambda a, b: (a * w - b,))(d(w), d(w)),
}


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_random_draws_keep_eager_order_and_generator_state(draw, use):
    def f(w, x):
        return (*USES[use](DRAWS[draw], w), x * 1)

    compare(f, _inputs, atol=0)


# differentiable torch ops that draw (eager's own kernels, opaque to jitcore): the backward must see the forward's draws
RANDOM_DIFFERENTIABLE = {
    "rrelu": lambda x: F.rrelu(x, training=True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, training=True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x, 0.5, training=True),
    "rrelu_twice": lambda x: F.rrelu(x, training=True) * F.rrelu(x * 2, training=True),
}


@pytest.mark.parametrize("where", ["grad", "no_grad_and_grad"])
@pytest.mark.parametrize("op", sorted(RANDOM_DIFFERENTIABLE))
def test_random_differentiable_ops_backward_replays_the_forward_draws(op, where):
    fn = RANDOM_DIFFERENTIABLE[op]

    def f(w, x):
        a = fn(w) + x
        if where == "no_grad_and_grad":
            a = a + _no_grad(fn, w) + fn(w)
        return a

    compare(f, _inputs)


def test_unused_draw_advances_the_generator_like_eager():
    def f(w):
        torch.rand(100)
        return w * 2

    compare(f, lambda: _inputs()[:1], atol=0)
    torch.manual_seed(3)
    f(torch.ones(2))
    eager_next = torch.rand(5)
    jfn = jitcore.jit(f)
    torch.manual_seed(3)
    jfn(torch.ones(2))
    torch.testing.assert_close(torch.rand(5), eager_next, atol=0, rtol=0)


STATE_CALLS = {
    "manual_seed": lambda: torch.manual_seed(3),
    "random.manual_seed": lambda: torch.random.manual_seed(3),
    "seed": torch.seed,
    "initial_seed": torch.initial_seed,
    "get_rng_state": torch.get_rng_state,
    "set_rng_state": lambda: torch.set_rng_state(torch.get_rng_state()),
    "fork_rng": lambda: _draw_in_fork(),
}


def _draw_in_fork():
    with torch.random.fork_rng():  # eager: the draws inside leave the caller's generator as it was
        return torch.rand(2)


@pytest.mark.parametrize("call", sorted(STATE_CALLS))
def test_generator_state_calls_inside_are_refused(call):
    """They would run once, while tracing: later calls' draws would not see them."""
    def f(w):
        a = torch.rand(3, 4)
        STATE_CALLS[call]()
        return w * a + torch.rand(3, 4)

    with pytest.raises(UnsupportedError, match="generator state"):
        jitcore.jit(f)(torch.ones(3, 4))


# -- in-place writes between identical reads -----------------------------------------------------------------------
WRITES = {
    "add_": lambda t, w: t.add_(1),
    "mul_grad": lambda t, w: t.mul_(w),
    "copy_": lambda t, w: t.copy_(w * 3),
    "view_write": lambda t, w: t[:, 1:3].mul_(2),
    "setitem": lambda t, w: t.__setitem__(0, 5.0),
    "no_grad_add_": lambda t, w: _no_grad(lambda u: u.add_(1), t),
    "through_detach": lambda t, w: t.detach().mul_(2),
    "copy_through_detach": lambda t, w: t.detach().copy_(w * 3),
    "no_grad_copy_": lambda t, w: _no_grad(lambda u: u.copy_(w * 3), t),
}
# reads whose backward does not save the written tensor itself (eager refuses that backward after a write)
READS = {"mul2": OPS["mul2"], "add_exp": lambda x: (x + 1).exp(), "softmax": OPS["softmax"],
         "view_scale": lambda x: (x.view(4, 3) * 3).view(3, 4), "sum_add": lambda x: x.sum(-1, keepdim=True) + x}


@pytest.mark.parametrize("start", ["clone_of_grad", "fresh", "written_with_grad"])
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_identical_reads_around_an_in_place_write(write, read, start):
    def f(w, x):
        if start == "clone_of_grad":
            t = w.clone()
        elif start == "fresh":
            t = x.clone()
        else:  # a tensor that gains a gradient through a write: its later writes are recorded too
            t = torch.zeros(3, 4)
            t.add_(w)
        a = READS[read](t)
        WRITES[write](t, w)
        b = READS[read](t)
        with torch.no_grad():
            c = READS[read](t)
        return a + b + c, t * 1

    compare(f, _inputs)


@pytest.mark.parametrize("write", ["mul_", "add_"])
def test_writes_after_a_tensor_gained_a_gradient(write):
    def f(w):
        a = torch.zeros(3, 4)
        a.add_(w)
        getattr(a, write)(2)
        with torch.no_grad():
            c = a * 3
        return a * 3 + c

    compare(f, lambda: _inputs()[:1])


# -- autocast ------------------------------------------------------------------------------------------------------
AUTOCAST_OPS = {
    "matmul": lambda w, x: w @ x.t(),
    "linear": lambda w, x: F.linear(x, w),
    "mm_softmax": lambda w, x: torch.mm(w, x.t()).softmax(-1),
    "mm_layer_norm": lambda w, x: F.layer_norm(torch.mm(w, x.t()), (3,)),
    "addmm": lambda w, x: torch.addmm(x[:, :3], w, x.t()),
    # torch functions jitcore runs as opaque ops: the kernels they call autocast inside
    "inner_opaque": lambda w, x: torch.inner(w, x),
    "chain_matmul_opaque": lambda w, x: torch.chain_matmul(w, x.t(), w),
    "logcumsumexp_opaque": lambda w, x: torch.logcumsumexp(w @ x.t(), 0),
}


def _autocast(fn, w, x, enabled=True):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
        return fn(w, x)


def _autocast_off_inside(fn, w, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return _autocast(fn, w, x, enabled=False)


@pytest.mark.parametrize("region", ["autocast", "off_inside_autocast", "autocast_in_no_grad"])
@pytest.mark.parametrize("op", sorted(AUTOCAST_OPS))
def test_duplicates_inside_and_outside_autocast(op, region):
    fn = AUTOCAST_OPS[op]

    def f(w, x):
        b = fn(w, x)
        if region == "autocast":
            a = _autocast(fn, w, x)
        elif region == "off_inside_autocast":
            a = _autocast_off_inside(fn, w, x)
        else:
            a = _no_grad(lambda u: _autocast(fn, u, x), w)
        return a.float() + fn(w, x) + b, a

    compare(f, _inputs, atol=1e-2)


# -- fusion executors (inductor compiles slowly here: a few cases) ---------------------------------------------------
@pytest.mark.parametrize("case", ["no_grad_duplicate", "random_draws", "in_place_between_reads"])
def test_inductor_keeps_grad_mode_random_order_and_writes(case):
    def f(w, x):
        if case == "no_grad_duplicate":
            with torch.no_grad():
                a = (w * 2).sin()
            return (w * 2).sin() + a + x
        if case == "random_draws":
            torch.rand(3, 4)
            r = torch.rand(3, 4)
            return (w * 2).sin() * r + torch.rand(3, 4) + x
        t = w.clone()
        a = (t * 2).sin()
        t.mul_(x)
        return a + (t * 2).sin()

    compare(f, _inputs, executors=["inductor"], calls=1)
