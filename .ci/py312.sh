#!/usr/bin/env bash
# Python 3.12 for its version subset (issue 34): no reachable archive packages CPython 3.12, but these machines' image
# has pyenv's 3.12.1. A venv from it (JITCORE_PY312, default /opt/venv312) with PyPI's torch 2.13.0 (cp312; installed
# without its CUDA dependencies, whose shared libraries, the same wheels for every Python, are linked from forky's
# 3.13 venv: run `bash .ci/forky.sh` first) and jitcore's test dependencies. Idempotent: a second run takes seconds.
#
#   bash .ci/py312.sh                 # build or refresh the venv
#   bash .ci/py312.sh run CMD         # run CMD (a shell line) in the repo with the venv's python first on PATH
set -euo pipefail
VENV="${JITCORE_PY312:-/opt/venv312}"
PY="${JITCORE_PY312_BASE:-/root/.pyenv/versions/3.12.1/bin/python}"
FORKY="${JITCORE_FORKY:-/opt/jitcore-forky}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"

log() { echo "[py312] $*" >&2; }

build() {
    [ -x "$PY" ] || { log "no CPython 3.12 at $PY (set JITCORE_PY312_BASE)"; exit 1; }
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    local site
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null
    then
        log "installing torch 2.13.0 (cp312, PyPI; ~530 MB) into $VENV"
        "$VENV/bin/pip" install -q --no-deps torch==2.13.0 --index-url https://pypi.org/simple
        local nv="$FORKY/venv3.13/lib/python3.13/site-packages/nvidia"
        [ -d "$nv" ] || { log "no CUDA libraries at $nv: run bash .ci/forky.sh first"; exit 1; }
        ln -sfn "$nv" "$site/nvidia"
    fi
    "$VENV/bin/pip" install -q filelock fsspec jinja2 networkx setuptools sympy typing-extensions \
        "optree>=0.13" "looseversion>=1.3" "numpy>=1.26" "pytest>=8" "pytest-xdist>=3" "hypothesis>=6" "expecttest>=0.2" \
        "transformers>=5"
    "$VENV/bin/python" -c "import sys, torch; print('[py312]', sys.version.split()[0], torch.__version__)"
}

if [ "${1:-}" = "run" ]; then
    shift
    cd "$REPO" && PATH="$VENV/bin:$PATH" bash -c "$*"
else
    build
fi
