"""Build a `ckc compile --standalone` model.c for a CPU and run it there (or under emulation on this machine).

    exe = cross.build("out/model.c", "out/model-arm64", target="aarch64")
    subprocess.run(cross.command("aarch64", exe, [weights, "--logits", "1", "2", "3"]))

Targets and what they need (scripts/install_deps.sh installs them all on Debian):
    native    cc                                   runs directly
    aarch64   aarch64-linux-gnu-gcc, -static       runs under qemu-aarch64 (qemu-user)
    wasm32    clang --target=wasm32-wasi (wasi-libc, lld, libclang-rt wasm32)   runs under wasmtime (python -m ckc.wasi)
    cortex-m7 arm-none-eabi-gcc, newlib's nosys specs   compiles and links only (cross.size: text/data/bss)
The file itself needs nothing but a C99 compiler and libm: no OpenBLAS, no OpenMP, no ckc headers.
"""
import os
import shutil
import sys

from . import build as _build

TARGETS = {
    "native": {"cc": ["cc"], "flags": [], "run": []},
    "aarch64": {"cc": ["aarch64-linux-gnu-gcc"], "flags": ["-static"], "run": ["qemu-aarch64"]},
    "wasm32": {"cc": ["clang", "--target=wasm32-wasi", "--sysroot=/usr"], "flags": [],
               "run": [sys.executable, "-m", "ckc.wasi"]},
    # a 32-bit microcontroller (newlib, no OS): compile and link only, there is nothing here to run it
    "cortex-m7": {"cc": ["arm-none-eabi-gcc", "-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"],
                  "flags": ["--specs=nosys.specs"], "run": None},
}


def missing_tools(target):
    """The programs `target` needs that are not on PATH (what to install), [] when it can build and run."""
    t = TARGETS[target]
    need = [t["cc"][0]] + ([t["run"][0]] if t["run"] and target != "wasm32" else [])
    if target == "cortex-m7":
        need.append("arm-none-eabi-size")
    out = [p for p in need if shutil.which(p) is None]
    if target == "wasm32":
        if not os.path.isdir("/usr/lib/wasm32-wasi") and not os.path.isdir("/usr/share/wasi-sysroot"):
            out.append("wasi-libc")
        try:
            import wasmtime  # noqa: F401
        except ImportError:
            out.append("wasmtime (PyPI)")
    return out


def build(c_path, exe, target="native", opt="-O2", flags=(), main="-DCK_MODEL_MAIN", libs=()):
    """cc `opt` `main` `flags` c_path `libs` -lm -o exe for `target`; returns exe. Raises RuntimeError with the
    compiler's output when it fails."""
    t = TARGETS[target]
    cmd = [*t["cc"], opt, *([main] if main else []), *flags, c_path, *libs, "-lm", *t["flags"], "-o", exe]
    _build.run(cmd)
    return exe


def size(exe, target="cortex-m7"):
    """{"text", "data", "bss"} bytes of a built program (binutils' size of the target)."""
    tool = "arm-none-eabi-size" if target == "cortex-m7" else "size"
    line = _build.run([tool, exe]).stdout.splitlines()[1].split()
    return {"text": int(line[0]), "data": int(line[1]), "bss": int(line[2])}


def command(target, exe, args):
    """The command line that runs `exe` built for `target` with `args` on this machine. For wasm32 the folders
    of the arguments that are paths are opened to the program (WASI sees nothing else)."""
    t = TARGETS[target]
    if t["run"] is None:
        raise ValueError(f"{target}: nothing on this machine runs it (it is built to be flashed)")
    if target != "wasm32":
        return [*t["run"], exe, *args]
    dirs = sorted({os.path.dirname(os.path.abspath(a)) if os.path.isfile(a) else os.path.abspath(a)
                   for a in args if os.path.exists(a)})
    return [*t["run"], *[x for d in dirs for x in ("--dir", d)], exe, *args]
