// The graph.json front end: validation errors name the file and what is
// wrong; outputs get their own buffers; repeated submodules fold into the
// block only when every layer is the same computation.
#include "helpers.h"

#include <cstring>
#include <functional>

#include "frontend/graph/graph_json.h"
#include "ir/symbolic.h"
#include "passes/pass.h"
#include "support/util.h"
#include "support/safetensors_writer.h"

using namespace ckc;
using namespace ckc_test;
using json = nlohmann::json;

namespace {

StTensor f32(const std::string &name, Shape shape, float value = 0.5f)
{
    StTensor t;
    t.name = name;
    t.shape = shape;
    t.dtype = CK_DT_F32;
    t.data.resize(static_cast<size_t>(shape_numel_fixed(shape)) * 4);
    for (size_t i = 0; i < t.data.size() / 4; i++) std::memcpy(t.data.data() + 4 * i, &value, 4);
    return t;
}

// A graph.json + its weights file in /tmp, removed at the end.
struct Exported {
    std::unique_ptr<TempFile> weights, graph;
    Exported(json doc, const std::vector<StTensor> &tensors)
    {
        weights = std::make_unique<TempFile>(safetensors_bytes(tensors), ".safetensors");
        doc["weights"] = weights->path.substr(weights->path.rfind('/') + 1);
        graph = std::make_unique<TempFile>(doc.dump(1));
    }
    explicit Exported(const std::string &text) { graph = std::make_unique<TempFile>(text); }
    const std::string &path() const { return graph->path; }
};

json node(const std::string &name, const std::string &op, std::vector<std::string> inputs, json attrs = json::object(),
          const std::string &module = "")
{
    json n = {{"name", name}, {"op", op}, {"inputs", inputs}, {"module", module}, {"source", name + " (aten.x)"}};
    if (!attrs.empty()) n["attrs"] = attrs;
    return n;
}

// y = relu(x @ w^T + b), x [2, 8], w [4, 8]
json linear_relu()
{
    return {{"schema", "ckc.graph"},
            {"version", 1},
            {"module", "Tiny"},
            {"inputs", {{{"name", "x"}, {"shape", {2, 8}}, {"dtype", "f32"}}}},
            {"constants",
             {{{"name", "fc.weight"}, {"shape", {4, 8}}, {"dtype", "f32"}},
              {{"name", "fc.bias"}, {"shape", {4}}, {"dtype", "f32"}}}},
            {"nodes",
             {node("mm", "MATMUL", {"x", "fc.weight"}, {{"transpose_b", 1}}, "fc"), node("add", "ADD", {"mm", "fc.bias"}),
              node("relu", "RELU", {"add"})}},
            {"outputs", {{{"name", "output"}, {"tensor", "relu"}}}}};
}

std::vector<StTensor> linear_weights() { return {f32("fc.weight", {4, 8}), f32("fc.bias", {4})}; }

std::string error_of(const std::string &path)
{
    try {
        build_from_graph_json(path);
    } catch (const Error &e) {
        CHECK(e.kind() != ErrorKind::Internal);
        return e.what();
    }
    FAIL("no error for " << path);
    return "";
}

}  // namespace

TEST_CASE("graph.json: a valid graph builds, its output pinned to the caller's buffer", "[graph-frontend]")
{
    Exported e(linear_relu(), linear_weights());
    CHECK(is_graph_json(e.path()));
    Program p = build_from_graph_json(e.path());
    CHECK(p.info.kind == ModelKind::Graph);
    CHECK(p.inputs == std::vector<std::string>{"x"});
    CHECK(p.outputs == std::vector<std::string>{"relu"});
    CHECK(p.output_names == std::vector<std::string>{"output"});
    CHECK(p.header.tensor("relu").storage == Storage::Output);
    CHECK(p.header.tensor("fc.weight").storage == Storage::Weight);
    CHECK(p.header.node("mm")->origin.module == "fc");
    CHECK(p.header.node("mm")->origin.source == "mm (aten.x)");
    CHECK(p.header.node("mm")->origin.str() == "fc: mm (aten.x)");
}

TEST_CASE("graph.json: an input or a twice-returned tensor is copied into its own output", "[graph-frontend]")
{
    json doc = linear_relu();
    doc["outputs"] = {{{"name", "a"}, {"tensor", "relu"}}, {{"name", "b"}, {"tensor", "relu"}}, {{"name", "c"}, {"tensor", "x"}}};
    Exported e(doc, linear_weights());
    Program p = build_from_graph_json(e.path());
    REQUIRE(p.outputs.size() == 3);
    CHECK(p.outputs[0] == "relu");
    for (int i : {1, 2}) {
        const Node *c = p.header.producer(p.outputs[i]);
        REQUIRE(c);
        CHECK(c->op == Op::COPY);
        CHECK(p.header.tensor(p.outputs[i]).storage == Storage::Output);
    }
}

TEST_CASE("graph.json: every kind of bad input is a clear error", "[graph-frontend]")
{
    SECTION("not JSON")
    {
        Exported e(std::string("{\"schema\": \"ckc.graph\", "));
        CHECK_THAT(error_of(e.path()), Catch::Contains("not valid JSON"));
    }
    SECTION("no schema")
    {
        json d = linear_relu();
        d.erase("schema");
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("not a ckc graph"));
    }
    SECTION("a newer schema version")
    {
        json d = linear_relu();
        d["version"] = 2;
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("schema version 2 is not supported"));
    }
    SECTION("unknown op")
    {
        json d = linear_relu();
        d["nodes"][2]["op"] = "FROBNICATE";
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("node 'relu': unknown op 'FROBNICATE' (ckc ops:"));
        d["nodes"][2]["op"] = "RELLU";
        Exported e2(d, linear_weights());
        std::string msg = error_of(e2.path());
        CHECK_THAT(msg, Catch::Contains("unknown op 'RELLU' (did you mean 'RELU'?)"));
        CHECK_THAT(msg, Catch::Matches(".*\\.json:[0-9]+:[0-9]+: node 'relu': (.|\\n)*"));
        CHECK_THAT(msg, Catch::Matches("(.|\\n)*\"name\": \"relu\",\\n +\\^~~~~~"));  // the caret under its name
    }
    SECTION("unknown tensor")
    {
        json d = linear_relu();
        d["nodes"][1]["inputs"][1] = "fc.bais";
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("node 'add' reads 'fc.bais'"));
    }
    SECTION("a cycle")
    {
        json d = linear_relu();
        d["nodes"][0]["inputs"][0] = "relu";
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("cycle") && Catch::Contains("mm"));
    }
    SECTION("a declared shape that does not match")
    {
        json d = linear_relu();
        d["nodes"][0]["shape"] = {4, 2};
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("node 'mm' (MATMUL): graph.json declares shape [4, 2] but the op "
                                                       "computes [2, 4]"));
    }
    SECTION("a declared dtype that does not match")
    {
        json d = linear_relu();
        d["nodes"][2]["dtype"] = "i64";
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains("declares dtype i64"));
    }
    SECTION("shapes the op rejects")
    {
        json d = linear_relu();
        d["constants"][0]["shape"] = {4, 7};
        Exported e(d, {f32("fc.weight", {4, 7}), f32("fc.bias", {4})});
        CHECK_THAT(error_of(e.path()), Catch::Contains("inner dims differ") && Catch::Contains("[fc: mm"));
    }
    SECTION("a constant missing from the weights file, or of another shape")
    {
        Exported e(linear_relu(), {f32("fc.weight", {4, 8})});
        CHECK_THAT(error_of(e.path()), Catch::Contains("'fc.bias': not in the weights file"));
        Exported f(linear_relu(), {f32("fc.weight", {8, 4}), f32("fc.bias", {4})});
        CHECK_THAT(error_of(f.path()), Catch::Contains("declared [4, 8]") && Catch::Contains("holds [8, 4]"));
    }
    SECTION("wrong arity, bad attribute, duplicate names, no outputs")
    {
        json d = linear_relu();
        d["nodes"][2]["inputs"] = {"add", "add"};
        Exported a(d, linear_weights());
        CHECK_THAT(error_of(a.path()), Catch::Contains("takes 1 inputs, has 2"));
        d = linear_relu();
        d["nodes"][0]["attrs"]["transpose_b"] = {{"nested", 1}};
        Exported b(d, linear_weights());
        CHECK_THAT(error_of(b.path()), Catch::Contains("attr \"transpose_b\""));
        d = linear_relu();
        d["nodes"][1]["name"] = "mm";
        Exported c(d, linear_weights());
        CHECK_THAT(error_of(c.path()), Catch::Contains("'mm' is used twice"));
        d = linear_relu();
        d["outputs"] = json::array();
        Exported f(d, linear_weights());
        CHECK_THAT(error_of(f.path()), Catch::Contains("no outputs"));
        // a reshape to more dimensions than the kernels' shape arrays hold (they would overflow at run time)
        d = {{"schema", "ckc.graph"}, {"version", 1},
             {"inputs", {{{"name", "x"}, {"shape", {1024}}, {"dtype", "f32"}}}}, {"constants", json::array()},
             {"nodes", {node("r", "RESHAPE", {"x"}, {{"shape", {2, 2, 2, 2, 2, 2, 2, 2, 2, 2}}}, "m")}},
             {"outputs", {{{"name", "output"}, {"tensor", "r"}}}}};
        Exported g(d, {});
        CHECK_THAT(error_of(g.path()), Catch::Contains("node 'r' (RESHAPE): computes a tensor of 10 dimensions"));
    }
}

// ---- layer folding ---------------------------------------------------------------------------

namespace {

// x -> [layers.i: y = relu(x @ w_i^T) + x] x n -> out, with `tweak` applied to layer 1's nodes
json layered(int n, const std::string &container, std::function<void(json &)> tweak = nullptr)
{
    json nodes = json::array(), consts = json::array();
    std::string x = "x";
    for (int i = 0; i < n; i++) {
        std::string m = container + "." + std::to_string(i);
        consts.push_back({{"name", m + ".fc.weight"}, {"shape", {8, 8}}, {"dtype", "f32"}});
        json a = node("mm" + std::to_string(i), "MATMUL", {x, m + ".fc.weight"}, {{"transpose_b", 1}}, m + ".fc");
        json b = node("relu" + std::to_string(i), "RELU", {"mm" + std::to_string(i)}, json::object(), m);
        json c = node("res" + std::to_string(i), "ADD", {"relu" + std::to_string(i), x}, json::object(), m);
        if (i == 1 && tweak) tweak(a);
        nodes.push_back(a);
        nodes.push_back(b);
        nodes.push_back(c);
        x = "res" + std::to_string(i);
    }
    nodes.push_back(node("out", "MUL", {x}, {{"scalar", 2.0}}, "head"));
    return {{"schema", "ckc.graph"},
            {"version", 1},
            {"inputs", {{{"name", "x"}, {"shape", {3, 8}}, {"dtype", "f32"}}}},
            {"constants", consts},
            {"nodes", nodes},
            {"outputs", {{{"name", "output"}, {"tensor", "out"}}}}};
}

std::vector<StTensor> layered_weights(int n, const std::string &container)
{
    std::vector<StTensor> out;
    for (int i = 0; i < n; i++) out.push_back(f32(container + "." + std::to_string(i) + ".fc.weight", {8, 8}));
    return out;
}

}  // namespace

TEST_CASE("fold_layers: identical layers become one block run N times", "[graph-frontend]")
{
    for (std::string container : {"layers", "transformer.h", "blocks"}) {
        Exported e(layered(4, container), layered_weights(4, container));
        Program p = build_from_graph_json(e.path());
        CHECK(fold_layers(p) == 4);
        CHECK(p.info.n_layers == 4);
        CHECK(p.block.nodes().size() == 3);
        CHECK(p.footer.nodes().size() == 1);
        const Node &mm = p.block.nodes().at(0);
        CHECK(p.block.tensor(mm.inputs[1]).source.parts == std::vector<std::string>{container + ".{L}.fc.weight"});
        CHECK(mm.origin.module.find(container + ".{L}.fc") == 0);
        CHECK(p.block.tensor(p.carry).storage == Storage::Carry);
        // the input enters the carry through a copy in the header
        REQUIRE(p.header.nodes().size() == 1);
        CHECK(p.header.nodes().at(0).op == Op::COPY);
    }
}

TEST_CASE("fold_layers: a mask computed from an input before the layers is computed in each layer", "[graph-frontend]")
{
    // keep[3, 8] bool input -> off = (keep == 0) before the layers; every layer masks its relu with it
    json d = layered(3, "layers");
    d["inputs"].push_back({{"name", "keep"}, {"shape", {3, 8}}, {"dtype", "bool"}});
    json nodes = json::array({node("off", "CMP", {"keep"}, {{"fn", "eq"}, {"scalar", 0}}, "mask")});
    for (auto &n : d["nodes"]) {
        if (n["op"] == "ADD") {
            std::string i = n["name"].get<std::string>().substr(3);
            nodes.push_back(node("masked" + i, "MASKED_FILL", {"relu" + i, "off"}, {{"value", 0.0}}, "layers." + i));
            n["inputs"][0] = "masked" + i;
        }
        nodes.push_back(n);
    }
    d["nodes"] = nodes;
    Exported e(d, layered_weights(3, "layers"));
    Program p = build_from_graph_json(e.path());
    CHECK(fold_layers(p) == 3);
    std::vector<std::string> block;
    for (const Node &n : p.block.nodes()) block.push_back(op_name(n.op));
    CHECK(block == std::vector<std::string>{"CMP", "MATMUL", "RELU", "MASKED_FILL", "ADD"});
    CHECK(p.block.nodes().at(0).inputs == std::vector<std::string>{"keep"});
    for (const Node &n : p.header.nodes()) CHECK(n.op != Op::CMP);  // the original went: nothing reads it

    SECTION("a mask made from the first layer's input (the carry): the layers stay unrolled")
    {
        json d2 = d;
        d2["nodes"][0]["inputs"] = {"x"};  // off = (x == 0): x is the first layer's input
        d2["inputs"][0]["dtype"] = "f32";
        Exported e2(d2, layered_weights(3, "layers"));
        Program p2 = build_from_graph_json(e2.path());
        CHECK(fold_layers(p2) == 0);
    }
}

TEST_CASE("fold_layers: layers that differ, or share more than the carry, stay unrolled", "[graph-frontend]")
{
    SECTION("an attribute differs")
    {
        Exported e(layered(3, "layers", [](json &n) { n["attrs"]["alpha"] = 0.5; }), layered_weights(3, "layers"));
        Program p = build_from_graph_json(e.path());
        CHECK(fold_layers(p) == 0);
        CHECK(p.header.nodes().size() == 10);
    }
    SECTION("a layer reads an earlier layer's inside value")
    {
        Exported e(layered(3, "layers", [](json &n) { n["inputs"][0] = "relu0"; }), layered_weights(3, "layers"));
        Program p = build_from_graph_json(e.path());
        CHECK(fold_layers(p) == 0);
    }
    SECTION("a single layer")
    {
        Exported e(layered(1, "layers"), layered_weights(1, "layers"));
        Program p = build_from_graph_json(e.path());
        CHECK(fold_layers(p) == 0);
    }
}

// ---- symbolic sizes (ir/symbolic.h; issue #30) ------------------------------------------------------------

TEST_CASE("symbolic sizes: products of symbols are interned, multiplied, divided and printed", "[graph-frontend]")
{
    int64_t b = sym_dim("batch"), s = sym_dim("seq");
    CHECK(is_sym(b));
    CHECK(!is_sym(64));
    CHECK(!is_sym(-1));  // T is not one of them
    CHECK(sym_dim("batch") == b);
    int64_t bs = dim_mul(b, s), sb = dim_mul(s, b);
    CHECK(bs == sb);  // one product, one code
    CHECK(dim_mul(bs, 8) == parse_dim("8*seq*batch"));
    CHECK(dim_str(dim_mul(bs, 8)) == "8*batch*seq");
    CHECK(dim_c(dim_mul(bs, 8)) == "(int64_t)8 * sym_batch * sym_seq");
    CHECK(dim_c(b) == "sym_batch");
    CHECK(dim_reads(bs) == std::vector<std::string>{"sym_batch", "sym_seq"});
    CHECK(dim_mul(3, 4) == 12);
    CHECK(dim_mul(b, 0) == 0);
    int64_t q = 0;
    REQUIRE(dim_div(dim_mul(bs, 8), dim_mul(s, 4), q));
    CHECK(q == dim_mul(b, 2));
    CHECK(!dim_div(b, s, q));             // not a product of what is left
    CHECK(!dim_div(dim_mul(b, 3), 2, q));  // 3*batch / 2
    REQUIRE(dim_div(dim_mul(b, 6), b, q));
    CHECK(q == 6);  // the symbol cancels: a plain size again
    sym_declare("batch", {1, 16});
    sym_declare("seq", {2, 64});
    CHECK(dim_max(dim_mul(bs, 8)) == 8 * 16 * 64);
    CHECK(shape_numel_fixed(Shape{b, s, 32}) == 16 * 64 * 32);  // the planner's size: at the bounds
    CHECK(shape_numel(Shape{b, s, 32}) == dim_mul(bs, 32));
    CHECK(!shape_is_static(Shape{b, 4}));
    CHECK(shape_str(Shape{b, dim_mul(s, 4)}) == "[batch, 4*seq]");
    for (const char *bad : {"", "batch*", "2x", "batch++1", "+seq", "seq+", "-seq", "1-2", "1e3", "*seq",
                            "999999999999*999999999999", "999999999999*batch*999999999999"})
        CHECK_THROWS_AS(parse_dim(bad), std::runtime_error);
}

TEST_CASE("symbolic sizes: sums (a cat to seq + 1) are interned, computed with and printed", "[graph-frontend]")
{
    int64_t b = sym_dim("batch"), s = sym_dim("seq");
    sym_declare("batch", {1, 16});
    sym_declare("seq", {2, 64});
    int64_t s1 = dim_add(s, 1);
    CHECK(is_sym(s1));
    CHECK(!sym_is_product(s1));
    CHECK(sym_is_product(s));
    CHECK(s1 == parse_dim("seq+1"));
    CHECK(s1 == parse_dim("1+seq"));  // one code for one sum
    CHECK(dim_str(s1) == "seq+1");
    CHECK(dim_c(s1) == "(sym_seq + 1)");
    CHECK(dim_sub(s1, 1) == s);  // back to the plain symbol
    CHECK(dim_sub(s1, s) == 1);
    CHECK(dim_str(dim_sub(s, 1)) == "seq-1");
    CHECK(dim_c(dim_sub(s, dim_mul(b, 2))) == "(sym_seq - (int64_t)2 * sym_batch)");
    int64_t two = dim_mul(s1, 2);
    CHECK(dim_str(two) == "2*seq+2");
    int64_t q = 0;
    REQUIRE(dim_div(two, 2, q));
    CHECK(q == s1);
    CHECK(!dim_div(s1, s, q));  // (seq + 1) / seq
    CHECK(!dim_div(dim_add(two, 1), 2, q));
    REQUIRE(dim_div(s1, s1, q));
    CHECK(q == 1);
    CHECK(dim_mul(s1, b) == parse_dim("batch*seq+batch"));
    CHECK(dim_reads(dim_mul(s1, b)) == std::vector<std::string>{"sym_batch", "sym_seq"});
    CHECK(dim_max(s1) == 65);
    CHECK(dim_min(s1) == 3);
    CHECK(dim_max(dim_sub(s, 1)) == 63);
    CHECK(dim_min(dim_sub(dim_mul(b, 4), s)) == 4 - 64);  // each term at its smallest
    CHECK(shape_str(Shape{b, s1}) == "[batch, seq+1]");
    CHECK_THROWS_AS(sym_bounds("no_such_symbol"), std::runtime_error);

    // a derived size: h = (seq+1)//2, bounds from seq's; dim_nonneg relates it to seq where dim_min cannot
    sym_declare_derived("h", s1, 2);
    int64_t h = sym_dim("h");
    CHECK(sym_bounds("h").min == 1);
    CHECK(sym_bounds("h").max == 32);
    CHECK(sym_derivation("h")->div == 2);
    CHECK(sym_derivation("seq") == nullptr);
    int64_t rest = dim_sub(dim_add(s, 1), dim_mul(h, 2));  // seq + 1 - 2h >= 0: x[::2] stays in the axis
    CHECK(dim_min(rest) < 0);
    CHECK(dim_nonneg(rest));
    CHECK(!dim_nonneg(dim_sub(s, dim_mul(h, 2))));  // seq - 2h is -1 for odd seq
    CHECK(dim_nonneg(dim_sub(dim_mul(h, 2), s)));  // 2h >= seq
    CHECK(!dim_nonneg(dim_sub(dim_mul(h, 2), dim_add(s, 1))));  // 2h < seq + 1 for even seq
    CHECK(dim_nonneg(dim_sub(s, h)));  // seq - h: each at its bounds already
    sym_declare("h", {1, 4});  // declared free again: no rule left
    CHECK(sym_derivation("h") == nullptr);
    CHECK_THROWS_AS(sym_declare_derived("h2", dim_sub(s, 10), 2), std::runtime_error);  // may be negative
    CHECK_THROWS_AS(sym_declare_derived("h2", s, 1), std::runtime_error);
    CHECK_THROWS_AS(sym_declare_derived("h2", 8, 2), std::runtime_error);  // no symbol
    CHECK_THROWS_AS(sym_declare_derived("h2", sym_dim("h2"), 2), std::runtime_error);  // itself
}

namespace {

// y = relu(x @ w^T + b) with x [batch, 8]
json symbolic_linear_relu()
{
    json d = linear_relu();
    d["symbols"] = {{"batch", {{"min", 1}, {"max", 32}}}};
    d["inputs"][0]["shape"] = {"batch", 8};
    return d;
}

}  // namespace

TEST_CASE("graph.json: symbolic sizes flow through the shape rules and bad ones are named", "[graph-frontend]")
{
    {
        Exported e(symbolic_linear_relu(), linear_weights());
        Program p = build_from_graph_json(e.path());
        CHECK(p.symbols == std::vector<std::string>{"batch"});
        CHECK(p.header.tensor("relu").shape == (Shape{sym_dim("batch"), 4}));
        CHECK(sym_bounds("batch").max == 32);
    }
    {  // arange(0, batch): a length known when the code runs
        json d = symbolic_linear_relu();
        d["nodes"].push_back(node("i", "ARANGE", {}, {{"start", 1}, {"step", 2}, {"shape", {"batch"}}, {"dtype", "f32"}}));
        d["nodes"].push_back(node("col", "RESHAPE", {"i"}, {{"shape", {"batch", 1}}}));
        d["nodes"].push_back(node("y", "ADD", {"relu", "col"}));
        d["outputs"][0]["tensor"] = "y";
        Exported e(d, linear_weights());
        Program p = build_from_graph_json(e.path());
        CHECK(p.header.tensor("i").shape == (Shape{sym_dim("batch")}));
    }
    {  // a cat to batch + 4 rows, sliced back to batch from row 4 (a length that is a symbol), summed down
        json d = symbolic_linear_relu();
        d["nodes"].push_back(node("cat", "CAT", {"x", "fc.weight"}, {{"axis", 0}}));
        d["nodes"].push_back(node("rows", "SLICE", {"cat"}, {{"axis", 0}, {"start", 4}, {"length", "batch"}}));
        d["nodes"].push_back(node("sums", "CUMSUM", {"rows"}, {{"axis", 0}}));
        d["outputs"].push_back({{"name", "sums"}, {"tensor", "sums"}});
        Exported e(d, linear_weights());
        Program p = build_from_graph_json(e.path());
        CHECK(p.header.tensor("cat").shape == (Shape{dim_add(sym_dim("batch"), 4), 8}));
        CHECK(p.header.tensor("sums").shape == (Shape{sym_dim("batch"), 8}));
    }
    {  // the last 2 rows of batch: a start counted from the end (x[-2:]), known when the code runs
        json d = symbolic_linear_relu();
        d["symbols"]["batch"]["min"] = 2;
        d["nodes"].push_back(node("last", "SLICE", {"relu"}, {{"axis", 0}, {"start", "batch-2"}, {"length", 2}}));
        d["outputs"].push_back({{"name", "last"}, {"tensor", "last"}});
        Exported e(d, linear_weights());
        Program p = build_from_graph_json(e.path());
        CHECK(p.header.tensor("last").shape == (Shape{2, 4}));
    }
    {  // an input of 2*batch+1 rows (torch.export's derived Dims): it binds batch, the rows flow through
        json d = symbolic_linear_relu();
        d["inputs"][0]["shape"] = {"2*batch+1", 8};
        d["nodes"][0]["shape"] = {"2*batch+1", 4};
        d["nodes"][1]["shape"] = {"2*batch+1", 4};
        Exported e(d, linear_weights());
        Program p = build_from_graph_json(e.path());
        std::string sym;
        int64_t a = 0, b = 0;
        REQUIRE(dim_linear(p.header.tensor("relu").shape[0], sym, a, b));
        CHECK((sym == "batch" && a == 2 && b == 1));
        CHECK(!dim_linear(parse_dim("batch*batch"), sym, a, b));
        CHECK(!dim_linear(8, sym, a, b));
    }
    {  // x[::2] and x[1::2] of batch rows: lengths (batch+1)//2 and batch//2, derived sizes the code computes
        json d = symbolic_linear_relu();
        d["symbols"]["batch"]["min"] = 2;  // (x[1::2] of 1 row is empty)
        d["symbols"]["even"] = {{"of", "batch+1"}, {"div", 2}};
        d["symbols"]["odd"] = {{"of", "batch"}, {"div", 2}};
        d["nodes"].push_back(node("e", "SLICE", {"relu"}, {{"axis", 0}, {"start", 0}, {"length", "even"}, {"step", 2}}));
        d["nodes"].push_back(node("o", "SLICE", {"relu"}, {{"axis", 0}, {"start", 1}, {"length", "odd"}, {"step", 2}}));
        d["outputs"].push_back({{"name", "e"}, {"tensor", "e"}});
        d["outputs"].push_back({{"name", "o"}, {"tensor", "o"}});
        Exported e(d, linear_weights());
        Program p = build_from_graph_json(e.path());
        CHECK(p.symbols == std::vector<std::string>{"batch", "even", "odd"});  // the free ones first
        CHECK(p.header.tensor("e").shape == (Shape{sym_dim("even"), 4}));
        CHECK(sym_bounds("even").min == 1);
        CHECK(sym_bounds("even").max == 16);
        CHECK(sym_bounds("odd").min == 1);
        CHECK(sym_rule("even") == "(batch+1)//2");
        CHECK(sym_rule("odd") == "batch//2");
        CHECK(sym_rule_c("even") == "(sym_batch + 1) / 2");
        CHECK(sym_rule("batch").empty());
    }
    // each: what is wrong with the document, and what the error says
    const std::vector<std::pair<std::function<void(json &)>, std::string>> bad = {
        {[](json &d) { d["inputs"][0]["shape"] = {"batches", 8}; },
         "names 'batches', which \"symbols\" does not declare"},
        {[](json &d) { d["symbols"]["batch"]["min"] = 40; }, "symbols \"batch\": bounds [40, 32]"},
        {[](json &d) { d["inputs"][0]["shape"] = {"batch*batch", 8}; }, "size batch*batch names a power"},
        {[](json &d) {
             d["symbols"]["seq"] = {{"min", 1}, {"max", 8}};
             d["inputs"][0]["shape"] = {"batch*seq", 8};
         },
         "size batch*seq names several symbols"},
        {[](json &d) { d["symbols"]["seq"] = {{"min", 1}, {"max", 8}}; }, "symbols \"seq\": no input has it as a size"},
        {[](json &d) { d["nodes"][2]["shape"] = {"2*batch", 4}; },
         "declares shape [2*batch, 4] but the op computes [batch, 4]"},
        {[](json &d) { d["symbols"]["batch"]["max"] = int64_t(1) << 40; }, "must satisfy 1 <= min <= max"},
        // an arange of a dynamic length: its shape is the size; with "end" too, or two sizes, an error
        {[](json &d) { d["nodes"].push_back(node("i", "ARANGE", {}, {{"start", 0}, {"end", 4}, {"shape", {"batch"}}, {"dtype", "i64"}})); },
         "takes \"end\" or \"shape\", not both"},
        {[](json &d) { d["nodes"].push_back(node("i", "ARANGE", {}, {{"start", 0}, {"shape", {"batch", 2}}, {"dtype", "i64"}})); },
         "\"shape\" must be one size"},
        // a slice of batch rows from row 5 of batch + 4: beyond the axis
        {[](json &d) {
             d["nodes"].push_back(node("cat", "CAT", {"x", "fc.weight"}, {{"axis", 0}}));
             d["nodes"].push_back(node("rows", "SLICE", {"cat"}, {{"axis", 0}, {"start", 5}, {"length", "batch"}}));
         },
         "slice of batch elements from 5 in steps of 1 of axis 0 (size batch+4) leaves the axis for some sizes"},
        // sizes a file may write that no buffer can have: negative within the bounds, or beyond int64 at them
        {[](json &d) { d["nodes"].push_back(node("i", "ARANGE", {}, {{"start", 0}, {"shape", {"batch-40"}}, {"dtype", "i64"}})); },
         "size \"batch-40\" is negative (-39) for some sizes within the symbols' bounds"},
        {[](json &d) {
             d["symbols"]["batch"]["max"] = int64_t(1) << 32;
             d["nodes"].push_back(node("i", "ARANGE", {}, {{"start", 0}, {"shape", {"batch*batch*batch"}}, {"dtype", "i64"}}));
         },
         "size \"batch*batch*batch\" is above ckc's limit of 4294967296 with its symbols at their bounds"},
        {[](json &d) { d["nodes"].push_back(node("rows", "SLICE", {"x"}, {{"axis", 0}, {"start", 0}, {"length", "undeclared"}})); },
         "attr length: symbol 'undeclared' has no declared bounds"},
        // the last 2 rows of batch >= 1: a start of -1 for batch 1
        {[](json &d) { d["nodes"].push_back(node("last", "SLICE", {"x"}, {{"axis", 0}, {"start", "batch-2"}, {"length", 2}})); },
         "a slice of a symbolic size takes a step in [1, 4294967296] and a start >= 0 for every size within the "
         "symbols' bounds (step 1, start batch-2)"},
        {[](json &d) { d["nodes"].push_back(node("last", "SLICE", {"x"}, {{"axis", 0}, {"start", "batch-1"}, {"length", 2}})); },
         "slice of 2 elements from batch-1 in steps of 1 of axis 0 (size batch) leaves the axis"},
        // every other row from row 1 of an odd batch: (batch+1)//2 of them reach row batch
        {[](json &d) {
             d["symbols"]["half"] = {{"of", "batch+1"}, {"div", 2}};
             d["nodes"].push_back(node("odd", "SLICE", {"x"}, {{"axis", 0}, {"start", 1}, {"length", "half"}, {"step", 2}}));
         },
         "slice of half elements from 1 in steps of 2 of axis 0 (size batch) leaves the axis"},
        // derived sizes a file may declare wrongly
        {[](json &d) { d["symbols"]["half"] = {{"of", "batch-40"}, {"div", 2}}; },
         "symbols \"half\": batch-40 is as low as -39 within its symbols' bounds"},
        {[](json &d) { d["symbols"]["half"] = {{"of", "batch"}, {"div", 1}}; }, "symbols \"half\": divisor 1 must be in [2, 2^30]"},
        {[](json &d) { d["symbols"]["half"] = {{"of", "rows"}, {"div", 2}}; },
         "symbols \"half\": \"of\" names 'rows', which \"symbols\" does not declare"},
        {[](json &d) {
             d["symbols"]["half"] = {{"of", "quarter+1"}, {"div", 2}};
             d["symbols"]["quarter"] = {{"of", "half"}, {"div", 2}};
         },
         "name each other"},
        {[](json &d) { d["symbols"]["half"] = {{"of", "batch"}, {"div", 2}, {"max", 3}}; },
         "symbols \"half\": a derived size takes no bounds"},
        {[](json &d) { d["symbols"]["half"] = 3; }, "symbols \"half\": must be an object"},
        {[](json &d) {
             for (int k = 0; k < 64; k++) d["symbols"]["s" + std::to_string(k)] = {{"of", "batch"}, {"div", 2}};
         },
         "\"symbols\" declares 65 sizes; ckc takes at most 64"},
        {[](json &d) {
             d["symbols"]["half"] = {{"of", "batch"}, {"div", 2}};
             d["inputs"].push_back({{"name", "y"}, {"shape", {"half"}}, {"dtype", "f32"}});
         },
         "inputs[1] 'y': size half is derived (batch//2); an input's sizes are constants or free symbols"},
        {[](json &d) {
             d["nodes"].push_back(node("pos", "CMP", {"x"}, {{"fn", "gt"}, {"scalar", 0}}));
             d["nodes"].push_back(node("n", "CUMSUM", {"pos"}, {{"axis", 1}}));
         },
         "sums f32 or i64, not bool"},
    };
    for (const auto &[mutate, message] : bad) {
        json d = symbolic_linear_relu();
        mutate(d);
        Exported e(d, linear_weights());
        CHECK_THAT(error_of(e.path()), Catch::Contains(message));
    }
}
