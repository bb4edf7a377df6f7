"""Executors: the python executor. Number and shape arithmetic in plain Python (ops tagged PYTHON), so
symbolic sizes are computed by the interpreter's own int/float operations at run time.
"""
from __future__ import annotations

from executors.base import OperatorExecutor
from jitcore.ir.symbol import Tag

python_ex = OperatorExecutor("python", namespace_name="pythonex")


def _can_execute(bsym) -> bool:
    return Tag.PYTHON in bsym.sym.tags


python_ex.can_execute = _can_execute
python_ex.execute = lambda bsym: bsym  # python ops print as the Python they run
