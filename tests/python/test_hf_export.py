"""Real Hugging Face models through the graph path: transformers' own
LlamaForCausalLM, GPT2LMHeadModel, Qwen2ForCausalLM and GemmaForCausalLM
(tiny configs, random weights) exported with torch.export — their real mask
building (arange, cumsum, index, bitwise ops), RoPE tables and
scaled_dot_product_attention included — compiled by ckc, and compared with
eager PyTorch. The layers must fold into one block and reach the fused
graph: one ATTENTION per layer, no mask op left."""
import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ckc.examples import randomize
from conftest import max_diff, op_counts

LAYERS = 3
SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=LAYERS, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
CASES = {
    "llama": SMALL,
    "qwen2": SMALL,
    "gemma": dict(SMALL, head_dim=16),  # heads * head_dim != hidden
    "gpt2": dict(vocab_size=96, n_embd=32, n_layer=LAYERS, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0),
}
MASK_OPS = ("CMP", "WHERE", "MASKED_FILL", "CAUSAL_MASK", "ARANGE", "FULL", "CAST", "TRIL", "SOFTMAX")


def hf_model(model_type, seed=0):
    config = AutoConfig.for_model(model_type, **CASES[model_type])
    config.use_cache = False  # the output is then logits only
    torch.manual_seed(seed)
    return randomize(AutoModelForCausalLM.from_config(config), seed=seed, std=0.1)


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_hf_model_exports_folds_and_matches(compile_graph, model_type):
    m = hf_model(model_type)
    ids = torch.randint(0, 96, (1, 11), generator=torch.Generator().manual_seed(1))
    c = compile_graph("hf_" + model_type, m, (ids,))
    g = c.model()
    assert [s.name for s in g.outputs] == ["logits"]
    with torch.no_grad():
        ref = m(input_ids=ids).logits.numpy()
    got = g(ids.numpy())
    assert got.shape == ref.shape and max_diff(got, ref) < 1e-4, max_diff(got, ref)

    ins = c.inspect()
    assert ins["block"]["layers"] == LAYERS, "the decoder layers did not fold into one block"
    block = op_counts({"header": {"nodes": []}, "block": ins["block"], "footer": {"nodes": []}})
    rest = op_counts({"header": ins["header"], "block": {"nodes": []}, "footer": ins["footer"]})
    assert block.get("ATTENTION") == 1 and "ATTENTION" not in rest, (block, rest)
    if model_type != "gpt2":  # RoPE's rotate_half of q and k: one op each, not slices, a negation and a cat
        assert block.get("ROTATE_HALF") == 2 and not {"CAT", "NEG"} & set(block), block
    for op in MASK_OPS:
        assert op not in block and op not in rest, (op, block, rest)
    assert rest.get("EMBEDDING") == 1


class WithMask(torch.nn.Module):
    """An HF causal LM called with an attention_mask: transformers builds the padding mask from it at run time."""

    def __init__(self, model_type):
        super().__init__()
        self.m = hf_model(model_type)

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).logits


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_hf_model_with_padding_mask_matches_transformers_on_padded_batches(compile_graph, model_type):
    """A padded batch of unequal prompts: the mask is computed at run time (CAST, INDEX, WHERE kernels) and read
    by the fused ATTENTION, so one library serves any mask of its shape. Left padding, right padding and a row with no token at all (every
    query attends to nothing: scaled_dot_product_attention gives 0 there, and so must ckc) equal transformers;
    the layers still fold into one block, each computing the mask from the input."""
    m = WithMask(model_type).eval()
    ids = torch.randint(0, 96, (4, 9), generator=torch.Generator().manual_seed(2))
    masks = {"none": torch.ones(4, 9, dtype=torch.int64)}
    left = masks["none"].clone()
    left[1, :4] = 0
    left[2, :1] = 0
    left[3, :] = 0
    right = masks["none"].clone()
    right[0, 6:] = 0
    right[2, 2:] = 0
    masks.update(left=left, right=right)
    c = compile_graph("hf_mask_" + model_type, m, (ids, left))
    g = c.model()
    for name, mask in masks.items():
        with torch.no_grad():
            ref = m(ids, mask).numpy()
        got = g(ids.numpy(), mask.numpy())
        assert not np.isnan(got).any(), name
        assert max_diff(got, ref) < 1e-4, (name, max_diff(got, ref))
    # right padding: the real tokens' logits equal each prompt run alone
    with torch.no_grad():
        alone = m(ids[2:3, :2], torch.ones(1, 2, dtype=torch.int64)).numpy()
    assert max_diff(g(ids.numpy(), right.numpy())[2, :2], alone[0]) < 1e-4

    ins = c.inspect()
    assert ins["block"]["layers"] == LAYERS, "the decoder layers did not fold into one block"
    block = op_counts({"header": {"nodes": []}, "block": ins["block"], "footer": {"nodes": []}})
    # the attention is one op reading the padding mask per row (no scores tensor, no softmax of its own) and,
    # for Llama's grouped K/V heads, the heads themselves (repeat_kv's copies gone)
    assert block.get("INDEX") == 1 and block.get("ATTENTION") == 1, block
    assert not {"SOFTMAX", "MASKED_FILL", "EXPAND"} & set(block), block
    att = next(n for n in ins["block"]["nodes"] if n["op"] == "ATTENTION")
    assert len(att["inputs"]) == 4 and att["attrs"]["mask"] in ("keep", "add"), att
    assert att["attrs"].get("kv_groups", 1) == (2 if model_type == "llama" else 1), att


def test_index_by_a_boolean_mask_is_refused_clearly(tmp_path):
    """x[mask] has a shape that depends on the data: refused, naming the op and the reason."""
    import ckc

    class Pick(torch.nn.Module):
        def forward(self, x, keep):
            return x[keep].sum()

    with pytest.raises(ckc.ExportError) as e:
        ckc.export(Pick(), (torch.randn(5), torch.tensor([True, False, True, True, False])), str(tmp_path / "x"))
    assert "boolean" in str(e.value) or "data-dependent" in str(e.value), str(e.value)
    assert not (tmp_path / "x" / "graph.json").exists()
