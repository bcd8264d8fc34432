// Config parser: defaults from the Hugging Face classes, and one test per
// error class, each checking the message names the key.
#include "helpers.h"

#include "frontend/hf/config.h"

using namespace ckc;
using namespace ckc_test;
using Catch::Matchers::Contains;

static LlmConfig parse(const nlohmann::json &j)
{
    TempFile f(j.dump());
    return parse_hf_config(ConfigReader::load(f.path));
}

TEST_CASE("llama config: values are read", "[config]")
{
    LlmConfig c = parse(tiny_llama());
    CHECK(c.vocab_size == 256);
    CHECK(c.hidden_size == 64);
    CHECK(c.intermediate_size == 172);
    CHECK(c.n_layers == 2);
    CHECK(c.n_heads == 4);
    CHECK(c.n_kv_heads == 2);
    CHECK(c.head_dim == 16);
    CHECK(c.context_length == 128);
    CHECK(c.norm_eps == Approx(1e-5));
    CHECK(c.rope.type == "default");
    CHECK(c.rope.rot_dim == 16);
}

TEST_CASE("llama config: missing keys take LlamaConfig's defaults", "[config]")
{
    LlmConfig c = parse({{"model_type", "llama"}});
    CHECK(c.vocab_size == 32000);
    CHECK(c.hidden_size == 4096);
    CHECK(c.intermediate_size == 11008);
    CHECK(c.n_layers == 32);
    CHECK(c.n_heads == 32);
    CHECK(c.n_kv_heads == 32);  // num_key_value_heads defaults to num_attention_heads
    CHECK(c.head_dim == 128);   // hidden_size / num_attention_heads
    CHECK(c.context_length == 2048);
    CHECK(c.norm_eps == Approx(1e-6));
    CHECK(c.rope.theta == Approx(10000.0));
    CHECK_FALSE(c.tie_word_embeddings);  // LlamaConfig(tie_word_embeddings=False)
    CHECK_FALSE(c.attention_bias);
    CHECK_FALSE(c.mlp_bias);
}

TEST_CASE("llama config: null means default, as in Hugging Face", "[config]")
{
    LlmConfig c = parse(tiny_llama({{"num_key_value_heads", nullptr}, {"head_dim", nullptr}, {"rope_scaling", nullptr}}));
    CHECK(c.n_kv_heads == 4);
    CHECK(c.head_dim == 16);
    CHECK(c.rope.type == "default");
}

TEST_CASE("llama config: explicit head_dim need not divide hidden_size", "[config]")
{
    LlmConfig c = parse(tiny_llama({{"hidden_size", 60}, {"head_dim", 32}}));
    CHECK(c.head_dim == 32);
}

TEST_CASE("llama config: rope_scaling llama3 and linear", "[config]")
{
    LlmConfig c = parse(tiny_llama({{"rope_theta", 500000.0},
                                    {"rope_scaling",
                                     {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}}}}));
    CHECK(c.rope.type == "llama3");
    CHECK(c.rope.theta == Approx(500000.0));
    CHECK(c.rope.factor == Approx(8.0));
    CHECK(c.rope.original_max_position_embeddings == Approx(64));
    LlmConfig l = parse(tiny_llama({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}));
    CHECK(l.rope.type == "linear");
    CHECK(l.rope.factor == Approx(2.0));
}

TEST_CASE("config errors name the file and the key", "[config][errors]")
{
    SECTION("not JSON: line and column")
    {
        std::string msg = build_error("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,,\n}");
        CHECK_THAT(msg, Contains(":3:"));
        CHECK_THAT(msg, Contains("not valid JSON"));
    }
    SECTION("top level not an object") { CHECK_THAT(build_error("[1, 2]"), Contains("JSON object")); }
    SECTION("missing model_type lists the supported ones")
    {
        std::string msg = build_error(tiny_llama({{"model_type", "<delete>"}}).dump());
        CHECK_THAT(msg, Contains("\"model_type\""));
        CHECK_THAT(msg, Contains("llama"));
    }
    SECTION("unsupported model_type lists the supported ones")
    {
        std::string msg = build_error(tiny_llama({{"model_type", "bert"}}).dump());
        CHECK_THAT(msg, Contains("\"bert\" is not supported; supported: llama"));  // nothing close: no guess
        CHECK_THAT(build_error(tiny_llama({{"model_type", "qwen"}}).dump()),
                   Contains("\"qwen\" is not supported (did you mean 'qwen2'?)"));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "Gemma-2"}}).dump()), Contains("(did you mean 'gemma2'?)"));
    }
    SECTION("non-number")
    {
        CHECK_THAT(build_error(tiny_llama({{"hidden_size", "64"}}).dump()), Contains("\"hidden_size\": must be an integer"));
        CHECK_THAT(build_error(tiny_llama({{"rms_norm_eps", "small"}}).dump()), Contains("\"rms_norm_eps\": must be a number"));
        CHECK_THAT(build_error(tiny_llama({{"num_hidden_layers", true}}).dump()), Contains("\"num_hidden_layers\""));
        CHECK_THAT(build_error(tiny_llama({{"vocab_size", 12.5}}).dump()), Contains("\"vocab_size\": must be an integer"));
    }
    SECTION("zero and negative sizes")
    {
        CHECK_THAT(build_error(tiny_llama({{"num_hidden_layers", 0}}).dump()), Contains("\"num_hidden_layers\": must be a positive integer"));
        CHECK_THAT(build_error(tiny_llama({{"hidden_size", -64}}).dump()), Contains("\"hidden_size\": must not be negative"));
        CHECK_THAT(build_error(tiny_llama({{"rms_norm_eps", 0}}).dump()), Contains("\"rms_norm_eps\": must be positive"));
        CHECK_THAT(build_error(tiny_llama({{"rope_theta", -1.0}}).dump()), Contains("\"rope_theta\""));
    }
    SECTION("heads must divide hidden_size when head_dim is absent")
    {
        std::string msg = build_error(tiny_llama({{"num_attention_heads", 5}, {"num_key_value_heads", 5}}).dump());
        CHECK_THAT(msg, Contains("\"num_attention_heads\""));
        CHECK_THAT(msg, Contains("does not divide hidden_size 64"));
    }
    SECTION("kv heads must divide heads")
    {
        CHECK_THAT(build_error(tiny_llama({{"num_key_value_heads", 3}}).dump()), Contains("\"num_key_value_heads\""));
    }
    SECTION("unsupported rope scaling and incomplete llama3 parameters")
    {
        CHECK_THAT(build_error(tiny_llama({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}).dump()),
                   Contains("\"rope_scaling.rope_type\": \"yarn\" is not supported"));
        CHECK_THAT(build_error(tiny_llama({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}).dump()),
                   Contains("\"rope_scaling.low_freq_factor\": is required"));
        CHECK_THAT(build_error(tiny_llama({{"rope_scaling", "llama3"}}).dump()), Contains("\"rope_scaling\": must be an object"));
    }
    SECTION("unsupported activation")
    {
        CHECK_THAT(build_error(tiny_llama({{"hidden_act", "relu"}}).dump()), Contains("\"hidden_act\": \"relu\" is not supported"));
    }
    SECTION("head_dim above the kernel limit")
    {
        CHECK_THAT(build_error(tiny_llama({{"head_dim", 1024}}).dump()), Contains("\"head_dim\""));
    }
    SECTION("the file name is in the message")
    {
        TempFile f(tiny_llama({{"hidden_size", 0}}).dump());
        try {
            build_from_hf_config(f.path);
            FAIL("no error");
        } catch (const Error &e) {
            CHECK_THAT(e.what(), Contains(f.path));
        }
    }
}

TEST_CASE("a missing config file is an I/O error", "[config][errors]")
{
    try {
        build_from_hf_config("/nonexistent/config.json");
        FAIL("no error");
    } catch (const Error &e) {
        CHECK(e.kind() == ErrorKind::IO);
        CHECK_THAT(e.what(), Contains("/nonexistent/config.json"));
    }
}

// ---- the other families: class defaults and the keys that differ ------------------

static Program program_from(const nlohmann::json &j) { return program_of(j); }

TEST_CASE("config errors point at the key: file:line:col, the line, a caret", "[config]")
{
    // one key per line, as HF writes config.json
    std::string text = "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,\n  \"num_attention_heads\": 4,\n"
                       "  \"head_dim\": 1024,\n  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -2}\n}\n";
    std::string msg = build_error(text);
    CHECK_THAT(msg, Contains(":6:43: key \"rope_scaling.factor\": must be positive, got -2\n"
                             "      \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -2}\n" +
                             std::string(4 + 42, ' ') + "^~~~~~~~"));
    text.replace(text.find("-2"), 2, "2");
    CHECK_THAT(build_error(text), Contains(":5:3: key \"head_dim\": 1024 is larger than the attention kernel supports "
                                           "(512)\n      \"head_dim\": 1024,\n      ^~~~~~~~~~"));
    CHECK_THAT(build_error("{\n  \"model_type\": \"llama\" \"x\": 1\n}"),
               Contains(":2:27: not valid JSON: syntax error"));  // where the JSON parser stopped
}

TEST_CASE("families: every supported model_type is listed in errors", "[config][families]")
{
    std::string msg = build_error(tiny_llama({{"model_type", "falcon"}}).dump());
    for (const char *t : {"llama", "mistral", "qwen2", "qwen3", "gpt2", "phi3", "gemma", "phi", "gemma2", "olmo2",
                          "smollm3", "gemma3_text", "qwen3_moe", "mixtral", "olmoe"})
        CHECK_THAT(msg, Contains(t));
}

TEST_CASE("families: Hugging Face class defaults", "[config][families]")
{
    SECTION("mistral: 8 KV heads, window 4096 unless null")
    {
        LlmConfig c = parse({{"model_type", "mistral"}});
        CHECK(c.n_kv_heads == 8);
        CHECK(c.intermediate_size == 14336);
        CHECK(c.context_length == 131072);
        Program p = program_from(tiny_llama({{"model_type", "mistral"}}));
        CHECK(p.block.node("attn")->i("window") == 4096);
        Program q = program_from(tiny_llama({{"model_type", "mistral"}, {"sliding_window", nullptr}}));
        CHECK(q.block.node("attn")->i("window") == 0);
    }
    SECTION("qwen2: big vocab; biases on q/k/v but not o_proj; windows per layer")
    {
        CHECK(parse({{"model_type", "qwen2"}}).vocab_size == 151936);
        Program p = program_from(tiny_llama({{"model_type", "qwen2"}}));
        CHECK(p.block.has_tensor("self_attn.q_proj.bias"));
        CHECK_FALSE(p.block.has_tensor("self_attn.o_proj.bias"));
        CHECK(p.block.node("attn")->i("window") == 0);  // use_sliding_window defaults to false
        Program w = program_from(tiny_llama({{"model_type", "qwen2"}, {"num_hidden_layers", 3}, {"use_sliding_window", true},
                                             {"sliding_window", 7}, {"max_window_layers", 1}}));
        CHECK(w.block.node("attn")->table("window") == "window");
        CHECK(w.layer_tables.at("window").values == std::vector<double>{0, 7, 7});
    }
    SECTION("qwen3: head_dim 128 apart from hidden / heads; per-head q/k RMSNorm before RoPE; no biases unless "
            "attention_bias (then o_proj's too)")
    {
        LlmConfig c = parse({{"model_type", "qwen3"}, {"hidden_size", 1024}, {"num_attention_heads", 16},
                             {"num_key_value_heads", 8}});
        CHECK(c.head_dim == 128);
        CHECK(c.vocab_size == 151936);
        Program p = program_from(tiny_llama({{"model_type", "qwen3"}, {"head_dim", 32}}));
        const Node *qn = p.block.node("q_normed");
        REQUIRE(qn);
        CHECK(qn->op == Op::RMSNORM);
        CHECK(qn->i("group") == 32);
        CHECK(p.block.tensor(qn->inputs[1]).shape == Shape{32});
        CHECK(p.block.node("q_rope")->inputs[0] == "q_normed");
        CHECK(p.block.node("k_normed")->i("group") == 32);
        CHECK_FALSE(p.block.has_tensor("self_attn.q_proj.bias"));
        Program b = program_from(tiny_llama({{"model_type", "qwen3"}, {"attention_bias", true}}));
        CHECK(b.block.has_tensor("self_attn.q_proj.bias"));
        CHECK(b.block.has_tensor("self_attn.o_proj.bias"));
    }
    SECTION("olmo2: no norm before the sublayers, one after each; q/k RMSNorm over their whole width")
    {
        LlmConfig c = parse({{"model_type", "olmo2"}});
        CHECK(c.vocab_size == 50304);
        CHECK(c.norm_eps == 1e-5);
        Program p = program_from(tiny_llama({{"model_type", "olmo2"}}));
        CHECK_FALSE(p.block.has_tensor("input_layernorm.weight"));
        CHECK(p.block.has_tensor("post_feedforward_layernorm.weight"));
        const Node *qn = p.block.node("q_normed");
        REQUIRE(qn);
        CHECK_FALSE(qn->has("group"));
        CHECK(p.block.tensor(qn->inputs[1]).shape == Shape{64});  // heads x head_dim
        CHECK(p.block.tensor(p.block.node("k_normed")->inputs[1]).shape == Shape{32});  // kv_heads x head_dim
        CHECK(p.block.node("attn_normed")->inputs[0] == "attn_out");
    }
    SECTION("smollm3: no RoPE in every 4th layer (or per no_rope_layers); theta 2e6; windows on the NoPE layers")
    {
        LlmConfig c = parse({{"model_type", "smollm3"}});
        CHECK(c.rope.theta == 2e6);
        CHECK(c.tie_word_embeddings);
        Program p = program_from(tiny_llama({{"model_type", "smollm3"}, {"num_hidden_layers", 8}}));
        const Node *q = p.block.node("q_rope");
        REQUIRE(q);
        CHECK(q->table("rotated") == "rope_dims");
        CHECK(p.block.node("k_rope")->table("rotated") == "rope_dims");
        CHECK(p.layer_tables.at("rope_dims").values == std::vector<double>{16, 16, 16, 0, 16, 16, 16, 0});
        CHECK(p.block.node("attn")->i("window") == 0);
        Program w = program_from(tiny_llama({{"model_type", "smollm3"}, {"num_hidden_layers", 3},
                                             {"no_rope_layers", {0, 1, 0}}, {"use_sliding_window", true},
                                             {"sliding_window", 5}}));
        CHECK(w.layer_tables.at("rope_dims").values == std::vector<double>{0, 16, 0});
        CHECK(w.layer_tables.at("window").values == std::vector<double>{5, 0, 5});
        Program all = program_from(tiny_llama({{"model_type", "smollm3"}, {"no_rope_layers", {1, 1}}}));
        CHECK_FALSE(all.block.node("q_rope")->has("rotated"));  // every layer rotates: no table
        Program none = program_from(tiny_llama({{"model_type", "smollm3"}, {"no_rope_layers", {0, 0}}}));
        CHECK_FALSE(none.block.node("q_rope"));  // no layer rotates: no ROPE node
        CHECK_THAT(build_error(tiny_llama({{"model_type", "smollm3"}, {"no_rope_layers", {1, 1, 0}}}).dump()),
                   Contains("key \"no_rope_layers\": has 3 entries for 2 layers"));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "smollm3"}, {"no_rope_layers", {1, 2}}}).dump()),
                   Contains("key \"no_rope_layers\": has the element 2; each must be in [0, 1]"));
    }
    SECTION("gemma3_text: 5 local layers to 1 global, each kind its RoPE; q/k norms (1 + w) per head")
    {
        LlmConfig c = parse({{"model_type", "gemma3_text"}});
        CHECK(c.rope.theta == 1e6);  // the global layers'
        CHECK(c.vocab_size == 262208);
        CHECK(c.hidden_act == "gelu_tanh");
        auto gemma3 = [](nlohmann::json more) {
            nlohmann::json j = tiny_llama({{"model_type", "gemma3_text"}, {"num_hidden_layers", 7}, {"head_dim", 16}});
            for (auto &[k, v] : more.items()) j[k] = v;
            return program_from(j);
        };
        Program p = gemma3({{"sliding_window", 8}});
        CHECK(p.layer_tables.at("window").values == std::vector<double>{8, 8, 8, 8, 8, 0, 8});
        CHECK(p.layer_tables.at("rope_theta").values == std::vector<double>{1e4, 1e4, 1e4, 1e4, 1e4, 1e6, 1e4});
        CHECK_FALSE(p.layer_tables.count("rope_factor"));
        const Node *q = p.block.node("q_rope");
        REQUIRE(q);
        CHECK(q->table("theta") == "rope_theta");
        CHECK(q->s("rope_type") == "default");
        CHECK(p.block.node("q_normed")->i("group") == 16);
        CHECK(p.block.node("q_normed")->f("w_offset") == 1.0);
        CHECK(p.block.node("attn")->f("softcap") == 0.0);  // Gemma3Attention ignores attn_logit_softcapping
        CHECK_FALSE(p.footer.node("logits")->op == Op::SOFTCAP);
        // linear scaling on the global layers: the local ones are linear x1 (the default, exactly)
        Program s = gemma3({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}, {"sliding_window_pattern", 3},
                            {"rope_local_base_freq", 5e3}, {"attn_logit_softcapping", 50.0}});
        CHECK(s.block.node("q_rope")->s("rope_type") == "linear");
        CHECK(s.layer_tables.at("rope_factor").values == std::vector<double>{1, 1, 8, 1, 1, 8, 1});
        CHECK(s.layer_tables.at("rope_theta").values == std::vector<double>{5e3, 5e3, 1e6, 5e3, 5e3, 1e6, 5e3});
        CHECK(s.block.node("attn")->f("softcap") == 0.0);
        REQUIRE_FALSE(s.info.notes.empty());
        CHECK_THAT(s.info.notes.back(), Contains("attn_logit_softcapping is set, but Gemma 3's attention does not"));
        // transformers 5's rope_parameters per layer type
        Program n = gemma3({{"rope_parameters", {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 2e4}}},
                                                 {"full_attention", {{"rope_type", "default"}, {"rope_theta", 3e5}}}}}});
        CHECK(n.layer_tables.at("rope_theta").values == std::vector<double>{2e4, 2e4, 2e4, 2e4, 2e4, 3e5, 2e4});
        CHECK_THAT(build_error(tiny_llama({{"model_type", "gemma3_text"}, {"use_bidirectional_attention", true}}).dump()),
                   Contains("key \"use_bidirectional_attention\": is true"));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "gemma3_text"}, {"layer_types", {"full_attention"}}}).dump()),
                   Contains("key \"layer_types\": has 1 entries for 2 layers"));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "gemma3_text"},
                                           {"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}}}}}}).dump()),
                   Contains("key \"rope_parameters.full_attention.rope_type\": \"yarn\" is not supported"));
    }
    SECTION("gemma3: the multimodal config's language model (text_config), its tensors under language_model.")
    {
        nlohmann::json text = tiny_llama({{"num_hidden_layers", 7}, {"head_dim", 16}, {"sliding_window", 8}});
        text.erase("model_type");  // as Gemma3Config saves it: text_config's model_type may be absent
        Program p = program_from({{"model_type", "gemma3"}, {"text_config", text}, {"vision_config", {{"hidden_size", 8}}}});
        CHECK(p.info.family == "gemma3_text");
        CHECK(p.layer_tables.at("window").values == std::vector<double>{8, 8, 8, 8, 8, 0, 8});
        CHECK(p.info.optional_prefix == "language_model.");
        bool prefixed = false;
        for (const auto &[name, t] : p.block.tensors())
            if (t.storage == Storage::Weight) {
                CHECK(t.source.parts[0].rfind("language_model.model.layers.", 0) == 0);
                prefixed = true;
            }
        CHECK(prefixed);
        CHECK_THAT(p.info.notes.back(), Contains("the vision tower is not read"));
        // the wrapper's tie_word_embeddings decides; an untied head is the wrapper's own lm_head
        Program untied = program_from({{"model_type", "gemma3"}, {"text_config", text}, {"tie_word_embeddings", false}});
        bool head = false;
        for (const auto &[name, t] : untied.footer.tensors())
            if (t.storage == Storage::Weight && t.source.parts[0] == "lm_head.weight") head = true;
        CHECK(head);
        text["model_type"] = "llama";
        CHECK_THAT(build_error(nlohmann::json{{"model_type", "gemma3"}, {"text_config", text}}.dump()),
                   Contains("key \"text_config.model_type\": is \"llama\"; a gemma3 model's language model is gemma3_text"));
        text["model_type"] = "gemma3_text";
        text["num_attention_heads"] = -1;
        CHECK_THAT(build_error(nlohmann::json{{"model_type", "gemma3"}, {"text_config", text}}.dump()),
                   Contains("key \"text_config.num_attention_heads\""));
    }
    SECTION("qwen3_moe: a router and a mixture of experts in place of the MLP; the keys that would break it")
    {
        auto moe = [](nlohmann::json more) {
            nlohmann::json j = tiny_llama({{"model_type", "qwen3_moe"}, {"num_experts", 8}, {"num_experts_per_tok", 2},
                                           {"moe_intermediate_size", 32}});
            for (auto &[k, v] : more.items()) {
                if (v.is_string() && v.get<std::string>() == "<delete>") j.erase(k);
                else j[k] = v;
            }
            return j;
        };
        Program p = program_from(moe({}));
        const Node *route = p.block.node("route");
        REQUIRE(route);
        CHECK(route->op == Op::MOE_ROUTE);
        CHECK(route->i("top_k") == 2);
        CHECK(route->i("norm_topk") == 0);  // norm_topk_prob's default
        const Node *ex = p.block.node("moe_out");
        REQUIRE(ex);
        CHECK(ex->op == Op::MOE_EXPERTS);
        CHECK(p.block.tensor(ex->inputs[2]).shape == Shape{8, 32, 64});
        CHECK(p.block.tensor(ex->inputs[4]).shape == Shape{8, 64, 32});
        CHECK(p.block.tensor(ex->inputs[2]).source.parts[0] == "model.layers.{L}.mlp.experts.{E}.gate_proj.weight");
        CHECK(p.block.tensor(p.block.node("router_logits")->inputs[1]).shape == Shape{8, 64});
        CHECK_FALSE(p.block.has_tensor("mlp.gate_proj.weight"));
        // transformers 5 writes num_local_experts
        Program l = program_from(moe({{"num_experts", "<delete>"}, {"num_local_experts", 4}, {"norm_topk_prob", true}}));
        CHECK(l.block.tensor(l.block.node("moe_out")->inputs[2]).shape[0] == 4);
        CHECK(l.block.node("route")->i("norm_topk") == 1);
        CHECK_THAT(build_error(moe({{"num_experts_per_tok", 9}}).dump()),
                   Contains("key \"num_experts_per_tok\": 9 is more than the 8 experts"));
        // dense layers between the sparse ones (Qwen3MoeDecoderLayer): experts where (i + 1) % decoder_sparse_step
        // == 0 and i is not in mlp_only_layers; the dense layers are the program's second block
        Program step = program_from(moe({{"decoder_sparse_step", 2}}));
        CHECK(step.layer_kind == std::vector<int>{1, 0});
        CHECK(step.block.node("moe_out"));
        CHECK_FALSE(step.block2.node("moe_out"));
        REQUIRE(step.block2.has_tensor("mlp.gate_proj.weight"));
        CHECK(step.block2.tensor("mlp.gate_proj.weight").shape == Shape{172, 64});  // intermediate_size
        CHECK(step.block2.tensor("self_attn.q_proj.weight").source.parts ==
              step.block.tensor("self_attn.q_proj.weight").source.parts);
        CHECK(step.runs_of(Section::Block) == 1);
        CHECK(step.runs_of(Section::Block2) == 1);
        CHECK(step.sections().size() == 4);
        CHECK_THAT(step.info.summary, Contains("a dense MLP (width 172) in layer 0"));
        Program only = program_from(moe({{"mlp_only_layers", {1}}}));
        CHECK(only.layer_kind == std::vector<int>{0, 1});
        // every layer dense (a step past the last layer, or all listed): one block, no experts
        for (const auto &dense : {moe({{"decoder_sparse_step", 3}}), moe({{"mlp_only_layers", {0, 1}}})}) {
            Program d = program_from(dense);
            CHECK_FALSE(d.has_block2());
            CHECK(d.sections().size() == 3);
            CHECK_FALSE(d.block.node("moe_out"));
            CHECK(d.block.has_tensor("mlp.gate_proj.weight"));
        }
        CHECK_THAT(build_error(moe({{"mlp_only_layers", {2}}}).dump()), Contains("key \"mlp_only_layers\""));
        // the weights each layer reads, once per layer: 2 layers' attention, one mixture, one dense MLP
        WeightTotals all = weight_totals(step), sparse = weight_totals(program_from(moe({})));
        CHECK(sparse.elements - all.elements == 3 * 8 * 32 * 64 + 8 * 64 - 3 * 172 * 64);
        CHECK_THAT(build_error(moe({{"num_experts", 1000}}).dump()),
                   Contains("key \"num_experts\": 1000 experts is above ckc's limit of 512"));
    }
    SECTION("mixtral and olmoe: their mixtures' names and choices")
    {
        Program m = program_from(tiny_llama({{"model_type", "mixtral"}}));
        const Node *ex = m.block.node("moe_out");
        REQUIRE(ex);
        CHECK(m.block.tensor(ex->inputs[2]).source.parts[0] == "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight");
        CHECK(m.block.tensor(ex->inputs[3]).source.parts[0] == "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight");
        CHECK(m.block.tensor(ex->inputs[4]).source.parts[0] == "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight");
        CHECK(m.block.tensor(ex->inputs[2]).shape == Shape{8, 172, 64});  // 8 experts of intermediate_size
        CHECK(m.block.node("route")->i("norm_topk") == 1);
        CHECK(m.block.node("route")->i("top_k") == 2);
        CHECK_THAT(build_error(tiny_llama({{"model_type", "mixtral"}, {"norm_topk_prob", false}}).dump()),
                   Contains("key \"norm_topk_prob\": is false, but Mixtral always renormalizes"));
        Program o = program_from(tiny_llama({{"model_type", "olmoe"}, {"num_experts", 16}, {"num_experts_per_tok", 4}}));
        CHECK(o.block.node("route")->i("norm_topk") == 0);
        CHECK(o.block.tensor(o.block.node("q_normed")->inputs[1]).shape == Shape{64});  // the whole width
        CHECK_FALSE(o.block.node("q_clipped"));  // clip_qkv null (the default): no clamp
        Program clip = program_from(tiny_llama({{"model_type", "olmoe"}, {"clip_qkv", 8.0}}));
        for (const char *name : {"q_clipped", "k_clipped", "v_clipped"}) {
            const Node *n = clip.block.node(name);
            REQUIRE(n);
            CHECK(n->op == Op::CLAMP);
            CHECK(n->f("min") == -8.0);
            CHECK(n->f("max") == 8.0);
        }
        CHECK(clip.block.node("q_clipped")->inputs[0] == "q_normed");  // after the norm, before RoPE
        CHECK(clip.block.node("q_rope")->inputs[0] == "q_clipped");
        CHECK_THAT(build_error(tiny_llama({{"model_type", "olmoe"}, {"clip_qkv", -1.0}}).dump()),
                   Contains("key \"clip_qkv\": must be positive"));
    }
    SECTION("gemma: head_dim 256, tied, tanh GELU even when hidden_act says gelu")
    {
        LlmConfig c = parse({{"model_type", "gemma"}, {"hidden_act", "gelu"}});
        CHECK(c.head_dim == 256);
        CHECK(c.tie_word_embeddings);
        CHECK(c.hidden_act == "gelu_tanh");
        CHECK(parse({{"model_type", "gemma"}, {"hidden_activation", "gelu"}}).hidden_act == "gelu");
    }
    SECTION("gemma2: query_pre_attn_scalar scale, softcaps, alternating windows")
    {
        Program p = program_from(tiny_llama({{"model_type", "gemma2"}, {"head_dim", 16}, {"num_hidden_layers", 4},
                                             {"query_pre_attn_scalar", 64}, {"sliding_window", 9}}));
        const Node *a = p.block.node("attn");
        CHECK(a->f("scale") == Approx(0.125));
        CHECK(a->f("softcap") == Approx(50.0));
        CHECK(p.layer_tables.at("window").values == std::vector<double>{9, 0, 9, 0});
        CHECK(p.footer.node("logits")->op == Op::SOFTCAP);
        CHECK(p.footer.node("logits")->f("cap") == Approx(30.0));
    }
    SECTION("gpt2: its own keys; n_inner null means 4 * n_embd; tied by default")
    {
        LlmConfig c = parse({{"model_type", "gpt2"}, {"n_embd", 64}, {"n_head", 4}, {"n_inner", nullptr}});
        CHECK(c.intermediate_size == 256);
        CHECK(c.head_dim == 16);
        CHECK(c.tie_word_embeddings);
        CHECK(c.context_length == 1024);
        CHECK(parse({{"model_type", "gpt2"}}).vocab_size == 50257);
        CHECK_THAT(build_error(nlohmann::json({{"model_type", "gpt2"}, {"n_embd", 64}, {"n_head", 5}}).dump()),
                   Contains("\"n_head\""));
    }
    SECTION("phi: partial rotary 0.5 by default, LayerNorm eps key")
    {
        LlmConfig c = parse({{"model_type", "phi"}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"layer_norm_eps", 1e-4}});
        CHECK(c.rope.rot_dim == 8);
        CHECK(c.norm_eps == Approx(1e-4));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "phi"}, {"qk_layernorm", true}}).dump()), Contains("\"qk_layernorm\""));
        CHECK_THAT(build_error(tiny_llama({{"model_type", "phi"}, {"partial_rotary_factor", 0.1}}).dump()),
                   Contains("\"partial_rotary_factor\""));
    }
    SECTION("phi3: vocab 32064, no window unless given, longrope refused")
    {
        CHECK(parse({{"model_type", "phi3"}}).vocab_size == 32064);
        CHECK(program_from(tiny_llama({{"model_type", "phi3"}})).block.node("attn")->i("window") == 0);
        CHECK_THAT(build_error(tiny_llama({{"model_type", "phi3"},
                                           {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1.0}}}}}).dump()),
                   Contains("\"longrope\" is not supported"));
    }
}

TEST_CASE("families: GPT-2 Conv1D weights are loaded transposed", "[config][families]")
{
    Program p = program_from({{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4},
                              {"n_positions", 32}});
    const Tensor &w = p.block.tensor("mlp.c_fc.weight");
    CHECK(w.shape == Shape{256, 64});                  // nn.Linear layout for the GEMM
    CHECK(w.source.part_shapes[0] == Shape{64, 256});  // as GPT-2 stores it
    CHECK(w.source.transposed);
    CHECK(w.source.parts[0] == "transformer.h.{L}.mlp.c_fc.weight");
    CHECK(p.info.optional_prefix == "transformer.");
}
