"""The fuzzer's statement templates (tests/fuzz.py): source fragments with {v}/{d}/{o}/... holes the generator fills,
one tuple per kind of statement, and the torch.autograd.Function subclasses its programs may call.
"""
from __future__ import annotations

import torch

UNARY = ("sin", "cos", "tanh", "sigmoid", "exp", "neg", "abs", "relu", "float", "long", "bool", "half", "double",
         "logical_not", "square", "sign")
BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "torch.maximum({a}, {b})",
          "torch.where({a} > 0, {a}, {b})", "{a} > {b}", "{a} == {b}",
          "torch.add({a}, {b}, alpha=2)", "{a} * {b} + {a}")
REDUCTIONS = ("{v}.sum({d})", "{v}.sum({d}, keepdim=True)", "{v}.mean({d})", "{v}.mean({d}, keepdim=True)",
              "{v}.amax({d})", "{v}.amax({d}, keepdim=True)", "{v}.var({d})", "{v}.var({d}, keepdim=True)",
              "{v}.sum()", "{v}.std({d}, correction=0)", "{v}.sum({d}, dtype=torch.float64)", "{v}.amin()",
              "torch.sum({v}, dim=(0, -1))", "{v}.var(correction=0)")
VIEWS = ("{v}[1]", "{v}[:, 1]", "{v}[1:]", "{v}[::2]", "{v}[:, :2]", "{v}[..., 0]", "{v}.select({d}, 1)",
         "{v}.narrow({d}, 0, 2)", "{v}.view(-1)", "{v}.reshape(-1)", "{v}.permute({perm})", "{v}.transpose(0, -1)",
         "{v}.t()", "{v}.diagonal()", "{v}.unsqueeze(0).expand(2, *{v}.shape)", "{v}.unsqueeze({d})",
         "{v}.unsqueeze(0).squeeze(0)", "{v}.unbind({d})[1]", "{v}.split(2, {d})[0]", "{v}.chunk(2, {d})[1]",
         "{v}.view({v}.shape[0], -1)", "{v}.flatten()", "{v}[0, 1:]", "{v}.mT")
INPLACE = ("{t}.add_({o})", "{t}.mul_({o})", "{t}.zero_()", "{t}.copy_({o})", "{t}.sub_({o}, alpha=2)",
           "{t}.clamp_(min=0)", "{t}.fill_(1)", "{t}.div_(2)",
           # out= into the tensor itself (the result has its shape and dtype)
           "torch.sin({t}, out={t})", "torch.mul({t}, 2, out={t})", "torch.clamp({t}, min=0, out={t})")
# out= into a new buffer: `{n} = torch.empty_like({v}); <op>(..., out={n})`
OUT = ("torch.exp({v}, out={n})", "torch.add({v}, {o}, out={n})", "torch.cumsum({v}, 0, out={n})",
       "torch.abs({v}, out={n})", "torch.mul({v}, {o}, out={n})")
SETITEM = ("{v}[0] = {o}", "{v}[::2] = {o}", "{v}[:, 1] = {o}", "{v}[1:] = {o}", "{v}[..., 0] = {o}", "{v}[:] = {o}",
           "{v}[{v} > 0] = {o}", "{v}[{v} < 0] = 0")
INDEXING = ("torch.index_select({v}, {d}, torch.tensor([0, 2, 1]))", "{v}.gather({d}, {v}.argsort({d}))",
            "{v}[torch.tensor([1, 0])]", "{v}[:, [0, 2]]",
            "torch.gather({v}, {d}, torch.zeros_like({v}, dtype=torch.long))",
            "{v}[{v} > 0]", "{v}.masked_fill({v} > 0, 0.5)", "torch.take_along_dim({v}, {v}.argsort(0), dim=0)",
            # data-dependent sizes (known only at run time)
            "torch.masked_select({v}, {v} < 0) * 2", "{v}.nonzero()", "{v}[({v} > 0).flatten(1).any(-1)]",
            "torch.unique({v}.detach().round())", "{v}.flatten().repeat_interleave(({v}.flatten() > 0).long() + 1)",
            "{v}[{v} > 0].sum()", "torch.where({v} > 0)[0].float()")
RANDOM = ("torch.rand_like({v}) + {v}", "torch.nn.functional.dropout({v}, p=0.5, training=True)",
          "{v} * torch.randn({v}.shape)", "torch.randn_like({v}) * {v}", "{v} * random.random()",
          "{v} + random.randint(0, 9)", "torch.bernoulli(torch.full_like({v}, 0.5)) * {v}")
# in-place fills: eager visits the filled tensor's own memory in order (a layout empty_like keeps, a view). Chosen
# instead of a RANDOM template, in programs of seeds divisible by 4 only, by a side generator (Generator.side): the
# programs of other seeds are those from before the fills were added (seeds named in issues and commits still
# reproduce their programs)
FILLS = ("torch.empty_like({v}).normal_() * {v}",
         "{v}.detach().exp().transpose(0, -1).uniform_().transpose(0, -1) + {v}")
SPECIAL = ("torch.linalg.norm({v})", "{v}.std(correction=0)", "torch.linalg.vector_norm({v}, dim=-1)",
           "torch.linalg.multi_dot([{v}, {v}.mT, {v}])", "torch.nextafter({v}, {v} * 2)",
           "torch.nn.functional.embedding_bag(torch.tensor([0, 1, 2, 1]), {v}, torch.tensor([0, 2]))",
           # (weights of the shapes torch checks nowhere: w_ih [gates * 2, {v}'s last size], w_hh [gates * 2, 2];
           # a wrong one reads and writes out of bounds in eager itself, on any {v} with a size-1 dim)
           "torch.lstm({v}.unsqueeze(1), (torch.zeros(1, 1, 2), torch.zeros(1, 1, 2)), [{v}[:1].repeat(8, 1), "
           "{v}[:1, :1].repeat(8, 2)], False, 1, 0.0, False, False, False)[0]",
           "torch.rnn_tanh({v}.unsqueeze(1), torch.zeros(1, 1, 2), [{v}[:1].repeat(2, 1), {v}[:1, :1].repeat(2, 2)], "
           "False, 1, 0.0, False, False, False)[0]",
           "torch.stack([{v}, {v} * 2]).sum(0)", "torch.einsum('ij,kj->ik', {v}, {v})",
           "{v} * ({v}.data_ptr() != 0)", "{v}.view(-1)[:2]", "torch.cdist({v}, {v})",
           "({v} * 0).std(correction=0)", "torch.linalg.norm({v} * 0)", "torch.linalg.vector_norm({v} - {v}, dim=0)")
# the step of a loop writing into views (loop_stmt): {cur} is the view at step i, {prev} the one before it
LOOP_BODIES = ("{cur}.add_({prev})", "{cur}.mul_({prev}.sigmoid())", "{cur}.copy_({prev} * 0.5 + {cur})",
               "{cur}.sub_({prev}, alpha=0.5)", "{cur}.addcmul_({prev}, {prev}, value=0.1)", "{cur}.clamp_(min=-0.5)",
               "{cur}[...] = {prev}.tanh()", "{n}.narrow({d}, i, 1).div_(2)", "{cur}.add_({n}.select({d}, 0) * i)")
SCALARS = ("2", "0.5", "-1.5", "True", "3", "s0", "k", "{v}.shape[0]", "-2")


# torch.autograd.Function subclasses a program may call: their backward is the user's, not the forward's derivative
class _Ste(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 2) / 2

    @staticmethod
    def backward(ctx, g):
        return g


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 2  # (not 3 x^2)


class _Mask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mask = torch.rand_like(x) > 0.5
        ctx.save_for_backward(mask)
        return torch.where(mask, x, x * 0.25)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, g * 1.5, g)


FUNCTIONS = {"_Ste": _Ste, "_Cube": _Cube, "_Mask": _Mask}
SPECIAL = SPECIAL + ("_Ste.apply({v})", "_Cube.apply({v})", "_Mask.apply({v})")
