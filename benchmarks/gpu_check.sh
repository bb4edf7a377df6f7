#!/usr/bin/env bash
# The one prepared command for a lent GPU machine (issue 36): python -m benchmarks.gpu_check, results into $OUT.
#
# 1. Here, once, in the repository root (the GPU machine reaches no network; jitcore's two small dependencies that
#    its image lacks travel as Python 3.12 wheels in .whl/, which .gitignore keeps out of git):
#        bash benchmarks/gpu_check.sh --prepare
# 2. Through the device tool (run), from the repository root, carry [".whl"], timeout_s 600:
#        bash benchmarks/gpu_check.sh
#    It installs the carried wheels into /tmp/site (no index, no network), records nvidia-smi, and runs the check
#    with a 420 s budget under a 540 s timeout (the tool's limit is 600 s). $OUT gets results.json, results.md,
#    log.txt and nvidia-smi.txt; the reply's tail is the short table. Extra arguments go to the check, e.g.
#        bash benchmarks/gpu_check.sh --only llama --budget 300
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
    # the versions installed here, as wheels for the GPU machine's CPython 3.12 on x86-64
    versions=$(python3 -c 'import importlib.metadata as m; print(*(f"{n}=={m.version(n)}" for n in ("optree", "looseversion")))')
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $versions
    ls -l .whl
    exit
fi

OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check.sh: installing the carried wheels failed"; exit 3; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
    echo "gpu_check.sh: no .whl/ here (bash benchmarks/gpu_check.sh --prepare, and carry .whl): jitcore may not import"
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1
timeout -k 10 540 python3 -m benchmarks.gpu_check "$OUT" --budget 420 "$@" 2>&1 | tee "$OUT/log.txt"
status=$?
[ "$status" = 124 ] && echo "gpu_check.sh: stopped by the 540 s timeout; results.json holds every unit that finished"
exit "$status"
