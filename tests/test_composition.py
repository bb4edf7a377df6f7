"""Composition: jitted functions and modules called inside jitted programs are inlined (one program, the inner
cache untouched), generator functions are refused at jit(), executors given by name, and custom kernels that are
lambdas or closures print and run as themselves. Torch eager is the oracle."""
import pytest
import torch

import jitcore
from executors import OperatorExecutor
from jitcore.errors import UnsupportedError
from jitcore.guards.cache import CACHE_MODES
from jitcore.ops import ltorch, prims


def _grads(fn, *inputs):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*inputs)
    out.sum().backward()
    return out.detach(), [t.grad for t in inputs]


def _inner(x, w):
    return torch.tanh(x @ w) * 2


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_jitted_function_inside_jitted_function(cache):
    jinner = jitcore.jit(_inner, cache=cache)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    jinner(x, w)  # the inner one has its own entry first
    misses, hits = jitcore.cache_misses(jinner), jitcore.cache_hits(jinner)

    def outer(x, w):
        return jinner(x, w).relu() + jinner(x * 2, w).sum(0)

    def eager(x, w):
        return _inner(x, w).relu() + _inner(x * 2, w).sum(0)

    jouter = jitcore.jit(outer, cache=cache)
    for n in (4, 6):  # a second size: a hit under symbolic values, a new entry otherwise, eager's answer both ways
        x = torch.randn(n, 3)
        got, got_grads = _grads(jouter, x, w)
        want, want_grads = _grads(eager, x, w)
        torch.testing.assert_close(got, want)
        for g, e in zip(got_grads, want_grads):
            torch.testing.assert_close(g, e)
    # one program: the inner calls are lines of the outer trace, and the inner cache saw none of them
    assert "tanh" in str(jitcore.last_traces(jouter)[0])
    assert (jitcore.cache_misses(jinner), jitcore.cache_hits(jinner)) == (misses, hits)
    got, got_grads = _grads(jinner, x, w)  # still works standalone
    want, want_grads = _grads(_inner, x, w)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grads[1], want_grads[1])


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)  # an in-place buffer update: the epilogue writes it back on the inner model
        return torch.nn.functional.gelu(self.lin(x))


class _Model(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block
        self.head = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.block(x) + x)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_jitted_submodule_inside_jitted_model(cache):
    torch.manual_seed(0)
    block = _Block()
    jblock = jitcore.jit(block, cache=cache)
    model = _Model(jblock)  # a jitted submodule
    ref = _Model(_Block())
    ref.load_state_dict(model.state_dict())
    jmodel = jitcore.jit(model, cache=cache)
    for n in (2, 5):
        x = torch.randn(n, 3)
        got = jmodel(x)
        want = ref(x)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    torch.testing.assert_close(block.count, ref.block.count)  # the in-place buffer update, twice
    assert jitcore.cache_misses(jblock) == 0 and jitcore.cache_hits(jblock) == 0
    x = torch.randn(3, 3)
    torch.testing.assert_close(jblock(x), ref.block(x))  # standalone afterwards
    torch.testing.assert_close(block.count, ref.block.count)


def test_inner_jitted_function_swapped_in_a_global_is_a_miss():
    """The outer program read the inner one through a global: rebinding the global must not reuse it."""
    global _swapped
    _swapped = jitcore.jit(torch.sin)

    def outer(x):
        return _swapped(x) + 1

    jouter = jitcore.jit(outer)
    x = torch.randn(3)
    torch.testing.assert_close(jouter(x), torch.sin(x) + 1)
    _swapped = jitcore.jit(torch.cos)
    torch.testing.assert_close(jouter(x), torch.cos(x) + 1)


def test_jitted_function_passed_as_an_argument():
    """A jitted function (or a plain one) handed to the jitted program: the next call with another must not reuse
    the program traced with the first."""
    def apply(f, x):
        return f(x) * 2

    japply = jitcore.jit(apply)
    x = torch.randn(3)
    for f, ref in ((jitcore.jit(torch.sin), torch.sin), (jitcore.jit(torch.cos), torch.cos), (torch.exp, torch.exp),
                   (lambda t: t + 1, lambda t: t + 1)):
        torch.testing.assert_close(japply(f, x), ref(x) * 2)


def _gen(x):
    for i in range(3):
        yield x * i


class _GenModule(torch.nn.Module):
    def forward(self, x):
        yield x


class _GenCallable:
    def __call__(self, x):
        yield x


@pytest.mark.parametrize("fn", [_gen, _GenModule(), _GenCallable()], ids=["function", "module", "callable"])
def test_generator_function_is_refused_at_jit(fn):
    with pytest.raises(UnsupportedError, match=r"(?s)generator function.*loop body"):
        jitcore.jit(fn)


def test_generator_returned_is_refused_and_generators_inside_work():
    def returns_gen(x):
        return (x * i for i in range(3))

    with pytest.raises(UnsupportedError, match="returned a generator"):
        jitcore.jit(returns_gen)(torch.randn(3))

    def uses_gen(x):
        return sum(v for v in _gen(x)), tuple(x + i for i in range(2))

    x = torch.randn(3)
    got, want = jitcore.jit(uses_gen)(x), uses_gen(x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("executors", ["inductor", ["inductor", "torch"], ("torch",)])
def test_executors_by_name(executors):
    def f(x):
        return (x.sin() * 2).exp()

    x = torch.randn(4, requires_grad=True)
    jf = jitcore.jit(f, executors=executors)
    got, want = jf(x), f(x)
    torch.testing.assert_close(got, want)
    names = {ex.name for ex in jf.options.executors}
    assert {"torch", "python"} <= names
    if "inductor" in executors:
        assert "inductor" in names


@pytest.mark.parametrize("executors", ["nope", ["torch", "bogus"]])
def test_unknown_executor_name_is_a_clear_error(executors):
    with pytest.raises(ValueError, match=r"unknown executor .*known: .*inductor"):
        jitcore.jit(torch.sin, executors=executors)


def test_lambda_and_closure_kernels():
    """Kernels that are lambdas or closures sharing a name: each prints as a valid name and runs as itself."""
    ex = OperatorExecutor("comp-test ex")
    ex.register_implementation(ltorch.sin, lambda a: torch.sin(a) + 100)

    def make(k):
        def impl(a):
            return torch.cos(a) + k

        return impl

    ex.register_implementation(ltorch.cos, make(10), checker=lambda a: True)
    ex.register_implementation(ltorch.exp, lambda a: torch.exp(a) + 20)
    ex.register_implementation(ltorch.neg, make(30))

    def f(x):
        return x.sin(), x.cos(), x.exp(), x.neg()

    x = torch.randn(3)
    jf = jitcore.jit(f, executors=[ex])
    got = jf(x)
    want = (x.sin() + 100, x.cos() + 10, x.exp() + 20, x.cos() + 30)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    text = str(jitcore.last_traces(jf)[-1])
    assert "<lambda>" not in text and "comp_test_ex.impl(" in text and "comp_test_ex.impl_1(" in text
    compile(text, "<trace>", "exec")  # the printed text is valid Python


class _Scaler:
    def __init__(self, k):
        self.k = k

    def times(self, x):
        return x * self.k

    def plus(self, x):
        return x + self.k


def test_callables_passed_as_arguments_are_guarded_by_what_runs():
    """Builtins, classes, bound methods and partials handed in: each call runs the one it was given."""
    import functools

    def apply(f, x):
        return f(x)

    japply = jitcore.jit(apply)
    x = torch.randn(3)
    a, b = _Scaler(2.0), _Scaler(3.0)
    cases = [torch.sin, torch.cos, a.times, a.plus, b.times, functools.partial(torch.mul, other=2.0),
             functools.partial(torch.mul, other=5.0), functools.partial(torch.add, other=1.0)]
    for f in cases + cases:
        torch.testing.assert_close(japply(f, x), f(x))

    def build(cls, x):
        return cls(2.0).times(x)

    jbuild = jitcore.jit(build)
    for cls in (_Scaler, _Halver, _Scaler, _Halver):
        torch.testing.assert_close(jbuild(cls, x), build(cls, x))


class _Halver(_Scaler):
    def times(self, x):
        return x / self.k


def test_operator_with_a_lambda_kernel_and_an_odd_name():
    ex = OperatorExecutor("comp-test ops")
    twice = ex.register_operator("twice plus-one", like=prims.sin, fn=lambda a: a * 2 + 1)

    def f(x):
        return twice(x).cos()

    x = torch.randn(3)
    jf = jitcore.jit(f, executors=[ex])
    torch.testing.assert_close(jf(x), (x * 2 + 1).cos())
    assert "comp_test_ops.twice_plus_one(" in str(jitcore.last_traces(jf)[-1])


def test_error_inside_an_inlined_jitted_function_shows_its_frames():
    import traceback

    def inner(x):
        return x.view(7)

    jinner = jitcore.jit(inner)

    def outer(x):
        return jinner(x) + 1

    with pytest.raises(RuntimeError, match="invalid for input of size 3") as info:
        jitcore.jit(outer)(torch.randn(3))
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__) if f.filename == __file__]
    assert names[-2:] == ["outer", "inner"]


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


class _Outer(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return self.block(x) + 1


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_changes_inside_an_inlined_submodule_are_seen(cache):
    """The outer program read the jitted submodule's model through it: replacing its layers, its attributes, or the
    jitted submodule itself gives eager's answer on the next call."""
    block = _Scaled()
    model = _Outer(jitcore.jit(block, cache=cache))
    jmodel = jitcore.jit(model, cache=cache)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jmodel(x), block(x) + 1)
    block.lin = torch.nn.Linear(3, 3)
    torch.testing.assert_close(jmodel(x), block(x) + 1)
    block.scale = 5.0
    torch.testing.assert_close(jmodel(x), block(x) + 1)
    other = _Scaled()
    model.block = jitcore.jit(other, cache=cache)
    torch.testing.assert_close(jmodel(x), other(x) + 1)
    other.lin = torch.nn.Identity()
    torch.testing.assert_close(jmodel(x), x * 2 + 1)


def test_jit_of_a_jitted_function_and_module():
    def f(x):
        return x.sin() * 2

    x = torch.randn(3, requires_grad=True)
    jj = jitcore.jit(jitcore.jit(f))
    torch.testing.assert_close(jj(x), f(x))
    lin = torch.nn.Linear(3, 2)
    jm = jitcore.jit(jitcore.jit(lin))
    out = jm(torch.ones(2, 3))
    out.sum().backward()
    torch.testing.assert_close(out, lin(torch.ones(2, 3)))
    torch.testing.assert_close(lin.bias.grad, torch.full((2,), 2.0))
