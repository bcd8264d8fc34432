// Passes: graph in -> expected graph out, including the cases each pass must leave alone.
#include "helpers.h"

#include "ck_weights.h"
#include "passes/pass.h"
#include "support/util.h"

using namespace ckc;
using namespace ckc_test;

namespace {

// A tiny hand-made graph builder for pass tests.
struct G {
    Graph g;
    void act(const std::string &n, Shape s, Storage st = Storage::Activation) { g.add_tensor({n, s, DType::F32, st, {}}); }
    void weight(const std::string &n, Shape s)
    {
        Tensor t{n, s, DType::F32, Storage::Weight, {}};
        t.source.parts = {"model.layers.{L}." + n};
        t.source.part_shapes = {s};
        g.add_tensor(t);
    }
    void node(Op op, std::vector<std::string> in, const std::string &out, std::map<std::string, Attr> attrs = {},
              Storage st = Storage::Activation)
    {
        add_op(g, op, std::move(in), out, std::move(attrs), st);
    }
};

std::vector<std::string> sig(const Graph &g)
{
    std::vector<std::string> out;
    for (const Node &n : g.nodes()) out.push_back(std::string(op_name(n.op)) + "(" + join(n.inputs, ",") + ")->" + n.output);
    return out;
}

}  // namespace

TEST_CASE("fuse_matmul_add: bias, residual, bias + residual", "[passes]")
{
    const char *before = R"(
        MATMUL x[T, 8]:carry, w[8, 8]:weight -> mm[T, 8]  transpose_b=1
        ADD mm[T, 8], b[8]:weight -> y[T, 8]
        MATMUL y[T, 8], w[8, 8]:weight -> mm2[T, 8]  transpose_b=1
        ADD mm2[T, 8], b[8]:weight -> z[T, 8]
        ADD y[T, 8], z[T, 8] -> out[T, 8]:output
    )";
    const char *after = R"(
        MATMUL_ADD x[T, 8]:carry, w[8, 8]:weight, b[8]:weight -> y[T, 8]  transpose_b=1
        MATMUL_ADD y[T, 8], w[8, 8]:weight, y[T, 8], b[8]:weight -> out[T, 8]:output  transpose_b=1
    )";
    CHECK(check_pass("fuse_matmul_add", before, after));
    CHECK_FALSE(check_pass("fuse_matmul_add", after, after));  // idempotent
}

TEST_CASE("fuse_matmul_add: a second consumer blocks the fusion", "[passes]")
{
    const char *graph = R"(
        MATMUL x[T, 8]:carry, w[8, 8]:weight -> mm[T, 8]  transpose_b=1
        ADD mm[T, 8], x[T, 8]:carry -> y[T, 8]
        ADD mm[T, 8], y[T, 8] -> z[T, 8]:output
    )";  // mm is read twice: it must survive
    CHECK_FALSE(check_pass("fuse_matmul_add", graph, graph));
}

TEST_CASE("fuse_matmul_add: the residual may be produced after the GEMM", "[passes]")
{
    CHECK(check_pass("fuse_matmul_add", R"(
        MATMUL x[T, 8]:carry, w[8, 8]:weight -> mm[T, 8]  transpose_b=1
        RMSNORM x[T, 8]:carry, nw[8]:weight -> r[T, 8]  eps=1e-05
        ADD r[T, 8], mm[T, 8] -> y[T, 8]:output
    )", R"(
        RMSNORM x[T, 8]:carry, nw[8]:weight -> r[T, 8]  eps=1e-05
        MATMUL_ADD x[T, 8]:carry, w[8, 8]:weight, r[T, 8] -> y[T, 8]:output  transpose_b=1
    )"));  // the fused GEMM now runs after r
}

TEST_CASE("fuse_parallel_linears: QKV and gate|up of the tiny Llama", "[passes]")
{
    Program p = program_of(tiny_llama());
    CHECK(fuse_parallel_linears(p.block, p));
    p.block.verify("test");
    const Graph &g = p.block;
    const Node *qkv = g.producer("q")->op == Op::SLICE ? g.producer(g.producer("q")->inputs[0]) : nullptr;
    REQUIRE(qkv);
    CHECK(qkv->op == Op::MATMUL);
    const Tensor &w = g.tensor(qkv->inputs[1]);
    CHECK(w.name == "self_attn.{q,k,v}_proj.weight");
    CHECK(w.shape == Shape{128, 64});
    CHECK(w.source.parts == std::vector<std::string>{"model.layers.{L}.self_attn.q_proj.weight",
                                                     "model.layers.{L}.self_attn.k_proj.weight",
                                                     "model.layers.{L}.self_attn.v_proj.weight"});
    CHECK(g.producer("k")->i("start") == 64);
    CHECK(g.producer("v")->i("start") == 96);
    CHECK(g.producer("v")->i("length") == 32);
    const Node *gu = g.producer(g.producer("gate")->inputs[0]);
    CHECK(g.tensor(gu->inputs[1]).shape == Shape{344, 64});
    CHECK(g.producer("up")->i("start") == 172);
    int matmuls = 0;
    for (const Node &n : g.nodes()) matmuls += n.op == Op::MATMUL;
    CHECK(matmuls == 4);  // qkv, o, gate|up, down
    CHECK_FALSE(g.has_tensor("self_attn.q_proj.weight"));
}

TEST_CASE("fuse_parallel_linears: biased projections concatenate their biases", "[passes]")
{
    Program p = program_of(tiny_llama({{"attention_bias", true}}));
    fuse_matmul_add(p.block);
    CHECK(fuse_parallel_linears(p.block, p));
    p.block.verify("test");
    const Node *qkv = p.block.producer(p.block.producer("q")->inputs[0]);
    CHECK(qkv->op == Op::MATMUL_ADD);
    CHECK(p.block.tensor(qkv->inputs[2]).shape == Shape{128});
    CHECK(p.block.tensor(qkv->inputs[2]).source.parts.size() == 3);
}

TEST_CASE("fuse_parallel_linears: leaves alone readers that need contiguous rows", "[passes]")
{
    // With fuse_matmul_add off, every projection feeds a bias ADD, which takes no row stride.
    Program p = program_of(tiny_llama({{"attention_bias", true}, {"mlp_bias", true}}));
    auto before = sig(p.block);
    fuse_parallel_linears(p.block, p);
    int matmuls = 0;
    for (const Node &n : p.block.nodes()) matmuls += n.op == Op::MATMUL;
    CHECK(matmuls == 7);  // nothing fused: every projection still has its own GEMM
    CHECK(p.block.has_tensor("self_attn.q_proj.weight"));
}

TEST_CASE("fuse_parallel_linears: more GEMMs than the loader's parts fuse in runs of CK_WEIGHT_MAX_PARTS",
          "[passes]")
{
    for (int count : {5, 8, 9}) {
        G t;
        t.act("x", {kTokens, 8}, Storage::Carry);
        std::vector<std::string> outs;
        for (int i = 0; i < count; i++) {
            std::string w = "w" + std::to_string(i), y = "y" + std::to_string(i);
            t.weight(w, {4, 8});
            t.node(Op::MATMUL, {"x", w}, y, {{"transpose_b", int64_t(1)}});
            outs.push_back(y);
        }
        for (int i = 0; i < count; i++) {  // each read by a GEMM, which takes a row-strided view
            std::string v = "v" + std::to_string(i), z = "z" + std::to_string(i);
            t.weight(v, {2, 4});
            t.node(Op::MATMUL, {outs[i], v}, z, {{"transpose_b", int64_t(1)}});
            t.g.mark_output(z);
        }
        CHECK(fuse_parallel_linears(t.g, Program{}));
        t.g.verify("test");
        std::vector<size_t> parts;
        for (const Node &n : t.g.nodes())
            if (n.op == Op::MATMUL && n.inputs[0] == "x") parts.push_back(t.g.tensor(n.inputs[1]).source.parts.size());
        for (size_t k : parts) CHECK(k <= CK_WEIGHT_MAX_PARTS);
        size_t total = 0;
        for (size_t k : parts) total += k;
        CHECK(total == static_cast<size_t>(count));
        CHECK(parts.size() == static_cast<size_t>((count + CK_WEIGHT_MAX_PARTS - 1) / CK_WEIGHT_MAX_PARTS));
    }
}

TEST_CASE("fuse_parallel_linears: GEMMs of one input become one GEMM and column views", "[passes]")
{
    CHECK(check_pass("fuse_parallel_linears", R"(
        MATMUL x[T, 8]:carry, wa[4, 8]:weight -> a[T, 4]  transpose_b=1
        MATMUL x[T, 8]:carry, wb[6, 8]:weight -> b[T, 6]  transpose_b=1
        MATMUL a[T, 4], v[2, 4]:weight -> c[T, 2]  transpose_b=1
        MATMUL b[T, 6], u[2, 6]:weight -> d[T, 2]  transpose_b=1
        ADD c[T, 2], d[T, 2] -> out[T, 2]:output
    )", R"(
        MATMUL x[T, 8]:carry, w{a,b}[10, 8]:weight -> {a,b}[T, 10]  transpose_b=1
        SLICE {a,b}[T, 10] -> a[T, 4]  length=4 start=0
        SLICE {a,b}[T, 10] -> b[T, 6]  length=6 start=4
        MATMUL a[T, 4], v[2, 4]:weight -> c[T, 2]  transpose_b=1
        MATMUL b[T, 6], u[2, 6]:weight -> d[T, 2]  transpose_b=1
        ADD c[T, 2], d[T, 2] -> out[T, 2]:output
    )"));
}

TEST_CASE("fuse_parallel_linears: GEMMs of different inputs do not group", "[passes]")
{
    const char *graph = R"(
        RMSNORM x[T, 8]:carry, nw[8]:weight -> y[T, 8]  eps=1e-05
        MATMUL x[T, 8]:carry, w1[4, 8]:weight -> a[T, 4]  transpose_b=1
        MATMUL y[T, 8], w2[4, 8]:weight -> b[T, 4]  transpose_b=1
        GLU a[T, 4], b[T, 4] -> out[T, 4]:output  act="silu"
    )";
    CHECK_FALSE(check_pass("fuse_parallel_linears", graph, graph));
}

TEST_CASE("dce removes dead chains and weights, keeps side effects and outputs", "[passes]")
{
    CHECK(check_pass("dce", R"(
        MATMUL x[T, 32]:carry, w[8, 32]:weight -> k[T, 8]  transpose_b=1
        MATMUL x[T, 32]:carry, w[8, 32]:weight -> v[T, 8]  transpose_b=1
        ; unread, but writes the cache
        KV_STORE k[T, 8], v[T, 8] -> kv[2, 2, T, 4]  head_dim=4 kv_heads=2
        MATMUL x[T, 32]:carry, dead_w[8, 32]:weight -> dead1[T, 8]  transpose_b=1
        GLU dead1[T, 8], dead1[T, 8] -> dead2[T, 8]  act="silu"
        ADD x[T, 32]:carry, x[T, 32]:carry -> x_out[T, 32]:carry
    )", R"(
        MATMUL x[T, 32]:carry, w[8, 32]:weight -> k[T, 8]  transpose_b=1
        MATMUL x[T, 32]:carry, w[8, 32]:weight -> v[T, 8]  transpose_b=1
        KV_STORE k[T, 8], v[T, 8] -> kv[2, 2, T, 4]  head_dim=4 kv_heads=2
        ADD x[T, 32]:carry, x[T, 32]:carry -> x_out[T, 32]:carry
    )"));
}

TEST_CASE("pipeline: every pass runs, can be disabled, and rejects unknown names", "[passes]")
{
    Program p = program_of(tiny_llama());
    PipelineOptions o;
    o.disabled = {"fuse_parallel_linears"};
    auto ran = run_pipeline(p, o);
    CHECK(ran == std::vector<std::string>{"eliminate_reshapes", "absorb_blas", "constant_fold", "absorb_causal_mask",
                                          "fuse_dags", "fuse_patterns", "fuse_matmul_add", "dce", "fuse_elementwise",
                                          "fold_layers"});
    CHECK(p.block.has_tensor("self_attn.q_proj.weight"));
    PipelineOptions bad;
    bad.disabled = {"fuse_everything"};
    CHECK_THROWS_AS(run_pipeline(p, bad), Error);
}
