// gguf_quantize.cpp — see gguf_quantize.h. The tensors are the ones the
// compiled model reads (the front end's Program, before any fusion), so a
// file ckc writes is exactly what `ckc compile model.gguf` needs.
#include "tools/gguf_quantize.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "ck_errors.h"
#include "ck_quant.h"
#include "ck_weights.h"
#include "frontend/gguf/gguf_arch.h"
#include "frontend/hf/families.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"
#include "support/checkpoint.h"
#include "tools/gguf_tokenizer.h"
#include "tools/gguf_writer.h"

namespace ckc {

namespace {


// llama.cpp's permute for q_proj / k_proj: row (2i + s) of each head takes HF's row (s * D/2 + i)
std::vector<float> permute_rows(const float *w, int64_t rows, int64_t cols, int64_t heads)
{
    std::vector<float> out(static_cast<size_t>(rows * cols));
    int64_t D = rows / heads;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < D / 2; i++)
            for (int64_t s = 0; s < 2; s++)
                std::copy(w + (h * D + s * D / 2 + i) * cols, w + (h * D + s * D / 2 + i + 1) * cols,
                          out.begin() + (h * D + 2 * i + s) * cols);
    return out;
}

}  // namespace

size_t quantize_to_gguf(const std::string &folder, const std::string &out_path, const QuantizeOptions &o)
{
    int want = ck_qtype_from_name(o.type.c_str());
    if (want < 0) throw Error(ErrorKind::Usage, "--type " + o.type + " is not a format ckc writes");
    std::string config = is_directory(folder) ? folder + "/config.json" : folder;
    std::string dir = is_directory(folder) ? folder : config.substr(0, config.rfind('/') == std::string::npos ? 0 : config.rfind('/'));
    if (dir.empty()) dir = ".";
    ConfigReader top = ConfigReader::load(config);
    LanguageModelOf lm = language_model_of(top);  // a multimodal model: its language model's config and tensors
    const ConfigReader &r = lm.text;
    LlmConfig c = parse_hf_config(r);
    const GgufArch *arch = gguf_arch_for_model_type(c.model_type);
    if (!arch)
        input_error(fmt::format("{}: model_type \"{}\" has no GGUF writer yet (ckc writes: {})", config, c.model_type,
                                join(gguf_arch_names(), ", ")));
    if (c.rope.type != "default" && c.rope.type != "linear")
        input_error(fmt::format("{}: rope_scaling \"{}\" cannot be written to GGUF yet", config, c.rope.type));
    Program p = build_from_hf_config(config);
    if (p.has_block2()) {  // the key that made some layers dense
        auto only = r.int_list("mlp_only_layers", 0, c.n_layers - 1);
        r.fail(only && !only->empty() ? "mlp_only_layers" : "decoder_sparse_step",
               fmt::format("gives some layers a dense MLP in place of the experts; llama.cpp's {} reads experts in "
                           "every layer, so no GGUF holds this model (compile the folder itself)", arch->arch));
    }

    GgufWriter w;
    const std::string a = arch->arch;
    w.set_str("general.architecture", a);
    const auto &name = top.raw().contains("_name_or_path") ? top.raw()["_name_or_path"] : nlohmann::json();
    w.set_str("general.name", name.is_string() ? name.get<std::string>() : folder);
    w.set_u32("general.file_type", static_cast<uint32_t>(ck_qtype_traits_of(want)->gguf_file_type));
    w.set_u32("general.quantization_version", 2);
    w.set_str("general.quantized_by", std::string("ckc ") + CKC_VERSION);
    w.set_u32(a + ".context_length", static_cast<uint32_t>(c.context_length));
    w.set_u32(a + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
    w.set_u32(a + ".block_count", static_cast<uint32_t>(c.n_layers));
    w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
    w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    w.set_f32(a + (arch->layer_norm ? ".attention.layer_norm_epsilon" : ".attention.layer_norm_rms_epsilon"),
              static_cast<float>(c.norm_eps));
    if (c.rope.rot_dim > 0) {
        w.set_f32(a + ".rope.freq_base", static_cast<float>(c.rope.theta));
        w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(c.rope.rot_dim));
    }
    // always written (as llama.cpp's converter does for Gemma): a reader's default differs by family (llama.cpp:
    // n_embd / n_head; transformers' Gemma configs: 256), so a file without it is read two ways
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
    if (c.rope.type == "linear") {
        w.set_str(a + ".rope.scaling.type", "linear");
        w.set_f32(a + ".rope.scaling.factor", static_cast<float>(c.rope.factor));
    }
    w.set_u32(a + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
    if (arch->write_extra) {
        GgufMeta extra;
        arch->write_extra(r, c, extra);
        for (const GgufMetaNumber &m : extra)
            if (m.u32)
                w.set_u32(m.key, static_cast<uint32_t>(m.value));
            else
                w.set_f32(m.key, static_cast<float>(m.value));
    }
    if (c.model_type == "mistral" && r.has("sliding_window") && !r.is_null("sliding_window") && o.progress_notes)
        *o.progress_notes << fmt::format("ckc: note: {}: sliding_window {} has no GGUF key in the llama architecture "
                                         "llama.cpp uses for Mistral; the file attends to the whole context "
                                         "(the same as the model below {} tokens)\n",
                                         config, r.positive_int("sliding_window"), r.positive_int("sliding_window"));
    // the tokenizer beside the weights (tokenizer.json / tokenizer.model), as llama.cpp's converter writes it;
    // without one, llama.cpp runs on token ids with a vocabulary of placeholders
    {
        char err[512] = "";
        ck_tokenizer *tok = ck_tokenizer_load(dir.c_str(), err, sizeof err);
        if (tok) {
            std::vector<std::string> notes;
            try {
                notes = write_gguf_tokenizer(tok, w, dir);
            } catch (...) {
                ck_tokenizer_free(tok);
                throw;
            }
            if (ck_tokenizer_vocab_size(tok) > c.vocab_size)
                notes.push_back(fmt::format("{}: the tokenizer has {} tokens, the model's vocab_size is {}", dir,
                                            ck_tokenizer_vocab_size(tok), c.vocab_size));
            ck_tokenizer_free(tok);
            if (o.progress_notes)
                for (const auto &n : notes) *o.progress_notes << "ckc: note: " << n << "\n";
        } else if (std::string(err).find("no tokenizer") != std::string::npos) {
            w.set_str("tokenizer.ggml.model", "none");
            if (o.progress_notes)
                *o.progress_notes << "ckc: note: no tokenizer beside the weights: the GGUF holds none (token ids only)\n";
        } else {
            input_error(std::string("the tokenizer: ") + err);
        }
    }

    CheckpointFile ck(dir);  // after the metadata: a config GGUF cannot hold is refused before any weight is read
    ck_checkpoint_set_optional_prefix(ck.ck, p.info.optional_prefix.c_str());

    // every checkpoint tensor the model reads, once (tied embeddings appear under one name)
    struct Item { std::string hf, gg; Shape shape; bool transposed; bool block; int64_t experts; };
    std::map<std::string, Item> items;
    for (Section s : p.sections())
        for (const auto &[name, t] : p.section(s).tensors()) {
            if (t.storage != Storage::Weight) continue;
            for (size_t i = 0; i < t.source.parts.size(); i++) {
                const std::string &part = t.source.parts[i];
                std::string gg = gguf_tensor_name(*arch, starts_with(part, lm.prefix) ? part.substr(lm.prefix.size()) : part);
                if (gg.empty()) internal_error("quantize: no GGUF name for " + t.source.parts[i]);
                bool experts = t.source.parts[i].find("{E}") != std::string::npos;  // one tensor each -> stacked
                items[gg] = {t.source.parts[i], gg, t.source.part_shapes[i], t.source.transposed, s == Section::Block,
                             experts ? t.shape[0] : 0};
            }
        }
    std::vector<std::pair<std::string, const Item *>> order;  // llama.cpp's order: globals, then block by block
    for (const auto &[gg, it] : items)
        if (!it.block) order.push_back({gg, &it});
    for (int64_t l = 0; l < c.n_layers; l++)
        for (const auto &[gg, it] : items)
            if (it.block) order.push_back({replace_all(gg, "{L}", std::to_string(l)), &it});

    size_t done = 0;
    ck_weight_store store{};
    for (const auto &[gg_name, it] : order) {
        int64_t layer = -1;
        if (it->block) layer = std::stoll(gg_name.substr(4, gg_name.find('.', 4) - 4));
        // float32 of the tensor (a mixture's experts: each expert's, stacked [experts, rows, K])
        const Item *item = it;  // (a structured binding cannot be captured before C++20)
        auto load = [&, item](const std::string &hf_template) {
            std::string hf_name = replace_all(replace_all(hf_template, "%", "%%"), "{L}", "%d");
            ck_weight_spec spec{};
            spec.field = 0;
            spec.n_parts = 1;
            spec.names[0] = hf_name.c_str();
            spec.ndim = static_cast<int>(item->shape.size());
            for (size_t d = 0; d < item->shape.size(); d++) spec.shape[0][d] = item->shape[d];
            spec.transpose = item->transposed ? 1 : 0;
            spec.format = CK_WEIGHT_FLOAT;
            const float *f = nullptr;
            char err[1024] = "";
            if (ck_weights_load(ck.ck, &spec, static_cast<int>(layer), &f, &store, err, sizeof err)) input_error(err);
            return f;
        };
        Shape shape = it->shape;
        if (it->transposed) shape = {shape[1], shape[0]};
        std::vector<float> stacked;
        const float *f = nullptr;
        if (it->experts) {
            int64_t n = shape[0] * shape[1];
            stacked.resize(static_cast<size_t>(it->experts * n));
            for (int64_t e = 0; e < it->experts; e++) {
                const float *fe = load(replace_all(it->hf, "{E}", std::to_string(e)));
                std::copy(fe, fe + n, stacked.begin() + e * n);
            }
            shape.insert(shape.begin(), it->experts);
            f = stacked.data();
        } else {
            f = load(it->hf);
        }
        std::vector<float> changed;
        bool is_q = ends_with(it->hf, "q_proj.weight"), is_k = ends_with(it->hf, "k_proj.weight");
        if (arch->permuted_qk && (is_q || is_k)) {
            changed = permute_rows(f, shape[0], shape[1], is_q ? c.n_heads : c.n_kv_heads);
            f = changed.data();
        }
        if (arch->norm_plus_one && shape.size() == 1 && ends_with(it->hf, "norm.weight")) {  // Gemma's 1 + w
            changed.assign(f, f + shape[0]);
            for (float &v : changed) v += 1.0f;
            f = changed.data();
        }
        int64_t K = shape.back(), rows = 1;
        for (size_t d = 0; d + 1 < shape.size(); d++) rows *= shape[d];
        // matrices in the format; vectors and GPT-2's learned positions (added, not multiplied) in f32
        int type = shape.size() >= 2 && gg_name != "position_embd.weight" ? ck_qtype_for_rows(want, K) : CK_Q_F32;
        size_t rb = ck_qtype_row_bytes(type, K);
        std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
        for (int64_t i = 0; i < rows * K; i++)  // (before quantizing: a block cannot hold them)
            if (!std::isfinite(f[i]))
                input_error(fmt::format("{}: tensor '{}' holds a non-finite value at element {}", dir,
                                        replace_all(it->hf, "{L}", std::to_string(layer)), i));
        for (int64_t row = 0; row < rows; row++)
            if (ck_quantize_row(type, f + row * K, data.data() + row * rb, K) != CK_OK)
                internal_error(fmt::format("quantize: {} rows of {} could not be written", ck_qtype_name(type), K));
        w.add_tensor(gg_name, shape, type, std::move(data));
        ck_weight_store_free(&store);
        store = ck_weight_store{};
        if (o.progress)
            *o.progress << fmt::format("\rckc quantize: {}/{} {} -> {}        ", ++done, order.size(), gg_name,
                                       ck_qtype_name(type))
                        << std::flush;
    }
    if (o.progress) *o.progress << "\n";
    AtomicFiles files;
    files.add(out_path, w.bytes());
    files.commit();
    return order.size();
}

}  // namespace ckc
