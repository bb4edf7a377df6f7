"""Ops: FSDP2's per-block lines (jitcore.jit of a model sharded with fully_shard per block). In the forward,
`fsdp_unshard` all-gathers a sharded block's parameters right before its first line (its outputs are the unsharded
parameters the block's lines read) and `fsdp_reshard` frees them right after its last (it passes the block's outputs
on). Their VJPs (transforms/vjp_rules_distributed.py) put `fsdp_regather` (all-gather again) before the block's
backward and `fsdp_post_backward` (gradients to the parameters, reduce-scatter, reshard) after it. Effects: never
dropped, merged or moved. A block is named by a string key of the UNITS registry (jitcore/runtime/fsdp_units.py
fills it).
"""
from __future__ import annotations

import weakref

from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import EAGER_KERNELS, Symbol, Tag

# key ("fsdp<n>:<module path>") -> the sharded block's runtime (jitcore/runtime/fsdp_units.py _Unit):
# unshard(names) -> the unsharded parameters, reshard(), pre_backward(), post_backward(names, grads)
UNITS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _unit(key: str):
    unit = UNITS.get(key)
    if unit is None:
        raise RuntimeError(f"jitcore: the FSDP2 block {key!r} of this program no longer exists (its jitted model was "
                           "garbage collected); run the program through its jitted model")
    return unit


def fsdp_unshard(key: str, names: tuple, params: tuple) -> tuple:
    """All-gather the block's parameters (FSDP's pre-forward of the block); its unsharded parameters, in `names`'
    order (the tensors `params` stand for: their storage is refilled)."""
    return _unit(key).unshard(names)


def fsdp_reshard(key: str, outputs: tuple, names: tuple = (), params: tuple = ()) -> tuple:
    """Free the block's unsharded parameters (FSDP's post-forward of the block); `outputs` passed on. (names and
    params: as traced, the block's parameters its lines read, for transforms/fsdp_order.py, which moves them to the
    block's fsdp_unshard line.)"""
    _unit(key).reshard()
    return outputs


def fsdp_regather(key: str, cotangents: tuple) -> tuple:
    """All-gather the block's parameters again before its backward (FSDP's pre-backward); `cotangents` passed on."""
    _unit(key).pre_backward()
    return cotangents


def fsdp_post_backward(key: str, names: tuple, grads: tuple) -> None:
    """Accumulate `grads` into the block's unsharded parameters `names`, then FSDP's post-backward of the block:
    reduce-scatter (or keep accumulating under set_requires_gradient_sync(False)) and reshard."""
    _unit(key).post_backward(names, grads)


def _like_each(tensors) -> tuple:
    return tuple(t.like() if isinstance(t, TensorProxy) else t for t in tensors)


_EFFECT = (Tag.PYTHON, Tag.DONT_DCE, Tag.EFFECTS)


def _sym(id: str, fn, meta, differentiable: bool) -> Symbol:
    tags = _EFFECT if differentiable else (*_EFFECT, Tag.NON_DIFFERENTIABLE)
    sym = Symbol(id, fn.__name__, meta=meta, tags=tags, module="", call_ctx={fn.__name__: fn})
    EAGER_KERNELS[sym.id] = fn
    return sym


fsdp_unshard_sym = _sym("fsdp.unshard", fsdp_unshard, lambda key, names, params: _like_each(params), True)
fsdp_reshard_sym = _sym("fsdp.reshard", fsdp_reshard, lambda key, outputs, names=(), params=(): _like_each(outputs),
                        True)
fsdp_regather_sym = _sym("fsdp.regather", fsdp_regather, lambda key, cotangents: _like_each(cotangents), False)
fsdp_post_backward_sym = _sym("fsdp.post_backward", fsdp_post_backward, lambda key, names, grads: None, False)
# ops whose outputs' memory a later line frees (and the backward refills): no line reading them is recomputed
SCOPED_OUTPUTS = frozenset({fsdp_unshard_sym.id})
