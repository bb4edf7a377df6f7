"""Transforms: FSDP2 blocks (jitcore/ops/sharding.py). Over the interpreted computation trace of a model sharded per
block, `thread_sharded_params` makes each block's `fsdp_unshard` line take the block's parameters and give their
unsharded tensors, which the block's lines then read, so no line of the block can run before its gather (and its
`fsdp_reshard` line, an effect, ends it). `check_backward_order` proves, on a finished backward, that every line
reading a block's saved parameters runs between that block's `fsdp_regather` and `fsdp_post_backward` lines.
"""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.ir.context import tracectx
from jitcore.ir.proxies import Proxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.trace import Timer, Trace, from_trace
from jitcore.ops.sharding import fsdp_post_backward_sym, fsdp_regather_sym, fsdp_reshard_sym, fsdp_unshard_sym
from transforms.cse import rename_args

HINT = "read a sharded block's parameters only inside its own forward (FSDP2 gathers them only there)"


def _blocks(trace: Trace) -> dict:
    """key -> (names, params) that the block's fsdp_reshard line recorded (the parameters its lines read)."""
    out = {}
    for b in trace.bound_symbols:
        if b.sym is fsdp_reshard_sym:
            key = b.args[0]
            if key in out:
                raise UnsupportedError("FSDP2", f"the sharded block {key.split(':', 1)[1]} runs twice in one forward: "
                                       "FSDP2 gathers its parameters once per forward here", hint=HINT)
            names = b.args[2] if len(b.args) > 2 else b.kwargs.get("names", ())
            params = b.args[3] if len(b.args) > 3 else b.kwargs.get("params", ())
            out[key] = (tuple(names), tuple(params))
    return out


def thread_sharded_params(trace: Trace) -> Trace:
    """The trace with each block's parameters read through its fsdp_unshard line; the same trace without blocks.
    A parameter of a block read outside the block's forward is refused (it is sharded there)."""
    blocks = _blocks(trace)
    if not blocks:
        return trace
    with Timer() as t:
        new = from_trace(trace)
        owner = {p.name: key for key, (_, params) in blocks.items() for p in params}
        renamed: dict = {}  # parameter name -> its unsharded proxy, while its block's forward runs
        lines = []
        for b in trace.bound_symbols:
            if b.sym is fsdp_unshard_sym:
                key = b.args[0]
                names, params = blocks.get(key, ((), ()))
                with tracectx(new):
                    outs = tuple(p.like() for p in params)
                renamed.update((p.name, o) for p, o in zip(params, outs))
                lines.append(b.from_bsym(args=(key, names, params), kwargs={}, output=outs))
                continue
            if b.sym is fsdp_reshard_sym:
                key, outputs = b.args[0], b.args[1]
                outputs = tuple(renamed.get(o.name, o) if isinstance(o, Proxy) else o for o in outputs)
                lines.append(b.from_bsym(args=(key, outputs), kwargs={}))
                for p in blocks[key][1]:
                    renamed.pop(p.name, None)
                continue
            _refuse_outside(b.flat_proxy_args(), owner, renamed)
            lines.append(rename_args(b, renamed))
        _refuse_outside([x for x in tree_leaves(trace.output) if isinstance(x, Proxy)], owner, {})
        new.bound_symbols = lines
    return new.set_provenance("FSDP2 blocks (each block's lines read its parameters as gathered)", t.seconds)


def _refuse_outside(proxies, owner: dict, renamed: dict):
    for p in proxies:
        if p.name in owner and p.name not in renamed:
            raise UnsupportedError("FSDP2", f"a parameter of the sharded block {owner[p.name].split(':', 1)[1]} is "
                                   "read outside the block's forward, where FSDP2 keeps it sharded", hint=HINT)


def check_backward_order(backward: Trace, forward: Trace):
    """Raise unless every backward line that reads a block's unsharded parameters (saved by the forward) runs after
    the block's fsdp_regather line and before its fsdp_post_backward line (there the parameters are gathered)."""
    owner = {o.name: b.args[0] for b in forward.bound_symbols if b.sym is fsdp_unshard_sym for o in b.output}
    if not owner:
        return
    gathered: set = set()
    for b in backward.bound_symbols:
        if b.sym is fsdp_regather_sym:
            gathered.add(b.args[0])
        elif b.sym is fsdp_post_backward_sym:
            gathered.discard(b.args[0])
        else:
            for p in b.flat_proxy_args():
                key = owner.get(p.name)
                if key is not None and key not in gathered:
                    raise AssertionError(f"jitcore: the backward reads {p.name}, a parameter of the sharded block "
                                         f"{key}, where it is not gathered (line {b.sym.name}); this is a bug")
