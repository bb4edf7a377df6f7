"""Whether reshape, flatten, ravel and reshape_as return a view or a copy depends on eager's memory layout of their
input (an elementwise result keeps a transposed input's layout), and with it whether a later write reaches the
input. Generated: input layouts x the ops that make the reshaped tensor x may-copy ops x writes, compared with eager
(outputs and inputs after the call), and one jitted function called with changing layouts (a cached entry must not
reuse the aliasing it decided for another layout), in every cache mode.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import jitcore
from tests.fuzz import CACHE_MODES

CACHES = ("constant values", "symbolic values", "no caching")

LAYOUTS = {
    "contiguous": lambda g: torch.randn(4, 6, generator=g),
    "transposed": lambda g: torch.randn(6, 4, generator=g).t(),
    "strided_rows": lambda g: torch.randn(8, 6, generator=g)[::2],
    "column_slice": lambda g: torch.randn(4, 9, generator=g)[:, 2:8],
}
MAKERS = {
    "input": lambda x: x,
    "sub": lambda x: x - 3,
    "exp": lambda x: x.exp(),
    "t_then_mul": lambda x: (x.t() * 2).t(),
    "slice": lambda x: x[:, 1:5],
}
RESHAPES = {
    "reshape_flat": lambda t: t.reshape(-1),
    "flatten": lambda t: t.flatten(),
    "ravel": lambda t: t.ravel(),
    "reshape_as": lambda t: t.reshape_as(torch.empty(t.numel())),
    "reshape_2d": lambda t: t.reshape(2, -1),
}
WRITES = {
    "zero_": lambda r: r.zero_(),
    "add_": lambda r: r.add_(1.5),
    "setitem": lambda r: r.__setitem__(0, -7.0),
}


def _program(maker, reshape, write):
    def f(x):
        t = maker(x)
        write(reshape(t))
        return t * 1

    return f


def _check(f, jf, layout, seed):
    xe, xj = LAYOUTS[layout](torch.Generator().manual_seed(seed)), LAYOUTS[layout](torch.Generator().manual_seed(seed))
    want, got = f(xe), jf(xj)
    torch.testing.assert_close(got, want, msg=lambda m: f"output ({layout}): {m}")
    torch.testing.assert_close(xj, xe, msg=lambda m: f"input after the call ({layout}): {m}")


CASES = list(itertools.product(MAKERS, RESHAPES, WRITES))


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("maker,reshape,write", CASES[::3])
def test_reshape_write_follows_eager_layout(maker, reshape, write, cache):
    f = _program(MAKERS[maker], RESHAPES[reshape], WRITES[write])
    for layout in LAYOUTS:
        _check(f, jitcore.jit(f, cache=cache), layout, seed=0)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("maker,reshape", list(itertools.product(MAKERS, ("reshape_flat", "flatten"))))
def test_one_function_over_changing_layouts(maker, reshape, cache):
    f = _program(MAKERS[maker], RESHAPES[reshape], WRITES["zero_"])
    jf = jitcore.jit(f, cache=cache)
    for i, layout in enumerate(["contiguous", "transposed", "contiguous", "strided_rows", "transposed"]):
        _check(f, jf, layout, seed=i)


@pytest.mark.slow
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("maker,reshape,write", CASES)
def test_reshape_write_follows_eager_layout_all(maker, reshape, write, cache):
    f = _program(MAKERS[maker], RESHAPES[reshape], WRITES[write])
    for layout in LAYOUTS:
        _check(f, jitcore.jit(f, cache=cache), layout, seed=0)


# views made by Tensor properties (no torch callable to replay on meta tensors: their layout comes from their view
# prims), alone and chained, then reshaped and written (directly or through a chunk of the reshape)
PROPERTY_VIEWS = {
    "mT": lambda x: x.mT,
    "T": lambda x: x.T,
    "mH": lambda x: x.mH,
    "H": lambda x: x.H,
    "T_mT": lambda x: x.T.mT,
    "mT_slice": lambda x: x.mT[1:],
    "exp_mT": lambda x: x.exp().mT,
}
PIECE_WRITES = {
    "whole": lambda r: r.add_(1.5),
    "chunk": lambda r: r.chunk(2, -1)[1].copy_(torch.tensor(True)),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("view,reshape,write", list(itertools.product(
    PROPERTY_VIEWS, ("reshape_flat", "flatten", "reshape_2d"), PIECE_WRITES)))
def test_reshape_of_property_view_follows_eager_layout(view, reshape, write, cache):
    f = _program(PROPERTY_VIEWS[view], RESHAPES[reshape], PIECE_WRITES[write])
    for layout in LAYOUTS:
        _check(f, jitcore.jit(f, cache=cache), layout, seed=0)


# slices whose width follows a size: under symbolic values one entry serves every width, but a slice 1 wide is laid
# out like a contiguous tensor (a size-1 dimension's stride does not count), so its reshape is a view where a wider
# slice's is a copy: the entry must not serve both
WIDTH_SLICES = {
    "chunk": lambda x: x.chunk(2, -1)[1],
    "narrow": lambda x: x.narrow(-1, 2, x.shape[-1] - 2),
    "split": lambda x: x.split(2, -1)[-1],
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("slicer,reshape", list(itertools.product(WIDTH_SLICES, ("reshape_flat", "flatten",
                                                                                 "reshape_2d"))))
def test_reshape_of_a_slice_whose_width_becomes_one(slicer, reshape, cache):
    def f(x):
        t = WIDTH_SLICES[slicer](x)
        r = RESHAPES[reshape](t) if reshape != "reshape_2d" or t.numel() % 2 == 0 else t.reshape(-1)
        r.mul_(2)
        return r, t.is_contiguous()

    jf = jitcore.jit(f, cache=cache)
    for i, width in enumerate((6, 4, 3, 5, 3, 4, 6)):
        xe = torch.randn(4, width, generator=torch.Generator().manual_seed(i))
        xj = xe.clone()
        want, got = f(xe), jf(xj)
        torch.testing.assert_close(got, want, msg=lambda m, w=width: f"output (width {w}): {m}")
        torch.testing.assert_close(xj, xe, msg=lambda m, w=width: f"input after the call (width {w}): {m}")
        shares = [o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for o, x in ((got[0], xj),
                                                                                               (want[0], xe))]
        assert shares[0] == shares[1], f"width {width}: the reshape shares the input's memory: {shares} (jit, eager)"


# a part of x (3 x C) taken along its last dim, then flattened (a view where the part is the whole dim, else a
# copy) and written, or viewed (an error where it is not the whole dim)
WHOLE_OR_PART = {
    "getitem_flatten_write": lambda x, n: x[:, :2].flatten().mul_(2),
    "narrow_reshape_write": lambda x, n: x.narrow(1, 0, n).reshape(-1).add_(1),
    "getitem_n_view": lambda x, n: x[:, :n].view(-1) * 3,
    "split_flatten_write": lambda x, n: x.split(2, 1)[0].flatten().sub_(1),
    "tensor_split_reshape_write": lambda x, n: x.tensor_split([n], 1)[0].reshape(-1).mul_(-1),
}


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("name", sorted(WHOLE_OR_PART))
def test_a_slice_that_is_the_whole_dim_only_at_some_sizes(name, mode):
    """Whether a slice covers its whole dim decides view or copy; under symbolic values it is a predicate, so a call
    where it no longer holds (or starts to) gets its own program: writes reach the input exactly when eager's do,
    and a view eager refuses is refused."""
    fn = WHOLE_OR_PART[name]
    jfn = jitcore.jit(fn, cache=mode)
    for c, n in ((2, 2), (5, 2), (4, 4), (2, 2), (6, 3), (3, 3)):
        x = torch.arange(3.0 * c).reshape(3, c)
        xj = x.clone()
        try:
            expected = fn(x, n)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                jfn(xj, n)
            continue
        got = jfn(xj, n)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xj, x, msg=lambda m, c=c, n=n: f"C={c}, n={n}: the input after the call: {m}")


# Layouts the CPU kernels decide otherwise than torch's meta kernels: a convolution of a channels_last input or
# weight (a model moved to channels_last), group_norm, reflect/replicate pads, roll and pixel_shuffle keep
# channels_last on the CPU; the layout replay read them as contiguous, so `y.is_contiguous()` and `y.stride()` of
# such a result answered wrongly inside a jitted function (and a branch on them took the other way).
_CL_OPS = {
    "conv2d": lambda x, w: F.conv2d(x, w, padding=1),
    "conv2d stride 2": lambda x, w: F.conv2d(x, w, stride=2),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w.transpose(0, 1)),
    "group_norm": lambda x, w: F.group_norm(x, 2),
    "reflect pad": lambda x, w: F.pad(x, (1, 1, 1, 1), mode="reflect"),
    "replicate pad": lambda x, w: F.pad(x, (1, 2, 0, 1), mode="replicate"),
    "roll": lambda x, w: x.roll(1, 1),
    "pixel_shuffle": lambda x, w: F.pixel_shuffle(x, 2),
    "conv then relu": lambda x, w: F.conv2d(x, w).relu(),
}


def _layout_answers(op):
    def f(x, w):
        y = _CL_OPS[op](x, w)
        scale = 2.0 if y.is_contiguous() else 3.0
        return y * scale, y.stride(), y.is_contiguous(memory_format=torch.channels_last)
    return f


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("op", sorted(_CL_OPS))
def test_cpu_kernel_layouts_are_eagers(op, mode):
    f = _layout_answers(op)
    jf = jitcore.jit(f, cache=mode)
    g = torch.Generator().manual_seed(0)
    cl = torch.channels_last
    for i, (x_cl, w_cl, n) in enumerate([(True, False, 6), (False, False, 6), (False, True, 6), (True, True, 7),
                                         (True, False, 8), (False, False, 6)]):
        x = torch.randn(2, 4, n, n, generator=g)
        w = torch.randn(4, 4, 3, 3, generator=g)
        x, w = (x.to(memory_format=cl) if x_cl else x), (w.to(memory_format=cl) if w_cl else w)
        got, want = jf(x, w), f(x, w)
        where = f"{op}, call {i} (input channels_last {x_cl}, weight channels_last {w_cl})"
        assert got[1:] == want[1:], f"{where}: stride, channels_last {got[1:]}, eager {want[1:]}"
        torch.testing.assert_close(got[0], want[0], msg=lambda m, where=where: f"{where}: {m}")
