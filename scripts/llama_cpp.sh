#!/usr/bin/env bash
# Installs llama-cpp-python (llama.cpp, the reference ckc's GGUF path is tested
# and benchmarked against) into .venv, at the version requirements.txt pins on
# its "#opt-in" lines. It is built from source by pip (llama.cpp for this
# machine's CPU, several minutes on 2 cores), so the built wheel is cached in
# ${CKC_CACHE_DIR:-~/.cache/ckc}/wheels and later installs take seconds.
# Idempotent: does nothing when the pinned version is importable.
#
#   scripts/llama_cpp.sh        (scripts/test.sh runs it unless CKC_SKIP_SLOW=1)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "llama_cpp.sh: no .venv; run scripts/install_deps.sh first" >&2; exit 1; }
mapfile -t PINS < <(sed -n 's/^#opt-in \(.*==.*\)$/\1/p' "$ROOT/requirements.txt")
LLAMA=$(printf '%s\n' "${PINS[@]}" | grep '^llama-cpp-python==')
VERSION=${LLAMA#*==}
if have=$("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null) && [ "$have" = "$VERSION" ]; then
    echo "llama_cpp.sh: llama-cpp-python $have present"
    exit 0
fi
CACHE="${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/wheels"
mkdir -p "$CACHE"
WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ]; then
    echo "llama_cpp.sh: building $LLAMA from source (llama.cpp; several minutes)"
    tmp=$(mktemp -d "$CACHE/build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip wheel -q --no-deps "$LLAMA" -w "$tmp"
    mv "$tmp"/llama_cpp_python-*.whl "$CACHE"/   # complete wheels only: a killed build leaves nothing
    WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl | head -1)
fi
others=()
for p in "${PINS[@]}"; do [ "$p" != "$LLAMA" ] && others+=("$p"); done
"$PY" -m pip install -q --no-deps "${others[@]}" "$WHEEL"
"$PY" -c 'import llama_cpp; print("llama_cpp.sh: llama-cpp-python", llama_cpp.__version__, "installed")'
