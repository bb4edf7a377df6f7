"""Distributed training (issue 22): DDP(jitcore.jit(model)) trains as eager DDP does (losses, parameters, buffers;
no_sync, find_unused_parameters, buffer broadcast), jitcore.jit(DDP(model)) is refused naming the composition that
works, and collectives written in a jitted function are ops of the trace that run in program order and that DCE and
CSE keep. Each scenario runs in 2 gloo processes on localhost (tests/distributed_workers.py), killed after 60 s.
"""
import pytest
import torch

from tests.distributed_workers import launch

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available")

TIMEOUT = 60  # seconds per scenario (2 processes): a hang fails the tests instead of stalling the suite


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """scenario -> each rank's results, each scenario launched once for the tests that read it."""
    done = {}

    def get(scenario):
        if scenario not in done:
            try:
                done[scenario] = launch(scenario, tmp_path_factory.mktemp(scenario), timeout=TIMEOUT)
            except AssertionError as e:
                done[scenario] = e
        if isinstance(done[scenario], AssertionError):
            raise done[scenario]
        return done[scenario]

    return get


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
def test_ddp_of_jitted_gpt_trains_like_eager_ddp(runs):
    assert_trains_like_eager(runs("ddp_models"), "gpt")


def test_ddp_of_jitted_cnn_with_batchnorm_trains_like_eager_ddp(runs):
    per_rank = runs("ddp_models")
    assert_trains_like_eager(per_rank, "cnn")
    # the gradients were averaged: both ranks hold the same parameters, though each saw its own data
    params = [{k: v for k, v in r["cnn"]["jitted"]["state"].items() if "running" not in k and "num_batches" not in k}
              for r in per_rank]
    for name, value in params[0].items():
        torch.testing.assert_close(params[1][name], value, rtol=0, atol=0)


def test_ddp_of_jitted_model_broadcasts_buffers_as_eager(runs):
    per_rank = runs("ddp_features")
    assert_trains_like_eager(per_rank, "no_broadcast")
    # with broadcast_buffers (the default) rank 1 starts each forward from rank 0's running statistics, without it
    # from its own: the runs differ, and the jitted model follows eager in both (test above, and here)
    with_broadcast = runs("ddp_models")[1]["cnn"]["jitted"]["state"]["bn1.running_mean"]
    without = per_rank[1]["no_broadcast"]["jitted"]["state"]["bn1.running_mean"]
    assert not torch.equal(with_broadcast, without)


def test_ddp_of_jitted_model_no_sync_accumulates_like_eager(runs):
    assert_trains_like_eager(runs("ddp_features"), "no_sync")


def test_ddp_of_jitted_model_find_unused_parameters_like_eager(runs):
    per_rank = runs("ddp_features")
    assert_trains_like_eager(per_rank, "unused")
    for rank in range(2):  # the unused layer is never updated
        state = per_rank[rank]["unused"]
        torch.testing.assert_close(state["jitted"]["state"]["unused.weight"], state["eager"]["state"]["unused.weight"])


def test_jit_of_ddp_is_refused_naming_ddp_of_jit(runs):
    for result in runs("ddp_features"):
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


def test_inplace_collectives_write_their_tensors(runs):
    for result in runs("collectives"):
        case = result["inplace"]
        assert_call_like_eager(case, "in-place collectives")  # args: the caller's `buf` holds the max after the call
        assert case["forward"] == ["all_reduce", "wait_tensor", "all_reduce", "wait_tensor", "all_gather_into_tensor",
                                   "wait_tensor", "reduce_scatter_tensor", "wait_tensor"]


def test_gradient_through_inplace_all_reduce_is_eager_s(runs):
    for result in runs("collectives"):
        case = result["grad_all_reduce"]
        assert_call_like_eager(case, "gradient through dist.all_reduce")
        assert case["backward"] == []  # eager's autograd does not record c10d's collectives


def test_functional_collectives_and_their_gradients(runs):
    per_rank = runs("collectives")
    for result in per_rank:
        case = result["functional"]
        assert_call_like_eager(case, "functional collectives")
        assert [c for c in case["forward"] if c != "wait_tensor"] == [
            "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_into_tensor"]
        # the backward's collectives: each forward collective's adjoint, in reverse program order
        assert [c for c in case["backward"] if c != "wait_tensor"] == [
            "reduce_scatter_tensor", "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"]
    assert per_rank[0]["functional"]["backward"] == per_rank[1]["functional"]["backward"]


def test_collectives_are_effects_dce_and_cse_keep(runs):
    for result in runs("collectives"):
        case = result["effects"]
        assert_call_like_eager(case, "unused and repeated collectives")
        # 4 all_reduces: one whose result is unused (in-place on a clone), one never waited on or read, and two
        # identical ones CSE must not merge
        assert case["forward"].count("all_reduce") == 4, case["trace"]


def test_async_collective_is_refused_naming_the_synchronous_form(runs):
    for result in runs("collectives"):
        assert "async_op=True" in result["async"] and "synchronous form" in result["async"]


def test_process_group_argument_is_guarded_by_identity(runs):
    for result in runs("collectives"):
        case = result["groups"]
        for value in case["results"]:
            torch.testing.assert_close(value, torch.full((2,), 3.0))
        assert case["names"][0] != case["names"][1] and case["pair_in_trace"]
        assert (case["misses"], case["hits"]) == (2, 1)  # another group is another program; the first one again hits
