// builders.h — shared pieces every decoder family is assembled from.
//
// A family file (frontend/hf/<family>.cpp) reads its config keys into an
// LlmConfig and builds header / block / footer from these builders, in the
// order the Hugging Face modeling code runs them; the specs below name the
// family's modules and switch its variations (norm kind, fused projections,
// Conv1D weights, RoPE, window, soft-capping, gated or plain MLP). Builders
// emit primitive ops (MATMUL, ADD, ...); fusions are the passes' job. Every
// node records the Hugging Face module it comes from
// ("model.layers.{L}.self_attn.q_proj") and every weight its checkpoint name.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/hf/config.h"
#include "ir/graph.h"

namespace ckc {

enum class NormKind {
    Rms,         // x * rsqrt(mean(x^2) + eps) * w          (Llama)
    RmsPlusOne,  // ... * (1 + w)                            (Gemma)
    Layer,       // (x - mean) * rsqrt(var + eps) * w + b    (GPT-2, Phi)
};

struct NormSpec {
    NormKind kind = NormKind::Rms;
    double eps = 1e-6;
};

// A size of the model and the C name the generated code gives it (one of ModelInfo::sizes): what a call site
// prints for it (Tensor::dims).
struct NamedDim {
    int64_t value = 0;
    std::string name;
};

// The sizes a decoder's tensors are made of, named once: hidden (CK_DIM), q (CK_Q_DIM: heads x head_dim),
// kv (CK_KV_DIM), ffn (CK_FFN), vocab (CK_VOCAB_SIZE), and the widths of the projections a checkpoint may
// hold fused, qkv (CK_QKV_DIM) and gate_up (CK_GATE_UP_DIM). start_program defines them all
// (ModelInfo::sizes, with the head counts and head_dim that attributes name).
struct LlmDims {
    NamedDim hidden, q, kv, ffn, vocab, qkv, gate_up;
};
LlmDims llm_dims(const LlmConfig &c);

class SectionBuilder {
public:
    // weight_prefix is prepended to weight and module names: "model." for the
    // header/footer of a Llama, "model.layers.{L}." for its block.
    SectionBuilder(Graph &g, std::string weight_prefix) : g(g), prefix(std::move(weight_prefix)) {}

    // A checkpoint tensor `prefix + name`, of dims named `dims` (Tensor::dims); the tensor is named `name`.
    std::string weight(const std::string &name, const std::vector<NamedDim> &dims);
    // A checkpoint tensor by its full name (e.g. a tied head reading the embedding).
    std::string weight_full(const std::string &full_name, const std::vector<NamedDim> &dims);
    std::string tokens();                  // i32 [T] caller input
    std::string carry(const Program &p);   // the residual stream as an input
    std::string op(Op op, const std::vector<std::string> &inputs, const std::string &out,
                   const std::map<std::string, Attr> &attrs, const std::string &module,
                   Storage out_storage = Storage::Activation);

    std::string norm(const std::string &x, const std::string &module, const NormSpec &spec, const std::string &out,
                     Storage out_storage = Storage::Activation);
    // y = x @ W^T (+ b) for `module` (weights module.weight / module.bias).
    // conv1d: the checkpoint stores W as [in, out] (GPT-2); it is loaded transposed.
    std::string linear(const std::string &x, const std::string &module, const NamedDim &in, const NamedDim &out_features,
                       bool bias, const std::string &out, bool conv1d = false);
    std::string add(const std::string &a, const std::string &b, const std::string &out, const std::string &module,
                    Storage out_storage = Storage::Activation);
    // The block's last node: out = a + b, the layer's output, written to the residual stream.
    std::string layer_output(const std::string &a, const std::string &b);
    // Tensor t is exactly what the HF module `module` (prefixed; "" for the prefix's own module) returns:
    // its Tensor::reference, what traces compare.
    void module_output(const std::string &t, const std::string &module);
    // Column views of a fused projection: widths in order, names in order.
    std::vector<std::string> split(const std::string &x, const std::vector<NamedDim> &widths,
                                   const std::vector<std::string> &names, const std::string &module);

    Graph &g;
    std::string prefix;

private:
    std::string full_module(const std::string &module) const;  // prefix + module, "" for the prefix's own
    std::string add_weight(const std::string &tensor, const std::string &source, const std::vector<NamedDim> &dims,
                           bool transposed);
};

struct AttentionSpec {
    std::string module = "self_attn";
    enum class Qkv { Separate, Fused } qkv = Qkv::Separate;
    std::string q = "q_proj", k = "k_proj", v = "v_proj";  // Separate
    std::string fused = "qkv_proj";                         // Fused: rows q | k | v
    std::string o = "o_proj";
    bool qkv_bias = false, o_bias = false;
    bool conv1d = false;    // GPT-2: c_attn / c_proj stored [in, out]
    bool rope = true;       // rotary embedding on q and k (rot_dim from the config)
    // RoPE that differs by layer ("@table" attributes): the dims rotated, rot_dim or 0 (SmolLM3's NoPE layers);
    // theta and the scaling factor (Gemma 3's local and global layers). Unset: the config's, in every layer.
    std::optional<Attr> rotated, theta, factor;
    Attr window = int64_t(0);  // sliding window, 0 = none; "@table" per layer
    Attr scale = 0.0;          // 0 = head_dim^-0.5; "@table" per layer
    double softcap = 0.0;      // attention logit soft-capping, 0 = none
    // q_norm / k_norm on the projections, before RoPE: on each head ([head_dim] weights; Qwen3), or on the whole
    // width ([heads x head_dim], [kv_heads x head_dim]; OLMo 2)
    enum class QkNorm { None, PerHead, Whole } qk_norm = QkNorm::None;
    NormSpec qk_norm_spec;
    // q, k and v clamped to [-clip_qkv, clip_qkv] after the projections and q/k norms, before RoPE (OLMoE's
    // clip_qkv); 0 = none
    double clip_qkv = 0.0;
};

// q/k/v projections, per-head q/k norms, RoPE on q and k, KV store, causal GQA attention, o_proj.
// Returns the o_proj output (before the residual add).
std::string build_attention(SectionBuilder &b, const std::string &x, const LlmConfig &c, const AttentionSpec &spec);

struct MlpSpec {
    std::string module = "mlp";
    bool gated = true;            // down(act(gate(x)) * up(x)); else fc2(act(fc1(x)))
    std::string act = "silu";     // silu | gelu_tanh | gelu
    bool fused_gate_up = false;   // one gate_up projection, rows gate | up (Phi-3)
    std::string gate = "gate_proj", up = "up_proj", gate_up = "gate_up_proj", down = "down_proj";
    std::string fc1 = "fc1", fc2 = "fc2";
    bool bias = false;
    bool conv1d = false;
};

// Returns the MLP output (before the residual add).
std::string build_mlp(SectionBuilder &b, const std::string &x, const LlmConfig &c, const MlpSpec &spec);

// A mixture of experts in place of the MLP (Qwen3-MoE, Mixtral, OLMoE): a router (`router`: [experts, hidden],
// no bias) whose softmax keeps the top_k experts per token (renormalized to sum 1 when norm_topk), and that
// many GLU experts of width `ffn` (experts.{E}.gate / up / down), weighted by the kept probabilities.
struct MoeSpec {
    std::string module = "mlp";
    std::string router = "gate";
    std::string experts = "experts.{E}.";
    std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
    int64_t n_experts = 0, top_k = 0, ffn = 0;
    bool norm_topk = false;
    double aux_coef = 0.0;  // output_router_logits: the training loss adds router_aux_loss_coef x the load-balancing loss
    std::string act = "silu";
};
// Returns the mixture's output (before the residual add).
std::string build_moe(SectionBuilder &b, const std::string &x, const LlmConfig &c, const MoeSpec &spec);
// The mixture's config keys as Qwen3-MoE and OLMoE name them (num_experts or num_local_experts,
// num_experts_per_tok, the width `ffn_key`, norm_topk_prob, output_router_logits and router_aux_loss_coef), with
// the class defaults; errors name the key (more experts than the kernels take: CK_MOE_MAX_EXPERTS).
MoeSpec read_moe(const ConfigReader &r, int64_t experts_default, int64_t top_k_default, const char *ffn_key,
                 int64_t ffn_default, bool norm_default, double aux_coef_default);
// Each mixture family's reading of its config (in its file): what the builder builds and `ckc quantize` writes.
MoeSpec mixtral_moe(const ConfigReader &r, const LlmConfig &c);
MoeSpec qwen3_moe_moe(const ConfigReader &r, const LlmConfig &c);
MoeSpec olmoe_moe(const ConfigReader &r, const LlmConfig &c);

// The pre-norm decoder layer of Llama, Mistral, Qwen2, Phi-3, Gemma, GPT-2:
//   h = x + attn(norm1(x));  out = h + mlp(norm2(h))
struct PreNormBlock {
    std::string attn_norm = "input_layernorm", mlp_norm = "post_attention_layernorm";
    NormSpec norm;
    AttentionSpec attn;
    MlpSpec mlp;
    std::optional<MoeSpec> moe;  // set: a mixture of experts in place of the MLP
};
// Into p.block, or `into` p.block2: the layers of a second kind (Program::layer_kind).
void build_pre_norm_block(Program &p, const LlmConfig &c, const std::string &layer_prefix, const PreNormBlock &spec,
                          Section into = Section::Block);

// Gemma 2's and Gemma 3's layout: embeddings x sqrt(hidden), (1 + w) RMSNorms around each sublayer
//   h = x + post_attention_layernorm(attn(input_layernorm(x)))
//   out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
// (the attention's q/k norms, when set, the same kind), the final norm, the head soft-capped when final_softcap.
void build_sandwich_layout(Program &p, const LlmConfig &c, AttentionSpec attn, double final_softcap);

// A Program with info and the residual-stream carry "x" [T, hidden] set up.
Program start_program(const LlmConfig &c);

struct HeaderSpec {
    std::string prefix = "model.";
    std::string table = "embed_tokens.weight";
    double scale = 0.0;             // > 0: multiply embeddings (Gemma: sqrt(hidden))
    std::string positions;          // learned position table (GPT-2 "wpe.weight"), "" = none
    int64_t n_positions = 0;
};
void build_header(Program &p, const LlmConfig &c, const HeaderSpec &spec);

struct FooterSpec {
    std::string prefix = "model.";
    std::string norm_module = "norm";
    NormSpec norm;
    std::string embed_full_name = "model.embed_tokens.weight";  // what a tied head reads
    std::string head = "lm_head";    // untied head module (no prefix)
    bool head_bias = false;
    double final_softcap = 0.0;      // Gemma-2: cap * tanh(logits / cap)
};
void build_footer(Program &p, const LlmConfig &c, const FooterSpec &spec);

// The Llama layout most families share: "model." names (optional in the
// checkpoint), token embeddings, the pre-norm block at "model.layers.{L}.",
// the final norm (the block's kind) and the head. `llama_block` is the
// Llama block (RMSNorm with the config's eps, the config's activation) for a
// family to adjust before building.
PreNormBlock llama_block(const LlmConfig &c, NormKind norm = NormKind::Rms);
void build_llama_layout(Program &p, const LlmConfig &c, const PreNormBlock &blk, const HeaderSpec &header = {});

// `values` as one attribute: a literal when every layer agrees, else a
// per-layer table registered in the Program and referenced as "@name".
Attr per_layer(Program &p, const std::string &name, const std::vector<double> &values, bool is_int);
// Qwen2's and Qwen3's sliding windows: only when use_sliding_window (default false), on the layers whose
// layer_types entry is "sliding_attention", by default those with index >= max_window_layers (28).
Attr qwen_layer_windows(Program &p, const ConfigReader &r, const LlmConfig &c);
// Qwen3's layer (Qwen3-MoE's attention too): the Llama block with per-head q/k RMSNorm, biases on q/k/v/o when
// attention_bias, Qwen2's windows.
PreNormBlock qwen3_block(Program &p, const ConfigReader &r, const LlmConfig &c);

}  // namespace ckc
