#include "frontend/hf/builders.h"

#include <cmath>

#include <fmt/format.h>

#include "support/error.h"

namespace ckc {

std::string SectionBuilder::weight(const std::string &name, const Shape &shape)
{
    return add_weight(name, prefix + name, shape);
}

std::string SectionBuilder::weight_full(const std::string &full_name, const Shape &shape)
{
    return add_weight(full_name, full_name, shape);
}

std::string SectionBuilder::add_weight(const std::string &tensor, const std::string &source, const Shape &shape)
{
    if (g.has_tensor(tensor)) return tensor;
    Tensor t;
    t.name = tensor;
    t.shape = shape;
    t.storage = Storage::Weight;
    t.source.parts = {source};
    t.source.part_shapes = {shape};
    g.add_tensor(t);
    return tensor;
}

std::string SectionBuilder::tokens()
{
    if (!g.has_tensor("tokens")) {
        Tensor t;
        t.name = "tokens";
        t.shape = {kTokens};
        t.dtype = DType::I32;
        t.storage = Storage::Input;
        g.add_tensor(t);
    }
    return "tokens";
}

std::string SectionBuilder::carry(const std::string &name, const Shape &shape)
{
    Tensor t;
    t.name = name;
    t.shape = shape;
    t.storage = Storage::Carry;
    g.add_tensor(t);
    return name;
}

std::string SectionBuilder::op(Op op, const std::vector<std::string> &inputs, const std::string &out,
                               const std::map<std::string, Attr> &attrs, const std::string &module,
                               Storage out_storage)
{
    Node n;
    n.op = op;
    n.inputs = inputs;
    n.output = g.unique_name(out);
    n.name = n.output;
    n.attrs = attrs;
    n.origin = prefix + module;
    g.add_node(n, out_storage);
    return n.output;
}

std::string SectionBuilder::rms_norm(const std::string &x, const std::string &module, double eps, const std::string &out)
{
    int64_t dim = g.tensor(x).shape.back();
    std::string w = weight(module + ".weight", {dim});
    return op(Op::RMSNORM, {x, w}, out, {{"eps", eps}}, module);
}

std::string SectionBuilder::linear(const std::string &x, const std::string &module, int64_t in, int64_t out_features,
                                   bool bias, const std::string &out)
{
    std::string w = weight(module + ".weight", {out_features, in});
    std::string y = op(Op::MATMUL, {x, w}, bias ? out + "_mm" : out, {}, module);
    if (!bias) return y;
    std::string b = weight(module + ".bias", {out_features});
    return op(Op::ADD, {y, b}, out, {}, module);
}

std::string SectionBuilder::add(const std::string &a, const std::string &b, const std::string &out,
                                const std::string &module, Storage out_storage)
{
    return op(Op::ADD, {a, b}, out, {}, module, out_storage);
}

std::string build_attention(SectionBuilder &b, const std::string &x, const LlmConfig &c, const AttentionSpec &spec)
{
    const std::string &m = spec.module;
    int64_t C = c.hidden_size, H = c.n_heads, KVH = c.n_kv_heads, D = c.head_dim;
    std::string q = b.linear(x, m + ".q_proj", C, H * D, spec.qkv_bias, "q");
    std::string k = b.linear(x, m + ".k_proj", C, KVH * D, spec.qkv_bias, "k");
    std::string v = b.linear(x, m + ".v_proj", C, KVH * D, spec.qkv_bias, "v");
    std::map<std::string, Attr> rope{{"head_dim", D},
                                     {"rot_dim", c.rope.rot_dim},
                                     {"rope_type", c.rope.type},
                                     {"theta", c.rope.theta},
                                     {"factor", c.rope.factor},
                                     {"low_freq_factor", c.rope.low_freq_factor},
                                     {"high_freq_factor", c.rope.high_freq_factor},
                                     {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
    auto rope_q = rope, rope_k = rope;
    rope_q["heads"] = H;
    rope_k["heads"] = KVH;
    std::string qr = b.op(Op::ROPE, {q}, "q_rope", rope_q, m + ".rotary_emb");
    std::string kr = b.op(Op::ROPE, {k}, "k_rope", rope_k, m + ".rotary_emb");
    std::string kv = b.op(Op::KV_STORE, {kr, v}, "kv", {{"kv_heads", KVH}, {"head_dim", D}}, m);
    double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(D));
    std::string att = b.op(Op::KV_ATTENTION, {qr, kv}, "attn",
                           {{"heads", H}, {"kv_heads", KVH}, {"head_dim", D}, {"scale", scale},
                            {"window", spec.window}, {"softcap", spec.softcap}},
                           m);
    return b.linear(att, m + ".o_proj", H * D, C, spec.o_bias, "attn_out");
}

std::string build_swiglu_mlp(SectionBuilder &b, const std::string &x, const LlmConfig &c, const std::string &module,
                             bool bias)
{
    int64_t C = c.hidden_size, F = c.intermediate_size;
    std::string gate = b.linear(x, module + ".gate_proj", C, F, bias, "gate");
    std::string up = b.linear(x, module + ".up_proj", C, F, bias, "up");
    std::string act = b.op(Op::SWIGLU, {gate, up}, "ffn_act", {}, module + ".act_fn");
    return b.linear(act, module + ".down_proj", F, C, bias, "ffn_out");
}

Program start_program(const LlmConfig &c)
{
    Program p;
    p.info.family = c.model_type;
    p.info.vocab_size = c.vocab_size;
    p.info.hidden_size = c.hidden_size;
    p.info.n_layers = c.n_layers;
    p.info.context_length = c.context_length;
    p.info.summary = c.summary();
    p.carry = "x";
    p.carry_shape = {kTokens, c.hidden_size};
    return p;
}

void build_embedding_header(Program &p, const LlmConfig &c, const std::string &prefix, const std::string &table)
{
    SectionBuilder h(p.header, prefix);
    std::string tok = h.tokens();
    std::string w = h.weight(table, {c.vocab_size, c.hidden_size});
    std::string module = table.substr(0, table.rfind('.'));
    h.op(Op::EMBEDDING, {tok, w}, p.carry, {}, module, Storage::Carry);
    p.header.mark_output(p.carry);
}

void build_rmsnorm_lm_head_footer(Program &p, const LlmConfig &c, const std::string &prefix,
                                  const std::string &norm_module, const std::string &embed_full_name)
{
    SectionBuilder f(p.footer, prefix);
    std::string x = f.carry(p.carry, p.carry_shape);
    std::string xn = f.rms_norm(x, norm_module, c.norm_eps, "x_final");
    // A tied head reads the embedding table itself; otherwise lm_head.weight (no prefix).
    SectionBuilder head(p.footer, "");
    std::string w = c.tie_word_embeddings ? head.weight_full(embed_full_name, {c.vocab_size, c.hidden_size})
                                          : head.weight("lm_head.weight", {c.vocab_size, c.hidden_size});
    head.op(Op::MATMUL, {xn, w}, "logits", {}, "lm_head", Storage::Output);
    p.footer.mark_output("logits");
}

}  // namespace ckc
