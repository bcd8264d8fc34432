"""Several sequences in one handle (ck_model_kv_cache_enable_batch / ck_model_batch, LlmModel.generate_batch):
prompts of different lengths prefilled together, one decode step for every live sequence per call, each
sequence stopping on its own, equal to running each sequence alone; and the refusals."""
import numpy as np
import pytest

from conftest import prompt, tiny
from hf_cases import CASES

# RoPE (llama), learned positions (gpt2), sliding windows shorter than the prompts (gemma3: 5 local : 1 global)
FAMILIES = {"llama": tiny(), "gpt2": CASES["gpt2"], "gemma3": CASES["gemma3"]}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generate_batch_equals_each_sequence_alone(build, family):
    """5 prompts of 1-23 tokens, 3 sequences at a time (finished ones hand their place on): every continuation
    equals generate() of that prompt alone, greedy; an end id stops each sequence on its own."""
    cfg = FAMILIES[family]
    m = build(cfg).model()
    vocab = cfg["vocab_size"]
    prompts = [prompt(n, vocab, seed=30 + n) for n in (7, 1, 23, 4, 12)]
    want = [m.generate(p, 12, stop_at_eos=False)[len(p):] for p in prompts]
    got = m.generate_batch(prompts, 12, max_batch=3, stop_at_eos=False)
    assert got == want
    # an end-of-generation id stops each sequence where it first makes it, and that sequence alone
    stop = want[0][3]
    ended = m.generate_batch(prompts, 12, max_batch=3, eos=[stop])
    for w, g in zip(want, ended):
        cut = w.index(stop) + 1 if stop in w else len(w)
        assert g == w[:cut]
    assert len(ended[0]) <= 4 and any(len(g) == 12 for g in ended), ended
    # sampled: each prompt draws from its own seeded sampler, whatever the prompts it shares its steps with
    one = m.generate_batch(prompts, 8, max_batch=1, stop_at_eos=False, temperature=1.0, seed=5)
    three = m.generate_batch(prompts, 8, max_batch=3, stop_at_eos=False, temperature=1.0, seed=5)
    assert one == three and one != [g[:8] for g in got]


def test_batch_logits_equal_single_sequence_runs(build):
    """ck_model_batch with prefill and decode tokens of three sequences mixed in one call (in any order): each
    sequence's logits equal its own single-sequence run (1e-4), and the sequences' positions advance alone."""
    m = build(tiny()).model()
    a, b, c = prompt(6, 256, seed=1), prompt(3, 256, seed=2), prompt(9, 256, seed=3)
    ref = {}
    for name, p in (("a", a), ("b", b), ("c", c)):
        m.kv_cache_enable(64)
        ref[name] = m.forward(p)  # every position's logits
        m.kv_cache_disable()
    m.kv_cache_enable_batch(32, 3)
    # call 1: a's first 4 tokens, b whole, c's first 5, interleaved
    toks = [a[0], b[0], a[1], c[0], b[1], c[1], a[2], c[2], b[2], a[3], c[3], c[4]]
    seqs = [0, 1, 0, 2, 1, 2, 0, 2, 1, 0, 2, 2]
    rows = m.batch(toks, seqs)
    assert sorted(rows) == [0, 1, 2]
    assert np.abs(rows[0] - ref["a"][3]).max() < 1e-4
    assert np.abs(rows[1] - ref["b"][2]).max() < 1e-4
    assert np.abs(rows[2] - ref["c"][4]).max() < 1e-4
    assert [m.seq_tokens(s) for s in range(3)] == [4, 3, 5]
    # call 2: the rest of a and c, one at a time per sequence (decode-like)
    for i in range(5):
        seq_toks, seq_ids = [], []
        if 4 + i < len(a):
            seq_toks.append(a[4 + i]), seq_ids.append(0)
        if 5 + i < len(c):
            seq_toks.append(c[5 + i]), seq_ids.append(2)
        if not seq_toks:
            break
        rows = m.batch(seq_toks, seq_ids)
        if 0 in rows:
            assert np.abs(rows[0] - ref["a"][4 + i]).max() < 1e-4
        if 2 in rows:
            assert np.abs(rows[2] - ref["c"][5 + i]).max() < 1e-4
    # a reset sequence starts again from position 0
    m.seq_reset(1)
    rows = m.batch(c[:3], [1, 1, 1])
    assert np.abs(rows[1] - ref["c"][2]).max() < 1e-4


def test_batch_refuses_bad_sequences_and_overflow(build):
    import ckc
    m = build(tiny()).model()
    with pytest.raises(ckc.CkError, match="ck_model_kv_cache_enable_batch first"):
        m.batch([1], [0])
    m.kv_cache_enable_batch(4, 2)
    with pytest.raises(ckc.CkError, match="sequence 2, outside 0..1"):
        m.batch([1, 2], [0, 2])
    assert m.seq_tokens(0) == 0  # the refused call advanced no sequence
    with pytest.raises(ckc.CkError, match="sequence 1 would hold 5 positions, over its 4"):
        m.batch([1, 2, 3, 4, 5], [1] * 5)
    assert m.seq_tokens(1) == 0  # nothing ran
    with pytest.raises(ckc.CkError, match="outside the vocabulary"):
        m.batch([1, 10 ** 6], [0, 1])
    assert [m.seq_tokens(0), m.seq_tokens(1)] == [0, 0]
    with pytest.raises(ckc.CkError, match="ck_model_batch"):
        m.decode(3)  # the single-sequence calls are refused while the cache holds several
    with pytest.raises(ckc.CkError, match="outside 1..4096"):
        m.kv_cache_enable_batch(4, 0)
    m.kv_cache_enable(8)  # back to one sequence
    m.decode(3)
