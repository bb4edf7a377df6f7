"""Test helper: a sequence of calls of one jitted function against eager, run on twin copies of the same arguments,
comparing per call the outputs, the gradients of the inputs that require grad (from a loss over the outputs), and the
arguments as they are after the call (values and version-counter moves). Eager is the oracle.
"""
from __future__ import annotations

import torch

import jitcore


def _twin(a):
    """A copy of a with its sizes, strides and storage offset (so its address's residues modulo the allocator's
    alignment, which data_ptr() tests read, are a's)."""
    if isinstance(a, torch.Tensor):
        with torch.no_grad():
            base = torch.empty(a.untyped_storage().nbytes() // a.element_size(), dtype=a.dtype)
            t = base.as_strided(a.shape, a.stride(), a.storage_offset()).copy_(a)
        return t.requires_grad_(a.requires_grad) if a.is_leaf else t
    if isinstance(a, list):
        return [_twin(x) for x in a]
    return a


def _tensors(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x)]
    return []


def _run(fn, args):
    leaves = [t for t in _tensors(args) if t.requires_grad]
    versions = [t._version for t in _tensors(args)]
    out = fn(*args)
    outs = _tensors(out)
    loss = sum((o.float() * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad and o.is_floating_point())
    grads = [None] * len(leaves)
    if leaves and torch.is_tensor(loss) and loss.requires_grad:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    after = [(t.detach().clone(), t._version - v) for t, v in zip(_tensors(args), versions)]
    return out, outs, grads, after


def _same(a, b, what):
    assert (a is None) == (b is None), what
    if a is not None:
        assert a.dtype == b.dtype and a.shape == b.shape, (what, a, b)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True, msg=what)


def check_calls(fn, calls, mode: str, executors=None, misses: int | None = None):
    """Call `jitcore.jit(fn, cache=mode)` and fn on twins of each argument tuple in `calls`; every call must agree.
    misses: the number of compiled programs expected over the sequence (not checked in "no caching")."""
    kwargs = {} if executors is None else {"executors": executors}
    jf = jitcore.jit(fn, cache=mode, **kwargs)
    for n, args in enumerate(calls):
        mine, theirs = [_twin(a) for a in args], [_twin(a) for a in args]
        got, want = _run(jf, mine), _run(fn, theirs)
        where = f"call {n} ({mode})"
        assert type(got[0]) is type(want[0]), where
        if not isinstance(want[0], torch.Tensor) and not _tensors(want[0]):
            assert got[0] == want[0], where
        assert len(got[1]) == len(want[1]), where
        for i, (a, b) in enumerate(zip(got[1], want[1])):
            _same(a.detach(), b.detach(), f"{where}: output {i}")
        for i, (a, b) in enumerate(zip(got[2], want[2])):
            _same(a, b, f"{where}: gradient {i}")
        for i, ((a, va), (b, vb)) in enumerate(zip(got[3], want[3])):
            _same(a, b, f"{where}: argument {i} after the call")
            assert (va > 0) == (vb > 0), f"{where}: argument {i} written ({va} version moves, eager {vb})"
    if misses is not None and mode != "no caching":
        assert jitcore.cache_misses(jf) == misses, (mode, jitcore.cache_misses(jf))
    return jf
