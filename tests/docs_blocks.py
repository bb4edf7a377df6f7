"""How tests/test_docs.py reads the manual (README.md and docs/*.md): the fenced blocks of a page, in order, and what
the prose names (files, `python -m` modules, links). The rules a page's author follows:

- ```python runs: a page's blocks share one namespace and run top to bottom (in a fresh temporary folder).
- ```text is printed output: what the page's Python blocks printed since the previous ```text block must contain it,
  once timings (`(took 0.02 ms)`) and addresses (`0x7f...`) are normalized; `...` in it stands for any text (as
  doctest's ELLIPSIS). A ```text block with no Python block run before it is an error, unless a skipped block was.
- `<!-- skip: needs CUDA -->` (the reason starts with "needs") on the line before a ```python block: not run. Only for
  what a CPU test cannot do (a GPU, several processes); test_docs.py caps how many there are.
- Other fences (```bash, ```) are not run; the files and modules they name are checked as the prose's are.
"""
from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"(?:^<!-- skip: ([^>]*?) -->\n)?^```([\w-]*)\n(.*?)^```[ \t]*$", re.M | re.S)
TOP = ("jitcore", "executors", "transforms", "tests", "benchmarks", "notebooks", "docs", ".ci")
# a repository path in prose or code: starts with a top-level folder, not inside another path or a URL
_TOPS = "|".join(re.escape(t) for t in TOP)
PATH = re.compile(rf"(?<![\w./~$@-])((?:{_TOPS})/[\w./*-]*[\w/*])")
MODULE = re.compile(rf"python3? -m ((?:{_TOPS})(?:\.\w+)*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# written by the commands that name them (gitignored), not part of a clone
GENERATED = ("benchmarks/results/",)
# pages another branch adds; checked like any other once they exist (the coordinator removes the entry at the merge)
PENDING: dict = {}


@dataclass
class Block:
    lang: str  # "python", "text", "bash", "" ...
    code: str
    line: int  # the line of the opening fence, 1-based
    skip: str | None  # the reason of a `<!-- skip: ... -->` marker


def blocks(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        fence_start = m.start(2) - 3
        out.append(Block(m[2], m[3], text.count("\n", 0, fence_start) + 1, m[1]))
    return out


def normalize(text: str) -> str:
    text = re.sub(r"\(took [0-9.]+ ms\)", "(took X ms)", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def shows(expected: str, printed: str) -> bool:
    """Whether `printed` contains `expected` (normalized; `...` in expected matches any text, lines included)."""
    parts = normalize(expected).strip("\n").split("...")
    return re.search(".*?".join(re.escape(p) for p in parts), normalize(printed), re.S) is not None


def clone_files() -> set[str]:
    """The files a clone of this checkout has: tracked, or new and not ignored (committed with the change)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked archive): what is on disk
        return {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()}
    return {p for p in listed if p and (ROOT / p).exists()}


def in_clone(path: str, files: set[str]) -> bool:
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        return any(fnmatch.fnmatchcase(f, path) for f in files)
    return path in files or any(f.startswith(path + "/") for f in files)


def named_paths(page: Path, text: str | None = None) -> list[tuple[str, str]]:
    """(path relative to the repository root, how it was named) for every file the page (or `text`) names."""
    text = page.read_text() if text is None else text
    out = [(m[1].rstrip("."), m[1]) for m in PATH.finditer(text)]
    for m in MODULE.finditer(text):
        module = m[1].replace(".", "/")
        out.append((module if (ROOT / module).is_dir() else module + ".py", m[0]))
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))  # (code holds calls, `trace(*args)`, not links)
    for m in LINK.finditer(prose):
        target = m[1].split("#")[0]
        if target and not re.match(r"[a-z]+:", target):
            out.append(((page.parent / target).resolve().relative_to(ROOT).as_posix(), m[0]))
    return [(p, how) for p, how in out if not p.startswith(GENERATED)]
