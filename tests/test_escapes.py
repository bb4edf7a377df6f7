"""Objects that escape a trace: what a jitted call hands back or stores that is not a tensor or a scalar.

Eager semantics: an object the function creates is a new object on every call, holding that call's tensors; an
object the function was given and returns is the caller's own object. Before the epilogue built escaping objects
per call, a jitted function returned the object of its first call every time (with proxies inside where it held
tensors), and a KV-cache decode loop read those proxies back. Every case runs in all three cache modes, over a
sequence of calls with different values, sizes and objects, against eager.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from jitcore.guards.cache import CACHE_MODES


class Box:
    pass


class Slotted:
    __slots__ = ("t",)


def _box(**attrs):
    b = Box()
    b.__dict__.update(attrs)
    return b


def _new_box(x):
    return _box(t=x * 2, items=[x + 1, {"k": x.sum()}], n=3, tag="made")


def _shared(x):
    inner = _box(t=x.cos())
    outer = _box(a=inner, b=inner, lst=[inner])
    outer.me = outer  # a cycle
    return outer, inner


def _given_back(x, holder):
    holder.t = x * 3
    return x + 1, holder


def _given_child(x, holder):
    old = holder.child  # eager hands back the child the call read, not the one it stores afterwards
    holder.child = _box(t=x.exp())
    return old, holder.child


def _stored(x, holder, lst):
    made = _box(t=x.sin(), parent=holder)
    holder.made = made
    lst.append(made)
    return x - 1


def _made_around_given(x, holder):
    return _box(parent=holder, t=x * holder.scale)


def _given_containers(x, lst, d):
    lst.append(x * 2)
    d["n"] = x + 1
    return lst, [d, x], (lst,)


CASES = {  # name -> (function, make the extra arguments from the call index)
    "new_box": (_new_box, lambda i: ()),
    "shared_and_cycle": (_shared, lambda i: ()),
    "given_back": (_given_back, lambda i: (_box(),)),
    "given_child": (_given_child, lambda i: (_box(child=_box(t=torch.full((2,), float(i)))),)),
    "stored": (_stored, lambda i: (_box(), [])),
    "made_around_given": (_made_around_given, lambda i: (_box(scale=2.0),)),
    "given_containers": (_given_containers, lambda i: ([torch.ones(1)], {})),
}


def _compare(ours, ref, our_args, ref_args, memo=None):
    """Same structure and values; where eager returns an argument, ours returns our argument (same position)."""
    memo = {} if memo is None else memo
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, torch.Tensor) and type(ours) is torch.Tensor
        torch.testing.assert_close(ours, ref)
        return
    for mine, theirs in zip(our_args, ref_args):
        if ref is theirs:
            assert ours is mine
            return
    if id(ref) in memo:  # shared references and cycles are shared the same way
        assert memo[id(ref)] is ours
        return
    memo[id(ref)] = ours
    if isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _compare(a, b, our_args, ref_args, memo)
    elif isinstance(ref, dict):
        assert ours.keys() == ref.keys()
        for k in ref:
            _compare(ours[k], ref[k], our_args, ref_args, memo)
    elif isinstance(ref, Box):
        assert type(ours) is Box and vars(ours).keys() == vars(ref).keys()
        for k in vars(ref):
            _compare(getattr(ours, k), getattr(ref, k), our_args, ref_args, memo)
    else:
        assert ours == ref


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_escaping_objects_behave_like_eager_over_calls(name, cache):
    fn, extra = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    previous = []
    for i, n in enumerate((3, 3, 5, 3)):
        x = torch.randn(n) if name != "given_child" else torch.randn(2)
        ours_args, ref_args = (x, *extra(i)), (x.clone(), *extra(i))
        ours, ref = jf(*ours_args), fn(*ref_args)
        _compare(ours, ref, ours_args, ref_args)
        _compare(ours_args[1:], ref_args[1:], (), ())  # what the call stored in its arguments
        for old in previous:  # a new object on every call, as eager makes one
            assert all(o is not old for o in jitcore.ir.pytree.tree_leaves(ours) if isinstance(o, Box))
        previous += [o for o in jitcore.ir.pytree.tree_leaves(ours) if isinstance(o, Box) and
                     all(o is not a for a in ours_args)]
    if cache == "constant values":
        assert jitcore.cache_misses(jf) == (1 if name == "given_child" else 2)  # sizes 3 and 5


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_made_object_keeps_its_tensors_gradients(cache):
    w = torch.randn(4, requires_grad=True)
    w2 = w.detach().clone().requires_grad_(True)

    def f(x, w):
        return _box(y=(x * w).tanh(), aux=[w.sum()])

    jf = jitcore.jit(f, cache=cache)
    for n in (4, 4):
        x = torch.randn(n)
        out, ref = jf(x, w), f(x, w2)
        (out.y.sum() + out.aux[0]).backward()
        (ref.y.sum() + ref.aux[0]).backward()
        torch.testing.assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_an_object_that_cannot_be_built_again_is_refused_loudly(cache):
    def f(x):
        s = Slotted()
        s.t = x * 2
        return s

    with pytest.raises(UnsupportedError, match="Slotted holding tensors"):
        jitcore.jit(f, cache=cache)(torch.randn(3))


# -- the KV-cache pattern: a cache object made by the first call, passed back and grown by the next ones ---------
class Layer:
    def __init__(self):
        self.keys = None

    def update(self, k):
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=-2)
        return self.keys


class KVCache:
    def __init__(self, n):
        self.layers = [Layer() for _ in range(n)]


def _attend(x, cache=None):
    cache = KVCache(2) if cache is None else cache
    out = x
    for layer in cache.layers:
        keys = layer.update(out * 2)
        out = out + keys.softmax(-2).mean(-2, keepdim=True)
    return out, cache


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_growing_cache_decodes_like_eager_and_compiles_twice_under_symbolic_values(cache):
    jf = jitcore.jit(_attend, cache=cache)
    x = torch.randn(1, 2, 5, 4)
    ours, ours_cache = jf(x)
    ref, ref_cache = _attend(x)
    for _ in range(5):
        step = torch.randn(1, 2, 1, 4)
        (ours, ours_cache), (ref, ref_cache) = jf(step, cache=ours_cache), _attend(step, cache=ref_cache)
        torch.testing.assert_close(ours, ref)
        for a, b in zip(ours_cache.layers, ref_cache.layers):
            assert type(a.keys) is torch.Tensor
            torch.testing.assert_close(a.keys, b.keys)
    if cache == "symbolic values":
        assert jitcore.cache_misses(jf) == 2  # the prefill and the decode step


# -- a generator for the class: random graphs of made and given objects, handed back and stored ----------------------
OPS = (lambda x: x * 2, lambda x: x.sin(), lambda x: x.sum(), lambda x: x[:1] + 1)


def _build(spec, x, given, made):
    kind, body = spec
    if kind == "tensor":
        return OPS[body](x)
    if kind == "given":
        return given[body]
    if kind == "ref":
        return made[body % len(made)] if made else x
    if kind == "scalar":
        return body
    items = [_build(s, x, given, made) for s in body]
    if kind == "made":
        obj = Box()
        made.append(obj)
        for i, v in enumerate(items):
            setattr(obj, f"a{i}", v)
        return obj
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    return {f"k{i}": v for i, v in enumerate(items)}


def _specs():
    from hypothesis import strategies as st

    leaf = st.one_of(st.tuples(st.just("tensor"), st.integers(0, len(OPS) - 1)),
                     st.tuples(st.just("given"), st.integers(0, 1)),
                     st.tuples(st.just("ref"), st.integers(0, 3)),
                     st.tuples(st.just("scalar"), st.sampled_from([0, 1.5, "s", None])))
    return st.recursive(leaf, lambda inner: st.tuples(st.sampled_from(["made", "made", "list", "tuple", "dict"]),
                                                      st.lists(inner, min_size=1, max_size=3)), max_leaves=8)


def test_random_object_graphs_escape_like_eager():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(spec=_specs(), store=st.booleans(), cache=st.sampled_from(CACHE_MODES))
    def check(spec, store, cache):
        def f(x, g0, g1):
            out = _build(spec, x, [g0, g1], [])
            if store:
                g0.stored = out
            return out, x

        jf = jitcore.jit(f, cache=cache)
        seen = []
        for n in (3, 3, 4):
            x = torch.randn(n)
            ours_args, ref_args = (x, _box(v=1), _box(v=2)), (x, _box(v=1), _box(v=2))
            ours, ref = jf(*ours_args), f(*ref_args)
            _compare(ours, ref, ours_args, ref_args)
            _compare(ours_args[1:], ref_args[1:], (), ())
            made = [o for o in jitcore.ir.pytree.tree_leaves(ours) if isinstance(o, Box) and
                    all(o is not a for a in ours_args)]
            assert all(o is not old for o in made for old in seen)
            seen += made

    check()
