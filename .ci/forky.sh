#!/usr/bin/env bash
# Python 3.13 and 3.14 for the version subsets (issue 23): a Debian forky chroot (the only reachable archive with
# both), with one venv per Python holding torch 2.13.0 and jitcore's test dependencies. Idempotent: a second run
# only refreshes the CA bundle and the editable install (seconds).
#
#   bash .ci/forky.sh                 # build or refresh the chroot and both venvs
#   bash .ci/forky.sh run 3.13 CMD    # run CMD (a shell line) in the repo, inside the chroot, with 3.13's venv active
#
# The chroot lives outside the clone (JITCORE_FORKY, default /opt/jitcore-forky) so CI's fresh clones reuse it;
# the repository is bind-mounted at its own path inside it (several clones or worktrees can be mounted at once).
set -euo pipefail
ROOT="${JITCORE_FORKY:-/opt/jitcore-forky}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
MIRROR="${JITCORE_FORKY_MIRROR:-http://deb.debian.org/debian}"
PYTHONS=(3.13 3.14)

log() { echo "[forky] $*" >&2; }

mounts() {
    mkdir -p "$ROOT/proc" "$ROOT/dev" "$ROOT$REPO" "$ROOT/tmp"
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    mountpoint -q "$ROOT/dev" || mount --rbind /dev "$ROOT/dev"
    # a clone deleted and made again at the same path (CI's fresh clones) leaves a mount of the deleted directory,
    # where every getcwd fails: a mount that is not this clone's directory is replaced
    if mountpoint -q "$ROOT$REPO" && \
            [ "$(stat -c %d:%i "$ROOT$REPO" 2>/dev/null)" != "$(stat -c %d:%i "$REPO")" ]; then
        umount -l "$ROOT$REPO"
    fi
    mountpoint -q "$ROOT$REPO" || mount --bind "$REPO" "$ROOT$REPO"
    # the host's trust store (renewed each session) holds the certificates pip needs to reach PyPI
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/host-ca.crt"
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
}

in_root() {  # in_root CMD...: run a command inside the chroot
    chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        PIP_CERT=/etc/host-ca.crt SSL_CERT_FILE=/etc/host-ca.crt REQUESTS_CA_BUNDLE=/etc/host-ca.crt \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 "$@"
}

bootstrap() {
    if [ -x "$ROOT/usr/bin/python3.14" ] && [ -x "$ROOT/usr/bin/python3.13" ] && [ -x "$ROOT/usr/bin/g++" ]; then
        return
    fi
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
    if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
        log "debootstrap forky into $ROOT (a few minutes)"
        # bookworm's debootstrap has no forky script; sid's works for it
        debootstrap --variant=minbase forky "$ROOT" "$MIRROR" /usr/share/debootstrap/scripts/sid
    fi
    # forky's Release file may be past its Valid-Until date
    echo 'Acquire::Check-Valid-Until "false";' > "$ROOT/etc/apt/apt.conf.d/99no-valid-until"
    mounts
    in_root apt-get update -qq
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3.13 python3.13-venv python3.13-dev python3.14 python3.14-venv python3.14-dev \
        g++ make ca-certificates git libgomp1
}

venv() {  # venv 3.13: the venv /venv3.13 with torch 2.13.0 and jitcore[test] (editable, from this clone)
    local py="$1" v="/venv$1"
    if [ ! -x "$ROOT$v/bin/python" ]; then
        in_root "python$py" -m venv "$v"
    fi
    if ! ls -d "$ROOT$v/lib/python$py/site-packages/torch-2.13.0"*.dist-info >/dev/null 2>&1; then
        log "installing torch 2.13.0 into $v (PyPI's build, runs on the CPU; ~2.7 GB the first time)"
        in_root "$v/bin/pip" install -q torch==2.13.0
    fi
    # skipped when this clone's pyproject was installed last; tests run as `python -m pytest` from a clone, whose
    # own jitcore comes first on sys.path
    local stamp="$REPO $(sha1sum "$REPO/pyproject.toml" | cut -c1-40)"
    if [ "$(cat "$ROOT$v/.jitcore-installed" 2>/dev/null)" != "$stamp" ]; then
        in_root sh -c "cd '$REPO' && $v/bin/pip install -q -e '.[test]'"
        echo "$stamp" > "$ROOT$v/.jitcore-installed"
    fi
}

main() {
    if [ "${1:-}" = "run" ]; then
        local py="$2"; shift 2
        mounts
        in_root sh -c "cd '$REPO' && . /venv$py/bin/activate && $*"
        return
    fi
    bootstrap
    mounts
    for py in "${PYTHONS[@]}"; do venv "$py"; done
    for py in "${PYTHONS[@]}"; do
        in_root "/venv$py/bin/python" -c "import sys, importlib.metadata as m; print('[forky]', sys.version.split()[0], \
            'torch', m.version('torch'))"
    done
}

main "$@"
