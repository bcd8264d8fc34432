#include "frontend/hf/builders.h"

#include <cmath>

#include <fmt/format.h>

#include "ck_quant.h"  // CK_MOE_MAX_EXPERTS
#include "support/error.h"
#include "support/util.h"

namespace ckc {

// ---- SectionBuilder ----------------------------------------------------------

LlmDims llm_dims(const LlmConfig &c)
{
    int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    return {{c.hidden_size, "CK_DIM"},     {q, "CK_Q_DIM"},           {kv, "CK_KV_DIM"},
            {c.intermediate_size, "CK_FFN"}, {c.vocab_size, "CK_VOCAB_SIZE"}, {q + 2 * kv, "CK_QKV_DIM"},
            {2 * c.intermediate_size, "CK_GATE_UP_DIM"}};
}

std::string SectionBuilder::weight(const std::string &name, const std::vector<NamedDim> &dims)
{
    return add_weight(name, prefix + name, dims, false);
}

std::string SectionBuilder::weight_full(const std::string &full_name, const std::vector<NamedDim> &dims)
{
    return add_weight(full_name, full_name, dims, false);
}

std::string SectionBuilder::add_weight(const std::string &tensor, const std::string &source,
                                       const std::vector<NamedDim> &dims, bool transposed)
{
    if (g.has_tensor(tensor)) return tensor;
    Tensor t;
    t.name = tensor;
    for (const NamedDim &d : dims) {
        t.shape.push_back(d.value);
        t.dims.push_back(d.name);
    }
    t.storage = Storage::Weight;
    t.source.parts = {source};
    t.source.part_shapes = {transposed ? Shape{t.shape[1], t.shape[0]} : t.shape};
    t.source.transposed = transposed;
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

std::string SectionBuilder::carry(const Program &p)
{
    Tensor t;
    t.name = p.carry;
    t.shape = p.carry_shape;
    t.dims = p.carry_dims;
    t.storage = Storage::Carry;
    g.add_tensor(t);
    return t.name;
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
    n.origin.module = full_module(module);
    g.add_node(n, out_storage);
    return n.output;
}

std::string SectionBuilder::full_module(const std::string &module) const
{
    if (!module.empty()) return prefix + module;
    return ends_with(prefix, ".") ? prefix.substr(0, prefix.size() - 1) : prefix;
}

void SectionBuilder::module_output(const std::string &t, const std::string &module)
{
    g.tensor(t).reference = full_module(module);
}

std::string SectionBuilder::layer_output(const std::string &a, const std::string &b)
{
    std::string out = add(a, b, "x_out", "", Storage::Carry);
    g.mark_output(out);
    module_output(out, "");
    return out;
}

std::string SectionBuilder::norm(const std::string &x, const std::string &module, const NormSpec &spec,
                                 const std::string &out, Storage out_storage)
{
    const Tensor &xt = g.tensor(x);
    NamedDim dim{xt.shape.back(), xt.dim(xt.shape.size() - 1)};
    std::string w = weight(module + ".weight", {dim});
    if (spec.kind == NormKind::Layer) {
        std::string b = weight(module + ".bias", {dim});
        std::string y = op(Op::LAYERNORM, {x, w, b}, out, {{"eps", spec.eps}}, module, out_storage);
        module_output(y, module);
        return y;
    }
    double offset = spec.kind == NormKind::RmsPlusOne ? 1.0 : 0.0;
    std::string y = op(Op::RMSNORM, {x, w}, out, {{"eps", spec.eps}, {"w_offset", offset}}, module, out_storage);
    module_output(y, module);
    return y;
}

std::string SectionBuilder::linear(const std::string &x, const std::string &module, const NamedDim &in,
                                   const NamedDim &out_features, bool bias, const std::string &out, bool conv1d)
{
    std::string w = add_weight(module + ".weight", prefix + module + ".weight", {out_features, in}, conv1d);
    std::string y = op(Op::MATMUL, {x, w}, bias ? out + "_mm" : out, {{"transpose_b", int64_t(1)}}, module);
    if (bias) y = op(Op::ADD, {y, weight(module + ".bias", {out_features})}, out, {}, module);
    module_output(y, module);
    return y;
}

std::string SectionBuilder::add(const std::string &a, const std::string &b, const std::string &out,
                                const std::string &module, Storage out_storage)
{
    return op(Op::ADD, {a, b}, out, {}, module, out_storage);
}

std::vector<std::string> SectionBuilder::split(const std::string &x, const std::vector<NamedDim> &widths,
                                               const std::vector<std::string> &names, const std::string &module)
{
    std::vector<std::string> out;
    int64_t start = 0;
    for (size_t i = 0; i < widths.size(); i++) {
        out.push_back(op(Op::SLICE, {x}, names[i], {{"start", start}, {"length", widths[i].value}}, module));
        g.tensor(out.back()).dims = {"", widths[i].name};  // [T, this part's width]
        start += widths[i].value;
    }
    return out;
}

// ---- attention and MLP -----------------------------------------------------------

std::string build_attention(SectionBuilder &b, const std::string &x, const LlmConfig &c, const AttentionSpec &s)
{
    const std::string &m = s.module;
    int64_t H = c.n_heads, KVH = c.n_kv_heads, D = c.head_dim;
    const LlmDims dims = llm_dims(c);
    std::string q, k, v;
    if (s.qkv == AttentionSpec::Qkv::Fused) {
        std::string qkv = b.linear(x, m + "." + s.fused, dims.hidden, dims.qkv, s.qkv_bias, "qkv", s.conv1d);
        auto parts = b.split(qkv, {dims.q, dims.kv, dims.kv}, {"q", "k", "v"}, m + "." + s.fused);
        q = parts[0];
        k = parts[1];
        v = parts[2];
    } else {
        q = b.linear(x, m + "." + s.q, dims.hidden, dims.q, s.qkv_bias, "q", s.conv1d);
        k = b.linear(x, m + "." + s.k, dims.hidden, dims.kv, s.qkv_bias, "k", s.conv1d);
        v = b.linear(x, m + "." + s.v, dims.hidden, dims.kv, s.qkv_bias, "v", s.conv1d);
    }
    if (s.qk_norm != AttentionSpec::QkNorm::None) {  // RMSNorm of q and of k: per head_dim-wide group, or whole
        const bool per_head = s.qk_norm == AttentionSpec::QkNorm::PerHead;
        const NamedDim head{D, "CK_HEAD_DIM"};
        const double offset = s.qk_norm_spec.kind == NormKind::RmsPlusOne ? 1.0 : 0.0;
        std::map<std::string, Attr> attrs{{"eps", s.qk_norm_spec.eps}, {"w_offset", offset}};
        if (per_head) attrs["group"] = D;
        q = b.op(Op::RMSNORM, {q, b.weight(m + ".q_norm.weight", {per_head ? head : dims.q})}, "q_normed", attrs,
                 m + ".q_norm");
        k = b.op(Op::RMSNORM, {k, b.weight(m + ".k_norm.weight", {per_head ? head : dims.kv})}, "k_normed", attrs,
                 m + ".k_norm");
    }
    if (s.clip_qkv > 0.0) {
        std::map<std::string, Attr> clip{{"min", -s.clip_qkv}, {"max", s.clip_qkv}};
        q = b.op(Op::CLAMP, {q}, "q_clipped", clip, m);
        k = b.op(Op::CLAMP, {k}, "k_clipped", clip, m);
        v = b.op(Op::CLAMP, {v}, "v_clipped", clip, m);
    }
    if (s.rope) {
        std::map<std::string, Attr> rope{{"head_dim", D},
                                         {"rot_dim", c.rope.rot_dim},
                                         {"rope_type", c.rope.type},
                                         {"theta", c.rope.theta},
                                         {"factor", c.rope.factor},
                                         {"low_freq_factor", c.rope.low_freq_factor},
                                         {"high_freq_factor", c.rope.high_freq_factor},
                                         {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
        if (s.rotated) rope["rotated"] = *s.rotated;
        if (s.theta) rope["theta"] = *s.theta;
        if (s.factor) rope["factor"] = *s.factor;
        auto rope_q = rope, rope_k = rope;
        rope_q["heads"] = H;
        rope_k["heads"] = KVH;
        q = b.op(Op::ROPE, {q}, "q_rope", rope_q, m + ".rotary_emb");
        k = b.op(Op::ROPE, {k}, "k_rope", rope_k, m + ".rotary_emb");
    }
    std::string kv = b.op(Op::KV_STORE, {k, v}, "kv", {{"kv_heads", KVH}, {"head_dim", D}}, m);
    Attr scale = s.scale;
    if (auto d = std::get_if<double>(&scale); d && *d == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::string att = b.op(Op::KV_ATTENTION, {q, kv}, "attn",
                           {{"heads", H}, {"kv_heads", KVH}, {"head_dim", D}, {"scale", scale},
                            {"window", s.window}, {"softcap", s.softcap}},
                           m);
    return b.linear(att, m + "." + s.o, dims.q, dims.hidden, s.o_bias, "attn_out", s.conv1d);
}

std::string build_mlp(SectionBuilder &b, const std::string &x, const LlmConfig &c, const MlpSpec &s)
{
    const std::string &m = s.module;
    const LlmDims d = llm_dims(c);
    if (!s.gated) {
        std::string h = b.linear(x, m + "." + s.fc1, d.hidden, d.ffn, s.bias, "fc1", s.conv1d);
        std::string a = b.op(Op::GELU, {h}, "ffn_act", {{"act", s.act}}, m + ".act");
        return b.linear(a, m + "." + s.fc2, d.ffn, d.hidden, s.bias, "ffn_out", s.conv1d);
    }
    std::string gate, up;
    if (s.fused_gate_up) {
        std::string gu = b.linear(x, m + "." + s.gate_up, d.hidden, d.gate_up, s.bias, "gate_up", s.conv1d);
        auto parts = b.split(gu, {d.ffn, d.ffn}, {"gate", "up"}, m + "." + s.gate_up);
        gate = parts[0];
        up = parts[1];
    } else {
        gate = b.linear(x, m + "." + s.gate, d.hidden, d.ffn, s.bias, "gate", s.conv1d);
        up = b.linear(x, m + "." + s.up, d.hidden, d.ffn, s.bias, "up", s.conv1d);
    }
    std::string act = b.op(Op::GLU, {gate, up}, "ffn_act", {{"act", s.act}}, m + ".act_fn");
    return b.linear(act, m + "." + s.down, d.ffn, d.hidden, s.bias, "ffn_out", s.conv1d);
}

std::string build_moe(SectionBuilder &b, const std::string &x, const LlmConfig &c, const MoeSpec &s)
{
    const std::string &m = s.module;
    const LlmDims d = llm_dims(c);
    const NamedDim E{s.n_experts, "CK_EXPERTS"}, F{s.ffn, "CK_EXPERT_FFN"};
    std::string logits = b.linear(x, m + "." + s.router, d.hidden, E, false, "router_logits");
    std::string route = b.op(Op::MOE_ROUTE, {logits}, "route",
                             {{"top_k", s.top_k}, {"norm_topk", int64_t(s.norm_topk ? 1 : 0)}, {"aux_coef", s.aux_coef}},
                             m + "." + s.router);
    auto experts = [&](const std::string &proj, const NamedDim &rows, const NamedDim &cols) {
        std::string name = m + "." + s.experts + proj + ".weight";
        std::string w = b.weight(name, {E, rows, cols});
        Tensor &t = b.g.tensor(w);
        t.source.part_shapes = {{rows.value, cols.value}};  // one tensor per expert, {E} its index
        return w;
    };
    std::string gate = experts(s.gate, F, d.hidden), up = experts(s.up, F, d.hidden), down = experts(s.down, d.hidden, F);
    std::string y = b.op(Op::MOE_EXPERTS, {x, route, gate, up, down}, "moe_out", {{"act", s.act}}, m);
    b.module_output(y, m);
    return y;
}

void build_pre_norm_block(Program &p, const LlmConfig &c, const std::string &layer_prefix, const PreNormBlock &spec,
                          Section into)
{
    if (!is_layer_section(into)) internal_error("build_pre_norm_block: into the " + std::string(Program::section_name(into)));
    SectionBuilder b(p.section(into), layer_prefix);
    if (spec.moe) {  // the sizes build_moe names
        p.info.sizes.push_back({"CK_EXPERTS", spec.moe->n_experts, "experts of each mixture", "", {}});
        p.info.sizes.push_back({"CK_EXPERT_FFN", spec.moe->ffn, "an expert's MLP width", "", {}});
        p.info.summary += fmt::format(", {} experts of width {}, top {}{}", spec.moe->n_experts, spec.moe->ffn,
                                      spec.moe->top_k, spec.moe->norm_topk ? " renormalized" : "");
        if (spec.moe->aux_coef > 0)
            p.info.summary += fmt::format(", load-balancing loss x {} in training", spec.moe->aux_coef);
    }
    std::string x = b.carry(p);
    std::string n1 = b.norm(x, spec.attn_norm, spec.norm, "attn_in");
    std::string a = build_attention(b, n1, c, spec.attn);
    std::string h = b.add(x, a, "h", "");
    std::string n2 = b.norm(h, spec.mlp_norm, spec.norm, "ffn_in");
    std::string f = spec.moe ? build_moe(b, n2, c, *spec.moe) : build_mlp(b, n2, c, spec.mlp);
    b.layer_output(h, f);
}

// ---- program, header, footer ---------------------------------------------------------

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
    p.carry_dims = {"", "CK_DIM"};
    const LlmDims d = llm_dims(c);
    // the widths (Tensor::dims name them), then the sizes node attributes name (heads = 8: CK_HEADS)
    p.info.sizes = {{d.vocab.name, d.vocab.value, "V", "", {}},
                    {d.hidden.name, d.hidden.value, "C: model width, the residual stream", "", {}},
                    {d.ffn.name, d.ffn.value, "MLP width", "", {}},
                    {d.q.name, d.q.value, "query heads x head_dim", "", {}},
                    {d.kv.name, d.kv.value, "key/value heads x head_dim", "", {}},
                    {d.qkv.name, d.qkv.value, "a fused q|k|v projection", "", {d.q.name, d.kv.name, d.kv.name}},
                    {d.gate_up.name, d.gate_up.value, "a fused gate|up projection", "", {d.ffn.name, d.ffn.name}},
                    {"CK_HEADS", c.n_heads, "query heads", "heads", {}},
                    {"CK_KV_HEADS", c.n_kv_heads, "key/value heads (KV cache)", "kv_heads", {}},
                    {"CK_HEAD_DIM", c.head_dim, "per head (KV cache)", "head_dim", {}},
                    {"CK_ROT_DIM", c.rope.rot_dim, "rotated dims of each head (RoPE)", "rot_dim", {}}};
    return p;
}

void build_header(Program &p, const LlmConfig &c, const HeaderSpec &spec)
{
    SectionBuilder h(p.header, spec.prefix);
    std::string tok = h.tokens();
    const LlmDims d = llm_dims(c);
    std::string w = h.weight(spec.table, {d.vocab, d.hidden});
    std::string module = spec.table.substr(0, spec.table.rfind('.'));
    bool more = spec.scale > 0 || !spec.positions.empty();
    std::string x = h.op(Op::EMBEDDING, {tok, w}, more ? "tok_embed" : p.carry, {}, module,
                         more ? Storage::Activation : Storage::Carry);
    if (spec.scale > 0) {
        bool last = spec.positions.empty();
        x = h.op(Op::SCALE, {x}, last ? p.carry : "scaled", {{"scale", spec.scale}}, module,
                 last ? Storage::Carry : Storage::Activation);
    }
    h.module_output(x, module);  // transformers' Gemma embedding module applies the scale itself
    if (!spec.positions.empty()) {
        std::string pw = h.weight(spec.positions, {{spec.n_positions, ""}, d.hidden});
        h.op(Op::POS_EMBED, {x, pw}, p.carry, {}, spec.positions.substr(0, spec.positions.rfind('.')), Storage::Carry);
    }
    p.header.mark_output(p.carry);
}

void build_footer(Program &p, const LlmConfig &c, const FooterSpec &spec)
{
    SectionBuilder f(p.footer, spec.prefix);
    std::string x = f.carry(p);
    const LlmDims d = llm_dims(c);
    std::string xn = f.norm(x, spec.norm_module, spec.norm, "x_final");
    // A tied head reads the embedding table itself; otherwise the head module (no prefix).
    SectionBuilder head(p.footer, "");
    std::string w = c.tie_word_embeddings ? head.weight_full(spec.embed_full_name, {d.vocab, d.hidden})
                                          : head.weight(spec.head + ".weight", {d.vocab, d.hidden});
    bool more = spec.head_bias || spec.final_softcap > 0;
    std::string y = head.op(Op::MATMUL, {xn, w}, more ? "logits_mm" : "logits", {{"transpose_b", int64_t(1)}}, spec.head,
                            more ? Storage::Activation : Storage::Output);
    if (spec.head_bias) {
        std::string b = head.weight(spec.head + ".bias", {d.vocab});
        bool last = spec.final_softcap <= 0;
        y = head.op(Op::ADD, {y, b}, last ? "logits" : "logits_biased", {}, spec.head,
                    last ? Storage::Output : Storage::Activation);
    }
    head.module_output(y, spec.head);
    if (spec.final_softcap > 0)
        head.op(Op::SOFTCAP, {y}, "logits", {{"cap", spec.final_softcap}}, "final_logit_softcapping", Storage::Output);
    p.footer.mark_output("logits");
}

PreNormBlock llama_block(const LlmConfig &c, NormKind norm)
{
    PreNormBlock blk;
    blk.norm = {norm, c.norm_eps};
    blk.mlp.act = c.hidden_act;
    return blk;
}

void build_llama_layout(Program &p, const LlmConfig &c, const PreNormBlock &blk, const HeaderSpec &header)
{
    p.info.optional_prefix = "model.";
    if (const auto *w = std::get_if<int64_t>(&blk.attn.window); w && *w > 0)
        p.info.summary += fmt::format(", sliding window {}", *w);
    build_header(p, c, header);
    build_pre_norm_block(p, c, "model.layers.{L}.", blk);
    FooterSpec f;
    f.norm = blk.norm;
    build_footer(p, c, f);
}

void build_sandwich_layout(Program &p, const LlmConfig &c, AttentionSpec attn, double final_softcap)
{
    p.info.optional_prefix = "model.";
    HeaderSpec h;
    h.scale = std::sqrt(static_cast<double>(c.hidden_size));
    build_header(p, c, h);

    const NormSpec norm{NormKind::RmsPlusOne, c.norm_eps};
    attn.qk_norm_spec = norm;
    SectionBuilder b(p.block, "model.layers.{L}.");
    std::string x = b.carry(p);
    std::string a = build_attention(b, b.norm(x, "input_layernorm", norm, "attn_in"), c, attn);
    std::string h1 = b.add(x, b.norm(a, "post_attention_layernorm", norm, "attn_normed"), "h", "");
    MlpSpec mlp;
    mlp.act = c.hidden_act;
    std::string f = build_mlp(b, b.norm(h1, "pre_feedforward_layernorm", norm, "ffn_in"), c, mlp);
    b.layer_output(h1, b.norm(f, "post_feedforward_layernorm", norm, "ffn_normed"));

    FooterSpec foot;
    foot.norm = norm;
    foot.final_softcap = final_softcap;
    build_footer(p, c, foot);
}

// The mixture's keys, as Qwen3-MoE and OLMoE name them: the experts (num_experts, or num_local_experts as
// transformers 5 writes it), the experts per token, their width.
MoeSpec read_moe(const ConfigReader &r, int64_t experts_default, int64_t top_k_default, const char *ffn_key,
                 int64_t ffn_default, bool norm_default, double aux_coef_default)
{
    MoeSpec m;
    const char *experts_key = r.has("num_local_experts") && !r.has("num_experts") ? "num_local_experts" : "num_experts";
    m.n_experts = r.positive_int(experts_key, experts_default);
    m.top_k = r.positive_int("num_experts_per_tok", top_k_default);
    m.ffn = r.positive_int(ffn_key, ffn_default);
    m.norm_topk = r.boolean("norm_topk_prob", norm_default);
    if (r.boolean("output_router_logits", false)) {
        m.aux_coef = r.number("router_aux_loss_coef", aux_coef_default);
        if (!std::isfinite(m.aux_coef) || m.aux_coef < 0)
            r.fail("router_aux_loss_coef", fmt::format("is {}: a load-balancing loss weight is finite and >= 0", m.aux_coef));
    }
    if (m.n_experts > CK_MOE_MAX_EXPERTS)
        r.fail(experts_key, fmt::format("{} experts is above ckc's limit of {}", m.n_experts, CK_MOE_MAX_EXPERTS));
    if (m.top_k > m.n_experts)
        r.fail("num_experts_per_tok", fmt::format("{} is more than the {} experts ({})", m.top_k, m.n_experts,
                                                  experts_key));
    return m;
}

PreNormBlock qwen3_block(Program &p, const ConfigReader &r, const LlmConfig &c)
{
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    blk.attn.qk_norm = AttentionSpec::QkNorm::PerHead;
    blk.attn.qk_norm_spec = blk.norm;
    blk.attn.window = qwen_layer_windows(p, r, c);
    return blk;
}

Attr qwen_layer_windows(Program &p, const ConfigReader &r, const LlmConfig &c)
{
    int64_t window = r.boolean("use_sliding_window", false) ? read_window(r, "sliding_window", 4096) : 0;
    int64_t max_window_layers = r.non_negative_int("max_window_layers", 28);
    std::vector<bool> sliding;
    for (int64_t i = 0; i < c.n_layers; i++) sliding.push_back(window && i >= max_window_layers);
    return per_layer(p, "window", read_layer_windows(r, c.n_layers, window, sliding), true);
}

Attr per_layer(Program &p, const std::string &name, const std::vector<double> &values, bool is_int)
{
    bool same = true;
    for (double v : values) same = same && v == values.front();
    if (same && !values.empty()) {
        if (is_int) return static_cast<int64_t>(values.front());
        return values.front();
    }
    p.layer_tables[name] = LayerTable{is_int, values};
    return LayerTableRef{name};
}

}  // namespace ckc
