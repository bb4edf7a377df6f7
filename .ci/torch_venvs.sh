#!/usr/bin/env bash
# The other torch releases jitcore supports (issue 35): one venv per torch version (on the host's Python 3.11
# unless the name says otherwise: 2.11-py3.12 is torch 2.11 on pyenv's CPython 3.12.1, the GPU machine's pairing), each
# with that torch (PyPI's CUDA build, which runs on the CPU; ~2.7 GB the first time) and jitcore[test] installed
# editable from this clone. Idempotent: a second run from the same clone takes seconds (a new clone:
# a minute, pip refreshing the editable install).
#
#   bash .ci/torch_venvs.sh                  # build or refresh every venv
#   bash .ci/torch_venvs.sh 2.15             # only that one
#   bash .ci/torch_venvs.sh 2.11-py3.12      # torch 2.11 on Python 3.12 (not built by default; ~2.7 GB)
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
PY312="${JITCORE_TORCH_VENVS_PY312:-/root/.pyenv/versions/3.12.1/bin/python}"
# venv name -> pip requirement for torch (the latest release of each line); a name's "-pyX.Y" tail picks its Python
declare -A TORCH=([2.10]="torch==2.10.*" [2.15]="torch==2.15.0" [2.11-py3.12]="torch==2.11.0")
declare -A PYTHON=([2.11-py3.12]="$PY312")
# what else a venv pins, after jitcore[test]: 2.11-py3.12 mirrors the GPU machine's image (its pip list, 2026-11)
declare -A PINS=([2.11-py3.12]="transformers==5.17.0 huggingface-hub==1.33.0 tokenizers==0.23.2")
VERSIONS=(2.10 2.15)  # the default set; 2.11-py3.12 is built when named

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
    local name="$1" v="$ROOT/torch$1" tv="${1%%-py*}" py="${PYTHON[$1]:-$PY}"
    [ -n "${TORCH[$name]:-}" ] || { log "unknown venv $name (known: ${!TORCH[*]})"; exit 2; }
    mkdir -p "$ROOT"
    if [ ! -x "$v/bin/python" ]; then
        command -v "$py" >/dev/null || { log "no Python at $py for $name"; exit 1; }
        "$py" -m venv "$v"
    fi
    if ! "$v/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$tv.'))" 2>/dev/null; then
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
    local pin missing=()
    for pin in ${PINS[$name]:-}; do
        "$v/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('${pin%%==*}') != '${pin#*==}')" \
            2>/dev/null || missing+=("$pin")
    done
    [ "${#missing[@]}" = 0 ] || venv_pip "$name" install -q ${PINS[$name]}  # (one word each)
    "$v/bin/python" -c "import sys, torch; print('[torch-venvs]', sys.version.split()[0], torch.__version__)"
    # pip must not have swapped torch for another release while installing jitcore's dependencies
    "$v/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$tv.'))"
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
