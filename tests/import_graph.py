"""The project's import graph, read from the source with `ast` (nothing is imported): which module imports which,
at module level or inside a function, grouped into stages (a folder of jitcore, or a top-level file of it, or the
transforms / executors packages). tests/test_architecture.py checks the layering with it; run
`python -m tests.import_graph` for the report (cycles between stages, imports inside functions, imports that run
from a lower stage to a higher one, the largest files).
"""
from __future__ import annotations

import ast
import collections
import pathlib
import sys
from dataclasses import dataclass

PACKAGES = ("jitcore", "executors", "transforms")
FOLDERS = ("jitcore.ir", "jitcore.ops", "jitcore.interpreter", "jitcore.guards", "jitcore.runtime",
           "jitcore.frontend", "jitcore.debug")

# the stages, lowest first: a stage may import its own modules and those of lower stages, never a higher one.
# Stages on one rank never import each other (transforms and executors are independent of each other).
RANKS = {
    "jitcore.errors": 0, "jitcore.logs": 0, "jitcore.compat": 1, "jitcore.hooks": 2, "jitcore.ir": 2,
    "jitcore.ops": 3, "jitcore.interpreter": 4, "jitcore.guards": 5, "jitcore.runtime": 6, "jitcore.frontend": 7,
    "transforms": 8, "executors": 8, "jitcore.debug": 9,
    "jitcore.api": 10, "jitcore.packages": 11, "jitcore.explanation": 11, "jitcore": 12,
}
# the modules that assemble the stages: importing any of them is their job (DESIGN.md: api.py imports all three)
ASSEMBLERS = ("jitcore.api", "jitcore.packages", "jitcore")


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    imported: str  # module name (a project module)
    line: int
    in_function: bool
    commented: bool  # a comment on the line or the line above gives a reason


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def stage_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] in ("executors", "transforms"):
        return parts[0]
    if ".".join(parts[:2]) in FOLDERS:
        return ".".join(parts[:2])
    return ".".join(parts[:2])


def _targets(node, module: str, is_package: bool, modules) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if is_package else module.split(".")[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _dynamic_import(node) -> bool:
    """importlib.import_module(...) / __import__(...): an import in another form."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (isinstance(f, ast.Name)
                                                                           and f.id == "__import__")


def imports(root: pathlib.Path = pathlib.Path(".")) -> list[Import]:
    """Every import of a project module by a project module (dynamic imports and module __getattr__ included,
    as imports inside a function of the module they appear in)."""
    files = project_files(root)
    out = []
    for module, path in files.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        inside = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside.update(id(n) for n in ast.walk(fn) if n is not fn)
                if fn.name == "__getattr__" and fn in tree.body:  # a module __getattr__ stands in for imports
                    out.append(Import(module, module, fn.lineno, True, _commented(lines, fn.lineno)))
        for node in ast.walk(tree):
            if _dynamic_import(node):
                out.append(Import(module, "<dynamic>", node.lineno, True, _commented(lines, node.lineno)))
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, module, path.name == "__init__.py", files):
                if target.split(".")[0] in PACKAGES:
                    out.append(Import(module, target, node.lineno, id(node) in inside,
                                      _commented(lines, node.lineno)))
    return out


def _commented(lines: list[str], lineno: int) -> bool:
    here, above = lines[lineno - 1], lines[lineno - 2].strip() if lineno >= 2 else ""
    return "#" in here or above.startswith("#")


def stage_graph(found: list[Import]) -> dict[str, set[str]]:
    graph = collections.defaultdict(set)
    for i in found:
        a, b = stage_of(i.importer), stage_of(i.imported)
        if i.imported != "<dynamic>" and a != b:
            graph[a].add(b)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one stage (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def module_cycles(found: list[Import]) -> list[list[str]]:
    """Strongly connected groups of more than one module (imports inside functions included)."""
    graph = collections.defaultdict(set)
    for i in found:
        if i.imported != "<dynamic>" and i.importer != i.imported:
            graph[i.importer].add(i.imported)
    return cycles(graph)


def upward(found: list[Import]) -> list[Import]:
    """Imports from a stage to a higher stage, or between two stages of one rank (transforms <-> executors)."""
    out = []
    for i in found:
        a, b = stage_of(i.importer), stage_of(i.imported)
        if i.imported == "<dynamic>" or a == b or a not in RANKS or b not in RANKS:
            continue
        if RANKS[b] >= RANKS[a]:
            out.append(i)
    return out


def in_functions(found: list[Import]) -> list[Import]:
    seen, out = set(), []
    for i in found:
        if i.in_function and (i.importer, i.line) not in seen:
            seen.add((i.importer, i.line))
            out.append(i)
    return out


def long_files(root: pathlib.Path = pathlib.Path("."), limit: int = 800) -> list[tuple[str, int]]:
    files = project_files(root)
    sizes = [(str(p.relative_to(root)), len(p.read_text().splitlines())) for p in files.values()]
    return sorted([s for s in sizes if s[1] > limit], key=lambda s: -s[1])


def report(root: pathlib.Path) -> str:
    found = imports(root)
    graph = stage_graph(found)
    inner = in_functions(found)
    lines = [f"project imports: {len({(i.importer, i.line) for i in found})}",
             f"cycles between stages: {cycles(graph) or 'none'}",
             f"cycles between modules: {len(module_cycles(found))} "
             f"({sum(len(c) for c in module_cycles(found))} modules in them)",
             f"imports inside functions: {len(inner)}"]
    lines += [f"  {i.importer}:{i.line} -> {i.imported}{'' if i.commented else '   (no comment)'}" for i in inner]
    up = upward(found)
    lines.append(f"imports from a lower stage to a higher one: {len(up)}")
    lines += [f"  {i.importer}:{i.line} -> {i.imported}" for i in up]
    lines.append(f"files over 800 lines: {long_files(root) or 'none'}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
