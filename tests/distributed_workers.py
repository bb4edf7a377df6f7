"""Test helpers: the processes of the distributed tests (tests/test_distributed.py). `launch` starts `world` processes
of `python -m tests.distributed_workers SCENARIO` on a free localhost port (the environment torchrun gives: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), waits for them with a timeout (a hang fails, it never stalls) and reads back
what each rank saved with torch.save. A scenario runs eager and jitted training or collectives with the gloo backend.
"""
from __future__ import annotations

import contextlib
import copy
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from jitcore import compat

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario: str, out_dir: pathlib.Path, world: int = 2, timeout: float = 60.0) -> list[dict]:
    """Run `scenario` in `world` processes; each rank's saved dict, in rank order. Raises with the ranks' output on a
    failure or when they are not done within `timeout` seconds (they are killed then)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
           "OMP_NUM_THREADS": "1", "JITCORE_REGION_CACHE": "0"}
    procs, logs = [], []
    for rank in range(world):
        log = open(out_dir / f"{scenario}.{rank}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.distributed_workers", scenario, str(out_dir)],
                                      env={**env, "RANK": str(rank)}, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    if timed_out or any(p.returncode != 0 for p in procs):
        what = f"timed out after {timeout} s" if timed_out else f"exit codes {[p.returncode for p in procs]}"
        raise AssertionError(f"scenario {scenario} {what}\n" + "\n".join(
            f"--- rank {r} ---\n{t[-4000:]}" for r, t in enumerate(texts)))
    return [torch.load(out_dir / f"{scenario}.{rank}.pt") for rank in range(world)]


# -- models ---------------------------------------------------------------------------------------------------------
def gpt():
    from benchmarks.models import GPT, GPTConfig

    return GPT(GPTConfig(n_embd=32, n_head=2, block_size=16, vocab_size=64, n_layer=2))


def gpt_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    idx = torch.randint(0, 64, (2, 16), generator=g)
    return idx, torch.roll(idx, -1, 1)


def gpt_loss(model, batch):
    idx, targets = batch
    return model(idx, targets)[1]


class ConvBN(nn.Module):
    """A small CNN with BatchNorm (running statistics are buffers DDP broadcasts from rank 0 on every forward)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def cnn_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)


def cnn_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


class WithUnused(nn.Module):
    """A model one of whose layers takes no part in the loss (find_unused_parameters=True)."""

    def __init__(self):
        super().__init__()
        self.a, self.unused, self.b = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def mlp_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def mlp_loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


# -- training -------------------------------------------------------------------------------------------------------
def _state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def train(ddp, loss_fn, batch_fn, rank: int, steps: int = 3, accumulate: int = 1) -> dict:
    """`steps` optimizer steps of SGD with momentum; with accumulate > 1, the first micro-batches of each step run
    under ddp.no_sync() (gradients accumulate locally, the last one all-reduces them)."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            sync = micro == accumulate - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss = loss_fn(ddp, batch_fn(rank, step * accumulate + micro))
                loss.backward()
            losses.append(loss.detach().clone())
        opt.step()
    return {"losses": torch.stack(losses), "state": _state(ddp.module)}


def _jit(model):
    import jitcore
    from executors import torch_ex

    return jitcore.jit(model, executors=[torch_ex])


def eager_and_jitted(make, loss_fn, batch_fn, rank, **ddp_kwargs) -> dict:
    """Trains DDP(model) and DDP(jitcore.jit(model)) from the same initial weights; both runs' results."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = make()
    twin = copy.deepcopy(model)
    accumulate = ddp_kwargs.pop("accumulate", 1)
    jit = ddp_kwargs.pop("jit", _jit)
    eager = train(DDP(model, **ddp_kwargs), loss_fn, batch_fn, rank, accumulate=accumulate)
    jitted = train(DDP(jit(twin), **ddp_kwargs), loss_fn, batch_fn, rank, accumulate=accumulate)
    return {"eager": eager, "jitted": jitted}


def scenario_ddp_gpt(rank: int) -> dict:
    return {"gpt": eager_and_jitted(gpt, gpt_loss, gpt_batch, rank), **ddp_overlap(rank)}


def scenario_ddp_cnn(rank: int) -> dict:
    return {"cnn": eager_and_jitted(ConvBN, cnn_loss, cnn_batch, rank),
            "no_broadcast": eager_and_jitted(ConvBN, cnn_loss, cnn_batch, rank, broadcast_buffers=False)}


def scenario_ddp_options(rank: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jitcore

    out = {"no_sync": eager_and_jitted(ConvBN, cnn_loss, cnn_batch, rank, accumulate=2),
           "unused": eager_and_jitted(WithUnused, mlp_loss, mlp_batch, rank, find_unused_parameters=True)}
    try:
        jitcore.jit(DDP(WithUnused()))
        out["jit_of_ddp"] = "accepted"
    except jitcore.UnsupportedError as e:
        out["jit_of_ddp"] = str(e)
    return out


class CommOrder:
    """The state of `record_and_average`: the events of a step, in order (buckets reduced, marks)."""

    def __init__(self, first):
        self.events, self.first = [], first  # first: the parameter whose gradient the backward computes last

    def mark(self, what):
        return lambda *args: self.events.append(what)


def record_and_average(state: CommOrder, bucket):
    """A DDP comm hook: records that the bucket is reduced, then averages it over the ranks as DDP's own does."""
    import torch.distributed as dist

    state.events.append(f"bucket {bucket.index()}" + ("" if state.first.grad is None else ", first grad computed"))
    work = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def jitted_node(t):
    """The jitted program's autograd node t comes from (following first inputs)."""
    node = t.grad_fn
    while "JitAutograd" not in type(node).__name__:
        node = node.next_functions[0][0]
    return node


def ddp_overlap(rank: int) -> dict:
    """DDP(jitcore.jit(gpt)) with small buckets: for each step, the order of the buckets' reductions and the end of
    the jitted backward node; the local gradients under no_sync against the jitted model's own outside DDP; the
    printed backward; and the training against eager DDP with the same buckets and hook."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jitcore

    torch.manual_seed(0)
    model = gpt()
    twin = copy.deepcopy(model)
    jitted = _jit(twin)
    out = {}
    for name, module in (("eager", model), ("jitted", jitted)):
        order = CommOrder(module.transformer.wpe.weight)
        ddp = DDP(module, bucket_cap_mb=0.01)
        ddp.register_comm_hook(order, record_and_average)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        losses, events = [], []
        for step in range(3):
            opt.zero_grad(set_to_none=True)
            order.events = []
            _logits, loss = ddp(*gpt_batch(rank, step))
            if name == "jitted":
                jitted_node(loss).register_hook(order.mark("jitted backward done"))
            loss.backward()
            losses.append(loss.detach().clone())
            events.append(order.events)
            opt.step()
        out[name] = {"losses": torch.stack(losses), "state": _state(module), "events": events}
    out["backward"] = str(jitcore.last_backward_traces(jitted)[-1])
    # no_sync: the gradients DDP leaves are this rank's own, handed over from inside the backward
    ddp, local = DDP(jitted), _jit(copy.deepcopy(twin))
    for module in (ddp, local):
        module.zero_grad(set_to_none=True)
    with ddp.no_sync():
        gpt_loss(ddp, gpt_batch(rank, 9)).backward()
    gpt_loss(local, gpt_batch(rank, 9)).backward()
    out["local grads"] = {"ddp": {n: p.grad.clone() for n, p in jitted.named_parameters()},
                          "alone": {n: p.grad.clone() for n, p in local.named_parameters()}}
    return {"ddp_overlap": out}


def _jit_fused(model):
    import jitcore
    from executors import inductor_ex, torch_ex

    return jitcore.jit(model, executors=[inductor_ex, torch_ex])


def scenario_ddp_variants(rank: int) -> dict:
    """DDP's other options with a jitted model: static_graph, gradient_as_bucket_view (with no_sync accumulation: the
    gradients are views of DDP's buckets), and a model jitted with Inductor regions (gradients handed over from the
    fused backward)."""
    return {"static": eager_and_jitted(gpt, gpt_loss, gpt_batch, rank, static_graph=True),
            "static_unused": eager_and_jitted(WithUnused, mlp_loss, mlp_batch, rank, static_graph=True),
            "bucket_view": eager_and_jitted(ConvBN, cnn_loss, cnn_batch, rank, gradient_as_bucket_view=True,
                                            accumulate=2),
            "inductor": eager_and_jitted(ConvBN, cnn_loss, cnn_batch, rank, jit=_jit_fused)}


SCENARIOS = {"ddp_gpt": scenario_ddp_gpt, "ddp_cnn": scenario_ddp_cnn, "ddp_options": scenario_ddp_options,
             "ddp_variants": scenario_ddp_variants}


# -- collectives written inside jitted functions ---------------------------------------------------------------------
COLLECTIVE = re.compile(r"prims\.(all_reduce|all_gather_into_tensor|reduce_scatter_tensor|wait_tensor)\(")


def collectives_in(trace) -> list[str]:
    """The collective prims a printed trace runs, in order."""
    return COLLECTIVE.findall(str(trace))


def inplace_collectives(x, buf):
    import torch.distributed as dist

    y = x * 2
    dist.all_reduce(y)  # an intermediate: later reads see the sum
    dist.all_reduce(buf, op=dist.ReduceOp.MAX)  # an input: the caller's tensor is written
    gathered = torch.empty(2 * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(gathered, y)
    scattered = torch.zeros(x.shape[0] // 2, x.shape[1])
    dist.reduce_scatter_tensor(scattered, gathered[: x.shape[0]] + 1)
    return y + 1, gathered, scattered


def grad_through_all_reduce(x):
    import torch.distributed as dist

    y = x * 3
    dist.all_reduce(y)  # not recorded by autograd in eager: the gradient passes through y unchanged
    return (y * y).sum()


def functional_collectives(x):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    world = dist.group.WORLD
    a = funcol.wait_tensor(funcol.all_reduce(x * 2, "sum", world))
    b = funcol.wait_tensor(funcol.all_gather_tensor(x, 0, world))
    c = funcol.wait_tensor(funcol.reduce_scatter_tensor(x.sin(), "sum", 0, world))
    d = funcol.all_gather_tensor(x.cos(), 1, world)  # waited on by its first use
    return (a * a).sum() + (b ** 3).sum() + c.sum() + (d * d).sum()


def effects(x):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    world = dist.group.WORLD
    dist.all_reduce(x.clone())  # nothing reads the result
    funcol.all_reduce(x, "sum", world)  # nor here
    a = funcol.wait_tensor(funcol.all_reduce(x, "sum", world))
    b = funcol.wait_tensor(funcol.all_reduce(x, "sum", world))  # the same line as a's: both run
    return a + b


def async_collective(x):
    import torch.distributed as dist

    dist.all_reduce(x, async_op=True).wait()
    return x


def sum_over(x, group):
    import torch.distributed as dist

    y = x.clone()
    dist.all_reduce(y, group=group)
    return y


def group_argument(rank: int) -> dict:
    """The same function over two process groups: the group is guarded by identity, each group its own program."""
    import torch.distributed as dist

    import jitcore

    pair = dist.new_group([0, 1])
    jf = jitcore.jit(sum_over)
    x = torch.full((2,), float(rank + 1))
    results = [jf(x, dist.group.WORLD)]
    results.append(jf(x, pair))
    pair_trace = str(jitcore.last_traces(jf)[-1])
    results.append(jf(x, dist.group.WORLD))
    return {"results": results, "misses": jitcore.cache_misses(jf), "hits": jitcore.cache_hits(jf),
            "pair_in_trace": f"'{pair.group_name}')" in pair_trace, "names": (dist.group.WORLD.group_name,
                                                                              pair.group_name)}


def broadcast_inside(x):
    import torch.distributed as dist

    dist.broadcast(x, 0)
    return x * 2


def _compare_call(fn, rank, *shapes, grad=False):
    """fn's results (and gradients when grad) eagerly and jitted, on the same inputs; the jitted trace's collectives."""
    import jitcore
    from executors import torch_ex

    g = torch.Generator().manual_seed(rank)
    inputs = [torch.randn(*s, generator=g) for s in shapes]
    out = {}
    for kind, f in (("eager", fn), ("jitted", jitcore.jit(fn, executors=[torch_ex]))):
        args = [t.clone().requires_grad_(grad) for t in inputs]
        result = f(*args)
        if grad:
            result.backward()
        out[kind] = {"result": tree_detach(result), "args": [a.detach().clone() for a in args],
                     "grads": [a.grad for a in args] if grad else None}
        if kind == "jitted":
            out["forward"] = collectives_in(jitcore.last_traces(f)[-1])
            out["backward"] = collectives_in(jitcore.last_backward_traces(f)[-1]) if grad else []
            out["trace"] = str(jitcore.last_traces(f)[-1])
    return out


def tree_detach(x):
    if isinstance(x, (tuple, list)):
        return [tree_detach(v) for v in x]
    return x.detach().clone()


def scenario_collectives(rank: int) -> dict:
    import jitcore

    out = {"inplace": _compare_call(inplace_collectives, rank, (4, 3), (4, 3)),
           "grad_all_reduce": _compare_call(grad_through_all_reduce, rank, (5,), grad=True),
           "functional": _compare_call(functional_collectives, rank, (4, 3),
                                       grad=compat.eager_has("functional collectives under autograd")),
           "effects": _compare_call(effects, rank, (3,)), "groups": group_argument(rank)}
    try:
        jitcore.jit(async_collective)(torch.ones(2))
        out["async"] = "accepted"
    except jitcore.UnsupportedError as e:
        out["async"] = str(e)
    try:
        jitcore.jit(broadcast_inside)(torch.ones(2))
        out["broadcast"] = "accepted"
    except jitcore.UnsupportedError as e:
        out["broadcast"] = str(e)
    return out


SCENARIOS["collectives"] = scenario_collectives


# -- FSDP2: fully_shard per block and on the root, eager and jitted ------------------------------------------------
def sharded_gpt(mp=None):
    """The test GPT with fully_shard applied to each block, then to the root, over all ranks (a CPU mesh)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = gpt()
    kwargs = {"mesh": init_device_mesh("cpu", (dist.get_world_size(),))}
    if mp is not None:
        kwargs["mp_policy"] = mp
    for block in model.transformer.h:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _full_state(model) -> dict:
    from torch.distributed.tensor import DTensor

    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
            for k, v in model.state_dict().items()}


def train_sharded(model, call, rank: int, steps: int = 2, accumulate: int = 2) -> dict:
    """SGD with momentum; each step accumulates `accumulate` micro-batches, reducing gradients on the last only."""
    from torch.distributed.tensor import DTensor

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            model.set_requires_gradient_sync(micro == accumulate - 1)
            loss = gpt_loss(call or model, gpt_batch(rank, step * accumulate + micro))
            loss.backward()
            losses.append(loss.detach().float().clone())
        opt.step()
    return {"losses": torch.stack(losses), "state": _full_state(model),
            "sharded": all(isinstance(p, DTensor) and p.to_local().shape[0] < p.shape[0]
                           for p in model.parameters() if p.ndim > 0 and p.shape[0] > 1)}


def fsdp_eager_and_jitted(rank: int, mp=None) -> dict:
    import jitcore

    eager = train_sharded(sharded_gpt(mp), None, rank)
    model = sharded_gpt(mp)
    jitted = _jit(model)
    out = {"eager": eager, "jitted": train_sharded(model, jitted, rank)}
    out["misses"] = jitcore.cache_misses(jitted)
    out["forward"] = str(jitcore.last_traces(jitted)[-1])
    out["events"] = {"eager": fsdp_events(sharded_gpt(mp), None, rank), "jitted": fsdp_events(model, jitted, rank)}
    out["backward"] = str(jitcore.last_backward_traces(jitted)[-1])
    return out


def fsdp_events(model, call, rank: int) -> list:
    """FSDP's steps of the blocks' parameter groups in a training step (its second: the first compiles), in order:
    (step, block, how many blocks have their parameters unsharded right after it)."""
    from torch.distributed.fsdp import FSDPModule

    gpt_loss(call or model, gpt_batch(rank, 0)).backward()
    model.zero_grad(set_to_none=True)
    groups = [(name, g) for name, m in model.named_modules() if m is not model and isinstance(m, FSDPModule)
              for g in compat.fsdp_param_groups(m._get_fsdp_state())]
    log = []

    def logged(group, step, name):
        method = getattr(group, step)

        def run(*args, **kwargs):
            out = method(*args, **kwargs)
            log.append((step, name, sum(not g.is_sharded for _, g in groups)))
            return out
        return run

    for name, g in groups:
        for step in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
            setattr(g, step, logged(g, step, name))
    try:
        gpt_loss(call or model, gpt_batch(rank, 0)).backward()
    finally:
        for _, g in groups:
            for step in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
                delattr(g, step)
    model.zero_grad(set_to_none=True)
    return log


def jitted_blocks(rank: int) -> dict:
    """fully_shard per block and on the root, then each block replaced by its jitted self: the root runs eagerly."""
    import jitcore

    model = sharded_gpt()
    blocks = model.transformer.h
    for i in range(len(blocks)):
        blocks[i] = _jit(blocks[i])
    out = train_sharded(model, None, rank)
    out["misses"] = [jitcore.cache_misses(b) for b in blocks]
    out["forward"] = str(jitcore.last_traces(blocks[0])[-1])
    return out


def shard_of_jitted(rank: int) -> str:
    """fully_shard applied to a jitted model: refused at its first call, naming the order that works."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import jitcore

    torch.manual_seed(0)
    jitted = _jit(gpt())
    fully_shard(jitted, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    try:
        gpt_loss(jitted, gpt_batch(rank, 0))
    except jitcore.UnsupportedError as e:
        return str(e)
    return "accepted"


def no_grad_then_train(rank: int) -> dict:
    """Logits under torch.no_grad() (each block still gathered and freed in turn), then a training step, eager and
    jitted; and whether the parameters are sharded again after the no_grad call."""
    from torch.distributed.tensor import DTensor

    out = {}
    for kind in ("eager", "jitted"):
        model = sharded_gpt()
        call = model if kind == "eager" else _jit(model)
        with torch.no_grad():
            logits = call(gpt_batch(rank, 0)[0])[0]
        sharded = all(isinstance(p, DTensor) for p in model.parameters())
        out[kind] = {"logits": logits, "sharded": sharded, **train_sharded(model, call, rank, steps=1, accumulate=1)}
    return out


class Scale(nn.Module):
    """An elementwise block: rematerialization would recompute x * scale + shift in the backward (cheap), reading
    the block's parameters there; it must not (they are gathered only within the block's backward)."""

    def __init__(self):
        super().__init__()
        self.scale, self.shift = nn.Parameter(torch.randn(8)), nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.tanh(x * self.scale + self.shift) * 2


def elementwise_blocks(rank: int) -> dict:
    """Loss and gradients (full tensors) of sharded elementwise blocks, eager and jitted, over two steps."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    out = {}
    for kind in ("eager", "jitted"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), Scale(), Scale(), nn.Linear(8, 1))
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in (model[1], model[2]):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        call = model if kind == "eager" else _jit(model)
        results = []
        for step in range(2):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * rank + step))
            loss = call(x).sum()
            loss.backward()
            results.append((loss.detach(), [p.grad.full_tensor() for p in model.parameters()]))
            model.zero_grad(set_to_none=True)
        out[kind] = results
    return out


class Twice(nn.Module):
    """A block that reads its scale twice: its gradient has two contributions."""

    def __init__(self):
        super().__init__()
        self.scale, self.shift = nn.Parameter(torch.randn(8)), nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.tanh(x * self.scale + self.shift) * self.scale


def parameters_read_twice(rank: int, mp) -> dict:
    """Training (2 steps of 2 micro-batches, reducing on the last) of sharded Twice blocks under a root that runs
    its own Linear twice, with `mp`, eager and jitted: the full parameters after it."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    out = {}
    for kind in ("eager", "jitted"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), Twice(), Twice(), nn.Linear(8, 1))
        model[0].forward = lambda x, a=model[0]: nn.functional.linear(nn.functional.linear(x, a.weight), a.weight,
                                                                       a.bias)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in (model[1], model[2]):
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        call = model if kind == "eager" else _jit(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            for micro in range(2):
                model.set_requires_gradient_sync(micro == 1)
                x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * rank + 2 * step + micro))
                call(x).float().square().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        out[kind] = _full_state(model)
    return out


class ReadsABlockParameter(nn.Module):
    """A root whose forward reads a parameter of a sharded block outside the block's forward."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum() + self.blocks[0].weight.sum()


def block_parameter_outside(rank: int) -> str:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import jitcore

    model = ReadsABlockParameter()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    try:
        _jit(model)(torch.randn(4, 8))
    except jitcore.UnsupportedError as e:
        return str(e)
    return "accepted"


class CastsBetweenBlocks(nn.Module):
    """Blocks fed float32 by the root: under a bf16 MixedPrecisionPolicy each block casts its input on entry."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(2)])

    def forward(self, x):
        x = self.a(x).float() * 1.5
        for block in self.blocks:
            x = block(x).float()
        return x.sum()


def block_input_casts(rank: int, mp) -> dict:
    """Loss and gradients (full tensors) of CastsBetweenBlocks sharded with `mp`, eager and jitted."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    out = {}
    for kind in ("eager", "jitted"):
        torch.manual_seed(0)
        model = CastsBetweenBlocks()
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
        loss = (model if kind == "eager" else _jit(model))(x)
        loss.backward()
        out[kind] = {"loss": loss.detach(), "grads": [p.grad.full_tensor() for p in model.parameters()]}
    return out


def scenario_fsdp(rank: int) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    out = {"fsdp": fsdp_eager_and_jitted(rank), "fsdp_mixed": fsdp_eager_and_jitted(rank, mp)}
    out["fsdp_blocks"] = {"eager": out["fsdp"]["eager"], "jitted": jitted_blocks(rank)}
    out["shard_of_jitted"] = shard_of_jitted(rank)
    out["casts"] = block_input_casts(rank, mp)
    out["no_grad"] = no_grad_then_train(rank)
    out["outside"] = block_parameter_outside(rank)
    out["elementwise"] = elementwise_blocks(rank)
    out["twice"] = parameters_read_twice(rank, mp)
    return out


SCENARIOS["fsdp"] = scenario_fsdp


def main(scenario: str, out_dir: str):
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    try:
        result = SCENARIOS[scenario](rank)
        torch.save(result, pathlib.Path(out_dir) / f"{scenario}.{rank}.pt")
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)  # (the other rank may wait in a collective: no clean shutdown)
    # A scenario may leave a collective unwaited on purpose (an unread functional all_reduce must still run). Gloo's
    # barrier waits for every earlier collective of the group, so no rank tears the group down while the other's
    # background thread still exchanges data with it (that aborted a rank at exit: "terminate called ...").
    dist.barrier()
    dist.destroy_process_group()
    # The unwaited work stays in torch's work registry until static destruction, where it has aborted a rank; the
    # result is saved and the group is down, so leave without running destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:3])
