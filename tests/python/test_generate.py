"""generate(): greedy by default; temperature / top-k / top-p / min-p sampling and the repetition penalty
(the C sampler, ck_generate.h) are seeded and reproducible and behave as documented; generate() leaves the
model clean."""
import numpy as np
import pytest

import ckc
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
    ckc.build.build_executable(c, str(exe))
    p = subprocess.run([str(exe), b.weights, "-n", "100", "1", "2", "3"], capture_output=True, text=True)
    assert p.returncode == 0 and "generating 13 new tokens, not 100" in p.stderr
    assert [int(t) for t in p.stdout.split()] == out
    p = subprocess.run([str(exe), b.weights, "-t", "-1", "1"], capture_output=True, text=True)
    assert p.returncode == 1 and "-1 threads" in p.stderr


def test_sampler_filters(build):
    m = build(tiny()).model()
    logits = np.full(256, -1e9, dtype=np.float32)
    logits[[7, 9, 11, 13]] = np.log([0.5, 0.3, 0.15, 0.05])

    def seen(n=300, **kw):
        s = m.sampler(temperature=1.0, seed=5, **kw)
        return {s.sample(logits) for _ in range(n)}
    assert seen() == {7, 9, 11, 13}
    assert seen(top_p=0.7) == {7, 9}           # 0.5 + 0.3 >= 0.7: the nucleus is the first two
    assert seen(top_k=3) == {7, 9, 11}
    assert seen(min_p=0.25) == {7, 9, 11}       # 0.05 < 0.25 * 0.5
    assert m.sampler().sample(logits) == 7      # temperature 0: greedy
    # the repetition penalty: 7 seen, its logit divided by 100 (it is negative: multiplied) drops it
    assert m.sampler(repetition_penalty=100.0).sample(logits, history=[7]) == 9
    a, b = m.sampler(temperature=1.0, seed=3), m.sampler(temperature=1.0, seed=3)
    assert [a.sample(logits) for _ in range(50)] == [b.sample(logits) for _ in range(50)]
    with pytest.raises(ValueError):
        m.sampler(top_p=0.0)
    # the frequencies follow the distribution (p = 0.5, 0.3, 0.15, 0.05)
    s = m.sampler(temperature=1.0, seed=11)
    draws = np.array([s.sample(logits) for _ in range(4000)])
    assert abs(np.mean(draws == 7) - 0.5) < 0.03 and abs(np.mean(draws == 13) - 0.05) < 0.015


def test_generate_leaves_the_model_clean(build):
    m = build(tiny()).model()
    p = prompt(4, 256, seed=22)
    before = m.forward(p)
    m.generate(p, 8)
    np.testing.assert_array_equal(m.forward(p), before)  # a fresh sequence, not appended to a cache
