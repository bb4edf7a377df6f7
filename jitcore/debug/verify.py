"""Accuracy check (`jit(fn, verify=True)`, or `JITCORE_VERIFY=1`): the first calls of each new cache entry
(`verify=N`: N calls) also run the function eagerly, on clones of the call's tensors and a copy of the module, from
the RNG state the jitted call started from, and compare outputs, gradients (a vector-Jacobian product of the outputs
with the same random cotangents, taken with retain_graph so the user's own backward still runs), and the inputs and
module state after the call. The caller gets the jitted call's results, and the RNG is left where the jitted call
left it: nothing the caller can see happens twice.

On a mismatch, VerificationError says what differs, the first line of the compiled program whose value differs from
the same value computed by torch line by line from the traced program (with the user's source line that made it),
and where a repro folder was written (jitcore/debug/reproduce.py). A function that writes outside its arguments and
module (globals, closure cells, attributes of other objects) is not run a second time: its calls are not checked,
and a warning says so.
"""
from __future__ import annotations

import contextlib
import copy
import linecache
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten, tree_map

from jitcore.debug.reproduce import write_repro
from jitcore.errors import VerificationError
from jitcore.guards.input_storage import describe
from jitcore.interpreter.provenance import Arg, Fn, Kwarg
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.trace import USER_STACK, from_trace

# (rtol, atol) per dtype: looser than torch.testing's defaults for fused kernels, which reorder reductions
TOLERANCES = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 1e-3),
              torch.bfloat16: (1.6e-2, 1e-2), torch.complex64: (1e-4, 1e-5), torch.complex128: (1e-7, 1e-7)}


def verify_calls(value) -> int:
    """How many calls of each new entry to check: the jit option (True: 1, False: 0, an int), else JITCORE_VERIFY."""
    if value is None:
        env = os.environ.get("JITCORE_VERIFY", "").strip().lower()
        value = int(env) if env.isdigit() else env in ("true", "yes", "on")
    if value is True or value is False:
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    raise ValueError(f"verify must be True, False or a number of calls, not {value!r}")


def external_effect(side_effects, fn) -> str:
    """Why running the call again eagerly would write outside what the check copies ("" when it would not): the
    arguments are cloned, and the module when the jitted callable is one."""
    for e in side_effects:
        if e.kind in ("setglobal", "delglobal", "setcell"):
            return f"it writes the variable {e.key!r} outside itself"
        root = e.target.root() if hasattr(e.target, "root") else None
        if isinstance(root, (Arg, Kwarg)) or (isinstance(root, Fn) and isinstance(fn, torch.nn.Module)):
            continue
        return f"it writes ({e.kind}) {e.key!r} of an object that is neither an argument nor the module"
    return ""


# -- copies and the random state ------------------------------------------------------------------------------------
def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (int, float, bool, str, complex, type(None), torch.dtype, torch.device)):
        return x
    return copy.deepcopy(x)


@dataclass
class _Call:
    fn: object
    args: tuple
    kwargs: dict


def _copy(fn, args, kwargs) -> _Call:
    return _Call(copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn, tree_map(_clone, args),
                 tree_map(_clone, kwargs))


def _rng_state():
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


# -- comparing ------------------------------------------------------------------------------------------------------
def _differs(got, want) -> str | None:
    """None when equal within the dtype's tolerance, else the first line of assert_close's message."""
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        rtol, atol = TOLERANCES.get(want.dtype, (0.0, 0.0))
        try:
            torch.testing.assert_close(got.detach(), want.detach(), rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:  # (its summary: how many elements differ, and the largest differences)
            return " ".join(str(e).split())[:300]
        return None
    if isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor):
        return f"{type(got).__name__} where eager gives {type(want).__name__}"
    try:
        same = bool(got == want)
    except Exception:
        same = got is want
    return None if same else f"{got!r} where eager gives {want!r}"


def _compare_trees(what: str, got, want) -> list[str]:
    got_leaves, got_spec = tree_flatten(got)
    want_leaves, want_spec = tree_flatten(want)
    if got_spec != want_spec:
        return [f"{what}: the structure differs ({got_spec} where eager gives {want_spec})"]
    out = []
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        why = _differs(g, w)
        if why:
            out.append(f"{what}[{i}]: {why}")
    return out


def _module_state(fn) -> dict:
    return dict(fn.state_dict(keep_vars=False)) if isinstance(fn, torch.nn.Module) else {}


def _differentiable(leaves) -> list:
    return [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad and
            (t.is_floating_point() or t.is_complex())]


def _gradients(out, want, call: _Call, fn, args, kwargs) -> list[str]:
    """A VJP of both calls' outputs with the same random cotangents, with respect to the tensors that require grad
    (arguments, and the module's parameters)."""
    got_leaves, want_leaves = tree_flatten(out)[0], tree_flatten(want)[0]
    positions = [i for i in _differentiable(got_leaves) if i < len(want_leaves) and
                 isinstance(want_leaves[i], torch.Tensor) and want_leaves[i].requires_grad]
    if not positions or not torch.is_grad_enabled():
        return []
    wrt_got = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    wrt_want = [t for t in tree_flatten((call.args, call.kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if isinstance(fn, torch.nn.Module):
        wrt_got += [p for p in fn.parameters() if p.requires_grad]
        wrt_want += [p for p in call.fn.parameters() if p.requires_grad]
    if not wrt_got or len(wrt_got) != len(wrt_want):
        return []
    gen = torch.Generator().manual_seed(0)
    cots = [torch.randn(got_leaves[i].shape, generator=gen, dtype=torch.float64).to(got_leaves[i].dtype)
            .to(got_leaves[i].device) for i in positions]
    try:
        g = torch.autograd.grad([got_leaves[i] for i in positions], wrt_got, cots, retain_graph=True,
                                allow_unused=True)
        w = torch.autograd.grad([want_leaves[i] for i in positions], wrt_want, cots, allow_unused=True)
    except RuntimeError as e:
        return [f"gradients: {e}"]
    g = [torch.zeros_like(t) if x is None else x for x, t in zip(g, wrt_got)]
    w = [torch.zeros_like(t) if x is None else x for x, t in zip(w, wrt_want)]
    return _compare_trees("gradient", g, w)


# -- where the values part: the compiled program against the traced program run by torch, line by line -------------
def _every_value(trace, inputs_by_name: dict) -> dict:
    """Run `trace` with every tensor it computes as an output: name -> value."""
    names, seen = [], set()
    for b in trace.bound_symbols:
        for o in b.flat_proxy_outs():
            if isinstance(o, TensorProxy) and o.name not in seen:
                seen.add(o.name)
                names.append(o)
    probe = from_trace(trace)
    probe.bound_symbols = list(trace.bound_symbols)
    probe.output = tuple(names)
    values = probe.python_callable()(*[inputs_by_name[a.name] for a in trace.args])
    return {p.name: v for p, v in zip(names, values)}


def _user_line(bsym) -> str:
    stack = bsym.extra.get(USER_STACK)
    if not stack:
        return "(no user source line)"
    code, inst = stack[-1]
    text = linecache.getline(code.co_filename, inst.lineno).strip()
    return f'File "{code.co_filename}", line {inst.lineno}, in {code.co_name}: {text}'


def first_differing_line(entry, inputs) -> str:
    """The first line of the traced program whose value, as the compiled program computes it, differs from the
    traced program's lines run by torch on the same inputs; or what that search found instead."""
    claimed = next((t for t in entry.traces if t.provenance.startswith("Constructed by Transform for execution")),
                   None)
    program = entry.traces[-1]
    if claimed is None or len(inputs) != len(program.args):
        return "the line-by-line search could not run (the program's inputs are not the traced program's)"
    by_name = {a.name: v for a, v in zip(program.args, inputs)}
    traced = entry.traces[0]
    if any(a.name not in by_name for a in traced.args + claimed.args):
        return "the line-by-line search could not run (the program's inputs are not the traced program's)"
    try:
        with torch.no_grad():
            reference = _every_value(traced, by_name)
            compiled = _every_value(claimed, by_name)
    except Exception as e:  # (a program that cannot run this way: the report says so rather than failing)
        return f"the line-by-line search could not run ({type(e).__name__}: {e})"
    for b in traced.bound_symbols:
        for o in b.flat_proxy_outs():
            if o.name in compiled and o.name in reference:
                why = _differs(compiled[o.name], reference[o.name])
                if why:
                    line = repr(b).splitlines()[0].strip()
                    return f"first differing line: {line}\n  from {_user_line(b)}\n  {o.name}: {why}"
    return ("every value the compiled program shares with the traced program matches torch run line by line: the "
            "difference is in what was traced (the interpreter's reading of the code) or in values fused away")


# -- the checked call -----------------------------------------------------------------------------------------------
_WARNED: set = set()


def checked_call(jfn, entry, inputs, args, kwargs):
    """Run the jitted call (jfn._run) and the same call eagerly on copies; raise VerificationError on a mismatch."""
    fn = jfn.fn
    if entry.external_effect:
        if id(entry) not in _WARNED:
            _WARNED.add(id(entry))
            warnings.warn(f"jitcore verify: a call of {getattr(fn, '__name__', type(fn).__name__)} is not checked: "
                          f"{entry.external_effect}, which running it again eagerly would write twice", stacklevel=3)
        return jfn._run(entry, inputs, args, kwargs)
    try:
        call = _copy(fn, args, kwargs)
        spec = describe(args, kwargs, "all")
        pristine = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
        saved_inputs = tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs)
    except Exception as e:  # (an argument that cannot be copied)
        warnings.warn(f"jitcore verify: a call is not checked: its arguments cannot be copied ({e})", stacklevel=3)
        return jfn._run(entry, inputs, args, kwargs)
    start = _rng_state()
    out = jfn._run(entry, inputs, args, kwargs)
    end = _rng_state()
    _set_rng(start)
    try:
        hooks = jfn.options.saved_tensor_hooks  # (eager saves under the same pair; active ones are active here too)
        with torch.autograd.graph.saved_tensors_hooks(*hooks) if hooks is not None else contextlib.nullcontext():
            want = call.fn(*call.args, **call.kwargs)
    except Exception as e:
        _set_rng(end)
        raise VerificationError(f"eager raised {type(e).__name__}: {e}, where the jitted call returned") from e
    _set_rng(end)
    problems = _compare_trees("output", out, want)
    problems += _compare_trees("argument after the call", (args, kwargs), (call.args, call.kwargs))
    problems += _compare_trees("module state after the call", _module_state(fn), _module_state(call.fn))
    if not problems:
        problems = _gradients(out, want, call, fn, args, kwargs)
    if problems:
        raise VerificationError(_report(jfn, entry, problems, saved_inputs, pristine, spec))
    return out


def _report(jfn, entry, problems: list, inputs, pristine, spec) -> str:
    where = first_differing_line(entry, inputs)
    try:
        options = {"executors": [ex.name for ex in jfn.options.executors], "cache": jfn.options.cache}
        folder = write_repro(pristine, options, entry, Path(tempfile.mkdtemp(prefix="jitcore-verify-")), spec)
        repro = f"a repro: python {folder / 'repro.py'}"
    except Exception as e:
        repro = f"no repro script ({type(e).__name__}: {e})"
    shown = "\n  ".join(problems[:5]) + (f"\n  ... and {len(problems) - 5} more" if len(problems) > 5 else "")
    return f"the jitted call differs from eager:\n  {shown}\n{where}\n{repro}"


__all__ = ["TOLERANCES", "VerificationError", "checked_call", "external_effect", "first_differing_line",
           "verify_calls"]
