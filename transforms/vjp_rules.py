"""Transforms (autodiff): THE autodiff table. VJP_RULES maps an op id to its rule: rule(bsym, *output_cotangents)
returns the cotangent of each parameter of the op (None where there is none). The rows live in one file per family
(vjp_rules_elementwise, _structural, _composite, _edges), each row right after its rule; importing this module loads
them all. Also here: the backward of opaque torch ops, which have no row (torch.autograd at run time).
"""
from __future__ import annotations

from jitcore.ops.opaque import opaque_vjp_replay_sym, opaque_vjp_sym, with_rng_state_sym

# the family files add their rows to VJP_RULES when imported
from transforms import (  # noqa: F401
    vjp_rules_complex,
    vjp_rules_composite,
    vjp_rules_distributed,
    vjp_rules_edges,
    vjp_rules_elementwise,
    vjp_rules_structural,
)
from transforms.vjp_helpers import AUGMENTED_FORWARDS, VJP_RULES

__all__ = ["AUGMENTED_FORWARDS", "VJP_RULES", "opaque_vjp", "random_opaque_augment"]


# -- opaque torch ops: torch.autograd at run time ----------------------------------------------------------------------
def opaque_vjp(bsym, gs):
    """Backward of an opaque torch op: one recorded line that recomputes it with torch.autograd."""
    return opaque_vjp_sym(bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs), list(gs))


def random_opaque_augment(bsym):
    """The augmented forward of an opaque op that draws random numbers (any such op: no row by id): recomputing it
    in the backward would draw new numbers (another mask, another slope) and advance the generator, so its forward
    line is swapped for one that also returns the generator state it started from, and the backward recomputes it
    from that state."""
    return with_rng_state_sym, (bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs)), {}, _random_opaque_backward


def _random_opaque_backward(bsym, residuals, *gs):
    (state,) = residuals
    return opaque_vjp_replay_sym(bsym.sym.torch_fn, tuple(bsym.args), dict(bsym.kwargs), list(gs), state)

