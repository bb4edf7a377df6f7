"""The jitted nn.Module: `jit(module)` gives a module whose forward runs the compiled programs; parameters and
buffers stay the original's (they are inputs of the trace, never constants), so optimizers, state_dict and
train/eval work on the same tensors as before.
"""
from __future__ import annotations

import torch

_DELEGATED = (
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules", "state_dict", "load_state_dict", "zero_grad", "requires_grad_", "get_submodule",
    "get_parameter", "get_buffer", "extra_repr", "register_buffer", "register_parameter", "add_module",
    "register_module", "get_extra_state", "set_extra_state",
)


class JitModule(torch.nn.Module):
    """Wraps `model`; calls go through a JitFunction over `model.__call__` (hooks included)."""

    def __init__(self, model: torch.nn.Module, options):
        from jitcore.api import JitFunction
        from jitcore.guards import module_state

        module_state.install()  # the module state epoch: parameters are not re-checked on every call
        super().__init__()

        self.__dict__["_model"] = model  # not a registered submodule: state_dict keys stay the model's own
        # the model's own parameter and buffer tables: what writes them through the wrapper (torch.func's
        # functional_call, stateless reparametrization, `jm.weight = Parameter(...)`) changes the model it runs
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers
        self.__dict__["_jfn"] = JitFunction(model, options)

    def forward(self, /, *args, **kwargs):
        return self._jfn(*args, **kwargs)

    def __call__(self, /, *args, **kwargs):  # straight to the cache: no nn.Module dispatch on the hot path
        return self.__dict__["_jfn"](*args, **kwargs)

    # inspection entry points read these, so jitcore.last_traces(jmodule) works like for functions
    @property
    def _last_entry(self):
        return self._jfn._last_entry

    @property
    def _cache(self):
        return self._jfn._cache

    @property
    def training(self):
        return self._model.training

    @training.setter
    def training(self, value):
        if "_model" in self.__dict__:
            self._model.training = value

    def train(self, mode: bool = True):
        self._model.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def _apply(self, fn, recurse=True):
        self._model._apply(fn, recurse)
        return self

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_model"], name)

    def __getitem__(self, index):  # Sequential / ModuleList / ModuleDict indexing reaches the model's children
        return self._model[index]

    def __iter__(self):
        return iter(self._model)

    def __repr__(self):
        return f"JitModule({self._model!r})"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._model)))


def _delegate(name):
    def method(self, *args, **kwargs):
        return getattr(self.__dict__["_model"], name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The wrapped model's `{name}`."
    return method


for _name in _DELEGATED:
    setattr(JitModule, _name, _delegate(_name))
del _name
