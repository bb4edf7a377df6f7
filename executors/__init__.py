"""Executors: who runs each op. Import the executor objects from here (`from executors import torch_ex`)."""
# the torch executor's fused native kernels, and its max pooling through a channels-last copy
from executors import torchex_native, torchex_pool  # noqa: F401
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


# fusion executors are imported on first use (module __getattr__): they pull in torch.compile / nvFuser machinery
def __getattr__(name):
    if name == "inductor_ex":
        from executors.inductorex import inductor_ex  # lazy: torch._inductor is slow to import

        return inductor_ex
    if name == "nvfuser_ex":
        from executors.nvfuserex import nvfuser_ex  # lazy: nvFuser is optional (CUDA machines only)

        return nvfuser_ex
    raise AttributeError(name)
