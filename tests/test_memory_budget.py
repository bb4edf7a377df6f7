"""The memory budget, jit(fn, memory_budget=b) (transforms/memory_budget.py): gradients equal eager's at every budget
(bitwise with the torch executor), saved bytes never grow as b decreases, b=1 prints the default programs, the saved
set is listed atop the programs and jitcore.saved_tensor_bytes reports it, in every cache mode."""
from __future__ import annotations

import itertools
import re

import pytest
import torch

import jitcore
from benchmarks.models import Block, GPTConfig, mlp
from tests.fuzz import CACHE_MODES

BUDGETS = (1.0, 0.75, 0.5, 0.25, 0.0)


def chain(x):
    for _ in range(5):
        x = torch.tanh(torch.sin(x))
    return x


def _workload(name: str):
    """(fn, make_args() -> fresh leaves, tensors whose .grad is compared)."""
    torch.manual_seed(0)
    if name == "chain":
        x = torch.randn(16, 24)
        return chain, lambda: (x.clone().requires_grad_(),)
    if name == "mlp":
        model, x = mlp(16, 2), torch.randn(8, 16)
        return model, lambda: (x.clone(),)
    block, x = Block(GPTConfig(n_embd=32, n_head=2, block_size=8)), torch.randn(2, 8, 32)
    return block, lambda: (x.clone().requires_grad_(),)


def _step(fn, args):
    """Output, and the gradients of the arguments and parameters that require grad, of one forward + backward."""
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    for p in params:
        p.grad = None
    out = fn(*args)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = [a.grad for a in args if a.requires_grad] + [p.grad for p in params]
    return out.detach(), grads


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("name", ["chain", "mlp", "block"])
def test_gradients_bitwise_at_every_budget_and_bytes_monotone(name, cache):
    fn, make = _workload(name)
    want_out, want = _step(fn, make())
    planned = []
    for b in BUDGETS:
        jfn = jitcore.jit(fn, cache=cache, memory_budget=b)
        for _ in range(2):  # the second call: the cached entry (a new trace under "no caching")
            args = make()
            out, grads = _step(jfn, args)
            assert torch.equal(out, want_out), (name, b)
            assert len(grads) == len(want) and all(torch.equal(g, w) for g, w in zip(grads, want)), (name, b)
        plan = jitcore.saved_tensor_bytes(jfn)
        ran = jitcore.saved_tensor_bytes(lambda jfn=jfn: jfn(*make()))  # what autograd's hooks see the program save
        assert plan.nbytes == ran.nbytes and plan.count == ran.count, (name, b, plan, ran)
        planned.append(plan.nbytes)
        if b < 1:
            _check_listing(jfn, b, plan.nbytes)
    assert all(a >= c for a, c in itertools.pairwise(planned)), planned  # b decreasing: never more bytes
    assert planned[-1] < planned[0], planned  # each workload has something to recompute


def _check_listing(jfn, b, nbytes):
    """The comment atop both programs: the budget, the bytes saved, the limit, and the saved tensors."""
    for trace in (jitcore.last_traces(jfn)[-1], jitcore.last_backward_traces(jfn)[-1]):
        text = str(trace)
        head = re.search(r"# memory_budget=(\S+): saves (\d+) tensors, (\d+) bytes .*; limit (\d+) bytes = minimal "
                         r"(\d+) \+ \S+ \* \(default (\d+) - minimal (\d+)\)", text)
        assert head is not None, text[:600]
        assert float(head.group(1)) == b and int(head.group(3)) == nbytes
        least, most, limit = int(head.group(5)), int(head.group(6)), int(head.group(4))
        assert least <= nbytes <= limit <= most and limit == int(least + b * (most - least))
        listed = re.findall(r"(?:saved:|,) (\w+) \w+\[[^\]]*\] (\d+)", text)
        assert sum(int(n) for _, n in listed) == nbytes and len(listed) == int(head.group(2))


def _headless(trace) -> str:
    return re.sub(r" \(took [0-9.]+ ms\)", "", str(trace))


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_budget_one_prints_the_default_programs(cache):
    fn, make = _workload("block")
    texts = []
    for b in (None, 1.0, 1):
        jfn = jitcore.jit(fn, cache=cache, memory_budget=b)
        _step(jfn, make())
        texts.append([_headless(t) for t in jitcore.last_traces(jfn) + jitcore.last_backward_traces(jfn)])
    assert texts[0] == texts[1] == texts[2]
    assert "memory_budget" not in "".join(texts[0])


def test_budget_zero_recomputes_matmuls_and_saves_inputs_only():
    """With a batch larger than the width, an activation costs more bytes than the weights that recompute it."""
    fn, x = mlp(16, 2), torch.randn(64, 16)
    jfn = jitcore.jit(fn, memory_budget=0)
    _step(jfn, (x,))
    backward = str(jitcore.last_backward_traces(jfn)[-1])
    forward_lines = {b.sym.name for b in jitcore.last_traces(jfn)[-1].bound_symbols}
    assert "linear" in forward_lines and re.search(r"= torch\.nn\.functional\.linear\(|= torch\.matmul\(", backward)
    bw = jitcore.last_backward_traces(jfn)[-1]
    saved = {p.name for p in bw.args[:dict(bw.arg_groups)["saved"]]}
    inputs = {p.name for p in jitcore.last_traces(jfn)[-1].args}
    assert saved <= inputs, saved - inputs  # the MLP's inputs: x and the parameters


def test_budget_zero_recomputes_layer_norm_and_attention_kernels():
    """The block's layer norms and CPU flash attention run as opaque torch kernels known pure: at b=0 the block
    saves its inputs alone (x and the parameters), as torch.compile does at activation_memory_budget=0."""
    fn, make = _workload("block")
    _, want = _step(fn, make())
    jfn = jitcore.jit(fn, memory_budget=0)
    _, grads = _step(jfn, make())
    assert all(torch.equal(g, w) for g, w in zip(grads, want))
    bw = jitcore.last_backward_traces(jfn)[-1]
    saved = {p.name for p in bw.args[:dict(bw.arg_groups)["saved"]]}
    assert saved <= {p.name for p in jitcore.last_traces(jfn)[-1].args}
    assert "_opaque_sdpa_flash_cpu(" in str(bw) and "layer_norm" in str(bw)


def test_random_draws_keep_their_outcomes():
    """A dropout mask is saved at every budget (never drawn again in the backward): gradients as eager's."""
    def f(x):
        return torch.nn.functional.dropout(torch.sin(x), 0.5).tanh().exp()

    x = torch.randn(32, 32)
    xe = x.clone().requires_grad_()
    torch.manual_seed(3)
    f(xe).sum().backward()
    for b in (0.0, 0.5):
        jfn = jitcore.jit(f, memory_budget=b)
        xj = x.clone().requires_grad_()
        torch.manual_seed(3)
        jfn(xj).sum().backward()
        assert torch.equal(xj.grad, xe.grad), b


def test_budget_without_rematerialization_interpolates_from_what_the_backward_reads():
    """rematerialize=False: the default plan saves what the backward reads; the minimal plan is the same as ever."""
    fn, make = _workload("chain")
    _, want = _step(fn, make())
    sizes = {}
    for remat in (True, False):
        for b in (1.0, 0.0):
            jfn = jitcore.jit(fn, rematerialize=remat, memory_budget=b)
            _, grads = _step(jfn, make())
            assert torch.equal(grads[0], want[0]), (remat, b)
            sizes[remat, b] = jitcore.saved_tensor_bytes(jfn).nbytes
    assert sizes[False, 0.0] == sizes[True, 0.0] < sizes[True, 1.0] <= sizes[False, 1.0], sizes


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True, float("nan")])
def test_invalid_budget_is_refused(bad):
    with pytest.raises(ValueError, match=r"memory_budget=\.\.\.\): expected None or a number from 0 to 1"):
        jitcore.jit(chain, memory_budget=bad)


def test_budget_is_an_option_not_a_guard():
    """Two budgets are two jitted functions with their own programs; each reuses its own entry on the next call."""
    fn, make = _workload("chain")
    low, high = jitcore.jit(fn, memory_budget=0), jitcore.jit(fn)
    for _ in range(2):
        _step(low, make())
        _step(high, make())
    assert jitcore.cache_misses(low) == jitcore.cache_misses(high) == 1
    assert jitcore.cache_hits(low) == jitcore.cache_hits(high) == 1
    assert jitcore.saved_tensor_bytes(low).nbytes < jitcore.saved_tensor_bytes(high).nbytes


def test_saved_tensor_bytes_of_a_function_not_called_yet():
    with pytest.raises(ValueError, match="not been called"):
        jitcore.saved_tensor_bytes(jitcore.jit(chain))
    jfn = jitcore.jit(chain)
    jfn(torch.randn(3))  # no input requires grad: nothing saved
    assert jitcore.saved_tensor_bytes(jfn).nbytes == 0


def test_inductor_gradients_close_at_half_budget():
    from executors import inductor_ex

    fn, make = _workload("chain")
    want_out, want = _step(fn, make())
    jfn = jitcore.jit(fn, executors=[inductor_ex], memory_budget=0.5)
    out, grads = _step(jfn, make())
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(grads[0], want[0])
    default = jitcore.jit(fn, executors=[inductor_ex])
    _step(default, make())
    assert jitcore.saved_tensor_bytes(jfn).nbytes <= jitcore.saved_tensor_bytes(default).nbytes


def test_benchmark_quick_writes_its_table_and_plot(tmp_path):
    """python -m benchmarks.memory_budget OUT --quick: tiny sizes; the JSON, the markdown table and the PNG plot."""
    import json

    from benchmarks import memory_budget

    memory_budget.main([str(tmp_path), "--quick", "--workloads", "sin/tanh chain", "--rounds", "2"])
    data = json.loads((tmp_path / "results.json").read_text())
    rows = {r["variant"]: r for r in data["rows"]}
    assert {"eager", "jitcore b=0", "jitcore b=1", "torch.compile b=0", "torch.compile b=1"} <= set(rows)
    ours = [rows[f"jitcore b={b:g}"] for b in memory_budget.BUDGETS]
    assert all(r["grads_bitwise"] and r["planned_bytes"] == r["saved_bytes"] for r in ours)
    assert all(a["saved_bytes"] <= c["saved_bytes"] for a, c in itertools.pairwise(ours))
    assert data["targets"][0]["met"], data["targets"]
    assert "| sin/tanh chain | jitcore b=0 |" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "memory_budget.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
