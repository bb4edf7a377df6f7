"""Benchmarks: the demo (main job), the benchmark runner and its dashboard. Not part of the installed package."""
