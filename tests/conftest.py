"""Test configuration: the whole suite runs with the trace checker on (jitcore/ir/lint.py), so every trace a test
compiles -- each pass's computation trace, the backward's, the prologues, the epilogue -- is linted; compiled regions
are not cached on disk."""
import os

from jitcore.ir import lint

lint.CHECK = True
# compiled regions are not read from or written to the cache on disk (executors/inductor_kernels.py): tests count
# compiles, and every run of the suite starts cold (tests/test_package_kernels.py turns it on where it is the subject)
os.environ["JITCORE_REGION_CACHE"] = "0"
