#!/usr/bin/env bash
# The Python-version subsets (issue 34), beside CI's whole suite on 3.11: the interpreter and its opcode tables, the
# frontend's call binding (keyword binding, call sequences, containers, user exceptions, library code), models and a
# short fuzz run (60 programs), on each other Python this machine can build.
#
#   bash .ci/subsets.sh              # 3.13 (Debian forky chroot, .ci/forky.sh) then 3.12 (pyenv's, .ci/py312.sh)
#   bash .ci/subsets.sh 3.13         # one of them (3.12, 3.13, 3.14)
#
# Measured on a loaded 2-core machine: 1121 tests, 3.13 in 222 s, 3.12 in 296 s (the builds, once made, take seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS="tests/test_interpreter_*.py tests/test_opcode_tables.py tests/test_call_sequences.py tests/test_containers.py
       tests/test_keyword_binding.py tests/test_user_exceptions.py tests/test_library_code.py tests/test_models.py"
for s in 0 10 20 30 40 50; do TESTS="$TESTS 'tests/test_fuzz.py::test_fuzz_against_eager[$s]'"; done
TESTS="$(printf '%s' "$TESTS" | tr -s '\n ' '  ')"  # (one line: sh -c reads a newline as the end of a command)

[ $# -gt 0 ] || set -- 3.13 3.12
bash .ci/forky.sh  # (3.12's venv takes its CUDA libraries from forky's 3.13 venv)
for py in "$@"; do
    echo "[subsets] Python $py" >&2
    case "$py" in
        3.12) bash .ci/py312.sh && bash .ci/py312.sh run "python -m pytest -q -p no:cacheprovider $TESTS" ;;
        3.13|3.14) bash .ci/forky.sh run "$py" "python -m pytest -q -p no:xdist $TESTS" ;;
        *) echo "[subsets] no environment for Python $py" >&2; exit 2 ;;
    esac
done
