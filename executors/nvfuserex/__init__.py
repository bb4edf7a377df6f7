"""Executors: the nvFuser executor (CUDA only). Claims lines whose whole decomposition has translator rows
(executors/nvfuserex/translate.py), groups them into regions (executors/regions.py) and runs each region as
an nvFuser FusionDefinition built by those rows, cached by input signature (rank, dtype, contiguity; sizes
other than 1 stay symbolic, -1). nvFuser is imported only when a fusion is built; `nvfuser_program(region)`
shows the same lowering as nvFuser Python frontend text on any machine.
"""
from __future__ import annotations

import torch

from executors.nvfuserex.text import TextDataType, TextFusion
from executors.nvfuserex.translate import DTYPE_NAMES, TRANSLATORS, lower_region, tensor_signature, translatable
from executors.regions import canonical_key, fuse_regions, has_side_effect
from executors.torchex import TorchLinesFusionExecutor, torch_ex
from jitcore import compat
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_leaves
from jitcore.ir.symbol import BoundSymbol, Tag
from jitcore.ir.trace import Trace

FUSIONS: dict = {}  # (canonical region key, input signature) -> nvFuser FusionDefinition


def _import_nvfuser():
    import nvfuser

    return nvfuser


class NvFuserExecutor(TorchLinesFusionExecutor):
    """Fusion regions run by nvFuser. require_cuda=False claims CPU proxies too (to inspect lowerings on CPU)."""

    def __init__(self, name: str = "nvfuser", *, require_cuda: bool = True):
        super().__init__(name)
        self.require_cuda = require_cuda

    def is_available(self) -> tuple[bool, str]:
        if not torch.cuda.is_available():
            return False, "nvFuser needs a CUDA device and torch.cuda.is_available() is False; use 'inductor'"
        try:
            _import_nvfuser()
        except Exception as e:
            return False, f"nvFuser cannot be imported ({type(e).__name__}: {e}); {compat.nvfuser_install_hint()}"
        return True, ""

    def _tensors_ok(self, bsym: BoundSymbol) -> bool:
        ps = bsym.flat_proxy_args() + bsym.flat_proxy_outs()
        if not bsym.flat_proxy_outs() or not all(isinstance(p, TensorProxy) for p in ps):
            return False
        if not all(p.dtype in DTYPE_NAMES and all(isinstance(s, int) for s in p._shape) for p in ps):
            return False
        if not self.require_cuda:
            return True
        # a 0-d CPU tensor is a scalar input nvFuser accepts next to CUDA tensors
        return all(p.device.type == "cuda" or (p.device.type == "cpu" and p.ndim == 0) for p in ps)

    def can_execute(self, bsym: BoundSymbol) -> bool:
        if Tag.OPAQUE in bsym.sym.tags or not torch_ex.can_execute(bsym):
            return False  # a line left unfused runs the torch executor's kernel
        return not has_side_effect(bsym) and self._tensors_ok(bsym) and translatable(bsym)

    def claimed(self, bsym: BoundSymbol) -> bool:
        return bsym.executor == self.name and bsym.region_trace is None

    def fuse(self, trace: Trace) -> Trace:
        return fuse_regions(trace, self.claimed, NvFusionRegion, prefix="nvFusion", executor_name=self.name,
                            pass_name=f"Fusion ({self.name}: regions run as nvFuser FusionDefinitions)")


def nvfuser_program(region: Trace, inputs=None) -> str:
    """The nvFuser Python frontend program for a region (or any trace whose ops all have rows) as text.

    inputs: real tensors to take the signature from (contiguity, size-1 dims); by default the proxies', contiguous.
    """
    fd = TextFusion()
    sigs = [tensor_signature(t) for t in inputs] if inputs is not None else None
    lower_region(_as_region(region), fd, TextDataType, sigs)
    return str(fd)


def _as_region(trace: Trace) -> Trace:
    outs = tuple(p for p in tree_leaves(trace.output) if isinstance(p, Proxy))
    sub = Trace(trace.fn_name)
    sub.args, sub.bound_symbols, sub.output = trace.args, trace.bound_symbols, outs
    return sub


def build_fusion(region: Trace, signatures):
    nvf = _import_nvfuser()
    with nvf.FusionDefinition() as fd:
        lower_region(region, fd, nvf.DataType, signatures)
    return fd


class NvFusionRegion:
    """A region's runner: one FusionDefinition per input signature, shared by equal regions everywhere."""

    def __init__(self, region: Trace):
        self.region, self.key = region, canonical_key(region)

    def __call__(self, *args):
        sig = tuple(tensor_signature(a) for a in args)
        fd = FUSIONS.get((self.key, sig))
        if fd is None:
            fd = FUSIONS[(self.key, sig)] = build_fusion(self.region, sig)
        outs = fd.execute(list(args))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def program(self, inputs=None) -> str:
        return nvfuser_program(self.region, inputs)


nvfuser_ex = NvFuserExecutor()

__all__ = ["TRANSLATORS", "NvFuserExecutor", "NvFusionRegion", "nvfuser_ex", "nvfuser_program"]
