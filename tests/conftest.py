"""Test configuration: the whole suite runs with the trace checker on (jitcore/ir/lint.py), so every trace a test
compiles -- each pass's computation trace, the backward's, the prologues, the epilogue -- is linted."""
from jitcore.ir import lint

lint.CHECK = True
