// IR builder and Graph invariants.
#include "helpers.h"

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "codegen/emitters.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "support/util.h"

using namespace ckc;
using namespace ckc_test;
using Catch::Matchers::Contains;

static std::vector<std::string> ops_of(const Graph &g)
{
    std::vector<std::string> out;
    for (const Node &n : g.nodes()) out.push_back(op_name(n.op));
    return out;
}

TEST_CASE("llama builds header / block / footer with HF weight names", "[ir]")
{
    Program p = program_of(tiny_llama());
    CHECK(ops_of(p.header) == std::vector<std::string>{"EMBEDDING"});
    CHECK(ops_of(p.block) == std::vector<std::string>{"RMSNORM", "MATMUL", "MATMUL", "MATMUL", "ROPE", "ROPE",
                                                      "KV_STORE", "KV_ATTENTION", "MATMUL", "ADD", "RMSNORM", "MATMUL",
                                                      "MATMUL", "GLU", "MATMUL", "ADD"});
    CHECK(ops_of(p.footer) == std::vector<std::string>{"RMSNORM", "MATMUL"});
    CHECK(p.carry == "x");
    CHECK(p.carry_shape == Shape{kTokens, 64});

    const Tensor &wq = p.block.tensor("self_attn.q_proj.weight");
    CHECK(wq.storage == Storage::Weight);
    CHECK(wq.shape == Shape{64, 64});
    CHECK(wq.source.parts == std::vector<std::string>{"model.layers.{L}.self_attn.q_proj.weight"});
    CHECK(p.block.tensor("self_attn.k_proj.weight").shape == Shape{32, 64});  // GQA: 2 kv heads x 16
    CHECK(p.block.tensor("kv").shape == Shape{2, 2, kTokens, 16});
    CHECK(p.block.node("q_rope")->origin.module == "model.layers.{L}.self_attn.rotary_emb");
    CHECK(p.block.tensor("x").storage == Storage::Carry);
    CHECK(p.block.tensor("x_out").storage == Storage::Carry);
    CHECK(p.footer.tensor("logits").storage == Storage::Output);
    CHECK(p.footer.tensor("logits").shape == Shape{kTokens, 256});
    CHECK(p.footer.has_tensor("lm_head.weight"));  // untied by default
}

TEST_CASE("tied embeddings: the head reads the embedding table", "[ir]")
{
    Program p = program_of(tiny_llama({{"tie_word_embeddings", true}}));
    CHECK_FALSE(p.footer.has_tensor("lm_head.weight"));
    CHECK(p.footer.tensor("model.embed_tokens.weight").source.parts == std::vector<std::string>{"model.embed_tokens.weight"});
}

TEST_CASE("biases become ADD nodes with bias weights", "[ir]")
{
    Program p = program_of(tiny_llama({{"attention_bias", true}, {"mlp_bias", true}}));
    int adds = 0;
    for (const Node &n : p.block.nodes()) adds += n.op == Op::ADD;
    CHECK(adds == 4 + 3 + 2);  // q,k,v,o + gate,up,down + 2 residuals
    CHECK(p.block.tensor("self_attn.o_proj.bias").shape == Shape{64});
}

TEST_CASE("the block's code does not depend on the layer count", "[ir]")
{
    Program a = program_of(tiny_llama({{"num_hidden_layers", 2}}));
    Program b = program_of(tiny_llama({{"num_hidden_layers", 40}}));
    CHECK(a.block.nodes().size() == b.block.nodes().size());
    CHECK(b.info.n_layers == 40);
}

TEST_CASE("Graph verify catches broken IR", "[ir]")
{
    Program p = program_of(tiny_llama());
    Graph g = p.block;
    REQUIRE_NOTHROW(g.verify("ok"));
    SECTION("reading an unknown tensor")
    {
        g.set_input("attn_in", 0, "nope");
        CHECK_THROWS_WITH(g.verify("test"), Contains("'nope'"));
    }
    SECTION("a shape that disagrees with the op's rule")
    {
        g.tensor("attn_in").shape = {kTokens, 32};
        CHECK_THROWS_WITH(g.verify("test"), Contains("attn_in"));
    }
    SECTION("use before definition")
    {
        Graph h;
        Tensor x{"x", {kTokens, 4}, DType::F32, Storage::Carry, {}};
        h.add_tensor(x);
        Tensor w{"w", {4}, DType::F32, Storage::Weight, {}};
        h.add_tensor(w);
        Node a;
        a.name = "a";
        a.op = Op::ADD;
        a.inputs = {"x", "b"};
        a.output = "a";
        Node b;
        b.name = "b";
        b.op = Op::RMSNORM;
        b.inputs = {"x", "w"};
        b.output = "b";
        b.attrs["eps"] = 1e-5;
        h.add_node(b);
        h.insert_node(a, "b");  // a reads b before it exists
        CHECK_THROWS_WITH(h.verify("test"), Contains("before it is produced"));
    }
}

// The Graph's indices (producer, consumers, names, order) checked against a recomputation from the node list
// after every edit of a long random sequence: inserts before / after, removals, set_input, replace_uses.
TEST_CASE("Graph: the indices every edit keeps current agree with the nodes, edit after edit", "[ir]")
{
    Graph g;
    g.add_tensor(Tensor{"x", {4}, DType::F32, Storage::Input, {}});
    std::mt19937 rng(7);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    int made = 0;
    auto check = [&](int step) {
        INFO("after edit " << step);
        std::vector<const Node *> order = g.node_list();
        REQUIRE(order.size() == g.nodes().size());
        std::map<std::string, std::vector<std::string>> readers;
        for (size_t i = 0; i < order.size(); i++) {
            const Node &n = *order[i];
            CHECK(g.node(n.name) == &n);
            CHECK(g.producer(n.output) == &n);
            CHECK(g.node_index(n.name) == static_cast<int>(i));
            if (i) CHECK(g.runs_before(order[i - 1]->name, n.name));
            CHECK(g.next_node(n.name) == (i + 1 < order.size() ? order[i + 1]->name : ""));
            std::set<std::string> seen;
            for (const auto &in : n.inputs)
                if (seen.insert(in).second) readers[in].push_back(n.name);
        }
        for (const auto &[name, t] : g.tensors()) {
            std::vector<std::string> got;
            for (const Node *c : g.consumers(name)) got.push_back(c->name);
            CHECK(got == readers[name]);  // in execution order, each reading node once
        }
        REQUIRE_NOTHROW(g.verify("random edits"));
    };
    // a node reading up to two tensors produced before `before` (or anything when appending)
    auto fresh = [&](const std::string &before) {
        std::vector<std::string> avail = {"x"};
        for (const Node &n : g.nodes()) {
            if (n.name == before) break;
            avail.push_back(n.output);
        }
        Node n;
        n.name = n.output = "n" + std::to_string(made++);
        n.op = Op::ADD;
        n.inputs = {avail[pick(avail.size())], avail[pick(avail.size())]};
        return n;
    };
    for (int step = 0; step < 600; step++) {
        std::vector<const Node *> order = g.node_list();
        size_t what = order.size() < 8 ? 0 : pick(6);
        if (what <= 1) {  // insert: appended, or before / after a node (many in one place: the keys re-spread)
            std::string at = order.empty() || what == 0 ? "" : order[order.size() / 2]->name;
            g.insert_node(fresh(at), at);
        } else if (what == 2) {
            const Node &last = *order[pick(order.size())];
            std::string next = g.next_node(last.name);
            g.insert_after(fresh(next), last.name);
        } else if (what == 3) {  // remove a node nobody reads
            for (auto it = order.rbegin(); it != order.rend(); ++it)
                if (g.consumers((*it)->output).empty() && !g.is_output((*it)->output)) {
                    std::string name = (*it)->name, out = (*it)->output;
                    g.remove_node(name);
                    g.remove_tensor(out);
                    break;
                }
        } else if (what == 4) {  // one input of a node now reads x
            const Node &n = *order[pick(order.size())];
            g.set_input(n.name, pick(n.inputs.size()), "x");
        } else {  // every reader of a node's output reads an earlier value instead
            const Node &n = *order[1 + pick(order.size() - 1)];
            std::string older = order[pick(static_cast<size_t>(g.node_index(n.name)))]->output;
            g.replace_uses(n.output, older);
        }
        check(step);
    }
    // 100 insertions before the first node: the order keys run out of room there and are spread out again
    for (int k = 0; k < 100; k++) {
        Node n;
        n.name = n.output = "front" + std::to_string(k);
        n.op = Op::NEG;
        n.inputs = {"x"};
        g.insert_node(n, g.nodes().front().name);
    }
    check(-1);
    CHECK(g.nodes().front().name == "front99");
    // a copy has its own indices (pointing at its own nodes)
    Graph copy = g;
    for (const Node &n : copy.nodes()) CHECK(copy.node(n.name) == &n);
    CHECK(copy.node_list().size() == g.node_list().size());
}

TEST_CASE("printer: one line per node and a JSON map", "[ir]")
{
    Program p = program_of(tiny_llama());
    std::ostringstream os;
    print_program(p, os);
    std::string text = os.str();
    CHECK_THAT(text, Contains("block  L  KV_ATTENTION q_rope[T, 64], kv[2, 2, T, 16] -> attn[T, 64]"));
    CHECK_THAT(text, Contains("header -  EMBEDDING tokens[T]:i32:input, embed_tokens.weight[256, 64]:weight -> x[T, 64]:carry"));
    CHECK_THAT(text, Contains("RMSNORM x[T, 64]:carry, input_layernorm.weight[64]:weight -> attn_in[T, 64]  eps=1e-05 "
                              "w_offset=0.0"));
    nlohmann::json j = program_to_json(p);
    CHECK(j["block"]["layers"] == 2);
    CHECK(j["block"]["nodes"].size() == p.block.nodes().size());
    CHECK(j["block"]["tensors"]["kv"]["shape"] == nlohmann::json({2, 2, "T", 16}));
    CHECK(j["footer"]["tensors"]["lm_head.weight"]["source"][0] == "lm_head.weight");
}

TEST_CASE("parser: the text form reads back to the same graph, for every section of every family", "[ir]")
{
    for (const char *family : {"llama", "gpt2", "gemma2", "phi", "qwen2"}) {
        Program p = program_of(nlohmann::json::parse(ckc::read_file(std::string(CKC_SOURCE_DIR) + "/models/tiny-" +
                                                                    family + "/config.json")));
        for (Section s : kSections) {
            INFO(family << " " << Program::section_name(s));
            const Graph &g = p.section(s);
            Graph back = parse_graph(graph_text(g));
            CHECK(graph_text(back) == graph_text(g));
            CHECK(back.outputs() == g.outputs());
            for (const Node &n : g.nodes()) CHECK(back.node(n.name)->attrs == n.attrs);
        }
    }
}

TEST_CASE("parser: errors point at the line and the column", "[ir]")
{
    auto error_of = [](const std::string &text) {
        try {
            parse_graph(text, "t.ir");
        } catch (const Error &e) {
            CHECK(e.kind() == ErrorKind::Input);
            return std::string(e.what());
        }
        FAIL("no error for: " << text);
        return std::string();
    };
    CHECK_THAT(error_of("RELU x[4]:input -> y[4]\nSILUU y[4] -> z[4]"),
               Contains("t.ir:2:1: unknown op 'SILUU' (did you mean 'SILU'?)") && Contains("\n    ^~~~~"));
    CHECK_THAT(error_of("RELU x[4] -> y[4]"), Contains("t.ir:1:6: tensor 'x' is read before any node makes it"));
    CHECK_THAT(error_of("MATMUL a[2, 3]:input, b[3, 5]:weight -> c[2, 4]"), Contains("t.ir:1:41: MATMUL computes [2, 5]:f32"));
    CHECK_THAT(error_of("RELU x[4]:input -> y[4]  alpha"), Contains("expected key=value"));
    CHECK_THAT(error_of("RELU x[4]:input -> y[4]\nRELU x[4]:input -> y[4]"), Contains("t.ir:2:20: tensor 'y' is made twice"));
    CHECK_THAT(error_of("RELU x[4]:cpu -> y[4]"), Contains("unknown dtype or storage ':cpu'"));
}

TEST_CASE("the IR does not depend on codegen: no file in compiler/ir includes compiler/codegen", "[ir]")
{
    namespace fs = std::filesystem;
    int files = 0;
    for (const auto &e : fs::directory_iterator(CKC_SOURCE_DIR "/compiler/ir")) {
        std::string text = read_file(e.path().string());
        files++;
        INFO(e.path().filename().string());
        CHECK(text.find("#include \"codegen/") == std::string::npos);
    }
    CHECK(files >= 8);
}

TEST_CASE("every op that runs has an emitter, and fold-only ops have none", "[ir]")
{
    for (Op op : all_ops()) {
        INFO(op_name(op));
        CHECK((lowering(op).emit != nullptr) == !op_def(op).fold_only);
        CHECK(lowering(op).kernels.empty() == op_def(op).fold_only);
    }
}

TEST_CASE("RMSNORM's group: a norm over each group of the last dim, its weight [group] (Qwen3's per-head q/k)", "[ir]")
{
    auto graph = [](int64_t width, int64_t group, int64_t wlen) {
        Graph g;
        g.add_tensor(Tensor{"x", {kTokens, width}, DType::F32, Storage::Carry, {}});
        g.add_tensor(Tensor{"w", {wlen}, DType::F32, Storage::Weight, {}});
        Node n;
        n.name = n.output = "y";
        n.op = Op::RMSNORM;
        n.inputs = {"x", "w"};
        n.attrs["eps"] = 1e-6;
        if (group) n.attrs["group"] = group;
        g.add_node(n);
        return g;
    };
    CHECK_NOTHROW(graph(8, 4, 4).verify("test"));
    CHECK_NOTHROW(graph(8, 0, 8).verify("test"));
    CHECK_THROWS_WITH(graph(8, 3, 3).verify("test"), Contains("group must divide the last dim"));
    CHECK_THROWS_WITH(graph(8, 4, 8).verify("test"), Contains("weight must be [group or dim]"));
    CHECK_THROWS_WITH(graph(8, 0, 4).verify("test"), Contains("weight must be [group or dim]"));
}
