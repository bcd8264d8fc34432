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


def object_cache_dir():
    """Where compiled runtime objects are kept (runtime_objects): $CKC_OBJECT_CACHE_DIR, else
    cache_dir()/runtime-objects. Its own variable, so that tests giving each case a fresh CKC_CACHE_DIR (the torch
    backend's cache) still share the runtime's objects."""
    return os.path.abspath(os.environ.get("CKC_OBJECT_CACHE_DIR") or os.path.join(cache_dir(), "runtime-objects"))


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


# The flags the documented line compiles the runtime sources with (what runtime_objects uses too).
RUNTIME_FLAGS = ("-O3", "-fPIC", "-fopenmp")
_cc_identity = {}
_runtime_hash = {}


def _cc_id():
    """What identifies the C compiler on PATH (its --version), once per process."""
    if "cc" not in _cc_identity:
        p = subprocess.run(["cc", "--version"], capture_output=True, text=True)
        _cc_identity["cc"] = p.stdout + shutil.which("cc")
    return _cc_identity["cc"]


def _runtime_tree_hash(runtime):
    """sha256 of every source and header under runtime/ (path and bytes), once per process and folder: a change
    anywhere gives every object a new key, so a header's change can never leave a stale object behind."""
    if runtime not in _runtime_hash:
        h = hashlib.sha256()
        for dirpath, dirnames, files in sorted(os.walk(runtime)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    path = os.path.join(dirpath, f)
                    h.update(os.path.relpath(path, runtime).encode() + b"\0")
                    with open(path, "rb") as fh:
                        h.update(fh.read())
        _runtime_hash[runtime] = h.hexdigest()
    return _runtime_hash[runtime]


def runtime_objects(sources, extra_flags=()):
    """The object files of runtime `sources` (absolute paths, as model.c.kernels lists them), each compiled once
    per content with the documented flags (+ extra_flags) and kept in object_cache_dir()/<key>, key =
    the compiler, the flags and the whole runtime tree. Generated models link against them instead of
    compiling a dozen runtime sources each (the library is the same: the same sources, flags and compiler).
    Safe across processes: an object is written under a temporary name and renamed, and one process at a time
    compiles into a folder (a lock file). CKC_RUNTIME_CACHE=0 turns it off (build_library compiles the sources)."""
    import concurrent.futures
    import fcntl
    runtime = os.path.dirname(include_dir())
    flags = list(RUNTIME_FLAGS) + list(extra_flags)
    key = hashlib.sha256("\0".join([_cc_id(), *flags, _runtime_tree_hash(runtime)]).encode()).hexdigest()[:20]
    folder = os.path.join(object_cache_dir(), key)
    os.makedirs(folder, exist_ok=True)

    def obj_of(src):
        rel = os.path.relpath(src, runtime)
        if rel.startswith(".."):
            raise ValueError(f"{src} is not a runtime source (under {runtime})")
        return os.path.join(folder, rel[:-2].replace(os.sep, "__") + ".o")

    objs = [obj_of(s) for s in sources]
    missing = [(s, o) for s, o in zip(sources, objs) if not os.path.exists(o)]
    if missing:
        with open(os.path.join(folder, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling these very objects

            def compile_one(src, obj):
                if os.path.exists(obj):
                    return
                tmp = f"{obj}.{os.getpid()}.tmp"
                run(["cc", *flags, "-I", include_dir(), "-c", src, "-o", tmp])
                os.replace(tmp, obj)
            with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
                for f in [pool.submit(compile_one, s, o) for s, o in missing]:
                    f.result()
    return objs


def build_library(c_path, so_path=None, extra_flags=()):
    """libmodel.so of a generated model.c: the documented line
        cc -O3 -fPIC -shared -I "$(ckc --include-dir)" model.c $(cat model.c.kernels) -lopenblas -lm -fopenmp
    with the runtime sources compiled once and reused from the object cache (runtime_objects), which gives the
    same library; CKC_RUNTIME_CACHE=0 runs the line as it is."""
    so_path = so_path or os.path.join(os.path.dirname(c_path), "lib" + os.path.splitext(os.path.basename(c_path))[0] + ".so")
    if shutil.which("cc") is None:
        raise RuntimeError("no C compiler: ckc builds generated models with `cc` (install gcc or clang, e.g. "
                           "apt-get install build-essential)")
    INVOCATIONS["cc"] += 1
    with open(c_path + ".kernels") as f:
        sources = [line.strip() for line in f if line.strip()]
    if os.environ.get("CKC_RUNTIME_CACHE", "1") != "0":
        objs = runtime_objects(sources, extra_flags)
        run(["cc", *RUNTIME_FLAGS, "-shared", "-I", include_dir(), c_path, *objs, "-lopenblas", "-lm", *extra_flags,
             "-o", so_path])
        return so_path
    line = (f"cc -O3 -fPIC -shared -I {shlex.quote(include_dir())} {shlex.quote(c_path)} "
            f"$(cat {shlex.quote(c_path + '.kernels')}) -lopenblas -lm -fopenmp {' '.join(extra_flags)} "
            f"-o {shlex.quote(so_path)}")
    run(["sh", "-c", line])
    return so_path


def build_executable(c_path, exe_path=None, extra_flags=()):
    """The model's executable, from the cached runtime objects as build_library: a language model's model.c
    built with -DCK_MODEL_MAIN (greedy generation, --prompt, --chat), a graph's with -DCK_GRAPH_MAIN (inputs
    from files, -s SYMBOL=SIZE, outputs printed); the documented line for it is in model.c's frontmatter."""
    exe_path = exe_path or os.path.join(os.path.dirname(c_path), os.path.splitext(os.path.basename(c_path))[0])
    with open(c_path + ".kernels") as f:
        sources = [line.strip() for line in f if line.strip()]
    with open(c_path) as f:
        main = "-DCK_GRAPH_MAIN" if "#ifdef CK_GRAPH_MAIN" in f.read() else "-DCK_MODEL_MAIN"
    INVOCATIONS["cc"] += 1
    objs = runtime_objects(sources, extra_flags)
    run(["cc", *RUNTIME_FLAGS, main, "-I", include_dir(), c_path, *objs, "-lopenblas", "-lm",
         *extra_flags, "-o", exe_path])
    return exe_path


def random_weights(config, out_dir, seed=0, dtype="f32", shard_size=0):
    """ckc random-weights: a deterministic checkpoint folder for CONFIG."""
    cmd = [ckc_binary(), "random-weights", os.path.abspath(config), "-o", os.path.abspath(out_dir), "--seed", str(seed),
           "--dtype", dtype]
    if shard_size:
        cmd += ["--shard-size", str(shard_size)]
    run(cmd)
    return out_dir
