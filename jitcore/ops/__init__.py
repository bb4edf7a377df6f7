"""Ops: every op defined exactly once. Prims in prims_*.py, torch-level ops in torch_*.py; `prims` and `ltorch`
are the namespaces traces print (`prims.add`, `ltorch.gelu`); torch_map.py maps torch callables to ops.
"""
from jitcore.ops import (
    opaque,  # noqa: F401
    prims_elementwise,  # noqa: F401
    registry,
)
from jitcore.ops.registry import ltorch_ns as ltorch
from jitcore.ops.registry import prims_ns as prims

_FAMILIES = (
    "prims_shape", "prims_reduction", "prims_index", "prims_nn", "prims_creation", "prims_misc", "prims_python",
    "torch_elementwise", "torch_reduction", "torch_shape", "torch_layout", "torch_index", "torch_creation",
    "torch_misc",
    "torch_nn_activation", "torch_nn_norm", "torch_nn_loss", "torch_nn_conv", "torch_nn_pool", "torch_nn_attention",
    "torch_linalg",
    "torch_inplace",  # last: it derives the in-place variants of the ops the families above define
)


def _load_families():
    import importlib
    import importlib.util

    for fam in _FAMILIES:
        if importlib.util.find_spec(f"jitcore.ops.{fam}") is not None:
            importlib.import_module(f"jitcore.ops.{fam}")


_load_families()
__all__ = ["ltorch", "prims", "registry"]
