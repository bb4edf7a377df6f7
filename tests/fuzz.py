"""Differential fuzzer: seeded random PyTorch programs, generated as Python source, run eagerly and under
`jitcore.jit` (every cache mode, sometimes with Inductor) and compared call by call: outputs, gradients, inputs
after the call, RNG state, printed text. A failure prints its seed and a command that reproduces it:

    python -m tests.fuzz --seed 1234 --cache "symbolic values"      # one program: its text, eager vs jit
    python -m tests.fuzz --start 0 --count 500                       # a sweep, with a summary of failures
"""
from __future__ import annotations

import argparse
import contextlib
import io
import linecache
import random
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import ClassVar

import torch

import jitcore
from jitcore.errors import JitError
from jitcore.ir import lint
from tests import fuzz_classes
from tests.fuzz_templates import (
    BINARY,
    FILLS,
    FUNCTIONS,
    INDEXING,
    INPLACE,
    LOOP_BODIES,
    OUT,
    RANDOM,
    REDUCTIONS,
    SCALARS,
    SETITEM,
    SPECIAL,
    UNARY,
    VIEWS,
)

CACHE_MODES = ("constant values", "symbolic values", "no caching")
SIZE_CHOICES = (3, 4, 5, 6)  # every variable dim is >= 3, so the indices and narrows below fit every variant
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "i64": torch.int64, "b": torch.bool}
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class FuzzFailure(AssertionError):
    """eager and jit disagree on a generated program (the message holds the program and a repro command)."""


# -- the generated program ----------------------------------------------------------------------------------------
@dataclass
class InputSpec:
    dims: tuple  # each a size symbol ("A", "B", "C") or a fixed int
    dtype: str
    requires_grad: bool
    pattern: str  # "randn", "zeros", "rows" (every row constant), "ints"


@dataclass
class Program:
    seed: int
    source: str
    inputs: list
    scalar: float | int  # the value of the positional Python scalar s0
    default_k: int  # the default of the keyword k
    calls: list = field(default_factory=list)  # CallPlan per call

    @property
    def low_precision(self) -> bool:
        return any(s.dtype == "f16" for s in self.inputs) or any(w in self.source for w in ("half", "bfloat16"))

    def function(self):
        filename = f"<fuzz seed {self.seed}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        ns = {"torch": torch, "random": random, **FUNCTIONS}
        exec(compile(self.source, filename, "exec"), ns)
        return ns["f"]


@dataclass
class CallPlan:
    sizes: dict  # size symbol -> int
    seed: int  # values of the inputs, torch.manual_seed and random.seed of the call
    grad: bool  # grad mode around the call
    k: str  # "omit", "same" (k=default), "other" (k=default+1), "positional"
    transposed: bool  # 2-d inputs passed as a transposed (non-contiguous) tensor
    no_requires_grad: bool = False  # inputs that require grad elsewhere are passed without it


def make_args(prog: Program, plan: CallPlan):
    gen = torch.Generator().manual_seed(plan.seed)
    args = [_make_tensor(spec, plan, gen) for spec in prog.inputs]
    args.append(prog.scalar)
    kwargs = {}
    if plan.k == "same":
        kwargs["k"] = prog.default_k
    elif plan.k == "other":
        kwargs["k"] = prog.default_k + 1
    elif plan.k == "positional":
        args.append(prog.default_k + 1)
    return args, kwargs


def _make_tensor(spec: InputSpec, plan: CallPlan, gen):
    shape = [plan.sizes[d] if isinstance(d, str) else d for d in spec.dims]
    transpose = plan.transposed and len(shape) == 2
    if transpose:
        shape = shape[::-1]
    if spec.pattern == "zeros":
        t = torch.zeros(shape)
    elif spec.pattern == "rows":
        t = torch.randn(shape[:-1] + [1], generator=gen).expand(shape).contiguous() if shape else torch.zeros(())
    elif spec.pattern == "ints":
        t = torch.randint(-4, 5, shape, generator=gen).float()
    else:
        t = torch.randn(shape, generator=gen)
    dtype = DTYPES[spec.dtype]
    t = (t > 0) if dtype is torch.bool else t.round() if dtype is torch.int64 else t
    t = t.to(dtype)
    if transpose:
        t = t.t()
    return t.requires_grad_(spec.requires_grad and not plan.no_requires_grad)


# -- statement templates (tests/fuzz_templates.py): each kind of statement's source fragments


class Generator:
    """Builds a program statement by statement, executing each candidate on sample inputs (a shadow run) and
    keeping only those eager accepts, so most programs are valid and the generator needs no shape rules."""

    def __init__(self, seed: int):
        self.seed, self.rng = seed, random.Random(seed)
        self.side = random.Random(f"{seed} side")  # choices added later, leaving self.rng's draws as they were
        self.classes = random.Random(f"classes {seed}")  # when and which statement class (tests/fuzz_classes.py)
        self.lines: list[str] = []
        self.exprs: list[tuple[str, bool]] = []  # (pure expression, under no_grad) for twins
        self.n = 0

    # the shadow run -------------------------------------------------------------------------------------------
    def _start(self):
        rng = self.rng
        sym = rng.sample(["A", "B", "C"], 3)
        n_in = rng.choice((1, 2, 2, 3))
        specs = []
        for _ in range(n_in):
            rank = rng.choice((1, 2, 2, 2, 3))
            dims = tuple(sym[:rank]) if rng.random() < 0.7 else tuple(rng.sample(sym, rank))
            dtype = rng.choices(list(DTYPES), weights=(10, 2, 2, 3, 2))[0]
            rg = dtype in ("f32", "f64") and rng.random() < 0.7
            pattern = rng.choices(("randn", "zeros", "rows", "ints"), weights=(10, 1, 2, 2))[0]
            specs.append(InputSpec(dims, dtype, rg, pattern))
        self.specs = specs
        self.scalar = rng.choice((2, 3, 0.5, -1.25))
        self.default_k = rng.choice((1, 2))
        sizes = dict(zip(sym, rng.sample((3, 4, 5), 3)))
        self.plan0 = CallPlan(sizes, 10_000 + self.seed, True, "omit", False)
        prog = Program(self.seed, "", specs, self.scalar, self.default_k)
        args, _ = make_args(prog, self.plan0)
        self.env = {"torch": torch, "random": random, "s0": self.scalar, "k": self.default_k, **FUNCTIONS}
        self.env.update({f"x{i}": a for i, a in enumerate(args[:-1])})

    def tensors(self, pred=None) -> list[str]:
        return [n for n, v in self.env.items() if isinstance(v, torch.Tensor) and (pred is None or pred(v))]

    def try_lines(self, lines: list[str]) -> bool:
        text = "\n".join(lines)
        saved = set(self.env)
        try:
            with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng():
                exec(compile(text, "<shadow>", "exec"), self.env)
        except Exception:
            for n in list(self.env):
                if n not in saved:
                    del self.env[n]
            return False
        self.lines += lines
        return True

    # pickers --------------------------------------------------------------------------------------------------
    def var(self, pred=None) -> str | None:
        names = self.tensors(pred)
        if not names:
            return None
        recent = names[-4:]
        return self.rng.choice(recent if self.rng.random() < 0.6 else names)

    def fresh(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def operand(self, v: str) -> str:
        rng = self.rng
        if rng.random() < 0.4:
            return rng.choice(SCALARS).format(v=v)
        shape = self.env[v].shape
        same = self.tensors(lambda t: t.shape == shape or t.dim() == 0 or t.shape[-1:] == shape[-1:])
        return rng.choice(same) if same else v

    def dim(self, v: str) -> int:
        return self.rng.randrange(-1, max(self.env[v].dim(), 1)) if self.env[v].dim() else 0

    def fill(self, template: str, v: str) -> str:
        rank = self.env[v].dim()
        perm = list(range(rank))
        self.rng.shuffle(perm)
        return template.format(v=v, d=self.dim(v), perm=", ".join(map(str, perm)) or "()", o=self.operand(v),
                               a=v, b=self.operand(v))

    # statements -----------------------------------------------------------------------------------------------
    def expr_stmt(self, kind: str) -> list[str] | None:
        v = self.var(lambda t: t.dim() > 0 or kind in ("unary", "binary"))
        if kind == "special" and self.rng.random() < 0.8:  # their gradients are the point: prefer a grad input
            v = self.var(lambda t: t.dim() > 0 and t.requires_grad) or v
        if v is None:
            return None
        table = {"unary": None, "binary": BINARY, "reduction": REDUCTIONS, "view": VIEWS, "indexing": INDEXING,
                 "random": RANDOM, "special": SPECIAL}[kind]
        if table is None:
            op = self.rng.choice(UNARY)
            expr = f"torch.{op}({v})" if op in ("sin", "exp", "relu", "abs") and self.rng.random() < 0.5 \
                else f"{v}.{op}()"
        else:
            expr = self.fill(self.rng.choice(table), v)
            if kind == "random" and self.seed % 4 == 0 and self.side.random() < 0.5:
                expr = self.fill(self.side.choice(FILLS), v)
        name = self.fresh()
        if self.try_lines([f"{name} = {expr}"]):
            if kind in ("unary", "binary", "reduction"):
                self.exprs.append((expr, False))
            return [name]
        return None

    def inplace_stmt(self) -> list[str] | None:
        rng = self.rng
        t = self.var(lambda x: x.dim() > 0)
        if t is None:
            return None
        target = self.fill(rng.choice(VIEWS), t) if rng.random() < 0.6 else t
        if rng.random() < 0.3:
            line = rng.choice(SETITEM).format(v=target if rng.random() < 0.3 else t, o=self.operand(t))
        else:
            line = rng.choice(INPLACE).format(t=target, o=self.operand(t))
        lines = [line]
        if rng.random() < 0.3 and target != t:  # name the view, write through the name
            name = self.fresh()
            lines = [f"{name} = {target}", line.replace(target, name, 1)]
        elif rng.random() < 0.2 and line.startswith(target + "."):  # keep what the in-place method hands back (the
            name = self.fresh()  # tensor it wrote: returned, it must be that tensor, as in eager)
            lines = [f"{name} = {line}"]
            return [name] if self.try_lines(lines) else None
        return lines if self.try_lines(lines) else None

    def out_stmt(self) -> list[str] | None:
        """A result written into a buffer with out= (under no_grad when an input requires grad: eager refuses out=
        through autograd)."""
        v = self.var(lambda x: x.dim() > 0 and x.dtype.is_floating_point)
        if v is None:
            return None
        name = self.fresh()
        call = self.rng.choice(OUT).format(v=v, n=name, o=self.operand(v))
        lines = [f"{name} = torch.empty_like({v})", call]
        if self.env[v].requires_grad:
            lines = [lines[0], "with torch.no_grad():", "    " + call]
        return [name] if self.try_lines(lines) else None

    def setitem_grad_stmt(self) -> list[str] | None:
        """`x[::2] = w * 2` on an input without grad, w from an input with grad."""
        dst = self.var(lambda x: x.dim() > 0 and not x.requires_grad and x.dtype.is_floating_point)
        src = self.var(lambda x: x.requires_grad)
        if dst is None or src is None:
            return None
        return [dst] if self.try_lines([f"{dst}[::2] = {src}.sum() * 2"]) else None

    def block_stmt(self, kind: str) -> list[str] | None:
        rng = self.rng
        v = self.var(lambda t: t.dim() > 0)
        if v is None:
            return None
        name = self.fresh()
        d = rng.randrange(self.env[v].dim())
        if kind == "if":
            e1, e2 = rng.sample(["{v} * 2", "{v} + 1", "{v} - s0", "{v}.abs()", "{v} * k"], 2)
            lines = [f"if {v}.shape[{d}] > {rng.choice((3, 4))}:", f"    {name} = {e1.format(v=v)}", "else:",
                     f"    {name} = {e2.format(v=v)}"]
        elif kind == "for":
            lines = [f"{name} = {v}.select({d}, 0) * 0", f"for i in range({v}.shape[{d}]):",
                     f"    {name} = {name} + {v}.select({d}, i) * i"]
        elif kind == "no_grad":
            inner = self.inner_lines(v, name)
            lines = ["with torch.no_grad():", *("    " + line for line in inner)]
        elif kind == "twin":
            if not self.exprs:
                return None
            expr, _ = rng.choice(self.exprs)
            lines = ["with torch.no_grad():", f"    {name} = {expr}"] if rng.random() < 0.5 else [f"{name} = {expr}"]
            lines += [f"{self.fresh()} = {expr}"]
        elif kind == "autocast":
            op = rng.choice(("{v} @ {v}.mT", "torch.nn.functional.linear({v}, {v})", "torch.mm({v}, {v}.t())",
                             "({v} @ {v}.mT).sum(-1)"))
            lines = ['with torch.autocast("cpu", dtype=torch.bfloat16):', f"    {name} = {op.format(v=v)}",
                     f"    {name} = {name} + {v}.sum()"]
        elif kind == "list":
            w = self.operand(v) if rng.random() < 0.5 else v
            lines = [f"feats = [{v}, {v} * 2]", f"{name} = torch.cat(feats)", f"feats.append({w})",
                     f"{self.fresh()} = torch.stack(feats[:2]).sum(0) + {name}[:{v}.shape[0]]"]
        elif kind == "print":
            lines = [f"print('step', {v}.shape[{d}], s0, k)"] if rng.random() < 0.6 else ["print('hello')"]
        else:
            raise ValueError(kind)
        return [name] if self.try_lines(lines) else None

    def loop_stmt(self) -> list[str] | None:
        """A loop that writes into views of a tensor step by step, as users write scans, running sums and
        row-by-row updates: into a copy, or into an input (written back after the call)."""
        rng = self.rng
        v = self.var(lambda t: t.dim() > 0 and t.dtype.is_floating_point)
        if v is None:
            return None
        d = rng.randrange(self.env[v].dim())
        name = self.fresh()
        into_input = v.startswith("x") and not self.env[v].requires_grad and rng.random() < 0.4
        lines = [] if into_input else [f"{name} = {rng.choice(('{v}.clone()', '{v} * 1', '{v} + 0.5')).format(v=v)}"]
        n = v if into_input else name
        cur, prev = f"{n}.select({d}, i)", f"{n}.select({d}, i - 1)"
        body = rng.choice(LOOP_BODIES).format(cur=cur, prev=prev, n=n, d=d)
        form = rng.choice(("range", "range_step", "enumerate", "while", "unbind", "no_grad"))
        if form == "range":
            lines += [f"for i in range(1, {n}.shape[{d}]):", f"    {body}"]
        elif form == "range_step":
            lines += [f"for i in range(1, {n}.shape[{d}], 2):", f"    {body}"]
        elif form == "enumerate":
            lines += [f"for i, row in enumerate({n}.unbind({d})):", "    if i > 0:", f"        {body}",
                      f"    row.mul_({rng.choice(('2', 's0', 'k', '0.5'))})"]
        elif form == "while":
            lines += ["i = 1", f"while i < {n}.shape[{d}]:", f"    {body}", f"    i += {rng.choice((1, 2))}"]
        elif form == "unbind":
            lines += [f"for row in {n}.unbind({d}):", f"    row.{rng.choice(('add_(1)', 'clamp_(min=0)', 'mul_(s0)'))}"]
        else:
            lines += [f"for i in range(1, {n}.shape[{d}]):", "    with torch.no_grad():", f"        {body}"]
        return [n] if self.try_lines(lines) else None

    def inner_lines(self, v: str, name: str) -> list[str]:
        rng = self.rng
        expr = self.fill(rng.choice(BINARY + REDUCTIONS[:6]), v)
        lines = [f"{name} = {expr}"]
        if rng.random() < 0.5:
            lines.append(rng.choice(INPLACE).format(t=rng.choice([name, v, self.fill(rng.choice(VIEWS[:8]), v)]),
                                                    o=self.operand(v)))
        self.exprs.append((expr, True))
        return lines

    STATEMENTS: ClassVar[dict] = {
        "unary": 8, "binary": 10, "reduction": 5, "view": 8, "indexing": 3, "random": 2, "special": 3, "inplace": 9,
        "setitem_grad": 1, "if": 2, "for": 1, "no_grad": 3, "twin": 2, "autocast": 1, "list": 1, "print": 1, "out": 2}

    def statement(self):
        kind = self.rng.choices(list(self.STATEMENTS), weights=list(self.STATEMENTS.values()))[0]
        if kind in ("unary", "binary", "reduction", "view", "indexing", "random", "special"):
            return self.expr_stmt(kind)
        if kind == "inplace":
            return self.inplace_stmt()
        if kind == "out":
            return self.out_stmt()
        if kind == "setitem_grad":
            return self.setitem_grad_stmt()
        return self.block_stmt(kind)

    def outputs(self) -> str:
        rng = self.rng
        names = [n for n in self.tensors() if n.startswith("t")] or self.tensors()
        text = "\n".join(self.lines)
        unused = [n for n in names if len(re.findall(rf"\b{n}\b", text)) <= (2 if "for i" in text else 1)]
        picked = set(unused[-3:]) | set(rng.sample(names, min(len(names), rng.choice((0, 1, 1, 2)))))
        chosen = sorted(picked or names[-1:], key=names.index)
        if rng.random() < 0.15:  # an input handed back as it is (after the writes): eager returns the same object
            chosen.append(rng.choice([n for n in self.tensors() if n.startswith("x")] or names))
        if rng.random() < 0.3:
            chosen.append(rng.choice(["x0.shape[0] * 2", "s0 + 1", "k", "x0.shape", "x0.shape[1:]",
                                      "isinstance(x0.shape, torch.Size)", "x0.size() + (1,)"]))
        form = rng.choice(("tuple", "list", "dict", "single"))
        if form == "single" or len(chosen) == 1:
            return chosen[0]
        if form == "dict":
            return "{" + ", ".join(f"'o{i}': {c}" for i, c in enumerate(chosen)) + "}"
        return f"[{', '.join(chosen)}]" if form == "list" else f"({', '.join(chosen)},)"

    def class_stmt(self, table: dict):
        """One statement of a class from tests/fuzz_classes.py, its choices drawn from the classes' own stream."""
        main, self.rng = self.rng, self.classes
        try:
            for _attempt in range(3):
                name = self.rng.choices(list(table), weights=[w for w, _ in table.values()])[0]
                if table[name][1](self) is not None:
                    return
        finally:
            self.rng = main

    def build(self, loops: bool = True, classes=True) -> Program:
        """The program; loops=False: without the loop writing into views (loop_stmt), as seeds made before it
        existed were; classes=False: without statements of tests/fuzz_classes.py, as seeds made before those; a tuple
        of class names: with those classes only (a seed's program as it was before later classes were added)."""
        self._start()
        table = fuzz_classes.load() if classes else {}
        if not isinstance(classes, bool):
            table = {name: row for name, row in table.items() if name in classes}
        for _ in range(self.rng.randint(3, 9)):
            for _attempt in range(6):
                if self.statement() is not None:
                    break
            if table and self.classes.random() < fuzz_classes.RATE:
                self.class_stmt(table)
        extra = random.Random(f"loops {self.seed}")  # (a stream of its own: a program without a loop is unchanged)
        if extra.random() < 0.4 and loops:
            main, self.rng = self.rng, extra
            for _attempt in range(6):
                if self.loop_stmt() is not None:
                    break
            self.rng = main
        params = ", ".join([f"x{i}" for i in range(len(self.specs))] + ["s0", f"k={self.default_k}"])
        body = textwrap.indent("\n".join([*self.lines, f"return {self.outputs()}"]), "    ")
        prog = Program(self.seed, f"def f({params}):\n{body}\n", self.specs, self.scalar, self.default_k)
        prog.calls = self.call_plans()
        return prog

    def call_plans(self) -> list[CallPlan]:
        rng = self.rng
        base = self.plan0.sizes
        other = {s: rng.choice(SIZE_CHOICES) for s in base}
        plans = [CallPlan(base, 1, True, "omit", False), CallPlan(base, 2, True, "omit", False)]
        for i in range(rng.choice((1, 2))):
            plans.append(CallPlan(other if rng.random() < 0.6 else base, 3 + i, rng.random() < 0.85,
                                  rng.choices(("omit", "same", "other", "positional"), weights=(5, 1, 1, 1))[0],
                                  rng.random() < 0.15, rng.random() < 0.15))
        return plans


def generate(seed: int, loops: bool = True, classes=True) -> Program:
    return Generator(seed).build(loops, classes)


# -- running and comparing ----------------------------------------------------------------------------------------
@dataclass
class Outcome:
    error: BaseException | None = None
    result: object = None
    grads: list | None = None
    grad_error: BaseException | None = None
    input_grads: tuple | None = None  # with respect to inputs written with history (_grads_through_inputs)
    inputs_after: list | None = None
    torch_rng: torch.Tensor | None = None
    py_rng: object = None
    printed: str = ""
    aliases: list | None = None  # per flat output tensor: (is input i, shares input i's storage) per input


def _aliases(result, args) -> list:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return [[(o is a, o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()) for a in tensors]
            for o in _flat(result) if isinstance(o, torch.Tensor)]


def run_once(fn, prog: Program, plan: CallPlan) -> Outcome:
    args, kwargs = make_args(prog, plan)
    out = Outcome()
    torch.manual_seed(plan.seed)
    random.seed(plan.seed)
    buf = io.StringIO()
    versions = [a._version if isinstance(a, torch.Tensor) else None for a in args]
    try:
        with contextlib.redirect_stdout(buf), torch.set_grad_enabled(plan.grad):
            out.result = fn(*args, **kwargs)
    except Exception as e:  # compared with the other side's
        out.error = e
    out.printed = buf.getvalue()
    out.torch_rng, out.py_rng = torch.get_rng_state(), random.getstate()
    if out.error is not None:
        return out
    out.aliases = _aliases(out.result, args)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]
    outs = [t for t in _flat(out.result) if isinstance(t, torch.Tensor) and t.requires_grad]
    written = _written_with_history(args)
    if written:
        _grads_through_inputs(out, outs, leaves, written, plan.seed)
    elif outs and leaves:
        gen = torch.Generator().manual_seed(plan.seed)
        try:  # eager itself may refuse (a no_grad view written in place): then gradients are not compared
            sum((t.float() * torch.randn(t.shape, generator=gen)).sum() for t in outs).backward()
        except Exception as e:
            out.grad_error = e
    out.grads = [a.grad for a in args if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad]
    out.inputs_after = [(a.detach().clone(), a.requires_grad, a.grad_fn is None, a._version - v)
                        if isinstance(a, torch.Tensor) else a for a, v in zip(args, versions)]
    return out


# -- gradients through the inputs as they are after the call (issue 38 item 4) --------------------------------------
def _written_with_history(args) -> list:
    """The input tensors that carry autograd history after the call: inputs without grad that the function wrote
    values requiring grad into (eager rebases them onto the write's history)."""
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad and not a.is_leaf]


def _grads_through_inputs(out: Outcome, outs: list, leaves: list, written: list, seed: int):
    """The loss also reads the written inputs as they are after the call, and is differentiated with respect to
    them (out.input_grads, compared with eager's: the function's own later uses of the input count) before the
    leaves' backward."""
    gen = torch.Generator().manual_seed(seed)
    try:  # (eager may refuse: a value its backward saved was written afterwards; then gradients are not compared)
        terms = [(t.float() * torch.randn(t.shape, generator=gen)).sum() for t in outs + written]
        loss = sum(terms[1:], terms[0])
        out.input_grads = torch.autograd.grad(loss, written, retain_graph=bool(leaves), allow_unused=True)
        if leaves:
            loss.backward()
    except Exception as e:
        out.grad_error = e


def _flat(obj) -> list:
    if isinstance(obj, (tuple, list)):
        return [x for o in obj for x in _flat(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in _flat(o)]
    return [obj]


def _structure(obj):
    if isinstance(obj, (tuple, list)):
        return type(obj).__name__, [_structure(o) for o in obj]
    if isinstance(obj, dict):
        return "dict", {k: _structure(v) for k, v in obj.items()}
    return "tensor" if isinstance(obj, torch.Tensor) else type(obj).__name__


def _tol(exp: torch.Tensor, loose: bool = False):
    """Element-wise tolerances for a tensor eager computed. In half precision an error scales with the magnitude of
    the values that were combined, not with the element's own: one rounding of an intermediate of magnitude M to
    bfloat16 moves every result it reaches by up to 2**-9 M, and where terms cancel the result is far smaller
    than M. So half-precision tensors (and float32 ones of a program that computes in half precision somewhere)
    also allow 2**-7 of the tensor's largest magnitude, which stands for M. (Eager's autograd rounds a gradient
    summed over broadcast dimensions to the dtype of the output's gradient before casting it to the input's;
    jitcore sums in the input's dtype. Seed 28179, a bfloat16 product plus a float32 scalar: eager's rounded sum
    shifts every element of the input's gradient by 0.12, 9% of the two elements where the other terms cancel;
    jitcore's sum equals the float64 sum.)"""
    dtype = exp.dtype  # (complex values get the tolerances of their parts' dtype: seed 290's cos under Inductor)
    if dtype in (torch.float16, torch.bfloat16, torch.complex32) or loose:
        scale = exp.detach().abs().nan_to_num(0, 0, 0).amax().item() if exp.numel() and dtype.is_floating_point else 0
        return {"rtol": 2e-2, "atol": max(2e-2, 2**-7 * scale)}
    return {"rtol": 1e-4, "atol": 1e-4} if dtype.is_floating_point or dtype.is_complex else {"rtol": 0, "atol": 0}


def _close(what: str, got, exp, problems: list, loose: bool = False):
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            problems.append(f"{what}: expected a tensor, got {type(got).__name__}")
        elif got.dtype != exp.dtype or got.shape != exp.shape:
            problems.append(f"{what}: {got.dtype}{tuple(got.shape)} vs eager {exp.dtype}{tuple(exp.shape)}")
        else:
            try:
                torch.testing.assert_close(got.detach(), exp.detach(), equal_nan=True, **_tol(exp, loose))
            except AssertionError as e:
                problems.append(f"{what}: values differ: {str(e).splitlines()[-3:]}")
    elif isinstance(exp, float) and isinstance(got, float):
        if not (abs(got - exp) <= 1e-6 * max(1.0, abs(exp)) or (got != got and exp != exp)):
            problems.append(f"{what}: {got!r} vs eager {exp!r}")
    elif got != exp or type(got) is not type(exp):
        problems.append(f"{what}: {got!r} vs eager {exp!r}")


def _integer_history(t: torch.Tensor, requires_grad: bool) -> bool:
    """Eager gave an integer tensor autograd history, which its own backward then refuses (an internal assert in
    the engine: an integer gradient): `x[x > 0] = w` or `x.masked_fill_(m, w)` into an integer x with a w that
    requires grad records IndexPutBackward0 on x (seed 30266). jitcore leaves integer tensors without history, as
    every other op does; their requires_grad flags are not compared."""
    return requires_grad and not (t.dtype.is_floating_point or t.dtype.is_complex)


def _from_integer_history(exp: torch.Tensor, got: torch.Tensor, eager) -> bool:
    """A tensor eager made from an integer tensor with autograd history (`t7 = t6.half()` after `t6.index_put_((m,),
    w)` into an integer t6, seed 392 with the setitem_dtype class): eager's own backward then fails on the integer
    gradient (the engine's isDifferentiableType assert); jitcore's integers carry no history, so what is made from
    one does not require grad."""
    return exp.requires_grad and not got.requires_grad and "isDifferentiableType" in str(eager.grad_error or "")


def _singular_alike(got, exp):
    """A gradient at a singularity (x / 0) is inf or nan depending on the order its infinite contributions are summed:
    eager adds each op's own (-inf + inf = nan), jitcore sums the cotangents of merged identical lines first (CSE), then
    multiplies once (inf). Elements where both sides are non-finite count as equal; a finite value on either side is
    still compared exactly as before (seed 103466: three `x2 / x0` with a zero in x0)."""
    if isinstance(got, torch.Tensor) and isinstance(exp, torch.Tensor) and exp.dtype.is_floating_point \
            and got.dtype == exp.dtype and got.shape == exp.shape:
        both = ~torch.isfinite(got.detach()) & ~torch.isfinite(exp.detach())
        if both.any():
            return got.detach().masked_fill(both, 0), exp.detach().masked_fill(both, 0)
    return got, exp


def compare(jit: Outcome, eager: Outcome, loose: bool = False) -> list[str]:
    """What differs between a jit call and the eager call (empty: they agree). loose: the program computes in
    half precision somewhere, so float32 results and gradients get half-precision tolerances."""
    if eager.error is not None or jit.error is not None:
        if eager.error is None:
            return [f"jit raised {type(jit.error).__name__}: {str(jit.error)[:300]}"]
        if jit.error is None:
            return [f"eager raised {type(eager.error).__name__} ({str(eager.error)[:200]}), jit did not"]
        return []
    problems = []
    if _structure(jit.result) != _structure(eager.result):
        return [f"output structure {_structure(jit.result)} vs eager {_structure(eager.result)}"]
    for i, (g, e) in enumerate(zip(_flat(jit.result), _flat(eager.result))):
        _close(f"output {i}", g, e, problems, loose)
        if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and g.requires_grad != e.requires_grad \
                and not _integer_history(e, e.requires_grad) and not _from_integer_history(e, g, eager):
            problems.append(f"output {i}: requires_grad {g.requires_grad} vs eager {e.requires_grad}")
    for i, (g, e) in enumerate(zip(jit.aliases or [], eager.aliases or [])):
        # `return x` hands back the caller's own tensor; an output eager computed afresh must not share an input's
        # memory (a later write into one would change the other), and one eager returns as a view of an input
        # (written in place or not) must share it. Not compared: jit handing back the input itself where eager
        # returns a view with the same shape (x.reshape(-1) of a 1-d x)
        for j, ((g_is, g_shares), (e_is, e_shares)) in enumerate(zip(g, e)):
            if e_is and not g_is:
                problems.append(f"output tensor {i}: a new tensor where eager returns input {j} itself")
            elif g_shares and not e_shares:
                problems.append(f"output tensor {i} shares input {j}'s memory; eager's does not")
            elif e_shares and not g_shares:
                problems.append(f"output tensor {i} is a tensor of its own; eager's shares input {j}'s memory")
    for i, (g, e) in enumerate(zip(jit.inputs_after or [], eager.inputs_after or [])):
        if isinstance(e, tuple):
            _close(f"input {i} after the call", g[0], e[0], problems)
            if g[1:3] != e[1:3] and not _integer_history(e[0], e[1]):
                problems.append(f"input {i} after the call: (requires_grad, grad_fn is None) {g[1:3]} vs eager "
                                f"{e[1:3]}")
            if g[3] != e[3]:
                problems.append(f"input {i} after the call: its version counter moved {g[3]} times, eager's {e[3]}")
    if eager.grad_error is None and jit.grad_error is not None:
        problems.append(f"backward raised {type(jit.grad_error).__name__}: {str(jit.grad_error)[:200]}")
    elif eager.grad_error is None:
        for i, (g, e) in enumerate(zip(jit.grads or [], eager.grads or [])):
            if (g is None) != (e is None):
                problems.append(f"grad of input {i}: {'None' if g is None else 'a tensor'} vs eager "
                                f"{'None' if e is None else 'a tensor'}")
            elif e is not None:
                _close(f"grad of input {i}", *_singular_alike(g, e), problems, loose)
        for i, (g, e) in enumerate(zip(jit.input_grads or (), eager.input_grads or ())):
            if (g is None) != (e is None):
                problems.append(f"grad w.r.t. written input {i} after the call: {'None' if g is None else 'a tensor'}"
                                f" vs eager {'None' if e is None else 'a tensor'}")
            elif e is not None:
                _close(f"grad w.r.t. written input {i} after the call", *_singular_alike(g, e), problems, loose)
        if (jit.input_grads is None) != (eager.input_grads is None):
            problems.append("gradients through the inputs after the call: taken on one side only")
    if not torch.equal(jit.torch_rng, eager.torch_rng):
        problems.append("torch RNG state after the call differs from eager's")
    if jit.py_rng != eager.py_rng:
        problems.append("Python random state after the call differs from eager's")
    if jit.printed != eager.printed:
        problems.append(f"printed {jit.printed!r} vs eager {eager.printed!r}")
    return problems


@dataclass
class Report:
    seed: int
    cache: str
    executors: tuple
    problems: list  # (call index, [problem, ...])
    refused: str | None = None

    def text(self, prog: Program) -> str:
        ex = f" --executors {','.join(self.executors)}" if self.executors else ""
        lines = [f"fuzz seed {self.seed}, cache={self.cache!r}{' executors=' + str(self.executors) if ex else ''}",
                 f"reproduce: python -m tests.fuzz --seed {self.seed} --cache {self.cache!r}{ex}", prog.source]
        for i, probs in self.problems:
            plan = prog.calls[i]
            lines.append(f"call {i} (sizes {plan.sizes}, input seed {plan.seed}, grad mode {plan.grad}, "
                         f"k {plan.k}, transposed {plan.transposed}, inputs without grad {plan.no_requires_grad}):")
            lines += [f"  {p}" for p in probs]
        return "\n".join(lines)


def check_program(prog: Program, cache: str, executors: tuple = ()) -> Report:
    """Run prog's calls eagerly and through one jitted function; the problems found per call."""
    fn = prog.function()
    jfn = jitcore.jit(fn, cache=cache, executors=list(executors) or None)
    report = Report(prog.seed, cache, executors, [])
    for i, plan in enumerate(prog.calls):
        if executors and plan.sizes != prog.calls[0].sizes:
            continue  # a fusion executor compiles each new shape again: slow, and the torch runs cover shapes
        eager = run_once(fn, prog, plan)
        got = run_once(jfn, prog, plan)
        if isinstance(got.error, JitError) and eager.error is None:
            report.refused = f"call {i}: {str(got.error).splitlines()[0]}"
            break  # refused clearly: not a wrong answer
        problems = compare(got, eager, prog.low_precision)
        if problems:
            report.problems.append((i, problems))
    return report


def assert_program(seed: int, cache: str, executors: tuple = ()) -> Report:
    prog = generate(seed)
    report = check_program(prog, cache, executors)
    if report.problems:
        raise FuzzFailure(report.text(prog))
    return report


def uses_inductor(seed: int) -> bool:
    """Inductor compiles slowly (tens of seconds for a first program on 2 cores): one program in 100 also runs
    with it (in constant values, on the calls of its first shape)."""
    return seed % 100 == 17


def minimize(prog: Program, cache: str, executors: tuple = ()) -> Program:
    """A shorter program that still fails: drop single top-level lines (and whole blocks) while it does."""
    lines = prog.source.splitlines()
    i = len(lines) - 2  # never the header or the return
    while i >= 1:
        end = i + 1
        while end < len(lines) - 1 and lines[end].startswith(("        ", "    else")):
            end += 1
        if lines[i].startswith("    ") and not lines[i].startswith(("        ", "    else")):
            trial = Program(prog.seed, "\n".join(lines[:i] + lines[end:]) + "\n", prog.inputs, prog.scalar,
                            prog.default_k, prog.calls)
            if check_program(trial, cache, executors).problems:
                lines, prog = lines[:i] + lines[end:], trial
        i -= 1
    return prog


def _refusal_cause(message: str) -> str:
    """A refusal's message without what varies per program (call number, names, numbers, source lines)."""
    text = re.sub(r"^call \d+: ", "", message)
    text = re.sub(r"<[^>]*>|'[^']*'|\b\d+\b|\bt\d+\b|\bx\d+\b", "_", text)
    return text[:150]


# -- command line -------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, help="run one program and print it with every difference")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=0, help="sweep seeds start..start+count-1")
    p.add_argument("--cache", action="append", choices=CACHE_MODES, help="cache modes (default: all three)")
    p.add_argument("--executors", default="", help="comma-separated executor names, e.g. inductor")
    p.add_argument("--quiet", action="store_true", help="a sweep prints one line per failure")
    p.add_argument("--minimize", action="store_true", help="print the failing program with lines dropped")
    p.add_argument("--refusals", action="store_true", help="after a sweep, count the refused runs by cause")
    opts = p.parse_args(argv)
    lint.CHECK = True  # every trace checked, as the test suite does (tests/conftest.py): a malformed one is a failure
    modes = opts.cache or list(CACHE_MODES)
    executors = tuple(e for e in opts.executors.split(",") if e)
    seeds = [opts.seed] if opts.seed is not None else range(opts.start, opts.start + opts.count)
    failed, runs, refusals = 0, 0, {}
    for seed in seeds:
        prog = generate(seed)
        if opts.seed is not None:
            print(prog.source)
        for mode in modes:
            report = check_program(prog, mode, executors)
            runs += 1
            if report.refused:
                refusals.setdefault(_refusal_cause(report.refused), []).append((seed, mode))
            if report.problems:
                failed += 1
                if opts.minimize:
                    small = minimize(prog, mode, executors)
                    report = check_program(small, mode, executors)
                    prog = small if report.problems else prog
                if opts.quiet:
                    first = report.problems[0]
                    print(f"seed {seed} {mode!r}: call {first[0]}: {first[1][0][:160]}")
                else:
                    print(report.text(prog), end="\n\n")
            elif opts.seed is not None:
                print(f"{mode!r}: agrees with eager" + (f" (jit refused: {report.refused})"
                                                         if report.refused else ""))
    if opts.refusals:
        total = sum(map(len, refusals.values()))
        print(f"{total} of {runs} runs refused, by cause:", file=sys.stderr)
        for cause, where in sorted(refusals.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(where):5d}  {cause}   e.g. seed {where[0][0]} {where[0][1]!r}", file=sys.stderr)
    print(f"{failed} failing (program, cache mode) pairs", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
