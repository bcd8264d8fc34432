#!/usr/bin/env bash
# Runs the fuzz harnesses (tests/fuzz) longer than the test suite does, keeping their corpora between runs in
# ~/.cache/ckc/fuzz (or $CKC_CACHE_DIR/fuzz). Builds build-fuzz (clang, ASan + UBSan + libFuzzer) first.
#   scripts/fuzz.sh [--minutes N | --seconds N] [HARNESS...]      (default: 10 minutes each, every harness)
# Harnesses: gguf safetensors tokenizer-load tokenizer-encode chat compile-config compile-graph compile-gguf
# python-readers. A finding stops the run; the input is saved as <cache>/fuzz/crash-<harness>-*, and
# `build-fuzz/tests/fuzz/fuzz_<harness> FILE` reproduces it (fuzz_python_readers.py for python-readers).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=600
HARNESSES=()
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) SECONDS_EACH=$(($2 * 60)); shift 2 ;;
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) HARNESSES+=("$1"); shift ;;
    esac
done
ALL=(gguf safetensors tokenizer-load tokenizer-encode chat compile-config compile-graph compile-gguf python-readers)
[ ${#HARNESSES[@]} -eq 0 ] && HARNESSES=("${ALL[@]}")
for h in "${HARNESSES[@]}"; do
    [[ " ${ALL[*]} " == *" $h "* ]] || { echo "fuzz.sh: unknown harness '$h' (one of: ${ALL[*]})" >&2; exit 2; }
done
scripts/install_deps.sh >/dev/null
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCKC_FUZZ=ON -DCKC_BUILD_TESTS=OFF \
    -DCKC_PYTHON_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" >/dev/null
WORK="${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/fuzz"
export CKC_PYTHON="$PWD/.venv/bin/python"
for h in "${HARNESSES[@]}"; do
    # the command line ctest runs, with the time and the work folder changed
    line=$(cd build-fuzz && ctest -N -V -R "^fuzz: $h\$" | sed -n 's/^[0-9]*: Test command: //p' | tr -d '"')
    read -r -a argv <<< "$line"
    argv[4]=$SECONDS_EACH   # run.sh NAME EXE SECONDS WORK MAX_LEN SEEDS...
    argv[5]=$WORK
    echo "== $h: ${SECONDS_EACH} s"
    "${argv[@]}"
done
