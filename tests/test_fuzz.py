"""Differential fuzzing against eager PyTorch (tests/fuzz.py): seeded random programs with views, in-place writes,
no_grad/autocast regions, random ops and containers, run in every cache mode (and with Inductor for one program in
50), each called several times with fresh inputs and other shapes. A failure lists each seed with its repro command.
"""
from __future__ import annotations

import pytest

from tests.fuzz import CACHE_MODES, check_program, generate, uses_inductor

CI_PROGRAMS, CI_CHUNK = 300, 10
SLOW_PROGRAMS, SLOW_CHUNK = 5000, 100


def _run_chunk(seeds) -> None:
    failures, refused, runs = [], 0, 0
    for seed in seeds:
        prog = generate(seed)
        configs = [(mode, ()) for mode in CACHE_MODES]
        if uses_inductor(seed):
            configs.append(("constant values", ("inductor",)))
        for mode, executors in configs:
            report = check_program(prog, mode, executors)
            runs += 1
            refused += report.refused is not None
            if report.problems:
                failures.append(report.text(prog))
    assert not failures, f"{len(failures)} of {runs} runs disagree with eager:\n\n" + "\n\n".join(failures)
    assert refused < runs / 2, f"jit refused {refused} of {runs} runs: the generator no longer tests much"


@pytest.mark.parametrize("start", range(0, CI_PROGRAMS, CI_CHUNK))
def test_fuzz_against_eager(start):
    _run_chunk(range(start, start + CI_CHUNK))


@pytest.mark.slow
@pytest.mark.parametrize("start", range(100_000, 100_000 + SLOW_PROGRAMS, SLOW_CHUNK))
def test_fuzz_against_eager_long(start):
    _run_chunk(range(start, start + SLOW_CHUNK))


def test_generator_is_deterministic_and_varied():
    """The same seed prints the same program (so a printed seed reproduces), and the programs exercise every
    feature the fuzzer promises."""
    assert generate(7).source == generate(7).source
    text = "\n".join(generate(s).source for s in range(CI_PROGRAMS))
    for feature in ("torch.no_grad()", "torch.autocast", "for i in range", "if ", "random.random()", "print(",
                    "dropout", "rand_like", "] = ", "_(", ".view(-1)", ".diagonal()", ".select(", "index_select",
                    "gather", ".var(", ".amax(", "torch.cat(feats)", "return {", "return [", "k=", "s0"):
        assert feature in text, feature
