"""Values of another dtype set into a tensor (issue 38 item 1), against eager: `x[key] = v` copies into the view for a
basic key (any dtype casts, as `x.copy_(v)`), follows index_put_'s rule for a key with index tensors (the dtypes must
match, except where it runs as masked_fill_: one boolean mask and a one-element CPU value), and in-place arithmetic
keeps its result-type rule (`x_int.add_(1.5)` raises). Each statement writes into an argument (the caller sees it)
and an intermediate, over call sequences whose values change dtype (a program compiled for one dtype must not be
reused for another), in every cache mode; gradients through float destinations; one case with Inductor."""
from __future__ import annotations

import warnings

import pytest
import torch

import jitcore
from tests.fuzz import CACHE_MODES

# statement -> the shape of v it takes (the destination is 3 x 4); m: a mask, idx: an index tensor
STATEMENTS = {
    "row": ("{y}[1] = v", (4,)),
    "slice": ("{y}[1:3] = v", (2, 4)),
    "element": ("{y}[1, 2] = v", ()),
    "ellipsis column": ("{y}[..., 1] = v", (3,)),
    "view": ("{y}.view(-1)[5] = v", ()),
    "transposed view": ("{y}.t()[0] = v", (3,)),
    "0-dim index tensor": ("{y}[idx[1]] = v", (4,)),
    "mask": ("{y}[m] = v", ()),
    "mask full": ("{y}[m] = v", (4,)),
    "mask and slice": ("{y}[m[:, 0], 1:] = v", ()),  # (the mask's count read by setitem's decomposition)
    "uint8 mask": ("{y}[m.to(torch.uint8)] = v", ()),  # (eager: masked_fill_'s error, for numbers too)
    "index tensor": ("{y}[idx] = v", (2, 4)),
    "index list": ("{y}[[0, 2]] = v", ()),
    "index_put_": ("{y}.index_put_((idx,), v)", (2, 4)),
    "index_put_ mask": ("{y}.index_put_((m,), v)", (1,)),
    "masked_fill_": ("{y}.masked_fill_(m, v)", ()),
    "masked_scatter_": ("{y}.masked_scatter_(m, v)", (4,)),
    "copy_": ("{y}.copy_(v)", (4,)),
    "fill_": ("{y}.fill_(v)", ()),
    "add_": ("{y}.add_(v)", (4,)),
    "iadd": ("{y} += v", ()),
}

DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool)
# (destination dtype, value dtype) pairs called in sequence on one jitted function
SEQUENCE = [(torch.int64, torch.float32), (torch.int64, torch.float32), (torch.bool, torch.float32),
            (torch.bool, torch.int64), (torch.float32, torch.float64), (torch.float64, torch.float32),
            (torch.int32, torch.bool), (torch.float32, torch.float32), (torch.int64, torch.float64)]


def _program(statement: str):
    src = (f"def f(a, v, m, idx):\n"
           f"    b = a.clone()\n"
           f"    {statement.format(y='a')}\n"
           f"    {statement.format(y='b')}\n"
           f"    return b\n")
    ns = {"torch": torch}
    exec(compile(src, f"<setitem {statement}>", "exec"), ns)
    return ns["f"]


def _inputs(dest, vdtype, vshape, seed):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(3, 4, generator=g) * 3).to(dest)
    v = (torch.randn(vshape, generator=g) * 3).to(vdtype)
    m = torch.tensor([[True, False, False, True], [False, False, False, False], [False, True, True, False]])
    return a, v, m, torch.tensor([0, 2])


def _run(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (complex to real and similar casting warnings)
        try:
            return "ok", fn(*args)
        except Exception as e:
            base = next(k for k in type(e).__mro__ if k.__module__ == "builtins")
            return "raised", (base, str(e).splitlines()[0])


def _check_same(name, want, got, a_want, a_got):
    assert want[0] == got[0], f"{name}: eager {want}, jit {got}"
    if want[0] == "raised":
        assert want[1] == got[1], f"{name}: eager raised {want[1]}, jit {got[1]}"
        return
    for e, j in ((want[1], got[1]), (a_want, a_got)):
        assert e.dtype == j.dtype and torch.equal(e, j), f"{name}: eager {e}, jit {j}"


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_setitem_of_another_dtype_as_eager(name, mode):
    statement, vshape = STATEMENTS[name]
    f = _program(statement)
    jf = jitcore.jit(f, cache=mode)
    outcomes = set()
    for i, (dest, vdtype) in enumerate(SEQUENCE):
        a, v, m, idx = _inputs(dest, vdtype, vshape, i)
        a_jit = a.clone()
        want, got = _run(f, (a, v, m, idx)), _run(jf, (a_jit, v, m, idx))
        _check_same(f"{name} {dest} <- {vdtype}", want, got, a, a_jit)
        outcomes.add(want[0])
    # and a Python number, then the first dtypes again (the entry compiled for them is still right)
    for i, (dest, value) in enumerate([(torch.int64, 2.7), (torch.bool, 0.5), (torch.int64, True), SEQUENCE[0]]):
        if isinstance(value, torch.dtype):
            a, v, m, idx = _inputs(dest, value, vshape, 0)
        else:
            a, _, m, idx = _inputs(dest, torch.float32, vshape, i)
            v = value
        a_jit = a.clone()
        want, got = _run(f, (a, v, m, idx)), _run(jf, (a_jit, v, m, idx))
        _check_same(f"{name} {dest} <- {value!r}", want, got, a, a_jit)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_each_dtype_pair_on_one_function(mode):
    """Every (destination, value) dtype pair, 0-dim and full values, through one jitted function per key kind."""
    for name in ("row", "mask", "index tensor"):
        statement, vshape = STATEMENTS[name]
        f = _program(statement)
        jf = jitcore.jit(f, cache=mode)
        for dest in DTYPES:
            for vdtype in DTYPES:
                for shape in (vshape, ()):
                    a, v, m, idx = _inputs(dest, vdtype, shape, 7)
                    a_jit = a.clone()
                    want, got = _run(f, (a, v, m, idx)), _run(jf, (a_jit, v, m, idx))
                    _check_same(f"{name} {dest} <- {vdtype}{list(shape)}", want, got, a, a_jit)


def test_eager_raises_where_jit_must_raise():
    """Both directions: in-place arithmetic keeps its result-type rule, index tensors their dtype rule (after the
    shape check, as eager's order)."""
    cases = [  # (the write, destination dtype, value dtype, value size)
        (lambda a, v: a.add_(v), torch.int64, torch.float32, 3),
        (lambda a, v: a.__iadd__(v), torch.bool, torch.int64, 3),
        (lambda a, v: a.__setitem__(torch.tensor([0, 1]), v), torch.float32, torch.float64, 2),
        (lambda a, v: a.index_put_((torch.tensor([0, 1]),), v), torch.int64, torch.float32, 2),
        (lambda a, v: a.index_put_((torch.tensor([0, 1]),), v), torch.int64, torch.float32, 3),
        (lambda a, v: a.index_put_((torch.tensor([True, False, True]),), v, accumulate=True), torch.int64,
         torch.float32, 1),
        (lambda a, v: a.masked_scatter_(a > 0, v), torch.float32, torch.float64, 3),
    ]
    for fn, dest, vdtype, n in cases:
        def f(a, v, fn=fn):
            b = a.clone()
            fn(b, v)
            return b
        a, v = torch.ones(3, dtype=dest), torch.ones(n, dtype=vdtype)
        want, got = _run(f, (a, v)), _run(jitcore.jit(f), (a, v))
        assert want[0] == "raised" and want == got, (want, got)


def _grad_program(statement):
    src = (f"def f(a, v, m, idx):\n"
           f"    y = a * 1\n"
           f"    {statement.format(y='y')}\n"
           f"    return y * y.detach().abs().add(1) if y.is_floating_point() else (y, v * 2)\n")
    ns = {"torch": torch}
    exec(compile(src, f"<setitem grad {statement}>", "exec"), ns)
    return ns["f"]


def _loss(out):
    """The float outputs' sum (eager marks an integer tensor written from a value that requires grad through a mask
    as requiring grad too, torch's quirk: a backward through it fails in eager's engine; jit's does not require)."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum(o.sum() if o.requires_grad and o.is_floating_point() else 0 for o in outs)


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("name", ["row", "slice", "element", "transposed view", "mask", "index_put_ mask",
                                  "masked_fill_", "copy_", "fill_"])
def test_gradients_as_eager(name, mode):
    """A float grad source set into float32/float64 destinations gives eager's gradients (the value's own dtype);
    into an integer destination no gradient flows through the write, as in eager."""
    statement, vshape = STATEMENTS[name]
    f = _grad_program(statement)
    jf = jitcore.jit(f, cache=mode)
    for i, (dest, vdtype) in enumerate([(torch.float32, torch.float64), (torch.float64, torch.float32),
                                        (torch.float32, torch.float64), (torch.int64, torch.float32),
                                        (torch.float32, torch.float32)]):
        if dest is torch.int64 and name in FILLS_MARKING_INTEGERS:
            _check_integer_history(f, jf, dest, vdtype, vshape, i)
            continue
        grads = []
        for fn in (f, jf):
            a, v, m, idx = _inputs(dest, vdtype, vshape, i)
            if dest.is_floating_point:
                a.requires_grad_()
            v.requires_grad_()
            out = fn(a, v, m, idx)
            loss = _loss(out)
            inputs = [t for t in (a, v) if t.requires_grad]
            got = torch.autograd.grad(loss, inputs, allow_unused=True) if loss.requires_grad else (None,) * len(inputs)
            grads.append((out, got))
        (want_out, want_g), (jit_out, jit_g) = grads
        for e, j in zip(want_out if isinstance(want_out, tuple) else (want_out,),
                        jit_out if isinstance(jit_out, tuple) else (jit_out,)):
            assert e.dtype == j.dtype and torch.allclose(e.detach(), j.detach()), (name, dest, vdtype)
        for e, j in zip(want_g, jit_g):
            assert (e is None) == (j is None), (name, dest, vdtype, e, j)
            if e is not None:
                assert e.dtype == j.dtype and torch.allclose(e, j), (name, dest, vdtype, e, j)


# writes eager records as masked_fill_/fill_ of a value that requires grad: an integer destination then requires grad
FILLS_MARKING_INTEGERS = {"mask", "index_put_ mask", "masked_fill_", "fill_"}


def _check_integer_history(f, jf, dest, vdtype, vshape, seed):
    """Eager gives the integer tensor autograd history (torch's quirk: a backward through it fails in eager's engine);
    jitcore's integer tensors carry none, as every other op's (tests/fuzz.py _integer_history): the same values, and
    the value's gradient through the other output as eager's."""
    outs = []
    for fn in (f, jf):
        a, v, m, idx = _inputs(dest, vdtype, vshape, seed)
        v.requires_grad_()
        out, twice = fn(a, v, m, idx)
        outs.append((out, torch.autograd.grad(twice.sum(), v)[0]))
    (want, want_g), (got, got_g) = outs
    assert want.dtype == got.dtype == dest and torch.equal(want, got)
    assert want.requires_grad and not got.requires_grad  # (the quirk: if torch drops it, both are False)
    assert torch.equal(want_g, got_g)


@pytest.mark.parametrize("mode", CACHE_MODES)
def test_functional_fills_of_a_grad_value_into_integers_raise_as_eager(mode):
    """masked_fill / index_put / index_fill of a value that requires grad into an integer tensor: eager raises
    "Autograd not support dtype: Long" (the in-place forms run: _check_integer_history)."""
    m = torch.tensor([True, False, True])
    for fill in (lambda y, v: y.masked_fill(m[:, None], v), lambda y, v: y.index_put((m,), v),
                 lambda y, v: torch.index_fill(y, 0, torch.tensor([1]), v)):
        def f(y, v, fill=fill):
            return fill(y * 1, v)
        y, v = torch.zeros(3, 4, dtype=torch.int64), torch.tensor(2.5, requires_grad=True)
        want, got = _run(f, (y, v)), _run(jitcore.jit(f, cache=mode), (y, v))
        assert want == got == ("raised", (RuntimeError, "Autograd not support dtype: Long"))


def test_setitem_dtypes_with_inductor():
    f = _program("{y}[1:3] = v")
    g = _program("{y}[m] = v")
    for prog, vshape in ((f, (2, 4)), (g, ())):
        jf = jitcore.jit(prog, executors=["inductor"])
        for i, (dest, vdtype) in enumerate([(torch.int64, torch.float32), (torch.float32, torch.float64),
                                            (torch.int64, torch.float32)]):
            a, v, m, idx = _inputs(dest, vdtype, vshape, i)
            a_jit = a.clone()
            _check_same(f"inductor {dest} <- {vdtype}", _run(prog, (a, v, m, idx)), _run(jf, (a_jit, v, m, idx)),
                        a, a_jit)
