"""Statement classes for the differential fuzzer (tests/fuzz.py) beyond its core templates: each class is a kind of
code users write that once was refused or answered differently (issue 38's list: values of another dtype set into a
tensor, in-place metadata changes, complex views, ...). A class is a function `(gen) -> list[str] | None` that adds
lines to the program through the generator's shadow run (`gen.try_lines`) and draws its choices from `gen.rng`,
registered in CLASSES with a weight. Classes are drawn from a stream of their own (Generator.classes), so programs
made with `classes=False` are the programs seeds made before the classes existed.
"""
from __future__ import annotations

from collections.abc import Callable

# name -> (weight, statement function); the modules below add their rows when imported
CLASSES: dict[str, tuple[int, Callable]] = {}

# the chance, after each core statement, that a class statement follows
RATE = 0.12


def statement_class(name: str, weight: int = 1):
    """Register a statement class: `@statement_class("setitem_dtype")` above `def f(gen) -> list[str] | None`."""
    def register(fn):
        if name in CLASSES:
            raise ValueError(f"fuzz statement class {name!r} registered twice")
        CLASSES[name] = (weight, fn)
        return fn
    return register


def load() -> dict[str, tuple[int, Callable]]:
    """CLASSES, with every class module imported (each module registers its classes)."""
    import importlib

    for module in CLASS_MODULES:
        importlib.import_module(module)
    return CLASSES


# the classes there were when the programs of seeds named in tests were found (main 1c52e7a): `generate(seed,
# classes=CLASSES_1C52E7A)` makes those programs again whatever classes were added since
CLASSES_1C52E7A = ("alignment", "runtime_size_compare", "argument_write_grad", "argument_stale_view", "metainplace",
                   "complexviews", "setitem_dtype", "numpy")

# the classes of the long run on main 4fec12f (issue 38), whose seeds later tests name
CLASSES_4FEC12F = CLASSES_1C52E7A + ("alignment_views", "same_place_write", "foreach_scalar", "runtime_size_function",
                                      "pieces", "detach_metadata")

# one module per class family (tests/fuzz_class_<family>.py)
CLASS_MODULES: tuple[str, ...] = (
    "tests.fuzz_class_alignment",
    "tests.fuzz_class_runtimesizes",
    "tests.fuzz_class_argwrite",
    "tests.fuzz_class_metainplace",
    "tests.fuzz_class_complexviews",
    "tests.fuzz_class_dtypeset",
    "tests.fuzz_class_numpy",
    "tests.fuzz_class_alignmentviews",
    "tests.fuzz_class_samewrite",
    "tests.fuzz_class_foreachscalar",
    "tests.fuzz_class_runtimefunction",
    "tests.fuzz_class_pieces",
    "tests.fuzz_class_detachmeta",
)
