// Graph passes: graph in -> expected graph out, and the cases each pass must
// leave alone (a second consumer blocks fusion, absorption must not fire on a
// transpose of other dims, a mask that is not causal stays, ...).
#include "helpers.h"

#include <cmath>
#include <limits>

#include "passes/pass.h"
#include "support/util.h"
#include "ir/constants.h"

using namespace ckc;
using namespace ckc_test;

namespace {

// A Program whose header is built by hand; constants carry values.
struct P {
    Program p;
    Graph &g = p.header;
    P() { p.info.kind = ModelKind::Graph; }
    void input(const std::string &n, Shape s, DType dt = DType::F32) { g.add_tensor({n, s, dt, Storage::Input, {}}); }
    void weight(const std::string &n, Shape s)
    {
        Tensor t{n, s, DType::F32, Storage::Weight, {}};
        t.source.parts = {n};
        t.source.part_shapes = {s};
        g.add_tensor(t);
    }
    // a constant with values (as constant folding would produce)
    std::string constant(const std::string &n, Shape s, std::vector<double> v, DType dt = DType::F32)
    {
        ConstData d;
        d.dtype = dt;
        d.shape = std::move(s);
        d.v = std::move(v);
        return add_constant(p, g, n, d);
    }
    void node(Op op, std::vector<std::string> in, const std::string &out, std::map<std::string, Attr> attrs = {},
              Storage st = Storage::Activation)
    {
        add_op(g, op, std::move(in), out, std::move(attrs), st);
    }
    void output(const std::string &t)
    {
        g.tensor(t).storage = Storage::Output;
        g.mark_output(t);
    }
};

std::vector<std::string> ops(const Graph &g)
{
    std::vector<std::string> out;
    for (const Node &n : g.nodes()) out.push_back(op_name(n.op));
    return out;
}

const Node &only(const Graph &g, Op op)
{
    const Node *found = nullptr;
    for (const Node &n : g.nodes())
        if (n.op == op) {
            REQUIRE(found == nullptr);
            found = &n;
        }
    REQUIRE(found != nullptr);
    return *found;
}

using V = std::vector<std::string>;
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---- eliminate_reshapes ----------------------------------------------------------------

TEST_CASE("eliminate_reshapes: identity reshapes go, chains collapse", "[graph-passes]")
{
    CHECK(check_pass("eliminate_reshapes", R"(
        RESHAPE x[2, 3, 4]:input -> same[2, 3, 4]  shape=[2, 3, 4]
        RESHAPE same[2, 3, 4] -> a[6, 4]  shape=[6, 4]
        RESHAPE a[6, 4] -> b[24]  shape=[24]
        RELU b[24] -> y[24]:output
    )", R"(
        RESHAPE x[2, 3, 4]:input -> b[24]  shape=[24]
        RELU b[24] -> y[24]:output
    )"));
}

TEST_CASE("eliminate_reshapes: GEMMs run on the unflattened batch; bias ADDs follow", "[graph-passes]")
{
    // torch's Linear on 3-D: view [10, 8], addmm, view back
    CHECK(check_pass("eliminate_reshapes", R"(
        RESHAPE x[2, 5, 8]:input -> flat[10, 8]  shape=[10, 8]
        MATMUL flat[10, 8], w[16, 8]:weight -> mm[10, 16]  transpose_b=1
        ADD mm[10, 16], b[16]:weight -> biased[10, 16]
        RESHAPE biased[10, 16] -> y[2, 5, 16]  shape=[2, 5, 16]
        RELU y[2, 5, 16] -> z[2, 5, 16]:output
    )", R"(
        MATMUL x[2, 5, 8]:input, w[16, 8]:weight -> mm_nd[2, 5, 16]  transpose_b=1
        ADD mm_nd[2, 5, 16], b[16]:weight -> biased_nd[2, 5, 16]
        RELU biased_nd[2, 5, 16] -> z[2, 5, 16]:output
    )"));
}

TEST_CASE("eliminate_reshapes: bmm over flattened heads becomes a 4-D MATMUL", "[graph-passes]")
{
    P t;
    t.input("q", {2, 4, 6, 8});
    t.input("k", {2, 4, 8, 6});
    t.node(Op::RESHAPE, {"q"}, "q3", {{"shape", std::vector<int64_t>{8, 6, 8}}});
    t.node(Op::RESHAPE, {"k"}, "k3", {{"shape", std::vector<int64_t>{8, 8, 6}}});
    t.node(Op::MATMUL, {"q3", "k3"}, "s3");
    t.node(Op::RESHAPE, {"s3"}, "s", {{"shape", std::vector<int64_t>{2, 4, 6, 6}}});
    t.node(Op::EXP, {"s"}, "e");
    t.output("e");
    CHECK(eliminate_reshapes(t.g));
    CHECK(ops(t.g) == V{"MATMUL", "EXP"});
    CHECK(t.g.nodes().at(0).inputs == V{"q", "k"});

    SECTION("not when the reshape moves data between the contracted dims")
    {
        P u;
        u.input("q", {2, 4, 6, 8});
        u.input("k", {8, 6, 5});
        u.node(Op::RESHAPE, {"q"}, "q3", {{"shape", std::vector<int64_t>{8, 8, 6}}});  // [6, 8] -> [8, 6]
        u.node(Op::MATMUL, {"q3", "k"}, "s3");
        u.output("s3");
        CHECK_FALSE(eliminate_reshapes(u.g));
    }
}

TEST_CASE("eliminate_reshapes: an identity reshape into an output hands the buffer to its producer",
          "[graph-passes]")
{
    CHECK(check_pass("eliminate_reshapes", R"(
        MATMUL x[4, 8]:input, w[8, 8]:weight -> mm[4, 8]  transpose_b=1
        RESHAPE mm[4, 8] -> out[4, 8]:output  shape=[4, 8]
    )", R"(
        [mm] MATMUL x[4, 8]:input, w[8, 8]:weight -> out[4, 8]:output  transpose_b=1
    )"));
}

// ---- absorb_blas ----------------------------------------------------------------------

TEST_CASE("absorb_blas: transposes and scalar factors go into the GEMM's flags (IR text)", "[graph-passes]")
{
    CHECK(check_pass("absorb_blas", R"(
        TRANSPOSE b[2, 5, 4]:input -> bt[2, 4, 5]  dim0=-1 dim1=-2
        MATMUL a[2, 3, 4]:input, bt[2, 4, 5] -> y[2, 3, 5]
        MUL y[2, 3, 5] -> z[2, 3, 5]  scalar=0.5
        RELU z[2, 3, 5] -> r[2, 3, 5]:output
    )", R"(
        MATMUL a[2, 3, 4]:input, b[2, 5, 4]:input -> y[2, 3, 5]  alpha=0.5 transpose_b=1
        RELU y[2, 3, 5] -> r[2, 3, 5]:output
    )"));
    // a transpose of the batch dims stays
    CHECK_FALSE(check_pass("absorb_blas", R"(
        TRANSPOSE b[5, 4, 6]:input -> bt[4, 5, 6]  dim0=0 dim1=1
        MATMUL a[4, 3, 5]:input, bt[4, 5, 6] -> y[4, 3, 6]:output
    )", R"(
        TRANSPOSE b[5, 4, 6]:input -> bt[4, 5, 6]  dim0=0 dim1=1
        MATMUL a[4, 3, 5]:input, bt[4, 5, 6] -> y[4, 3, 6]:output
    )"));
}

TEST_CASE("absorb_blas: last-two-dims transpose -> transpose_b; others stay", "[graph-passes]")
{
    P t;
    t.input("a", {2, 3, 4});
    t.input("b", {2, 5, 4});
    t.node(Op::TRANSPOSE, {"b"}, "bt", {{"dim0", int64_t(-1)}, {"dim1", int64_t(-2)}});
    t.node(Op::MATMUL, {"a", "bt"}, "y");
    t.output("y");
    CHECK(absorb_blas(t.g, t.p));
    CHECK(ops(t.g) == V{"MATMUL"});
    CHECK(only(t.g, Op::MATMUL).inputs == V{"a", "b"});
    CHECK(only(t.g, Op::MATMUL).i("transpose_b") == 1);

    SECTION("a transpose of the batch dims is not a transpose_b")
    {
        P u;
        u.input("a", {4, 3, 5});
        u.input("b", {5, 4, 6});
        u.node(Op::TRANSPOSE, {"b"}, "bt", {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});  // [4, 5, 6]
        u.node(Op::MATMUL, {"a", "bt"}, "y");
        u.output("y");
        CHECK_FALSE(absorb_blas(u.g, u.p));
        CHECK(ops(u.g) == V{"TRANSPOSE", "MATMUL"});
    }
}

TEST_CASE("absorb_blas: a transposed A (the backward's x^T @ dy) -> transpose_a, shape kept", "[graph-passes]")
{
    P t;
    t.input("x", {6, 4});   // [T, K]: the GEMM wants x^T [K, T]
    t.input("dy", {6, 5});  // [T, N]
    t.node(Op::PERMUTE, {"x"}, "xt", {{"perm", std::vector<int64_t>{1, 0}}});
    t.node(Op::MATMUL, {"xt", "dy"}, "dw");
    t.output("dw");
    CHECK(absorb_blas(t.g, t.p));
    t.g.verify("test");
    CHECK(ops(t.g) == V{"MATMUL"});
    const Node &mm = only(t.g, Op::MATMUL);
    CHECK(mm.inputs == V{"x", "dy"});
    CHECK(mm.i("transpose_a") == 1);
    CHECK(t.g.tensor("dw").shape == Shape{4, 5});

    SECTION("a transpose something else reads stays for it; the GEMM reads the original")
    {
        P u;
        u.input("x", {6, 4});
        u.input("dy", {6, 5});
        u.node(Op::TRANSPOSE, {"x"}, "xt", {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
        u.node(Op::MATMUL, {"xt", "dy"}, "dw");
        u.node(Op::RELU, {"xt"}, "r");
        u.output("dw");
        u.output("r");
        CHECK(absorb_blas(u.g, u.p));
        CHECK(only(u.g, Op::MATMUL).inputs == V{"x", "dy"});
        CHECK(ops(u.g) == V{"TRANSPOSE", "MATMUL", "RELU"});
    }
}

TEST_CASE("absorb_blas: constant B is pre-transposed at load; scalars go into alpha", "[graph-passes]")
{
    P t;
    t.input("x", {3, 8});
    t.weight("w", {8, 16});  // Conv1D / addmm layout [in, out]
    t.node(Op::MUL, {"x"}, "xs", {{"scalar", 2.0}});
    t.node(Op::MATMUL, {"xs", "w"}, "mm");
    t.node(Op::DIV, {"mm"}, "y", {{"scalar", 4.0}});
    t.node(Op::RELU, {"y"}, "z");
    t.output("z");
    CHECK(absorb_blas(t.g, t.p));
    t.g.verify("test");
    CHECK(ops(t.g) == V{"MATMUL", "RELU"});
    const Node &mm = only(t.g, Op::MATMUL);
    CHECK(mm.inputs[0] == "x");
    CHECK(mm.i("transpose_b") == 1);
    CHECK(mm.f("alpha") == Approx(0.5));
    const Tensor &wt = t.g.tensor(mm.inputs[1]);
    CHECK(wt.shape == Shape{16, 8});
    CHECK(wt.source.transposed);
    CHECK(wt.source.parts == V{"w"});

    SECTION("not through a value something else reads")
    {
        P u;
        u.input("x", {3, 8});
        u.weight("w", {16, 8});
        u.node(Op::MATMUL, {"x", "w"}, "mm", {{"transpose_b", int64_t(1)}});
        u.node(Op::DIV, {"mm"}, "y", {{"scalar", 4.0}});
        u.node(Op::ADD, {"mm", "y"}, "z");  // mm read twice
        u.output("z");
        CHECK_FALSE(absorb_blas(u.g, u.p));
        CHECK(ops(u.g) == V{"MATMUL", "DIV", "ADD"});
    }
}

// ---- constant_fold ----------------------------------------------------------------------

TEST_CASE("constant_fold: a causal mask built from arange folds to one constant", "[graph-passes]")
{
    P t;
    t.input("x", {3, 3});
    t.node(Op::ARANGE, {}, "i", {{"start", 0.0}, {"end", 3.0}, {"dtype", std::string("i64")}});
    t.node(Op::RESHAPE, {"i"}, "col", {{"shape", std::vector<int64_t>{3, 1}}});
    t.node(Op::CMP, {"i", "col"}, "above", {{"fn", std::string("gt")}});  // j > i
    t.node(Op::MASKED_FILL, {"x", "above"}, "y", {{"value", -kInf}});
    t.output("y");
    CHECK(constant_fold(t.g, t.p));
    t.g.verify("test");
    CHECK(ops(t.g) == V{"MASKED_FILL"});
    const Tensor &m = t.g.tensor(only(t.g, Op::MASKED_FILL).inputs[1]);
    CHECK(m.storage == Storage::Weight);
    CHECK(m.dtype == DType::Bool);
    CHECK(t.p.constants.at(m.source.parts[0]).v == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0});

    SECTION("a value derived from a layer's weight keeps the layer in its name (the layers still fold)")
    {
        P u;
        u.input("x", {4});
        u.constant("model.layers.3.norm.weight", {4}, {0.5, -1, 2, 0});
        u.node(Op::ADD, {"model.layers.3.norm.weight"}, "w1", {{"scalar", 1.0}});  // Gemma's 1 + w
        u.node(Op::MUL, {"x", "w1"}, "y");
        u.output("y");
        CHECK(constant_fold(u.g, u.p));
        const Tensor &w = u.g.tensor(only(u.g, Op::MUL).inputs[1]);
        CHECK(w.name == "model.layers.3.norm.weight.add");
        CHECK(u.p.constants.at(w.name).v == std::vector<double>{1.5, 0, 3, 1});
    }

    SECTION("a mask op on a run-time value is left to run (select.c)")
    {
        P u;
        u.input("x", {3});
        u.node(Op::CMP, {"x"}, "pos", {{"fn", std::string("gt")}, {"scalar", 0.0}});
        u.output("pos");
        CHECK_FALSE(constant_fold(u.g, u.p));
        CHECK(ops(u.g) == V{"CMP"});
    }
}

// ---- absorb_causal_mask ----------------------------------------------------------------------

namespace {
std::vector<double> tri(int S, bool above, double in, double out)
{
    std::vector<double> v;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) v.push_back((above ? j > i : j <= i) ? in : out);
    return v;
}
}  // namespace

TEST_CASE("absorb_causal_mask: a constant upper-triangular mask becomes CAUSAL_MASK (IR text)", "[graph-passes]")
{
    auto mask = [](bool above, double in, double out, DType dt) {
        ConstData d;
        d.dtype = dt;
        d.shape = {4, 4};
        d.v = tri(4, above, in, out);
        return d;
    };
    CHECK(check_pass("absorb_causal_mask", R"(
        MASKED_FILL x[2, 4, 4]:input, mask[4, 4]:bool:weight -> y[2, 4, 4]:output  value=-inf
    )", R"(
        CAUSAL_MASK x[2, 4, 4]:input -> y[2, 4, 4]:output
    )", {{"mask", mask(true, 1, 0, DType::Bool)}}));
    CHECK(check_pass("absorb_causal_mask", R"(
        ADD x[4, 4]:input, mask[4, 4]:weight -> y[4, 4]
        SOFTMAX y[4, 4] -> p[4, 4]:output  axis=-1
    )", R"(
        CAUSAL_MASK x[4, 4]:input -> y[4, 4]
        SOFTMAX y[4, 4] -> p[4, 4]:output  axis=-1
    )", {{"mask", mask(true, -kInf, 0, DType::F32)}}));
    // a mask that is not causal (the diagonal masked too) stays
    CHECK_FALSE(check_pass("absorb_causal_mask", R"(
        MASKED_FILL x[2, 4, 4]:input, mask[4, 4]:bool:weight -> y[2, 4, 4]:output  value=-inf
    )", R"(
        MASKED_FILL x[2, 4, 4]:input, mask[4, 4]:bool:weight -> y[2, 4, 4]:output  value=-inf
    )", {{"mask", mask(false, 1, 0, DType::Bool)}}));
}

TEST_CASE("absorb_causal_mask: bool and float -inf forms", "[graph-passes]")
{
    SECTION("MASKED_FILL(x, upper-triangular bool, -inf)")
    {
        P t;
        t.input("x", {2, 4, 4});
        std::string m = t.constant("mask", {1, 4, 4}, tri(4, true, 1, 0), DType::Bool);
        t.node(Op::MASKED_FILL, {"x", m}, "y", {{"value", -kInf}});
        t.output("y");
        CHECK(absorb_causal_mask(t.g, t.p));
        CHECK(ops(t.g) == V{"CAUSAL_MASK"});
    }
    SECTION("WHERE(lower-triangular bool, x, finfo.min) feeding softmax")
    {
        P t;
        t.input("x", {4, 4});
        std::string m = t.constant("mask", {4, 4}, tri(4, false, 1, 0), DType::Bool);
        std::string v = t.constant("minval", {}, {-3.4028234663852886e38});
        t.node(Op::WHERE, {m, "x", v}, "w");
        t.node(Op::SOFTMAX, {"w"}, "p", {{"axis", int64_t(-1)}});
        t.output("p");
        CHECK(absorb_causal_mask(t.g, t.p));
        CHECK(ops(t.g) == V{"CAUSAL_MASK", "SOFTMAX"});
    }
    SECTION("ADD(x, 0 / -inf float mask)")
    {
        P t;
        t.input("x", {4, 4});
        std::string m = t.constant("mask", {4, 4}, tri(4, true, -kInf, 0));
        t.node(Op::ADD, {"x", m}, "y");
        t.output("y");
        CHECK(absorb_causal_mask(t.g, t.p));
        CHECK(ops(t.g) == V{"CAUSAL_MASK"});
    }
    SECTION("left alone: a padding mask, an offset diagonal, a finite fill not feeding softmax")
    {
        P t;
        t.input("x", {4, 4});
        std::vector<double> pad(16, 0);
        pad[3] = pad[7] = pad[11] = pad[15] = 1;  // the last key masked for every query
        std::string m1 = t.constant("pad", {4, 4}, pad, DType::Bool);
        std::string m2 = t.constant("offset", {4, 4}, tri(4, true, 1, 0), DType::Bool);
        t.p.constants[m2].v[1] = 0;  // j = i + 1 visible in row 0
        std::string m3 = t.constant("tri", {4, 4}, tri(4, true, 1, 0), DType::Bool);
        t.node(Op::MASKED_FILL, {"x", m1}, "a", {{"value", -kInf}});
        t.node(Op::MASKED_FILL, {"a", m2}, "b", {{"value", -kInf}});
        t.node(Op::MASKED_FILL, {"b", m3}, "c", {{"value", -1e30}});  // finite, and c is an output
        t.output("c");
        CHECK_FALSE(absorb_causal_mask(t.g, t.p));
        CHECK(ops(t.g) == V{"MASKED_FILL", "MASKED_FILL", "MASKED_FILL"});
    }
}

// ---- fuse_dags -----------------------------------------------------------------------------

namespace {
void gelu_tanh_dag(P &t, double c3 = 0.044715)
{
    t.node(Op::MUL, {"x"}, "half", {{"scalar", 0.5}});
    t.node(Op::POW, {"x"}, "cube", {{"exponent", 3.0}});
    t.node(Op::MUL, {"cube"}, "c", {{"scalar", c3}});
    t.node(Op::ADD, {"x", "c"}, "inner");
    t.node(Op::MUL, {"inner"}, "u", {{"scalar", 0.7978845608028654}});
    t.node(Op::TANH, {"u"}, "th");
    t.node(Op::ADD, {"th"}, "one", {{"scalar", 1.0}});
    t.node(Op::MUL, {"half", "one"}, "y");
}
}  // namespace

TEST_CASE("fuse_dags: the tanh GELU and a softmax written out become one node each (IR text)", "[graph-passes]")
{
    CHECK(check_pass("fuse_dags", R"(
        MUL x[2, 16]:input -> half[2, 16]  scalar=0.5
        POW x[2, 16]:input -> cube[2, 16]  exponent=3
        MUL cube[2, 16] -> c[2, 16]  scalar=0.044715
        ADD x[2, 16]:input, c[2, 16] -> inner[2, 16]
        MUL inner[2, 16] -> u[2, 16]  scalar=0.7978845608028654
        TANH u[2, 16] -> th[2, 16]
        ADD th[2, 16] -> one[2, 16]  scalar=1
        MUL half[2, 16], one[2, 16] -> y[2, 16]:output
    )", R"(
        GELU x[2, 16]:input -> y[2, 16]:output  act="gelu_tanh"
    )"));
    CHECK(check_pass("fuse_dags", R"(
        REDUCE_MAX x[3, 8]:input -> mx[3, 1]  axis=-1 keepdim=1
        SUB x[3, 8]:input, mx[3, 1] -> d[3, 8]
        EXP d[3, 8] -> e[3, 8]
        REDUCE_SUM e[3, 8] -> s[3, 1]  axis=-1 keepdim=1
        DIV e[3, 8], s[3, 1] -> p[3, 8]:output
    )", R"(
        SOFTMAX x[3, 8]:input -> p[3, 8]:output  axis=1
    )"));
}

TEST_CASE("fuse_dags: the 8-node tanh GELU becomes GELU", "[graph-passes]")
{
    P t;
    t.input("x", {2, 16});
    gelu_tanh_dag(t);
    t.output("y");
    CHECK(fuse_dags(t.g));
    t.g.verify("test");
    CHECK(ops(t.g) == V{"GELU"});
    CHECK(only(t.g, Op::GELU).s("act") == "gelu_tanh");
    CHECK(only(t.g, Op::GELU).output == "y");

    SECTION("left alone: another constant, or an interior value read elsewhere")
    {
        P u;
        u.input("x", {2, 16});
        gelu_tanh_dag(u, 0.05);
        u.output("y");
        CHECK_FALSE(fuse_dags(u.g));
        P w;
        w.input("x", {2, 16});
        gelu_tanh_dag(w);
        w.node(Op::ADD, {"y", "th"}, "z");  // tanh also read outside the pattern
        w.output("z");
        CHECK_FALSE(fuse_dags(w.g));
        CHECK(w.g.nodes().size() == 9);
    }
}

TEST_CASE("fuse_dags: a hand-written softmax becomes SOFTMAX", "[graph-passes]")
{
    P t;
    t.input("s", {2, 4, 4});
    t.node(Op::REDUCE_MAX, {"s"}, "m", {{"axis", int64_t(-1)}, {"keepdim", int64_t(1)}});
    t.node(Op::SUB, {"s", "m"}, "d");
    t.node(Op::EXP, {"d"}, "e");
    t.node(Op::REDUCE_SUM, {"e"}, "z", {{"axis", int64_t(-1)}, {"keepdim", int64_t(1)}});
    t.node(Op::DIV, {"e", "z"}, "p");
    t.output("p");
    CHECK(fuse_dags(t.g));
    CHECK(ops(t.g) == V{"SOFTMAX"});
    CHECK(only(t.g, Op::SOFTMAX).i("axis") == 2);

    SECTION("left alone: max and sum over different axes")
    {
        P u;
        u.input("s", {2, 4, 4});
        u.node(Op::REDUCE_MAX, {"s"}, "m", {{"axis", int64_t(1)}, {"keepdim", int64_t(1)}});
        u.node(Op::SUB, {"s", "m"}, "d");
        u.node(Op::EXP, {"d"}, "e");
        u.node(Op::REDUCE_SUM, {"e"}, "z", {{"axis", int64_t(2)}, {"keepdim", int64_t(1)}});
        u.node(Op::DIV, {"e", "z"}, "p");
        u.output("p");
        fuse_dags(u.g);
        CHECK(ops(u.g) != V{"SOFTMAX"});
        CHECK(u.g.nodes().size() >= 2);
        bool max_kept = false;
        for (const Node &n : u.g.nodes()) max_kept |= n.op == Op::REDUCE_MAX;
        CHECK(max_kept);
    }
}

// ---- fuse_patterns -------------------------------------------------------------------------

namespace {
void attention_chain(P &t, bool causal)
{
    t.input("q", {2, 4, 8, 16});
    t.input("k", {2, 4, 8, 16});
    t.input("v", {2, 4, 8, 16});
    t.node(Op::MATMUL, {"q", "k"}, "s", {{"transpose_b", int64_t(1)}, {"alpha", 0.25}});
    std::string sm_in = "s";
    if (causal) {
        t.node(Op::CAUSAL_MASK, {"s"}, "sm");
        sm_in = "sm";
    }
    t.node(Op::SOFTMAX, {sm_in}, "p", {{"axis", int64_t(-1)}});
    t.node(Op::MATMUL, {"p", "v"}, "o");
}
}  // namespace

TEST_CASE("fuse_patterns: MATMUL -> [CAUSAL_MASK] -> SOFTMAX -> MATMUL becomes ATTENTION", "[graph-passes]")
{
    for (bool causal : {false, true}) {
        P t;
        attention_chain(t, causal);
        t.output("o");
        CHECK(fuse_patterns(t.g));
        t.g.verify("test");
        CHECK(ops(t.g) == V{"ATTENTION"});
        const Node &a = only(t.g, Op::ATTENTION);
        CHECK(a.inputs == V{"q", "k", "v"});
        CHECK(a.f("scale") == 0.25);
        CHECK(a.i("causal") == (causal ? 1 : 0));
    }
    SECTION("a second consumer of the scores blocks the fusion")
    {
        P t;
        attention_chain(t, false);
        t.output("o");
        t.output("s");  // the scores are returned too
        CHECK_FALSE(fuse_patterns(t.g));
        CHECK(ops(t.g) == V{"MATMUL", "SOFTMAX", "MATMUL"});
    }
}

TEST_CASE("fuse_patterns: attention reads heads in place of the head transposes", "[graph-passes]")
{
    P t;
    t.input("x", {2, 8, 64});  // [B, S, H*D], H = 4
    for (const char *n : {"q", "k", "v"}) {
        t.node(Op::RESHAPE, {"x"}, std::string(n) + "4", {{"shape", std::vector<int64_t>{2, 8, 4, 16}}});
        t.node(Op::TRANSPOSE, {std::string(n) + "4"}, n, {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
    }
    t.node(Op::ATTENTION, {"q", "k", "v"}, "o", {{"scale", 0.25}, {"causal", int64_t(1)}});
    t.node(Op::TRANSPOSE, {"o"}, "ot", {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
    t.node(Op::RESHAPE, {"ot"}, "y", {{"shape", std::vector<int64_t>{2, 8, 64}}});
    t.output("y");
    CHECK(fuse_patterns(t.g));
    t.g.verify("test");
    CHECK(ops(t.g) == V{"ATTENTION"});
    const Node &a = only(t.g, Op::ATTENTION);
    CHECK(a.inputs == V{"x", "x", "x"});
    CHECK(a.i("heads") == 4);
    CHECK(a.output == "y");
}

TEST_CASE("fuse_patterns: ADD(x, bias) -> RELU becomes BIAS_RELU, unless the sum is read elsewhere",
          "[graph-passes]")
{
    CHECK(check_pass("fuse_patterns", R"(
        ADD x[4, 16]:input, b[16]:weight -> s[4, 16]
        RELU s[4, 16] -> y[4, 16]:output
    )", R"(
        BIAS_RELU x[4, 16]:input, b[16]:weight -> y[4, 16]:output
    )"));
    const char *read_twice = R"(
        ADD x[4, 16]:input, b[16]:weight -> s[4, 16]
        RELU s[4, 16] -> y[4, 16]
        ADD s[4, 16], y[4, 16] -> z[4, 16]:output
    )";
    CHECK_FALSE(check_pass("fuse_patterns", read_twice, read_twice));
}

TEST_CASE("fuse_matmul_add: an ADD of a scalar (one input) is left alone", "[graph-passes]")
{
    const char *graph = R"(
        MATMUL x[4, 8]:input, w[8, 8]:weight -> mm[4, 8]  transpose_b=1
        ADD mm[4, 8] -> y[4, 8]:output  scalar=1.0
    )";
    CHECK_FALSE(check_pass("fuse_matmul_add", graph, graph));
}

TEST_CASE("constant_fold: a fold-only op producing an output becomes a COPY of its value", "[graph-passes]")
{
    CHECK(check_pass("constant_fold", R"(
        FULL -> y[2, 3]:output  dtype="f32" shape=[2, 3] value=1.5
        RELU x[2, 3]:input -> z[2, 3]:output
    )", R"(
        COPY const.y[2, 3]:weight -> y[2, 3]:output
        RELU x[2, 3]:input -> z[2, 3]:output
    )"));
}

TEST_CASE("fuse_elementwise: a normalization's chain becomes one EW program over broadcast inputs", "[passes]")
{
    // (x - m) * r * g + 0.5 with column m, r [4,1], row g [8]; the interior values die inside
    CHECK(check_pass("fuse_elementwise", R"ir(
        SUB x[4, 8]:input, m[4, 1]:input -> d[4, 8]
        MUL d[4, 8], r[4, 1]:input -> n[4, 8]
        MUL n[4, 8], g[8]:weight -> s[4, 8]
        ADD s[4, 8] -> y[4, 8]:output  scalar=0.5
    )ir", R"ir(
        EW x[4, 8]:input, m[4, 1]:input, r[4, 1]:input, g[8]:weight -> y[4, 8]:output  program="sub(i0, i1); mul(v0, i2); mul(v1, i3); add(v2, 0.5)" shape=[4, 8]
    )ir"));
}

TEST_CASE("fuse_elementwise: leaves alone values read outside, other shapes and broadcasts it cannot index",
          "[passes]")
{
    // d is also read by the sum: it stays, and the group after it starts from it; the [4, 1] product has
    // another shape than the root (and alone, nothing to fuse); b [2, 1, 8] broadcasts along a middle dim
    CHECK(check_pass("fuse_elementwise", R"ir(
        SUB x[4, 8]:input, m[4, 1]:input -> d[4, 8]
        REDUCE_SUM d[4, 8] -> rs[4, 1]  axis=1 keepdim=1
        MUL rs[4, 1], m[4, 1]:input -> q[4, 1]
        MUL d[4, 8], q[4, 1] -> n[4, 8]
        EXP n[4, 8] -> e[4, 8]:output
        MUL a[2, 4, 8]:input, b[2, 1, 8]:input -> c[2, 4, 8]
        NEG c[2, 4, 8] -> o[2, 4, 8]:output
    )ir", R"ir(
        SUB x[4, 8]:input, m[4, 1]:input -> d[4, 8]
        REDUCE_SUM d[4, 8] -> rs[4, 1]  axis=1 keepdim=1
        MUL rs[4, 1], m[4, 1]:input -> q[4, 1]
        EW d[4, 8], q[4, 1] -> e[4, 8]:output  program="mul(i0, i1); exp(v0)" shape=[4, 8]
        MUL a[2, 4, 8]:input, b[2, 1, 8]:input -> c[2, 4, 8]
        NEG c[2, 4, 8] -> o[2, 4, 8]:output
    )ir"));
}

TEST_CASE("fuse_elementwise: bad programs are refused naming the instruction", "[passes]")
{
    auto bad = [](const std::string &program) {
        std::string text = "EW x[4]:input -> y[4]:output  program=\"" + program + "\" shape=[4]\n";
        try {
            parse_graph(text, "ew").verify("test");
        } catch (const Error &e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK_THAT(bad("mul(i0, i1)"), Catch::Contains("instruction 0 'mul(i0, i1)': operand 'i1' names no input"));
    CHECK_THAT(bad("neg(i0); add(v1, 2)"), Catch::Contains("operand 'v1' names no earlier value"));
    CHECK_THAT(bad("frob(i0)"), Catch::Contains("unknown op"));
    CHECK_THAT(bad("add(1, 2)"), Catch::Contains("at most one number operand"));
    CHECK_THAT(bad("tanh(i0, i0)"), Catch::Contains("takes 1 operand"));
    CHECK(bad("tanh(i0); pow(v0, 3); sub(1, v1)") == "accepted");
}
