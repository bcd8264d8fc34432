"""`pip install .` into a fresh venv, from a copy of the checkout that is
deleted afterwards: the installed `ckc` (on PATH, and `python -m ckc`)
compiles a model from another folder, the README's cc line builds it with
the runtime sources inside the installed package, and `import ckc` runs it.
Also: the pinned development environment satisfies what the package asks for."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def sh(cmd, cwd, env=None):
    p = subprocess.run(["sh", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
    assert p.returncode == 0, f"{cmd}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.slow
def test_pip_install_into_a_fresh_venv_works_without_the_checkout(tmp_path):
    src = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for f in filter(None, files.split("\0")):  # what a clone holds (no build/, no .venv)
        if os.path.exists(os.path.join(ROOT, f)):
            os.makedirs(src / os.path.dirname(f), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), src / f)
    config = tmp_path / "tiny-llama.json"
    shutil.copy(src / "models" / "tiny-llama" / "config.json", config)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # the compiler's build on every core (scikit-build-core's make runs one job unless told)
    # its build folder inside the copy (not a random temporary one), and the copy as ccache's base_dir: with
    # scripts/test.sh's ccache (build_env.sh) a later run's build comes from the cache (225 s -> 72 s)
    sh(f"CMAKE_BUILD_PARALLEL_LEVEL={os.cpu_count() or 1} CCACHE_BASEDIR={src} "
       f"{venv}/bin/pip install -q -C build-dir={src}/build {src}", cwd=tmp_path)
    shutil.rmtree(src)  # the installed package must not need the clone

    # nothing from the checkout: not its compiler (CKC_*) and not its python/ (a PYTHONPATH)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKC_") and k != "PYTHONPATH"}
    env["PATH"] = f"{venv}/bin:" + env["PATH"]
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert sh("ckc --version", work, env).startswith("ckc ")
    inc = sh("ckc --include-dir", work, env).strip()
    assert inc.startswith(str(venv)) and os.path.exists(os.path.join(inc, "ck_model.h"))
    sh(f"ckc compile {config} -o out/model.c", work, env)
    kernels = (work / "out" / "model.c.kernels").read_text().split()
    assert kernels and all(k.startswith(str(venv)) and os.path.exists(k) for k in kernels)
    sh('cc -O3 -fPIC -shared -I "$(ckc --include-dir)" out/model.c $(cat out/model.c.kernels) -lopenblas -lm '
       "-fopenmp -o out/libmodel.so", work, env)
    sh(f"python -m ckc random-weights {config} -o hf --std 0.15", work, env)
    out = sh("python -c \"import ckc; m = ckc.LlmModel('out/libmodel.so', 'hf'); "
             "print(m.generate([1, 2, 3], max_new_tokens=8))\"", work, env)
    ids = [int(t) for t in re.findall(r"\d+", out)]
    assert len(ids) == 11 and ids[:3] == [1, 2, 3]
    # torch finds the gcu backend through this entry point (the venv has no torch: check the declaration)
    ep = sh("python -c \"from importlib.metadata import entry_points; "
            "print([e.value for e in entry_points(group='torch_dynamo_backends') if e.name == 'gcu'])\"", work, env)
    assert ep.strip() == "['ckc.conductor:gcu']"
    sh("python -c \"import ckc.conductor as c, sys; assert callable(c.gcu) and 'torch' not in sys.modules\"", work, env)


def test_pinned_environment_satisfies_the_package_requirements():
    """requirements.txt (the one pinned list) must satisfy pyproject.toml's ranges, pin torch to the
    CPU build on this machine's disk, and pin every line exactly."""
    from packaging.requirements import Requirement
    import tomllib
    pins = {}
    for line in open(os.path.join(ROOT, "requirements.txt")):
        line = line.split("#")[0].strip()
        if line:
            r = Requirement(line)
            spec = list(r.specifier)
            assert len(spec) == 1 and spec[0].operator == "==", f"requirements.txt: {line} is not pinned with =="
            pins[r.name.lower().replace("_", "-")] = spec[0].version
    assert pins["torch"] == "2.13.0"
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    for dep in project["dependencies"]:
        r = Requirement(dep)
        assert r.specifier.contains(pins[r.name.lower()]), f"{dep} does not admit the pinned {pins[r.name.lower()]}"
