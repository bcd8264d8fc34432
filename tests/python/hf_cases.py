"""The tiny Hugging Face configs every supported family is tested at (test_hf_parity, test_training):
each shaped like the published model, with the variations that family's code paths take, and the random
weights transformers gets (perturbed norms and biases, so that dropping one fails)."""
import json
import os

import torch

from conftest import ROOT


def published(name, **overrides):
    """models/<name>/config.json (a published config at tiny size) with overrides."""
    with open(os.path.join(ROOT, "models", name, "config.json")) as f:
        c = json.load(f)
    c.update(overrides)
    return c


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
CASES = {
    # Llama: GQA 4/2, untied (Llama-2 shape)
    "llama": published("tiny-llama"),
    # Llama-3.2: 8 heads / 2 KV, llama3 RoPE scaling, theta 500000, tied head
    "llama3": published("tiny-llama", num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
                        rope_scaling=LLAMA3_ROPE, tie_word_embeddings=True),
    # MHA with attention and MLP biases, linear RoPE scaling, MQA-like odd sizes with explicit head_dim
    "llama_bias_linear": published("tiny-llama", num_key_value_heads=4, attention_bias=True, mlp_bias=True,
                                   rope_scaling={"rope_type": "linear", "factor": 2.0}),
    # exact (erf) GELU in the gated MLP
    "llama_gelu": published("tiny-llama", hidden_act="gelu"),
    "llama_mqa_head_dim": published("tiny-llama", vocab_size=251, hidden_size=48, intermediate_size=100,
                                    num_key_value_heads=1, head_dim=16, num_hidden_layers=3),
    # Mistral-7B: sliding window (8 here, shorter than the sequences)
    "mistral": published("tiny-mistral"),
    # Qwen2-0.5B: q/k/v biases, tied, theta 1e6; and windows on the layers past max_window_layers
    "qwen2": published("tiny-qwen2"),
    "qwen2_windows": published("tiny-qwen2", use_sliding_window=True, sliding_window=5, max_window_layers=1),
    # Qwen3-0.6B: per-head q/k RMSNorm, head_dim (32) apart from hidden / heads (16), tied, theta 1e6; and with
    # attention biases (q/k/v/o) and untied
    "qwen3": published("tiny-qwen3"),
    "qwen3_bias_untied": published("tiny-qwen3", attention_bias=True, tie_word_embeddings=False, num_key_value_heads=4),
    # OLMo-2-1B: norms after the sublayers, whole-width q/k RMSNorm, theta 5e5, untied; and GQA (OLMo-2-32B) with
    # attention biases
    "olmo2": published("tiny-olmo2"),
    "olmo2_gqa_bias": published("tiny-olmo2", num_key_value_heads=2, attention_bias=True),
    # SmolLM3-3B: no RoPE in every 4th layer (NoPE), theta 5e6, tied, GQA 4/1; and NoPE layers elsewhere with
    # the sliding window on them (layer_types' default), biases on attention and MLP
    "smollm3": published("tiny-smollm3"),
    "smollm3_windows_bias": published("tiny-smollm3", no_rope_layers=[0, 1, 0, 1], use_sliding_window=True,
                                      sliding_window=5, attention_bias=True, mlp_bias=True, num_key_value_heads=2),
    # Qwen3-30B-A3B: Qwen3's attention and a mixture of experts (8 experts of width 32 here, top 2, renormalized);
    # and 16 experts top 4 as they come out of the softmax (norm_topk_prob false: OLMoE's choice) with biases, and
    # the router's load-balancing loss in training (output_router_logits, a weight that makes it count)
    "qwen3_moe": published("tiny-qwen3_moe"),
    "qwen3_moe_16x4_bias": published("tiny-qwen3_moe", num_experts=16, num_experts_per_tok=4, norm_topk_prob=False,
                                     attention_bias=True, output_router_logits=True, router_aux_loss_coef=0.2),
    # Mixtral-8x7B: Mistral's attention, 8 experts top 2 always renormalized (block_sparse_moe, w1/w3/w2); and a
    # sliding window with the load-balancing loss at its default weight
    # Qwen3-MoE's dense layers (Qwen3MoeDecoderLayer: experts where (i + 1) % decoder_sparse_step == 0 and i is not
    # in mlp_only_layers, else the dense MLP of width intermediate_size): the first and last of 4 listed dense, with
    # the load-balancing loss over the sparse ones; and every other layer sparse (decoder_sparse_step 2)
    "qwen3_moe_dense_layers": published("tiny-qwen3_moe", num_hidden_layers=4, mlp_only_layers=[0, 3],
                                        output_router_logits=True, router_aux_loss_coef=0.2),
    "qwen3_moe_sparse_step": published("tiny-qwen3_moe", decoder_sparse_step=2, num_experts=16, num_experts_per_tok=4,
                                       norm_topk_prob=False),
    "mixtral": published("tiny-mixtral"),
    "mixtral_window": published("tiny-mixtral", sliding_window=8, output_router_logits=True),
    # OLMoE-1B-7B: whole-width q/k RMSNorm, 64 experts top 8 (16 top 4 here) as they come out of the softmax; and
    # renormalized with GQA; and q, k, v clamped (clip_qkv; OLMo 1 used 8): 1.0 clips about a third of each here
    "olmoe": published("tiny-olmoe"),
    "olmoe_norm_gqa": published("tiny-olmoe", norm_topk_prob=True, num_key_value_heads=2),
    "olmoe_clip": published("tiny-olmoe", clip_qkv=1.0),
    # GPT-2: learned positions, Conv1D, tied; and the inverse-layer attention scale
    "gpt2": published("tiny-gpt2", bos_token_id=0, eos_token_id=0),
    "gpt2_layer_scaled": published("tiny-gpt2", bos_token_id=0, eos_token_id=0, scale_attn_by_inverse_layer_idx=True),
    # Phi-3-mini: fused qkv_proj / gate_up_proj, sliding window
    "phi3": published("tiny-phi3", pad_token_id=0),  # its default pad id (32000) is past the tiny vocab
    # Gemma-2B: sqrt(hidden) embedding scale, (1 + w) norms, GeGLU, heads * head_dim != hidden, tied
    "gemma": published("tiny-gemma"),
    # Phi-2: parallel attention/MLP, partial rotary, LayerNorm, biases everywhere incl. lm_head
    "phi": published("tiny-phi"),
    # Gemma-2: sandwich norms, attention and final soft-capping, query_pre_attn_scalar, alternating windows
    "gemma2": published("tiny-gemma2"),
    # Gemma-3-270m: Gemma 2's layer with per-head q/k norms (1 + w), 5 local layers (window 8, theta 1e4) to 1
    # global (theta 1e6), no soft-capping; the 4B's linear x8 RoPE scaling on the global layers, final
    # soft-capping (attn_logit_softcapping, which Gemma3Attention ignores, too), a query_pre_attn_scalar apart from
    # head_dim and GQA; and transformers 5's rope_parameters per layer type with layer_types given
    "gemma3": published("tiny-gemma3_text"),
    "gemma3_scaled_capped": published("tiny-gemma3_text", rope_scaling={"rope_type": "linear", "factor": 8.0},
                                      query_pre_attn_scalar=48, attn_logit_softcapping=50.0,
                                      final_logit_softcapping=30.0, num_key_value_heads=2),
    "gemma3_rope_parameters": published(
        "tiny-gemma3_text", rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 20000.0},
                                        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}},
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"]),
}
EAGER = {"gemma2"}  # transformers wants eager attention with soft-capping


def hf_kwargs(name):
    return {"attn_implementation": "eager"} if name in EAGER else {}


def perturb(model, seed):
    """N(0, 0.15) everywhere, norms around 1 (Gemma's, which add 1, around 0.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = p.dim() == 1 and name.endswith("weight")
            centre = (0.5 if "gemma" in model.config.model_type else 1.0) if norm else 0.0
            p.copy_(torch.randn(p.shape, generator=g) * 0.15 + centre)
    return model.eval()
