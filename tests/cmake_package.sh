#!/bin/sh
# C/C++ users' path: `cmake --install` ckc into a prefix, then a separate CMake
# project (build_examples/cmake) finds it with find_package(ckc) and compiles a
# model into its build with ckc_add_model(). The program it links must generate
# the same tokens as the model built by the documented cc line, and the
# installed ckc must work with the checkout out of reach (CKC_HOME unset, run
# from another folder).
#   cmake_package.sh BUILD_DIR WORKDIR      (run from the repository root)
set -eu
BUILD=$1
OUT=$2
ROOT=$(pwd)
rm -rf "$OUT"
mkdir -p "$OUT"
cmake --install "$BUILD" --prefix "$OUT/prefix" >/dev/null
CKC="$OUT/prefix/bin/ckc"
test "$("$CKC" --include-dir)" = "$OUT/prefix/share/ckc/runtime/include"

cmake -S build_examples/cmake -B "$OUT/example" -DCMAKE_PREFIX_PATH="$OUT/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$OUT/example" -j2 >/dev/null
grep -q "$OUT/prefix/share/ckc/runtime" "$OUT/example/tiny_llama/model.c.kernels"

# the documented cc line, from an unrelated folder, with the installed ckc
cd "$OUT"
"$CKC" compile "$ROOT/models/tiny-llama/config.json" -o cc/model.c 2>/dev/null
cc -O3 -DCK_MODEL_MAIN -I "$("$CKC" --include-dir)" cc/model.c $(cat cc/model.c.kernels) -lopenblas -lm -fopenmp \
   -o cc/model
"$CKC" random-weights "$ROOT/models/tiny-llama/config.json" -o weights --std 0.15 2>/dev/null

a=$("$OUT/example/linked_generate" weights 24 1 2 3)
b=$(cc/model weights -n 24 1 2 3 2>/dev/null)
echo "find_package(ckc) + ckc_add_model: $a"
echo "documented cc line:                $b"
test "$a" = "$b"
test "$(echo "$a" | wc -w)" -eq 27
