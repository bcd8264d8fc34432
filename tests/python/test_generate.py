"""generate(): greedy by default; temperature / top-k / top-p sampling is
seeded and reproducible; sampling helpers behave as documented."""
import numpy as np
import pytest

import ckc
from ckc.llm import sample
from conftest import prompt, tiny


def test_sampling_is_reproducible_and_seed_dependent(build):
    m = build(tiny()).model()
    p = prompt(4, 256, seed=20)
    a = m.generate(p, 20, temperature=1.0, top_k=50, seed=1)
    b = m.generate(p, 20, temperature=1.0, top_k=50, seed=1)
    c = m.generate(p, 20, temperature=1.0, top_k=50, seed=2)
    assert a == b
    assert a != c
    assert a[:4] == p and len(a) == 24


def test_top_k_1_and_zero_temperature_are_greedy(build):
    m = build(tiny()).model()
    p = prompt(4, 256, seed=21)
    greedy = m.generate(p, 16)
    assert m.generate(p, 16, temperature=0.7, top_k=1, seed=3) == greedy
    assert m.generate(p, 16, temperature=0.0, top_k=5, top_p=0.5, seed=3) == greedy


def test_generation_stops_at_the_context_and_says_so(build, tmp_path):
    b = build(tiny(max_position_embeddings=16))
    m = b.model()
    with pytest.warns(UserWarning, match="the context holds 16 tokens: 13 new tokens"):
        out = m.generate([1, 2, 3], 100)
    assert len(out) == 16
    with pytest.raises(ValueError):
        m.generate([], 4)
    # the executable: a note on stderr, the same 16 tokens, exit 0
    import os
    import subprocess
    c = os.path.join(b.folder, "model.c")
    exe = tmp_path / "model"
    subprocess.run(f"cc -O1 -DCK_MODEL_MAIN -I {ckc.include_dir()} {c} $(cat {c}.kernels) -lopenblas -lm -fopenmp "
                   f"-o {exe}", shell=True, check=True)
    p = subprocess.run([str(exe), b.weights, "-n", "100", "1", "2", "3"], capture_output=True, text=True)
    assert p.returncode == 0 and "generating 13 new tokens, not 100" in p.stderr
    assert [int(t) for t in p.stdout.split()] == out
    p = subprocess.run([str(exe), b.weights, "-t", "-1", "1"], capture_output=True, text=True)
    assert p.returncode == 1 and "-1 threads" in p.stderr


def test_sample_top_p_keeps_the_nucleus():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)
    seen = {sample(logits, 1.0, None, 0.7, rng) for _ in range(300)}
    assert seen == {0, 1}  # 0.5 + 0.3 >= 0.7: only the first two survive
    seen_k = {sample(logits, 1.0, 3, None, rng) for _ in range(300)}
    assert seen_k == {0, 1, 2}
    assert sample(logits) == 0
