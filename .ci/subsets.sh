#!/usr/bin/env bash
# The version subsets, beside CI's whole suite on Python 3.11 + torch 2.13.0 (the README's test command):
# - Pythons (issue 34), with torch 2.13.0: the interpreter and its opcode tables, the frontend's call binding (keyword
#   binding, call sequences, containers, user exceptions, library code, classes made inside), models and 60 fuzz
#   programs;
#   3.13 and 3.14 in a Debian forky chroot (.ci/forky.sh), 3.12 from pyenv (.ci/py312.sh).
# - torch releases (issue 35), on Python 3.11: ops, autodiff, executors with Inductor, models, packages, custom
#   Functions, data_ptr alignment (transformers' MoE on 2.10), complex views and 60 fuzz programs; torch 2.10 and
#   2.15 in venvs (.ci/torch_venvs.sh).
#
#   bash .ci/subsets.sh                     # every target: 3.13 3.14 3.12 torch2.10 torch2.15
#   bash .ci/subsets.sh 3.14 torch2.15      # the targets named
#   bash .ci/subsets.sh --build             # only build (or refresh) the environments, every target's
#
# Each environment is built from nothing when missing (minutes, GB of downloads) and reused after (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."

one_line() { printf '%s' "$*" | tr -s '\n ' '  '; }  # (sh -c reads a newline as the end of a command)
FUZZ=""
for s in 0 10 20 30 40 50; do FUZZ="$FUZZ 'tests/test_fuzz.py::test_fuzz_against_eager[$s]'"; done
PY_TESTS="$(one_line "tests/test_interpreter_*.py tests/test_opcode_tables.py tests/test_call_sequences.py
    tests/test_containers.py tests/test_keyword_binding.py tests/test_user_exceptions.py tests/test_library_code.py
    tests/test_models.py tests/test_local_classes.py tests/test_numpy_on_tensors.py $FUZZ")"
TORCH_TESTS="$(one_line "tests/test_torch_core_*.py tests/test_prims.py tests/test_autodiff.py
    tests/test_autodiff_split.py tests/test_grad_edges.py tests/test_compat.py tests/test_executors.py
    tests/test_models.py tests/test_packages.py tests/test_package_kernels.py tests/test_custom_function.py
    tests/test_distributed.py tests/test_tensor_attributes.py tests/test_data_ptr_alignment.py
    tests/test_data_dependent.py tests/test_complex_views.py tests/test_numpy_on_tensors.py
    tests/test_argument_write_history.py tests/test_compile_work.py tests/test_compile_ahead.py
    tests/test_cpu_compiler.py tests/test_multi_view_pieces.py
    tests/test_out_dtype.py tests/test_detach_metadata_of_views.py $FUZZ")"

build() {
    case "$1" in
        3.13|3.14) bash .ci/forky.sh ;;
        3.12) bash .ci/forky.sh && bash .ci/py312.sh ;;  # (3.12's venv takes its CUDA libraries from forky's 3.13)
        torch*) bash .ci/torch_venvs.sh "${1#torch}" ;;
        *) echo "[subsets] no environment for $1" >&2; exit 2 ;;
    esac
}

run() {
    case "$1" in
        3.12) bash .ci/py312.sh run "python -m pytest -q -n 2 -p no:cacheprovider $PY_TESTS" ;;
        3.13|3.14) bash .ci/forky.sh run "$1" "python -m pytest -q -n 2 -p no:cacheprovider $PY_TESTS" ;;
        torch*) bash .ci/torch_venvs.sh run "${1#torch}" "python -m pytest -q -n 2 -p no:cacheprovider $TORCH_TESTS" ;;
    esac
}

ONLY_BUILD=0
if [ "${1:-}" = "--build" ]; then ONLY_BUILD=1; shift; fi
[ $# -gt 0 ] || set -- 3.13 3.14 3.12 torch2.10 torch2.15
for target in "$@"; do
    start=$SECONDS
    build "$target"
    if [ "$ONLY_BUILD" = 0 ]; then
        echo "[subsets] $target" >&2
        run "$target"
    fi
    echo "[subsets] $target: $((SECONDS - start)) s" >&2
done
