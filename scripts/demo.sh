#!/usr/bin/env bash
# The main job on a bundled model, from a bare Debian 12 machine:
# install dependencies (apt + the pinned .venv), build ckc, compile the model
# to C, build it with cc, write deterministic random weights, and generate
# tokens (Python + C).
#   scripts/demo.sh [path/to/config.json]     (default: models/tiny-llama/config.json)
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=${1:-models/tiny-llama/config.json}
OUT=out/demo

scripts/install_deps.sh
echo "== build ckc"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ckc

echo "== compile $CONFIG"
build/ckc compile "$CONFIG" -o "$OUT/model.c" --report

echo "== build $OUT/libmodel.so"
cc -O3 -fPIC -shared -I "$(build/ckc --include-dir)" "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm -fopenmp \
   -o "$OUT/libmodel.so"

echo "== random weights (seed 0) in $OUT/weights"
build/ckc random-weights "$CONFIG" -o "$OUT/weights" --seed 0 --std 0.15

echo "== generate through ctypes (scripts/generate.py)"
scripts/py scripts/generate.py --lib "$OUT/libmodel.so" --weights "$OUT/weights" --prompt 1 2 3 4 \
    --max-new-tokens 24

echo "== the same model.c as an executable (-DCK_MODEL_MAIN)"
cc -O3 -DCK_MODEL_MAIN -I "$(build/ckc --include-dir)" "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm -fopenmp \
   -o "$OUT/model"
"$OUT/model" "$OUT/weights" -n 24 1 2 3 4
