"""Guards stage: eager's binding errors. Before a call is traced (a cache miss), `check_binding(fn, args, kwargs)`
binds the arguments to the parameters of the Python function the call reaches first (the function, a bound
method's function, a module's forward, an object's __call__) as the interpreter does (interpreter.frame.binding_error:
a stub with the same parameters, defaults and qualified name), so a call that does not bind raises exactly the
TypeError CPython raises for it, before anything is traced.
"""
from __future__ import annotations

import inspect
import types

import torch
from torch.nn.modules import module as nn_module

from jitcore.interpreter.frame import binding_error


def check_binding(fn, args: tuple, kwargs: dict) -> None:
    """Raise eager's TypeError when fn(*args, **kwargs) does not bind; return None when it does (or when the
    function the call reaches first is not known here: the interpreter binds it then, with the same messages)."""
    target = _target(fn, args)
    if target is not None:
        error = binding_error(*target, kwargs)
        if error is not None:
            raise error


def _target(fn, args: tuple):
    """(Python function, positional arguments it receives) for the first Python function a call of fn runs."""
    if isinstance(fn, torch.nn.Module):
        if type(fn).__call__ is not torch.nn.Module.__call__ or _pre_hooks(fn):
            return None  # pre-hooks may change the arguments forward receives
        fn = fn.forward
    elif type(fn) not in (types.FunctionType, types.MethodType):
        call = inspect.getattr_static(type(fn), "__call__", None)
        if type(call) is not types.FunctionType:
            return None
        fn, args = call, (fn, *args)
    if type(fn) is types.MethodType:
        fn, args = fn.__func__, (fn.__self__, *args)
    return (fn, args) if type(fn) is types.FunctionType else None


def _pre_hooks(module) -> bool:
    return bool(module._forward_pre_hooks or nn_module._global_forward_pre_hooks)
