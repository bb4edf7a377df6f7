"""Fuzzer statement class `alignment` (issues 35 and 38): `t.data_ptr()` read for its alignment, as user code reads it
(transformers' MoE: `weight.data_ptr() % 16 != 0`), of arguments, views of them, tensors the program makes and views
of those, in a value (`x * (p % 16)`) or a branch. jitcore answers these as eager (jitcore/frontend/alignment.py);
`!= 0` too (the core template `{v} * ({v}.data_ptr() != 0)`: whether its memory is allocated); any other use of the
address stays refused.
"""
from __future__ import annotations

from tests.fuzz_classes import statement_class

# the tensor whose address is read, from a variable v of the program (i: a small offset)
_TENSORS = ("{v}", "{v}", "{v}.flatten()[{i}:]", "{v}.reshape(-1)[{i}:]", "{v}[{i}:]", "{v}.t()", "{v}.unsqueeze(0)",
            "({v} * 2).flatten()[{i}:]", "({v} + 1)[{i}:]", "{v}.detach()", "{v}.chunk(1)[0]", "{v}.contiguous()")
_TESTS = ("{p} % {k} == 0", "{p} % {k} != 0", "({p} & {m}) == 0", "{p} % {k}", "{p} & {m}")


@statement_class("alignment", 1)
def alignment(gen) -> list[str] | None:
    v = gen.var()
    if v is None:
        return None
    rng = gen.rng
    tensor = rng.choice(_TENSORS).format(v=v, i=rng.randrange(1, 4))
    k = rng.choice((2, 4, 8, 16, 32, 64))
    test = rng.choice(_TESTS).format(p=f"{tensor}.data_ptr()", k=k, m=k - 1)
    name = gen.fresh()
    if rng.random() < 0.5:
        lines = [f"{name} = {v} * ({test})"]
    else:
        lines = [f"if {test}:", f"    {name} = {v} * 2", "else:", f"    {name} = {v} - 1"]
    return lines if gen.try_lines(lines) else None
