"""Compile a model with the ckc binary and build it with the documented cc line.

    c_path = compile_model("models/tiny-llama/config.json", "out")   # out/model.c (+ .kernels)
    so     = build_library(c_path)                                     # out/libmodel.so
"""
import os
import shlex
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ckc_binary():
    """build/ckc in this checkout, or $CKC_BIN."""
    path = os.environ.get("CKC_BIN", os.path.join(ROOT, "build", "ckc"))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: build ckc first (cmake -S . -B build && cmake --build build)")
    return path


def run(cmd, cwd=ROOT):
    """Runs a command; raises RuntimeError with its output when it fails."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(map(shlex.quote, cmd))}\n{p.stdout}{p.stderr}")
    return p


def compile_model(config, out_dir, name="model.c", args=()):
    """ckc compile CONFIG -o OUT_DIR/NAME [args]; returns the C path."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(os.path.abspath(out_dir), name)
    run([ckc_binary(), "compile", os.path.abspath(config), "-o", out, *args])
    return out


def build_library(c_path, so_path=None, extra_flags=()):
    """cc -O3 -fPIC -shared -I runtime/include model.c $(cat model.c.kernels) -lopenblas -lm -fopenmp, run from the
    repository root exactly as documented."""
    so_path = so_path or os.path.join(os.path.dirname(c_path), "lib" + os.path.splitext(os.path.basename(c_path))[0] + ".so")
    line = (f"cc -O3 -fPIC -shared -I runtime/include {shlex.quote(c_path)} $(cat {shlex.quote(c_path + '.kernels')}) "
            f"-lopenblas -lm -fopenmp {' '.join(extra_flags)} -o {shlex.quote(so_path)}")
    run(["sh", "-c", line])
    return so_path


def random_weights(config, out_dir, seed=0, dtype="f32", shard_size=0):
    """ckc random-weights: a deterministic checkpoint folder for CONFIG."""
    cmd = [ckc_binary(), "random-weights", os.path.abspath(config), "-o", os.path.abspath(out_dir), "--seed", str(seed),
           "--dtype", dtype]
    if shard_size:
        cmd += ["--shard-size", str(shard_size)]
    run(cmd)
    return out_dir
