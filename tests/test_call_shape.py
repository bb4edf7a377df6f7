"""The call's shape is guarded: generated call sequences (more or fewer positional arguments, keywords present or
absent, *args of other lengths, **kwargs with other keys, changed __defaults__/__kwdefaults__) against eager, for
functions, bound methods, callable objects and modules, in every cache mode: the same results, and eager's
TypeError (same message) where a call does not bind.
"""
from __future__ import annotations

import functools
import itertools
import random
import types
import zlib

import pytest
import torch
from torch import nn

import jitcore

MODES = ["constant values", "symbolic values", "no caching"]


# -- signatures: every parameter changes the result, so binding it wrongly shows -----------------------------------
def pos2(a, b):
    return a + 2 * b


def defaults(x, scale=2.0, shift=1):
    return x * scale + shift


def kwonly(x, *, flag=False, k=3):
    return -x * k if flag else x * k


def kwonly_required(x, *, w, bias=0.5):
    return x * w + bias


def star(x, *rest):
    for i, r in enumerate(rest):
        x = x + (i + 1) * r
    return x * (len(rest) + 1)


def starkw(x, **kw):
    for i, name in enumerate(sorted(kw)):
        x = x * (i + 2) + kw[name] * len(name)
    return x


def posonly(x, y=3.0, /, z=1.5):
    return x * y + z


def mixed(x, y=0.25, *args, z=2.0, **kw):
    out = x * y + z
    for a in args:
        out = out - a
    for name in sorted(kw):
        out = out * len(name) + kw[name]
    return out


class Scaler:
    def __init__(self, k):
        self.k = k

    def method(self, x, y=1.5, *, neg=False):
        out = x * self.k + y
        return -out if neg else out

    def __call__(self, x, *more, bias=0.0):
        return x * (len(more) + self.k) + sum(more) + bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None, scale=1.0, *, shift=0.0):
        y = self.lin(x)
        if mask is not None:
            y = y * mask
        return y * scale + shift


def _x():
    return torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7


# name -> (callable maker, positional value pool, keyword value pool): keyword pools hold names the signature lacks
def _cases():
    x, t = _x(), torch.full((3, 4), 0.5)
    tensor_kw = {"a": t, "b": t, "bogus": t}
    return {
        "pos2": (lambda: pos2, [x, t, t], tensor_kw),
        "defaults": (lambda: _copy(defaults), [x, 3.0, 2, 4.0], {"scale": 0.5, "shift": 2.0, "x": x, "other": 1.0}),
        "kwonly": (lambda: _copy(kwonly), [x, t], {"flag": True, "k": 2.0, "bogus": 1}),
        "kwonly_required": (lambda: _copy(kwonly_required), [x, t], {"w": t, "bias": 1.0, "x": x}),
        "star": (lambda: star, [x, t, 2.0, t], {"rest": t}),
        "starkw": (lambda: starkw, [x, t], {"p": t, "qq": 2.0, "rrr": t, "x": x}),
        "posonly": (lambda: _copy(posonly), [x, 2.0, 3.0, 4.0], {"y": 5.0, "z": 0.5, "x": x}),
        "mixed": (lambda: _copy(mixed), [x, 0.5, t, 2.0], {"z": 1.0, "y": 3.0, "extra": t, "kk": 2.0}),
        "method": (lambda: Scaler(2.0).method, [x, 0.5, t], {"y": 2.0, "neg": True, "self": 1}),
        "callable_object": (lambda: Scaler(3.0), [x, t, 2.0], {"bias": 1.0, "more": t}),
        "module": (_net, [x, torch.ones(3, 4).tril(), 2.0], {"mask": torch.rand(3, 4), "scale": 0.5, "shift": 1.0,
                                                           "bias": 1.0}),
    }


def _net():
    torch.manual_seed(0)
    return Net()


def _copy(fn):
    """A fresh function object (tests change its defaults)."""
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    new.__qualname__ = fn.__qualname__
    return new


def _variants(pos_pool, kw_pool):
    """Every (number of positional arguments, keyword names) with at most two keywords."""
    names = sorted(kw_pool)
    subsets = [c for r in range(3) for c in itertools.combinations(names, r)]
    return [(n, kws) for n in range(len(pos_pool) + 1) for kws in subsets]


def _outcome(fn, args, kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # the class and message are compared with eager's
        return type(e), str(e)


def _assert_same(got, want, what):
    assert got[0] == want[0], f"{what}: jit gave {got}, eager {want}"
    if want[0] == "ok":
        torch.testing.assert_close(got[1], want[1], msg=lambda m: f"{what}: {m}")
    else:
        assert got[1] == want[1], f"{what}: jit raised {got[1]!r}, eager {want[1]!r}"


def _sequence(variants, seed):
    """Every variant once in a shuffled order, then a shuffled half again (hits on older entries)."""
    rng = random.Random(seed)
    order = variants[:]
    rng.shuffle(order)
    again = order[: len(order) // 2]
    rng.shuffle(again)
    return order + again


@pytest.mark.filterwarnings("ignore:jitcore. this function has been compiled")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(_cases()))
def test_call_sequences_match_eager(name, mode):
    make, pos_pool, kw_pool = _cases()[name]
    fn = make()
    jfn = jitcore.jit(fn, cache=mode)
    bound = 0
    for n, kws in _sequence(_variants(pos_pool, kw_pool), seed=zlib.crc32(name.encode())):
        args, kwargs = tuple(pos_pool[:n]), {k: kw_pool[k] for k in kws}
        want = _outcome(fn, args, kwargs)
        _assert_same(_outcome(jfn, args, kwargs), want, f"{name}(*{n} args, {list(kws)})")
        bound += want[0] == "ok"
    assert bound >= 4, "the generated calls should bind in several ways"
    if mode != "no caching":
        assert jitcore.cache_hits(jfn) > 0


_DEFAULT_CHANGES = [
    ("__defaults__", lambda d: None if d is None else tuple(v * 2 if isinstance(v, float) else v for v in d)),
    ("__defaults__", lambda d: None if d is None else tuple(int(v) if isinstance(v, float) else v for v in d)),
    ("__defaults__", lambda d: None if d is None else d[1:]),
    ("__defaults__", lambda d: None),
    ("__kwdefaults__", lambda d: None if d is None else {k: (not v) if isinstance(v, bool) else v + 1
                                                         for k, v in d.items()}),
    ("__kwdefaults__", lambda d: None if d is None else dict(list(d.items())[1:])),
]


def _wrapped(fn):
    """A decorator's wrapper (functools.wraps): the defaults are the wrapped function's."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def _with_defaults(name):
    """(callable, the function whose defaults it uses): a bound method or module of a fresh class (the test
    changes the defaults of its function); "wrapped_*": behind a decorator."""
    make = _cases()[name.removeprefix("wrapped_")][0]
    if name == "wrapped_defaults":
        fn = make()
        return _wrapped(fn), fn
    if name == "wrapped_module":
        forward = _copy(Net.forward)
        torch.manual_seed(0)
        return type("WrappedNet", (Net,), {"forward": _wrapped(forward)})(), forward
    if name == "method":
        cls = type("FreshScaler", (Scaler,), {"method": _copy(Scaler.method)})
        return cls(2.0).method, cls.method
    if name == "module":
        cls = type("FreshNet", (Net,), {"forward": _copy(Net.forward)})
        torch.manual_seed(0)
        return cls(), cls.forward
    fn = make()
    return fn, fn


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["defaults", "kwonly", "kwonly_required", "posonly", "mixed", "method", "module",
                                  "wrapped_defaults", "wrapped_module"])
def test_changed_defaults_miss(name, mode):
    """After calls that used the defaults, each change of __defaults__ / __kwdefaults__ (new values, int for float,
    fewer, none; in place or replaced) gives eager's result or eager's TypeError; changing back hits again."""
    _, pos_pool, kw_pool = _cases()[name.removeprefix("wrapped_")]
    fn, owner = _with_defaults(name)
    jfn = jitcore.jit(fn, cache=mode)
    calls = [(1, ()), (2, ()), (1, tuple(k for k in ("w",) if k in kw_pool))]
    original = (owner.__defaults__, dict(owner.__kwdefaults__) if owner.__kwdefaults__ else None)
    for attr, change in _DEFAULT_CHANGES:
        for step in ("changed", "restored"):
            if step == "changed":
                setattr(owner, attr, change(getattr(owner, attr)))
            else:
                owner.__defaults__, owner.__kwdefaults__ = original[0], dict(original[1]) if original[1] else None
            for n, kws in calls:
                args, kwargs = tuple(pos_pool[:n]), {k: kw_pool[k] for k in kws}
                _assert_same(_outcome(jfn, args, kwargs), _outcome(fn, args, kwargs), f"{attr} {step}: {n}, {kws}")
    if mode != "no caching":
        assert jitcore.cache_hits(jfn) > 0


def test_kwdefaults_changed_in_place():
    fn = _copy(kwonly)
    jfn = jitcore.jit(fn)
    x = _x()
    torch.testing.assert_close(jfn(x), fn(x))
    fn.__kwdefaults__["flag"] = True
    torch.testing.assert_close(jfn(x), fn(x))
    assert any("__kwdefaults__['flag']" in r for r in jitcore.cache_miss_reasons(jfn))


@pytest.mark.parametrize("mode", MODES)
def test_tensor_default_is_an_input(mode):
    w = torch.nn.Parameter(torch.ones(4))

    def f(x, w=w):
        return (x * w).sum()

    jf = jitcore.jit(f, cache=mode)
    x = _x()
    for _ in range(2):
        w.data.mul_(3)  # the default tensor is read on every call, not baked in
        got, want = jf(x), f(x)
        torch.testing.assert_close(got, want)
        (grad,) = torch.autograd.grad(got, w)
        torch.testing.assert_close(grad, torch.autograd.grad(want, w)[0])
    assert jitcore.cache_hits(jf) == (0 if mode == "no caching" else 1)


@pytest.mark.parametrize("mode", MODES[:2])
def test_miss_reason_and_printed_check(mode):
    jf = jitcore.jit(pos2, cache=mode)
    x = _x()
    jf(x, x)
    with pytest.raises(TypeError, match=r"^pos2\(\) takes 2 positional arguments but 3 were given$"):
        jf(x, x, x)
    jf(x, b=x)
    assert jitcore.cache_miss_reasons(jf)[-1].endswith("call shape: expected 2 positional arguments, got 1")
    hot, full = jitcore.last_prologue_traces(jf)
    assert "if len(args) != 1 or len(kwargs) != 1 or 'b' not in kwargs: return None" in str(full)
    assert "len(args)" not in str(hot)  # the signature key has the call's shape
    jk = jitcore.jit(kwonly, cache=mode)
    jk(x)
    jk(x, flag=True)
    assert jitcore.cache_miss_reasons(jk)[-1].endswith("call shape: expected no keyword arguments, got ['flag']")
    with pytest.raises(TypeError, match=r"^kwonly\(\) takes 1 positional argument but 2 were given$"):
        jk(x, x)
    assert jitcore.cache_misses(jk) == 2  # a call that does not bind is not traced


def inner(a, b=1.0, /, c=2.0, *, d, e=0.5):
    return a * b + c * d + e


@pytest.mark.parametrize("n", range(5))
def test_nested_call_binding_errors_match_eager(n):
    """A call inside the jitted function that does not bind raises CPython's own TypeError (the interpreter binds
    it): every keyword subset of inner's names and one it lacks, with n positional arguments."""
    x = _x()
    for r in range(4):
        for kws in itertools.combinations(["a", "b", "c", "d", "z"], r):
            def outer(t, kws=kws):
                return inner(*[t] * n, **dict.fromkeys(kws, t))

            _assert_same(_outcome(jitcore.jit(outer), (x,), {}), _outcome(outer, (x,), {}), f"inner({n}, {kws})")


def test_module_with_pre_hook_binds_after_the_hook():
    net = _net()
    net.register_forward_pre_hook(lambda m, args: args[:1])  # drops extra positional arguments
    jnet = jitcore.jit(net)
    x = _x()
    for args in [(x,), (x, torch.zeros(3, 4)), (x,)]:
        torch.testing.assert_close(jnet(*args), net(*args))
    for kwargs in [{"bogus": x}, {"x": x}]:  # forward does not bind: its TypeError, raised by the interpreter
        _assert_same(_outcome(jnet, (x,), kwargs), _outcome(net, (x,), kwargs), str(kwargs))


def _gpt2():
    tr = pytest.importorskip("transformers")
    tr.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = tr.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                           eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return tr.GPT2LMHeadModel(config).eval()


def test_gpt2_optional_arguments():
    model = _gpt2()
    jm = jitcore.jit(model)
    ids = torch.randint(0, 128, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding: the masked logits differ from the unmasked ones
    pools = {"attention_mask": mask, "labels": ids}
    calls = [((ids,), {})]
    calls += [((ids,), {k: pools[k] for k in kws}) for r in (1, 2) for kws in itertools.combinations(pools, r)]
    calls += [((), {"input_ids": ids}), ((), {"input_ids": ids, "labels": ids}), ((ids,), {})]
    calls += [((ids,), {"labels": ids, "bogus": 1})]
    with torch.no_grad():
        for args, kwargs in calls + calls[::-1]:
            want, got = _outcome(model, args, kwargs), _outcome(jm, args, kwargs)
            what = f"gpt2({len(args)} args, {sorted(kwargs)})"
            assert got[0] == want[0], f"{what}: {got} vs {want}"
            if want[0] != "ok":
                continue
            torch.testing.assert_close(got[1].logits, want[1].logits, atol=1e-5, rtol=1e-5)
            assert (got[1].loss is None) == (want[1].loss is None), what
            if want[1].loss is not None:
                torch.testing.assert_close(got[1].loss, want[1].loss, atol=1e-5, rtol=1e-5)
    assert jitcore.cache_hits(jm) >= len(calls) - 1
