"""Tensors in containers, against eager torch: a line records a snapshot of its arguments (a list changed after the
call does not change the recorded op), and every tensor an op receives, at any depth of its arguments, gets its
gradient (torch.lstm's weights arrive as a list; opaque torch ops pull back through torch.autograd).
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import pytest
import torch

import jitcore
from jitcore.ops.opaque import opaque_symbol


def _grads(fn, inputs, params=()):
    """fn(*inputs), then the gradients of every input and parameter that requires grad after out.sum().backward()."""
    out = fn(*inputs)
    leaves = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    loss = sum((o.float() * (i + 1)).sum() for i, o in enumerate(leaves) if o.requires_grad)
    wrt = [t for t in list(inputs) + list(params) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss, wrt, allow_unused=True) if isinstance(loss, torch.Tensor) else ()
    return out, grads


def _fresh(inputs):
    return [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t for t in inputs]


def _assert_like_eager(fn, inputs, calls=2):
    """The jitted fn's outputs and input gradients equal eager's, on a first (traced) and a cached call."""
    jfn = jitcore.jit(fn)
    for call in range(calls):
        args = _fresh([t + call if isinstance(t, torch.Tensor) else t for t in inputs])
        expected, egrads = _grads(fn, _fresh(args))
        got, grads = _grads(jfn, _fresh(args))
        torch.testing.assert_close(got, expected, msg=lambda m, call=call: f"call {call}: outputs: {m}")
        assert len(grads) == len(egrads)
        for i, (g, e) in enumerate(zip(grads, egrads)):
            if e is None:  # an input the outputs do not depend on: no gradient, or zeros
                assert g is None or not g.any(), f"call {call}: input {i}: gradient {g}, eager has none"
            else:
                torch.testing.assert_close(g, e, msg=lambda m, i=i, call=call: f"call {call}: grad {i}: {m}")


# -- class 8: a container changed after the call does not change the recorded op -----------------------------------
# ops handed a list `feats` of two 3x3 matrices (mapped composites first, then opaque torch ops)
OPS = {
    "cat": lambda feats: torch.cat(feats, 0),
    "cat_kw": lambda feats: torch.cat(tensors=feats, dim=1),
    "stack": lambda feats: torch.stack(feats, 1),
    "hstack": torch.hstack,
    "vstack": torch.vstack,
    "dstack": torch.dstack,
    "column_stack": torch.column_stack,
    "einsum": lambda feats: torch.einsum("ij,jk->ik", feats),
    "broadcast_tensors": lambda feats: torch.stack(torch.broadcast_tensors(*feats)),
    "block_diag": lambda feats: torch.block_diag(*feats),
    "multi_dot": torch.linalg.multi_dot,  # opaque
    "foreach_mul": lambda feats: torch.stack(torch._foreach_mul(feats, 2.0)),  # opaque, returns a list
}


def _append(c, z):
    c.append(z)


def _extend(c, z):
    c.extend([z, z * 2])


def _insert(c, z):
    c.insert(0, z)


def _pop(c, z):
    c.pop()


def _pop_first(c, z):
    c.pop(0)


def _clear(c, z):
    c.clear()
    c.append(z)


def _setitem(c, z):
    c[0] = z


def _delitem(c, z):
    del c[0]


def _iadd(c, z):
    c += [z]


def _slice_assign(c, z):
    c[:] = [z, z, z]


def _reverse(c, z):
    c[0] = c[0] * 3
    c.reverse()


MUTATIONS = {f.__name__[1:]: f for f in (_append, _extend, _insert, _pop, _pop_first, _clear, _setitem, _delitem,
                                         _iadd, _slice_assign, _reverse)}


def _in_list(op, mutate):
    def fn(x, y):
        z = x * 2 + 1
        feats = [x, y]
        out = op(feats)
        mutate(feats, z)
        return out, feats[-1]

    return fn


def _in_nested_list(op, mutate):
    def fn(x, y):
        z = x * 2 + 1
        box = [[x, y], [y]]
        out = op(box[0])
        mutate(box[0], z)
        box.append([z])
        return out

    return fn


def _in_dict(op, mutate):
    def fn(x, y):
        z = x * 2 + 1
        d = {"feats": [x, y]}
        out = op(d["feats"])
        mutate(d["feats"], z)
        d["feats"] = [z]
        d.update(more=[z])
        return out

    return fn


def _in_tuple(op, mutate):
    def fn(x, y):
        z = x * 2 + 1
        t = ([x, y], 3)
        out = op(t[0])
        mutate(t[0], z)
        return out

    return fn


KINDS = {"list": _in_list, "nested_list": _in_nested_list, "dict": _in_dict, "tuple": _in_tuple}


def _square_inputs():
    torch.manual_seed(0)
    return [torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)]


@pytest.mark.parametrize("mutation", list(MUTATIONS))
@pytest.mark.parametrize("op", list(OPS))
def test_list_changed_after_the_call(op, mutation):
    _assert_like_eager(_in_list(OPS[op], MUTATIONS[mutation]), _square_inputs())


@pytest.mark.parametrize("mutation", ["append", "insert", "setitem", "delitem", "clear"])
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "list"])
@pytest.mark.parametrize("op", ["cat", "stack", "einsum", "broadcast_tensors", "multi_dot", "foreach_mul"])
def test_container_changed_after_the_call(op, kind, mutation):
    _assert_like_eager(KINDS[kind](OPS[op], MUTATIONS[mutation]), _square_inputs())


# ops handed a list of ints `sizes` == [3, 3] (sizes, dims, pads), changed after the call
SIZE_OPS = {
    "reshape": lambda x, sizes: x.reshape(sizes),
    "view": lambda x, sizes: x.view(sizes),
    "zeros": lambda x, sizes: torch.zeros(sizes) + x,
    "new_full": lambda x, sizes: x.new_full(sizes, 2.0) * x,
    "expand": lambda x, sizes: x[None].expand([2] + sizes),
    "repeat": lambda x, sizes: x.repeat(sizes),
    "permute": lambda x, sizes: x.permute([s - 2 for s in sizes[:1]] + [sizes[1] - 3]),
    "pad": lambda x, sizes: torch.nn.functional.pad(x, sizes),
    "sum_dims": lambda x, sizes: x.sum([sizes[0] - 3]),
}


@pytest.mark.parametrize("mutation", ["append", "insert", "setitem", "delitem", "clear", "reverse"])
@pytest.mark.parametrize("op", list(SIZE_OPS))
def test_int_list_changed_after_the_call(op, mutation):
    def fn(x, y):
        sizes = [3, 3]
        out = SIZE_OPS[op](x * y, sizes)
        MUTATIONS[mutation](sizes, 1)
        return out

    _assert_like_eager(fn, _square_inputs())


Pair = namedtuple("Pair", "first second")


def _dict_op(d, pair):
    return d["a"] @ pair[0][0] + d["b"][-1].sin() * pair[1]


_DICT_OP = opaque_symbol(_dict_op)


@pytest.mark.parametrize("mutation", ["setitem", "delete", "update", "pop", "clear", "nested"])
def test_dict_changed_after_an_opaque_call(mutation):
    def mutate(d, z):
        if mutation == "setitem":
            d["a"] = z
        elif mutation == "delete":
            del d["b"]
        elif mutation == "update":
            d.update(a=z, b=[z])
        elif mutation == "pop":
            d.pop("a")
        elif mutation == "clear":
            d.clear()
        else:
            d["b"].append(z)

    def fn(x, y):
        z = x * 2 + 1
        d, pair = {"a": x, "b": [y, x]}, [[y], x]
        out = _DICT_OP(d, pair)
        mutate(d, z)
        pair[0][0] = z
        return out

    _assert_like_eager(fn, _square_inputs())


def _first_times_second(c):
    first, second = c.values() if isinstance(c, dict) else c
    return first * second[0]


_FIRST_TIMES_SECOND = opaque_symbol(_first_times_second)


@pytest.mark.parametrize("make", [Pair, lambda a, b: OrderedDict(x=a, y=b)])
def test_namedtuple_and_ordered_dict_arguments_run(make):
    """An opaque op's namedtuple or OrderedDict argument holding proxies prints as a call building it at run time."""
    from tests.helpers import assert_matches_torch

    a, b = torch.randn(3, 2), torch.randn(3, 2)
    assert_matches_torch(lambda a, b: _FIRST_TIMES_SECOND(make(a, [b])), lambda a, b: a * b, a, b)


# writes into an external container that read another container's contents, which changes afterwards
CONSUMING_WRITES = {
    "list_extend": (list, lambda out, src: out.extend(src)),
    "list_iadd": (list, lambda out, src: out.__iadd__(src)),
    "list_slice_assign": (list, lambda out, src: out.__setitem__(slice(0, None), src)),
    "list_extend_generator": (list, lambda out, src: out.extend(t * 2 for t in src)),
    "dict_update": (dict, lambda out, src: out.update(src)),
    "dict_update_pairs": (dict, lambda out, src: out.update(src.items())),
    "dict_ior": (dict, lambda out, src: out.__ior__(src)),
}


def _consume_then_change(op, statement):
    kind, write = CONSUMING_WRITES[op]

    def fn(x, out):
        src = [x, x + 1] if kind is list else {"a": x, "b": x + 1}
        if statement and op == "list_iadd":  # the same writes as the opcodes the interpreter sees
            out += src
        elif statement and op == "dict_ior":
            out |= src
        elif statement and op == "list_slice_assign":
            out[0:] = src
        else:
            write(out, src)
        if kind is list:
            src.append(x * 3)
            src[0] = x * 4
        else:
            src["c"] = x * 3
            src["a"] = x * 4
        return x.sum()

    return kind, fn


@pytest.mark.parametrize("statement", [False, True])
@pytest.mark.parametrize("op", list(CONSUMING_WRITES))
def test_external_container_writes_read_contents_at_the_call(op, statement):
    kind, fn = _consume_then_change(op, statement)
    jfn = jitcore.jit(fn)
    for call in range(2):
        x = torch.randn(3) + call
        mine, theirs = kind(), kind()
        fn(x, theirs)
        jfn(x, mine)
        assert len(mine) == len(theirs) and (kind is not dict or list(mine) == list(theirs))
        for a, b in zip(mine.values() if kind is dict else mine, theirs.values() if kind is dict else theirs):
            torch.testing.assert_close(a, b)


def test_recorded_line_keeps_the_list_it_was_called_with():
    def fn(x):
        feats = [x]
        y = torch.cat(feats, 0)
        feats.append(x + 1)
        return y

    jfn = jitcore.jit(fn)
    assert jfn(torch.randn(2, 3)).shape == (2, 3)
    text = str(jitcore.last_traces(jfn)[0])
    assert "ltorch.cat([t0], 0)" in text  # printed as the list it was, not as a tuple


class _DenseLayer(torch.nn.Module):
    """torchvision's DenseNet layer: it concatenates the list of every earlier block's features."""

    def __init__(self, channels, growth):
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(channels)
        self.conv = torch.nn.Conv2d(channels, growth, 3, padding=1, bias=False)

    def forward(self, features):
        prev = [features] if isinstance(features, torch.Tensor) else features
        return self.conv(torch.relu(self.norm(torch.cat(prev, 1))))


class _DenseBlock(torch.nn.ModuleDict):
    def __init__(self, layers, channels, growth):
        super().__init__({f"layer{i}": _DenseLayer(channels + i * growth, growth) for i in range(layers)})

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))  # the list each layer concatenated grows afterwards
        return torch.cat(features, 1)


@pytest.mark.parametrize("train", [False, True])
def test_dense_block_like_densenet(train):
    torch.manual_seed(0)
    block = _DenseBlock(3, 4, 2).train(train)
    _compare_module(block, [torch.randn(2, 4, 5, 5, requires_grad=True)])


# -- class 7: every tensor an op receives gets its gradient -------------------------------------------------------
RNNS = {
    "lstm": (torch.nn.LSTM, {}),
    "lstm_2layers_bidir": (torch.nn.LSTM, {"num_layers": 2, "bidirectional": True}),
    "lstm_batch_first_nobias": (torch.nn.LSTM, {"batch_first": True, "bias": False}),
    "lstm_proj": (torch.nn.LSTM, {"proj_size": 5, "num_layers": 2}),
    "gru": (torch.nn.GRU, {}),
    "gru_2layers_bidir_batch_first": (torch.nn.GRU, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    "rnn_tanh": (torch.nn.RNN, {}),
    "rnn_relu_bidir": (torch.nn.RNN, {"nonlinearity": "relu", "bidirectional": True}),
    "rnn_relu_3layers_nobias": (torch.nn.RNN, {"nonlinearity": "relu", "num_layers": 3, "bias": False}),
}


def _rnn_state(cls, kw, batch, requires_grad):
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h = torch.randn(layers, batch, kw.get("proj_size") or 8, requires_grad=requires_grad)
    if cls is not torch.nn.LSTM:
        return h
    return h, torch.randn(layers, batch, 8, requires_grad=requires_grad)


def _compare_module(module, inputs):
    """Outputs, every parameter's gradient and every input's gradient of jit(module) equal eager's."""
    jm = jitcore.jit(module)
    results = []
    for m in (module, jm):
        module.zero_grad(set_to_none=True)
        args = _fresh(inputs)
        out, grads = _grads(m, args, list(module.parameters()))
        results.append((out, grads, {n: p.grad for n, p in module.named_parameters()}))
    (eout, egrads, _), (out, grads, _) = results
    torch.testing.assert_close(out, eout)
    assert len(grads) == len(egrads)
    names = [f"input {i}" for i, t in enumerate(inputs) if torch.is_tensor(t) and t.requires_grad]
    names += [n for n, p in module.named_parameters() if p.requires_grad]
    for name, g, e in zip(names, grads, egrads):
        assert g is not None, f"{name}: no gradient (eager has one)"
        torch.testing.assert_close(g, e, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", list(RNNS))
def test_rnn_modules_gradients(name, with_state):
    cls, kw = RNNS[name]
    torch.manual_seed(0)
    module = cls(6, 8, **kw)
    x = torch.randn(4, 3, 6, requires_grad=True)
    inputs = [x, _rnn_state(cls, kw, 3 if not kw.get("batch_first") else 4, True)] if with_state else [x]
    _compare_module(module, inputs)


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell])
def test_rnn_cells_gradients(cls):
    torch.manual_seed(0)
    module = cls(6, 8)
    x = torch.randn(3, 6, requires_grad=True)
    h = torch.randn(3, 8, requires_grad=True)
    state = (h, torch.randn(3, 8, requires_grad=True)) if cls is torch.nn.LSTMCell else h
    _compare_module(module, [x, state])


def _sequence_model():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(6, 8, batch_first=True)
            self.lstm = torch.nn.LSTM(8, 4, bidirectional=True)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            y, _ = self.rnn(x)
            y, (h, c) = self.lstm(y.transpose(0, 1))
            return self.head(y).sum(0) + h.sum() + c.mean()

    return Model()


def test_rnn_inside_a_model_gradients():
    torch.manual_seed(0)
    _compare_module(_sequence_model(), [torch.randn(2, 5, 6, requires_grad=True)])


# lists made natively from external ones (`[x] + self.weights`, slices) handed to opaque and mapped ops
EXTERNAL_LIST_OPS = {
    "multi_dot_concat": lambda x, ws: torch.linalg.multi_dot([x] + ws),
    "multi_dot_slice": lambda x, ws: torch.linalg.multi_dot(ws[:2]) @ x,
    "foreach_concat": lambda x, ws: torch.stack(torch._foreach_mul(ws + [x], 2.0)).sum(0),
    "cat_concat": lambda x, ws: torch.cat(ws + [x]),
    "lstm_weights": lambda x, ws: torch.lstm(x[None], (x[None, :, :1], x[None, :, 1:2]), ws[:1] + [ws[1][:, :1]],
                                             False, 1, 0.0, False, False, False)[0],
}


def _external_holder(kind, ws):
    if kind == "argument":
        return ws
    if kind == "nested_argument":
        return {"groups": [ws]}
    module = torch.nn.Module()
    module.groups = [[torch.nn.Parameter(w.detach().clone()) for w in ws]]
    return module


@pytest.mark.parametrize("kind", ["argument", "nested_argument", "module"])
@pytest.mark.parametrize("op", list(EXTERNAL_LIST_OPS))
def test_lists_made_from_external_lists(op, kind):
    torch.manual_seed(0)
    fn = EXTERNAL_LIST_OPS[op]

    def call(x, holder):
        ws = holder if kind == "argument" else holder["groups"][0] if kind == "nested_argument" else holder.groups[0]
        return fn(x, ws)

    jcall = jitcore.jit(call)
    for n in (3, 4):  # a longer list on the second call: a miss, not the first call's program
        ws = [torch.randn(4, 4, requires_grad=True) for _ in range(n)]
        holder = _external_holder(kind, ws)
        leaves = list(holder.parameters()) if kind == "module" else ws
        x = torch.randn(4, 4, requires_grad=True)
        expected, got = call(x, holder), jcall(x, holder)
        torch.testing.assert_close(got, expected)
        egrads = torch.autograd.grad(expected.sum(), [x, *leaves], allow_unused=True)
        grads = torch.autograd.grad(got.sum(), [x, *leaves], allow_unused=True)
        for i, (g, e) in enumerate(zip(grads, egrads)):
            if e is None:
                assert g is None or not g.any(), f"leaf {i}"
            else:
                torch.testing.assert_close(g, e, msg=lambda m, i=i: f"leaf {i}: {m}")


# torch functions handed tensors inside lists, tuples or dicts: mapped ops and opaque ones
LIST_FUNCTIONS = {
    "cat": lambda a, b, c: torch.cat([a, b, c], 1),
    "stack": lambda a, b, c: torch.stack((a, b, c), 2),
    "hstack": lambda a, b, c: torch.hstack([a, b, c]),
    "vstack": lambda a, b, c: torch.vstack([a, b, c]),
    "dstack": lambda a, b, c: torch.dstack([a, b, c]),
    "column_stack": lambda a, b, c: torch.column_stack([a, b, c]),
    "einsum_list": lambda a, b, c: torch.einsum("ij,jk,kl->il", [a, b, c]),
    "einsum_args": lambda a, b, c: torch.einsum("ij,kj->ik", a, b * c),
    "block_diag": torch.block_diag,
    "broadcast_tensors": lambda a, b, c: torch.stack(torch.broadcast_tensors(a, b[:1], c[:, :1])),
    "meshgrid": lambda a, b, c: torch.stack(torch.meshgrid(a[0], b[1], indexing="ij")).sum(0) * c[0, 0],
    "cartesian_prod": lambda a, b, c: torch.cartesian_prod(a[0], b[0], c[1]),
    "multi_dot": lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
    "chain_matmul": lambda a, b, c: torch.chain_matmul(a, b, c),
    "foreach_mul": lambda a, b, c: torch.stack(torch._foreach_mul([a, b], [c, c.exp()])),
    "foreach_add_list": lambda a, b, c: torch.cat(torch._foreach_add([a, b, c], [c, b, a], alpha=0.5)),
    "where": lambda a, b, c: torch.where(a > 0, b, c),
    "lstm_fn": lambda a, b, c: torch.lstm(a[None], (b[None, :, :1], c[None, :, 1:2]), [a, b[:, :1], a[0], c[0]], True,
                                          1, 0.0, False, False, False)[0],
    "nested_opaque": lambda a, b, c: _DICT_OP({"a": a, "b": [b, c]}, ([c], a)),
    "nested_opaque_kw": lambda a, b, c: _DICT_OP(d={"a": a, "b": (c, [b])[::-1]}, pair=[(b * 2, a), c]),
    "nested_opaque_ordered": lambda a, b, c: _DICT_OP(OrderedDict(a=a, b=[b, c]), pair=((c,), a)),
}


@pytest.mark.parametrize("name", list(LIST_FUNCTIONS))
def test_tensors_in_containers_get_gradients(name):
    torch.manual_seed(0)
    fn = LIST_FUNCTIONS[name]
    inputs = [torch.randn(4, 4, requires_grad=True) for _ in range(3)]

    def call(a, b, c):
        return fn(a, b, c)

    _assert_like_eager(call, inputs)


# in-place torch functions with no op, writing the tensors of their first argument (a tensor or a list of them)
INPLACE_FUNCTIONS = {
    "foreach_mul_": lambda ts: torch._foreach_mul_(ts, 2.0),
    "foreach_add_lists": lambda ts: torch._foreach_add_(ts, [t * 3 for t in ts], alpha=0.5),
    "foreach_exp_": torch._foreach_exp_,
    "foreach_addcmul_": lambda ts: torch._foreach_addcmul_(ts, [t * 2 for t in ts], [t + 1 for t in ts], value=0.3),
    "i0_": lambda ts: torch.i0_(ts[0]),
    "aten_sinc_": lambda ts: torch.ops.aten.sinc_(ts[1]),
    "aten_mul_overload": lambda ts: torch.ops.aten.mul_.Tensor(ts[0], torch.full((4,), 3.0)),
}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_foreach_writes_over_call_sequences(cache):
    """An in-place foreach op's functional form returns what it wrote and its clones (the same tensors twice): its
    results are written into like any others, over calls with other sizes and grad modes, against eager."""
    def f(x, y):
        ts = [x * 1, y + 0]
        torch._foreach_mul_(ts, 2.0)
        ts[0].add_(1)
        return ts[0] * ts[1], ts[1].sum()

    jf = jitcore.jit(f, cache=cache)
    for n, grad in ((3, True), (5, True), (4, False)):
        torch.manual_seed(n)
        xe, ye = (torch.rand(n, 2, requires_grad=grad) for _ in range(2))
        xj, yj = (t.detach().clone().requires_grad_(grad) for t in (xe, ye))
        want, got = f(xe, ye), jf(xj, yj)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w)
        if grad:
            sum(o.sum() for o in want).backward()
            sum(o.sum() for o in got).backward()
            torch.testing.assert_close(xj.grad, xe.grad)
            torch.testing.assert_close(yj.grad, ye.grad)


@pytest.mark.parametrize("target", ["intermediates", "views", "inputs"])
@pytest.mark.parametrize("op", list(INPLACE_FUNCTIONS))
def test_inplace_torch_functions_write(op, target):
    fn = INPLACE_FUNCTIONS[op]

    def call(x, y):
        if target == "inputs":
            ts = [x, y]
        elif target == "views":
            base = torch.stack([x, y]) * 1
            ts = [base[0], base[1]]
        else:
            ts = [x * 1, y + 0]
        fn(ts)
        return ts[0] * 2 + ts[1], ts[1].sum()

    torch.manual_seed(0)
    grad = target != "inputs"  # eager refuses to write into leaves that require grad
    inputs = [torch.rand(3, 4, requires_grad=grad) for _ in range(2)]
    _assert_like_eager(call, inputs)
    if target == "inputs":  # the inputs hold eager's values after the call
        mine, theirs = _fresh(inputs), _fresh(inputs)
        call(*theirs)
        jitcore.jit(call)(*mine)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("keywords", [False, True])
def test_opaque_backward_asks_only_for_gradients_that_were_required(keywords):
    """The running stats of aten's batch norm are tensors without grad, written in place: the recomputation must not
    make them require one (torch refuses), and the forward's writes into them must be seen."""
    torch.manual_seed(0)
    running = [torch.zeros(4), torch.ones(4)]
    bn = torch.ops.aten._native_batch_norm_legit

    def fn(x, w, b):
        mean, var = running[0].clone(), running[1].clone()
        if keywords:
            out = bn(x, w, b, running_mean=mean, running_var=var, training=True, momentum=0.1, eps=1e-5)[0]
        else:
            out = bn(x, w, b, mean, var, True, 0.1, 1e-5)[0]
        return torch.linalg.multi_dot([out[:, :, 0, 0].T, out[:, :, 1, 1]]), mean, var

    _assert_like_eager(fn, [torch.randn(3, 4, 2, 2, requires_grad=True), torch.rand(4, requires_grad=True),
                            torch.randn(4, requires_grad=True)])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
def test_a_dict_with_its_keys_in_another_order_is_another_call(cache):
    # iterating a dict (its values, items or keys) follows insertion order: the same keys in another order must not
    # reuse the entry traced for the first order
    def stacked(d, scale=1.0):
        return torch.stack([v * scale for v in d.values()]), list(d), {k: v + 1 for k, v in d.items()}

    jfn = jitcore.jit(stacked, cache=cache)
    a, b = torch.zeros(2), torch.ones(2)
    calls = [{"a": a, "b": b}, {"b": b, "a": a}, {"a": a, "b": b}, {"b": b * 2, "a": a}]
    for d in calls:
        got, expected = jfn(d), stacked(d)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1] and list(got[2]) == list(expected[2])
    if cache != "no caching":  # (there, every call is traced)
        assert jitcore.cache_misses(jfn) == 2
        assert "in this order" in jitcore.cache_miss_reasons(jfn)[-1]


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_two_tensor_arguments_that_the_function_compared_by_identity(mode):
    """`x is y` was False when traced: a later call passing one tensor for both took the compiled branch, silently."""
    def f(x, y):
        return x * 2 if x is y else y * 3

    jfn = jitcore.jit(f, cache=mode)
    a, b = torch.ones(2), torch.zeros(2)
    for args in [(a, b), (a, a), (b, b), (a, b)]:
        torch.testing.assert_close(jfn(*args), f(*args))
    assert jitcore.cache_misses(jfn) == 2


@pytest.mark.parametrize("grad", [False, True])
def test_an_argument_compared_by_identity_with_a_parameter(grad):
    """`x is self.w` of an argument and a module's parameter: the check that they stay two reads the parameter by
    name, which the module-rooted part fetches (it raised NameError on the first call, before the prologue bound it
    by name)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * 2 if x is self.w else x + self.w

    m = M()
    jm = jitcore.jit(m)
    x = torch.randn(3)
    with torch.set_grad_enabled(grad):
        for arg in (x, x, m.w, x):
            torch.testing.assert_close(jm(arg), m(arg))
    assert jitcore.cache_misses(jm) == 2
