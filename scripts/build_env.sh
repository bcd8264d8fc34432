# Sourced by scripts/demo.sh and scripts/test.sh (not run): every CMake build they start (ckc's Release build,
# the sanitizer and fuzz builds, the cmake-package and pip-install tests' builds) compiles through ccache when it is
# installed (scripts/install_deps.sh installs it), with the cache outside the checkout, so a fresh clone
# recompiles only what changed since an earlier build on this machine (the Release build on 2 cores of a Zen 3:
# 5 min 8 s cold, 36 s from the cache in another folder). Paths inside the checkout (the sourcing script's
# folder) are hashed relative to the compiling folder (base_dir, hash_dir off), so clones in different folders
# share entries; system paths stay absolute. CMake reads the launcher from the environment at a build folder's
# first configure. CKC_NO_CCACHE=1: compile without it.
if [ -z "${CKC_NO_CCACHE:-}" ] && command -v ccache >/dev/null 2>&1; then
    export CCACHE_DIR="${CCACHE_DIR:-${CKC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckc}/ccache}"
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-4G}"
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
