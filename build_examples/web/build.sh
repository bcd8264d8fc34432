#!/usr/bin/env bash
# build.sh — the browser demo: compiles a GGUF language model to one standalone model.c, builds it for wasm32-wasi
# (clang + Debian's wasi-libc; SIMD128 where the compiler vectorizes), and puts the page, model.wasm and the GGUF in
# OUT. Then serve OUT and open it:
#
#   build_examples/web/build.sh SmolLM2-135M-Instruct.Q4_1.gguf out/web
#   python3 -m http.server -d out/web 8000        # http://localhost:8000
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ $# -ne 2 ]; then
    echo "usage: $0 MODEL.gguf OUT_DIR" >&2
    exit 2
fi
GGUF=$1
OUT=$2
[ -f "$GGUF" ] || { echo "build.sh: $GGUF: no such file" >&2; exit 1; }
CKC=${CKC_BIN:-$ROOT/build/ckc}
[ -x "$CKC" ] || CKC=$(command -v ckc) || { echo "build.sh: no ckc (build it: cmake --build build)" >&2; exit 1; }
mkdir -p "$OUT"
"$CKC" compile "$GGUF" --standalone -o "$OUT/model.c"
clang --target=wasm32-wasi --sysroot=/usr -O3 -msimd128 -DCK_MODEL_MAIN "$OUT/model.c" -lm -o "$OUT/model.wasm.tmp"
mv "$OUT/model.wasm.tmp" "$OUT/model.wasm"
cp "$HERE/index.html" "$HERE/worker.js" "$HERE/wasi.js" "$OUT/"
ln -sf "$(cd "$(dirname "$GGUF")" && pwd)/$(basename "$GGUF")" "$OUT/model.gguf"
echo "build.sh: $OUT holds the page, model.wasm ($(du -k "$OUT/model.wasm" | cut -f1) KiB) and model.gguf; serve it:"
echo "  python3 -m http.server -d $OUT 8000"
