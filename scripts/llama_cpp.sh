#!/usr/bin/env bash
# Installs llama-cpp-python (llama.cpp, the reference ckc's GGUF path is tested
# and benchmarked against) into .venv, at the version requirements.txt pins on
# its "#opt-in" lines. pip builds it from source (llama.cpp, several minutes on
# 2 cores), for this machine's CPU, in a configuration that is correct on it:
#
#   native   -DGGML_NATIVE=ON: every instruction set the CPU has. The default.
#   noamx    On a CPU with AMX (amx_tile/amx_int8/amx_bf16 in /proc/cpuinfo):
#            -DGGML_NATIVE=OFF with each AVX/AVX2/FMA/F16C/BMI2/AVX-VNNI/AVX-512
#            (F, VBMI, VNNI, BF16) flag the CPU has set explicitly and
#            -DGGML_AMX_TILE/INT8/BF16=OFF: llama.cpp 0.3.36's native build
#            dies with SIGSEGV in ggml_backend_amx_mul_mat on some Xeons.
#
# and, for benchmarks of an instruction-set level below the CPU's (what another
# x86 CPU runs; scripts/bench_llm.py --kernels):
#   avx512     as noamx without AVX-512 VBMI and BF16 (ckc's "avx512" kernel path)
#   avx2-vnni  AVX2, FMA, F16C and AVX-VNNI, no AVX-512 (Intel's client CPUs)
#   avx2       AVX2, FMA and F16C only (AMD Zen 2/3, Intel before Alder Lake)
#
# CKC_LLAMA_CPP_CONFIG=native|noamx|avx512|avx2-vnni|avx2 forces one;
# CKC_LLAMA_CPP_CMAKE_ARGS adds CMake arguments (and makes its own
# configuration). The built wheel is cached per configuration and CPU in
# ${CKC_CACHE_DIR:-~/.cache/ckc}/wheels/<key>/, so later installs take seconds
# and a cache shared between machines never hands one CPU the other's build.
# Idempotent: does nothing when the installed build is the pinned version in
# this machine's configuration.
#
#   scripts/llama_cpp.sh            (scripts/test.sh runs it unless CKC_SKIP_SLOW=1)
#   scripts/llama_cpp.sh --print    the configuration key and CMake arguments, nothing installed
#   scripts/llama_cpp.sh --rebuild  build again even when a cached wheel exists
#   scripts/llama_cpp.sh --lib      build (or take the cached wheel), unpack its libraries next to it and print
#                                   their folder, nothing installed: LLAMA_CPP_LIB_PATH=<it> makes the installed
#                                   llama-cpp-python load them
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
mode=install
case "${1:-}" in
    "") ;;
    --print) mode=print ;;
    --rebuild) mode=rebuild ;;
    --lib) mode=lib ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "llama_cpp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

# ---- the configuration for this CPU ----------------------------------------------
flags=" $(grep -m1 '^flags' "${CKC_CPUINFO:-/proc/cpuinfo}" 2>/dev/null | cut -d: -f2) "  # CKC_CPUINFO: tests
has() { [[ "$flags" == *" $1 "* ]]; }
config=${CKC_LLAMA_CPP_CONFIG:-}
if [ -z "$config" ]; then
    config=native
    if has amx_tile || has amx_int8 || has amx_bf16; then config=noamx; fi
fi
case "$config" in
    native) ARGS=(-DGGML_NATIVE=ON) ;;
    noamx|avx512|avx2-vnni|avx2)
        ARGS=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
        # a flag on where the CPU has it and the configuration's level admits it
        on() { if has "$1" && [ "${3:-yes}" = yes ]; then ARGS+=("-D$2=ON"); else ARGS+=("-D$2=OFF"); fi; }
        upto() { case "$config:$1" in avx2:vnni|avx2:avx512|avx2-vnni:avx512|avx512:vbmi|avx512:bf16) echo no ;;
                                      *) echo yes ;; esac; }
        on sse4_2 GGML_SSE42; on avx GGML_AVX; on avx2 GGML_AVX2; on fma GGML_FMA; on f16c GGML_F16C
        on bmi2 GGML_BMI2; on avx_vnni GGML_AVX_VNNI "$(upto vnni)"
        # GGML_AVX512 asks for F, CD, VL, DQ and BW together
        if has avx512f && has avx512cd && has avx512vl && has avx512dq && has avx512bw && [ "$(upto avx512)" = yes ]; then
            ARGS+=(-DGGML_AVX512=ON); on avx512vbmi GGML_AVX512_VBMI "$(upto vbmi)"; on avx512_vnni GGML_AVX512_VNNI
            on avx512_bf16 GGML_AVX512_BF16 "$(upto bf16)"
        else
            ARGS+=(-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
        fi ;;
    *) echo "llama_cpp.sh: CKC_LLAMA_CPP_CONFIG must be native, noamx, avx512, avx2-vnni or avx2, not '$config'" >&2
       exit 2 ;;
esac
if [ -n "${CKC_LLAMA_CPP_CMAKE_ARGS:-}" ]; then
    read -r -a extra <<< "$CKC_LLAMA_CPP_CMAKE_ARGS"
    ARGS+=("${extra[@]}")
fi
# the key: the configuration, and a hash of what the build depends on (the CMake arguments, the CPU's flags for a
# native build, the compiler)
cpu_part=""; [ "$config" = native ] && cpu_part="$flags"
KEY="$config-$(printf '%s\n' "${ARGS[*]}" "$cpu_part" "$(cc --version 2>/dev/null | head -1)" | sha256sum | cut -c1-12)"
if [ "$mode" = print ]; then
    echo "config: $KEY"
    echo "cmake:  ${ARGS[*]}"
    exit 0
fi

[ -x "$PY" ] || { echo "llama_cpp.sh: no .venv; run scripts/install_deps.sh first" >&2; exit 1; }
mapfile -t PINS < <(sed -n 's/^#opt-in \(.*==.*\)$/\1/p' "$ROOT/requirements.txt")
LLAMA=$(printf '%s\n' "${PINS[@]}" | grep '^llama-cpp-python==')
VERSION=${LLAMA#*==}
MARK="$ROOT/.venv/ckc-llama-cpp-config"   # the configuration of the build installed in .venv
if [ "$mode" = lib ] && [ -f "${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/wheels/$KEY/lib/libllama.so" ]; then
    echo "${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/wheels/$KEY/lib"
    exit 0
fi
if [ "$mode" = install ] && have=$("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null) &&
   [ "$have" = "$VERSION" ] && [ "$(cat "$MARK" 2>/dev/null)" = "$KEY" ]; then
    echo "llama_cpp.sh: llama-cpp-python $have present ($KEY)"
    exit 0
fi
CACHE="${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/wheels/$KEY"
mkdir -p "$CACHE"
WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ] || [ "$mode" = rebuild ]; then
    echo "llama_cpp.sh: building $LLAMA from source ($KEY: ${ARGS[*]}; several minutes)"
    tmp=$(mktemp -d "$CACHE/build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    CMAKE_ARGS="${ARGS[*]}" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip wheel -q --no-deps --no-cache-dir "$LLAMA" -w "$tmp"
    rm -f "$CACHE"/llama_cpp_python-"$VERSION"-*.whl
    mv "$tmp"/llama_cpp_python-*.whl "$CACHE"/   # complete wheels only: a killed build leaves nothing
    WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl | head -1)
    printf '%s\n' "${ARGS[*]}" > "$CACHE/cmake-args"
    rm -rf "$tmp"
    trap - EXIT
fi
if [ "$mode" = lib ]; then  # the wheel's llama_cpp/lib, unpacked whole before it is put in place
    tmp=$(mktemp -d "$CACHE/lib.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("llama_cpp/lib/")])' "$WHEEL" "$tmp"
    rm -rf "$CACHE/lib"
    mv "$tmp/llama_cpp/lib" "$CACHE/lib"
    echo "$CACHE/lib"
    exit 0
fi
others=()
for p in "${PINS[@]}"; do [ "$p" != "$LLAMA" ] && others+=("$p"); done
"$PY" -m pip install -q --no-deps --force-reinstall "${others[@]}" "$WHEEL"
echo "$KEY" > "$MARK"
"$PY" -c 'import llama_cpp; print("llama_cpp.sh: llama-cpp-python", llama_cpp.__version__, "installed")'
echo "llama_cpp.sh: $KEY (${ARGS[*]})"
