"""Repro scripts: a standalone folder that reproduces one compiled call of a jitted function for a bug report
(`jitcore.repro`, and `jit(fn, verify=True)` on a mismatch): the call's inputs rebuilt from the entry's input
description (jitcore/guards/input_storage.py), the function (imported by name, its source, or a pickled module), the
programs as printed, and a script that runs the call jitted and eagerly and compares them.
"""
from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import torch


def programs_text(entry) -> str:
    """An entry's programs as printed (prologue, forward, backward, epilogue, the fusion regions' bodies)."""
    parts = [("prologue", entry.prologue_traces[-1]), ("forward", entry.traces[-1])]
    parts += [("backward", entry.backward_traces[-1])] if entry.backward_traces else []
    parts += [("epilogue", entry.epilogue_traces[-1])] if entry.epilogue_traces else []
    for i, trace in enumerate(final_traces(entry)):  # the fusion regions' bodies (compiled: regions.pt)
        program = ("forward", "backward")[i] if i < 2 else f"backward {i - 1} for some gradients None"
        parts += [(f"region {b.sym.name} of the {program}", b.extra["region_trace"]) for b in trace.bound_symbols
                  if "region_trace" in b.extra]
    return "\n".join(f"# ---- {name} ----\n{trace}" for name, trace in parts)


def final_traces(entry) -> list:
    """The programs of an entry that run: forward, backward, and the backwards built for calls whose loss reached
    only some outputs."""
    traces = [entry.traces[-1], *entry.backward_traces[-1:]]
    for built in getattr(entry.computation, "_without", {}).values():
        traces.extend(built[0][-1:])
    return traces


_REPRO = '''"""Reproduces a call of {qualname} compiled by jitcore (written by jitcore.repro).

Runs the function jitted with the options it had ({options}) on the call's inputs ({inputs}) and compares the
outputs with eager's. programs.py holds the programs jitcore compiled for that call, as printed.
"""
import pathlib
import sys

import torch

import jitcore
from executors import get_executor

HERE = pathlib.Path(__file__).resolve().parent
{load_fn}
args, kwargs = torch.load(HERE / "inputs.pt", weights_only=False)


def clone(tree):
    return torch.utils._pytree.tree_map(
        lambda t: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t, tree)


EXECUTORS = {executors!r}
try:
    for name in EXECUTORS:
        get_executor(name)
except ValueError as e:  # an executor of your own: known by name once the code that creates it has run
    sys.exit(f"{{e}}\\nThis call ran with an executor of your own: import the code that creates it at the top of "
             "this script (an executor registers its name when it is created).")

with torch.set_grad_enabled({grad}){autocast}:
    jfn = jitcore.jit(fn, executors=EXECUTORS, cache={cache!r})
    got = jfn(*clone(args), **clone(kwargs))
    want = fn(*clone(args), **clone(kwargs))
try:
    torch.testing.assert_close(got, want)
    print("jitcore agrees with eager on this call")
except AssertionError as e:
    print("jitcore differs from eager:", e)
    sys.exit(1)
finally:
    print(jitcore.last_traces(jfn)[-1])
'''


def _import_line(fn) -> str | None:
    """`from module import name` that gives fn back in a new process, or None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        obj = sys.modules[module]
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (KeyError, AttributeError):
        return None
    if obj is not fn:
        return None
    head = qualname.split(".")[0]
    return f"from {module} import {head}\nfn = {qualname}"


def _qualname(fn) -> str:
    target = type(fn) if isinstance(fn, torch.nn.Module) else fn
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', type(fn).__qualname__)}"


def write_repro(fn, options: dict, chosen, folder: Path, spec=None) -> Path:
    """Write repro.py, inputs.pt and programs.py into `folder` for the call cache entry `chosen` of the jitted `fn`
    (jit options `options`: executors, cache) was compiled for, with the inputs of `spec` (the entry's input
    description by default). Returns the folder."""
    spec = spec or chosen.input_spec
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(spec.materialize(), folder / "inputs.pt")
    (folder / "programs.py").write_text(programs_text(chosen))
    if isinstance(fn, torch.nn.Module):
        torch.save(fn, folder / "model.pt")
        load_fn = 'fn = torch.load(HERE / "model.pt", weights_only=False)'
    else:
        load_fn = _import_line(fn)
        if load_fn is None:
            try:
                load_fn = textwrap.dedent(inspect.getsource(fn)) + f"\nfn = {fn.__name__}"
            except (OSError, TypeError):
                raise ValueError(f"{getattr(fn, '__qualname__', fn)} can be neither imported nor read as source: "
                                 "the repro script could not call it") from None
    autocast = "".join(f", torch.autocast({d!r}, dtype={t})" for d, t in spec.autocast)
    tensors = spec.tensors()
    kept = sum(t.value is not None for t in tensors)
    inputs = f"{len(tensors)} tensors, values kept for {kept}" + (", the others are ones" if kept < len(tensors)
                                                                  else "")
    (folder / "repro.py").write_text(_REPRO.format(
        qualname=_qualname(fn), options=", ".join(f"{k}={v!r}" for k, v in options.items()), inputs=inputs,
        load_fn=load_fn, grad=spec.grad_enabled, autocast=autocast, executors=options["executors"],
        cache=options["cache"]))
    return folder


__all__ = ["final_traces", "programs_text", "write_repro"]
