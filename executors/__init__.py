"""Executors: who runs each op. Import the executor objects from here (`from executors import torch_ex`)."""
from executors.base import Executor, FusionExecutor, OperatorExecutor, get_executor, register_executor
from executors.pythonex import python_ex
from executors.torchex import torch_ex

__all__ = [
    "Executor",
    "FusionExecutor",
    "OperatorExecutor",
    "get_executor",
    "python_ex",
    "register_executor",
    "torch_ex",
]


def __getattr__(name):
    # fusion executors are imported on first use: they pull in torch.compile / nvFuser machinery
    if name == "inductor_ex":
        from executors.inductorex import inductor_ex

        return inductor_ex
    if name == "nvfuser_ex":
        from executors.nvfuserex import nvfuser_ex

        return nvfuser_ex
    raise AttributeError(name)
