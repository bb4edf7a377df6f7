"""Common subexpression elimination: duplicates merge, random draws never do, results stay eager's."""
import torch

import jitcore
from tests.fuzz import CACHE_MODES, generate
from tests.fuzz import check_program as fuzz_check
from tests.fuzz_classes import CLASSES_4FEC12F
from tests.helpers import trace_fn
from transforms.cse import cse


def _ops(trace):
    return [b.sym.id for b in trace.bound_symbols]


def test_duplicate_lines_merge_and_later_uses_read_the_survivor():
    trace = cse(trace_fn(lambda a, b: (a * b) + (a * b), torch.randn(3), torch.randn(3)))
    assert _ops(trace) == ["ltorch.mul", "ltorch.add"]
    add = trace.bound_symbols[1]
    assert add.args[0] is add.args[1] is trace.bound_symbols[0].output


def test_random_draws_are_never_merged():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5) + torch.nn.functional.dropout(x, 0.5)

    jf = jitcore.jit(f)
    x = torch.ones(1000)
    out = jf(x)
    assert 0 < (out == 2.0).sum() < 1000  # two independent masks, not one mask counted twice
    trace = jitcore.last_traces(jf)[0]
    assert sum(b.sym.name == "dropout" for b in trace.bound_symbols) == 2


def test_backward_of_a_square_computes_the_product_once():
    x = torch.randn(4, requires_grad=True)
    jf = jitcore.jit(lambda a: (a.sin() * a.sin()).sum())
    jf(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.sin() * x.cos())
    forward = jitcore.last_traces(jf)[-1]
    assert sum(line.strip().split(" = ")[-1].startswith("torch.sin(") for line in str(forward).splitlines()) == 1


def test_a_line_keeping_a_dropped_twins_size_is_remade_with_the_survivors():
    """Fuzz seed 2401 under symbolic values: a duplicate dropped for a survivor with another size symbol; a later kept
    line keeping that size (slice_scatter of it) must carry the survivor's size too, or the lines reading it read a
    size their input does not carry (the trace checker, on in tests, refused the program)."""
    prog = generate(2401, classes=CLASSES_4FEC12F)
    for cache in CACHE_MODES:
        report = fuzz_check(prog, cache)
        assert not report.problems and report.refused is None, report.text(prog)
