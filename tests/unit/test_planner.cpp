// Planner invariants on random DAGs and on the Llama block, under every
// ablation: no two live allocations overlap, and a simulated run of the plan
// never reads a value that an alias or an in-place write has clobbered.
#include "helpers.h"

#include <random>
#include <sstream>

#include "passes/pass.h"
#include "planner/planner.h"
#include "support/util.h"
#include "tools/random_weights.h"

using namespace ckc;
using namespace ckc_test;
using Catch::Matchers::Contains;

namespace {

std::vector<PlanOptions> all_ablations()
{
    std::vector<PlanOptions> out;
    for (auto order : {OrderPolicy::MemoryAware, OrderPolicy::Fifo})
        for (auto placement : {PlacementPolicy::FirstFit, PlacementPolicy::Naive})
            for (bool inplace : {true, false}) {
                PlanOptions o;
                o.order = order;
                o.placement = placement;
                o.inplace = inplace;
                out.push_back(o);
            }
    return out;
}

// The tensor whose data a tensor shows: a planned view shows its input's data.
std::string base_of(const Graph &g, const SectionPlan &sp, std::string t)
{
    for (;;) {
        const Node *p = g.producer(t);
        if (!p || !sp.views.count(p->name)) return t;
        t = p->inputs[0];
    }
}

// Simulates the plan with T = 1 (per-token layouts scale linearly, so T = 1
// decides overlap for every T): memory cells hold the name of the value in
// them; every read must find its own value.
void check_plan(const Graph &g, const SectionPlan &sp, const PlanOptions &o)
{
    INFO("order=" << (o.order == OrderPolicy::Fifo ? "fifo" : "memory")
                  << " placement=" << (o.placement == PlacementPolicy::Naive ? "naive" : "first-fit")
                  << " inplace=" << o.inplace);
    // 1. allocations live at the same time do not overlap; the arena holds them
    for (const auto &[a_name, a] : sp.alloc)
        for (const auto &[b_name, b] : sp.alloc) {
            if (a_name >= b_name || a.per_token != b.per_token) continue;
            bool live_together = a.birth <= b.death && b.birth <= a.death;
            bool overlap = a.offset < b.offset + b.size && b.offset < a.offset + a.size;
            CHECK_FALSE((live_together && overlap));
        }
    for (const auto &[n, a] : sp.alloc) {
        CHECK(a.offset % o.align == 0);
        CHECK(a.offset + a.size <= (a.per_token ? sp.per_token.arena : sp.fixed.arena));
    }
    // 2. bounds: lower bound <= arena <= naive sum
    CHECK(sp.per_token.lower_bound <= sp.per_token.arena);
    CHECK(sp.per_token.arena <= sp.per_token.naive);
    CHECK(sp.fixed.lower_bound <= sp.fixed.arena);
    CHECK(sp.fixed.arena <= sp.fixed.naive);

    // 3. simulate: a cell is (space, index); arena cells are 4-byte words
    std::map<std::pair<std::string, int64_t>, std::string> mem;
    auto cells = [&](const std::string &t) {
        const Region &r = sp.region.at(t);
        const Shape &s = g.tensor(t).shape;
        std::string space;
        int64_t base = 0;
        if (sp.alloc.count(r.root)) {
            space = sp.alloc.at(r.root).per_token ? "arena" : "fixed";
            base = sp.alloc.at(r.root).offset / 4;
        } else {
            space = r.root;  // carry, inputs, outputs: their own buffers
        }
        std::vector<std::pair<std::string, int64_t>> out;
        if (r.strided) {  // columns of every row of the root (T = 1)
            const Shape &rs = r.root == kCarryRoot ? s : g.tensor(r.root).shape;
            int64_t rows = shape_numel_fixed(s) / s.back(), W = rs.back();
            for (int64_t row = 0; row < rows; row++)
                for (int64_t c = 0; c < s.back(); c++) out.push_back({space, base + row * W + r.offset + c});
        } else {
            for (int64_t c = 0; c < shape_numel_fixed(s); c++) out.push_back({space, base + r.offset + c});
        }
        return out;
    };
    for (const auto &[name, t] : g.tensors())
        if (!g.producer(name) && t.storage != Storage::Weight)
            for (auto &c : cells(name)) mem[c] = name;
    for (const auto &nn : sp.order) {
        const Node &n = *g.node(nn);
        for (const auto &in : n.inputs) {
            if (g.tensor(in).storage == Storage::Weight) continue;
            std::string want = base_of(g, sp, in);
            for (auto &c : cells(in)) {
                INFO("node " << n.name << " reads " << in);
                REQUIRE(mem[c] == want);
            }
        }
        if (sp.views.count(n.name)) continue;
        for (auto &c : cells(n.output)) mem[c] = n.output;
    }
    for (const auto &out : g.outputs()) {
        INFO("section output " << out << " survives to the end");
        for (auto &c : cells(out)) CHECK(mem[c] == base_of(g, sp, out));
    }
}

// A random graph of LLM ops over [T, w] tensors: ADD and RMSNORM need
// contiguous inputs; GLU and MATMUL (input 0) also take column views.
Graph random_dag(std::mt19937 &rng, int n_nodes)
{
    Graph g;
    std::vector<int64_t> widths = {8, 16, 32};
    g.add_tensor({"x", {kTokens, 16}, DType::F32, Storage::Carry, {}});
    auto weight = [&](const std::string &name, Shape s) {
        if (!g.has_tensor(name)) g.add_tensor({name, s, DType::F32, Storage::Weight, {}});
        return name;
    };
    std::vector<std::string> pool = {"x"}, contiguous = {"x"};
    auto pick = [&](const std::vector<std::string> &from) { return from[rng() % from.size()]; };
    auto width = [&](const std::string &t) { return g.tensor(t).shape.back(); };
    for (int i = 0; i < n_nodes; i++) {
        Node n;
        n.name = n.output = "t" + std::to_string(i);
        int kind = static_cast<int>(rng() % 5);
        std::string a = pick(kind == 0 || kind == 1 ? contiguous : pool);
        if (kind == 0 || kind == 2) {  // ADD / SWIGLU: a partner of the same width
            std::vector<std::string> same;
            for (const auto &t : kind == 0 ? contiguous : pool)
                if (width(t) == width(a)) same.push_back(t);
            n.op = kind == 0 ? Op::ADD : Op::GLU;
            n.inputs = {a, pick(same)};
            if (kind == 2) n.attrs["act"] = std::string("silu");
        } else if (kind == 1) {
            n.op = Op::RMSNORM;
            n.inputs = {a, weight("nw" + std::to_string(width(a)), {width(a)})};
            n.attrs["eps"] = 1e-5;
        } else if (kind == 3) {
            n.op = Op::MATMUL;
            n.attrs["transpose_b"] = int64_t(1);
            int64_t b = widths[rng() % widths.size()];
            n.inputs = {a, weight("w" + std::to_string(width(a)) + "_" + std::to_string(b), {b, width(a)})};
        } else {
            std::string src = pick(contiguous);
            if (width(src) < 8) continue;
            int64_t len = 4 * (1 + static_cast<int64_t>(rng() % (width(src) / 4 - 1)));
            int64_t start = 4 * static_cast<int64_t>(rng() % ((width(src) - len) / 4 + 1));
            n.op = Op::SLICE;
            n.inputs = {src};
            n.attrs = {{"start", start}, {"length", len}};
        }
        g.add_node(n);
        pool.push_back(n.output);
        if (n.op != Op::SLICE) contiguous.push_back(n.output);
    }
    // a few section outputs, the last node always
    g.mark_output(g.nodes().back().output);
    for (int k = 0; k < 2; k++) g.mark_output(pool[1 + rng() % (pool.size() - 1)]);
    return g;
}

// A random graph of exported-graph ops over static shapes: views (RESHAPE,
// leading-row and column SLICEs), in-place candidates (unary ops, SOFTMAX,
// ADD), copies (TRANSPOSE), GEMMs and ATTENTION with planned scratch.
Graph random_static_dag(std::mt19937 &rng, int n_nodes)
{
    Graph g;
    g.add_tensor({"in", {2, 6, 8}, DType::F32, Storage::Input, {}});
    g.add_tensor({"w8", {8, 8}, DType::F32, Storage::Weight, {}});
    g.add_tensor({"b8", {8}, DType::F32, Storage::Weight, {}});
    std::vector<std::string> pool = {"in"};
    auto pick = [&] { return pool[rng() % pool.size()]; };
    auto shape = [&](const std::string &t) { return g.tensor(t).shape; };
    for (int i = 0; i < n_nodes; i++) {
        Node n;
        n.name = n.output = "t" + std::to_string(i);
        std::string a = pick();
        Shape sa = shape(a);
        switch (rng() % 9) {
        case 0: n.op = rng() % 2 ? Op::RELU : Op::EXP; n.inputs = {a}; break;
        case 1: {  // ADD with a same-shape partner, or a bias along the last dim
            std::vector<std::string> same;
            for (const auto &t : pool)
                if (shape(t) == sa) same.push_back(t);
            n.op = Op::ADD;
            n.inputs = {a, sa.back() == 8 && rng() % 2 ? std::string("b8") : same[rng() % same.size()]};
            break;
        }
        case 2: {  // RESHAPE: merge the two leading dims, or split the first
            n.op = Op::RESHAPE;
            Shape to = sa.size() >= 3 ? Shape{sa[0] * sa[1]} : Shape{2, sa[0] / 2};
            if (sa.size() >= 3) to.insert(to.end(), sa.begin() + 2, sa.end());
            else if (sa[0] % 2) continue;
            else to.insert(to.end(), sa.begin() + 1, sa.end());
            n.inputs = {a};
            n.attrs["shape"] = to;
            break;
        }
        case 3: {  // SLICE of leading rows (a contiguous view) or of the last dim (a column view)
            bool last = rng() % 2;
            int64_t axis = last ? static_cast<int64_t>(sa.size()) - 1 : 0, size = sa[axis];
            if (size < 2) continue;
            int64_t len = 1 + static_cast<int64_t>(rng() % (size - 1)), start = static_cast<int64_t>(rng() % (size - len + 1));
            n.op = Op::SLICE;
            n.inputs = {a};
            n.attrs = {{"axis", axis}, {"start", start}, {"length", len}};
            break;
        }
        case 4: n.op = Op::SOFTMAX; n.inputs = {a}; n.attrs["axis"] = int64_t(-1); break;
        case 5:
            if (sa.size() < 2) continue;
            n.op = Op::TRANSPOSE;
            n.inputs = {a};
            n.attrs = {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}};
            break;
        case 6:
            if (sa.back() != 8) continue;
            n.op = Op::MATMUL;
            n.inputs = {a, "w8"};
            n.attrs["transpose_b"] = int64_t(1);
            break;
        case 7: {  // ATTENTION over three tensors of one shape [.., S, D]
            if (sa.size() < 2) continue;
            std::vector<std::string> same;
            for (const auto &t : pool)
                if (shape(t) == sa) same.push_back(t);
            n.op = Op::ATTENTION;
            n.inputs = {a, same[rng() % same.size()], same[rng() % same.size()]};
            n.attrs = {{"scale", 0.5}, {"causal", int64_t(rng() % 2)}};
            if (rng() % 2) n.attrs["impl"] = std::string("flash");
            break;
        }
        default: n.op = Op::NEG; n.inputs = {a}; break;
        }
        g.add_node(n);
        pool.push_back(n.output);
    }
    g.tensor(g.nodes().back().output).storage = Storage::Output;
    g.mark_output(g.nodes().back().output);
    g.mark_output(pool[1 + rng() % (pool.size() - 1)]);
    return g;
}

// A gradient-chain test graph: input d0 [16, 32] and weight w of shape `w` ([out, 32]).
Graph chain_start(Shape w)
{
    Graph g;
    g.add_tensor({"d0", {16, 32}, DType::F32, Storage::Input, {}});
    g.add_tensor({"w", std::move(w), DType::F32, Storage::Weight, {}});
    return g;
}

// Adds node `out` = op(in) (a MATMUL against a weight in nn.Linear layout).
void add(Graph &g, const std::string &out, Op op, std::vector<std::string> in)
{
    Node n;
    n.name = n.output = out;
    n.op = op;
    n.inputs = std::move(in);
    if (op == Op::MATMUL) n.attrs["transpose_b"] = int64_t(1);
    g.add_node(n);
}

}  // namespace

TEST_CASE("planner: random static-shape graphs (views, in place, scratch), every ablation", "[planner]")
{
    int with_scratch = 0, with_views = 0;
    for (unsigned seed = 0; seed < 120; seed++) {
        std::mt19937 rng(1000 + seed);
        Graph g = random_static_dag(rng, 5 + static_cast<int>(seed % 25));
        INFO("seed " << seed);
        g.verify("random graph");
        for (const PlanOptions &o : all_ablations()) {
            SectionPlan sp = plan_section(g, o);
            check_plan(g, sp, o);
            with_scratch += !sp.scratch.empty();
            with_views += !sp.views.empty();
        }
    }
    CHECK(with_scratch > 0);  // the generator exercises what it should
    CHECK(with_views > 0);
}

TEST_CASE("planner: random DAGs, every ablation", "[planner]")
{
    for (unsigned seed = 0; seed < 150; seed++) {
        std::mt19937 rng(seed);
        Graph g = random_dag(rng, 6 + static_cast<int>(seed % 30));
        INFO("seed " << seed);
        for (const PlanOptions &o : all_ablations()) check_plan(g, plan_section(g, o), o);
    }
}

TEST_CASE("planner: the Llama block before and after fusion", "[planner]")
{
    for (bool fuse : {false, true}) {
        Program p = program_of(tiny_llama({{"attention_bias", true}}));
        if (fuse) run_pipeline(p, {});
        for (Section s : kSections)
            for (const PlanOptions &o : all_ablations()) check_plan(p.section(s), plan_section(p.section(s), o), o);
    }
}

TEST_CASE("planner: reuse and in-place pay off on the Llama block", "[planner]")
{
    Program p = program_of(tiny_llama());
    run_pipeline(p, {});
    PlanOptions best, naive;
    naive.placement = PlacementPolicy::Naive;
    naive.inplace = false;
    SectionPlan a = plan_section(p.block, best), b = plan_section(p.block, naive);
    CHECK(a.per_token.arena < b.per_token.arena);
    // the residual adds happen in the residual stream itself
    CHECK(a.region.at("h").root == kCarryRoot);
    CHECK(a.region.at("x_out").root == kCarryRoot);
    CHECK(a.copies.empty());
    // RoPE rotates q in place inside the fused QKV output
    CHECK(a.region.at("q_rope").root == a.region.at("q").root);
    // without in-place the block output still lands in the residual stream (written directly)
    CHECK(b.region.at("x_out").root == kCarryRoot);
}

TEST_CASE("planner: keep_all keeps every activation to the end", "[planner]")
{
    Program p = program_of(tiny_llama());
    run_pipeline(p, {});
    PlanOptions o;
    o.keep_all = true;
    SectionPlan sp = plan_section(p.block, o);
    for (const auto &[n, a] : sp.alloc) CHECK(a.death == static_cast<int>(sp.order.size()));
    CHECK(sp.per_token.arena == sp.per_token.lower_bound);
}

TEST_CASE("planner: pinned outputs pull their in-place producers into the pinned buffer", "[planner]")
{
    // Gemma-2: logits = SOFTCAP(MATMUL(...)); header: x = SCALE(EMBEDDING(...)).
    Program p = program_of(tiny_llama({{"model_type", "gemma2"}, {"head_dim", 16}}));
    run_pipeline(p, {});
    SectionPlan foot = plan_section(p.footer, PlanOptions{});
    CHECK(foot.region.at("logits_mm").root == "logits");  // the head GEMM writes the logits buffer
    CHECK(foot.region.at("logits").root == "logits");     // and SOFTCAP works there in place
    CHECK(foot.alloc.empty());
    CHECK(foot.copies.empty());
    SectionPlan head = plan_section(p.header, PlanOptions{});
    CHECK(head.region.at("tok_embed").root == kCarryRoot);
    CHECK(head.alloc.empty());
    for (Section s : kSections) check_plan(p.section(s), plan_section(p.section(s), PlanOptions{}), PlanOptions{});
    // a preference never costs a copy: without in-place the plan stays valid
    PlanOptions no;
    no.inplace = false;
    SectionPlan plain = plan_section(p.footer, no);
    check_plan(p.footer, plain, no);
}

TEST_CASE("planner report: weights count each checkpoint tensor once (a tied embedding too)", "[planner]")
{
    for (bool tied : {false, true}) {
        Program p = program_of(tiny_llama({{"tie_word_embeddings", tied}}));
        run_pipeline(p, {});
        Plan plan = plan_program(p, {});
        double expected = 0;
        for (const auto &[name, shape] : required_tensors(p)) expected += 4.0 * static_cast<double>(shape_numel_fixed(shape));
        std::ostringstream os;
        print_plan_report(p, plan, 16, os);
        INFO(os.str());
        CHECK_THAT(os.str(), Contains("outside: weights " + human_bytes(expected) + " (f32)"));
    }
}

TEST_CASE("planner: precomputations run right before their use, not all at the top", "[planner]")
{
    // AOTAutograd's backward graphs list every layer's terms computed from saved forward values (GELU's
    // derivative) before the gradient chain; the greedy order, with no look-ahead, ran them all first. Here:
    // L layers, each p_k = EXP(x_k), m_k = NEG(p_k) listed first, then the chain
    // a_k = d_k w^T, b_k = a_k + d_k, d_{k+1} = b_k + m_k.
    const int L = 12;
    const int64_t bytes = 16 * 32 * 4;
    Graph g = chain_start({32, 32});
    for (int k = 0; k < L; k++) {
        std::string s = std::to_string(k);
        g.add_tensor({"x" + s, {16, 32}, DType::F32, Storage::Input, {}});
        add(g, "p" + s, Op::EXP, {"x" + s});
        add(g, "m" + s, Op::NEG, {"p" + s});
    }
    for (int k = 0; k < L; k++) {
        std::string s = std::to_string(k), d = "d" + s;
        add(g, "a" + s, Op::MATMUL, {d, "w"});
        add(g, "b" + s, Op::ADD, {"a" + s, d});
        add(g, "d" + std::to_string(k + 1), Op::ADD, {"b" + s, "m" + s});
    }
    g.mark_output("d" + std::to_string(L));
    g.verify("precomputations");
    PlanOptions memory, fifo;
    fifo.order = OrderPolicy::Fifo;
    SectionPlan a = plan_section(g, memory), b = plan_section(g, fifo);
    check_plan(g, a, memory);
    CHECK(b.fixed.arena >= L * bytes);  // the listed order holds every m_k at once
    CHECK(a.fixed.arena <= 4 * bytes);  // each p_k, m_k computed next to its use
    auto at = [&](const std::string &name) {
        return std::find(a.order.begin(), a.order.end(), name) - a.order.begin();
    };
    for (int k = 1; k < L; k++) CHECK(at("m" + std::to_string(k)) > at("d" + std::to_string(k)));
}

TEST_CASE("planner: a section output is computed as soon as it frees its input (it takes no arena)", "[planner]")
{
    // A backward's weight gradients: dW_k = d_k w^T is a section output (the caller's buffer) larger than d_k,
    // and d_k also feeds the chain d_{k+1} = EXP(d_k). Scoring dW_k as an arena allocation postponed it behind
    // the chain and kept every d_k alive to the end.
    const int L = 12;
    const int64_t bytes = 16 * 32 * 4;
    Graph g = chain_start({64, 32});
    for (int k = 0; k < L; k++) {
        std::string s = std::to_string(k), d = "d" + s;
        add(g, "d" + std::to_string(k + 1), Op::EXP, {d});
        add(g, "dw" + s, Op::MATMUL, {d, "w"});
        g.tensor("dw" + s).storage = Storage::Output;  // the caller's buffer, as a graph's outputs
        g.mark_output("dw" + s);
    }
    g.mark_output("d" + std::to_string(L));
    g.verify("weight gradients");
    PlanOptions memory;
    SectionPlan a = plan_section(g, memory);
    check_plan(g, a, memory);
    CHECK(a.fixed.arena <= 3 * bytes);
}
