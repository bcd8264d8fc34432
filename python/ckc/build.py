"""Find the ckc compiler and runtime, compile a model, build it with the documented cc line.

    c_path = compile_model("path/to/config.json", "out")   # out/model.c (+ .kernels)
    so     = build_library(c_path)                          # out/libmodel.so

Where things are: an installed package (pip install .) holds ckc/bin/ckc, ckc/runtime and
ckc/templates; a checkout has build/ckc and runtime/ at its root (ROOT). $CKC_BIN overrides the binary.
"""
import hashlib
import os
import shlex
import shutil
import subprocess

PACKAGE = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(os.path.dirname(PACKAGE))
# the checkout this package lives in (python/ckc), or None when installed
ROOT = _root if os.path.isdir(os.path.join(_root, "runtime", "include")) else None


def _home():
    """The folder holding runtime/ (and templates/): the installed package, else the checkout."""
    if os.path.isdir(os.path.join(PACKAGE, "runtime", "include")):
        return PACKAGE
    if ROOT:
        return ROOT
    raise FileNotFoundError(f"no runtime/ in {PACKAGE} and no ckc checkout around it: reinstall ckc (pip install .)")


def cache_dir():
    """Where ckc keeps what it builds or fetches (compiled graphs, models, the tokenizer library): $CKC_CACHE_DIR,
    else $XDG_CACHE_HOME/ckc, else ~/.cache/ckc."""
    d = os.environ.get("CKC_CACHE_DIR")
    if not d:
        d = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ckc")
    return os.path.abspath(d)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ckc_binary():
    """$CKC_BIN, else the binary installed in the package, else build/ckc in the checkout."""
    env = os.environ.get("CKC_BIN")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"CKC_BIN={env} does not exist")
        return env
    for path in (os.path.join(PACKAGE, "bin", "ckc"), os.path.join(ROOT, "build", "ckc") if ROOT else ""):
        if path and os.path.exists(path):
            return path
    raise FileNotFoundError("the ckc compiler is not built: in the checkout run "
                            "cmake -S . -B build && cmake --build build (or pip install .)")


def include_dir():
    """The runtime headers (ck_model.h, ck_graph.h, ...): what `ckc --include-dir` prints."""
    return os.path.join(_home(), "runtime", "include")


# How many times this process ran the compiler (ckc compile) and cc: the torch backend's cache tests read it.
INVOCATIONS = {"ckc": 0, "cc": 0}


def run(cmd, cwd=None):
    """Runs a command; raises RuntimeError with its output when it fails."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(map(shlex.quote, cmd))}\n{p.stdout}{p.stderr}")
    return p


def compile_model(config, out_dir, name="model.c", args=()):
    """ckc compile CONFIG -o OUT_DIR/NAME [args]; returns the C path."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(os.path.abspath(out_dir), name)
    INVOCATIONS["ckc"] += 1
    run([ckc_binary(), "compile", os.path.abspath(config), "-o", out, *args])
    return out


def build_library(c_path, so_path=None, extra_flags=()):
    """The documented line, from any folder (model.c.kernels holds absolute paths):
    cc -O3 -fPIC -shared -I "$(ckc --include-dir)" model.c $(cat model.c.kernels) -lopenblas -lm -fopenmp"""
    so_path = so_path or os.path.join(os.path.dirname(c_path), "lib" + os.path.splitext(os.path.basename(c_path))[0] + ".so")
    line = (f"cc -O3 -fPIC -shared -I {shlex.quote(include_dir())} {shlex.quote(c_path)} "
            f"$(cat {shlex.quote(c_path + '.kernels')}) -lopenblas -lm -fopenmp {' '.join(extra_flags)} "
            f"-o {shlex.quote(so_path)}")
    if shutil.which("cc") is None:
        raise RuntimeError("no C compiler: ckc builds generated models with `cc` (install gcc or clang, e.g. "
                           "apt-get install build-essential)")
    INVOCATIONS["cc"] += 1
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
