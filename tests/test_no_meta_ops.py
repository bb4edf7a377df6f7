"""Torch ops with no meta kernel still run (issue 17, item 2).

The opaque fallback learns such an op's outputs from a run on this call's values (computed from clones of the real
inputs, the RNG state restored, the inputs untouched): sizes it depends on are pinned, output sizes that depend on
values are guarded (the prologue recomputes them), and Python results (torch.equal, torch.allclose) go through the
data guards. Each case runs over calls whose values change the answer, in every cache mode, against eager.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore.errors import DataDependentError
from jitcore.guards.cache import CACHE_MODES


def _ctc(x):
    targets = torch.tensor([[1, 2, 2], [1, 3, 1]])
    lengths = torch.tensor([x.shape[0], x.shape[0]])
    return F.ctc_loss(x.log_softmax(2), targets, lengths, torch.tensor([3, 2]))


def _equal_branch(x, y):
    return x * 2 if torch.equal(x, y) else x - 1


def _allclose_branch(x, y):
    return x.sin() if torch.allclose(x, y, atol=1e-3) else x.cos()


def _unique_sizes(x, y):  # an aten op whose output size depends on the values: a size known only at run time
    values = torch.ops.aten._unique2.default(x)[0]
    return (values * 2).sum() + y.sum()


CASES = {  # name -> (function, inputs per call, whether x gets a gradient)
    "ctc_loss": (_ctc, lambda i: (torch.randn(6 + i % 2, 2, 5),), True),
    "lstsq": (lambda a: torch.linalg.lstsq(a, a[:, :2] + 1).solution, lambda i: (torch.randn(5, 3),), True),
    "histogram": (lambda x: torch.histogram(x, bins=4).hist * 2, lambda i: (torch.randn(10) * (i + 1),), False),
    "geqrf": (lambda x: torch.geqrf(x)[0] + 1, lambda i: (torch.randn(4, 3),), False),
    "equal": (_equal_branch, lambda i: (torch.ones(3), torch.ones(3) * (1 + i % 2)), True),
    "allclose": (_allclose_branch, lambda i: (torch.ones(3), torch.ones(3) + i % 2), True),
    "tensor_item_unbound": (lambda x: x * torch.Tensor.item(x.sum()), lambda i: (torch.randn(3),), True),
    "value_dependent_sizes": (_unique_sizes, lambda i: (torch.tensor([1.0, 2, 2 + i % 2]), torch.ones(2)), False),
}


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_ops_without_meta_kernels_run_like_eager(name, cache):
    fn, make, grad = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    for i in range(4):
        inputs = make(i)
        ours_in = [t.clone().requires_grad_(grad and j == 0) for j, t in enumerate(inputs)]
        ref_in = [t.clone().requires_grad_(grad and j == 0) for j, t in enumerate(inputs)]
        ours, ref = jf(*ours_in), fn(*ref_in)
        torch.testing.assert_close(ours, ref)
        for a, b in zip(ours_in, inputs):
            assert torch.equal(a.detach(), b)  # the real run worked on clones
        if grad:
            ours.sum().backward()
            ref.sum().backward()
            torch.testing.assert_close(ours_in[0].grad, ref_in[0].grad)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_python_results_are_guarded_and_value_dependent_sizes_known_at_run_time(cache):
    jf = jitcore.jit(_equal_branch, cache=cache)
    same, other = (torch.ones(3), torch.ones(3)), (torch.ones(3), torch.zeros(3))
    for inputs, misses in [(same, 1), (same, 1), (other, 2), (same, 2), (other, 2)]:
        torch.testing.assert_close(jf(*inputs), _equal_branch(*inputs))
        assert jitcore.cache_misses(jf) == misses
    ju = jitcore.jit(_unique_sizes, cache=cache)
    for values, misses in [([1.0, 2, 2], 1), ([3.0, 4, 4], 1), ([1.0, 2, 3], 1), ([5.0, 5, 5], 1)]:
        x = torch.tensor(values)
        torch.testing.assert_close(ju(x, torch.ones(2)), _unique_sizes(x, torch.ones(2)))
        assert jitcore.cache_misses(ju) == misses, jitcore.cache_miss_reasons(ju)
    assert "u0" in str(jitcore.last_traces(ju)[-1])  # (torch's fake tensors said which size depends on values)


def test_a_value_from_random_inputs_is_refused_loudly():
    def f(x):
        y = torch.rand(3)
        return x * 2 if torch.equal(x, y) else x

    with pytest.raises(DataDependentError, match="random"):
        jitcore.jit(f)(torch.ones(3))


def test_the_random_state_is_untouched_by_learning_outputs():
    def f(x):
        noisy = x + torch.randn(3)
        return torch.histogram(noisy, bins=3).hist + torch.rand(3)

    torch.manual_seed(0)
    ours = jitcore.jit(f)(torch.zeros(3))
    torch.manual_seed(0)
    torch.testing.assert_close(ours, f(torch.zeros(3)))
