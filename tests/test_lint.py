"""The trace checker (jitcore/ir/lint.py): hand-built traces that break each invariant are rejected with a message
naming the pass, the line and the name; the traces of real jitted functions (every pass, backward, prologue,
epilogue) pass; and with lint.CHECK on (tests/conftest.py) the pipeline lints what a pass returns.
"""
from __future__ import annotations

import pytest
import torch

import jitcore
import jitcore.pipeline as pipeline
from jitcore.ir import lint as ir_lint
from jitcore.ir.lint import TraceLintError, lint
from jitcore.ir.proxies import IntegerProxy, TensorProxy
from jitcore.ir.symbol import Symbol, Tag
from jitcore.ir.trace import Trace, from_trace
from jitcore.ops import ltorch, prims
from jitcore.ops.prims_python import PYTHON_OPS
from transforms.memory import python_del

CPU = torch.device("cpu")


def _t(name, shape=(2, 3)):
    return TensorProxy(shape, torch.float32, CPU, name=name)


def _trace(args, lines, output, provenance="Hand-built test pass"):
    trace = Trace("computation")
    trace.args = list(args)
    trace.bound_symbols = list(lines)
    trace.output = output
    return trace.set_provenance(provenance)


def _rejects(trace, *words):
    with pytest.raises(TraceLintError) as info:
        lint(trace)
    message = str(info.value)
    for w in (trace.provenance, *words):
        assert w in message, message
    return message


def test_well_formed_trace_passes():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    lint(_trace([t0], [prims.neg.bind(t0, output=t1), prims.exp.bind(t1, output=t2),
                       python_del.bind(t1, output=None)], (t2,)))


def test_argument_twice():
    t0 = _t("t0")
    _rejects(_trace([t0, t0], [], (t0,)), "argument t0 appears twice")


def test_name_defined_twice():
    t0, t1 = _t("t0"), _t("t1")
    _rejects(_trace([t0], [prims.neg.bind(t0, output=t1), prims.exp.bind(t0, output=t1)], (t1,)),
             "line 1", "prims.exp(t0)", "defines t1, which is already defined")


def test_line_output_shadows_argument():
    t0, t1 = _t("t0"), _t("t1")
    _rejects(_trace([t0, t1], [prims.neg.bind(t0, output=t1)], (t1,)), "line 0", "defines t1")


def test_use_before_definition():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    _rejects(_trace([t0], [prims.add.bind(t0, t2, output=t1), prims.neg.bind(t0, output=t2)], (t1,)),
             "line 0", "reads t2, which is not defined above")


def test_output_not_defined():
    t0, t9 = _t("t0"), _t("t9")
    _rejects(_trace([t0], [], (t0, t9)), "the output", "reads t9")


def test_del_of_undefined_name():
    t0, t5 = _t("t0"), _t("t5")
    _rejects(_trace([t0], [python_del.bind(t5, output=None)], (t0,)), "line 0", "deletes t5, which is not defined")


def test_del_twice():
    t0, t1 = _t("t0"), _t("t1")
    lines = [prims.neg.bind(t0, output=t1), python_del.bind(t0, output=None), python_del.bind(t0, output=None)]
    _rejects(_trace([t0], lines, (t1,)), "line 2", "deletes t0 a second time")


def test_use_after_del():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    lines = [prims.neg.bind(t0, output=t1), python_del.bind(t0, output=None), prims.add.bind(t1, t0, output=t2)]
    _rejects(_trace([t0], lines, (t2,)), "line 2", "reads t0 after its del (line 1)")


def test_output_after_del():
    t0, t1 = _t("t0"), _t("t1")
    lines = [prims.neg.bind(t0, output=t1), python_del.bind(t1, output=None)]
    _rejects(_trace([t0], lines, (t1,)), "the output", "reads t1 after its del")


def _composite(x, out, subs):
    return ltorch.neg.bind(x, output=out, subsymbols=subs)


def test_subsymbols_consistent_pass():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    line = ltorch.exp.bind(t0, output=t2, subsymbols=[prims.neg.bind(t0, output=t1), prims.exp.bind(t1, output=t2)])
    lint(_trace([t0], [line], (t2,)))


def test_subsymbol_reads_a_name_outside_the_line():
    t0, t1, t2, t3 = _t("t0"), _t("t1"), _t("t2"), _t("t3")
    lines = [prims.neg.bind(t0, output=t1),
             _composite(t0, t3, [prims.add.bind(t0, t1, output=t2), prims.neg.bind(t2, output=t3)])]
    _rejects(_trace([t0], lines, (t3,)), "line 1", "subsymbol 0", "reads t1, which is neither an input")


def test_subsymbol_reads_a_later_sibling():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    line = _composite(t0, t2, [prims.add.bind(t0, t1, output=t2), prims.neg.bind(t0, output=t1)])
    _rejects(_trace([t0], [line], (t2,)), "subsymbol 0", "reads t1")


def test_subsymbols_do_not_produce_the_output():
    t0, t1, t2 = _t("t0"), _t("t1"), _t("t2")
    _rejects(_trace([t0], [_composite(t0, t2, [prims.neg.bind(t0, output=t1)])], (t2,)),
             "line 0", "outputs t2, which no subsymbol produces")


def test_subsymbols_define_a_name_twice():
    t0, t1 = _t("t0"), _t("t1")
    line = _composite(t0, t1, [prims.neg.bind(t0, output=t1), prims.exp.bind(t0, output=t1)])
    _rejects(_trace([t0], [line], (t1,)), "subsymbol 1", "defines t1, which an earlier subsymbol defines")


def test_subsymbol_redefines_an_input():
    t0, t1 = _t("t0"), _t("t1")
    line = _composite(t0, t1, [prims.neg.bind(t0, output=t0), prims.exp.bind(t0, output=t1)])
    _rejects(_trace([t0], [line], (t1,)), "subsymbol 0", "defines t0, which is an input of the line")


def test_a_composite_may_give_back_its_input_a_prim_may_not():
    # `(t0, t3) = ltorch.broadcast_tensors(t0, t1)` when t0 has the broadcast shape already
    t0, t1, t3 = _t("t0"), _t("t1", (3,)), _t("t3")
    line = ltorch.broadcast_tensors.bind(t0, t1, output=(t0, t3),
                                         subsymbols=[prims.broadcast_in_dim.bind(t1, (2, 3), (1,), output=t3)])
    lint(_trace([t0, t1], [line], (t0, t3)))
    _rejects(_trace([t0], [prims.neg.bind(t0, output=t0)], (t0,)), "line 0", "defines t0, which is already defined")


def test_nested_subsymbols_are_checked():
    t0, t1, t2, t9 = _t("t0"), _t("t1"), _t("t2"), _t("t9")
    inner = ltorch.exp.bind(t0, output=t2, subsymbols=[prims.neg.bind(t9, output=t1), prims.exp.bind(t1, output=t2)])
    _rejects(_trace([t0], [_composite(t0, t2, [inner])], (t2,)), "subsymbol 0", "subsymbol 0 (t1 = prims.neg(t9))",
             "reads t9")


def test_subsymbols_read_the_sizes_of_their_inputs():
    # what holds today: a decomposition reads its input's symbolic sizes even where no top-level line defines them
    i0, i1 = IntegerProxy(3, name="i0"), IntegerProxy(4, name="i1")
    t0, t1 = _t("t0", (i0, i1)), _t("t1", (i0, 1, i1))
    line = ltorch.unsqueeze.bind(t0, 1, output=t1, subsymbols=[prims.reshape.bind(t0, (i0, 1, i1), output=t1)])
    lint(_trace([t0], [line], (t1,)))
    # ... but not a size of no tensor it reads
    i2 = IntegerProxy(5, name="i2")
    bad = ltorch.unsqueeze.bind(t0, 1, output=t1, subsymbols=[prims.reshape.bind(t0, (i2, 1, i1), output=t1)])
    _rejects(_trace([t0], [bad], (t1,)), "subsymbol 0", "reads i2")


def test_numbers_computed_twice_by_the_same_line_or_a_size_unpack_are_allowed_nothing_else():
    i0, i1 = IntegerProxy(3, name="i0"), IntegerProxy(4, name="i1")
    i2 = IntegerProxy(7, name="i2")
    add, mul = PYTHON_OPS["add"], PYTHON_OPS["mul"]
    lint(_trace([i0, i1], [add.bind(i0, i1, output=i2), add.bind(i0, i1, output=i2)], (i2,)))
    _rejects(_trace([i0, i1], [add.bind(i0, i1, output=i2), mul.bind(i0, i1, output=i2)], (i2,)),
             "line 1 (i2 = i0 * i1)", "defines i2, which is already defined")
    # a size unpacked from a tensor whose size an earlier line computed (fuzz seed 272)
    t0, t1 = _t("t0", (i0, i1)), _t("t1", (i2,))
    lines = [mul.bind(i0, i1, output=i2), prims.reshape.bind(t0, (i2,), output=t1), prims.shape.bind(t1, output=(i2,))]
    lint(_trace([t0, i0, i1], lines, (t1,)))
    # ... but a tensor is never defined twice, even by the same line
    t2 = _t("t2")
    _rejects(_trace([t2], [prims.neg.bind(t2, output=t1), prims.neg.bind(t2, output=t1)], (t1,)), "defines t1")


def _text_sym(text):
    return Symbol("test.text", "text", meta=lambda *a: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                  printer=lambda bsym, printer: text)


def test_text_traces_have_their_source_checked():
    trace = Trace("epilogue")
    trace.args = ["fn", "args", "kwargs", "outs"]
    trace.bound_symbols = [_text_sym("x = args[0]").bind(output=None), _text_sym("x.copy_(outs[0])").bind(output=None)]
    trace.set_provenance("Hand-built epilogue")
    lint(trace)
    trace.bound_symbols.append(_text_sym("with torch.no_grad():\n    z = outs[1]\n    z.zero_()").bind(output=None))
    trace.bound_symbols.append(_text_sym("z += 1").bind(output=None))  # assigned inside a block, read after it
    lint(trace)
    trace.bound_symbols.append(_text_sym("y.append(outs[1])").bind(output=None))
    _rejects(trace, "the statement `y.append(outs[1])`", "reads y, which is not defined above")
    trace.bound_symbols[-1] = _text_sym("del x").bind(output=None)
    trace.bound_symbols.append(_text_sym("x.zero_()").bind(output=None))
    _rejects(trace, "`x.zero_()`", "reads x after its del")


# -- real traces ----------------------------------------------------------------------------------------------
def _all_traces(jfn):
    return (jitcore.last_traces(jfn) + jitcore.last_backward_traces(jfn) + jitcore.last_prologue_traces(jfn)
            + jitcore.last_epilogue_traces(jfn))


def _gelu_sum(a, b):
    return torch.nn.functional.gelu(a.unsqueeze(1) + b).sum() * 2


def _two_outputs(x, w):
    h = torch.tanh(x @ w)
    return h.sum(), (h * 3).mean()


def _writes(x, out):
    x.add_(1)
    out.append(x * 2)
    return x.select(1, 2)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_real_traces_pass(cache):
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 1, 4, requires_grad=True)
    j = jitcore.jit(_gelu_sum, cache=cache)
    j(a, b).backward()
    traces = _all_traces(j)
    assert len(traces) >= 8
    for t in traces:
        lint(t)

    j = jitcore.jit(_two_outputs, cache=cache)
    s, _ = j(torch.randn(4, 5, requires_grad=True), torch.randn(5, 6, requires_grad=True))
    s.backward()  # the cotangent of the mean is None: the traces of a backward built on first use follow
    assert len(jitcore.last_backward_traces(j)) > len(j._last_entry.backward_traces)
    for t in _all_traces(j):
        lint(t)

    j = jitcore.jit(_writes, cache=cache)
    j(torch.randn(4, 5), [])
    assert jitcore.last_epilogue_traces(j)
    for t in _all_traces(j):
        lint(t)

    j = jitcore.jit(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), cache=cache)
    j(torch.randn(3, 4)).sum().backward()
    for t in _all_traces(j):
        lint(t)


def _duplicating_cse(trace, **kw):
    """A broken pass: the first line twice (the program still runs: the same value is computed again)."""
    new = from_trace(trace)
    new.bound_symbols = [trace.bound_symbols[0], *trace.bound_symbols]
    return new.set_provenance("Broken duplicating pass")


def test_the_pipeline_lints_each_pass_when_on(monkeypatch):
    monkeypatch.setattr(pipeline, "cse", _duplicating_cse)
    x = torch.randn(3)
    monkeypatch.setattr(ir_lint, "CHECK", False)
    torch.testing.assert_close(jitcore.jit(lambda x: x.exp() + 1)(x), x.exp() + 1)
    monkeypatch.setattr(ir_lint, "CHECK", True)
    with pytest.raises(TraceLintError, match=r"Broken duplicating pass.*line 1 .*defines t1, which is already"):
        jitcore.jit(lambda x: x.exp() + 1)(x)


def test_the_suite_runs_with_the_checker_on():
    assert ir_lint.CHECK  # tests/conftest.py
