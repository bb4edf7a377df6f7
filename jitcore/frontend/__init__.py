"""Frontend stage: tracing one call. `tracing.py` is the interpreter's host (JitContext: turns the call's values into
proxies and torch callables into ops, records the guards) and `trace_function`, which gives the computation trace and
what a call must supply and check; `layouts.py` answers stride questions by replaying lines on meta tensors;
`standins.py` and `arrays.py` are what some torch callables and numpy arrays become inside a trace; `ndarrays.py`,
`numpy_table.py`, `numpy_shapes.py` and `numpy_calls.py` trace numpy on tensors (`x.numpy()`) as torch ops.
"""
