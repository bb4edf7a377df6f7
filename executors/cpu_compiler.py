"""Executors: the C++ compiler behind Inductor's CPU regions, made ready while the program is formed. Two things cost
seconds before a process's first CPU region compiles, both in Inductor's own code: its check of which vector
instruction sets the compiler can build for, and its precompiled header (a build of the headers every region
includes, kept in Inductor's folder of headers beside its cache). The checks run here in a thread from the moment a
region is formed (warm_cpu_compiler), in Inductor's order of preference up to the set Inductor will pick; a compile
waits for them where Inductor first asks for their answer (cpu_compiler_ready). A precompiled header that is not
on disk yet is built in a thread while the region compiles without it (header_builds_in_background):
the region is then ready after one compiler run, not after two in a row, and later compiles use the header. A region
compiled ahead of its first run (executors/ahead.py) leaves its C++ build to a thread (builds_in_background).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
import threading
import time

from executors.regions import COMPILE_EVENTS
from jitcore import compat

_ISA_CHECKS: list = []  # futures of the CPU vector-ISA checks started by warm_cpu_compiler


def warm_cpu_compiler():
    """Start, once per process, Inductor's check of which vector instruction sets this CPU's compiler can build
    for (a g++ build and a load per candidate set: seconds in a new environment, before the first CPU kernel
    compiles, where Inductor runs them all one after another). They run here in a thread, up to the first set that
    builds (the one Inductor picks: _check_in_order), from the moment a CPU region is formed that no cache holds
    (compile_region) while the rest of the program is formed and the region traced to an aten graph and Inductor
    lowers it; the first compile waits for them where Inductor picks the set for its kernels (cpu_compiler_ready,
    from _wait_where_inductor_picks). Nothing else runs in that thread: an import there could race the program's
    own imports while it is traced."""
    if _ISA_CHECKS:
        return
    _ISA_CHECKS.append(None)
    try:
        import platform
        from concurrent.futures import ThreadPoolExecutor

        # what the checks import, loaded here in this thread: an import in the workers could race the program's own
        # imports while it is traced
        codecache, _cpp_builder, cpu_vec_isa = compat.inductor_cpp_modules()  # (and the file lock they use)

        _build_headers_in_background(codecache)
        _count_builds(_cpp_builder)
        _time_pool_builds()
        if platform.machine() not in ("x86_64", "AMD64") or sys.platform != "linux":
            return
        flags = cpu_vec_isa.x86_isa_checker()
        todo = [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(isa).split())]
        pool = ThreadPoolExecutor(1, thread_name_prefix="jitcore-isa")
        _ISA_CHECKS.append(pool.submit(_check_in_order, todo))
        pool.shutdown(wait=False)
        _wait_where_inductor_picks(cpu_vec_isa)
    except Exception:  # (an Inductor without these internals: it checks on its own, one at a time)
        return


# what the check of an instruction set builds and loads: its intrinsics header, with its compiler flags
_ISA_PROBE = """
#include <immintrin.h>
extern "C" int __jitcore_isa_probe(int x) { return x + 1; }
"""


def _check_isa(isa) -> bool:
    """Whether Inductor may use a vector instruction set the CPU reports: as Inductor's own check, a build with the
    set's compiler flags and a load of the result in a child process, but of a file that includes only the
    intrinsics header (under a second, where Inductor's file, which includes ATen's vector headers, takes seconds
    per set). Its answer stands for Inductor's first check (cached by Inductor per set); the set's further checks
    (bf16, VNNI, AMX instructions: small files) run as Inductor runs them."""
    ok = isa.check_build(_ISA_PROBE)
    isa.check_build = lambda code, _ok=ok: _ok
    try:
        isa._VecISA__bool__impl(None)  # (Inductor's cached answer for its default setting, cpp.vec_isa_ok = None)
    finally:
        del isa.check_build
    return bool(isa)


_FIRST_VALID: list = []  # [the first set of Inductor's order of preference the compiler builds for, or None]


def _check_in_order(todo: list):
    """Check the sets in Inductor's order of preference, up to the first that builds: the one Inductor picks (its
    first valid one, see _wait_where_inductor_picks); the sets after it are not checked (each check is compiler
    runs: CPU time a loaded machine lacks)."""
    for isa in todo:
        if _check_isa(isa):
            _FIRST_VALID.append(isa)
            return
    _FIRST_VALID.append(None)


def _wait_where_inductor_picks(cpu_vec_isa):
    """Inductor asks for the valid instruction sets (valid_vec_isa_list, through pick_vec_isa) when it generates a
    region's kernels, after tracing, lowering and scheduling the graph: the wait for the checks moves there, so they
    run while Inductor does all that."""
    original = cpu_vec_isa.valid_vec_isa_list
    if getattr(original, "jitcore_original", None) is not None:
        return

    def valid_vec_isa_list():
        if not threading.current_thread().name.startswith("jitcore-isa"):
            cpu_compiler_ready()
        config = compat.inductor_config()
        if _FIRST_VALID and _FIRST_VALID[0] is not None and config.cpp.simdlen is None and \
                not os.getenv("ATEN_CPU_CAPABILITY"):
            # what pick_vec_isa takes from the full list under these settings: its first set (the rest unchecked)
            return [_FIRST_VALID[0]]
        return original()

    valid_vec_isa_list.jitcore_original = original
    cpu_vec_isa.valid_vec_isa_list = valid_vec_isa_list


def cpu_compiler_ready():
    """Wait for the checks warm_cpu_compiler started (their results are cached where Inductor looks them up); start
    them first if nothing has (a package's regions loaded without them, and then one that was not packaged)."""
    warm_cpu_compiler()
    for f in _ISA_CHECKS:
        if f is not None:
            with contextlib.suppress(Exception):
                f.result()


# -- compiler runs, counted and timed -------------------------------------------------------------------------------
_COUNT_LOCK = threading.Lock()


def _count_builds(cpp_builder):
    """Wraps Inductor's run of the C++ compiler (cpp_builder.run_compile_cmd, once per process): every run counts in
    COMPILE_EVENTS[2], and its seconds go to the compile record of the thread that runs it (`_OWN.record`, see
    timed_stages), a region's build in a background thread included."""
    run = getattr(cpp_builder, "run_compile_cmd", None)
    if run is None or getattr(run, "jitcore_original", None) is not None:
        return

    def run_compile_cmd(*args, **kwargs):
        start = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            with _COUNT_LOCK:
                COMPILE_EVENTS[2] += 1
            record = getattr(_OWN, "record", None)
            if record is None and _ACTIVE and not threading.current_thread().name.startswith(("jitcore-header",
                                                                                            "jitcore-isa")):
                record = _ACTIVE[-1]  # (a kernel built by Inductor's own threads for the compile under way)
            if record is not None:
                with _COUNT_LOCK:
                    record["cpp_build"] += time.perf_counter() - start

    run_compile_cmd.jitcore_original = run
    cpp_builder.run_compile_cmd = run_compile_cmd


def _time_pool_builds():
    """Wraps Inductor's AsyncCompile.submit (once per process): a kernel's build submitted to Inductor's compile
    threads by one of jitcore's compiles counts in that compile's record (its `cpp_build`), also when it ends after
    the compile returned (a Python wrapper's kernels left to the region's first run: _defer_kernel_waits)."""
    cls = compat.async_compile()
    original = getattr(cls, "submit", None)
    if original is None or getattr(getattr(original, "__func__", None), "jitcore_original", None) is not None:
        return

    def submit(klass, task):
        record = getattr(_OWN, "record", None)
        return original(task if record is None else functools.partial(_with_record, record, task))

    submit.jitcore_original = original
    cls.submit = classmethod(submit)


_ACTIVE: list = []  # the records of the compiles under way (timed_stages), the newest last
_INDUCTOR_STAGES = {"lowering": "GraphLowering.run", "codegen": "GraphLowering.codegen",
                    "load": "PyCodeCache.load_by_key_path"}


@contextlib.contextmanager
def timed_stages(record: dict):
    """Inside: Inductor's stages of this thread's compile are added to `record` (executors/regions.py log_compile):
    lowering, code generation, and the load of the module (less the C++ builds run inside it, which are `cpp_build`),
    from Inductor's own timings; the compiler runs of this thread, and of the builds it leaves to threads."""
    metrics = compat.inductor_time_metrics()
    before = {k: (metrics.get(k), len(metrics.get(k) or ())) for k in _INDUCTOR_STAGES.values()}
    built = record["cpp_build"]
    _ACTIVE.append(record)
    try:
        with _set_for_thread("record", record):
            yield
    finally:
        _ACTIVE.remove(record)
        for name, key in _INDUCTOR_STAGES.items():
            runs, n = before[key]
            now = metrics.get(key) or []
            record[name] += sum(now[n:] if now is runs else now)  # (a list Dynamo's reset replaced: all of it)
        record["load"] = max(0.0, record["load"] - (record["cpp_build"] - built))


# -- how many kernels a compile makes ----------------------------------------------------------------------------------
@contextlib.contextmanager
def at_most_kernels(n: int):
    """Inside: a compile of this thread whose Python wrapper module calls more than `n` C++ kernels stops before its
    kernels are built (an exception out of Inductor's compile) and the list yielded becomes non-empty; the caller
    compiles again another way (executors/inductor_options.py: the C++ wrapper, one build for all of them)."""
    graph = compat.graph_lowering()
    if getattr(graph.save_output_code, "jitcore_original", None) is None:
        original = graph.save_output_code  # (None: a hook Inductor leaves for its tests)

        def save_output_code(code: str):
            limit = getattr(_OWN, "kernel_limit", None)
            if limit is not None and code.count("async_compile.cpp_pybinding(") > limit[0]:
                limit[1].append(True)
                raise RuntimeError(f"more than {limit[0]} C++ kernels")
            if original is not None:
                original(code)

        save_output_code.jitcore_original = original or _no_hook
        graph.save_output_code = save_output_code
    over: list = []
    with _set_for_thread("kernel_limit", (n, over)):
        yield over


def _no_hook(code: str):
    return None


# -- precompiled headers -------------------------------------------------------------------------------------------
# Inductor builds a precompiled header (~150 MB, a few seconds of g++) the first time a machine compiles with a given
# compiler and flags, right before the region's own compile, which then takes half as long. jitcore's compiles
# instead ask for it in a thread: when Inductor finds it on disk, the compile uses it; when it must be built, the
# region compiles without it at once while the thread builds it, at the lowest priority (on a core nothing else
# needs), for the compiles that follow.
_HEADERS: dict = {}  # (header, command line, options) -> [thread, found (None until known), path]
HEADER_NICENESS = 19  # the priority of a header's build in the background (a benchmark's warm-up waiting for it: 0)
# how long a process waits at its exit for a header still being built (seconds; JITCORE_HEADER_EXIT_WAIT): at the
# lowest priority a busy machine may starve the build for minutes, so past this the process exits and the compiler
# goes on alone (it writes the header for the next process, or the next process builds it)
HEADER_EXIT_WAIT_S = 30.0
_OWN = threading.local()  # .compiling: this thread runs one of jitcore's compiles (own_compile)
_HEADERS_LOCK = threading.Lock()


@contextlib.contextmanager
def own_compile():
    """Marks a compile as jitcore's: the precompiled headers it asks for are built in the background when missing
    (torch.compile's compiles in the same process keep Inductor's own behaviour)."""
    with _set_for_thread("compiling", True):
        yield


@contextlib.contextmanager
def _set_for_thread(name: str, value):
    """Inside: this thread's `_OWN.<name>` is value (what it was before, after)."""
    before = getattr(_OWN, name, None)
    setattr(_OWN, name, value)
    try:
        yield
    finally:
        setattr(_OWN, name, before)


def _build_headers_in_background(codecache):
    """Puts header_builds_in_background in place of Inductor's _precompile_header (once per process)."""
    build = getattr(codecache, "_precompile_header", None)
    worker = getattr(codecache, "_worker_compile_cpp", None)
    if build is None or worker is None or getattr(build, "jitcore_original", None) is not None:
        return

    def precompiled_header(header, hashable_cmd_line, **command):
        if not getattr(_OWN, "compiling", False):
            return build(header, hashable_cmd_line, **command)
        header = _with_kernel_prefix(codecache, header)
        return header_builds_in_background(build, header, hashable_cmd_line, command)

    def worker_compile(lock_path, builders):
        if getattr(_OWN, "header_entry", None) is not None:  # (the header's build: is it on disk already?)
            header_on_disk(all(os.path.exists(b.get_target_file_path()) for b in builders))
        return worker(lock_path, builders)

    precompiled_header.jitcore_original = build
    codecache._precompile_header = precompiled_header
    codecache._worker_compile_cpp = worker_compile


def _with_kernel_prefix(codecache, header: str) -> str:
    """The header precompiled for a C++ wrapper module: Inductor's wrapper header and its kernels' prefix header
    together. A module holds the region's wrapper and its kernels, and the kernels include the prefix header (ATen's
    vector types: most of what the compiler parses); Inductor precompiles only the wrapper header, so every build
    parsed the prefix again (the 1024x1024 chain's build: 2.6 s against torch.compile's 0.8 s for the same kernel,
    whose build has the prefix precompiled). The combined header is a file beside Inductor's precompiled headers."""
    wrapper, prefix = getattr(codecache, "_get_cpp_wrapper_header", None), getattr(
        codecache, "_get_cpp_prefix_header", None)
    folder = getattr(codecache, "_HEADER_DIR", None)
    if wrapper is None or prefix is None or folder is None or header != wrapper("cpu") or not prefix("cpu"):
        return header
    text = "".join(f"#include <{h}>\n" for h in (header, prefix("cpu")))
    path = os.path.join(folder, "jitcore", f"cpp_wrapper_and_prefix_{len(text)}.h")
    if not os.path.exists(path) or _read(path) != text:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def header_on_disk(found: bool):
    """Said by the thread of a header's build once it knows whether the header is on disk (a compile waits for it)."""
    entry = getattr(_OWN, "header_entry", None)
    if entry is not None and entry[1] is None:
        entry[1] = found
        entry[3].set()


def header_builds_in_background(build, header, hashable_cmd_line, command):
    """The precompiled header's path when it is on disk (Inductor's build of it finds it there and returns), or
    None -- compile without it -- while a thread builds it. Inductor's own function runs in that thread; it first
    preprocesses the header (a fraction of a second, to key the build by the headers' contents), then says
    (header_on_disk, from its call of Inductor's _worker_compile_cpp) whether the header is already built."""
    key = (header, hashable_cmd_line, repr(sorted(command.items())))
    with _HEADERS_LOCK:
        entry = _HEADERS.get(key)
        if entry is None:
            entry = _HEADERS[key] = [None, None, None, threading.Event()]

            def run():
                _OWN.header_entry = entry
                with contextlib.suppress(Exception):  # (Linux: a thread's own priority, which its compiler inherits)
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HEADER_NICENESS)
                try:
                    entry[2] = build(header, hashable_cmd_line, **command)
                except Exception:  # (a header that cannot be built: compiles go on without it, as they do now)
                    entry[2] = None
                finally:
                    entry[3].set()

            if not _HEADERS_AT_EXIT:
                _HEADERS_AT_EXIT.append(atexit.register(_finish_headers_at_exit))
            entry[0] = threading.Thread(target=run, name="jitcore-header", daemon=True)  # (joined at exit, bounded)
            entry[0].start()
    entry[3].wait()  # known: on disk, or being built (or the thread's call returned: Inductor's cached answer)
    if entry[1] is False:
        return entry[2] if not entry[0].is_alive() else None
    entry[0].join()  # (on disk: Inductor's function returns as soon as it has checked; or it has returned)
    return entry[2]


_HEADERS_AT_EXIT: list = []  # [the exit handler], once registered


def _finish_headers_at_exit():
    """At exit: the headers still being built get HEADER_EXIT_WAIT_S in all to finish (for the next process)."""
    deadline = time.monotonic() + float(os.environ.get("JITCORE_HEADER_EXIT_WAIT", HEADER_EXIT_WAIT_S))
    for entry in list(_HEADERS.values()):
        if entry[0] is not None and entry[0].is_alive():
            entry[0].join(max(0.0, deadline - time.monotonic()))


# -- C++ builds in the background ----------------------------------------------------------------------------------
# A CPU region's compile ends with one compiler run (its C++ wrapper module, seconds), after Inductor's Python work.
# A compile made ahead of the region's first run (executors/ahead.py) hands that build to a thread (the compiler is a
# subprocess: it runs beside whatever Python does next, the next region's compile included) and returns at once with a
# PendingEntry where the module's entry function goes; the region's first run awaits it (CompiledRegion).
_BUILD_POOL: list = []  # [ThreadPoolExecutor], made on first use


class PendingEntry:
    """The entry function of a C++ wrapper module still being built: `resolve()` waits for the build and loads the
    module (raising what the build raised); a call before that resolves first."""

    def __init__(self, future):
        self._future, self.fn = future, None

    def resolve(self):
        if self.fn is None:
            self.fn = self._future()
        return self.fn

    def __call__(self, *args):
        return self.resolve()(*args)


@contextlib.contextmanager
def builds_in_background(pending: list):
    """Inside: the C++ wrapper modules Inductor builds for this thread's compiles are built in a background thread;
    each compile gets a PendingEntry (appended to `pending`) in place of the module's entry function."""
    _defer_wrapper_builds()
    with _set_for_thread("pending", pending):
        yield


def _defer_wrapper_builds():
    """Puts a deferring load_pybinding on Inductor's CppWrapperCodeCache, and a deferring wait for kernels on its
    AsyncCompile (once per process)."""
    _defer_kernel_waits()
    cls = compat.wrapper_code_cache()
    if getattr(cls.load_pybinding, "jitcore_original", None) is not None:
        return
    original = cls.load_pybinding

    def load_pybinding(*args, **kwargs):
        pending = getattr(_OWN, "pending", None)
        if pending is None or kwargs.get("submit_fn") is not None:
            return original(*args, **kwargs)
        record = getattr(_OWN, "record", None)

        def submit(work):
            return _build_pool().submit(_with_record, record, work)

        entry = PendingEntry(cls.load_pybinding_async(*args, submit_fn=submit, **kwargs))
        pending.append(entry)
        return entry

    load_pybinding.jitcore_original = original
    cls.load_pybinding = load_pybinding  # (a plain function on the class: Inductor's module calls it on the class)


def _defer_kernel_waits():
    """A region with the Python wrapper (few kernels: executors/inductor_options.py) has its kernels built in
    Inductor's compile threads, and its module waits for them as it loads (AsyncCompile.wait), so its compile
    returned after its builds: a training step's forward region built alone before its backward region's compile
    began (the MLP: 0.8 s of the forward's build, then the backward's). Inside builds_in_background the wait is
    left to a PendingEntry instead: the module loads with the kernels' futures where the kernels go, and the
    region's first call (CompiledRegion's resolve) waits for them and puts the kernels there."""
    cls = compat.async_compile()
    original = getattr(cls, "_wait_futures", None)
    if original is None or getattr(original, "jitcore_original", None) is not None:
        return  # (an Inductor without it: its modules wait as they load)
    kinds = compat.kernel_future_types()

    def wait_futures(self, scope):
        pending = getattr(_OWN, "pending", None)
        if pending is None or not any(isinstance(v, kinds) for v in scope.values()):
            return original(self, scope)
        pending.append(PendingEntry(lambda: original(self, scope) or _kernels_built))
        return None

    wait_futures.jitcore_original = original
    cls._wait_futures = wait_futures


def _kernels_built(*args):
    """What a PendingEntry of a module's kernels resolves to (the kernels are then in the module): not to be called."""
    raise TypeError("a module's kernels, waited for: not a function to call")


def _with_record(record, work):
    with _set_for_thread("record", record):
        return work()


def _build_pool():
    if not _BUILD_POOL:
        from concurrent.futures import ThreadPoolExecutor

        # (threads that only wait for compiler subprocesses; concurrent.futures joins them at exit, after the
        # builds in flight end)
        _BUILD_POOL.append(ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 1)), thread_name_prefix="jitcore-build"))
    return _BUILD_POOL[0]


def wait_for_background_work():
    """Wait until the compiler work this module started in threads is done: the instruction-set checks, the
    precompiled headers' builds, the C++ builds of regions compiled ahead (a benchmark measuring a warm process)."""
    cpu_compiler_ready()
    for entry in list(_HEADERS.values()):
        if entry[0] is not None:
            entry[0].join()
    if _BUILD_POOL:
        _BUILD_POOL[0].submit(lambda: None).result()  # (not a full drain: a pending build is awaited by its region)
