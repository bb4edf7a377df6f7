"""Ops: torch-level linear algebra (matmul, mm, bmm, mv, dot, outer, addmm, baddbmm, einsum, tensordot, norms,
cdist, kron, trace, cross). Products lower to prims.matmul; einsum parses its equation ('...', implicit output)
into diagonals, sums, permutes and batched matmuls. Decompositions (inv, svd, qr, solve, det) stay opaque.
"""
from __future__ import annotations

import math

import torch

from jitcore.ir import dtypes
from jitcore.ir.proxies import TensorProxy
from jitcore.ops import nn_helpers as nh
from jitcore.ops import prims_complex as pcx
from jitcore.ops import prims_nn as pn
from jitcore.ops import prims_shape as ps
from jitcore.ops.opaque import opaque_symbol
from jitcore.ops.registry import torchsymbol
from jitcore.ops.torch_elementwise import (
    abs,
    add,
    broadcast,
    clamp_min,
    expand_to,
    mul,
    sqrt,
    sub,
    to_dtype,
)
from jitcore.ops.torch_reduction import vector_norm
from jitcore.ops.utils import broadcast_shapes, check

T = torch.Tensor
_DTNAME = {torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16", torch.float16: "Half",
           torch.int64: "Long", torch.int32: "Int"}


def _same_dtype(op, a, b):
    check(isinstance(a, TensorProxy) and isinstance(b, TensorProxy),
          lambda: f"{op}: expected two tensors, got {type(a).__name__} and {type(b).__name__}")
    check(a.dtype == b.dtype, lambda: f"{op}: expected m1 and m2 to have the same dtype, but got: "
                                      f"{_DTNAME.get(a.dtype, a.dtype)} != {_DTNAME.get(b.dtype, b.dtype)}")


@torchsymbol(torch.matmul, T.matmul, T.__matmul__, torch.linalg.matmul, method=("matmul", "__matmul__"),
             id="ltorch.matmul")
def matmul(input, other):
    _same_dtype("matmul", input, other)
    return pn.matmul(input, other)


@torchsymbol(T.__rmatmul__, method="__rmatmul__", id="ltorch.rmatmul")
def rmatmul(input, other):
    return matmul(other, input)


def _ranks(op, expected, *named):
    for (what, t), r in zip(named, expected):
        if not (isinstance(t, TensorProxy) and t.ndim == r):
            check(False, f"{op}: {what} must be a {r}-D tensor, got shape {tuple(getattr(t, 'shape', ()))}")


@torchsymbol(torch.mm, T.mm, method="mm", id="ltorch.mm")
def mm(input, mat2):
    _ranks("mm", (2, 2), ("self", input), ("mat2", mat2))
    check(input.shape[1] == mat2.shape[0],
          lambda: f"mm: mat1 and mat2 shapes cannot be multiplied "
                  f"({input.shape[0]}x{input.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})")
    return matmul(input, mat2)


@torchsymbol(torch.bmm, T.bmm, method="bmm", id="ltorch.bmm")
def bmm(input, mat2):
    _ranks("bmm", (3, 3), ("batch1", input), ("batch2", mat2))
    check(input.shape[0] == mat2.shape[0] and input.shape[2] == mat2.shape[1],
          lambda: f"bmm: batch1 {tuple(input.shape)} and batch2 {tuple(mat2.shape)} shapes cannot be multiplied")
    return matmul(input, mat2)


@torchsymbol(torch.mv, T.mv, method="mv", id="ltorch.mv")
def mv(input, vec):
    _ranks("mv", (2, 1), ("self", input), ("vec", vec))
    check(input.shape[1] == vec.shape[0], lambda: f"mv: size mismatch, got input ({input.shape[0]}), mat "
                                                 f"({input.shape[0]}x{input.shape[1]}), vec ({vec.shape[0]})")
    return matmul(input, vec)


@torchsymbol(torch.dot, T.dot, method="dot", id="ltorch.dot")
def dot(input, tensor):
    _ranks("dot", (1, 1), ("self", input), ("tensor", tensor))
    check(input.dtype == tensor.dtype, lambda: f"dot : expected both vectors to have same dtype, but found "
                                               f"{_DTNAME.get(input.dtype)} and {_DTNAME.get(tensor.dtype)}")
    check(input.shape[0] == tensor.shape[0],
          lambda: f"inconsistent tensor size, expected tensor [{input.shape[0]}] and src [{tensor.shape[0]}] to have "
                  f"the same number of elements, but got {input.shape[0]} and {tensor.shape[0]} elements respectively")
    return matmul(input, tensor)


@torchsymbol(torch.vdot, T.vdot, method="vdot", id="ltorch.vdot")
def vdot(input, other):
    return dot(pcx.conj(input) if input.dtype.is_complex else input, other)


@torchsymbol(torch.outer, T.outer, torch.ger, T.ger, method=("outer", "ger"), id="ltorch.outer")
def outer(input, vec2):
    _ranks("outer", (1, 1), ("self", input), ("vec2", vec2))
    return mul(nh.unsqueeze(input, 1), nh.unsqueeze(vec2, 0))


def _scaled_sum(op, input, product, beta, alpha):
    """beta * input + alpha * product; input is ignored when beta == 0 (nan in it does not propagate)."""
    if alpha != 1:
        product = mul(product, alpha)
    if beta == 0:
        return to_dtype(expand_to(product, product.shape), product.dtype)
    check(broadcast_shapes(op, input.shape, product.shape) == tuple(product.shape),
          lambda: f"{op}: input {tuple(input.shape)} does not broadcast to the product's shape {tuple(product.shape)}")
    return add(mul(input, beta) if beta != 1 else input, product)


@torchsymbol(torch.addmm, T.addmm, method="addmm", id="ltorch.addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return _scaled_sum("addmm", input, mm(mat1, mat2), beta, alpha)


@torchsymbol(torch.addmv, T.addmv, method="addmv", id="ltorch.addmv")
def addmv(input, mat, vec, *, beta=1, alpha=1):
    return _scaled_sum("addmv", input, mv(mat, vec), beta, alpha)


@torchsymbol(torch.baddbmm, T.baddbmm, method="baddbmm", id="ltorch.baddbmm")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha)


@torchsymbol(torch.addbmm, T.addbmm, method="addbmm", id="ltorch.addbmm")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _scaled_sum("addbmm", input, nh.sum_(bmm(batch1, batch2), 0), beta, alpha)


@torchsymbol(torch.addr, T.addr, method="addr", id="ltorch.addr")
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    return _scaled_sum("addr", input, outer(vec1, vec2), beta, alpha)


# -- einsum ---------------------------------------------------------------------------------------------------------
def _parse_einsum(equation: str, operands):
    """(per-operand label lists, output labels, label -> size); '...' dims get labels '.0', '.1', ..."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    check(len(terms) == len(operands), lambda: "einsum(): {} operands were provided than specified in the equation"
          .format("more" if len(operands) > len(terms) else "fewer"))
    n_ell = max((op.ndim - len(t.replace("...", "")) for t, op in zip(terms, operands) if "..." in t), default=0)
    labels, sizes = [], {}
    for t, op in zip(terms, operands):
        letters = t.replace("...", "")
        check(all(c.isalpha() for c in letters), lambda: f"einsum(): invalid subscript given at index in '{equation}'")
        k = op.ndim - len(letters)
        if not (k == 0 or ("..." in t and k >= 0)):
            check(False, f"einsum(): the number of subscripts in the equation ({len(letters)}) does not match the "
                         f"number of dimensions ({op.ndim}) for operand and no ellipsis was given")
        head, _, tail = t.partition("...")
        labs = list(head) + [f".{n_ell - k + i}" for i in range(k)] + list(tail)
        for lab, s in zip(labs, op.shape):
            old = sizes.get(lab, 1)
            if not (old == 1 or s == 1 or old == s):
                check(False, f"einsum(): operands do not broadcast with remapped shapes (original->remapped) for "
                             f"label {lab!r}: {old} vs {s}")
            sizes[lab] = s if lab not in sizes or old == 1 else old
        labels.append(labs)
    ell = [f".{i}" for i in range(n_ell)]
    if arrow:
        head, _, tail = rhs.partition("...")
        out = list(head) + (ell if "..." in rhs else []) + list(tail)
        check(len(set(out)) == len(out), lambda: f"einsum(): output subscript appears more than once in '{equation}'")
        check(all(o in sizes or o.startswith(".") for o in out),
              lambda: f"einsum(): output subscript does not appear in the equation for any input operand: {equation}")
    else:
        counts = {}
        for labs in labels:
            for lab in labs:
                counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(lab for lab, c in counts.items() if c == 1 and not lab.startswith("."))
    return labels, out, sizes


def _diagonal(a, labs):
    """Repeated labels in one operand ('ii') become one dim holding the diagonal."""
    while len(set(labs)) < len(labs):
        lab = next(x for x in labs if labs.count(x) > 1)
        i, j = [k for k, x in enumerate(labs) if x == lab][:2]
        rest = [k for k in range(a.ndim) if k not in (i, j)]
        a = nh.permute(a, rest + [i, j])
        n = a.shape[-1]
        flat = ps.reshape(a, tuple(a.shape[:-2]) + (n * n,))
        a = nh.slice_dim(flat, flat.ndim - 1, 0, n * n, n + 1) if n > 0 else ps.reshape(flat, tuple(a.shape[:-1]))
        labs = [labs[k] for k in rest] + [lab]
    return a, labs


def _sum_labels(a, labs, drop):
    dims = tuple(k for k, x in enumerate(labs) if x in drop)
    if not dims:
        return a, labs
    return nh.sum_(a, dims), [x for x in labs if x not in drop]


def _contract(a, la, b, lb, needed, sizes):
    """a * b summed over labels neither later operands nor the output need; one batched matmul."""
    batch = [x for x in la if x in lb and x in needed]
    contracted = [x for x in la if x in lb and x not in needed]
    a_only = [x for x in la if x not in lb]
    b_only = [x for x in lb if x not in la]

    def arrange(t, labs, groups):
        order = [x for g in groups for x in g]
        t = nh.permute(t, [labs.index(x) for x in order])
        t = expand_to(t, tuple(sizes[x] if x in batch or x in contracted else t.shape[i] for i, x in enumerate(order)))
        return ps.reshape(t, tuple(math.prod(sizes[x] if x in batch or x in contracted else t.shape[order.index(x)]
                                             for x in g) for g in groups))

    a2 = arrange(a, la, (batch, a_only, contracted))
    b2 = arrange(b, lb, (batch, contracted, b_only))
    # a product summing over labels is a batched matmul (autocast reaches it, as eager's bmm); one summing over none
    # is an elementwise product, as in eager
    out = matmul(a2, b2) if contracted else mul(a2, b2)
    shape = tuple(sizes[x] for x in batch) + tuple(a.shape[la.index(x)] for x in a_only) + \
        tuple(b.shape[lb.index(x)] for x in b_only)
    return ps.reshape(out, shape), batch + a_only + b_only


@torchsymbol(torch.einsum, id="ltorch.einsum")
def einsum(*args):
    check(len(args) >= 1 and isinstance(args[0], str), "einsum(): must specify the equation string and at least one "
                                                       "operand, or at least one operand and its subscripts list")
    equation, operands = args[0], list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    check(len(operands) >= 1 and all(isinstance(o, TensorProxy) for o in operands),
          "einsum(): must provide at least one operand")
    check(len({o.dtype for o in operands}) == 1,
          lambda: f"einsum(): expected all operands to have the same dtype, got {[o.dtype for o in operands]}")
    labels, out, sizes = _parse_einsum(equation, operands)
    ops = []
    for i, (op, labs) in enumerate(zip(operands, labels)):
        op, labs = _diagonal(op, labs)
        others = {x for j, ls in enumerate(labels) if j != i for x in ls}
        op, labs = _sum_labels(op, labs, {x for x in labs if x not in out and x not in others})
        ops.append((op, labs))
    a, la = ops[0]
    for k in range(1, len(ops)):
        b, lb = ops[k]
        needed = set(out) | {x for _, ls in ops[k + 1:] for x in ls}
        a, la = _contract(a, la, b, lb, needed, sizes)
    a, la = _sum_labels(a, la, {x for x in la if x not in out})
    a = nh.permute(a, [la.index(x) for x in out if x in la])
    return expand_to(a, tuple(sizes.get(x, 1) for x in out))


@torchsymbol(torch.tensordot, id="ltorch.tensordot")
def tensordot(a, b, dims=2, out=None):
    check(out is None, "tensordot: out= is not supported")
    if isinstance(dims, int):
        check(dims >= 0, lambda: f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da, db = [d % a.ndim for d in da], [d % b.ndim for d in db]
    check(len(da) == len(db), "both dimension lists should have same length")
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:  # a size 1 against another broadcasts: the other side is summed there first
            if b.shape[y] == 1:
                a = nh.sum_(a, (x,), keepdim=True)
            elif a.shape[x] == 1:
                b = nh.sum_(b, (y,), keepdim=True)
            else:
                check(False, f"contracted dimensions need to match, but first has size {a.shape[x]} in dim {x} and "
                             f"second has size {b.shape[y]} in dim {y}")
    ra, rb = [d for d in range(a.ndim) if d not in da], [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    a2 = ps.reshape(nh.permute(a, ra + da), (math.prod(a.shape[d] for d in ra), k))
    b2 = ps.reshape(nh.permute(b, db + rb), (k, math.prod(b.shape[d] for d in rb)))
    _same_dtype("tensordot", a2, b2)
    return ps.reshape(matmul(a2, b2), tuple(a.shape[d] for d in ra) + tuple(b.shape[d] for d in rb))


# -- norms and distances ----------------------------------------------------------------------------------------
@torchsymbol(torch.linalg.matrix_norm, id="ltorch.matrix_norm")
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    check(A.ndim >= 2, lambda: f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions, got shape "
                               f"{tuple(A.shape)}")
    d0, d1 = nh.dims_of(A, dim)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim, dtype=dtype)
    if ord not in (1, -1, math.inf, -math.inf):  # 'nuc', 2, -2 need singular values: eager's kernel
        return opaque_symbol(torch.linalg.matrix_norm)(A, ord, dim, keepdim, dtype=dtype)
    if dtype is not None:
        A = to_dtype(A, dtype)
    summed, reduced = (d0, d1) if ord in (1, -1) else (d1, d0)
    s = nh.sum_(abs(nh.upcast(A)), summed, keepdim=True)
    m = (nh.amax if ord > 0 else nh.amin)(s, reduced, keepdim=True)
    if not keepdim:
        m = ps.squeeze(m, (d0, d1))
    return to_dtype(m, dtypes.to_real(A.dtype))


@torchsymbol(torch.linalg.norm, id="ltorch.linalg_norm")
def linalg_norm(input, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):
    check(out is None, "linalg.norm: out= is not supported")
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        if dim is not None and len(dim) == 2:
            return matrix_norm(input, "fro", dim, keepdim, dtype=dtype)
        return vector_norm(input, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        check(input.ndim in (1, 2), lambda: f"linalg.norm: If dim is not specified but ord is, the input must be 1D "
                                            f"or 2D. Got {input.ndim}D.")
        dim = tuple(range(input.ndim))
    if len(dim) == 1:
        check(not isinstance(ord, str), lambda: f"linalg.vector_norm: ord {ord!r} is not a vector norm")
        return vector_norm(input, ord, dim, keepdim, dtype=dtype)
    return matrix_norm(input, ord, dim, keepdim, dtype=dtype)


@torchsymbol(torch.dist, T.dist, method="dist", id="ltorch.dist")
def dist(input, other, p=2):
    a, b = nh.float_pair(input, other, "dist")
    return vector_norm(sub(a, b), p)


@torchsymbol(torch.cdist, id="ltorch.cdist")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    check(x1.ndim >= 2 and x2.ndim >= 2, lambda: f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D and "
                                                 f"X2 got: {x2.ndim}D")
    check(x1.shape[-1] == x2.shape[-1], lambda: f"X1 and X2 must have the same number of columns. X1: "
                                                f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    nh.check_float("cdist", x1)
    check(p >= 0, lambda: f"cdist only supports non-negative p values, got {p}")
    r1, r2 = x1.shape[-2], x2.shape[-2]
    use_mm = compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == "use_mm_for_euclid_dist_if_necessary" and (r1 > 25 or r2 > 25))
    if p == 2 and use_mm:
        n1 = nh.sum_(mul(x1, x1), -1, keepdim=True)
        n2 = nh.swap(nh.sum_(mul(x2, x2), -1, keepdim=True), x2.ndim - 2, x2.ndim - 1)
        prod = matmul(x1, nh.swap(x2, x2.ndim - 2, x2.ndim - 1))
        d2 = add(sub(n1, mul(prod, 2)), n2)
        return sqrt(clamp_min(d2, 0))
    diff = sub(nh.unsqueeze(x1, -2), nh.unsqueeze(x2, -3))
    return vector_norm(diff, p, -1)


@torchsymbol(torch.kron, T.kron, method="kron", id="ltorch.kron")
def kron(input, other):
    n = max(input.ndim, other.ndim)
    sa = (1,) * (n - input.ndim) + tuple(input.shape)
    sb = (1,) * (n - other.ndim) + tuple(other.shape)
    a = ps.reshape(input, tuple(x for s in sa for x in (s, 1)))
    b = ps.reshape(other, tuple(x for s in sb for x in (1, s)))
    return ps.reshape(mul(a, b), tuple(x * y for x, y in zip(sa, sb)))


@torchsymbol(torch.trace, T.trace, method="trace", id="ltorch.trace")
def trace(input):
    check(input.ndim == 2, lambda: f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    n, m = input.shape
    k = min(n, m)
    flat = nh.flatten(input)
    diag = nh.slice_dim(flat, 0, 0, (k - 1) * (m + 1) + 1, m + 1) if k > 0 else nh.slice_dim(flat, 0, 0, 0)
    if dtypes.category(input.dtype) < 2:
        diag = to_dtype(diag, torch.int64)
    return nh.sum_(diag)


@torchsymbol(torch.linalg.cross, id="ltorch.linalg_cross")
def linalg_cross(input, other, *, dim=-1):
    check(input.ndim == other.ndim, lambda: f"linalg.cross: inputs must have the same number of dimensions, got "
                                            f"{input.ndim} and {other.ndim}")
    a, b = broadcast(*(to_dtype(t, dtypes.promote_dtypes(input, other)) for t in (input, other)), op="linalg.cross")
    d = nh.dims_of(a, dim)[0]
    check(a.shape[d] == 3, lambda: f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[d]} "
                                   f"and {other.shape[d]}")
    ai = [nh.slice_dim(a, d, i, i + 1) for i in range(3)]
    bi = [nh.slice_dim(b, d, i, i + 1) for i in range(3)]
    parts = [sub(mul(ai[(i + 1) % 3], bi[(i + 2) % 3]), mul(ai[(i + 2) % 3], bi[(i + 1) % 3])) for i in range(3)]
    return ps.cat(parts, d)


@torchsymbol(torch.cross, T.cross, method="cross", id="ltorch.cross")
def cross(input, other, dim=None):
    if dim is None:  # deprecated default: the first dim of size 3
        shape = torch.broadcast_shapes(input.shape, other.shape)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        check(dim is not None, lambda: f"no dimension of size 3 in input {tuple(input.shape)}")
    return linalg_cross(input, other, dim=dim)


@torchsymbol(torch.linalg.vecdot, id="ltorch.vecdot")
def vecdot(x, y, *, dim=-1, out=None):
    check(out is None, "linalg.vecdot: out= is not supported")
    prod = mul(pcx.conj(x) if x.dtype.is_complex else x, y)
    check(prod.ndim >= 1, "linalg.vecdot: expected at least 1-D inputs")
    return nh.sum_(prod, dim)
