"""Logging, below every stage: jitcore logs through Python's `logging`, on the logger `jitcore` and one child per
stage named after the package's folders (`jitcore.guards`, `jitcore.ops`, `jitcore.api`, ...). Each record belongs
to a topic; the environment variable JITCORE_LOGS turns topics on without code changes, as TORCH_LOGS does:

    JITCORE_LOGS=recompiles,traces python train.py      # INFO records of two topics, on stderr
    JITCORE_LOGS=+guards python train.py                # "+topic": its DEBUG records too
    JITCORE_LOGS=all,-progress python train.py          # every topic; "-topic" turns one off

Topics: recompiles (each cache miss: the user's call site and the reason), traces (each final program; DEBUG: every
pass), guards (the prologue of each new entry), fallbacks (each torch callable run as an opaque op, once),
compile_times (seconds per compile stage), progress (a first compile still running after 2 seconds shows its stage
on stderr; on by default when stderr is a terminal outside CI). An unknown topic warns and lists the valid ones.
A program can configure the same with `jitcore.logs.configure("recompiles,+traces")`, or with logging itself:
`logging.getLogger("jitcore").setLevel(logging.INFO)` (the `jitcore` logger is at WARNING until then, as torch's
are) and a handler of its own sends every topic's INFO records there.

Nothing here runs on a cached call: the stages log on misses and compiles only.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings

ROOT = "jitcore"
# topic -> the stage logger its records go to
TOPICS = {
    "recompiles": "jitcore.guards",
    "guards": "jitcore.guards",
    "traces": "jitcore.api",
    "fallbacks": "jitcore.ops",
    "compile_times": "jitcore.api",
    "progress": "jitcore.api",
}
ENV = "JITCORE_LOGS"
PROGRESS_DELAY_S = 2.0  # a compile running longer than this shows its progress
PROGRESS_EVERY_S = 1.0

_levels: dict[str, int] = {}  # topic -> the lowest level shown, for the topics JITCORE_LOGS/configure turned on
_progress_off = False  # "-progress": never show progress
_handler: logging.Handler | None = None


class _TopicFilter(logging.Filter):
    """Passes the records of the topics turned on, at their level (the handler JITCORE_LOGS installs)."""

    def filter(self, record):
        level = _levels.get(getattr(record, "jitcore_topic", None))
        return level is not None and record.levelno >= level


def configure(spec: str | None, stream=None) -> None:
    """Turn topics on (and off) from a JITCORE_LOGS string: comma-separated topics, `+topic` for DEBUG records,
    `-topic` to turn one off, `all` for every topic. None or "" turns every topic off again. Records of the topics
    turned on go to one handler on the `jitcore` logger (stderr, or `stream`)."""
    global _progress_off, _handler
    levels, off = {}, False
    for item in (s.strip() for s in (spec or "").split(",")):
        if not item:
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("", item)
        names = list(TOPICS) if name == "all" else [name]
        if name != "all" and name not in TOPICS:
            warnings.warn(f"{ENV}: unknown topic {name!r}; valid topics: {', '.join(TOPICS)}, all "
                          "('+topic' for debug records, '-topic' to turn one off)", stacklevel=2)
            continue
        for n in names:
            if sign == "-":
                levels.pop(n, None)
                off = off or n == "progress"
            else:
                levels[n] = logging.DEBUG if sign == "+" else logging.INFO
    _levels.clear()
    _levels.update(levels)
    _progress_off = off
    root = logging.getLogger(ROOT)
    if root.level == logging.NOTSET:  # as torch's loggers: a program's logging.basicConfig(level=INFO) alone does
        root.setLevel(logging.WARNING)  # not turn the topics on; setting the `jitcore` logger's level does
    if _handler is not None:
        root.removeHandler(_handler)
        _handler = None
    for stage in set(TOPICS.values()):
        logging.getLogger(stage).setLevel(logging.NOTSET)
    if not levels:
        return
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(logging.Formatter("[%(name)s %(jitcore_topic)s] %(message)s"))
    _handler.addFilter(_TopicFilter())
    root.addHandler(_handler)
    for topic, level in levels.items():
        stage = logging.getLogger(TOPICS[topic])
        stage.setLevel(min(level, stage.level or logging.WARNING))


def enabled(topic: str, level: int = logging.INFO) -> bool:
    """Whether a record of `topic` at `level` would be shown (ask before building an expensive message)."""
    want = _levels.get(topic)
    if want is not None and level >= want:
        return True
    return logging.getLogger(TOPICS[topic]).isEnabledFor(level) and _handled(TOPICS[topic])


def _handled(name: str) -> bool:
    """Whether a handler of the program's own (not logging's last resort) would receive a record of `name`."""
    logger = logging.getLogger(name)
    while logger is not None:
        if any(h is not _handler for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def log(topic: str, message: str, *args, level: int = logging.INFO) -> None:
    """One record of `topic` on its stage's logger (lazy %-formatting, as logging does)."""
    logging.getLogger(TOPICS[topic]).log(level, message, *args, extra={"jitcore_topic": topic})


# -- the user's call site: the first frame outside jitcore's own packages --------------------------------------------
_OWN = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
             for d in ("jitcore", "executors", "transforms"))


def _own(filename: str) -> bool:
    return filename.startswith(_OWN)


def user_frame(depth: int = 1):
    """(frame, stacklevel): the innermost frame of the caller's stack outside jitcore, executors and transforms, and
    the `stacklevel` that names it in warnings.warn called from the caller of this function."""
    frame, level = sys._getframe(depth), 1
    while frame is not None and _own(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return frame, level


def call_site(depth: int = 2) -> str:
    """"file:line" of the user's code that called into jitcore (not jitcore/api.py)."""
    frame, _ = user_frame(depth)
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


# -- progress of a long compile ---------------------------------------------------------------------------------------
def _progress_wanted() -> bool:
    if _progress_off:
        return False
    if "progress" in _levels:
        return True
    stream = sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("CI")


class Progress:
    """Shows, from PROGRESS_DELAY_S on, what a long compile is doing: its stage and how many fusion regions are
    compiled (`regions()`), refreshed every PROGRESS_EVERY_S on a terminal (one line, rewritten), else a line per
    refresh. A daemon thread waits on an event; a compile that finishes sooner prints nothing."""

    current: Progress | None = None  # the compile in progress on this process (stages report to it)

    def __init__(self, name: str, regions=None, stream=None):
        self.name, self.regions, self.stage = name, regions, "interpret"
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.done = threading.Event()
        self.shown = False
        self.thread = None

    def __enter__(self):
        self.outer, Progress.current = Progress.current, self
        if self.outer is None and _progress_wanted():
            self.thread = threading.Thread(target=self._run, name="jitcore-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        Progress.current = self.outer
        if self.thread is not None:
            self.done.set()
            self.thread.join()
            if self.shown:
                self._write(f"jitcore: compiled {self.name} in {time.perf_counter() - self.start:.1f} s", end=True)
        return False

    def line(self) -> str:
        regions = f", {self.regions()} fusion regions compiled" if self.regions is not None else ""
        return (f"jitcore: compiling {self.name}: {self.stage}{regions} "
                f"({time.perf_counter() - self.start:.0f} s)")

    def _run(self):
        if self.done.wait(PROGRESS_DELAY_S):
            return
        while True:
            self.shown = True
            self._write(self.line())
            if self.done.wait(PROGRESS_EVERY_S):
                return

    def _write(self, text: str, end: bool = False):
        try:
            if self.tty:
                self.stream.write(f"\r\x1b[K{text}" + ("\n" if end else ""))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: progress is not worth an error
            pass


def stage(name: str) -> None:
    """The stage the compile in progress has reached (shown by its Progress)."""
    p = Progress.current
    if p is not None:
        p.stage = name


configure(os.environ.get(ENV))
