"""jitcore (temporary during bring-up)."""
