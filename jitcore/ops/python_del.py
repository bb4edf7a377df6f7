"""Ops: memory. `python.del`, the line the memory pass (transforms/memory.py) writes after a tensor's last use:
it prints, and runs, as the Python statement `del t0, t1`.
"""
from __future__ import annotations

from jitcore.ir.symbol import Symbol, Tag


def _print_del(bsym, printer):
    return "del " + ", ".join(a.name for a in bsym.args)


python_del = Symbol("python.del", "del", meta=lambda *args: None, tags=(Tag.PYTHON, Tag.DONT_DCE), module="",
                    printer=_print_del)
