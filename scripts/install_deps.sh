#!/usr/bin/env bash
# Installs everything ckc needs, idempotently; fast when all is present.
#
# 1. Debian packages (apt; root or sudo only when something is missing):
#      g++, cmake                 build ckc (C++17) and the generated C (C99)
#      ccache                     the test and demo scripts' builds start from earlier ones (scripts/build_env.sh)
#      libopenblas-dev            GEMM/GEMV in the runtime (and the -lopenblas link)
#      nlohmann-json3-dev, libcli11-dev, libfmt-dev   the compiler's JSON, CLI, formatting
#      catch2                     unit tests (v2)
#      clang, libclang-rt-14-dev  libFuzzer + sanitizers for the tokenizer fuzzing (tests/fuzz)
#      python3-venv               a venv when the only Python is Debian's
#      gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user     ARM64 builds of a --standalone model.c, run
#                                 under emulation (tests/python/test_standalone.py)
#      wasi-libc, lld-14, libclang-rt-14-dev-wasm32   wasm32-wasi builds with clang (run by wasmtime, PyPI)
#      gcc-arm-none-eabi, libnewlib-arm-none-eabi       32-bit Cortex-M builds (compile and size)
#      chromium                   the browser demo's test, headless (build_examples/web, tests/python/test_web.py)
# 2. The Python environment: a venv at .venv/ in this checkout holding exactly
#    requirements.txt (torch 2.13 CPU, transformers, numpy, pytest, ...), with
#    this checkout's python/ on its path so that `import ckc` works in it.
#    Every script and test runs .venv/bin/python (scripts/py finds it).
#    The venv is stamped with the hash of requirements.txt once the install and
#    an import check succeed; a venv without a matching stamp is rebuilt, and a
#    failed install removes it, so nothing half-installed is used silently.
#
#   scripts/install_deps.sh            both
#   CKC_BASE_PYTHON=/path/python3 ...  the interpreter the venv is made from (default: python3 on PATH)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

PACKAGES=(g++ gcc make cmake ccache libopenblas-dev nlohmann-json3-dev libcli11-dev libfmt-dev catch2 clang libclang-rt-14-dev
          python3 python3-venv
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user wasi-libc lld-14 libclang-rt-14-dev-wasm32
          gcc-arm-none-eabi libnewlib-arm-none-eabi chromium)

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_deps: all ${#PACKAGES[@]} Debian packages present"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null; then SUDO=sudo; else
            echo "install_deps: need root to install: ${missing[*]}" >&2
            exit 1
        fi
    fi
    echo "install_deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- the Python environment -------------------------------------------------
VENV="$ROOT/.venv"
STAMP="$VENV/.ckc-stamp"
BASE=${CKC_BASE_PYTHON:-$(command -v python3 || echo /usr/bin/python3)}
want="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1) $("$BASE" -c 'import sys; print(sys.version.split()[0])')"

# This checkout's package on the venv's path (what an editable install does, without building), and the
# entry points pyproject.toml declares (torch finds the "gcu" backend through them), as an installed
# distribution "ckc-checkout" would.
link_checkout() {
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$ROOT/python" > "$site/ckc-checkout.pth"
    mkdir -p "$site/ckc_checkout-0.0.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: ckc-checkout\nVersion: 0.0.0\nSummary: the ckc checkout at %s\n' "$ROOT" \
        > "$site/ckc_checkout-0.0.0.dist-info/METADATA"
    printf '[torch_dynamo_backends]\ngcu = ckc.conductor:gcu\n' > "$site/ckc_checkout-0.0.0.dist-info/entry_points.txt"
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && link_checkout &&
   have=$("$VENV/bin/python" -c 'import torch, transformers, ckc; print("torch", torch.__version__)' 2>/dev/null); then
    echo "install_deps: Python environment .venv up to date ($have)"
    exit 0
fi

if ! "$BASE" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    echo "install_deps: $BASE cannot make a venv (need Python >= 3.9 with venv and ensurepip);" \
         "set CKC_BASE_PYTHON to one that can" >&2
    exit 1
fi
echo "install_deps: creating .venv from $BASE and installing requirements.txt (about a minute)"
rm -rf "$VENV"
trap 'echo "install_deps: the Python install failed; removed the partial .venv" >&2; rm -rf "$VENV"' ERR
"$BASE" -m venv "$VENV"
LOG=$(mktemp)
if ! { "$VENV/bin/python" -m pip install --upgrade pip && "$VENV/bin/python" -m pip install -r "$ROOT/requirements.txt"; } \
        >"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2; rm -f "$LOG"; false
fi
rm -f "$LOG"
link_checkout
"$VENV/bin/python" - <<'EOF'
import sys
import numpy, pytest, safetensors, tokenizers, sentencepiece, gguf, torch, transformers
assert int(torch.__version__.split(".")[0]) >= 2, f"torch {torch.__version__} is not 2.x"
import ckc
print(f"install_deps: Python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__},"
      f" numpy {numpy.__version__}")
EOF
trap - ERR
echo "$want" > "$STAMP"
