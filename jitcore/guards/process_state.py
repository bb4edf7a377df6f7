"""Guards stage: the process's state outside Python's objects that user code reads natively inside a jitted function:
the filesystem (os.stat and what is built on it: os.path.exists/isfile/isdir/getsize/getmtime, pathlib's
Path.exists()/is_file(), glob, os.walk), directory listings (os.listdir, os.scandir), the working directory
(os.getcwd, and os.path.abspath over it), the process id. Each such read made for the user's code (directly, or
through the stdlib) runs now and is recorded in Guards.flags as (outcome, (reader, *args), kwargs) -> its outcome (the
value, or the exception it raised); the prologue reads it again on every call of the programs that read it, so a
call after the state changed is another call (traced again, reading what eager reads), never the first call's
answer. Reads torch or jitcore make for themselves are not recorded. Environment variables need nothing here:
os.environ is a Python mapping over a dict, whose reads are guarded like any dict's; clocks are per-call values
(jitcore/ops/per_call.py).
"""
from __future__ import annotations

import os
import reprlib

from jitcore.interpreter.run import is_stdlib_file, is_user_file


def _optional(owner, *names) -> list:
    return [getattr(owner, n) for n in names if hasattr(owner, n)]


# the native readers (os.path's functions are Python over these, except where a platform has native versions)
READERS = frozenset({
    os.stat, os.lstat, os.listdir, os.scandir, os.getcwd, os.getcwdb, os.access, os.getpid, os.getppid,
    *_optional(os, "readlink", "statvfs", "getloadavg", "pathconf"),
    *[f for f in _optional(os.path, "exists", "lexists", "isfile", "isdir", "islink", "isjunction", "isabs")
      if not hasattr(f, "__code__")],
})

_PLAIN = (str, bytes, int, bool, type(None))


class Raised(tuple):
    """The outcome of a read that raised: (exception type, errno), equal for the same failure."""

    def __repr__(self):
        return f"raises {self[0].__name__}"


def _raised(e: Exception) -> Raised:
    return Raised((type(e), getattr(e, "errno", None)))


def outcome(fn, *args, **kwargs):
    """What `fn(*args, **kwargs)` gives now, as a value the prologue compares: its result (for os.scandir, the names
    and kinds of the entries in order), or Raised for the exception it raises."""
    try:
        value = fn(*args, **kwargs)
    except Exception as e:
        return _raised(e)
    if fn is os.scandir:
        with value:
            return tuple((e.name, e.is_dir(), e.is_file(), e.is_symlink()) for e in value)
    return value


def visible_to_user(frame) -> bool:
    """Whether a read made from `frame` is the user's: made by user code, or by the stdlib called from it (pathlib's
    Path.exists(), os.path.exists, glob); not one torch or jitcore make for themselves."""
    while frame is not None:
        name = frame.code.co_filename
        if not is_stdlib_file(name):
            return is_user_file(name)
        frame = frame.parent
    return True


def reader(flags: dict, fn, frame):
    """A stand-in for `fn` (in READERS) called from `frame`: it reads now and, where the read is the user's and its
    arguments are constants, records the outcome for the prologue; it returns (or raises) what fn does."""
    def read(*args, **kwargs):
        if not visible_to_user(frame):
            return fn(*args, **kwargs)
        key_args = tuple(os.fspath(a) if isinstance(a, os.PathLike) else a for a in args)
        if not all(isinstance(a, _PLAIN) for a in (*key_args, *kwargs.values())):
            return fn(*args, **kwargs)  # (an open directory's DirEntry, a file object: nothing a call can name)
        key = (outcome, (fn, *key_args), tuple(kwargs.items()))
        try:
            value = fn(*args, **kwargs)
        except Exception as e:  # (raised to the user's code, as in eager: os.path.exists answers False from it)
            flags.setdefault(key, _raised(e))
            raise
        flags.setdefault(key, outcome(fn, *key_args, **kwargs) if fn is os.scandir else value)
        return value

    return read


def check(flag_key, value):
    """(condition, reason) for the prologue: true when the read no longer gives what the program was traced with."""
    _, (fn, *args), kwargs = flag_key
    short = reprlib.Repr()
    short.maxstring = short.maxother = 60
    text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs])
    where = f"{fn.__module__ or 'os'}.{fn.__name__}({text})"

    def cond(p):
        parts = [p.const(fn)] + [repr(a) if isinstance(a, (str, int, bool, type(None))) else p.const(a) for a in args]
        parts += [f"{k}={v!r}" if isinstance(v, (str, int, bool, type(None))) else f"{k}={p.const(v)}"
                  for k, v in kwargs]
        return f"{p.const(outcome)}({', '.join(parts)}) != {p.const(value)}"

    return cond, f"{where}: expected {short.repr(value)}"
