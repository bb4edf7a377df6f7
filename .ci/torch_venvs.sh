#!/usr/bin/env bash
# The other torch releases jitcore supports (issue 35): one venv on the host's Python 3.11 per torch version, each
# with that torch (PyPI's CUDA build, which runs on the CPU; ~2.7 GB the first time) and jitcore[test] installed
# editable from this clone. Idempotent: a second run from the same clone takes seconds (a new clone:
# a minute, pip refreshing the editable install).
#
#   bash .ci/torch_venvs.sh                  # build or refresh every venv
#   bash .ci/torch_venvs.sh 2.15             # only that one
#   bash .ci/torch_venvs.sh run 2.10 CMD     # run CMD (a shell line) in the repo with 2.10's venv active
#
# The venvs live outside the clone (JITCORE_TORCH_VENVS, default /opt/jitcore-venvs) so CI's fresh clones reuse
# them. torch goes in first, then jitcore, whose range (pyproject.toml) the installed torch satisfies, so pip keeps
# it. This machine's system pip configuration caps torch below 2.15 (a constraints file); the 2.15 venv's installs
# read no pip configuration file (PIP_CONFIG_FILE=/dev/null; the CA settings come from PIP_CERT and friends).
set -euo pipefail
ROOT="${JITCORE_TORCH_VENVS:-/opt/jitcore-venvs}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${JITCORE_TORCH_VENVS_PYTHON:-python3.11}"
# venv name -> pip requirement for torch (the latest release of each line)
declare -A TORCH=([2.10]="torch==2.10.*" [2.15]="torch==2.15.0")
VERSIONS=(2.10 2.15)

log() { echo "[torch-venvs] $*" >&2; }

venv_pip() {  # venv_pip NAME ARGS...: pip of that venv, without the system cap where the cap excludes its torch
    local name="$1"; shift
    if [ "$name" = "2.15" ]; then
        PIP_CONFIG_FILE=/dev/null "$ROOT/torch$name/bin/pip" "$@"
    else
        "$ROOT/torch$name/bin/pip" "$@"
    fi
}

build() {  # build 2.10: the venv $ROOT/torch2.10 with that torch and jitcore[test] editable from this clone
    local name="$1" v="$ROOT/torch$1"
    mkdir -p "$ROOT"
    if [ ! -x "$v/bin/python" ]; then
        "$PY" -m venv "$v"
    fi
    if ! "$v/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$name.'))" 2>/dev/null; then
        log "installing ${TORCH[$name]} into $v (PyPI's CUDA build, runs on the CPU; ~2.7 GB the first time)"
        venv_pip "$name" install -q "${TORCH[$name]}"
    fi
    # skipped when this clone's pyproject.toml is the one installed last (tests run as `python -m pytest` from a
    # clone, whose own jitcore comes first on sys.path); else ~1 minute of pip resolving
    local stamp
    stamp="$REPO $(sha256sum "$REPO/pyproject.toml" | cut -c1-64)"
    if [ "$(cat "$v/.jitcore-installed" 2>/dev/null)" != "$stamp" ]; then
        (cd "$REPO" && venv_pip "$name" install -q -e '.[test]')
        echo "$stamp" > "$v/.jitcore-installed"
    fi
    "$v/bin/python" -c "import sys, torch; print('[torch-venvs]', sys.version.split()[0], torch.__version__)"
    # pip must not have swapped torch for another release while installing jitcore's dependencies
    "$v/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$name.'))"
}

main() {
    if [ "${1:-}" = "run" ]; then
        local name="$2"; shift 2
        [ -x "$ROOT/torch$name/bin/python" ] || { log "no venv for torch $name: run bash .ci/torch_venvs.sh $name"; exit 2; }
        cd "$REPO" && . "$ROOT/torch$name/bin/activate" && bash -c "$*"
        return
    fi
    local names=("$@")
    [ "${#names[@]}" -gt 0 ] || names=("${VERSIONS[@]}")
    for name in "${names[@]}"; do build "$name"; done
}

main "$@"
