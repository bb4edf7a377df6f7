"""Tests: the op registry is complete and one op has one home. Every prim has a meta and an eager kernel, both given
where it is defined (`@prim(..., kernel=...)`), which the torch executor runs, and a VJP rule unless nothing flows
through it; every op id is
unique, written out in full exactly once in jitcore/ops (where the op is defined), and named by
no VJP or torch-executor row that is not an op; every torch-level op names a torch callable or says why not.
"""
from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import pytest
import torch

import executors  # noqa: F401  (the torch executor registers every prim's kernel as its implementation)
from executors.torchex import torch_ex
from jitcore.errors import JitError, MetaError
from jitcore.ir.proxies import TensorProxy
from jitcore.ir.symbol import Symbol, Tag
from jitcore.ir.trace import Trace, tracectx
from jitcore.ops.registry import LTORCH, OPS, PRIMS, prim, torchsymbol

ROOT = Path(__file__).resolve().parents[1]
OPS_DIR = ROOT / "jitcore" / "ops"
PRIM_IDS = sorted(s.id for s in PRIMS.values())
LTORCH_IDS = sorted(s.id for s in LTORCH.values())

# torch-level ops that stand for no single torch callable, with the reason (the "marked otherwise" list)
NO_TORCH_FN = {
    "ltorch.setitem": "the functional form of `x[i] = v`; Tensor.__setitem__ writes in place and returns None",
    **{f"ltorch.{name}": f"Tensor.{name} is a property, not a callable" for name in ("T", "mT", "H", "mH", "data")},
    "ltorch.batch_norm_train": "functional training batch norm (new running stats returned); the torch executor runs "
                               "torch.native_batch_norm on copies of the stats (executors/torchex_native.py)",
    "ltorch.batch_norm_backward": "aten.native_batch_norm_backward with its training-mode arguments only; the torch "
                                  "executor runs that kernel (executors/torchex_native.py)",
}


def _defining_file(sym) -> Path:
    fn = sym.meta if sym.is_prim else sym.fn
    return Path(inspect.getsourcefile(inspect.unwrap(fn))).resolve()


def test_op_ids_are_unique_and_namespaced():
    assert len(OPS) == len(PRIMS) + len(LTORCH) == len(set(OPS))
    for name, sym in PRIMS.items():
        assert sym.id == f"prims.{name}" and sym.is_prim, sym
    for name, sym in LTORCH.items():
        assert sym.id == f"ltorch.{name}" and not sym.is_prim, sym


@pytest.mark.parametrize("op_id", PRIM_IDS)
def test_prim_has_meta_torch_kernel_and_eager_kernel(op_id):
    sym = OPS[op_id]
    assert callable(sym.meta), f"{op_id} has no meta"
    assert callable(sym.kernel), f"{op_id} has no eager kernel"
    assert op_id in torch_ex.implmap, f"{op_id} is not registered with the torch executor"
    impl = torch_ex.implmap[op_id].symbol  # the torch executor runs the prim's own kernel
    if impl.module == torch_ex.namespace_name:
        ran = torch_ex.kernels[impl.name]
    else:  # a public torch function, printed (and run) as its path
        owner = torch
        for part in impl.module.split(".")[1:]:
            owner = getattr(owner, part)
        ran = getattr(owner, impl.name)
    assert ran is sym.kernel, f"{op_id}: the torch executor runs {ran}, not the prim's kernel {sym.kernel}"


def test_only_prims_have_an_eager_kernel():
    assert [op_id for op_id, sym in OPS.items() if (sym.kernel is not None) != sym.is_prim] == []
    with pytest.raises(TypeError, match="eager kernel"):
        Symbol("ltorch.kernel_probe", "kernel_probe", fn=lambda a: a, kernel=torch.neg)
    with pytest.raises(TypeError, match="eager kernel"):
        prim("prims.kernel_probe", kernel="torch.neg")


def test_kernel_accepts_the_prim_signature():
    """A kernel is called as kernel(*bsym.args, **bsym.kwargs) with the prim's arguments: it binds every positional
    argument, and every parameter a caller may name (those with defaults, keyword-only ones) under the same name."""
    for op_id in PRIM_IDS:
        try:
            ksig = inspect.signature(OPS[op_id].kernel)
        except (TypeError, ValueError):
            continue  # a torch builtin: checked by running it in tests/test_prims.py
        mparams = list(inspect.signature(OPS[op_id].meta).parameters.values())
        positional = [p for p in mparams if p.kind is not p.KEYWORD_ONLY]
        ksig.bind_partial(*range(len(positional)))  # raises TypeError when the kernel takes fewer
        for p in mparams:
            if p.kind is p.KEYWORD_ONLY or p.default is not p.empty:
                kp = ksig.parameters.get(p.name)
                assert kp is not None and kp.kind is not kp.POSITIONAL_ONLY, \
                    f"{op_id}: kernel {ksig} takes no keyword {p.name!r} (prim: {mparams})"


def _refuses_floats(sym) -> bool:
    """A prim over tensors only (elementwise) whose meta refuses float32: it can never carry a gradient."""
    params = list(inspect.signature(sym.meta).parameters.values())
    if any(p.default is not p.empty or p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        return False
    trace = Trace()
    with tracectx(trace):
        args = [TensorProxy((2,), torch.float32, "cpu", True) for _ in params]
        try:
            sym.meta(*args)
        except MetaError as e:
            return "not implemented for" in str(e)
        except (JitError, TypeError, KeyError, AttributeError, IndexError, ValueError):  # not elementwise after all
            return False
    return False


@pytest.mark.parametrize("op_id", PRIM_IDS)
def test_prim_has_vjp_rule_or_carries_no_gradient(op_id):
    vjp_rules = pytest.importorskip("transforms.vjp_rules")
    sym = OPS[op_id]
    if Tag.NON_DIFFERENTIABLE in sym.tags or Tag.CREATION in sym.tags or _refuses_floats(sym):
        return
    assert op_id in vjp_rules.VJP_RULES, f"{op_id} has no VJP rule (transforms/) and is not non-differentiable"


@pytest.mark.parametrize("op_id", PRIM_IDS + LTORCH_IDS)
def test_op_is_defined_in_one_ops_file(op_id):
    path = _defining_file(OPS[op_id])
    assert path.parent == OPS_DIR.resolve(), f"{op_id} is defined in {path}, outside jitcore/ops/"
    prefix = "prims_" if op_id.startswith("prims.") else "torch_"
    assert path.name.startswith(prefix) or path.name in ("nn_helpers.py",), f"{op_id} lives in {path.name}"


# op ids the grep rule below does not cover, by kind, with the reason. None of them is registered in OPS (they
# live in their own tables); the rule skips them should one ever be
NOT_DEFINED_IN_OPS_SOURCE = {
    "opaque.": "opaque ops are made at run time, one per arbitrary torch callable (jitcore/ops/opaque.py)",
    "torch.": "kernel symbols of the torch executor, made from its tables in executors/torchex.py",
    "python.": "kernel symbols of the python executor (executors/pythonex.py)",
    "inductor.": "fusion-region symbols of the inductor executor, made per compiled region",
    "nvfuser.": "fusion-region symbols of the nvFuser executor, made per compiled region",
}


def _exempt(op_id: str) -> bool:
    return op_id.startswith(tuple(NOT_DEFINED_IN_OPS_SOURCE))


def _quoted_id_counts() -> dict[str, Counter]:
    """For each op id in OPS: in which jitcore/ops/*.py files, and how often, it appears as a string literal."""
    texts = {path.name: path.read_text() for path in sorted(OPS_DIR.glob("*.py"))}
    return {op_id: Counter({name: text.count(f'"{op_id}"') for name, text in texts.items() if f'"{op_id}"' in text})
            for op_id in OPS}


def test_grep_of_an_op_id_finds_its_definition():
    """`grep '"prims.add"' jitcore/ops` finds the one line that defines prims.add (`add = _binary("prims.add")`,
    `@prim("prims.shape")`, `@torchsymbol(torch.softmax, ..., id="ltorch.softmax")`): every op id is written out in
    full exactly once across jitcore/ops/*.py, in the file that defines the op."""
    counts = _quoted_id_counts()
    checked = 0
    for op_id, sym in OPS.items():
        if _exempt(op_id):
            continue
        assert op_id.startswith(("prims.", "ltorch.")), f"{op_id}: not a prims/ltorch id and not a listed exception"
        where = counts[op_id]
        assert sum(where.values()) == 1, f'"{op_id}" appears {dict(where) or 0} times in jitcore/ops, not once'
        assert next(iter(where)) == _defining_file(sym).name, \
            f'"{op_id}" is written in {next(iter(where))}, but the op is defined in {_defining_file(sym).name}'
        checked += 1
    assert checked == len(PRIM_IDS) + len(LTORCH_IDS)


@pytest.mark.parametrize("make", [
    lambda: prim("add", kernel=torch.add),
    lambda: prim("ltorch.add", kernel=torch.add),
    lambda: prim("prims.not an identifier", kernel=torch.add),
    lambda: torchsymbol(torch.add, id="add"),
    lambda: torchsymbol(torch.add, id="prims.add"),
], ids=["prim-short", "prim-wrong-namespace", "prim-bad-name", "torchsymbol-short", "torchsymbol-wrong-namespace"])
def test_op_helpers_refuse_an_id_outside_their_namespace(make):
    n = len(OPS)
    with pytest.raises(ValueError, match="op id"):
        make()
    assert len(OPS) == n


def test_torchsymbol_needs_the_full_id():
    with pytest.raises(TypeError, match="id"):
        torchsymbol(torch.add)


def test_vjp_rules_and_torch_executor_tables_name_op_ids():
    """The other places an op id is written (its VJP row, its torch-executor rows) name ops that exist."""
    vjp_rules = pytest.importorskip("transforms.vjp_rules")
    from executors.torchex import BY_INPUT, DIRECT_OVERRIDES

    tables = {"transforms VJP_RULES": vjp_rules.VJP_RULES, "executors/torchex.py DIRECT_OVERRIDES": DIRECT_OVERRIDES,
              "executors/torchex.py BY_INPUT": BY_INPUT}
    from jitcore.ops import sharding  # (FSDP2's block lines: symbols of their own, like python.grads_ready, not in OPS)
    from jitcore.ops.opaque import OPAQUE_OPS  # (an aten kernel's opaque op: executors/torchex_pool.py's row)

    known = set(OPS) | set(OPAQUE_OPS) | {s.id for s in vars(sharding).values() if isinstance(s, Symbol)}
    for table, rows in tables.items():
        unknown = sorted(k for k in rows if k not in known)
        assert not unknown, f"{table} has rows for ids that are no op: {unknown}"


def test_every_inplace_twin_of_a_method_is_an_op():
    """The in-place ops `foo_` of jitcore/ops/torch_inplace.py are written one per line: none is missing, i.e. every
    Tensor method foo with an op whose in-place twin Tensor.foo_ exists in torch has an op ltorch.foo_ (a missing one
    would still run, but opaquely, through the "inplace" fallback)."""
    from jitcore.ir.proxies import TENSOR_METHODS
    from jitcore.ops.torch_inplace import _METADATA_INPLACE

    missing = []
    for name in list(TENSOR_METHODS):
        iname = f"{name}_"
        if name.startswith("_") or name.endswith("_") or iname in _METADATA_INPLACE:
            continue
        if callable(getattr(torch.Tensor, iname, None)) and iname not in LTORCH:
            missing.append(f"ltorch.{iname}")
    assert not missing, f"add to jitcore/ops/torch_inplace.py: {missing}"


@pytest.mark.parametrize("op_id", LTORCH_IDS)
def test_ltorch_op_names_a_torch_callable_or_says_why_not(op_id):
    sym = OPS[op_id]
    if sym.torch_fn is None:
        assert op_id in NO_TORCH_FN, f"{op_id} names no torch callable; add one or list it in NO_TORCH_FN with why"
    else:
        assert op_id not in NO_TORCH_FN, f"{op_id} names {sym.torch_fn}; drop it from NO_TORCH_FN"
        assert sym.id in torch_ex.implmap, f"{op_id} is not run directly by the torch executor"


def _python_signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a C builtin: torch gives no signature to compare with


POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@pytest.mark.parametrize("op_id", [i for i in LTORCH_IDS if OPS[i].torch_fn is not None])
def test_ltorch_body_signature_matches_its_torch_callable(op_id):
    """The torch executor runs the op as torch_fn(*args, **kwargs) with the args the body got: the parameters agree
    in order, defaults, and (where a caller can name them) names and keyword-only-ness. The first parameter, the
    tensor (`input` vs Tensor's `self`), is passed positionally and may be named differently."""
    sym = OPS[op_id]
    tsig = _python_signature(sym.torch_fn)
    if tsig is None or any(p.kind is p.VAR_POSITIONAL for p in tsig.parameters.values()):
        pytest.skip("torch callable has no comparable Python signature")
    body = list(inspect.signature(sym.fn).parameters.values())
    theirs = list(tsig.parameters.values())
    msg = f"{op_id}: body {inspect.signature(sym.fn)} vs {sym.torch_fn.__qualname__}{tsig}"
    if [p.kind for p in body[1:]] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        # a forwarding body (an in-place op over its functional twin: `self.abs_()`) hands torch what it got (3.13
        # gives no-argument C methods a signature, `(self, /)`; 3.11 gave none)
        assert body[0].kind in POSITIONAL and theirs and theirs[0].kind in POSITIONAL, msg
        return
    assert len(body) == len(theirs), msg
    for i, (b, t) in enumerate(zip(body, theirs)):
        assert b.default == t.default or b.default is t.default, msg
        if i == 0 or t.kind is t.POSITIONAL_ONLY:
            assert b.kind in POSITIONAL, msg
            continue
        assert b.name == t.name and (b.kind is t.KEYWORD_ONLY) == (t.kind is t.KEYWORD_ONLY), msg


def test_torch_map_points_at_registered_ops():
    from jitcore.ops.torch_map import TORCH_MAP

    for fn, sym in TORCH_MAP.items():
        if getattr(sym, "id", None) is not None:
            assert OPS.get(sym.id) is sym, f"{fn} maps to unregistered {sym}"
    assert TORCH_MAP.get(torch.add) is LTORCH["add"]
