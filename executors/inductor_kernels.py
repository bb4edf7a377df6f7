"""Executors: the compiled code of Inductor's regions as data, for packages (jitcore/packages.py).

`export_variant` turns one compiled variant of a region (what `torch._inductor.compile` returned for it) into a
record: the wrapper module Inductor generated, as text, and the shared library of each of its C++ kernels, as bytes.
`load_variant` makes a record callable again in another process without compiling and without importing Inductor:
the wrapper's source runs with its imports of Inductor's modules replaced by what it uses of them (an object that
hands out the packaged kernels in the order the wrapper asks for them, each checked against the digest of its C++
source; the extern kernels as the torch functions they are), and each library is loaded as the Python extension it
is. `install` files the records of a package by region text; the inductor executor takes them when it makes a
region of that text (`take`), so a loaded package's first call compiles nothing. The same records make the cache on
disk (`store`, `stored`): every variant compiled is written under its region text (with the versions, the machine,
Inductor's configuration and the compile options in the key), and a process that makes a region of the same text
loads its variants instead of compiling them (JITCORE_CACHE_DIR, default ~/.cache/jitcore; JITCORE_REGION_CACHE=0
turns it off).

Only what is known to round-trip is recorded: CPU C++ kernels (Triton kernels on a GPU, templates, wrappers with
constants or in-place inputs are left out: such a variant compiles again at its first run after a load). The
kernels were built for the CPU, the compiler flags and the thread count of the saving process: `machine()` says
which, and a package made on another machine compiles again instead of loading them.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import platform
import re
import sys
import warnings
from pathlib import Path

import torch

from executors import inductor_options, regions
from executors.inductor_options import GRAPH_REWRITES
from jitcore import compat
from jitcore.runtime.disk_cache import cache_root, write_atomically

_KERNEL_LINE = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_KERNEL_SOURCE = re.compile(r"async_compile\.cpp_pybinding\((\[.*?\]), r'''(.*?)'''\)", re.S)
_OTHER_COMPILE = re.compile(r"async_compile\.(?!cpp_pybinding\(|wait\()")
_INDUCTOR_IMPORT = re.compile(r"^from (torch\._inductor[\w.]*) import (\w+)(?: as (\w+))?$", re.M)
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)")
_ARGS_LINE = re.compile(r"^        (.*) = args$", re.M)
_CPP_WRAPPER = re.compile(r"^inductor_entry = CppWrapperCodeCache\.load_pybinding\(", re.M)
_CPP_ARITY = re.compile(r"steal_from_raw_handles_to_raii_handles\(input_handles, (\d+)\)")

PACKAGED: dict = {}  # region text -> [loaded variant records] (installed by a package load, taken by compile_region)
LOADING = [False]  # a package load is restoring its entries: its regions need no compiler (see `loading`)


@contextlib.contextmanager
def loading():
    """While a package's entries are restored: the inductor executor neither imports Inductor (seconds) nor starts
    its compiler's checks; a region the package lacks does both when it compiles."""
    LOADING[0] = True
    try:
        yield
    finally:
        LOADING[0] = False


def machine() -> dict:
    """What the packaged kernels were built for: the CPU (architecture and instruction-set flags) and the number of
    threads the generated code was specialized to."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1] for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]
    return {"arch": platform.machine(), "cpu_flags": digest, "threads": torch.get_num_threads()}


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- export -------------------------------------------------------------------------------------------------------
def _compiled_graph(run):
    """The CompiledFxGraph inside what torch._inductor.compile / compile_fx returned, or None."""
    for _ in range(8):
        if type(run).__name__ == compat.compiled_graph_type_name():
            return run
        run = getattr(run, "__wrapped__", None)
        if run is None:
            return None
    return None


def _extern_paths(source: str) -> dict | None:
    """extern_kernels.<name> the wrapper calls -> "torch.<name>" where it is that torch function; None when one is
    not (it would need Inductor at load: the variant is not recorded)."""
    names = set(_EXTERN.findall(source))
    if not names:
        return {}
    extern_kernels = compat.extern_kernels()  # (saving: Inductor compiled the wrapper, it is loaded)
    out = {}
    for name in names:
        fn = getattr(extern_kernels, name, None)
        if fn is None or getattr(torch, name, None) is not fn:
            return None
        out[name] = f"torch.{name}"
    return out


def export_variant(run, n_args: int) -> dict | None:
    """A record of one compiled variant (`run`, called with `n_args` arguments), or None when it cannot be
    recorded faithfully."""
    graph = _compiled_graph(run)
    if graph is None or graph.current_callable is None or graph.mutated_inputs or graph.constants or \
            getattr(graph, "torchbind_constants", None) or getattr(graph, "partition_maps", None):
        return None
    source = graph.source_code
    if not source or _OTHER_COMPILE.search(source):
        return None
    if _CPP_WRAPPER.search(source):
        return _export_cpp_wrapper(graph, source, n_args)
    unpack = _ARGS_LINE.search(source)  # (AOTAutograd may have dropped duplicated inputs: then the arity differs)
    if unpack is None or len([a for a in unpack.group(1).split(",") if a.strip()]) != n_args:
        return None
    externs = _extern_paths(source)
    if externs is None:
        return None
    namespace = graph.current_callable.__globals__
    kernels = []
    for (name, kind), (_, code) in zip(_KERNEL_LINE.findall(source), _KERNEL_SOURCE.findall(source)):
        fn = namespace.get(name)
        library = getattr(getattr(fn, "__self__", None), "__file__", None)
        if kind != "cpp_pybinding" or not library or not library.endswith(".so"):
            return None
        kernels.append({"name": name, "digest": source_digest(code), "library": Path(library).read_bytes()})
    if len(kernels) != len(_KERNEL_LINE.findall(source)):
        return None
    return {"source": source, "kernels": kernels, "externs": externs}


def _export_cpp_wrapper(graph, source: str, n_args: int) -> dict | None:
    """The record of a variant compiled with Inductor's C++ wrapper (the CPU regions: the whole program, its
    kernels and the code calling them, is one C++ source and one library): the Python module that loads it, as
    text, and that library, named as its entry function (Inductor's CppWrapperCodeCache)."""
    namespace = getattr(graph.current_callable, "__globals__", None) or {}
    main, entry = namespace.get("cpp_wrapper_src"), namespace.get("inductor_entry")
    library = getattr(getattr(entry, "__self__", None), "__file__", None)
    arity = _CPP_ARITY.search(main or "")
    if not isinstance(main, str) or not library or not library.endswith(".so") or arity is None or \
            int(arity.group(1)) != n_args or _EXTERN.search(source):
        return None
    return {"source": source, "externs": {}, "kernels": [
        {"name": "inductor_entry", "entry": entry.__name__, "digest": source_digest(main),
         "library": Path(library).read_bytes()}]}


# -- load ---------------------------------------------------------------------------------------------------------
class _Lazy:
    """A name the wrapper imports from Inductor and calls only in unusual configurations: imported at first use."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args, **kwargs):
        # (imported at the first call, not at load: Inductor takes seconds to import and most wrappers never call it)
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


class _Externs:
    """extern_kernels as the torch functions the wrapper calls."""

    def __init__(self, paths: dict):
        for name, path in paths.items():
            setattr(self, name, getattr(torch, path.split(".", 1)[1]))


class _PackagedKernels:
    """Stands for Inductor's AsyncCompile in a loaded wrapper: each cpp_pybinding call gets the next packaged
    kernel, whose C++ source digest must match."""

    def __init__(self, kernels: list):
        self.kernels = list(kernels)
        self.at = 0

    def __call__(self):
        return self

    def cpp_pybinding(self, argtypes, source_code):
        digest, fn = self.kernels[self.at]
        if digest != source_digest(source_code):
            raise ValueError("a packaged kernel does not match the wrapper's C++ source")
        self.at += 1
        return fn

    def wait(self, scope):
        if self.at != len(self.kernels):
            raise ValueError("the wrapper asked for fewer kernels than the package has")


class _PackagedWrapper:
    """Stands for Inductor's CppWrapperCodeCache in a loaded C++-wrapper module: load_pybinding gets the packaged
    library's entry function, whose C++ source digest must match."""

    def __init__(self, kernels: list):
        self.kernels = list(kernels)

    def load_pybinding(self, argtypes=None, main_code: str = "", **kwargs):
        if len(self.kernels) != 1 or self.kernels[0][0] != source_digest(main_code):
            raise ValueError("a packaged C++ wrapper does not match the module's C++ source")
        return self.kernels[0][1]


def load_library(path: str, digest: str, entry: str = "kernel"):
    """The `entry` function of a packaged C++ library (a Python extension module named as that function: `kernel`
    for a kernel, `inductor_entry_cpp` for a C++ wrapper)."""
    pointer = compat.inductor_tensor_pointer()
    if pointer is not None:  # (the kernels read tensors' data through this, as when Inductor loads them)
        os.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = str(pointer)
    name = f"jitcore_kernel_{digest[:40]}.{entry}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return getattr(module, entry)


def load_variant(record: dict, libraries: dict, single: bool):
    """run(*args) for a variant record; `libraries`: kernel digest -> path of its shared library on disk."""
    kernels = [(k["digest"], load_library(libraries[k["digest"]], k["digest"], k.get("entry", "kernel")))
               for k in record["kernels"]]
    shims = {"AsyncCompile": _PackagedKernels(kernels), "extern_kernels": _Externs(record["externs"]),
             "CppWrapperCodeCache": _PackagedWrapper(kernels)}

    def replace(m):
        module, name, alias = m.group(1), m.group(2), m.group(3) or m.group(2)
        if name in shims:
            return f"{alias} = __jitcore_shims__[{name!r}]"
        return f"{alias} = __jitcore_lazy__({module!r}, {name!r})"

    source = _INDUCTOR_IMPORT.sub(replace, record["source"])
    namespace = {"__name__": f"jitcore_region_{source_digest(record['source'])[:16]}", "__builtins__": __builtins__,
                 "__jitcore_shims__": shims, "__jitcore_lazy__": _Lazy}
    exec(compile(source, f"<packaged Inductor region {namespace['__name__']}>", "exec"), namespace)
    call = namespace["call"]  # (Inductor's wrapper: call(list of arguments), which it empties on entry)
    if single:
        def run(*args):
            return call(list(args))[0]

        run.boxed = lambda box: call(box)[0]
    else:
        def run(*args):
            return tuple(call(list(args)))

        run.boxed = lambda box: tuple(call(box))
    return run


# -- the cache on disk: compiled variants by region text, across processes -------------------------------------------
_DISK_KEY: list = []  # (once per process) what else the compiled code depends on: versions, machine, options
_WRITE_FAILED: list = []  # the first failure to write to it, said once per process


def cache_dir() -> Path | None:
    """The folder of the compiled-region cache ($JITCORE_CACHE_DIR/inductor-regions, by default
    ~/.cache/jitcore/inductor-regions), or None when JITCORE_REGION_CACHE=0 turns it off."""
    root = cache_root()
    return None if root is None else root / "inductor-regions"


def _lowering_digest() -> str:
    """A digest of the code that turns a region into what Inductor compiles (graph building, rewrites, options,
    compat's decompositions and config): a region compiled by other code is compiled again, not reused."""
    from executors import inductorex  # (lazy: inductorex imports this module)

    h = hashlib.sha256()
    for module in (inductorex, inductor_options, regions, compat, sys.modules[__name__]):
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()[:16]


def _disk_folder(text: str, options: dict) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    if not _DISK_KEY:
        from importlib import metadata

        try:
            own = metadata.version("jitcore")
        except metadata.PackageNotFoundError:
            own = "unknown"
        own += " " + _lowering_digest()  # (an editable install keeps its version while this code changes)
        # (only where regions compile: Inductor is imported)
        config = hashlib.sha256(repr(compat.inductor_config_digest_items()).encode()).hexdigest()
        _DISK_KEY.append(repr((own, torch.__version__, sys.version_info[:2], machine(), config, GRAPH_REWRITES)))
    key = source_digest(f"{_DISK_KEY[0]}\n{sorted(options.items())!r}\n{text}")
    return folder / key[:2] / key


def store(text: str, options: dict, variant: dict):
    """Write one compiled variant (export_variant's record, with "strides" and "guard") to the cache on disk. A
    failure (a full disk, a folder without write access) is said once per process and otherwise ignored: the cache
    is an optimization, the variant is already in use in this process."""
    folder = _disk_folder(text, options)
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        kernels = []
        for k in variant["kernels"]:
            name = f"kernel-{k['digest'][:32]}.so"
            if not (folder / name).exists():
                write_atomically(folder / name, k["library"])
            kernels.append({**{n: v for n, v in k.items() if n != "library"}, "file": name})
        record = {**variant, "kernels": kernels}
        buf = io.BytesIO()
        torch.save(record, buf)
        write_atomically(folder / f"variant-{source_digest(repr((record['strides'], record['guard'])))[:24]}.pt",
               buf.getvalue())
    except OSError as e:
        if not _WRITE_FAILED:
            _WRITE_FAILED.append(e)
            warnings.warn(f"jitcore: a compiled fusion region could not be written to the cache on disk ({e}); "
                          "later processes compile it again (JITCORE_CACHE_DIR picks the folder, "
                          "JITCORE_REGION_CACHE=0 turns the cache off)", stacklevel=2)


def stored(text: str, options: dict, single: bool, dynamic: bool):
    """(region record, library paths) of the variants on disk for this region text, or None."""
    folder = _disk_folder(text, options)
    if folder is None or not folder.is_dir():
        return None
    variants = []
    for path in sorted(folder.glob("variant-*.pt")):
        try:
            variants.append(torch.load(path, weights_only=False))
        except Exception:  # (a file cut short by a crash: that variant compiles again)
            continue
    if not variants:
        return None
    libraries = {k["digest"]: str(folder / k["file"]) for v in variants for k in v.get("kernels", ())}
    return {"text": text, "single": single, "dynamic": dynamic, "variants": variants}, libraries


def install(regions: list, folder: Path):
    """File a package's region records (jitcore/packages.py) for the regions compile_region makes next."""
    for region in regions:
        libraries = {k["digest"]: str(folder / k["file"]) for v in region["variants"] for k in v.get("kernels", ())}
        PACKAGED.setdefault(region["text"], []).append((region, libraries))


def take(text: str):
    """(region record, library paths) filed for this region text, or None (each is taken once)."""
    found = PACKAGED.get(text)
    if not found:
        return None
    record = found.pop()
    if not found:
        del PACKAGED[text]
    return record


__all__ = ["LOADING", "PACKAGED", "cache_dir", "export_variant", "install", "load_library", "load_variant", "loading",
           "machine", "store", "stored", "take"]
