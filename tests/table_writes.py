"""Who writes the IR's tables, read from the source with `ast` (nothing is imported): every module-level container of
jitcore/ir (a dict, set or list literal, or a dict()/set()/list()/Fallbacks(...) call) is a table its own module owns,
and any other module may fill it only by calling that module's register_* function. tests/test_architecture.py
checks that no other project module writes one directly (`T[k] = v`, `del T[k]`, `T.update(...)`, `T.add(...)`,
`T |= ...`, rebinding `module.T = ...`).
"""
from __future__ import annotations

import ast
import pathlib

from tests.import_graph import project_files

IR = "jitcore.ir"
_CONTAINERS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)
_CONSTRUCTORS = {"dict", "set", "list", "defaultdict", "OrderedDict", "Fallbacks", "WeakKeyDictionary",
                 "WeakValueDictionary"}
_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "add", "discard", "remove", "append", "extend",
             "insert", "__setitem__", "__delitem__", "factories"}


def ir_tables(root: pathlib.Path) -> dict[tuple[str, str], int]:
    """(owning module, table name) -> the line defining it, for every module-level container of jitcore/ir."""
    out = {}
    for module, path in project_files(root).items():
        if not (module == IR or module.startswith(IR + ".")):
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            value = getattr(node, "value", None)
            is_table = isinstance(value, _CONTAINERS) or (
                isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] in _CONSTRUCTORS)
            for t in targets:
                if is_table and isinstance(t, ast.Name):
                    out[(module, t.id)] = node.lineno
    return out


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _aliases(tree, module: str, is_package: bool, tables) -> tuple[dict, dict]:
    """(local name -> table, local name -> owning module) bound by this module's imports."""
    names, modules = {}, {}
    owners = {owner for owner, _ in tables}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in owners:
                    modules[a.asname or a.name] = a.name  # `import jitcore.ir.proxies as p` (or the dotted name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                if (base, a.name) in tables:
                    names[a.asname or a.name] = (base, a.name)
                elif f"{base}.{a.name}" in owners:
                    modules[a.asname or a.name] = f"{base}.{a.name}"
    return names, modules


def writes(root: pathlib.Path) -> list[str]:
    """'file:line writes owner.TABLE' for each direct write of an IR table outside the module that owns it."""
    tables = ir_tables(root)
    found = []
    for module, path in project_files(root).items():
        tree = ast.parse(path.read_text())
        names, modules = _aliases(tree, module, path.name == "__init__.py", tables)

        def table_of(expr, names=names, modules=modules):
            if isinstance(expr, ast.Name):
                return names.get(expr.id)
            if isinstance(expr, ast.Attribute):
                owner = modules.get(_dotted(expr.value)) or _dotted(expr.value)
                return (owner, expr.attr) if (owner, expr.attr) in tables else None
            return None

        for node in ast.walk(tree):
            hit = None
            if isinstance(node, (ast.Subscript,)) and isinstance(node.ctx, (ast.Store, ast.Del)):
                hit = table_of(node.value)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                hit = table_of(node)  # `proxies.TENSOR_METHODS = {...}`: rebinding it from outside
            elif isinstance(node, ast.AugAssign):
                hit = table_of(node.target)
            elif isinstance(node, ast.Attribute) and node.attr in _MUTATORS:
                hit = table_of(node.value)  # T.update(...), T.add(...), FALLBACKS.factories[...]
            if hit is not None and hit[0] != module:
                found.append(f"{path.relative_to(root)}:{node.lineno} writes {hit[0]}.{hit[1]}")
    return sorted(set(found))


if __name__ == "__main__":
    here = pathlib.Path(__file__).resolve().parents[1]
    for (owner, name), line in sorted(ir_tables(here).items()):
        print(f"{owner}:{line} {name}")
    print("\n".join(writes(here)) or "no IR table is written outside its module")
