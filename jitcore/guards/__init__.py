"""Guards stage: from a traced call's provenance and assumptions, the prologue programs that decide cache hits
(kinds.py: the guard kinds, one row each; prologue.py, values.py, module_guards.py, module_state.py,
data_guards.py, predicates.py), eager's binding errors (binding.py), and the per-function cache that owns the one
lookup of every call (cache.py).
"""
