"""IR: the values (proxies), ops (Symbol, BoundSymbol) and programs (Trace, printed as Python by codegen) every
stage works on. It imports nothing above it (only jitcore.errors): the ops it records through itself are found in
tables jitcore/ops fills at import (proxies.IR_OPS, TENSOR_METHODS, METHOD_FALLBACKS; symbol.register_autocast).
"""
