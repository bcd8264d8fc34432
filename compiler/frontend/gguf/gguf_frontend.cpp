// gguf_frontend.cpp — see gguf_frontend.h. The file is read with the
// runtime's own bounds-checked reader (runtime/io/gguf.c), so `ckc compile`
// and ck_model_init reject the same corrupt files with the same messages.
#include "frontend/gguf/gguf_frontend.h"

#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "ck_checkpoint.h"
#include "frontend/gguf/gguf_arch.h"
#include "support/checkpoint.h"
#include "support/error.h"
#include "support/limits.h"
#include "support/util.h"

namespace ckc {

namespace {


// The metadata, each value read recorded (when `read` is given): what the compiled model is checked against at init.
class Meta {
public:
    using Read = std::vector<ModelInfo::HeaderValue>;
    Meta(const ck_checkpoint *ck, std::string path, std::string arch, Read *read = nullptr)
        : ck_(ck), path_(std::move(path)), arch_(std::move(arch)), read_(read) {}
    const ck_gguf_kv *find(const std::string &key) const { return ck_checkpoint_kv_find(ck_, key.c_str()); }
    std::string key(const std::string &k) const { return arch_ + "." + k; }
    std::optional<int64_t> integer(const std::string &k) const
    {
        const ck_gguf_kv *kv = find(key(k));
        int64_t v;
        if (!kv) return std::nullopt;
        if (ck_gguf_kv_int(kv, 0, &v)) input_error(fmt::format("{}: metadata '{}' is not an integer", path_, key(k)));
        if (read_) read_->push_back({key(k), ModelInfo::HeaderValue::Int, v, 0.0, ""});
        return v;
    }
    int64_t required(const std::string &k) const
    {
        auto v = integer(k);
        if (!v) input_error(fmt::format("{}: metadata '{}' is missing (a {} GGUF needs it)", path_, key(k), arch_));
        return *v;
    }
    std::optional<double> number(const std::string &k) const
    {
        const ck_gguf_kv *kv = find(key(k));
        double v;
        if (!kv) return std::nullopt;
        if (ck_gguf_kv_num(kv, 0, &v)) input_error(fmt::format("{}: metadata '{}' is not a number", path_, key(k)));
        if (read_) read_->push_back({key(k), ModelInfo::HeaderValue::Number, 0, v, ""});
        return v;
    }
    std::optional<std::string> string(const std::string &full_key) const
    {
        const ck_gguf_kv *kv = find(full_key);
        size_t n;
        const char *s = kv ? ck_gguf_kv_str(kv, 0, &n) : nullptr;
        if (!kv) return std::nullopt;
        if (!s) input_error(fmt::format("{}: metadata '{}' is not a string", path_, full_key));
        if (read_) read_->push_back({full_key, ModelInfo::HeaderValue::String, 0, 0.0, std::string(s, n)});
        return std::string(s, n);
    }

private:
    const ck_checkpoint *ck_;
    std::string path_, arch_;
    Read *read_;
};

const GgufArch &arch_of(const ck_checkpoint *ck, const std::string &path, std::string *name)
{
    Meta m(ck, path, "");
    auto a = m.string("general.architecture");
    if (!a) input_error(path + ": metadata 'general.architecture' is missing (is this a model GGUF?)");
    const GgufArch *arch = gguf_arch(*a);
    if (!arch)
        input_error(fmt::format("{}: architecture \"{}\" is not supported{}; supported: {}", path, *a,
                                did_you_mean(*a, gguf_arch_names()), join(gguf_arch_names(), ", ")));
    *name = *a;
    return *arch;
}

nlohmann::json config_of(const ck_checkpoint *ck, const std::string &path, const GgufArch &arch, const std::string &name,
                         Meta::Read *read = nullptr)
{
    Meta m(ck, path, name, read);
    if (read) read->push_back({"general.architecture", ModelInfo::HeaderValue::String, 0, 0.0, name});
    nlohmann::json c;
    c["model_type"] = arch.model_type;
    // the sizes, each within ckc's limits before anything is built from it (named by the file's own keys)
    auto bounded = [&](const std::string &k, int64_t v, int64_t max) {
        if (v < 1) input_error(fmt::format("{}: metadata '{}' is {}; it must be at least 1", path, m.key(k), v));
        if (v > max)
            input_error(fmt::format("{}: metadata '{}' is {}, above ckc's limit of {} (support/limits.h)", path,
                                    m.key(k), v, max));
        return v;
    };
    c[arch.hidden] = bounded("embedding_length", m.required("embedding_length"), limits::kWidth);
    c[arch.ffn] = bounded("feed_forward_length", m.required("feed_forward_length"), limits::kWidth);
    c[arch.layers] = bounded("block_count", m.required("block_count"), limits::kLayers);
    int64_t heads = bounded("attention.head_count", m.required("attention.head_count"), limits::kHeads);
    c[arch.heads] = heads;
    if (arch.kv_heads)
        c[arch.kv_heads] = bounded("attention.head_count_kv", m.integer("attention.head_count_kv").value_or(heads),
                                   limits::kHeads);
    c[arch.context] = bounded("context_length", m.required("context_length"), limits::kContext);
    std::string eps_key = arch.layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon";
    if (auto eps = m.number(eps_key)) c[arch.eps] = *eps;
    if (auto theta = m.number("rope.freq_base")) c["rope_theta"] = *theta;
    // GGUF's head size: attention.key_length, else n_embd / n_head (llama.cpp's rule; a config.json's default
    // differs by family: Gemma's is 256)
    if (auto kl = m.integer("attention.key_length")) c["head_dim"] = bounded("attention.key_length", *kl, limits::kWidth);
    else if (heads > 0) c["head_dim"] = c[arch.hidden].get<int64_t>() / heads;
    if (auto type = m.string(m.key("rope.scaling.type"))) {
        if (*type == "linear") {
            auto f = m.number("rope.scaling.factor");
            if (!f) input_error(path + ": rope.scaling.type is linear but " + m.key("rope.scaling.factor") + " is missing");
            c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", *f}};
        } else if (*type != "none") {
            input_error(fmt::format("{}: {} \"{}\" is not supported (ckc reads none and linear)", path,
                                    m.key("rope.scaling.type"), *type));
        }
    }
    for (const char *t : {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"})
        if (ck_checkpoint_find(ck, t))
            input_error(fmt::format("{}: tensor '{}' (RoPE frequency factors: Llama 3 / LongRoPE scaling) is not "
                                    "supported yet", path, t));
    const ck_tensor_info *emb = ck_checkpoint_find(ck, "token_embd.weight");
    if (!emb || emb->ndim != 2) input_error(path + ": tensor 'token_embd.weight' is missing (or not a matrix)");
    c["vocab_size"] = emb->shape[0];
    c["tie_word_embeddings"] = ck_checkpoint_find(ck, "output.weight") == nullptr;
    if (arch.read_extra) arch.read_extra([&](const std::string &k) { return m.number(k); }, c);
    return c;
}

}  // namespace

bool is_gguf(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {0, 0, 0, 0};
    return f.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

nlohmann::json gguf_to_hf_config(const std::string &path)
{
    CheckpointFile ck(path);
    std::string name;
    const GgufArch &arch = arch_of(ck.ck, path, &name);
    return config_of(ck.ck, path, arch, name);
}

Program build_from_gguf(const std::string &path, const HfOptions &opts)
{
    CheckpointFile ck(path);
    std::string name;
    const GgufArch &arch = arch_of(ck.ck, path, &name);
    Meta::Read header;
    nlohmann::json cfg = config_of(ck.ck, path, arch, name, &header);
    Program p = build_from_config(ConfigReader(cfg, path + " (metadata read as config.json)", cfg.dump(1)), opts);
    p.info.gguf_header = std::move(header);
    p.info.source_path = path;
    p.info.source_hash = fnv1a64(cfg.dump());
    p.info.optional_prefix = "";
    p.info.stored_weights = true;
    p.info.weight_type = -1;  // each tensor as the file stores it
    // checkpoint names -> the file's, each checked against the file now (ck_model_init checks again)
    for (Section s : p.sections()) {
        Graph &g = p.section(s);
        std::vector<std::string> weights;
        for (const auto &[tname, t] : g.tensors())
            if (t.storage == Storage::Weight && !t.source.parts.empty()) weights.push_back(tname);
        for (const auto &tname : weights) {
            Tensor &t = g.tensor(tname);
            for (size_t i = 0; i < t.source.parts.size(); i++) {
                std::string gg = gguf_tensor_name(arch, t.source.parts[i]);
                if (gg.empty())
                    internal_error(fmt::format("gguf: {} has no GGUF name for weight '{}'", arch.arch, t.source.parts[i]));
                if (gguf_transposed(arch, t.source.parts[i])) {  // GGUF keeps it [out, in], as nn.Linear
                    t.source.transposed = false;
                    t.source.part_shapes[i] = {t.source.part_shapes[i][1], t.source.part_shapes[i][0]};
                }
                if (t.source.parts[i].find("{E}") != std::string::npos)  // experts: stacked in one tensor
                    t.source.part_shapes[i] = t.shape;
                t.source.parts[i] = gg;
                const Shape &want = t.source.part_shapes[i];
                for (int64_t layer = 0; layer < (is_layer_section(s) ? p.info.n_layers : 1); layer++) {
                    if (is_layer_section(s) && !p.layer_runs(layer, s)) continue;
                    std::string tn = replace_all(gg, "{L}", std::to_string(layer));
                    const ck_tensor_info *ti = ck_checkpoint_find(ck.ck, tn.c_str());
                    if (!ti) input_error(fmt::format("{}: tensor '{}' is missing", path, tn));
                    Shape got(ti->shape, ti->shape + ti->ndim);
                    if (got != want)
                        input_error(fmt::format("{}: tensor '{}' has shape {}, but the metadata implies {}", path, tn,
                                                shape_str(got), shape_str(want)));
                }
            }
        }
        if (arch.permuted_qk)  // the file's q/k rows pair dims (2i, 2i + 1): see runtime/kernels/rope.c
            for (const Node &n : g.nodes())
                if (n.op == Op::ROPE) g.edit(n.name).attrs["interleaved"] = int64_t(1);
        if (arch.norm_plus_one)  // the file holds Gemma's 1 + w already
            for (const Node &n : g.nodes())
                if (n.op == Op::RMSNORM) g.edit(n.name).attrs["w_offset"] = 0.0;
    }
    for (Section s : p.sections()) p.section(s).verify(std::string("front end, ") + Program::section_name(s));
    return p;
}

}  // namespace ckc
