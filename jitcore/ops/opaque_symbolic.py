"""Ops: output metadata of an opaque op whose inputs have symbolic sizes (cache="symbolic values", or sizes known
only at run time). torch's fake tensors run the op over a shape environment whose symbols stand for the proxies'
sizes; the output sizes come back as expressions over those symbols and are recorded as number ops over the proxies
(they stay symbolic), and every guard the environment recorded (a branch the op's meta took on a size) is asked of
the proxies, so it becomes a predicate the prologue checks. Where an expression or a guard has no translation, the
caller falls back to pinning the sizes (correct, per size).
"""
from __future__ import annotations

import logging
import operator

import torch

from jitcore import compat
from jitcore.ir import proxies
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ops import prims_python as pp


class Untranslated(Exception):
    """A size expression or guard this module does not translate: the caller pins the sizes instead."""


def symbolic_outputs(fn, flat, spec, rg: bool, real=None):
    """fn's outputs as proxies with symbolic sizes, or raise Untranslated. real: this call's outputs (computed from
    its values), for an op whose output sizes depend on values: a size the environment gives as an unbacked symbol
    is a size known only at run time (jitcore/ir/proxies.py run_time_size) with that output's value; the same
    symbol is the same size (unique's values and counts)."""
    import sympy
    shapes = compat.symbolic_shapes()
    ShapeEnv, DimDynamic = shapes.ShapeEnv, shapes.DimDynamic

    env = ShapeEnv(duck_shape=False)
    symbols: dict = {}  # sympy symbol -> the proxy it stands for
    made: dict = {}  # proxy name -> SymInt

    def symint(p):
        if p.name not in made:
            source = compat.constant_source(p.name)
            s = env.create_symbol(int(p.value), source, dynamic_dim=DimDynamic.DYNAMIC)
            node = env.create_symintnode(s, hint=int(p.value), source=source)
            if isinstance(node, int) or not isinstance(s, sympy.Symbol):  # (0 and 1 are specialized)
                raise Untranslated(f"{p.name} is specialized")
            symbols[s] = p
            made[p.name] = node
        return made[p.name]

    def fake(a):
        if isinstance(a, proxies.TensorProxy):
            shape = [symint(s) if isinstance(s, proxies.IntegerProxy) else s for s in a.shape]
            return torch.empty(shape, dtype=a.dtype, device=a.device)
        if isinstance(a, proxies.IntegerProxy):
            return symint(a)
        if isinstance(a, proxies.NumberProxy):
            raise Untranslated("a float or bool number argument")
        return a

    mode = compat.fake_tensor_mode(shape_env=env)
    quiet = logging.getLogger("torch._subclasses.fake_tensor")  # (it logs an op's failure as an error: this module
    level = quiet.level  # falls back quietly instead)
    quiet.setLevel(logging.CRITICAL)
    try:
        with mode, torch.no_grad():
            args, kwargs = tree_unflatten(spec, [fake(a) for a in flat])
            out = fn(*args, **kwargs)
    except Untranslated:
        raise
    except Exception as e:
        raise Untranslated(str(e)) from e
    finally:
        quiet.setLevel(level)
    for guard in env.guards:  # what the op's meta decided about the sizes: predicates over the proxies
        answer = _translate(guard.expr, symbols)
        if isinstance(answer, proxies.NumberProxy):
            if not bool(answer):
                raise Untranslated(f"the guard {guard.expr} does not hold")
        elif not answer:
            raise Untranslated(f"the guard {guard.expr} does not hold")
    leaves, out_spec = tree_flatten(out)
    if real is not None:
        real_leaves = tree_flatten(real)[0]
        if len(real_leaves) != len(leaves):
            raise Untranslated("the outputs differ from the real run's")
        for o, r in zip(leaves, real_leaves):
            for size, value in zip(getattr(o, "shape", ()), getattr(r, "shape", ())):
                expr = size.node.expr if isinstance(size, torch.SymInt) else None
                if expr is not None and expr.is_Symbol and expr not in symbols:
                    symbols[expr] = proxies.run_time_size(int(value))

    def proxy(o):
        if isinstance(o, torch.Tensor):
            shape = tuple(_translate(s.node.expr, symbols) if isinstance(s, torch.SymInt) else s for s in o.shape)
            if any(not isinstance(s, (int, proxies.IntegerProxy)) for s in shape):
                raise Untranslated(f"an output size {shape}")
            return proxies.TensorProxy(shape, o.dtype, o.device, rg and (o.dtype.is_floating_point or o.is_complex()))
        if isinstance(o, torch.SymInt):
            return _translate(o.node.expr, symbols)
        return o

    return tree_unflatten(out_spec, [proxy(o) for o in leaves])


def _translate(expr, symbols):
    """A sympy expression over the environment's symbols as Python number ops over the proxies (recorded)."""
    import sympy
    FloorDiv, Mod, PythonMod, Max, Min = compat.sympy_functions()

    if expr.is_Integer:
        return int(expr)
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    if expr.is_Symbol:
        if expr not in symbols:
            raise Untranslated(f"the symbol {expr}")
        return symbols[expr]
    args = [_translate(a, symbols) for a in expr.args]
    binary = {sympy.Add: operator.add, sympy.Mul: operator.mul, sympy.Max: max, sympy.Min: min, Max: max, Min: min}
    if type(expr) in binary:
        if type(expr) is sympy.Mul and any(a.is_Rational and not a.is_Integer for a in expr.args):
            raise Untranslated(f"a fraction in {expr}")
        fold = binary[type(expr)]
        if fold in (max, min):
            return _fold_extreme(fold.__name__, args)
        out = args[0]
        for a in args[1:]:
            out = fold(out, a)
        return out
    if type(expr) is FloorDiv:
        return args[0] // args[1]
    if type(expr) in (Mod, PythonMod):
        return args[0] % args[1]
    if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return args[0] ** int(expr.args[1])
    relations = {sympy.Eq: operator.eq, sympy.Ne: operator.ne, sympy.Lt: operator.lt, sympy.Le: operator.le,
                 sympy.Gt: operator.gt, sympy.Ge: operator.ge}
    if type(expr) in relations:
        return relations[type(expr)](args[0], args[1])
    if type(expr) in (sympy.And, sympy.Or):
        values = [bool(a) for a in args]
        return all(values) if type(expr) is sympy.And else any(values)
    raise Untranslated(f"{type(expr).__name__} in {expr}")


def _fold_extreme(name, args):
    out = args[0]
    for a in args[1:]:
        both_ints = isinstance(out, int) and isinstance(a, int)
        out = (max if name == "max" else min)(out, a) if both_ints else pp.call(name, out, a)
    return out


# -- recurrent kernels: their fake kernels specialize the batch (or call numel() on symbolic sizes), so their sizes
# are written out here: the output follows the input and the hidden state, the new hidden states are shaped as given
def _recurrent(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.gru / rnn_tanh / rnn_relu / lstm on a padded input (their packed form, batch_sizes second: None)."""
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    if not all(isinstance(h, proxies.TensorProxy) and h.ndim == 3 for h in states) or input.ndim != 3:
        return None
    width = states[0].shape[-1] * (2 if bidirectional else 1)
    rg = any(t.requires_grad for t in [input, *states, *params] if isinstance(t, proxies.TensorProxy))
    output = input.like(shape=(*input.shape[:2], width), requires_grad=rg)
    return (output, *(h.like(requires_grad=rg) for h in states))


def _cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.gru_cell / rnn_tanh_cell / rnn_relu_cell / lstm_cell: new states shaped as the given ones."""
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    if not all(isinstance(h, proxies.TensorProxy) for h in states):
        return None
    rg = any(t.requires_grad for t in [input, *states, w_ih, w_hh, b_ih, b_hh] if isinstance(t, proxies.TensorProxy))
    out = tuple(h.like(requires_grad=rg) for h in states)
    return out if isinstance(hx, (list, tuple)) else out[0]


SHAPE_RULES = {torch.gru: _recurrent, torch.rnn_tanh: _recurrent, torch.rnn_relu: _recurrent, torch.lstm: _recurrent,
               torch.gru_cell: _cell, torch.rnn_tanh_cell: _cell, torch.rnn_relu_cell: _cell, torch.lstm_cell: _cell}


def shape_rule(fn, args, kwargs):
    """The outputs by a rule of this module (None where it has none, or the call is a form it does not cover)."""
    rule = SHAPE_RULES.get(fn)
    if rule is None:
        return None
    try:
        return rule(*args, **kwargs)
    except TypeError:  # another overload's arguments (the packed form)
        return None
