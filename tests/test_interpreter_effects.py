"""Interpreter: side effects on external objects are applied, logged in order, and undone afterwards."""
from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.interpreter import DefaultContext, Global, interpret

COUNTER = 0
REGISTRY: list = []
TABLE: dict = {"a": 1}


class Obj:
    def __init__(self):
        self.x = 1


def test_global_write_logged_and_undone():
    def f(v):
        global COUNTER
        COUNTER += v
        seen = COUNTER
        COUNTER += 1
        return seen

    res = interpret(f, (5,), {}, DefaultContext())
    assert res.output == 5
    assert COUNTER == 0
    assert [(e.kind, e.key, e.value) for e in res.side_effects] == [("setglobal", "COUNTER", 5),
                                                                    ("setglobal", "COUNTER", 6)]
    assert res.side_effects[0].target == Global(__name__, "COUNTER")
    assert str(res.side_effects[0]) == "globals()['COUNTER'] = 5"


def test_new_global_deleted_after():
    def f(v):
        global BRAND_NEW
        BRAND_NEW = v
        return BRAND_NEW

    assert interpret(f, (3,), {}, DefaultContext()).output == 3
    assert "BRAND_NEW" not in globals()


def test_attribute_writes_on_args_undone():
    o = Obj()

    def f(obj):
        obj.x = 10
        obj.y = obj.x + 1
        del obj.x
        name = "z"
        setattr(obj, name, 3)
        return obj.y, hasattr(obj, "x")

    res = interpret(f, (o,), {}, DefaultContext())
    assert res.output == (11, False)
    assert o.__dict__ == {"x": 1}
    kinds = [(e.kind, str(e.target), e.key) for e in res.side_effects]
    assert kinds == [("setattr", "args[0]", "x"), ("setattr", "args[0]", "y"), ("delattr", "args[0]", "x"),
                     ("setattr", "args[0]", "z")]


def test_external_containers_mutations_undone():
    lst, d, s = [1, 2], {"k": 1}, {1}

    def f(a, b, c):
        a.append(3)
        a.extend([4, 5])
        a[0] = 100
        a.pop()
        a.sort(reverse=True)
        b["new"] = 2
        b.update(z=3)
        del b["k"]
        c.add(2)
        c.discard(1)
        REGISTRY.append(len(a))
        TABLE.setdefault("b", 2)
        app = a.append
        app(7)
        return list(a), dict(b), set(c), list(REGISTRY), dict(TABLE)

    res = interpret(f, (lst, d, s), {}, DefaultContext())
    assert res.output == ([100, 4, 3, 2, 7], {"new": 2, "z": 3}, {2}, [4], {"a": 1, "b": 2})
    assert lst == [1, 2] and d == {"k": 1} and s == {1} and REGISTRY == [] and TABLE == {"a": 1}
    text = [str(e) for e in res.side_effects]
    assert text[:3] == ["args[0].append(3)", "args[0].extend([4, 5])", "args[0][0] = 100"]
    assert "globals()['REGISTRY'].append(4)" in text
    assert "args[0].append(7)" in text


def test_internal_objects_are_not_side_effects():
    def f(v):
        o = Obj()
        o.x = v
        lst = []
        lst.append(v)
        d = {}
        d["a"] = v
        return o.x, lst, d

    res = interpret(f, (4,), {}, DefaultContext())
    assert res.output == (4, [4], {"a": 4})
    assert res.side_effects == []


def test_undo_on_failure():
    o = Obj()
    lst = [1]

    def f(obj, xs):
        global COUNTER
        obj.x = 99
        xs.append(2)
        COUNTER = 42
        raise KeyError("boom")

    with pytest.raises(KeyError):
        interpret(f, (o, lst), {}, DefaultContext())
    assert o.x == 1 and lst == [1] and COUNTER == 0


def test_nonlocal_cell_of_outer_function_is_side_effect():
    state = 0

    def f(v):
        nonlocal state
        state += v
        return state

    res = interpret(f, (2,), {}, DefaultContext())
    assert res.output == 2 and state == 0
    assert [e.kind for e in res.side_effects] == ["setcell"]
    assert str(res.side_effects[0].target) == "fn.__closure__['state']"


def test_class_attribute_write_undone():
    class K:
        count = 0

    def f(v):
        K.count += v
        K.extra = 1
        return K.count

    assert interpret(f, (3,), {}, DefaultContext()).output == 3
    assert K.count == 0 and not hasattr(K, "extra")


def test_module_setattr_side_effect_and_undo():
    torch = pytest.importorskip("torch")
    m = torch.nn.Linear(2, 2)
    old_w = m.weight
    new_buf = torch.zeros(2)

    def f(mod, b):
        mod.register_buffer("running", b)
        mod.step = 3
        mod.weight = torch.nn.Parameter(torch.ones(2, 2))
        return mod.step, mod.running.sum()

    res = interpret(f, (m, new_buf), {}, DefaultContext())
    assert res.output[0] == 3
    assert m.weight is old_w and "running" not in m._buffers and not hasattr(m, "step")
    assert res.side_effects, "writes to an external module are logged"


class _Holder:
    pass


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_reading_back_what_the_call_wrote_into_an_argument(cache):
    """A value the call wrote into an argument's attribute or list item and reads back is the program's own (a KV
    cache's `self.keys = torch.cat([self.keys, k])`, then `self.keys.sum()`): no guard on it, eager's results and
    effects over a sequence of calls (before: an internal error, the prologue rejected its own call)."""
    def f(x, c):
        c.t = torch.cat([c.t, x], dim=1)
        c.items[0] = c.items[0] + x.sum()
        return c.t.sum(1) * c.t.shape[1] + c.items[0].exp()

    def holder():
        h = _Holder()
        h.t, h.items = torch.ones(2, 3), [torch.zeros(())]
        return h

    mine, theirs = holder(), holder()
    jf = jitcore.jit(f, cache=cache)
    for _ in range(3):
        x = torch.randn(2, 1)
        torch.testing.assert_close(jf(x, mine), f(x, theirs))
        torch.testing.assert_close(mine.t, theirs.t)
        torch.testing.assert_close(mine.items[0], theirs.items[0])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("move", ["pop", "insert", "del", "slice", "extend_then_pop"])
def test_items_that_moved_into_a_written_position_come_from_outside(cache, move):
    """After a write into an argument's list, a mutator, delete or slice write moves other items: what the call reads
    at the written position may be the caller's tensor, which must stay an input (each call passes new values)."""
    def f(x, items):
        items[0] = x * 2
        if move == "pop":
            items.pop(0)
        elif move == "insert":
            items.insert(0, items[2])
        elif move == "del":
            del items[0]
        elif move == "slice":
            items[0:1] = []
        else:
            items.extend([x])
            items.pop(0)
        return items[0] + items[1]

    jf = jitcore.jit(f, cache=cache)
    for _ in range(3):
        x, a, b, c = (torch.randn(3) for _ in range(4))
        mine, theirs = [a, b, c], [a, b, c]
        torch.testing.assert_close(jf(x, mine), f(x, theirs))
        assert len(mine) == len(theirs) and all(m is t or torch.equal(m, t) for m, t in zip(mine, theirs))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_a_moved_number_equal_to_another_item_is_guarded_where_it_came_from(cache):
    """[1, 2, 1]: after pop(0) the call reads the last 1, which is the first 1 by identity too; both places are
    guarded, so [1, 2, 5] is not a stale hit."""
    def f(x, items):
        first = items.pop(0)
        return x * items[1] + first

    jf = jitcore.jit(f, cache=cache)
    for values in ([1, 2, 1], [1, 2, 5], [3, 2, 1], [1, 2, 1]):
        x = torch.randn(3)
        torch.testing.assert_close(jf(x, list(values)), f(x, list(values)))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_type_of_a_value_is_eagers_class(cache):
    """type() inside jitted code answers as eager's objects do: torch.Tensor (nn.Parameter for parameters), int and
    float for symbolic numbers; `type(x) is torch.Tensor` was False (the proxy's class), a silent wrong branch."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, n):
            facts = [type(x) is torch.Tensor, type(x).__name__ == "Tensor", type(self.lin.weight) is torch.nn.Parameter,
                     type(x.shape[0]) is int, type(n) is float]
            y = type(x).sum(self.lin(x), -1) + type(x).softmax(x, -1).sum(-1)
            return y * sum(2 ** i for i, f in enumerate(facts) if f)

    m = M()
    jm = jitcore.jit(m, cache=cache)
    for b in (3, 5):
        x = torch.randn(b, 4)
        torch.testing.assert_close(jm(x, 1.5), m(x, 1.5))
