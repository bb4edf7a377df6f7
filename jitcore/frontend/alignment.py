"""Frontend: the alignment of `t.data_ptr()` (jitcore/ir/data_ptr.py) for a tensor of the trace being recorded, as
eager's tensor has it. A tensor the program allocates (or a view of one) sits at `storage_offset * itemsize` from an
allocation torch's allocator aligns (CPU: 64 bytes, c10/core/alignment.h; CUDA's caching allocator: 256, its blocks
being multiples of 512 bytes into segments cudaMalloc aligns to 256), so `addr % k` for k up to that alignment is
known without any address. A tensor from outside (argument, parameter, buffer) or a view of one has its real address:
the residue is read from the call's tensor and guarded (a call whose tensor has another residue is another program).
Which tensor's memory a value shares is followed as functionalization follows it (view ops whose decomposition is view
prims, in-place writes); where that is not known (an opaque op that may return a view, an op eager views and jitcore
computes), the answer is refused.
"""
from __future__ import annotations

import torch

from jitcore import compat
from jitcore.errors import UnsupportedError
from jitcore.frontend.layouts import _run_on_meta
from jitcore.guards.data_guards import DataGuard
from jitcore.ir.arith import concretize
from jitcore.ir.data_ptr import HINT, Address
from jitcore.ir.proxies import NumberProxy, TensorProxy
from jitcore.ir.pytree import tree_flatten, tree_unflatten
from jitcore.ir.symbol import Tag, writes_in_place
from jitcore.ir.views import LIKE_OPS, VIEW_OPS, VIEW_PRIMS
from jitcore.ops import prims_misc as pm

# view ops that copy where eager's layout allows no view: their copy (a same-dtype conversion) is eager's copy too
_RESHAPES = frozenset({"ltorch.reshape", "ltorch.reshape_as", "ltorch.flatten", "ltorch.ravel"})
# ops recorded only where eager makes a new tensor (else they hand back their input, and no line is recorded)
_COPIES = frozenset(f"ltorch.{n}" for n in (
    "clone contiguous to type_as float double half bfloat16 int long short char byte bool").split())
# ops eager makes views (or hands back their input) that jitcore may compute as new values: which memory their result
# shares is not followed here (functionalize's COMPUTED_VIEW_OPS are among them: tests/test_data_ptr_alignment.py)
EAGER_VIEWS = frozenset(f"ltorch.{n}" for n in (
    "unfold conj real imag view_as_real view_as_complex H mH adjoint resolve_conj resolve_neg positive alias "
    "as_strided as_strided_scatter_view _neg_view align_to refine_names rename lift_fresh").split())
# among them, those whose eager result is always a view of their (first) input: followed by replaying them on meta
# tensors (torch's own view functions: view_as_real's offset is twice its input's, imag's one float further in)
FOLLOWED_VIEWS = frozenset(f"ltorch.{n}" for n in (
    "unfold conj real imag view_as_real view_as_complex H mH adjoint alias positive").split())
# in-place ops that change a tensor's metadata: its address may change with them (those of _MOVES anywhere)
_METADATA_WRITES = frozenset(f"ltorch.{n}" for n in (
    "resize_ resize_as_ set_ as_strided_ t_ transpose_ swapdims_ swapaxes_ squeeze_ unsqueeze_").split())
_MOVES = ("resize_", "resize_as_", "set_", "as_strided_")  # (by the end of their op's name: ltorch.*, opaque.*)


def allocator_alignment(device: torch.device) -> int | None:
    """The alignment torch's allocator gives every allocation on `device` (None: not known here)."""
    if device.type == "cpu":
        return 64  # c10::gAlignment (16 only on mobile builds, which jitcore does not run on)
    if device.type == "cuda" and torch.cuda.get_allocator_backend() == "native":
        # the caching allocator carves blocks of multiples of kMinBlockSize (512 bytes, c10/core/AllocatorConfig.h)
        # from segments cudaMalloc returns, which CUDA documents as 256-byte aligned: 256 is what every block has
        return 256
    return None


class Addresses:
    """The residues asked of one trace's tensors (memoized), and their guards."""

    def __init__(self, ctx, layouts):
        self.ctx, self.layouts = ctx, layouts
        self._answers: dict = {}

    def address(self, proxy: TensorProxy) -> Address:
        return Address(proxy.name, lambda k: self.residue(proxy, k), lambda: self.nonzero(proxy))

    def nonzero(self, p: TensorProxy) -> bool:
        """`data_ptr() != 0` of a tensor with elements: its memory is allocated (an allocator gives a place of more
        than 0 bytes a non-null address, or raises), so True for a tensor the program makes; one from outside may
        have its storage freed (FSDP resizes it to 0 bytes): read from the call's tensor and guarded. Refused for a
        tensor without elements (eager's address is 0 or not, as its storage was made) and off cpu and cuda."""
        if (p.name, 0) in self._answers:
            return self._answers[(p.name, 0)]
        if p.device.type not in ("cpu", "cuda"):
            _refuse(p, f"`!= 0` on {p.device.type}")
        if p.numel() == 0:
            _refuse(p, "`!= 0` of a tensor without elements (its address is 0 or not, as its storage was made)")
        self._refuse_moves(p)
        kind, root, _ = self._storage(p)
        got = True
        if kind == "input":
            value = self.ctx.real_value(root)
            if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout != torch.strided:
                _refuse(p, f"reading it of a {type(value).__name__} ({value.layout}) input")
            got = _allocated(value)
            self.ctx.guards.data.append(DataGuard(_allocated, (root.name,), got, f"{root.name}.data_ptr() != 0",
                                                  on_values=False))
        self._answers[(p.name, 0)] = got
        return got

    def _refuse_moves(self, p):
        moved = next((b.sym.id for scope in self.ctx.trace._scopes for b in scope if b.sym.id.endswith(_MOVES)), None)
        if moved is not None:  # (a prologue reads the address a call starts with; eager's may have moved since)
            _refuse(p, f"reading it in a function that calls {moved.rsplit('.', 1)[-1]}, which may move a tensor's "
                    "memory")

    def residue(self, p: TensorProxy, k: int) -> int:
        align = allocator_alignment(p.device)
        if align is None:
            _refuse(p, f"`% {k}` on {p.device.type} (jitcore knows the allocator's alignment on cpu and cuda only)")
        if k > align:
            _refuse(p, f"`% {k}`: above the alignment every {p.device.type} allocation has ({align} bytes), so "
                    "eager's answer depends on where the allocator puts a tensor")
        key = (p.name, k)
        if key not in self._answers:
            self._refuse_moves(p)
            kind, root, chain = self._storage(p)
            self._answers[key] = (self._fresh if kind == "fresh" else self._outside)(p, root, chain, k)
        return self._answers[key]

    # -- whose memory -------------------------------------------------------------------------------------------------
    def _storage(self, p: TensorProxy):
        """("fresh" | "input", root, chain): p shares the memory of root, which the program allocates (fresh) or
        which comes from outside (input), through `chain`: (line, the tensor it makes on the way), p's line first."""
        cur, chain = p, []
        while True:
            line = self.layouts._line(cur)
            if line is None:
                if isinstance(self.ctx.real_value(cur), torch.Tensor):
                    return "input", cur, chain
                _refuse(p, f"reading it: {cur.name} comes from no line of the program and its tensor is not at hand")
            src = _shares(line, cur, p)
            if src is None:
                return "fresh", cur, chain
            chain.append((line, cur))
            cur = src

    # -- residues -----------------------------------------------------------------------------------------------------
    def _fresh(self, p, root, chain, k) -> int:
        """A tensor the program allocates (offset 0: a new allocation, aligned) or a view of one: its offset from
        eager's layout, at this call's run-time sizes where it has some (_offset specialises them: guarded, or checked
        when the program runs, so a call with other sizes runs another entry)."""
        line = self.layouts._line(root)
        opaque = Tag.OPAQUE in line.sym.tags
        at_start = not opaque and _starts_allocation(line, root)
        if at_start and all(_keeps_offset(b) for b, _ in chain):
            return 0  # (a new allocation seen from its first element, whatever its layout: `t[t > 0].t()`)
        base = root.eager_layout("contiguous")  # (an opaque op's: its meta run's, as at sizes known when tracing)
        if base is None and at_start and root.ndim <= 1:
            base = _plain(root)  # (an allocation of one dimension is dense: stride 1, whatever its inputs' layouts)
        if base is None and _run_time(root):
            # (nonzero's CPU kernel lays its result out column-major, its meta kernel not)
            _refuse(p, f"reading it: {root.name}'s layout is not known here (its sizes are known only at run time)")
        offset = self._offset(p, root, chain, base)
        return 0 if offset is None else offset % k

    def _outside(self, p, root, chain, k) -> int:
        """A tensor from outside or a view of one: the call's real address, guarded."""
        value = self.ctx.real_value(root)
        if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout != torch.strided:
            _refuse(p, f"reading it of a {type(value).__name__} ({value.layout}) input")
        if not chain:
            program, text = _direct(k), f"{root.name}.data_ptr() % {k}"
        else:
            offset = self._offset(p, root, chain, self.layouts._input_meta(root))
            if offset is None:
                return 0
            program, text = _through_view(offset, k), f"{p.name} (a view of {root.name}).data_ptr() % {k}"
        got = program(value)
        self.ctx.guards.data.append(DataGuard(program, (root.name,), got, text, on_values=False))
        return got[-1] if isinstance(got, tuple) else got

    def _offset(self, p, root, chain, base) -> int | None:
        """p's offset in bytes from the start of its storage in eager (None: p has no elements, data_ptr() is 0),
        from root's layout `base` (a meta tensor) through the lines of `chain`, replayed on meta tensors with torch's
        own functions (a piece a view op gives whole is its input there, as in eager). The sizes it depends on are
        specialised."""
        for line, _ in chain:
            for a in line.flat_proxy_args():
                if isinstance(a, NumberProxy):
                    concretize(a)
        for t in (root, p):
            for s in t._shape:
                if isinstance(s, NumberProxy):
                    concretize(s)
        cur, meta = root, base
        for line, out in reversed(chain):  # (root outward; `out`: the tensor the line makes on the way to p)
            if meta is None:
                break
            if not writes_in_place(line):  # (a write keeps its tensor's layout)
                metas = {a.name: meta if a.name == cur.name else _plain(a)
                         for a in line.flat_proxy_args() if isinstance(a, TensorProxy)}
                outs = _run_on_meta(line, metas)
                flat = [o.name if isinstance(o, TensorProxy) else None for o in line.flat_outs()]
                meta = outs[flat.index(out.name)] if outs is not None and len(outs) == len(flat) else None
            cur = out
        if meta is None or tuple(meta.shape) != tuple(getattr(s, "value", s) for s in p._shape):
            _refuse(p, f"reading it: the memory layout of {p.name} is not known here")
        if meta.numel() == 0:
            return None
        return meta.storage_offset() * p.dtype.itemsize


def _run_time(t: TensorProxy) -> bool:
    return any(isinstance(s, NumberProxy) and s.runtime for s in t._shape)


def _starts_allocation(line, out: TensorProxy) -> bool:
    """Whether `out`, made by `line` (which _shares found to allocate it), is an allocation seen from its first
    element: not a view into one made inside line's decomposition (`torch.where(m)[1]`, a column of nonzero's result,
    starts u0 elements in)."""
    made = {o.name: b for b in _flat_prims(line) for o in b.flat_proxy_outs()}
    name = out.name
    while name in made:
        b = made[name]
        if b.sym.id not in VIEW_PRIMS and not _same_dtype_copy(b):
            return True
        if not _keeps_offset(b) or not b.args or not isinstance(b.args[0], TensorProxy):
            return False
        name = b.args[0].name
    return False


def _plain(a: TensorProxy) -> torch.Tensor:
    """A tensor argument other than the one whose memory is followed (view_as's shape): contiguous, on meta."""
    return torch.empty(tuple(getattr(s, "value", s) for s in a._shape), dtype=a.dtype, device="meta")


def _allocated(t) -> bool:
    return t.untyped_storage().data_ptr() != 0


def _direct(k: int):
    def program(t):
        return t.data_ptr() % k

    program.__qualname__ = program.__name__ = f"data_ptr_mod_{k}"
    return program


def _through_view(offset: int, k: int):
    """The residue of a view `offset` bytes into t's storage, with what the offset was computed from (t's sizes,
    strides and offset: a parameter's are not checked elsewhere per call)."""
    def program(t):
        return tuple(t.shape), t.stride(), t.storage_offset(), (t.untyped_storage().data_ptr() + offset) % k

    program.__qualname__ = program.__name__ = f"view_data_ptr_mod_{k}"
    return program


def _refuse(p, what: str):
    raise UnsupportedError("tensor memory", f"{p.name}.data_ptr() inside a jitted function: {what}", hint=HINT)


# -- which lines share their input's memory ---------------------------------------------------------------------------
def _flat_prims(line) -> list:
    if line.sym.is_prim or not line.subsymbols:
        return [line]
    return [p for s in line.subsymbols for p in _flat_prims(s)]


# view prims whose result starts where their input does, whatever its layout
_SAME_START = frozenset({"prims.reshape", "prims.transpose", "prims.squeeze", "prims.broadcast_in_dim",
                         "prims.stop_gradient"})


def _keeps_offset(line) -> bool:
    """Whether a line of a chain (_storage's) makes a tensor whose first element is its input's: a write, or view
    prims that start where their input does (slices from 0 in every dim among them)."""
    if writes_in_place(line):
        return True
    return all(b.sym.id in _SAME_START or _same_dtype_copy(b) or (
        b.sym.id == "prims.slice" and all(type(s) is int and s == 0 for s in b.args[1])) for b in _flat_prims(line))


def _same_dtype_copy(b) -> bool:
    return b.sym.id == "prims.convert_element_type" and b.args[1] == b.args[0].dtype


def _shares(line, out: TensorProxy, p):
    """The tensor whose memory `out` (made by `line`) shares in eager, or None when eager allocates it; refused where
    that is not known."""
    sid = line.sym.id
    tensors = [a for a in line.flat_proxy_args() if isinstance(a, TensorProxy)]
    if sid in _METADATA_WRITES:
        _refuse(p, f"reading it after {sid.removeprefix('ltorch.')}, which changes {out.name}'s metadata")
    if writes_in_place(line):
        return line.args[1] if line.sym is pm.copy_ else tensors[0]
    if sid in FOLLOWED_VIEWS and tensors:
        return tensors[0]
    if sid in EAGER_VIEWS:
        _refuse(p, f"{out.name} comes from {sid.removeprefix('ltorch.')}, a view in eager that jitcore computes")
    if sid in VIEW_OPS:
        return _view_source(line, out, tensors[:1] if sid in LIKE_OPS else tensors, p)
    if Tag.OPAQUE in line.sym.tags:
        if not _opaque_allocates(line):
            _refuse(p, f"{out.name} comes from {sid.removeprefix('opaque.')}, which may return a view of its input")
        return None
    if sid not in _COPIES and (_may_alias(line.sym.torch_fn) or _reaches_argument(line, out, tensors)):
        _refuse(p, f"{out.name} comes from {sid.removeprefix('ltorch.')}, which may share its input's memory in eager")
    return None


def _reaches_argument(line, out: TensorProxy, tensors) -> bool:
    """Whether jitcore's decomposition makes `out` from an argument by view prims and same-dtype copies only
    (`broadcast_tensors`: an expanded input): eager may hand back a view of it there."""
    made = {o.name: b for b in _flat_prims(line) for o in b.flat_proxy_outs()}
    args = {t.name for t in tensors}
    name = out.name
    while name not in args:
        b = made.get(name)
        if b is None or not (b.sym.id in VIEW_PRIMS or _same_dtype_copy(b)) or not b.args or not isinstance(
                b.args[0], TensorProxy):
            return False
        name = b.args[0].name
    return True


def _view_source(line, out: TensorProxy, tensors, p):
    """The argument of view op `line` whose memory `out` shares (through view prims, and same-dtype copies: the piece
    a view op gives whole, `x.chunk(1)[0]`, is its input in eager), None where eager copies (a reshape eager cannot
    view, advanced indexing); refused where jitcore computes what eager may view."""
    sid = line.sym.id
    made = {o.name: b for b in _flat_prims(line) for o in b.flat_proxy_outs()}
    args = {t.name: t for t in tensors}
    name, copied = out.name, False
    while name not in args:
        b = made.get(name)
        src = b.args[0] if b is not None and b.args else None
        if not isinstance(src, TensorProxy):
            _refuse(p, f"its memory: {out.name} comes from {sid.removeprefix('ltorch.')} by a way not followed here")
        if b.sym.id not in VIEW_PRIMS:
            if not _same_dtype_copy(b):
                if sid == "ltorch.getitem" and not any(isinstance(a, TensorProxy) and a.ndim == 0 and a.dtype not in (
                        torch.bool, torch.uint8) for a in line.flat_proxy_args()):
                    return None  # advanced indexing: eager copies (a 0-d integer index is a view there)
                _refuse(p, f"its memory: jitcore computes {sid.removeprefix('ltorch.')} here, which eager may make "
                        "a view")
            copied = True
        name = src.name
    return None if copied and sid in _RESHAPES else args[name]


def _may_alias(fn) -> bool:
    """Whether aten's schema of fn (every overload of the aten op named like it, out= ones aside) lets a result share
    an input's memory; False when fn has no aten schema."""
    fn = getattr(fn, "stands_for", fn)
    if isinstance(fn, compat.OpOverload):
        overloads = [fn]
    else:
        name = getattr(fn, "__name__", "") or ""
        packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
        if not isinstance(packet, compat.OpOverloadPacket):
            return False
        overloads = [getattr(packet, o) for o in packet.overloads()]
    return any(r.alias_info is not None for o in overloads if not _writes(o) for r in o._schema.returns)


def _writes(overload) -> bool:
    """An out= or in-place overload (its results are the tensors it writes)."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in overload._schema.arguments)


def _opaque_allocates(line) -> bool:
    """An opaque op (a torch function with no rule) allocates its results: its schema lets none alias an input, and
    run on meta tensors none is a view or an input itself."""
    fn = line.sym.torch_fn
    if fn is None or _may_alias(fn):
        return False
    flat, spec = tree_flatten((line.args, line.kwargs))
    if any(isinstance(a, NumberProxy) for a in flat):
        return False
    metas = [torch.empty(tuple(getattr(s, "value", s) for s in a._shape), dtype=a.dtype, device="meta")
             if isinstance(a, TensorProxy) else a for a in flat]
    args, kwargs = tree_unflatten(spec, metas)
    try:
        with torch.no_grad():
            out = fn(*args, **kwargs)
    except Exception:
        return False
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    # (a view of memory of its own, multi_dot's of the product it made, is new memory: its offset is its meta's)
    storages = {m.untyped_storage()._cdata for m in metas if isinstance(m, torch.Tensor)}
    return bool(outs) and not any(any(o is m for m in metas) or o.untyped_storage()._cdata in storages or (
        o._is_view() and o._base.layout != torch.strided) for o in outs)
