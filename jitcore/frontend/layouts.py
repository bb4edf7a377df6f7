"""Frontend: the memory layout (sizes, strides, offset) eager would give a tensor of the trace being recorded, for
the answers that depend on it: whether `x.view(shape)` can be a view (eager raises when not), `x.stride()`,
`x.is_contiguous()`, `x.storage_offset()`. A tensor's layout comes from replaying the lines that made it on meta
tensors with torch's own functions, starting from the real strides of the call's inputs. The argument tensors an
answer depended on are guarded (their contiguity, the order of their dims, or their exact strides), so a cached call
never reuses it wrongly.
A prim is replayed with its eager kernel, which comes with its definition (Symbol.kernel, jitcore/ops): nothing here
depends on an executor having been imported.
"""
from __future__ import annotations

import atexit
import hashlib
import io
import sys
from importlib import metadata
from pathlib import Path

import torch

from jitcore import compat
from jitcore.guards.data_guards import DataGuard
from jitcore.ir.arith import concretize, expr_of, unit_sizes
from jitcore.ir.proxies import NumberProxy, Proxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_map
from jitcore.ir.symbol import Tag
from jitcore.ir.trace import detached
from jitcore.ir.views import VIEW_OPS, VIEW_PRIMS
from jitcore.runtime.disk_cache import cache_root, write_atomically


def _contiguous(t) -> bool:
    return t.is_contiguous()


def _strides(t) -> tuple:
    return (tuple(t.stride()), t.storage_offset())


def _dense_order(t) -> tuple:
    """("dense", dims from innermost, offset) of a tensor laid out densely in some order of its dims (a transpose,
    channels-last; size-1 dims aside: their sizes are specialised), else its exact ("strides", strides, offset). A
    non-contiguous argument is guarded by it: a dense one's layout answers hold over its sizes as a contiguous one's
    do (its strides are products of them: TensorProxy.stride), where exact strides would change with every size."""
    dims = sorted((d for d in range(t.dim()) if t.shape[d] != 1), key=lambda d: (t.stride(d), -d))
    expected = 1
    for d in dims:
        if t.stride(d) != expected:
            return ("strides", tuple(t.stride()), t.storage_offset())
        expected *= t.shape[d]
    return ("dense", tuple(dims), t.storage_offset())


class Layouts:
    """Meta tensors with eager's layout for the proxies of one trace (memoized), and the guards they need.

    level "contiguous": the answer holds for any input that is contiguous like the traced one was (a
    non-contiguous input is guarded by the order its dims are laid out in where dense, else by its exact strides:
    _dense_order); "exact": the answer is a stride or an offset itself,
    so inputs are guarded by their exact strides and offset.
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self._metas: dict[str, tuple] = {}  # proxy name -> (meta tensor or None, names of the inputs it came from)
        self._lines: dict[str, object] = {}  # proxy name -> the line that made it
        self._guarded: set = set()
        self.used: dict = {}  # the META_RESULTS keys this trace's replays asked (in order, each once)

    def __call__(self, proxy: TensorProxy, level: str = "contiguous"):
        """A meta tensor laid out as eager's value of `proxy` would be, or None when it cannot be known."""
        meta, inputs = self._meta(proxy)
        if meta is not None:
            for name in inputs:
                self._guard(name, level)
            # (the guarded inputs' contiguity decides the answer only with these)
            unit_sizes(proxy._shape, ones_only=meta.is_contiguous())
        return meta

    # -- replay ----------------------------------------------------------------------------------------------------
    def _meta(self, proxy):
        known = self._metas.get(proxy.name)
        if known is not None:
            return known
        stack = [proxy]
        while stack:  # post-order over the lines that made proxy (explicit stack: chains can be long)
            p = stack[-1]
            if p.name in self._metas:
                stack.pop()
                continue
            line = self._line(p)
            if line is None:
                self._metas[p.name] = (self._input_meta(p), frozenset({p.name}))
                stack.pop()
                continue
            todo = [a for a in line.flat_proxy_args() if isinstance(a, TensorProxy) and a.name not in self._metas]
            if todo:
                stack += todo
                continue
            self._replay(line)
            stack.pop()
            self._metas.setdefault(p.name, (None, frozenset()))
        return self._metas[proxy.name]

    def _line(self, p):
        line = self._lines.get(p.name)
        if line is None:
            for scope in self.ctx.trace._scopes:
                for b in scope:
                    for o in b.flat_proxy_outs():
                        self._lines.setdefault(o.name, b)
            line = self._lines.get(p.name)
        return line

    def _input_meta(self, p):
        value = self.ctx.real_value(p)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            return None
        with detached():
            try:
                storage = value.untyped_storage().nbytes() // max(value.element_size(), 1)
            except (RuntimeError, NotImplementedError):
                return None
            base = torch.empty((storage,), dtype=value.dtype, device="meta")
            return base.as_strided(value.shape, value.stride(), value.storage_offset())

    def _replay(self, line):
        args = [a for a in line.flat_proxy_args() if isinstance(a, TensorProxy)]
        inputs = frozenset().union(*(self._metas[a.name][1] for a in args)) if args else frozenset()
        outs = list(line.flat_outs())
        given = {a.name: self._metas[a.name][0] for a in args}
        metas = [None] * len(outs) if line.sym.id in UNKNOWN_LAYOUTS else None
        if metas is None and line.sym.id in JOINS and all(o.ndim not in (4, 5) for o in outs
                                                           if isinstance(o, TensorProxy)):
            metas = [_fresh(o) for o in outs]  # (whatever its inputs' layouts: those may not be known here)
        if metas is None:
            metas = _contiguous_results(line, given) if args else None
        if metas is None:
            metas = _run_on_meta(line, given, self.used) if args else None
        if metas is None and line.sym.id in _COPIES_OF_DATA and isinstance(line.args[0], TensorProxy):
            m = given.get(line.args[0].name)  # (torch.tensor(t) keeps t's dense order, as empty_like does)
            metas = [None if m is None else torch.empty_like(m, dtype=outs[0].dtype)] if len(outs) == 1 else None
        if metas is None and _advanced_index(line, given):
            metas = [_fresh(o) for o in outs]
        if metas is None or len(metas) != len(outs):
            metas = [_fresh(o) if not args else None for o in outs]
        for o, m in zip(outs, metas):
            if isinstance(o, TensorProxy):
                ok = isinstance(m, torch.Tensor) and tuple(m.shape) == _sizes(o)
                self._metas[o.name] = (m if ok else None, inputs)
        if line.sym.id in _SLICING and len(args) == 1:
            _full_slices(args[0], outs)

    def _guard(self, name, level):
        inp = next((i for i in self.ctx.inputs if i.proxy.name == name), None)
        if inp is None or not self.ctx.is_argument_input(inp):
            return  # parameters and other state tensors: their layout is not checked per call
        value = self.ctx.real_value(inp.proxy)
        program = _strides if level == "exact" else _contiguous if value.is_contiguous() else _dense_order
        if level == "exact":  # a stride is a product of sizes: symbolic sizes become specialised (predicates)
            for s in inp.proxy._shape:
                if isinstance(s, NumberProxy):
                    concretize(s)
        if (name, program) in self._guarded:
            return
        self._guarded.add((name, program))
        text = {_contiguous: f"{name}.is_contiguous()", _strides: f"({name}.stride(), {name}.storage_offset())",
                _dense_order: f"the dense order of {name}"}[program]
        self.ctx.guards.data.append(DataGuard(program, (name,), program(value), text, on_values=False))


# creation ops whose data may be a tensor (or an array over one): eager's copy keeps its dense order (torch.tensor of
# a transposed tensor, or of the array x.numpy() of one, is laid out transposed: fuzz seed 1772)
_COPIES_OF_DATA = frozenset({"ltorch.tensor", "ltorch.asarray", "ltorch.as_tensor"})

# lines that take part of their input along its dims (the dims they keep line up with the input's)
_SLICING = frozenset({"ltorch.getitem", "ltorch.narrow", "prims.slice", "ltorch.split", "ltorch.split_with_sizes",
                      "ltorch.chunk", "ltorch.tensor_split"})


def _full_slices(a: TensorProxy, outs):
    """Records whether a slice is as long as the dim it slices, where that holds or fails only at this call's sizes
    (`x[:, :2]` of x 3 x C, `x.narrow(1, 0, n)`): a whole dim is contiguous where the input is, and a reshape of it
    a view, which it is not for other sizes (a write through it would reach the input where eager's copy does not,
    or the reverse)."""
    for o in outs:
        if not isinstance(o, TensorProxy) or o.ndim != a.ndim:
            continue
        for s_in, s_out in zip(a._shape, o._shape):
            symbolic = isinstance(s_in, NumberProxy) or isinstance(s_out, NumberProxy)
            if symbolic and s_in is not s_out and expr_of(s_in) != expr_of(s_out):
                bool(s_in == s_out)  # (whichever holds: a call where the other does is another program)


def _maker(line, name: str):
    """The prim whose output is `name` in line's decomposition (line itself for a prim)."""
    while line.subsymbols:
        sub = next((b for b in reversed(line.subsymbols) if any(o.name == name for o in b.flat_proxy_outs())), None)
        if sub is None:
            return None
        line = sub
    return line


def _contiguous_results(line, metas: dict):
    """Eager's results of a line that computes new values from contiguous inputs are contiguous: known without
    running torch on meta tensors (whose first Python meta kernel imports torch._dynamo, a second at the first
    call); None where the layout needs the replay (views, opaque ops, a memory_format, a non-contiguous input)."""
    if Tag.OPAQUE in line.sym.tags or "memory_format" in line.kwargs or line.sym.id in VIEW_OPS:
        return None  # (a view op's piece made by a copy here, x.chunk(1)[0], is eager's view: its offset is x's)
    if any(m is None or not m.is_contiguous() for m in metas.values()):
        return None
    outs = []
    for o in line.flat_outs():
        if isinstance(o, TensorProxy):
            made = _maker(line, o.name)
            if made is None or made.sym.id in VIEW_PRIMS or not made.sym.is_prim:
                return None
            o = torch.empty(_sizes(o), dtype=o.dtype, device="meta")
        outs.append(o)
    return outs


def _advanced_index(line, metas: dict) -> bool:
    """`x[mask]`, `x[:, idx]` of a contiguous x: eager's index kernel allocates a contiguous result (whatever slices
    come with the tensor index), which meta tensors cannot compute where a mask counts its rows at run time. A 0-d
    integer index is a view in eager (not this)."""
    if line.sym.id != "ltorch.getitem" or any(m is None or not m.is_contiguous() for m in metas.values()):
        return False
    index = [a for a in tree_flatten(line.args[1:])[0] if isinstance(a, TensorProxy)]
    return bool(index) and all(a.ndim > 0 or a.dtype in (torch.bool, torch.uint8) for a in index)


def _sizes(p: TensorProxy) -> tuple:
    return tuple(s.value if isinstance(s, NumberProxy) else s for s in p._shape)


def _fresh(p):
    """A tensor made from no tensor (creation ops): contiguous, as eager makes it."""
    return torch.empty(_sizes(p), dtype=p.dtype, device="meta") if isinstance(p, TensorProxy) else None


def _run_on_meta(line, metas: dict, used: dict | None = None):
    """line's outputs computed on meta tensors by the torch function it stands for (or its prim's kernel); the key
    of the answer in META_RESULTS goes into `used`."""
    sym = line.sym
    if Tag.PYTHON in sym.tags or (Tag.CREATION in sym.tags and not sym.id.endswith("_like")):
        return None  # (a *_like op lays its result out as its input: torch.empty_like(x.t() * 1) keeps x.t()'s)
    fn = sym.torch_fn if sym.torch_fn is not None else sym.kernel  # (a prim's kernel comes with its definition)
    if any(m is None for m in metas.values()):
        return None
    if fn is None:
        return _run_view_decomposition(line, metas)

    def to_meta(x):
        if isinstance(x, TensorProxy):
            return metas[x.name]
        return x.value if isinstance(x, NumberProxy) else x

    args, kwargs = tree_map(to_meta, (line.args, line.kwargs))
    if sym.id == "ltorch.getitem":
        args = _masks_as_indices(line, args)
    leaves, spec = tree_flatten((args, kwargs))
    if any(isinstance(x, Proxy) for x in leaves):
        return None
    on_cpu = sym.id in CPU_LAYOUTS and any(a.device.type == "cpu" for a in line.flat_proxy_args()
                                           if isinstance(a, TensorProxy))
    key = _result_key(sym.id + (" on cpu" if on_cpu else ""), leaves, spec)
    if key is not None and used is not None:
        used[key] = None
    if key is not None and key not in META_RESULTS and not _DISK["loaded"]:
        _load_from_disk()  # (once per process, at the first question not answered yet)
    if key is not None and key in META_RESULTS:
        return [None if d is None else _rebuild(d) for d in META_RESULTS[key]]
    with detached(), torch.no_grad():
        try:
            out = _run_on_cpu(fn, args, kwargs) if on_cpu else fn(*args, **kwargs)
        except Exception:  # an op with no meta kernel, or a device the meta tensors cannot reach
            return None
    outs = tree_flatten(out)[0]  # an absent output (None: F.multi_head_attention_forward's weights) stays absent
    known = all(m is None or (isinstance(m, torch.Tensor) and m.device.type == "meta") for m in outs)
    if not (known and any(m is not None for m in outs)):
        return None
    if key is not None and len(META_RESULTS) < MAX_RESULTS:
        META_RESULTS[key] = tuple(None if m is None else _described(m) for m in outs)
        _DISK["added"] += 1
    return outs


def _masks_as_indices(line, args):
    """`x[mask]` (one bool mask as the index): on meta tensors the number of elements it picks is not known (nonzero),
    so it is asked as `x[i0, ..., ik-1]` with k index tensors of the result's length, which eager lays out as it lays
    out the masked one (following x's strides: fuzz seed 412)."""
    x, index = args[0], args[1] if len(args) == 2 else None
    out = line.flat_outs()[0] if line.flat_outs() else None
    if not (isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8) and index.ndim >= 1
            and isinstance(x, torch.Tensor) and isinstance(out, TensorProxy) and out.ndim >= 1):
        return args
    n = _sizes(out)[0]
    if not isinstance(n, int):
        return args
    picks = tuple(torch.zeros((n,), dtype=torch.long, device=index.device) for _ in range(index.ndim))
    return (x, picks)


# Replays of torch on meta tensors, by op and the exact description of what it was given (sizes, strides, offset,
# dtype and storage size of each tensor; every other argument by type and value; the structure; the default dtype):
# a later trace asking the same question gets the same answer without running torch again, and a package carries
# them (jitcore/packages.py), so a load re-traces without running torch's Python meta kernels (the first of which
# imports torch._dynamo: about a second). Not kept under autocast, whose state the answer could depend on. They are
# also kept in jitcore's cache folder between processes (below).
META_RESULTS: dict = {}
MAX_RESULTS = 50_000


# -- kept on disk between processes: the next process's first trace of the same model runs no meta kernel -----------
_DISK = {"loaded": False, "added": 0}


def _results_file() -> Path | None:
    root = cache_root()
    if root is None:
        return None
    try:
        own = metadata.version("jitcore")
    except metadata.PackageNotFoundError:
        own = "unknown"
    tag = hashlib.sha256(repr((own, torch.__version__, sys.version_info[:2])).encode()).hexdigest()[:16]
    return root / "meta-results" / f"{tag}.pt"


def _load_from_disk():
    """Add the answers earlier processes kept (same jitcore, torch and Python) and write this process's at exit."""
    _DISK["loaded"] = True
    path = _results_file()
    if path is None:
        return
    atexit.register(_save_to_disk, path)
    try:
        known = torch.load(path, weights_only=False) if path.exists() else {}
    except Exception:  # (a file cut short: it is written again at exit)
        return
    for key, value in list(known.items())[:max(0, MAX_RESULTS - len(META_RESULTS))]:
        META_RESULTS.setdefault(key, value)


def _save_to_disk(path: Path):
    if not _DISK["added"]:
        return
    try:
        known = torch.load(path, weights_only=False) if path.exists() else {}
    except Exception:
        known = {}
    known.update(META_RESULTS)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(dict(list(known.items())[:MAX_RESULTS]), buf)
        write_atomically(path, buf.getvalue())  # (another process may write it too: the last one wins)
    except OSError:
        pass


# ops whose CPU kernels lay out their outputs otherwise than torch's meta kernels say (a convolution of a channels_last
# input or weight, group_norm, a reflect or replicate pad and roll of a channels_last input keep channels_last on the
# CPU; the meta kernels answer contiguous): their layout is the CPU kernel's own, run on zeros laid out as the inputs
_PLAIN = frozenset({int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.memory_format,
                    torch.layout})

# ops whose kernels lay out their outputs in a way not known here, which depends on the device and on values (nonzero
# and argwhere on the CPU: (n, ndim) column-major, n known only at run time; linalg.eig's eigenvectors): their layout
# questions (stride(), is_contiguous()) are refused rather than answered as contiguous
UNKNOWN_LAYOUTS = frozenset(("ltorch.nonzero", "ltorch.argwhere", "prims.nonzero", "opaque.torch.linalg.eig",
                             "ltorch.linalg_eig"))

# ops that lay their result out contiguously whatever their inputs' layouts, but for 4-d and 5-d results (which follow
# a channels-last input): cat and stack allocate it from torch's suggested memory format, contiguous at other ranks
JOINS = frozenset({"ltorch.cat", "prims.cat", "ltorch.stack"})

CPU_LAYOUTS = frozenset(f"ltorch.{n}" for n in (
    "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d group_norm pad roll pixel_shuffle "
    "pixel_unshuffle").split())


def _run_on_cpu(fn, args, kwargs):
    """fn's outputs, as meta tensors laid out as its CPU kernel lays them out, from a run on zeros of the inputs'
    layouts (meta tensors in args)."""
    def real(x):
        if not isinstance(x, torch.Tensor) or x.device.type != "meta":
            return x
        storage = torch.zeros((x.untyped_storage().nbytes() // x.element_size(),), dtype=x.dtype)
        return storage.as_strided(x.shape, x.stride(), x.storage_offset())

    out = fn(*tree_map(real, args), **tree_map(real, kwargs))
    return tree_map(lambda o: _rebuild(_described(o)) if isinstance(o, torch.Tensor) else o, out)


def _described(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.untyped_storage().nbytes())


def _result_key(op: str, leaves: list, spec):
    if compat.is_any_autocast_enabled():
        return None
    parts = [op, str(spec), torch.get_default_dtype()]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if x.device.type != "meta" or x.layout != torch.strided or type(x) is not torch.Tensor:
                return None
            parts.append(_described(x))
        elif type(x) in _PLAIN:  # (floats by their exact text: -0.0 and 0.0 are equal keys otherwise)
            parts.append((type(x).__name__, repr(x) if type(x) in (float, complex) else x))
        else:
            return None
    return tuple(parts)


def _rebuild(d: tuple) -> torch.Tensor:
    shape, stride, offset, dtype, nbytes = d
    with detached():
        base = torch.empty((nbytes // dtype.itemsize,), dtype=dtype, device="meta")
        return base.as_strided(shape, stride, offset)


# prims that only re-index their input: a composite made of these alone (x.mT, x.T, which have no torch callable to
# replay) is a view in eager, laid out as its prims lay it out
_VIEW_PRIMS = frozenset({"prims.reshape", "prims.transpose", "prims.squeeze", "prims.slice", "prims.broadcast_in_dim",
                         "prims.stop_gradient", "prims.conj", "prims.real", "prims.imag", "prims.view_as_real",
                         "prims.view_as_complex"})


def _run_view_decomposition(line, metas: dict):
    """line's outputs on meta tensors by replaying its decomposition, when that is view prims only (else None)."""
    if not line.subsymbols:
        return None
    env = dict(metas)
    for sub in line.subsymbols:
        if sub.sym.is_prim and sub.sym.id not in _VIEW_PRIMS:
            return None
        args = [a for a in sub.flat_proxy_args() if isinstance(a, TensorProxy)]
        if any(a.name not in env for a in args):
            return None
        outs = _run_on_meta(sub, {a.name: env[a.name] for a in args}) if args else None
        if outs is None or len(outs) != len(list(sub.flat_outs())):
            return None
        env.update((o.name, m) for o, m in zip(sub.flat_outs(), outs) if isinstance(o, TensorProxy))
    outs = [env.get(o.name) if isinstance(o, TensorProxy) else None for o in line.flat_outs()]
    return outs if all(isinstance(m, torch.Tensor) for m in outs) else None
