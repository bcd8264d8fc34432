#!/bin/sh
# Generated models built with AddressSanitizer + UndefinedBehaviorSanitizer:
# generation through main() for several families, the ABI's error paths
# (tests/c/api_check.c), GGUF and converted stored formats, a corrupt checkpoint and GGUF, an exported graph through
# the ck_graph ABI (tests/c/graph_check.c), and handles used from 8 threads at once under ThreadSanitizer
# (tests/c/threads_check.c). Any sanitizer report fails the test.
#   sanitized_model.sh CKC_BINARY WORKDIR [PYTHON]   (run from the repository root)
set -eu
CKC=$1
OUT=$2
CFG=models/tiny-llama/config.json
SAN="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
export ASAN_OPTIONS=exitcode=99:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1
rm -rf "$OUT"
mkdir -p "$OUT/bad"

# objs KERNELS_FILE [FLAGS...]: the object files of the runtime sources a model.c.kernels lists, each compiled once
# with $SAN (and FLAGS) and reused by every model below (the runtime is the same for all of them)
objs() {
    list=$1
    shift
    dir="$OUT/objs/$(echo "x $*" | cksum | cut -d' ' -f1)"
    mkdir -p "$dir"
    for src in $(cat "$list"); do
        o="$dir/$(echo "$src" | sed 's|.*/runtime/||; s|/|__|g; s|\.c$|.o|')"
        [ -f "$o" ] || cc $SAN "$@" -fopenmp -I runtime/include -c "$src" -o "$o"
        echo "$o"
    done
}
"$CKC" compile "$CFG" -o "$OUT/model.c"
"$CKC" random-weights "$CFG" -o "$OUT/weights" --std 0.15 2>/dev/null

cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/model.c" $(objs "$OUT/model.c.kernels") -lopenblas -lm -fopenmp -o "$OUT/model"
"$OUT/model" "$OUT/weights" -n 40 -t 2 1 2 3 > "$OUT/generated.txt"
echo "generated: $(cat "$OUT/generated.txt")"

cc $SAN -I runtime/include tests/c/api_check.c "$OUT/model.c" $(objs "$OUT/model.c.kernels") -lopenblas -lm -fopenmp -o "$OUT/api_check"
"$OUT/api_check" "$OUT/weights"
cc $SAN -DCK_TRACE -I runtime/include tests/c/api_check.c "$OUT/model.c" $(objs "$OUT/model.c.kernels" -DCK_TRACE) -lopenblas -lm \
   -fopenmp -o "$OUT/api_check_trace"
"$OUT/api_check_trace" "$OUT/weights"

# the same model on the gcu device (--target gcu): device buffers that grow, the KV cache, RoPE tables and weights
# uploaded at init, the stream's worker thread; it generates the same ids as on the cpu
"$CKC" compile "$CFG" -o "$OUT/gcu/model.c" --target gcu
cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/gcu/model.c" $(objs "$OUT/gcu/model.c.kernels") -lopenblas -lm -fopenmp -lpthread \
   -o "$OUT/gcu/model"
"$OUT/gcu/model" "$OUT/weights" -n 40 -t 2 1 2 3 > "$OUT/gcu/generated.txt"
if ! cmp -s "$OUT/generated.txt" "$OUT/gcu/generated.txt"; then
    echo "gcu generated: $(cat "$OUT/gcu/generated.txt") (differs from the cpu's)"; exit 1
fi
cc $SAN -I runtime/include tests/c/api_check.c "$OUT/gcu/model.c" $(objs "$OUT/gcu/model.c.kernels") -lopenblas -lm -fopenmp -lpthread \
   -o "$OUT/gcu/api_check"
"$OUT/gcu/api_check" "$OUT/weights"

# the other families' paths: Conv1D transposes, learned positions, per-layer
# tables, soft-capping, LayerNorm, GELU, parallel blocks
for fam in gpt2 gemma2 phi qwen2; do
    "$CKC" compile models/tiny-$fam/config.json -o "$OUT/$fam/model.c"
    "$CKC" random-weights models/tiny-$fam/config.json -o "$OUT/$fam/weights" --std 0.15 2>/dev/null
    cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/$fam/model.c" $(objs "$OUT/$fam/model.c.kernels") -lopenblas -lm \
       -fopenmp -o "$OUT/$fam/model"
    "$OUT/$fam/model" "$OUT/$fam/weights" -n 20 -t 2 1 2 3 > "$OUT/$fam/generated.txt" 2> "$OUT/$fam/stderr.txt"
    echo "$fam: $(cat "$OUT/$fam/generated.txt")"
done

# stored formats: GGUF files written by ckc quantize (q4_K with q5_0/f16 fallbacks, q6_K, q4_1 for the tiny
# shapes) compiled from the file and run from the mapping, and --weights q8_0 converting safetensors at init;
# then a truncated GGUF: a clean error, no sanitizer report
for q in q4_K q6_K q4_1; do
    "$CKC" quantize "$OUT/weights" -o "$OUT/gguf-$q/model.gguf" --type $q 2>/dev/null
    "$CKC" compile "$OUT/gguf-$q/model.gguf" -o "$OUT/gguf-$q/model.c"
    cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/gguf-$q/model.c" $(objs "$OUT/gguf-$q/model.c.kernels") -lopenblas \
       -lm -fopenmp -o "$OUT/gguf-$q/model"
    "$OUT/gguf-$q/model" "$OUT/gguf-$q/model.gguf" -n 20 -t 2 1 2 3 4 5 > "$OUT/gguf-$q/generated.txt"
    echo "gguf $q: $(cat "$OUT/gguf-$q/generated.txt")"
done
"$CKC" compile "$CFG" --weights q8_0 -o "$OUT/q8/model.c"
cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/q8/model.c" $(objs "$OUT/q8/model.c.kernels") -lopenblas -lm -fopenmp \
   -o "$OUT/q8/model"
"$OUT/q8/model" "$OUT/weights" -n 20 -t 2 1 2 3 4 5 > "$OUT/q8/generated.txt"
echo "--weights q8_0: $(cat "$OUT/q8/generated.txt")"
head -c 20000 "$OUT/gguf-q4_K/model.gguf" > "$OUT/bad/model.gguf"
rc=0
"$OUT/gguf-q4_K/model" "$OUT/bad/model.gguf" 1 2 2> "$OUT/bad-gguf.txt" || rc=$?
if [ "$rc" -ne 1 ] || grep -q -e "Sanitizer" -e "runtime error" "$OUT/bad-gguf.txt"; then
    echo "truncated GGUF: expected a clean exit 1, got $rc:"; cat "$OUT/bad-gguf.txt"; exit 1
fi
echo "truncated GGUF: $(cat "$OUT/bad-gguf.txt")"

# training (--train) through the C ABI: steps, misuse, save and reload (tests/c/train_check.c), for the
# families whose backward differs: RMSNorm + RoPE + GQA, Conv1D + learned positions + LayerNorm, soft-capping +
# sandwich norms + sliding windows, partial rotary + parallel blocks
for fam in llama gpt2 gemma2 phi; do
    W="$OUT/weights"
    [ "$fam" = llama ] || W="$OUT/$fam/weights"
    "$CKC" compile models/tiny-$fam/config.json --train -o "$OUT/train-$fam/model.c"
    cc $SAN -I runtime/include tests/c/train_check.c "$OUT/train-$fam/model.c" $(objs "$OUT/train-$fam/model.c.kernels") \
       -lopenblas -lm -fopenmp -o "$OUT/train-$fam/train_check"
    "$OUT/train-$fam/train_check" "$W" "$OUT/train-$fam" > "$OUT/train-$fam/out.txt"
    echo "$fam: $(head -1 "$OUT/train-$fam/out.txt")"
done

head -c 3000 "$OUT/weights/model.safetensors" > "$OUT/bad/model.safetensors"
rc=0
"$OUT/model" "$OUT/bad" 1 2 2> "$OUT/bad.txt" || rc=$?
if [ "$rc" -ne 1 ] || grep -q -e "Sanitizer" -e "runtime error" "$OUT/bad.txt"; then
    echo "corrupt checkpoint: expected a clean exit 1, got $rc:"; cat "$OUT/bad.txt"; exit 1
fi
echo "corrupt checkpoint: $(cat "$OUT/bad.txt")"

# an exported graph (the GPT-style example: int64 ids, folded layers, fused
# causal attention) through the ck_graph ABI and its misuse (tests/c/graph_check.c)
PY=${3:-.venv/bin/python}
"$PY" - "$OUT/graph" <<'PYEOF'
import sys, torch
import ckc
from ckc.examples import GPT, randomize
m = randomize(GPT(vocab=96, dim=64, heads=4, layers=3, max_len=32))
ckc.export(m, (torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(0)),), sys.argv[1] + "/export")
PYEOF
"$CKC" compile "$OUT/graph/export/graph.json" -o "$OUT/graph/model.c"
cc $SAN -I runtime/include tests/c/graph_check.c "$OUT/graph/model.c" $(objs "$OUT/graph/model.c.kernels") \
   -lopenblas -lm -fopenmp -o "$OUT/graph/graph_check"
"$OUT/graph/graph_check" "$OUT/graph/model.weights.safetensors" 96

# one handle per thread, the documented rule, under ThreadSanitizer (tests/c/threads_check.c): 8 threads, each with
# its own handle of one library, 200 greedy decode steps (twice, a cache reset between) / 200 graph runs each, equal
# to a single-threaded run. Built without OpenMP (libgomp is not instrumented) and with one BLAS thread.
TSAN="-O1 -g -fsanitize=thread -fno-omit-frame-pointer"
export TSAN_OPTIONS="halt_on_error=1:exitcode=66"
cc $TSAN -I runtime/include tests/c/threads_check.c "$OUT/model.c" $(cat "$OUT/model.c.kernels") -lopenblas -lm \
   -lpthread -o "$OUT/threads_check"
OPENBLAS_NUM_THREADS=1 "$OUT/threads_check" "$OUT/weights" 8 200
cc $TSAN -DCK_CHECK_GRAPH -I runtime/include tests/c/threads_check.c "$OUT/graph/model.c" \
   $(cat "$OUT/graph/model.c.kernels") -lopenblas -lm -lpthread -o "$OUT/graph/threads_check"
OPENBLAS_NUM_THREADS=1 "$OUT/graph/threads_check" "$OUT/graph/model.weights.safetensors" 8 200 96

# a bool mask reshaped into an output (what AOTAutograd's backward graphs return for the embedding's
# gradient): its copy moves bytes, not floats (tests/c/graph_run.c sizes every buffer exactly)
"$PY" - "$OUT/mask" <<'PYEOF'
import sys, torch
import ckc
class MaskOut(torch.nn.Module):
    def forward(self, x, mask):
        return x * 2.0, mask.unsqueeze(-1)
ckc.export(MaskOut(), (torch.randn(4, 16), torch.rand(16) > 0.5), sys.argv[1] + "/export")
PYEOF
"$CKC" compile "$OUT/mask/export/graph.json" -o "$OUT/mask/model.c"
cc $SAN -I runtime/include tests/c/graph_run.c "$OUT/mask/model.c" $(objs "$OUT/mask/model.c.kernels") \
   -lopenblas -lm -fopenmp -o "$OUT/mask/graph_run"
"$OUT/mask/graph_run"

# the same graph on the gcu device (--target gcu): uploads, the stream's worker thread, copies in and out
"$CKC" compile "$OUT/graph/export/graph.json" -o "$OUT/graph-gcu/model.c" --target gcu
cc $SAN -I runtime/include tests/c/graph_check.c "$OUT/graph-gcu/model.c" $(objs "$OUT/graph-gcu/model.c.kernels") \
   -lopenblas -lm -fopenmp -lpthread -o "$OUT/graph-gcu/graph_check"
"$OUT/graph-gcu/graph_check" "$OUT/graph-gcu/model.weights.safetensors" 96

# text in, text out: the real SmolLM2 GGUF (tokenizer from its metadata, chat template, generation that stops,
# the executable's --prompt and --chat with the KV cache kept across turns), and a tokenizer.json beside
# safetensors weights
case "$PY" in /*) PYABS=$PY ;; *) PYABS=$(pwd)/$PY ;; esac
SMOL=$(cd tests/python && "$PYABS" -c 'from references import smollm2_gguf; print(smollm2_gguf())')
"$CKC" compile "$SMOL" -o "$OUT/smol/model.c"
cc $SAN -DCK_MODEL_MAIN -I runtime/include "$OUT/smol/model.c" $(objs "$OUT/smol/model.c.kernels") -lopenblas -lm \
   -fopenmp -o "$OUT/smol/model"
"$OUT/smol/model" "$SMOL" --prompt "What is 2 + 2?" -n 24 -t 2 > "$OUT/smol/answer.txt"
echo "smollm2 --prompt: $(cat "$OUT/smol/answer.txt")"
printf 'Hi!\nWhat is 2 + 2?\n/reset\nName a fruit.\n' | "$OUT/smol/model" "$SMOL" --chat -n 12 -t 2 --temp 0.7 --top-k 40 \
    --top-p 0.9 --min-p 0.05 --repeat-penalty 1.1 --seed 1 > "$OUT/smol/chat.txt"
echo "smollm2 --chat: $(tr '\n' '|' < "$OUT/smol/chat.txt")"
"$OUT/smol/model" "$SMOL" --prompt "Once upon a time" --raw -n 16 --stop " the" > "$OUT/smol/story.txt"
echo "smollm2 --raw --stop: $(cat "$OUT/smol/story.txt")"
