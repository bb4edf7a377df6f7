"""Executors: a new cache entry's fusion regions compiled ahead of its first run. Regions compile when first called,
so a first training call compiled its forward's regions, ran the forward, then compiled its backward's: each region's
C++ build (seconds) one after another. Here, before that first run, the forward program and then the backward
program run over fake tensors (sizes and strides, no data): each region they call that has no compiled variant for
the strides met there compiles one now (CompiledRegion.compile_ahead), with its C++ build left in a background thread,
so the builds of all regions run side by side, and beside the Python work of the next region's compile. The real
run then finds the variants and awaits their builds.

The strides are predictions: the fake run gives each value eager's layout, and a cotangent a dense one (autograd's
is known only when the backward is called). A region called with other strides compiles again as without this stage,
except for broadcast arguments (`y.sum()`'s cotangent), which are copied to the layout compiled ahead (_adapted).
A program this stage cannot run over fakes (data-dependent lines, side effects) compiles its regions at first run.
"""
from __future__ import annotations

import logging
import types

import torch

from executors.regions import has_side_effect
from jitcore import compat
from jitcore.ir.symbol import BoundSymbol
from jitcore.ops.autocast import outside_autocast
from jitcore.runtime.autograd import AutogradProgram

log = logging.getLogger("jitcore.ahead")
MIN_REGIONS = 2  # fewer regions to compile than this: nothing to build side by side, no fake run


def compile_ahead(entry, inputs) -> int:
    """Compile the regions of a new entry's programs before its first run (see the module's docstring), for the
    call whose prologue gave `inputs`; returns how many regions were met without a variant. Never raises: a run
    that fails leaves the rest to the first run (logged at debug level)."""
    programs = _programs(entry, inputs)
    if not programs or sum(len(_regions_to_compile(fn)) for _, fn in programs) < MIN_REGIONS:
        return 0
    try:
        return _fake_run(programs, inputs, entry)
    except Exception as e:  # (the regions left compile at their first run, as without this stage)
        log.debug("compile ahead stopped: %s: %s", type(e).__name__, e)
        return -1


def _programs(entry, inputs) -> list:
    """[(trace, callable)] of the forward, and of the backward when this call's autograd node will run it; [] when
    a program has lines a fake run could change the world with."""
    if not entry.traces:
        return []
    traces = [entry.traces[-1]]
    c = entry.computation
    if isinstance(c, AutogradProgram) and entry.backward_traces and torch.is_grad_enabled() and not c.early_grads \
            and c.saving is None and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        traces.append(entry.backward_traces[-1])
    if any(_effects(b) for t in traces for b in t.bound_symbols):
        return []
    return [(t, t.python_callable()) for t in traces]


def _effects(bsym: BoundSymbol) -> bool:
    return "region_trace" not in bsym.extra and has_side_effect(bsym)


def _regions_to_compile(fn) -> list:
    return [v for v in fn.__globals__.values() if callable(getattr(v, "compile_ahead", None)) and not v.dynamic
            and v.device_type == "cpu" and not v.variants]


class _Ahead:
    """A region, as the fake run calls it: boxed or not, it compiles ahead and returns the eager program's outputs."""

    def __init__(self, region):
        self.region = region

    def boxed(self, box: list):
        args = list(box)
        box.clear()
        return self.region.compile_ahead(args)

    def __call__(self, *args):
        return self.region.compile_ahead(list(args))


def _with_regions_ahead(fn):
    g = dict(fn.__globals__)
    for name, v in fn.__globals__.items():
        if callable(getattr(v, "compile_ahead", None)):
            g[name] = _Ahead(v)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def _fake_run(programs: list, inputs, entry) -> int:
    met = sum(len(_regions_to_compile(fn)) for _, fn in programs)
    mode = compat.fake_tensor_mode(allow_non_fake_inputs=True)  # (loaded by then: Inductor imports it)
    with torch.no_grad():
        fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
        with mode:
            (_, forward), backward = programs[0], programs[1] if len(programs) > 1 else None
            results = outside_autocast(_with_regions_ahead(forward))(*fakes)
            if backward is None:
                return met
            c = entry.computation
            n = c.n_outputs
            outputs, saved = results[:n], list(results[n:])
            cotangents = [torch.empty(o.shape, dtype=o.dtype, device=o.device)
                          for o, rg in zip(outputs, c.output_requires_grad) if rg]
            outside_autocast(_with_regions_ahead(backward[1]))(saved, cotangents)
    return met


__all__ = ["compile_ahead"]
