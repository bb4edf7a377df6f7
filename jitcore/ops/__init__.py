"""Ops: every op defined exactly once. Prims in prims_*.py, torch-level ops in torch_*.py; `prims` and `ltorch`
are the namespaces traces print (`prims.add`, `ltorch.gelu`); torch_map.py maps torch callables to ops.
"""
# the families register their ops on import
from jitcore.ops import (  # noqa: F401
    opaque,
    prims_complex,
    prims_creation,
    prims_distributed,
    prims_elementwise,
    prims_index,
    prims_misc,
    prims_nn,
    prims_python,
    prims_reduction,
    prims_shape,
    registry,
    size_checks,
    torch_complex,
    torch_creation,
    torch_elementwise,
    torch_index,
    torch_layout,
    torch_linalg,
    torch_misc,
    torch_nn_activation,
    torch_nn_attention,
    torch_nn_conv,
    torch_nn_grad,
    torch_nn_loss,
    torch_nn_norm,
    torch_nn_pool,
    torch_reduction,
    torch_shape,
    torch_value_sizes,
)

# isort: split
# derived from the families above, so imported after them: torch_inplace derives the in-place variants of their ops
# (and registers the "inplace" fallbacks), autocast's policy table names ops of every family, torch_distributed
# writes with torch_inplace's write
from jitcore.ops import autocast, out_args, torch_distributed, torch_inplace  # noqa: F401
from jitcore.ops.registry import ltorch_ns as ltorch
from jitcore.ops.registry import prims_ns as prims

__all__ = ["ltorch", "prims", "registry"]
