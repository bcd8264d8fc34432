#!/usr/bin/env bash
# Installs every Debian package ckc needs. Idempotent: does nothing when all
# are present. Needs root (or sudo) only when something is missing.
#   g++, cmake            build ckc (C++17) and the generated C (C99)
#   libopenblas-dev       GEMM/GEMV in the runtime (and the -lopenblas link)
#   nlohmann-json3-dev, libcli11-dev, libfmt-dev   the compiler's JSON, CLI, formatting
#   catch2                unit tests (v2)
#   python3-numpy, python3-torch, python3-pytest   ctypes wrapper, PyTorch references, parity tests
set -euo pipefail

PACKAGES=(g++ gcc make cmake libopenblas-dev nlohmann-json3-dev libcli11-dev libfmt-dev catch2
          python3 python3-numpy python3-pytest python3-torch)

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_deps: all ${#PACKAGES[@]} packages present"
    exit 0
fi

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
