"""Distributed training (issue 22): DDP(jitcore.jit(model)) trains as eager DDP does (losses, parameters, buffers;
no_sync, find_unused_parameters, buffer broadcast) and DDP reduces its buckets while the jitted backward still runs;
jitcore.jit(DDP(model)) is refused naming the composition that works; FSDP2 (fully_shard per block and on the root,
then jitcore.jit(model), or jitted blocks inside the sharded model) trains as eager FSDP2 does; collectives written in
a jitted function are ops of the trace that run in program order and that DCE and CSE keep. Each test runs one
scenario in 2 gloo processes on localhost (tests/distributed_workers.py), killed after 120 s; the checks of a scenario
are the check_* functions it calls.
"""
import re

import pytest
import torch

from jitcore import compat
from tests.distributed_workers import launch

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available")

TIMEOUT = 120  # seconds per scenario (2 processes): a hang fails the tests instead of stalling the suite (ddp_variants
# took 57 s on torch 2.10 with the machine loaded 8-fold, compiling its Inductor regions)


def run(scenario: str, tmp_path) -> list:
    """Each rank's results of `scenario` (one launch per test: a test's processes are killed after TIMEOUT)."""
    return launch(scenario, tmp_path, timeout=TIMEOUT)


def assert_trains_like_eager(per_rank: list, what: str):
    for rank, result in enumerate(per_rank):
        eager, jitted = result[what]["eager"], result[what]["jitted"]
        where = f"rank {rank}, {what}"
        torch.testing.assert_close(jitted["losses"], eager["losses"], rtol=1e-6, atol=1e-6,
                                   msg=lambda m, where=where: f"{where}, losses: {m}")
        assert eager["state"].keys() == jitted["state"].keys()
        for name, value in eager["state"].items():
            torch.testing.assert_close(jitted["state"][name], value, rtol=1e-6, atol=1e-6,
                                       msg=lambda m, where=f"{where}, {name}": f"{where} after the steps: {m}")


# -- DDP(jitcore.jit(model)) -------------------------------------------------------------------------------------------
def test_ddp_of_jitted_gpt_trains_like_eager_ddp_and_reduces_buckets_during_the_backward(tmp_path):
    per_rank = run("ddp_gpt", tmp_path)
    assert_trains_like_eager(per_rank, "gpt")
    check_buckets_reduced_during_the_backward(per_rank)


def check_buckets_reduced_during_the_backward(per_rank):
    assert_trains_like_eager(per_rank, "ddp_overlap")
    for rank, result in enumerate(r["ddp_overlap"] for r in per_rank):
        for step, events in enumerate(result["jitted"]["events"][1:], 1):  # (DDP's first step: one bucket)
            # the first bucket (the last layers' parameters) is reduced while the jitted backward still runs, before
            # it computes the gradient of the first layer's (wpe's), and so is every bucket: each parameter's
            # gradient is handed over as soon as the program computes it
            done = events.index("jitted backward done")
            buckets = [e for e in events if e.startswith("bucket")]
            assert events[0] == "bucket 0" and len(buckets) == done, (rank, step, events)
            assert "first grad computed" in buckets[-1] and len(buckets) > 2, (rank, step, events)
        for step, events in enumerate(result["eager"]["events"][1:], 1):  # the same holds for eager DDP
            assert events[0] == "bucket 0" and "first grad computed" in events[-1], (rank, step, events)
        assert "grads_ready(" in result["backward"]
        local = result["local grads"]  # under no_sync: the program's own gradients, bit for bit
        for name, g in local["alone"].items():
            assert torch.equal(local["ddp"][name], g), (rank, name)


def assert_sharded_training_like_eager(per_rank, what, tol, state_tol=None):
    state_tol = tol if state_tol is None else state_tol
    for rank, result in enumerate(r[what] for r in per_rank):
        eager, jitted = result["eager"], result["jitted"]
        torch.testing.assert_close(jitted["losses"], eager["losses"], rtol=tol, atol=tol)
        assert eager["state"].keys() == jitted["state"].keys()
        for name, value in eager["state"].items():
            torch.testing.assert_close(jitted["state"][name], value, rtol=state_tol, atol=state_tol,
                                       msg=lambda m, where=f"rank {rank}, {what}, {name}": f"{where}: {m}")
        assert eager["sharded"] and jitted["sharded"]  # the parameters stay DTensors sharded over the ranks


def comments(program: str) -> str:
    """The comment lines atop a printed program, joined into one text."""
    return " ".join(line[2:] for line in program.splitlines() if line.startswith("# "))


def block_lines(program: str) -> list:
    """(op, block) of each FSDP2 block line of a printed program, in order."""
    return re.findall(r"(fsdp_\w+)\('fsdp\d+:([\w.]+)'", program)


def test_fsdp2_of_jitted_gpt_trains_like_eager_fsdp2(tmp_path):
    per_rank = run("fsdp", tmp_path)
    # fully_shard per block and on the root, then jitcore.jit(model): 2 steps of 2 micro-batches each
    assert_sharded_training_like_eager(per_rank, "fsdp", 1e-6)
    # bf16 parameters, fp32 reduction: the losses (bf16) may differ by a rounding step of bf16 at ~4 (0.03); the
    # parameters after the steps are eager's bit for bit (the tied embedding's two contributions summed as eager's)
    assert_sharded_training_like_eager(per_rank, "fsdp_mixed", 1e-2, state_tol=0)
    # jitted blocks inside the sharded model (the root eager)
    assert_sharded_training_like_eager(per_rank, "fsdp_blocks", 1e-6)
    for result in per_rank:
        for what in ("fsdp", "fsdp_mixed"):  # the first step compiles; later calls and micro-batches hit
            assert result[what]["misses"] == 1
            # the programs say where FSDP gathers the parameters and reduces the gradients: the root's eagerly,
            # each block's at its own lines, one block after the other
            forward, backward = comments(result[what]["forward"]), comments(result[what]["backward"])
            assert "FSDP all-gathers the parameters of GPT (its own parameters, by its pre-forward hook), " \
                   "eagerly" in forward
            assert "parameters (transformer.h.0, transformer.h.1) are all-gathered at its fsdp_unshard" in forward
            assert "end-of-backward callback reduce-scatters the gradients of GPT" in backward
            assert block_lines(result[what]["forward"]) == [
                ("fsdp_unshard", "transformer.h.0"), ("fsdp_reshard", "transformer.h.0"),
                ("fsdp_unshard", "transformer.h.1"), ("fsdp_reshard", "transformer.h.1")]
            assert block_lines(result[what]["backward"]) == [
                ("fsdp_regather", "transformer.h.1"), ("fsdp_post_backward", "transformer.h.1"),
                ("fsdp_regather", "transformer.h.0"), ("fsdp_post_backward", "transformer.h.0")]
            # FSDP's steps of each block run in eager's order, with as many blocks unsharded at each (one in the
            # forward; in the backward, the block and the one it prefetches): the same memory as eager FSDP2
            events = result[what]["events"]
            assert events["jitted"] == events["eager"], events
            assert max(n for step, _, n in events["jitted"] if step.endswith("forward")) == 1
        assert result["fsdp_blocks"]["jitted"]["misses"] == [1, 1]
        assert "all-gathers the parameters of Block (its own" in comments(result["fsdp_blocks"]["jitted"]["forward"])
        casts = result["casts"]  # each block's bf16 input cast, inside the jitted program: eager's numbers exactly
        assert torch.equal(casts["jitted"]["loss"], casts["eager"]["loss"])
        assert all(torch.equal(j, e) for j, e in zip(casts["jitted"]["grads"], casts["eager"]["grads"]))
        no_grad = result["no_grad"]  # a forward under no_grad gathers and frees each block too
        assert torch.equal(no_grad["jitted"]["logits"], no_grad["eager"]["logits"])
        assert no_grad["jitted"]["sharded"] and no_grad["eager"]["sharded"]
        torch.testing.assert_close(no_grad["jitted"]["state"], no_grad["eager"]["state"], rtol=1e-6, atol=1e-6)
        assert "read outside the block's forward" in result["outside"], result["outside"]
        for (loss, grads), (eager_loss, eager_grads) in zip(result["elementwise"]["jitted"],
                                                            result["elementwise"]["eager"]):
            torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(grads, eager_grads, rtol=1e-6, atol=1e-6)
        # parameters read twice (in a block, and the root's), bf16 with float32 reduction, accumulating without
        # reducing first: torch 2.15's FSDP2 has autograd sum their contributions in float32, each cast first
        twice = result["twice"]
        for name, value in twice["eager"].items():
            assert torch.equal(twice["jitted"][name], value), name
        assert "fully_shard(jitcore.jit(block))" in result["shard_of_jitted"]
        assert "then jitcore.jit(model)" in result["shard_of_jitted"]


def check_cnn_with_batchnorm(per_rank):
    assert_trains_like_eager(per_rank, "cnn")
    # the gradients were averaged: both ranks hold the same parameters, though each saw its own data
    params = [{k: v for k, v in r["cnn"]["jitted"]["state"].items() if "running" not in k and "num_batches" not in k}
              for r in per_rank]
    for name, value in params[0].items():
        torch.testing.assert_close(params[1][name], value, rtol=0, atol=0)


def check_buffer_broadcast(per_rank):
    assert_trains_like_eager(per_rank, "no_broadcast")
    # with broadcast_buffers (the default) rank 1 starts each forward from rank 0's running statistics, without it
    # from its own: the runs differ, and the jitted model follows eager in both
    with_broadcast = per_rank[1]["cnn"]["jitted"]["state"]["bn1.running_mean"]
    without = per_rank[1]["no_broadcast"]["jitted"]["state"]["bn1.running_mean"]
    assert not torch.equal(with_broadcast, without)


def check_no_sync(per_rank):
    assert_trains_like_eager(per_rank, "no_sync")


def check_find_unused_parameters(per_rank):
    assert_trains_like_eager(per_rank, "unused")
    for rank in range(2):  # the unused layer is never updated
        state = per_rank[rank]["unused"]
        torch.testing.assert_close(state["jitted"]["state"]["unused.weight"], state["eager"]["state"]["unused.weight"])


def check_jit_of_ddp_refused(per_rank):
    for result in per_rank:
        assert "DDP(jitcore.jit(model))" in result["jit_of_ddp"]


# -- collectives inside a jitted function ------------------------------------------------------------------------------
def assert_same(eager, jitted, what):
    flat_e = eager if isinstance(eager, list) else [eager]
    flat_j = jitted if isinstance(jitted, list) else [jitted]
    assert len(flat_e) == len(flat_j)
    for e, j in zip(flat_e, flat_j):
        if e is None:
            assert j is None, what
        else:
            torch.testing.assert_close(j, e, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {m}")


def assert_call_like_eager(result, what):
    for key in ("result", "args", "grads"):
        assert_same(result["eager"][key], result["jitted"][key], f"{what} {key}")


def check_inplace_collectives(per_rank):
    for result in per_rank:
        case = result["inplace"]
        assert_call_like_eager(case, "in-place collectives")  # args: the caller's `buf` holds the max after the call
        assert case["forward"] == ["all_reduce", "wait_tensor", "all_reduce", "wait_tensor", "all_gather_into_tensor",
                                   "wait_tensor", "reduce_scatter_tensor", "wait_tensor"]


def check_gradient_through_inplace_all_reduce(per_rank):
    for result in per_rank:
        case = result["grad_all_reduce"]
        assert_call_like_eager(case, "gradient through dist.all_reduce")
        assert case["backward"] == []  # eager's autograd does not record c10d's collectives


def check_functional_collectives(per_rank):
    for result in per_rank:
        case = result["functional"]
        assert_call_like_eager(case, "functional collectives")
        assert [c for c in case["forward"] if c != "wait_tensor"] == [
            "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_into_tensor"]
        if not compat.eager_has("functional collectives under autograd"):
            continue  # (eager cannot differentiate them on this torch: the forward alone is compared)
        # the backward's collectives: each forward collective's adjoint, in reverse program order
        assert [c for c in case["backward"] if c != "wait_tensor"] == [
            "reduce_scatter_tensor", "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"]
    assert per_rank[0]["functional"]["backward"] == per_rank[1]["functional"]["backward"]


def check_effects_kept_by_dce_and_cse(per_rank):
    for result in per_rank:
        case = result["effects"]
        assert_call_like_eager(case, "unused and repeated collectives")
        # 4 all_reduces: one whose result is unused (in-place on a clone), one never waited on or read, and two
        # identical ones CSE must not merge
        assert case["forward"].count("all_reduce") == 4, case["trace"]


def check_async_refused(per_rank):
    for result in per_rank:
        assert "async_op=True" in result["async"] and "synchronous form" in result["async"]


def check_other_calls_refused(per_rank):
    for result in per_rank:  # run once while tracing, a broadcast would be missing from later calls
        assert "torch.distributed.broadcast inside a jitted function is not supported" in result["broadcast"]


def check_group_guarded_by_identity(per_rank):
    for result in per_rank:
        case = result["groups"]
        for value in case["results"]:
            torch.testing.assert_close(value, torch.full((2,), 3.0))
        assert case["names"][0] != case["names"][1] and case["pair_in_trace"]
        assert (case["misses"], case["hits"]) == (2, 1)  # another group is another program; the first one again hits


def test_ddp_of_jitted_cnn_with_batchnorm_and_buffer_broadcast_like_eager_ddp(tmp_path):
    per_rank = run("ddp_cnn", tmp_path)
    check_cnn_with_batchnorm(per_rank)
    check_buffer_broadcast(per_rank)


def test_ddp_of_jitted_model_no_sync_find_unused_and_jit_of_ddp_refused(tmp_path):
    per_rank = run("ddp_options", tmp_path)
    check_no_sync(per_rank)
    check_find_unused_parameters(per_rank)
    check_jit_of_ddp_refused(per_rank)


def test_ddp_static_graph_bucket_views_and_inductor_regions_train_like_eager_ddp(tmp_path):
    per_rank = run("ddp_variants", tmp_path)
    for what in ("static", "static_unused", "bucket_view"):
        assert_trains_like_eager(per_rank, what)
    for rank, result in enumerate(per_rank):  # Inductor's fused kernels round differently from eager's
        eager, jitted = result["inductor"]["eager"], result["inductor"]["jitted"]
        torch.testing.assert_close(jitted["losses"], eager["losses"], rtol=1e-5, atol=1e-5)
        for name, value in eager["state"].items():
            torch.testing.assert_close(jitted["state"][name], value, rtol=1e-5, atol=1e-5,
                                       msg=lambda m, name=name, rank=rank: f"rank {rank}, {name}: {m}")


def test_collectives_in_a_jitted_function(tmp_path):
    per_rank = run("collectives", tmp_path)
    check_inplace_collectives(per_rank)
    check_gradient_through_inplace_all_reduce(per_rank)
    check_functional_collectives(per_rank)
    check_effects_kept_by_dce_and_cse(per_rank)
    check_async_refused(per_rank)
    check_other_calls_refused(per_rank)
    check_group_guarded_by_identity(per_rank)
