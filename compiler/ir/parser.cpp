#include "ir/parser.h"

#include <cctype>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "support/error.h"
#include "support/source_location.h"
#include "support/util.h"

namespace ckc {

namespace {

// A cursor over the whole text; `line_end` bounds the line being read.
class Reader {
public:
    Reader(const std::string &text, const std::string &path) : text_(text), path_(path) {}

    [[noreturn]] void fail(size_t at, size_t len, const std::string &msg) const
    {
        throw Error(ErrorKind::Input, located_message(path_, text_, at, std::max<size_t>(len, 1), msg));
    }

    bool next_line()
    {
        while (pos_ < text_.size()) {
            line_end_ = text_.find('\n', pos_);
            if (line_end_ == std::string::npos) line_end_ = text_.size();
            skip_space();
            if (pos_ < line_end_ && text_[pos_] != ';') return true;
            pos_ = line_end_ + 1;
        }
        return false;
    }
    void finish_line()
    {
        skip_space();
        if (pos_ < line_end_) fail(pos_, line_end_ - pos_, "unexpected text at the end of the node");
        pos_ = line_end_ + 1;
    }

    void skip_space()
    {
        while (pos_ < line_end_ && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) pos_++;
    }
    bool at_end() { return skip_space(), pos_ >= line_end_; }
    char peek() { return at_end() ? '\0' : text_[pos_]; }
    bool accept(const std::string &s)
    {
        skip_space();
        if (text_.compare(pos_, s.size(), s) != 0 || pos_ + s.size() > line_end_) return false;
        pos_ += s.size();
        return true;
    }
    void expect(const std::string &s, const std::string &what)
    {
        if (!accept(s)) fail(pos_, 1, fmt::format("expected '{}' {}", s, what));
    }
    // characters up to (not including) any of `stops`, or the end of the line
    std::string until(const std::string &stops)
    {
        size_t start = pos_;
        while (pos_ < line_end_ && stops.find(text_[pos_]) == std::string::npos) pos_++;
        return text_.substr(start, pos_ - start);
    }
    std::string word()
    {
        skip_space();
        size_t start = pos_;
        while (pos_ < line_end_ && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
                                    text_[pos_] == '-' || text_[pos_] == '.' || text_[pos_] == '+'))
            pos_++;
        return text_.substr(start, pos_ - start);
    }
    size_t pos() const { return pos_; }

private:
    const std::string &text_;
    std::string path_;
    size_t pos_ = 0, line_end_ = 0;
};

struct Ref {
    std::string name;
    Shape shape;
    DType dtype = DType::F32;
    bool has_storage = false;
    Storage storage = Storage::Activation;
    size_t at = 0, len = 0;
};

int64_t integer(Reader &r, const std::string &s, size_t at)
{
    char *end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end) r.fail(at, s.size(), "expected an integer, found '" + s + "'");
    return v;
}

Shape shape(Reader &r)
{
    r.expect("[", "opening a shape");
    Shape s;
    while (!r.accept("]")) {
        if (!s.empty()) r.expect(",", "between dimensions");
        size_t at = (r.skip_space(), r.pos());
        std::string d = r.word();
        s.push_back(d == "T" ? kTokens : integer(r, d, at));
    }
    return s;
}

Storage storage_from(Reader &r, const std::string &s, size_t at)
{
    for (Storage st : {Storage::Activation, Storage::Weight, Storage::Input, Storage::Carry, Storage::Output})
        if (s == storage_name(st)) return st;
    r.fail(at, s.size(), "unknown dtype or storage ':" + s + "' (dtypes f32 f16 bf16 i32 i64 bool; storage input "
                         "weight carry output)");
}

Ref tensor_ref(Reader &r)
{
    Ref t;
    r.skip_space();
    t.at = r.pos();
    t.name = r.until("[\n");
    while (!t.name.empty() && t.name.back() == ' ') t.name.pop_back();
    if (t.name.empty()) r.fail(t.at, 1, "expected a tensor: name[shape]");
    t.shape = shape(r);
    while (r.accept(":")) {
        size_t at = r.pos();
        std::string s = r.word();
        bool is_dtype = false;
        for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
            if (s == dtype_name(d)) t.dtype = d, is_dtype = true;
        if (is_dtype) continue;
        t.storage = storage_from(r, s, at);
        t.has_storage = true;
    }
    t.len = r.pos() - t.at;
    return t;
}

Attr attr_value(Reader &r)
{
    r.skip_space();
    size_t at = r.pos();
    if (r.accept("\"")) {
        std::string s = r.until("\"");
        r.expect("\"", "closing the string");
        return s;
    }
    if (r.accept("@")) return LayerTableRef{r.word()};
    if (r.peek() == '[') {
        std::vector<int64_t> v;
        for (int64_t d : shape(r)) v.push_back(d);
        return v;
    }
    std::string s = r.word();
    if (s.empty()) r.fail(at, 1, "expected a value");
    if (s.find_first_of(".ein") == std::string::npos) return integer(r, s, at);
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    char *end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (*end) r.fail(at, s.size(), "expected a number, found '" + s + "'");
    return d;
}

void declare_input(Reader &r, Graph &g, const Ref &t)
{
    if (g.has_tensor(t.name)) {
        const Tensor &have = g.tensor(t.name);
        if (have.shape != t.shape || have.dtype != t.dtype || (t.has_storage && have.storage != t.storage))
            r.fail(t.at, t.len, fmt::format("tensor '{}' was {}{}:{} before", t.name, shape_str(have.shape),
                                             have.dtype == DType::F32 ? "" : std::string(":") + dtype_name(have.dtype),
                                             storage_name(have.storage)));
        return;
    }
    if (!t.has_storage || t.storage == Storage::Activation || t.storage == Storage::Output)
        r.fail(t.at, t.len, fmt::format("tensor '{}' is read before any node makes it: mark it :input, :weight or "
                                        ":carry", t.name));
    Tensor tt;
    tt.name = t.name;
    tt.shape = t.shape;
    tt.dtype = t.dtype;
    tt.storage = t.storage;
    if (t.storage == Storage::Weight) {
        tt.source.parts = {t.name};
        tt.source.part_shapes = {t.shape};
    }
    g.add_tensor(tt);
}

void read_node(Reader &r, Graph &g)
{
    Node n;
    std::string name;
    if (r.accept("[")) {
        name = r.until("]");
        r.expect("]", "closing the node name");
    }
    r.skip_space();
    size_t op_at = r.pos();
    std::string op = r.word();
    auto o = op_from_name(op);
    if (!o) {
        std::vector<std::string> known;
        for (Op k : all_ops()) known.push_back(op_name(k));
        r.fail(op_at, op.size(), fmt::format("unknown op '{}'{}", op, did_you_mean(op, known)));
    }
    n.op = *o;
    while (!r.accept("->")) {
        if (!n.inputs.empty()) r.expect(",", "between inputs (or '->' before the output)");
        Ref in = tensor_ref(r);
        declare_input(r, g, in);
        n.inputs.push_back(in.name);
    }
    Ref out = tensor_ref(r);
    if (g.has_tensor(out.name)) r.fail(out.at, out.len, "tensor '" + out.name + "' is made twice");
    n.output = out.name;
    n.name = name.empty() ? out.name : name;
    while (!r.at_end()) {
        size_t at = (r.skip_space(), r.pos());
        std::string key = r.until("= \n");
        if (!r.accept("=")) r.fail(at, key.size(), "expected key=value after the output");
        n.attrs[key] = attr_value(r);
    }
    Storage st = out.has_storage ? out.storage : Storage::Activation;
    const OpDef &d = op_def(n.op);
    int arity = static_cast<int>(n.inputs.size());
    if (arity < d.min_inputs || arity > d.max_inputs)
        r.fail(op_at, op.size(), fmt::format("{} takes {} to {} inputs, has {}", op, d.min_inputs, d.max_inputs, arity));
    try {
        g.add_node(n, st);
    } catch (const Error &e) {
        r.fail(op_at, op.size(), e.what());
    }
    const Tensor &made = g.tensor(n.output);
    if (made.shape != out.shape || made.dtype != out.dtype)
        r.fail(out.at, out.len, fmt::format("{} computes {}:{} here", op, shape_str(made.shape), dtype_name(made.dtype)));
    if (st == Storage::Output || st == Storage::Carry) g.mark_output(n.output);
}

}  // namespace

Graph parse_graph(const std::string &text, const std::string &path)
{
    Graph g;
    Reader r(text, path);
    while (r.next_line()) {
        read_node(r, g);
        r.finish_line();
    }
    g.verify("parse_graph");
    return g;
}

}  // namespace ckc
