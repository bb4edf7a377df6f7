"""IR: which ops are views in eager, by op id. Functionalization follows writes through them, the layout oracle
replays them, and tracing keeps a view made under no_grad a tensor of its own. Imports nothing.
"""
from __future__ import annotations

# prims that only re-index their (single) tensor input: reading through them is a view in eager
# (stop_gradient too: detach() and .data share their input's memory, and writes through them reach it)
VIEW_PRIMS = frozenset({"prims.reshape", "prims.transpose", "prims.squeeze", "prims.slice", "prims.broadcast_in_dim",
                        "prims.stop_gradient", "prims.as_strided",
                        # complex views, which change the dtype (jitcore/ops/prims_complex.py)
                        "prims.conj", "prims.real", "prims.imag", "prims.view_as_real", "prims.view_as_complex"})
# torch-level ops that are views in eager (when their decomposition is view prims only)
VIEW_OPS = frozenset({f"ltorch.{n}" for n in (
    "view", "reshape", "view_as", "reshape_as", "flatten", "unflatten", "ravel", "squeeze", "unsqueeze", "transpose",
    "swapaxes", "swapdims", "permute", "movedim", "t", "T", "mT", "adjoint", "expand", "expand_as", "broadcast_to",
    "narrow", "select", "getitem", "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "hsplit",
    "vsplit", "dsplit", "atleast_1d", "atleast_2d", "atleast_3d", "diagonal", "detach", "data",
    "broadcast_tensors",
    "meshgrid", "conj", "real", "imag", "view_as_real", "view_as_complex", "H", "mH")} | VIEW_PRIMS)
# view ops whose other tensor argument gives only a shape: the view is of the first
LIKE_OPS = frozenset({"ltorch.view_as", "ltorch.reshape_as", "ltorch.expand_as"})
# view ops returning several views of one tensor: eager refuses a write or an in-place metadata change autograd
# records into them (or into views of them)
MULTI_VIEW_OPS = frozenset(f"ltorch.{n}" for n in (
    "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "hsplit", "vsplit", "dsplit"))
# those whose pieces eager marks as outputs of a multi-output view (autograd refuses in-place writes and metadata
# changes of them, and views of them, when grad is recorded); tensor_split and h/v/dsplit are made of slices eager
# lets one write (checked on torch 2.10, 2.13, 2.15)
MULTI_OUTPUT_VIEW_OPS = frozenset(f"ltorch.{n}" for n in ("split", "split_with_sizes", "chunk", "unbind"))
# view ops that give back their input itself where they view nothing (x.real, x.conj() of a real x, x.flatten() of a
# 1-d x or flatten(x, d, d)): eager's result is that same tensor, under no_grad too (it keeps requiring grad and passes
# gradients on)
SAME_TENSOR_VIEW_OPS = frozenset({"ltorch.real", "ltorch.conj", "ltorch.flatten"})
# view ops of several tensors: each output views the input it is made from (viewed_tensor follows it back)
MULTI_INPUT_VIEW_OPS = frozenset(f"ltorch.{n}" for n in ("atleast_1d", "atleast_2d", "atleast_3d", "broadcast_tensors",
                                                         "meshgrid"))
