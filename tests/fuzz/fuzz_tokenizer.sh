#!/bin/sh
# Fuzzes the tokenizers with libFuzzer under ASan + UBSan (clang): the loaders on mutated tokenizer.json /
# tokenizer.model / GGUF files, and encode / decode / streaming decode on mutated text with the families'
# tokenizers. Seeds: real tokenizer files and the test corpus. Fails on any crash, leak or sanitizer report.
#   tests/fuzz/fuzz_tokenizer.sh WORK_DIR PYTHON [SECONDS_PER_TARGET]
set -eu
WORK=$1
PY=$2
SECONDS_EACH=${3:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case "$PY" in /*) ;; */*) PY="$(pwd)/$PY" ;; esac
mkdir -p "$WORK/corpus-load" "$WORK/corpus-encode"
WORK=$(cd "$WORK" && pwd)

SRC="$ROOT/runtime/text/tokenizer.c $ROOT/runtime/text/tokenizer_load.c $ROOT/runtime/text/pretokenize.c
     $ROOT/runtime/text/normalize.c $ROOT/runtime/text/unicode.c $ROOT/runtime/io/*.c"
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I $ROOT/runtime/include"
for t in load encode; do
    # shellcheck disable=SC2086
    clang $FLAGS "$ROOT/tests/fuzz/fuzz_tokenizer_$t.c" $SRC -lm -o "$WORK/fuzz_tokenizer_$t"
done

# the tokenizers (trained with Hugging Face tokenizers / sentencepiece, cached) and the seed corpora
TOKS=$(cd "$ROOT/tests/python" && "$PY" -c '
import os, tokenizer_cases as tc, references
base = os.path.join(references.CACHE, "tokenizers")
paths = [tc.save_family(f, os.path.join(base, f)) for f in ("phi2", "llama3", "qwen2", "phi3", "mistral", "gemma")]
paths.append(tc.sentencepiece_model(os.path.join(base, "sentencepiece")))
print(":".join(paths))')
mkdir -p "$WORK/seed-load" "$WORK/seed-encode"
i=0
for p in $(echo "$TOKS" | tr ':' ' '); do
    case "$p" in *.model) kind='\001' ;; *) kind='\000' ;; esac
    { printf "$kind"; head -c 60000 "$p"; } > "$WORK/seed-load/tok$i"   # (a prefix: a truncated file is a case too)
    i=$((i + 1))
done
(cd "$ROOT/tests/python" && "$PY" -c '
import sys, text_corpus
for i, d in enumerate(text_corpus.documents()[:60]):
    open(f"{sys.argv[1]}/doc{i}", "wb").write(d.encode())
for i, b in enumerate(text_corpus.invalid_utf8()):
    open(f"{sys.argv[1]}/bad{i}", "wb").write(b)' "$WORK/seed-encode")

run() { # name, then the fuzzer's command line: prints its last lines, fails with it
    name=$1
    shift
    if "$@" >"$WORK/$name.log" 2>&1; then tail -3 "$WORK/$name.log"; else
        tail -40 "$WORK/$name.log"
        echo "== fuzz: $name FAILED (input saved as $WORK/crash-$name-*)"
        exit 1
    fi
}
echo "== fuzz the tokenizer loaders ($SECONDS_EACH s)"
run load "$WORK/fuzz_tokenizer_load" -max_total_time="$SECONDS_EACH" -max_len=70000 -print_final_stats=1 \
    -artifact_prefix="$WORK/crash-load-" "$WORK/corpus-load" "$WORK/seed-load"
echo "== fuzz encode / decode ($SECONDS_EACH s)"
CK_FUZZ_TOKENIZERS=$TOKS run encode "$WORK/fuzz_tokenizer_encode" -max_total_time="$SECONDS_EACH" -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$WORK/crash-encode-" "$WORK/corpus-encode" "$WORK/seed-encode"
echo "== fuzz: no crashes"
