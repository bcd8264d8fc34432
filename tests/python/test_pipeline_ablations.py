"""Outputs stay identical (within float tolerance) with any pass switched off
and under every planner ablation."""
import pytest

from conftest import max_diff, prompt, tiny

CONFIG = tiny(attention_bias=True, mlp_bias=True)
VARIANTS = {
    "no_fuse_matmul_add": ["--disable-pass", "fuse_matmul_add"],
    "no_fuse_parallel_linears": ["--disable-pass", "fuse_parallel_linears"],
    "no_dce": ["--disable-pass", "dce"],
    "no_passes": ["--disable-pass", "fuse_matmul_add", "--disable-pass", "fuse_parallel_linears",
                  "--disable-pass", "dce"],
    "fifo_order": ["--order", "fifo"],
    "naive_placement": ["--placement", "naive"],
    "no_inplace": ["--no-inplace"],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_default(build, variant):
    default = build(CONFIG)
    other = build(CONFIG, args=VARIANTS[variant])
    toks = prompt(25, 256, seed=13)
    a = default.model().forward(toks)
    b = other.model().forward(toks)
    assert max_diff(a, b) < 1e-5, variant
    # and through the KV cache
    m = other.model()
    m.kv_cache_enable(32)
    m.forward(toks[:10])
    rows = [m.decode(t) for t in toks[10:]]
    assert max_diff(rows, a[10:]) < 1e-5, variant


def test_unfused_code_really_differs(build):
    fused = open(build(CONFIG).folder + "/model.c").read()
    plain = open(build(CONFIG, args=VARIANTS["no_passes"]).folder + "/model.c").read()
    assert fused.count("ck_linear(") < plain.count("ck_linear(")
