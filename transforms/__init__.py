"""Transforms: passes over traces (autodiff, dce, cse, del-last-used). Each returns a new trace."""
