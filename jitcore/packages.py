"""Packages: save what a jitted function compiled and load it in a new process (`jitcore.save`, `jitcore.load`).

A package is a folder:
- `manifest.json`: the package format, the versions of jitcore, torch and Python, the jit options (executor names,
  cache mode, keep_inputs, rematerialize, saved_tensor_hooks by module and qualified name), the function's qualified
  name and signature, a digest of the code of every user function the interpreter entered while tracing (the function
  itself and what it called, from user files and third-party packages; not torch's), and one record per cache entry;
- `entry<N>.pt`: the entry's input description (jitcore/guards/input_storage.py: tensor metadata, kept values, the
  other arguments, the grad mode and autocast regions of the call);
- `entry<N>.py`: the entry's programs as printed (prologue, forward, backward, epilogue), for reading;
- `regions.pt` and `kernel-<digest>.so`: the compiled fusion regions the programs call, as their executor records
  them (executors/inductor_kernels.py: Inductor's generated wrapper and the shared library of each C++ kernel), with
  the machine they were built for in the manifest;
- `layouts.pt`: the answers torch's meta kernels gave while the entries were traced (jitcore/frontend/layouts.py
  META_RESULTS), so the load's tracing does not run them again;
- `DIGEST`: a SHA-256 over the other files, which load verifies.

Loading checks, before anything runs, that the package was written for this function (name, signature, the digests
of the code it entered, unless `check_source=False`), by these versions of jitcore and Python, with the jit options
asked for (its own when none are given) and executors that are available here; any difference is an error naming it.
A package written under another torch release loads with a warning naming both: what torch computed or compiled for
it (layouts, kernels) is not used, its entries are traced again and their regions compile again. It then rebuilds
each cache entry from its input description: the call is traced, transformed and claimed under the entry's grad mode
and autocast, and cached, without running it (no side effect happens at load); the fusion regions it makes take the
packaged compiled code (kernels built on another machine compile again, with a warning).
A later call that satisfies an entry's guards runs with no interpretation; others trace as usual. Modules, parameters,
globals and closures are never stored: the entries bind them through the function or module given to load.

An entry whose program depends on tensor values (data guards, nonzero, ...) is restored only if its input values
were kept (`jit(..., keep_inputs="all")`); otherwise load skips it with a warning and the first call that needs it
traces it.

Safety: the `.pt` files are unpickled (torch.load with weights_only=False) and the kernels' shared libraries are
loaded, both of which can run code: load packages you trust. The digest is an integrity check against corruption and
accidental edits, not a security boundary: whoever can edit the files can recompute it.
"""
from __future__ import annotations

import gc
import hashlib
import importlib
import inspect
import json
import linecache
import sys
import types
import warnings
from importlib import metadata
from pathlib import Path

import torch
from looseversion import LooseVersion

from executors import inductor_kernels
from jitcore.api import JitFunction, JitModule, jit
from jitcore.debug.reproduce import final_traces, programs_text, write_repro
from jitcore.errors import JitError
from jitcore.frontend import layouts
from jitcore.pipeline import CompileOptions, resolve_executors

FORMAT = 1
_DIGEST = "DIGEST"
_MANIFEST = "manifest.json"
_REGIONS = "regions.pt"
_LAYOUTS = "layouts.pt"


class PackageError(JitError):
    """Raised by jitcore.load for a package that does not belong to this function, these versions or these options,
    or that was altered; the message names the difference.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> jf = jitcore.jit(torch.nn.Linear(2, 2))
    >>> _ = jf(torch.ones(1, 2)); _ = jitcore.save(jf, folder)
    >>> try:
    ...     jitcore.load(folder, torch.nn.ReLU())
    ... except jitcore.PackageError as e:
    ...     print(e)
    the package was saved for torch.nn.modules.linear.Linear, not torch.nn.modules.activation.ReLU
    """


# -- what a package records of the function and the environment ---------------------------------------------------
def _versions() -> dict:
    try:
        own = metadata.version("jitcore")
    except metadata.PackageNotFoundError:
        own = "unknown"
    return {"jitcore": own, "torch": torch.__version__, "python": ".".join(map(str, sys.version_info[:3]))}


def _target(fn):
    """(the callable whose signature and name identify the function, its qualified name)."""
    if isinstance(fn, (JitFunction, JitModule)):
        raise TypeError("pass the original function or module (jitcore.load jits it)")
    if isinstance(fn, torch.nn.Module):
        return type(fn).forward, f"{type(fn).__module__}.{type(fn).__qualname__}"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return fn, f"{getattr(fn, '__module__', '')}.{name}"


def _signature(fn) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(unknown)"


def code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does, without its file name and line numbers (an edit elsewhere in the file
    does not change it): bytecode, names, constants (nested code objects by their digests), argument counts, flags."""
    h = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                 (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)):
        h.update(repr(part).encode())
    for c in code.co_consts:
        h.update((code_digest(c) if isinstance(c, types.CodeType) else repr(c)).encode())
    return h.hexdigest()


def _entered(jfn) -> list:
    """[(file, qualified name, digest)] of the user code the interpreter entered for any of jfn's entries."""
    seen: dict = {}
    for entry in jfn.entries():
        for code in entry.traces[0].entered_code:
            seen[code] = None
    return [(c.co_filename, c.co_qualname, code_digest(c)) for c in seen]


def _nested(tops) -> list:
    """The code objects and every code object nested in their constants."""
    out, stack, seen = [], list(tops), set()
    while stack:
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        out.append(code)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return out


def _live_codes(filename: str) -> list:
    """The code of the functions and methods the loaded modules of this file define (what the interpreter will run:
    no file is read or compiled; empty when no loaded module comes from that file)."""
    tops, seen = [], set()
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) != filename and filename != f"<frozen {name}>":
            continue
        stack = list(vars(module).values())
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, (staticmethod, classmethod)):
                stack.append(obj.__func__)
            elif isinstance(obj, property):
                stack.extend(f for f in (obj.fget, obj.fset, obj.fdel) if f is not None)
            elif isinstance(obj, types.FunctionType):
                if obj.__code__.co_filename == filename:
                    tops.append(obj.__code__)
                if hasattr(obj, "__wrapped__"):
                    stack.append(obj.__wrapped__)
            elif isinstance(obj, type):  # (collections.abc's classes live in _collections_abc: any class)
                stack.extend(vars(obj).values())
    return _nested(tops)


def _codes_in_file(filename: str) -> list:
    """Every code object the source file compiles to (nested ones included): read through linecache (which also
    has the cells of a notebook), else the code of the live functions defined in that file (a file that cannot be
    read, such as `<string>`)."""
    tops = []
    linecache.checkcache(filename)
    source = "".join(linecache.getlines(filename))
    if source:
        try:
            tops.append(compile(source, filename, "exec", dont_inherit=True))
        except (SyntaxError, ValueError):
            pass
    if not tops:
        tops = [f.__code__ for f in gc.get_objects()
                if type(f) is types.FunctionType and f.__code__.co_filename == filename]
    return _nested(tops)


def _source_changes(recorded: list, fn) -> list[str]:
    """What differs between the code the package was traced through and the code here."""
    target, _ = _target(fn)
    live = getattr(getattr(target, "__func__", target), "__code__", None)
    changes, files = [], {}
    for filename, qualname, digest in recorded:
        if filename == "<string>" and qualname.startswith("__create_fn__."):
            continue  # (made by dataclasses from the class at import: there is no source of its own to compare)
        if live is not None and live.co_qualname == qualname and live.co_filename == filename:
            if code_digest(live) != digest:
                changes.append(f"{qualname} ({filename}) was edited")
            continue
        candidates = []
        for where in ("live", "file"):  # the loaded modules' code first; the file compiled only when it lacks it
            if (where, filename) not in files:
                files[where, filename] = _live_codes(filename) if where == "live" else _codes_in_file(filename)
            candidates = [code_digest(c) for c in files[where, filename] if c.co_qualname == qualname]
            if digest in candidates:
                break
        if not candidates:
            changes.append(f"{qualname} is not in {filename} any more (or that code cannot be found)")
        elif digest not in candidates:
            changes.append(f"{qualname} ({filename}) was edited")
    return changes


# -- the digest ---------------------------------------------------------------------------------------------------
def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.name != _DIGEST and p.is_file():
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


# -- save ---------------------------------------------------------------------------------------------------------
def _jitted(jfn) -> JitFunction:
    inner = jfn.__dict__.get("_jfn") if isinstance(jfn, JitModule) else jfn
    if not isinstance(inner, JitFunction):
        raise TypeError(f"jitcore.save takes a function or module made by jitcore.jit, not {type(jfn).__name__}")
    return inner


def _options_record(options: CompileOptions) -> dict:
    return {"executors": [ex.name for ex in options.executors], "cache": options.cache,
            "keep_inputs": options.keep_inputs, "rematerialize": options.rematerialize,
            "saved_tensor_hooks": _hook_names(options.saved_tensor_hooks), "memory_budget": options.memory_budget}


def _hook_names(hooks):
    """jit's saved_tensor_hooks pair as ["module:qualified name", ...] (None without it)."""
    if hooks is None:
        return None
    return [f"{getattr(f, '__module__', '?')}:{getattr(f, '__qualname__', type(f).__name__)}" for f in hooks]


def _hooks_named(names):
    """The pair a package's names stand for, found by import (a lambda or a local function cannot be)."""
    if names is None:
        return None
    found = []
    for name in names:
        module, _, qualname = name.partition(":")
        try:
            obj = importlib.import_module(module)  # (the module the package names: known only when it is loaded)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            raise PackageError(f"the package was saved with saved_tensor_hooks {names}; {name} cannot be imported "
                               "here: pass saved_tensor_hooks= to load") from None
        found.append(obj)
    return tuple(found)


def _compiled_regions(entries) -> list:
    """The records of the compiled fusion regions the entries' programs call (executors that can record theirs:
    `to_record` on the region's callable), each once."""
    records, seen = [], set()
    for entry in entries:
        for trace in final_traces(entry):
            for b in trace.bound_symbols:
                for obj in (b.sym.call_ctx or {}).values():
                    if id(obj) in seen or not hasattr(obj, "to_record"):
                        continue
                    seen.add(id(obj))
                    record = obj.to_record()
                    if record is not None:
                        records.append(record)
    return records


def _meta_results(entries) -> dict:
    """The replays on meta tensors the entries' traces asked (jitcore/frontend/layouts.py META_RESULTS), so a load
    re-traces them without running torch's meta kernels."""
    out = {}
    for entry in entries:
        for key in entry.traces[0].meta_results:
            if key in layouts.META_RESULTS:
                out[key] = layouts.META_RESULTS[key]
    return out


def _save_regions(records: list, folder: Path) -> int:
    """regions.pt (the records, each kernel's library named by file) and one kernel-<digest>.so per kernel."""
    written = set()
    for region in records:
        for variant in region["variants"]:
            for k in variant.get("kernels", ()):
                k["file"] = f"kernel-{k['digest'][:32]}.so"
                if k["file"] not in written:
                    (folder / k["file"]).write_bytes(k.pop("library"))
                    written.add(k["file"])
                k.pop("library", None)
    torch.save({"regions": records}, folder / _REGIONS)
    return len(written)


def save(jfn, path) -> Path:
    """Write every cache entry `jfn` (a function or module made by jitcore.jit) has built to the folder `path`
    (created; an existing package there is replaced). Returns the folder. See the module docstring for what it holds;
    `jitcore.load(path, fn)` reads it back in another process. Parameters are never stored.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> def double(x):
    ...     return x * 2
    >>> jdouble = jitcore.jit(double)
    >>> _ = jdouble(torch.ones(3))
    >>> sorted(p.name for p in jitcore.save(jdouble, folder).iterdir())
    ['DIGEST', 'entry0.pt', 'entry0.py', 'layouts.pt', 'manifest.json']
    """
    inner = _jitted(jfn)
    entries = inner.entries()
    if not entries:
        raise ValueError("this function has not been called yet: there is nothing to save")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # a package written here before (only its own files)
        if old.is_file() and (old.name in (_DIGEST, _MANIFEST, _REGIONS, _LAYOUTS) or
                              old.name.startswith(("entry", "kernel-"))):
            old.unlink()
    target, qualname = _target(inner.fn)
    records = []
    for i, entry in enumerate(entries):
        spec = entry.input_spec
        torch.save({"spec": spec}, folder / f"entry{i}.pt")
        (folder / f"entry{i}.py").write_text(programs_text(entry))
        records.append({"file": f"entry{i}.pt", "programs": f"entry{i}.py",
                        "value_dependent": spec.value_dependent, "dropped": list(spec.dropped)})
    torch.save({"results": _meta_results(entries)}, folder / _LAYOUTS)
    regions = _compiled_regions(entries)
    kernels = _save_regions(regions, folder) if regions else 0
    manifest = {"format": FORMAT, "versions": _versions(), "options": _options_record(inner.options),
                "qualname": qualname, "signature": _signature(target), "sources": _entered(inner),
                "entries": records, "machine": inductor_kernels.machine(),
                "compiled": {"regions": len(regions), "variants": sum(len(r["variants"]) for r in regions),
                             "kernels": kernels}}
    (folder / _MANIFEST).write_text(json.dumps(manifest, indent=1))
    (folder / _DIGEST).write_text(_digest(folder))
    return folder


# -- load ---------------------------------------------------------------------------------------------------------
def _check_versions(saved: dict) -> str | None:
    """Refuses a package of another jitcore or Python; for one written under another torch, returns what to warn
    (its entries are traced again from their input descriptions, as in a new process; what torch itself computed
    or compiled, the fusion regions' kernels and the layout answers, is not used)."""
    here = _versions()
    if LooseVersion(str(saved.get("jitcore"))) != LooseVersion(here["jitcore"]):
        raise PackageError(f"the package was written with jitcore {saved.get('jitcore')}; this is jitcore "
                           f"{here['jitcore']}")
    if saved.get("python", "").split(".")[:2] != here["python"].split(".")[:2]:
        raise PackageError(f"the package was written with Python {saved.get('python')}; this is Python "
                           f"{here['python']}")
    if str(saved.get("torch")) != here["torch"]:
        return (f"jitcore.load: the package was written with torch {saved.get('torch')}; this is torch "
                f"{here['torch']}: its compiled kernels and recorded layouts are not used, its entries are traced "
                "again now and their fusion regions compile again at their first run")
    return None


def _options(saved: dict, jit_options: dict) -> dict:
    """The jit options to load with: the package's, and any the caller gave must equal them."""
    unknown = set(jit_options) - {"executors", "cache", "keep_inputs", "rematerialize", "verify", "saved_tensor_hooks",
                                  "memory_budget"}
    if unknown:
        raise TypeError(f"unknown jit option(s) {', '.join(sorted(unknown))}")
    given = {}
    if "executors" in jit_options:
        given["executors"] = [ex.name for ex in resolve_executors(jit_options["executors"])]
    saved = {"rematerialize": True, "saved_tensor_hooks": None, "memory_budget": None, **saved}  # (older packages)
    if "saved_tensor_hooks" in jit_options:
        given["saved_tensor_hooks"] = _hook_names(jit_options["saved_tensor_hooks"])
    for name in ("cache", "keep_inputs", "rematerialize", "memory_budget"):
        if name in jit_options:
            given[name] = jit_options[name]
    diffs = [f"{k}: the package has {saved[k]!r}, load was given {v!r}" for k, v in given.items() if v != saved[k]]
    if diffs:
        raise PackageError("the package was saved with other jit options (" + "; ".join(diffs) + ")")
    try:
        executors = resolve_executors(saved["executors"])
    except Exception as e:
        raise PackageError(f"an executor of the package is not available here: {e}") from None
    for ex in executors:
        ok, why = ex.is_available() if hasattr(ex, "is_available") else (True, "")
        if not ok:
            raise PackageError(f"the package's executor {ex.name!r} is not available here: {why}")
    return {"executors": executors, "cache": saved["cache"], "keep_inputs": saved["keep_inputs"],
            "rematerialize": saved["rematerialize"], "memory_budget": saved["memory_budget"],
            "saved_tensor_hooks": jit_options.get("saved_tensor_hooks") or _hooks_named(saved["saved_tensor_hooks"]),
            "verify": jit_options.get("verify")}  # (not part of the package: the loaded calls may be checked)


def _load_regions(folder: Path, manifest: dict):
    """Offer the package's compiled regions to the executors (taken when the entries' programs make them), if they
    were built for this machine; else they compile again, with a warning saying why."""
    if not (folder / _REGIONS).exists():
        return
    here, there = inductor_kernels.machine(), manifest.get("machine")
    if here != there:
        differs = ", ".join(f"{k} {there.get(k)!r} here {here[k]!r}" for k in here if there.get(k) != here[k])
        warnings.warn(f"jitcore.load: the package's compiled kernels were built for another machine ({differs}); "
                      "its fusion regions compile again at their first run", stacklevel=3)
        return
    inductor_kernels.install(torch.load(folder / _REGIONS, weights_only=False)["regions"], folder)


def load(path, fn, *, check_source: bool = True, **jit_options):
    """The jitted function (or module) of `fn` with the cache entries of the package at `path` (made by
    jitcore.save from a jitted `fn`, maybe in another process). Checks the package first (see the module
    docstring): a package of another function, edited code (unless check_source=False), other versions, other jit
    options or a changed file is a PackageError naming the difference. Loading unpickles the package's files, which
    can run code: load only packages you trust.

    path: the package's folder; fn: the function or module that was jitted (a module brings its parameters);
    check_source: compare digests of the code of every user function the trace entered; jit_options: as for jit
    (they must be those the package was saved with).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> def double(x):
    ...     return x * 2
    >>> jdouble = jitcore.jit(double)
    >>> _ = jdouble(torch.ones(3)); _ = jitcore.save(jdouble, folder)
    >>> restored = jitcore.load(folder, double)
    >>> restored(torch.ones(3)), jitcore.cache_misses(restored)     # the packaged entry: no trace, no compile
    (tensor([2., 2., 2.]), 0)
    """
    folder = Path(path)
    try:
        recorded = (folder / _DIGEST).read_text().strip()
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise PackageError(f"{folder} is not a jitcore package ({type(e).__name__}: {e})") from None
    if recorded != _digest(folder):
        raise PackageError(f"{folder}: the files do not match the package's digest (changed or corrupted)")
    if manifest.get("format") != FORMAT:
        raise PackageError(f"package format {manifest.get('format')}; this jitcore reads format {FORMAT}")
    other_torch = _check_versions(manifest["versions"])
    target, qualname = _target(fn)
    if manifest["qualname"] != qualname:
        raise PackageError(f"the package was saved for {manifest['qualname']}, not {qualname}")
    if manifest["signature"] != _signature(target):
        raise PackageError(f"the signature of {qualname} changed: the package has {manifest['signature']}, the "
                           f"function here is {_signature(target)}")
    if check_source:
        changes = _source_changes(manifest["sources"], fn)
        if changes:
            raise PackageError("the code the package was traced through changed: " + "; ".join(changes) +
                               " (load with check_source=False to trace against the code as it is now)")
    if other_torch is not None:
        warnings.warn(other_torch, stacklevel=2)
    elif (folder / _LAYOUTS).exists():  # answers keyed by exactly what was asked: used only for the same question
        known = torch.load(folder / _LAYOUTS, weights_only=False)["results"]
        layouts.META_RESULTS.update(list(known.items())[:max(0, layouts.MAX_RESULTS - len(layouts.META_RESULTS))])
    with inductor_kernels.loading():  # (no compiler is warmed up, unless a region is missing from the package)
        if other_torch is None:
            _load_regions(folder, manifest)
        jfn = jit(fn, **_options(manifest["options"], jit_options))
        skipped = _restore_entries(_jitted(jfn), folder, manifest)
    if skipped:
        warnings.warn("jitcore.load: entries not restored (the first call that needs one traces it): " +
                      "; ".join(skipped), stacklevel=2)
    return jfn


def _restore_entries(inner: JitFunction, folder: Path, manifest: dict) -> list:
    """Rebuild each entry of the package from its input description; the ones that cannot be, with why."""
    skipped = []
    for record in manifest["entries"]:
        spec = torch.load(folder / record["file"], weights_only=False)["spec"]
        try:
            args, kwargs = spec.materialize()
        except JitError as e:
            skipped.append(f"{record['file']}: {e}")
            continue
        with spec.modes():
            inner.restore(args, kwargs)
    return skipped




# -- repro: a standalone script for a bug report (jitcore/debug/reproduce.py) ------------------------------------------
def repro(jfn, path, entry: int = -1) -> Path:
    """Write to the folder `path` a standalone script (repro.py) that reproduces the call cache entry `entry` (in
    compile order; the last by default) of `jfn` was compiled for: the call's inputs (inputs.pt, rebuilt from the
    entry's input description: jit with keep_inputs="all" to keep every value), the function (imported by name, or
    its source when it cannot be imported; a module is pickled whole into model.pt), and the programs as printed
    (programs.py). Run it with `python repro.py`. Returns the folder.

    >>> import tempfile
    >>> jf = jitcore.jit(lambda x: x.cos() + 1)
    >>> _ = jf(torch.ones(3))
    >>> sorted(p.name for p in jitcore.repro(jf, tempfile.mkdtemp()).iterdir())
    ['inputs.pt', 'programs.py', 'repro.py']
    """
    inner = _jitted(jfn)
    entries = inner.entries()
    if not entries:
        raise ValueError("this function has not been called yet: there is no call to reproduce")
    return write_repro(inner.fn, _options_record(inner.options), entries[entry], Path(path))


__all__ = ["PackageError", "code_digest", "load", "repro", "save"]
