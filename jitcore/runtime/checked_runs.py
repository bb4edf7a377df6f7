"""Runtime: running a program that checks sizes known only at run time (jitcore/ops/size_checks.py). A failed check
raises RunTimeCheckFailed part way through the program; what the program changed outside itself by then must be as
before the call, so the entry for the other answer can run the call from the start (`run_again`): the random
generators' states are saved before the run and put back on failure, and its prints are written when it ends
(writes into the inputs are left to the epilogue: pipeline.py).
"""
from __future__ import annotations

import linecache
import random

import torch

from jitcore.errors import RunTimeCheckFailed
from jitcore.interpreter.user_traceback import at_user_line
from jitcore.ops.per_call import DEFERRED_PRINTS
from jitcore.ops.size_checks import check_size


def has_checks(trace) -> bool:
    """Whether a line of the trace checks a run-time size."""
    return any(has_checks_line(b) for b in trace.bound_symbols)


def has_checks_line(bsym) -> bool:
    """Whether the line checks a run-time size."""
    return bsym.sym is check_size


def user_where(bsym) -> str | None:
    """'file:line' and the source line of the user's code a trace line was recorded at, if known."""
    if not bsym.user_stack:
        return None
    code, inst = bsym.user_stack[-1]
    return f"{code.co_filename}:{inst.lineno}: {linecache.getline(code.co_filename, inst.lineno).strip()}"


def checked_run(computation):
    """computation(*inputs), the generators' states restored when one of its checks fails (the error then says
    the states were put back: `restored`)."""
    def run(*inputs):
        states = (torch.get_rng_state(), random.getstate(),
                  torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)
        prints = []
        token = DEFERRED_PRINTS.set(prints)
        try:
            out = computation(*inputs)
        except RunTimeCheckFailed as e:
            torch.set_rng_state(states[0])
            random.setstate(states[1])
            if states[2] is not None:
                torch.cuda.set_rng_state_all(states[2])
            e.restored = True
            raise
        finally:
            DEFERRED_PRINTS.reset(token)
        for text, file, flush in prints:  # (the program's prints, in order, once it ran to its end)
            file.write(text)
            if flush:
                file.flush()
        return out

    run.__wrapped__ = computation
    return run


def run_again(jf, entry, args, kwargs, error):
    """After a check of `entry`'s program failed (an answer about a size known only at run time differs from the one
    it was traced with; nothing outside the program changed): the call of JitFunction `jf` runs with another entry
    whose prologue accepts it, else with one compiled for it. The call's flat outputs, unflattened. A check that
    failed where the states could not be put back (a backward's) is raised as it is."""
    if not getattr(error, "restored", False):
        at_user_line(error, entry.traces[0])
        raise error
    failed = [entry]
    while True:
        found = jf._cache.lookup_other(jf.fn, args, kwargs, failed)
        fresh = found is None
        if fresh:
            found = jf._compile(args, kwargs, reason=f"a check the program runs failed: {error.args[0]}")
        entry, inputs = found
        jf._last_entry = entry
        try:
            flat = entry.computation(*inputs)
        except RunTimeCheckFailed as e:
            if fresh or not getattr(e, "restored", False):  # (a fresh entry's own answers: never expected)
                raise
            failed.append(entry)
            continue
        except Exception as e:
            at_user_line(e, entry.traces[0])
            raise
        if entry.epilogue is not None:
            flat = entry.epilogue(jf.fn, args, kwargs, flat)
        return entry.unflatten(flat)
