"""The C++ compiler behind Inductor's CPU regions (executors/cpu_compiler.py): a precompiled header that is on disk is
used; one that is not is built in a thread while the compile goes on without it; a cold process's first region
compiles, runs like eager, and leaves the header built for the next process."""
import getpass
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from executors import cpu_compiler
from jitcore import compat


def _fake_build(found: bool, seconds: float, calls: list, fail: bool = False):
    """Stands for Inductor's _precompile_header: preprocesses, says whether the header is on disk, builds it if not."""
    def build(header, cmd, **options):
        calls.append((header, cmd, options))
        cpu_compiler.header_on_disk(found)
        if not found:
            time.sleep(seconds)
        if fail:
            raise RuntimeError("cannot build")
        return f"/headers/{header}.h"
    return build


def test_a_header_on_disk_is_used():
    calls = []
    build = _fake_build(True, 0, calls)
    assert cpu_compiler.header_builds_in_background(build, "on_disk", "g++ -O3", {"a": 1}) == "/headers/on_disk.h"
    assert cpu_compiler.header_builds_in_background(build, "on_disk", "g++ -O3", {"a": 1}) == "/headers/on_disk.h"
    assert len(calls) == 1  # (asked once per process, as Inductor's own function is cached)


def test_a_missing_header_is_built_in_the_background_and_used_once_built():
    calls = []
    build = _fake_build(False, 0.5, calls)
    start = time.perf_counter()
    assert cpu_compiler.header_builds_in_background(build, "missing", "g++ -O3", {}) is None  # compile without it
    assert time.perf_counter() - start < 0.4  # (not waiting for the build)
    assert cpu_compiler.header_builds_in_background(build, "missing", "g++ -O3", {}) is None  # still building
    builders = [t for t in threading.enumerate() if t.name == "jitcore-header"]
    for t in builders:
        t.join()
    assert cpu_compiler.header_builds_in_background(build, "missing", "g++ -O3", {}) == "/headers/missing.h"
    assert len(calls) == 1
    # another command line is another header
    assert cpu_compiler.header_builds_in_background(_fake_build(True, 0, calls), "missing", "g++ -O1", {}) == \
        "/headers/missing.h"
    assert len(calls) == 2


def test_a_header_that_cannot_be_built_leaves_compiles_without_it():
    calls = []
    build = _fake_build(False, 0, calls, fail=True)
    assert cpu_compiler.header_builds_in_background(build, "broken", "g++", {}) is None
    for t in [t for t in threading.enumerate() if t.name == "jitcore-header"]:
        t.join()
    assert cpu_compiler.header_builds_in_background(build, "broken", "g++", {}) is None


COLD = textwrap.dedent("""
    import torch, jitcore
    from executors import inductor_ex, torch_ex
    torch.set_num_threads(1)
    def f(a, b):
        return (torch.tanh(a * b + 1.0) * torch.sigmoid(a - b)).sum(-1)
    a, b = torch.randn(64, 256), torch.randn(64, 256)
    jf = jitcore.jit(f, executors=[inductor_ex, torch_ex])
    torch.testing.assert_close(jf(a, b), f(a, b))
    print("OK", sum(1 for line in str(jitcore.last_traces(jf)[-1]).splitlines() if "inductor_fusion" in line))
""")


@pytest.mark.skipif(sys.platform != "linux", reason="Inductor's precompiled headers are built with g++ on Linux")
def test_a_cold_process_compiles_its_first_region_and_leaves_the_header_built(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "JITCORE_REGION_CACHE": "0", "OMP_NUM_THREADS": "1", "JITCORE_HEADER_EXIT_WAIT": "900"}
    proc = subprocess.run([sys.executable, "-c", COLD], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    assert int(proc.stdout.split("OK")[1]) >= 1  # (the function ran as a compiled region)
    assert "runs eagerly" not in proc.stderr, proc.stderr[-3000:]
    headers = list((tmp_path / f"torchinductor_{getpass.getuser()}" / "precompiled_headers").glob("*.gch"))
    assert headers, list(tmp_path.rglob("*"))[:50]  # built before the process ended, for the next one


def test_isa_checks_stop_at_the_first_set_that_builds(monkeypatch):
    checked = []
    monkeypatch.setattr(cpu_compiler, "_check_isa", lambda isa: checked.append(isa) or isa in ("vnni", "avx2"))
    monkeypatch.setattr(cpu_compiler, "_FIRST_VALID", [])
    cpu_compiler._check_in_order(["amx", "vnni", "avx512", "avx2"])  # (Inductor's order of preference)
    assert checked == ["amx", "vnni"] and cpu_compiler._FIRST_VALID == ["vnni"]
    monkeypatch.setattr(cpu_compiler, "_FIRST_VALID", [])
    cpu_compiler._check_in_order(["amx"])
    assert cpu_compiler._FIRST_VALID == [None]


def test_inductor_picks_the_set_it_picks_after_checking_them_all(monkeypatch):
    cpu_vec_isa = compat.inductor_cpp_modules()[2]
    cpu_compiler.cpu_compiler_ready()
    original = getattr(cpu_vec_isa.valid_vec_isa_list, "jitcore_original", None)
    if original is None:
        pytest.skip("the checks are Inductor's own on this platform")
    full = original()
    assert cpu_vec_isa.pick_vec_isa() == (full[0] if full else cpu_vec_isa.invalid_vec_isa)
    if any("avx2" in str(isa) for isa in full):  # a setting that picks from the whole list gets the whole list
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
        assert cpu_vec_isa.valid_vec_isa_list() == full
        assert "avx2" in str(cpu_vec_isa.pick_vec_isa())


SLOW_HEADER = textwrap.dedent("""
    import time
    from executors import cpu_compiler

    def build(header, cmd, **options):  # (a header build a busy machine starves)
        cpu_compiler.header_on_disk(False)
        time.sleep(120)
        return "/headers/slow.h"

    assert cpu_compiler.header_builds_in_background(build, "slow", "g++", {}) is None
    print("compiled without it")
""")


def test_a_process_exits_without_waiting_long_for_a_header_still_being_built():
    """A header build still running at exit (its compiler at the lowest priority, starved on a busy machine) is
    waited for HEADER_EXIT_WAIT_S at most: the process exits and the build goes on without it."""
    env = {**os.environ, "JITCORE_HEADER_EXIT_WAIT": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", SLOW_HEADER], env=env, capture_output=True, text=True, timeout=100,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0 and "compiled without it" in proc.stdout, proc.stderr[-2000:]
    assert time.perf_counter() - start < 60
