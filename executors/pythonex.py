"""Executors: the python executor. Number and shape arithmetic in plain Python (ops tagged PYTHON), so
symbolic sizes are computed by the interpreter's own int/float operations at run time.
"""
from __future__ import annotations

from executors.base import OperatorExecutor
from jitcore.ir.symbol import BoundSymbol, Tag


class PythonExecutor(OperatorExecutor):
    """Claims every op tagged PYTHON; its lines print as the Python they run."""

    def can_execute(self, bsym: BoundSymbol) -> bool:
        return Tag.PYTHON in bsym.sym.tags

    def execute(self, bsym: BoundSymbol) -> BoundSymbol:
        return bsym


python_ex = PythonExecutor("python", namespace_name="pythonex")
