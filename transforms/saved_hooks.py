"""Transforms: saved-tensor hooks inside the programs (after autodiff and rematerialization). Split + (pack, unpack)
-> a Split whose forward packs each saved tensor right after its last forward use and returns the packed values, and
whose backward unpacks each right before its first use. pack and unpack are run by jitcore's interpreter over the
saved proxy (once per saved tensor, so they may branch on its dtype and sizes); their lines print in both traces and
executors claim them like any other op. A hook that cannot be traced raises NotTraceable (the caller runs it eagerly).
"Once per saved tensor" is per value the program saves: one value saved at two places (or two equal computations
that CSE merged before autodiff) is packed once; no pass after this one merges or duplicates pack and unpack lines.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from jitcore import logs
from jitcore.frontend.tracing import GUARDED_SCALARS, JitContext
from jitcore.hooks import ambient_hooks
from jitcore.interpreter import interpret
from jitcore.ir.proxies import Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.trace import Timer, Trace, from_trace, tracectx
from jitcore.runtime.autograd import hooks_around, without_ambient_hooks
from transforms.autodiff import Split
from transforms.cse import rename_args


class NotTraceable(Exception):
    """A saved-tensor hook that jitcore's interpreter cannot put into a program (the message says why)."""


@dataclass(frozen=True)
class SavedHooks:
    """A (pack, unpack) pair for what the forward saves: jit's option, or the pair of the torch.autograd.graph.
    saved_tensors_hooks block around the call (ambient). traced: in the programs; else it runs eagerly (warned)."""

    pack: object
    unpack: object
    ambient: bool
    traced: bool = True


def hooks_for(option) -> SavedHooks | None:
    """The pair a compile puts into the programs: jit's saved_tensor_hooks option, else the active torch pair."""
    if option is not None:
        return SavedHooks(*option, ambient=False)
    top = ambient_hooks()
    return None if top is None else SavedHooks(*top, ambient=True)


def traced_or_warn(split: Split, hooks: SavedHooks, symbolic: bool) -> Split | None:
    """The split with the hooks traced into it, or None, with a warning at the user's call, when they cannot be
    (the pair then runs eagerly: see `saving`)."""
    try:
        return with_saved_tensor_hooks(split, hooks.pack, hooks.unpack, symbolic)
    except NotTraceable as e:
        _, level = logs.user_frame()
        where = "of the torch.autograd.graph.saved_tensors_hooks around the call" if hooks.ambient else \
            "given to jit(saved_tensor_hooks=...)"
        warnings.warn(f"jitcore: the saved-tensor hooks {where} cannot be put into the compiled programs ({e}); they "
                      "run as eager hooks on the tensors the jitted call saves", stacklevel=level)
        return None


def saving(hooks: SavedHooks | None):
    """What is in force while the autograd wrapper saves the forward's values (AutogradProgram.saving): None (what is
    active around the call: with jit's pair traced in, active hooks apply to the packed values, as to what any
    autograd.Function saves), without_ambient_hooks (the programs packed with the active pair: torch must not pack
    again), or jit's own pair, untraceable, run by torch as the innermost hooks."""
    if hooks is None or (hooks.traced and not hooks.ambient):
        return None
    if hooks.traced:
        return without_ambient_hooks
    return None if hooks.ambient else hooks_around(hooks.pack, hooks.unpack)


@dataclass
class _Hooked:
    lines: list  # the hook's lines, recorded into a trace sharing the target's names
    output: object  # what the hook returned (proxies and constants)


def _hook_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _trace_hook(fn, arg, target: Trace, symbolic: bool) -> _Hooked:
    """fn(arg) interpreted into a scratch trace whose names continue `target`'s (which takes them over after)."""
    scratch = Trace("saved_tensor_hook")
    scratch.names, scratch._counters = target.names, target._counters  # shared: the lines' names stay unique
    ctx = JitContext(scratch, symbolic)
    try:
        with tracectx(scratch), torch.no_grad():
            result = interpret(fn, (arg,), {}, ctx)
    except Exception as e:  # (unsupported code, data-dependent Python, an error of the hook itself)
        raise NotTraceable(f"{_hook_name(fn)} could not be interpreted: {type(e).__name__}: {e}") from e
    if result.side_effects:
        raise NotTraceable(f"{_hook_name(fn)} writes outside itself (a counter, a global, an object's attribute), "
                           "which a compiled program does not replay")
    if ctx.inputs:
        raise NotTraceable(f"{_hook_name(fn)} reads tensors from outside its argument "
                           f"({', '.join(str(i.provenance) for i in ctx.inputs)})")
    if ctx.guards.data:
        raise NotTraceable(f"{_hook_name(fn)} reads tensor data in Python")
    for leaf in tree_flatten(result.output)[0]:
        if isinstance(leaf, Proxy) and not isinstance(leaf, TensorProxy):
            raise NotTraceable(f"{_hook_name(fn)} returns a number computed at run time ({leaf.name})")
        if not isinstance(leaf, (TensorProxy, *GUARDED_SCALARS)):
            raise NotTraceable(f"{_hook_name(fn)} returns a {type(leaf).__name__}, not tensors and constants")
    return _Hooked(list(scratch.bound_symbols), result.output)


def _sig(p: TensorProxy) -> tuple:
    return (tuple(d.name if isinstance(d, Proxy) else d for d in p._shape), p.dtype, p.device)


def with_saved_tensor_hooks(split: Split, pack, unpack, symbolic: bool) -> Split:
    """The split with pack after each saved tensor's last forward use and unpack before its first backward use.
    Saved values that are not tensors (symbolic sizes) pass as they are. Raises NotTraceable."""
    with Timer() as t:
        fw, bw = split.forward, split.backward
        n = split.n_outputs
        saved_fw = list(fw.output[n:])
        n_saved = dict(bw.extra["arg_groups"])["saved"]
        saved_bw, cts = bw.args[:n_saved], bw.args[n_saved:]
        new_fw = from_trace(fw)
        packed, specs = {}, {}  # forward name -> (the packed leaves, their structure): once per saved tensor
        after: dict[int, list] = {}  # line index -> pack lines that go right after it (-1: at the top)
        last = _last_uses(fw.bound_symbols)
        for s in saved_fw:
            if isinstance(s, TensorProxy) and s.name not in packed:
                hooked = _trace_hook(pack, s, new_fw, symbolic)
                leaves, spec = tree_flatten(hooked.output)
                packed[s.name], specs[s.name] = leaves, spec
                after.setdefault(last.get(s.name, -1), []).extend(hooked.lines)
        new_fw.bound_symbols = list(after.get(-1, []))
        for i, b in enumerate(fw.bound_symbols):
            new_fw.bound_symbols.append(b)
            new_fw.bound_symbols.extend(after.get(i, []))
        fw_saved = [leaf for s in saved_fw for leaf in (_proxies(packed[s.name]) if s.name in packed else [s])]
        new_fw.output = tuple(fw.output[:n]) + tuple(fw_saved)

        new_bw = from_trace(bw)
        bw_args, unpacked, before = [], {}, {}
        firsts = _first_uses(bw.bound_symbols)
        for s_fw, s_bw in zip(saved_fw, saved_bw):
            if not isinstance(s_fw, TensorProxy):
                bw_args.append(s_bw)
                continue
            with tracectx(new_bw):
                args = [x.like(requires_grad=False) if isinstance(x, TensorProxy) else x for x in packed[s_fw.name]]
            bw_args += _proxies(args)
            hooked = _trace_hook(unpack, tree_unflatten(specs[s_fw.name], args), new_bw, symbolic)
            out = hooked.output
            if not isinstance(out, TensorProxy) or _sig(out) != _sig(s_bw):
                got = out.type_string() if isinstance(out, TensorProxy) else type(out).__name__
                raise NotTraceable(f"{_hook_name(unpack)} returns {got} for a saved {s_bw.type_string()} (it must "
                                   "give back a tensor of the saved tensor's shape, dtype and device)")
            unpacked[s_bw.name] = out
            before.setdefault(firsts.get(s_bw.name, len(bw.bound_symbols)), []).extend(hooked.lines)
        for i, b in enumerate(bw.bound_symbols):
            new_bw.bound_symbols.extend(before.get(i, []))
            new_bw.bound_symbols.append(rename_args(b, unpacked))
        new_bw.bound_symbols.extend(before.get(len(bw.bound_symbols), []))
        new_bw.args = bw_args + list(cts)
        new_bw.output = tuple(unpacked.get(o.name, o) if isinstance(o, Proxy) else o for o in bw.output)
        new_bw.extra["arg_groups"] = [("saved", len(bw_args)), ("cotangents", len(cts))]
    names = f"pack={_hook_name(pack)}, unpack={_hook_name(unpack)}"
    new_fw.set_provenance(f"Saved-tensor hooks ({names}): pack after each saved tensor's last use", t.seconds)
    new_bw.set_provenance(f"Saved-tensor hooks ({names}): unpack before each saved tensor's first use", t.seconds)
    return Split(new_fw, new_bw, n, fw_saved, split.output_requires_grad)


def _proxies(leaves) -> list:
    return [x for x in leaves if isinstance(x, Proxy)]


def _last_uses(lines) -> dict:
    """name -> index of the last line that reads it, or that makes it when none reads it."""
    last = {}
    for i, b in enumerate(lines):
        for o in b.flat_proxy_outs():
            last[o.name] = i
        for a in b.flat_proxy_args():
            last[a.name] = i
    return last


def _first_uses(lines) -> dict:
    first = {}
    for i, b in enumerate(lines):
        for a in b.flat_proxy_args():
            first.setdefault(a.name, i)
    return first
