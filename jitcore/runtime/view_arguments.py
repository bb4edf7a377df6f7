"""Stage "guards" (beside the epilogue): the arguments whose version counter the epilogue moves for an in-place
metadata change made through detach() (or another view) of a view of them (`x[0].detach().squeeze_(0)`). On an
argument that is itself a view requiring grad, eager's move makes the grad_fn of every view of it anew from its base,
which jitcore cannot give the program's reads: such a call is refused, and other calls' entries guard against it."""
from __future__ import annotations

from jitcore.errors import UnsupportedError
from jitcore.guards.data_guards import DataGuard
from jitcore.runtime.checked_runs import user_where


def regenerated_view(t) -> bool:
    """Whether moving t's version counter makes autograd give t (and each view of it) a grad_fn anew from its base."""
    return t._base is not None and t.requires_grad


def checked_moves(traced, moves: list, roots) -> tuple[list, list, list]:
    """(the epilogue's version moves [(provenance, by)], the data guards keeping them eager's, the positions of the
    inputs moved for a metadata change only, whose viewing outputs the epilogue makes anew) from version_moves' rows
    (input position, by, the line of the metadata change when the move would make grad_fns anew, or None)."""
    out, guards, remade = [], [], []
    for k, by, line in moves:
        inp = traced.inputs[k]
        out.append((inp.provenance, by))
        if line is None:
            continue
        name = traced.trace.args[k].name
        if regenerated_view(inp.provenance.load(roots)):
            raise UnsupportedError(
                "in-place metadata change", f"an in-place metadata change (to {line.sym.name}) through detach() or a "
                f"view of argument {inp.provenance}, which is itself a view that requires grad: eager's move of its "
                "version counter makes the grad_fn of every view of it anew from its base (one made before the change "
                "then loses its gradient where the base has none), which jitcore cannot reproduce",
                where=user_where(line), hint="change the metadata of a new view instead (t = t.squeeze(0)), or pass a "
                "tensor that is not a view (x.clone(), x.contiguous()) or that needs no grad")
        remade.append(k)
        guards.append(DataGuard(regenerated_view, (name,), False, f"{name}._base is not None and "
                                f"{name}.requires_grad", on_values=False))
    return out, guards, remade
