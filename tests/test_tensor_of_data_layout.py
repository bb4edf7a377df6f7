"""torch.tensor / torch.asarray / torch.as_tensor of a tensor, or of a NumPy array over one, copy it keeping its dense
order in eager (a transposed tensor gives a transposed copy), so what the copy's layout decides (view(), stride(),
is_contiguous()) is eager's answer, over calls alternating layouts in every cache mode (fuzz seed 1772: `view(-1)`
of the copy of a transposed tensor's array ran where eager raises)."""
import numpy as np
import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_4FEC12F


def _view_of_copy(x):
    return torch.tensor(x * 2).view(-1) + 1


def _view_of_array_copy(x):
    return torch.tensor(np.sqrt(np.abs(np.exp(x.numpy())))).view(-1)


def _layout_of_copy(x):
    t = torch.asarray(x.sin(), copy=True)
    return t.stride(), t.is_contiguous(), t.reshape(-1)[:3] * 2


def _outcome(fn, x):
    try:
        return fn(x)
    except RuntimeError as e:
        return type(e), str(e).splitlines()[0]


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("fn", [_view_of_copy, _view_of_array_copy, _layout_of_copy])
def test_copies_of_data_keep_eagers_layout(fn, cache):
    jfn = jitcore.jit(fn, cache=cache)
    for make in (lambda: torch.randn(4, 3), lambda: torch.randn(3, 4).t(), lambda: torch.randn(5, 3),
                 lambda: torch.randn(3, 5).t(), lambda: torch.randn(4, 3)):
        x = make()
        exp, got = _outcome(fn, x), _outcome(jfn, x.clone(memory_format=torch.preserve_format))
        if isinstance(exp, tuple) and isinstance(exp[0], type):  # (eager raised)
            assert got == exp
        elif isinstance(exp, tuple):
            assert got[:2] == exp[:2]
            torch.testing.assert_close(got[2], exp[2])
        else:
            torch.testing.assert_close(got, exp)


def test_fuzz_seed_1772():
    prog = generate(1772, classes=CLASSES_4FEC12F)
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems, report.text(prog)


def _asarray_forms(x, dtype):
    same = torch.asarray(x)
    same.mul_(2)  # (the same tensor: the caller's x sees the write)
    cast = torch.asarray(x, dtype=dtype)
    copied = torch.asarray(x, copy=True)
    copied.add_(1)  # (a copy: x does not see it)
    return cast * 3, copied, torch.asarray([1.0, 2.0]) + x.sum()


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_asarray_of_tensors_as_eager(cache):
    jfn = jitcore.jit(_asarray_forms, cache=cache)
    for make, dtype in [(lambda: torch.randn(4, 3), torch.float64), (lambda: torch.randn(3, 5).t(), torch.float64),
                        (lambda: torch.randn(2, 6), torch.float16), (lambda: torch.randn(4, 3), torch.float64)]:
        x = make()
        ex, jx = x.clone(memory_format=torch.preserve_format), x.clone(memory_format=torch.preserve_format)
        exp, got = _asarray_forms(ex, dtype), jfn(jx, dtype)
        for a, b in zip(exp, got):
            assert a.dtype == b.dtype and a.stride() == b.stride()
            torch.testing.assert_close(b, a)
        torch.testing.assert_close(jx, ex)
    with pytest.raises(ValueError) as eager:
        torch.asarray(torch.ones(2), dtype=torch.float64, copy=False)
    with pytest.raises(ValueError) as jit:
        jitcore.jit(lambda x: torch.asarray(x, dtype=torch.float64, copy=False), cache=cache)(torch.ones(2))
    assert str(jit.value) == str(eager.value)
