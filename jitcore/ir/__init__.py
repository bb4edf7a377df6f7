"""IR: the values (proxies), ops (Symbol, BoundSymbol) and programs (Trace, printed as Python by codegen) every
stage works on. It imports nothing above it (only jitcore.errors): the ops it records through itself are found in
tables jitcore/ops fills at import, each only through its module's register_* function (proxies.register_ir_op,
register_tensor_method, METHOD_FALLBACKS.register; codegen.register_namespace_import; symbol.register_autocast).
"""
