#!/bin/sh
# Runs one libFuzzer harness for a fixed time and fails on any finding (crash, sanitizer report, leak, timeout,
# out-of-memory), printing the inputs run and the coverage reached. The corpus grows in WORK/corpus-NAME (kept
# between runs); a finding is saved as WORK/crash-NAME-*, to reproduce with `EXE FILE`.
#   tests/fuzz/run.sh NAME EXE SECONDS WORK MAX_LEN SEED_DIR...      (EXE: a libFuzzer binary, or an atheris .py)
# tokenizer-encode fuzzes with the families' real tokenizers and tokenizer-load also starts from prefixes of them
# (trained by tests/python/tokenizer_cases.py, cached): both need $CKC_PYTHON, the project's venv.
set -eu
NAME=$1 EXE=$2 SECONDS_EACH=$3 WORK=$4 MAX_LEN=$5
shift 5
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$WORK/corpus-$NAME"
WORK=$(cd "$WORK" && pwd)
EXTRA=""

tokenizers() { # the trained tokenizers' paths, colon-separated
    (cd "$ROOT/tests/python" && "${CKC_PYTHON:?set CKC_PYTHON to the venv python}" -c '
import os, tokenizer_cases as tc, references
base = os.path.join(references.CACHE, "tokenizers")
paths = [tc.save_family(f, os.path.join(base, f)) for f in ("phi2", "llama3", "qwen2", "phi3", "mistral", "gemma")]
paths.append(tc.sentencepiece_model(os.path.join(base, "sentencepiece")))
print(":".join(paths))')
}
case "$NAME" in
tokenizer-encode)
    CK_FUZZ_TOKENIZERS=$(tokenizers)
    export CK_FUZZ_TOKENIZERS ;;
tokenizer-load)
    mkdir -p "$WORK/seed-real-tokenizers"
    i=0
    for p in $(tokenizers | tr ':' ' '); do
        case "$p" in *.model) kind='\001' ;; *) kind='\000' ;; esac
        { printf "$kind"; head -c 60000 "$p"; } > "$WORK/seed-real-tokenizers/tok$i"  # a prefix: truncated files too
        i=$((i + 1))
    done
    EXTRA="$WORK/seed-real-tokenizers" ;;
esac

LOG="$WORK/$NAME.log"
RUN="$EXE"
case "$EXE" in *.py) RUN="${CKC_PYTHON:?set CKC_PYTHON to the venv python} $EXE" ;; esac  # an atheris harness
# -timeout: one input may take 10 s (the compiler on a big graph); -rss_limit_mb: what one input may hold
# shellcheck disable=SC2086
if $RUN -max_total_time="$SECONDS_EACH" -max_len="$MAX_LEN" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$WORK/crash-$NAME-" "$WORK/corpus-$NAME" "$@" $EXTRA >"$LOG" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOG" | tail -1)
    last=$(grep -E '^#[0-9]+' "$LOG" | tail -1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
    echo "fuzz $NAME: no finding; ${runs:-?} inputs in ${SECONDS_EACH} s, coverage ${cov:-?} edges (${ft:-?} features), corpus ${corp:-?} inputs" |
        tee "$WORK/summary-$NAME"
else
    tail -60 "$LOG"
    echo "fuzz $NAME: FINDING (the input is saved as $WORK/crash-$NAME-*; reproduce: $EXE FILE)"
    exit 1
fi
