#!/usr/bin/env bash
# Runs every test: installs dependencies (and llama.cpp unless CKC_SKIP_SLOW=1), builds, runs the whole suite under
# ctest (unit, kernel and runtime tests + Python parity against PyTorch), then
# the compiler and runtime tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (including a generated model run end to end), then every fuzz harness (tests/fuzz)
# for CKC_FUZZ_SECONDS (10) each, going on from the corpora earlier runs grew (~/.cache/ckc/fuzz, as scripts/fuzz.sh).
# Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
# as many test jobs as cores, each running multi-threaded kernels: OpenMP threads that spin at their barriers
# would take the CPU another job needs (the Python tests: 6 min -> 4 on 2 cores)
export OMP_WAIT_POLICY=PASSIVE

scripts/install_deps.sh
. scripts/build_env.sh  # ccache for every CMake build below
# llama.cpp, the reference of the GGUF tests (built from source once, cached outside the repository)
if [ -z "${CKC_SKIP_SLOW:-}" ]; then scripts/llama_cpp.sh; fi

echo "== build (Release) and run all tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCKC_WERROR=ON >/dev/null
cmake --build build -j"$JOBS"
(cd build && ctest --output-on-failure -j"$JOBS")

echo "== build with -DCKC_SANITIZE=ON and run the compiler and runtime tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCKC_SANITIZE=ON -DCKC_PYTHON_TESTS=OFF -DCKC_WERROR=ON >/dev/null
cmake --build build-asan -j"$JOBS"
(cd build-asan && ctest --output-on-failure -j"$JOBS")

FUZZ_WORK="${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/fuzz"
echo "== build the fuzz harnesses (clang, ASan + UBSan + libFuzzer) and run each for ${CKC_FUZZ_SECONDS:-10} s" \
     "(corpora: $FUZZ_WORK)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCKC_FUZZ=ON -DCKC_BUILD_TESTS=OFF \
    -DCKC_PYTHON_TESTS=OFF -DCKC_WERROR=ON -DCKC_FUZZ_SECONDS="${CKC_FUZZ_SECONDS:-10}" \
    -DCKC_FUZZ_WORK="$FUZZ_WORK" >/dev/null
cmake --build build-fuzz -j"$JOBS"
mkdir -p "$FUZZ_WORK"
rm -f "$FUZZ_WORK"/summary-*
(cd build-fuzz && ctest --output-on-failure -j"$JOBS" -L fuzz)
cat "$FUZZ_WORK"/summary-*  # per harness: inputs run, coverage, corpus
echo "== all tests passed"
