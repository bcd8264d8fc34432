// builders.h — shared pieces every decoder family is assembled from.
//
// A family file (frontend/hf/<family>.cpp) reads its config keys into an
// LlmConfig and builds header / block / footer from these builders, in the
// order the Hugging Face modeling code runs them. Builders emit primitive
// ops (MATMUL, ADD, ...); fusions are the passes' job. Every node records the
// Hugging Face module it comes from ("model.layers.{L}.self_attn.q_proj"),
// and every weight its checkpoint name, so generated code and errors can
// point at them.
#pragma once

#include <map>
#include <string>

#include "frontend/hf/config.h"
#include "ir/graph.h"

namespace ckc {

class SectionBuilder {
public:
    // weight_prefix is prepended to weight and module names: "model." for the
    // header/footer of a Llama, "model.layers.{L}." for its block.
    SectionBuilder(Graph &g, std::string weight_prefix) : g(g), prefix(std::move(weight_prefix)) {}

    // A checkpoint tensor `prefix + name`; the tensor is named `name`.
    std::string weight(const std::string &name, const Shape &shape);
    // A checkpoint tensor by its full name (e.g. a tied head reading the embedding).
    std::string weight_full(const std::string &full_name, const Shape &shape);
    std::string tokens();                                            // i32 [T] caller input
    std::string carry(const std::string &name, const Shape &shape);  // the residual stream as an input
    std::string op(Op op, const std::vector<std::string> &inputs, const std::string &out,
                   const std::map<std::string, Attr> &attrs, const std::string &module,
                   Storage out_storage = Storage::Activation);

    std::string rms_norm(const std::string &x, const std::string &module, double eps, const std::string &out);
    // y = x @ W^T (+ b) for module `module` (weights module.weight / module.bias).
    std::string linear(const std::string &x, const std::string &module, int64_t in, int64_t out_features, bool bias,
                       const std::string &out);
    std::string add(const std::string &a, const std::string &b, const std::string &out, const std::string &module,
                    Storage out_storage = Storage::Activation);

    Graph &g;
    std::string prefix;

private:
    std::string add_weight(const std::string &tensor, const std::string &source, const Shape &shape);
};

struct AttentionSpec {
    std::string module = "self_attn";
    bool qkv_bias = false, o_bias = false;
    int64_t window = 0;    // sliding window (0: none)
    double softcap = 0.0;  // attention logit soft-capping (0: none)
    double scale = 0.0;    // 0: head_dim^-0.5
};

// q/k/v projections, RoPE on q and k, KV store, causal GQA attention, o_proj.
// Returns the o_proj output (before the residual add).
std::string build_attention(SectionBuilder &b, const std::string &x, const LlmConfig &c, const AttentionSpec &spec);

// down(silu(gate(x)) * up(x)). Returns the down_proj output.
std::string build_swiglu_mlp(SectionBuilder &b, const std::string &x, const LlmConfig &c, const std::string &module,
                             bool bias);

// A Program with info and the residual-stream carry "x" [T, hidden] set up.
Program start_program(const LlmConfig &c);
// header: tokens -> embedding -> x (carry)
void build_embedding_header(Program &p, const LlmConfig &c, const std::string &prefix, const std::string &table);
// footer: x (carry) -> final RMSNorm -> LM head -> logits (output).
void build_rmsnorm_lm_head_footer(Program &p, const LlmConfig &c, const std::string &prefix,
                                  const std::string &norm_module, const std::string &embed_full_name);

}  // namespace ckc
