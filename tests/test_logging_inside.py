"""`logging` calls and warnings inside a jitted function (jitcore/ops/log_calls.py): every call logs and warns what
eager does, with the call's values, the user's file, line and function, and the logger's level and the warning
filters as they are at that call; in every cache mode. Generated: logger methods x arguments (shapes, tensors,
numbers, a dict) x levels changed between calls."""
from __future__ import annotations

import logging
import random
import warnings

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedError
from tests.fuzz import CACHE_MODES

LOGGER = logging.getLogger("jitcore.tests.inside")


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def kept():
    handler = _Keep()
    LOGGER.addHandler(handler)
    LOGGER.propagate = False
    try:
        yield handler
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(logging.NOTSET)


def _seen(records) -> list:
    return [(r.getMessage(), r.levelno, r.filename, r.lineno, r.funcName, r.name) for r in records]


CALLS = {  # (x, n) -> a logging call made inside the function
    "info shape": lambda x, n: LOGGER.info("shape %s, first %d", x.shape, x.shape[0]),
    "debug tensor": lambda x, n: LOGGER.debug("x = %s", x),
    "warning sum": lambda x, n: LOGGER.warning("sum %.4f of %d", x.sum(), n),
    "log level": lambda x, n: LOGGER.log(logging.ERROR, "n is %s", n),
    "dict argument": lambda x, n: LOGGER.info("%(rows)s rows", {"rows": x.shape[0]}),
    "module function": lambda x, n: logging.getLogger("jitcore.tests.inside").critical("mean %s", x.mean()),
    "no arguments": lambda x, n: LOGGER.info("plain"),
}


def _program(rng: random.Random):
    chosen = rng.sample(sorted(CALLS), rng.randint(2, 4))

    def f(x, n):
        y = x * 2
        for name in chosen:
            CALLS[name](y, n)
        return y.sum() * n

    return f, chosen


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("seed", range(6))
def test_logging_inside_logs_what_eager_logs(seed, mode, kept):
    rng = random.Random(seed)
    f, chosen = _program(rng)
    jf = jitcore.jit(f, cache=mode)
    for call in range(5):
        LOGGER.setLevel(rng.choice([logging.DEBUG, logging.INFO, logging.WARNING, logging.CRITICAL]))
        x, n = torch.randn(rng.choice([3, 4]), 2), rng.choice([2, 5])
        kept.records.clear()
        want = f(x, n)
        expected = _seen(kept.records)
        kept.records.clear()
        got = jf(x, n)
        assert _seen(kept.records) == expected, (seed, mode, call, chosen)
        torch.testing.assert_close(got, want)


def _helper(x):
    LOGGER.warning("from the helper: %s", x.shape, stacklevel=2)


def test_stacklevel_names_the_caller(kept):
    def f(x):
        _helper(x)  # (the line the record names)
        return x + 1

    LOGGER.setLevel(logging.INFO)
    f(torch.ones(2))
    expected = _seen(kept.records)
    kept.records.clear()
    jitcore.jit(f)(torch.ones(2))
    assert _seen(kept.records) == expected and expected[0][4] == "f"


def test_the_log_line_prints_in_the_trace(kept):
    def f(x):
        LOGGER.info("rows %d", x.shape[0])
        return x * 2

    jf = jitcore.jit(f)
    jf(torch.ones(3))
    assert "log_(" in str(jitcore.last_traces(jf)[-1])


def test_what_cannot_be_logged_per_call_is_refused_at_the_users_line(kept):
    def with_exception(x):
        try:
            raise ValueError("bad")
        except ValueError:
            LOGGER.exception("caught")  # (eager logs the traceback: here it would be the interpreter's)
        return x

    class Box:
        def __init__(self, t):
            self.t = t

    def with_object(x):
        LOGGER.info("box %s", Box(x * 2))
        return x

    for fn, what in ((with_exception, "exception"), (with_object, "object holding traced")):
        with pytest.raises(UnsupportedError, match=what):
            jitcore.jit(fn)(torch.ones(2))


def _warns_for(x):
    warnings.warn("from the helper", RuntimeWarning, stacklevel=2)


def _warning_program(x, n):
    if x.shape[0] > 2:
        warnings.warn(f"{n} rows is many", stacklevel=1)  # (the location eager names)
    _warns_for(x)  # (stacklevel=2 names this line)
    return x * n


@pytest.mark.parametrize("mode", CACHE_MODES)
@pytest.mark.parametrize("action", ["always", "default", "error"])
def test_warnings_inside_warn_as_eager_on_every_call(mode, action):
    """warnings.warn inside warns on every call under "always" (it warned once, at trace time, from jitcore's own
    file), once per location under "default", and raises under "error", at the user's lines, as in eager."""
    jf = jitcore.jit(_warning_program, cache=mode)
    for n in (3, 3, 4):
        seen = []
        for fn in (_warning_program, jf):
            globals().pop("__warningregistry__", None)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter(action)
                try:
                    fn(torch.ones(n, 2), n)
                    seen.append([(str(w.message), w.category, w.filename, w.lineno) for w in caught])
                except Warning as e:
                    seen.append(("raised", type(e), str(e)))
        assert seen[0] == seen[1], (mode, action, n)
