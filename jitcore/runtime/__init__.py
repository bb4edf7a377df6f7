"""Runtime stage: running a compiled call. `autograd.py` wraps forward and backward programs in one
torch.autograd.Function, `epilogue.py` writes back what the function changed outside itself, `fsdp_units.py` drives
FSDP2's sharded parameters around a call, `disk_cache.py` is jitcore's cache folder on disk.
"""
