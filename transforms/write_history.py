"""Transforms, inside functionalization: what eager's autograd and version counters show of each input written in
place, which the functional program no longer says. Per written input: how many times eager moves its version
counter (once per in-place op; never for the running stats batch_norm updates, nor through x.data), whether the last
write autograd records goes through a view (its grad_fn is then CopySlices), the line of its last counted write; and
the views read after a write that eager remakes from their base (transforms/written_tails.py, runtime/epilogue.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# in-place ops whose eager kernel writes its arguments without moving their version counters (aten's training
# batch norm updates the running stats it is given so)
UNCOUNTED = frozenset({"ltorch.batch_norm"})


@dataclass
class WriteLog:
    """Filled while functionalization inlines the writes of a trace's top-level lines, in order."""

    top: set  # ids of the trace's top-level lines
    line: object = None  # the top-level line whose writes are being inlined
    counted: dict = field(default_factory=dict)  # root -> ids of the top-level lines that moved its version counter
    last: dict = field(default_factory=dict)  # root -> (the line of its last counted write, whether the last moved it)
    sliced: dict = field(default_factory=dict)  # root -> whether its last recorded write went through a view
    regenerated: set = field(default_factory=set)  # names of views' values remade from their root's new value
    own_counter: set = field(default_factory=set)  # names of x.data tensors (writes through them move no counter)

    @classmethod
    def of(cls, trace) -> WriteLog:
        return cls({id(b) for b in trace.bound_symbols})

    def enter(self, bsym):
        if id(bsym) in self.top:
            self.line = bsym
            if bsym.sym.id == "ltorch.data":
                self.own_counter.update(o.name for o in bsym.flat_proxy_outs())

    def write(self, root: str, chain: tuple, recorded: bool):
        """A write into root (through the views of chain), autograd recording it or not."""
        counts = (self.line is None or self.line.sym.id not in UNCOUNTED) and \
            not any(p.output.name in self.own_counter for p in chain)
        if counts:
            self.counted.setdefault(root, set()).add(id(self.line))
        self.last[root] = (self.line if counts else self.last.get(root, (None, False))[0], counts)
        if recorded:
            self.sliced[root] = bool(chain)

    def history(self, root: str) -> dict:
        """The fields of root's functionalize.Writeback this log gives."""
        last, counts = self.last.get(root, (None, True))
        return {"versions": len(self.counted.get(root, ())), "last_counts": counts, "last_write": last,
                "sliced": self.sliced.get(root, False), "regenerated": frozenset(self.regenerated)}
