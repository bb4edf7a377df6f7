"""Ops: messages user code emits inside a jitted function: `logging` calls (`logger.info("shape %s", x.shape)`,
`logging.warning(...)`) and `warnings.warn(...)`. Each becomes a line of the program that runs on every call, in
program order, with the call's real values, naming the user's file, line and function as eager's caller lookup does:
a logging line asks the logger at run time whether its level is enabled (a level changed between calls is honored)
and hands its handlers the record; a warning line goes through the warning filters at run time with the user's
location and module registry (so "always" warns on every call, "default" once per location, "error" raises there,
as in eager). Without this, logging's code was interpreted: its records named jitcore's interpreter as their caller,
a handler that keeps records stored the first call's objects, and `logger.exception` in an `except` block exhausted
memory building guards over the traceback's frames; a warning was issued once, at trace time, from jitcore's file.
"""
from __future__ import annotations

import logging
import os
import sys
import warnings

from jitcore.errors import UnsupportedError
from jitcore.ir.proxies import Proxy
from jitcore.ir.symbol import BoundSymbol, Symbol, Tag
from jitcore.ir.trace import get_tracectx, services
from jitcore.ops.per_call import _holds_proxy, _print_arg

# Logger methods -> their level (None: the level is the first argument, as Logger.log takes it)
_METHODS = {logging.Logger.debug: logging.DEBUG, logging.Logger.info: logging.INFO,
            logging.Logger.warning: logging.WARNING, logging.Logger.error: logging.ERROR,
            logging.Logger.critical: logging.CRITICAL, logging.Logger.exception: logging.ERROR,
            logging.Logger.log: None}
_METHODS.update({getattr(logging.Logger, n): _METHODS[getattr(logging.Logger, m)]
                 for n, m in (("warn", "warning"), ("fatal", "critical")) if hasattr(logging.Logger, n)})
_LOGGING_FILE = os.path.normcase(logging.__file__)


def _log(logger, level, msg, args, filename, lineno, func, extra):
    if logger.isEnabledFor(level):
        logger.handle(logger.makeRecord(logger.name, level, filename, lineno, msg, args, None, func, extra, None))


def _log_printer(bsym, printer):
    logger, level, msg, args, filename, lineno, func, extra = bsym.args
    parts = [printer.value(logger), repr(level), _print_arg(printer, msg), _print_arg(printer, tuple(args)),
             repr(filename), repr(lineno), repr(func), _print_arg(printer, extra)]
    return f"log_({', '.join(parts)})"


log_ = Symbol("python.log", "log_", meta=lambda *args: None, tags=(Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE),
              module="", printer=_log_printer, call_ctx={"log_": _log}, kernel=_log)


def _caller(stacklevel: int, skip: str | None = _LOGGING_FILE) -> tuple:
    """(file, line, function, module globals) of the frame eager's caller lookup names: the interpreted frames,
    innermost first, past those of file `skip` (logging's own), then `stacklevel - 1` frames further out."""
    found = services()
    pairs = list(zip(found.user_stack(), found.user_globals()))
    frames = [f for f in reversed(pairs) if os.path.normcase(f[0][0].co_filename) != skip]
    if not frames:
        return "(unknown file)", 0, "(unknown function)", None
    (code, inst), scope = frames[min(max(stacklevel, 1), len(frames)) - 1]
    line = getattr(getattr(inst, "positions", None), "lineno", None) or getattr(inst, "lineno", None)
    return code.co_filename, line or code.co_firstlineno, code.co_name, scope


def record_log(method, logger, args: tuple, kwargs: dict):
    """`logger.<method>(msg, *args, **kwargs)` as a line that logs the real values on every call."""
    level = _METHODS[method]
    if level is None:
        if not args:
            raise TypeError("Logger.log() missing 2 required positional arguments: 'level' and 'msg'")
        level, args = args[0], args[1:]
    if not args:
        raise TypeError(f"Logger.{method.__name__}() missing 1 required positional argument: 'msg'")
    if not isinstance(level, int) or isinstance(level, Proxy):
        raise TypeError("level must be an integer")
    msg, args = args[0], tuple(args[1:])
    exc_info = kwargs.get("exc_info", method is logging.Logger.exception)
    unknown = set(kwargs) - {"exc_info", "stack_info", "stacklevel", "extra"}
    if unknown:
        raise TypeError(f"Logger.{method.__name__}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if exc_info or kwargs.get("stack_info"):
        raise UnsupportedError("logging", f"Logger.{method.__name__}() with the exception or the stack inside a "
                               "jitted function: the traceback and the stack would be the interpreter's, not yours",
                               hint="log the exception's text (`logger.error('...: %s', e)`), or log outside the "
                                    "jitted function")
    extra = kwargs.get("extra")
    if _holds_proxy((msg, args, extra)):
        raise UnsupportedError("logging", "a logging call with an object holding traced tensors or numbers (its text "
                               "would show their names, not their values)",
                               hint="log the tensors or numbers themselves, or log outside the jitted function")
    if len(args) == 1 and isinstance(args[0], dict) and args[0]:
        args = (dict(args[0]),)  # (logging formats `%(key)s` from a single dict argument, as eager does)
    filename, lineno, func, _ = _caller(kwargs.get("stacklevel", 1))
    get_tracectx().record(BoundSymbol(log_, (logger, level, msg, args, filename, lineno, func, extra), {}, None))


def _warn(message, category, filename, lineno, module):
    scope = vars(sys.modules[module]) if module in sys.modules else None  # (a module's globals: its registry)
    registry = scope.setdefault("__warningregistry__", {}) if scope is not None else None
    warnings.warn_explicit(message, category, filename, lineno, module or "<string>", registry, scope)


def _warn_printer(bsym, printer):
    message, category, filename, lineno, module = bsym.args
    return f"warn_({_print_arg(printer, message)}, {printer.value(category)}, {filename!r}, {lineno!r}, {module!r})"


warn_ = Symbol("python.warn", "warn_", meta=lambda *args: None,
               tags=(Tag.PYTHON, Tag.DONT_DCE, Tag.NON_DIFFERENTIABLE), module="", printer=_warn_printer,
               call_ctx={"warn_": _warn}, kernel=_warn)


def record_warn(message, category=None, stacklevel=1, source=None, **kwargs):
    """`warnings.warn(message, category, stacklevel)` as a line that goes through the warning filters on every
    call, at the user's location."""
    if kwargs:
        raise TypeError(f"warn() got an unexpected keyword argument {sorted(kwargs)[0]!r}")
    if isinstance(message, Warning):
        category = type(message)
    elif category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    if _holds_proxy(message) or isinstance(message, Proxy):
        raise UnsupportedError("warnings", "warnings.warn() of a traced value (its text would show its name)",
                               hint="warn with a string, or warn outside the jitted function")
    filename, lineno, _, scope = _caller(stacklevel, skip=None)
    module = scope.get("__name__") if isinstance(scope, dict) else None
    get_tracectx().record(BoundSymbol(warn_, (message, category, filename, lineno, module), {}, None))


def lookaside(fn):
    """The replacement of a Logger method (bound, or called with the logger first) or of warnings.warn, else
    None."""
    if fn is warnings.warn:
        return record_warn
    method = getattr(fn, "__func__", None)
    owner = getattr(fn, "__self__", None)
    try:
        if method in _METHODS and isinstance(owner, logging.Logger):
            return lambda *args, **kwargs: record_log(method, owner, args, kwargs)
        if fn in _METHODS:
            return lambda logger, *args, **kwargs: record_log(fn, logger, args, kwargs)
    except TypeError:  # (an unhashable callable)
        return None
    return None


__all__ = ["log_", "lookaside", "record_log", "record_warn", "warn_"]
