"""Library code users call inside a model, and the values it returns (issue 17, item 3).

Each case runs jitted and eagerly over calls with different sizes, in every cache mode: the outputs have eager's
types, structure, dtypes and values, and gradients through them equal eager's.
"""
from __future__ import annotations

import collections
import dataclasses
import typing

import numpy as np
import pytest
import torch

import jitcore
from jitcore.guards.cache import CACHE_MODES

NT = collections.namedtuple("NT", "a b")


class TNT(typing.NamedTuple):
    a: torch.Tensor
    b: int


@dataclasses.dataclass
class DC:
    a: torch.Tensor
    b: int = 3


class OD(collections.OrderedDict):
    pass


class D(dict):
    pass


class L(list):
    pass


class T(tuple):
    pass


class Tagged(dict):  # a dict subclass with attributes of its own, like HF's ModelOutput-style records
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.note = "kept"


@torch.jit.script
def scripted(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _tagged(x):
    out = Tagged(a=x * 2)
    out.extra = [x.sum()]
    return out


CASES = {
    "namedtuple": lambda x: NT(x * 2, x + 1),
    "namedtuple_made_inside": lambda x: collections.namedtuple("P", "u v")(x, x * 3),
    "typing_namedtuple": lambda x: TNT(x.sin(), 4),
    "dataclass": lambda x: DC(x.cos()),
    "ordereddict_subclass": lambda x: OD(a=x * 2, b=[x]),
    "dict_subclass": lambda x: D(a=x * 2),
    "dict_subclass_with_attributes": _tagged,
    "list_subclass": lambda x: L([x * 2, x]),
    "tuple_subclass": lambda x: T((x * 2, x)),
    "numpy_finfo_min": lambda x: x + np.finfo(np.float32).min,
    "numpy_float32": lambda x: x * np.float32(2.5),
    "numpy_float64_keeps_half": lambda x: x.half() + np.float64(2.5),
    "numpy_int64": lambda x: x * np.int64(3),
    "numpy_on_the_left": lambda x: np.float32(2.0) - x,
    "numpy_tensor_keeps_dtype": lambda x: x + torch.tensor(np.float64(3)),
    "tensor_of_range": lambda x: x + torch.tensor(range(x.shape[0])),
    "tensor_of_stepped_range": lambda x: x * torch.tensor(range(1, 2 * x.shape[0], 2), dtype=torch.float32),
    "normal_log_prob": lambda x: torch.distributions.Normal(x, x.abs() + 1).log_prob(x * 0.5),
    "normal_entropy": lambda x: torch.distributions.Normal(x, x.abs() + 1).entropy(),
    "normal_kl": lambda x: torch.distributions.kl_divergence(torch.distributions.Normal(x, 1.0),
                                                             torch.distributions.Normal(x * 0, 2.0)),
    "categorical_log_prob": lambda x: torch.distributions.Categorical(logits=x).log_prob(torch.tensor(1)),
    "categorical_entropy": lambda x: torch.distributions.Categorical(logits=x).entropy(),
    "bernoulli_log_prob": lambda x: torch.distributions.Bernoulli(logits=x).log_prob((x > 0).float()),
    "jit_script_function": lambda x: scripted(x).sum(),
}


def _same(ours, ref):
    if isinstance(ref, torch.Tensor):
        assert type(ours) is torch.Tensor and ours.dtype == ref.dtype
        torch.testing.assert_close(ours, ref)
        return
    assert type(ours) is type(ref) or (type(ours).__name__ == type(ref).__name__ == "P")
    if dataclasses.is_dataclass(ref):
        for f in dataclasses.fields(ref):
            _same(getattr(ours, f.name), getattr(ref, f.name))
    elif isinstance(ref, dict):
        assert list(ours) == list(ref)
        for k in ref:
            _same(ours[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _same(a, b)
    else:
        assert ours == ref
    for k, v in getattr(ref, "__dict__", {}).items():
        if not dataclasses.is_dataclass(ref):
            _same(getattr(ours, k), v)


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_library_code_and_returned_types_like_eager(name, cache):
    fn = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    for n in (4, 5, 4):
        x = torch.randn(n)
        _same(jf(x), fn(x))


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", ["normal_log_prob", "normal_kl", "categorical_entropy", "namedtuple",
                                  "ordereddict_subclass", "dict_subclass_with_attributes"])
def test_gradients_through_library_code(name, cache):
    fn = CASES[name]
    jf = jitcore.jit(fn, cache=cache)
    for n in (4, 6):
        x = torch.randn(n, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        leaves = [t for t in jitcore.ir.pytree.tree_leaves(_flat(jf(x))) if isinstance(t, torch.Tensor)]
        ref = [t for t in jitcore.ir.pytree.tree_leaves(_flat(fn(x2))) if isinstance(t, torch.Tensor)]
        sum(t.float().sum() for t in leaves if t.requires_grad).backward()
        sum(t.float().sum() for t in ref if t.requires_grad).backward()
        torch.testing.assert_close(x.grad, x2.grad)


def _flat(out):
    """Plain containers for the leaf walk (subclasses and records are leaves to pytree)."""
    if isinstance(out, torch.Tensor):
        return out
    if dataclasses.is_dataclass(out):
        return [_flat(getattr(out, f.name)) for f in dataclasses.fields(out)]
    if isinstance(out, dict):
        return [_flat(v) for v in out.values()] + [_flat(v) for v in getattr(out, "__dict__", {}).values()]
    if isinstance(out, (list, tuple)):
        return [_flat(v) for v in out]
    return []


def test_sampling_from_a_distribution_draws_per_call_like_eager():
    def f(x):
        return torch.distributions.Normal(x, 1.0).rsample() + x

    jf = jitcore.jit(f)
    x = torch.randn(5, requires_grad=True)
    torch.manual_seed(3)
    a = jf(x)
    torch.manual_seed(3)
    b = f(x)
    torch.testing.assert_close(a, b)
    assert not torch.equal(jf(x), a)  # a new draw on the next call
