"""torch.autocast inside the jitted function or around the call: the same casts as eager, recorded in the trace."""
import torch
import torch.nn.functional as F

import jitcore


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
