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
    for op in MASK_OPS:
        assert op not in block and op not in rest, (op, block, rest)
    assert rest.get("EMBEDDING") == 1


def test_hf_model_with_padding_mask_input_is_refused_clearly(tmp_path):
    """An attention_mask input makes the mask depend on run-time data: ckc has no kernel for that
    and says which op and module."""
    import ckc

    class WithMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = hf_model("llama")

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).logits

    ids = torch.randint(0, 96, (1, 6))
    with pytest.raises(ckc.ExportError) as e:
        ckc.export(WithMask(), (ids, torch.ones(1, 6, dtype=torch.int64)), str(tmp_path / "x"))
    assert "module 'm.model" in str(e.value) and "aten." in str(e.value)
    assert not (tmp_path / "x" / "graph.json").exists()
