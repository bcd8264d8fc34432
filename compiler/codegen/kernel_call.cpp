// kernel_call.cpp — argument constructors and the one printer of kernel calls (see kernel_call.h).
#include "codegen/kernel_call.h"

#include <fmt/format.h>

#include "ir/symbolic.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

std::vector<std::string> KernelCall::reads() const
{
    std::vector<std::string> out;
    for (const CArg &a : args) out.insert(out.end(), a.reads.begin(), a.reads.end());
    return out;
}

CArg arg_pointer(const std::string &text, std::vector<std::string> reads)
{
    CArg a;
    a.kind = CArg::Kind::Pointer;
    a.text = text;
    a.reads = std::move(reads);
    return a;
}

CArg arg_null(const std::string &label)
{
    CArg a;
    a.kind = CArg::Kind::Pointer;
    a.label = label;
    a.text = "NULL";
    a.named = false;
    return a;
}

CArg arg_size(const std::string &label, int64_t value, const std::string &name)
{
    if (is_sym(value)) return arg_expr(label, dim_c(value), dim_reads(value));  // known when the code runs
    if (value < kSymBase / 2)  // symbolic arithmetic gone wrong (ir/symbolic.h): never print it as a size
        internal_error(fmt::format("codegen: size '{}' is {}, not a size", label, value));
    CArg a;
    a.kind = CArg::Kind::Size;
    a.label = label;
    a.text = name.empty() ? std::to_string(value) : name;
    a.named = !name.empty();
    return a;
}

CArg arg_expr(const std::string &label, const std::string &text, std::vector<std::string> reads, bool named)
{
    CArg a;
    a.kind = CArg::Kind::Size;
    a.label = label;
    a.text = text;
    a.reads = std::move(reads);
    a.named = named;
    return a;
}

static CArg scalar(const std::string &label, std::string text)
{
    CArg a;
    a.kind = CArg::Kind::Scalar;
    a.label = label;
    a.text = std::move(text);
    a.named = false;
    return a;
}

CArg arg_float(const std::string &label, double v) { return scalar(label, c_float(v)); }

CArg arg_double(const std::string &label, double v) { return scalar(label, c_double(v)); }

CArg arg_int(const std::string &label, int64_t v) { return scalar(label, std::to_string(v)); }

CArg arg_enum(const std::string &label, const std::string &constant)
{
    CArg a;
    a.kind = CArg::Kind::Enum;
    a.label = label;
    a.text = constant;
    return a;
}

CArg arg_array(const std::string &label, const std::string &elem, const std::vector<std::string> &items)
{
    CArg a;
    a.kind = CArg::Kind::Array;
    a.label = label;
    a.text = label;
    a.elem = elem;
    a.items = items;
    if (a.items.empty()) a.items.push_back("1");  // a scalar's shape: C has no empty arrays
    return a;
}

CArg arg_array(const std::string &label, const std::string &elem, const std::vector<int64_t> &items)
{
    std::vector<std::string> text, reads;
    for (int64_t v : items) {
        CArg s = arg_size(label, v);
        text.push_back(s.text);
        reads.insert(reads.end(), s.reads.begin(), s.reads.end());
    }
    CArg a = arg_array(label, elem, text);
    a.reads = reads;  // symbolic sizes: an array filled when the code runs
    return a;
}

CArg arg_pointers(const std::string &label, const std::string &elem, const std::vector<CArg> &pointers)
{
    CArg a;
    a.kind = CArg::Kind::PointerArray;
    a.label = label;
    a.text = label;
    a.elem = elem;
    for (const CArg &p : pointers) {
        a.items.push_back(p.text);
        a.reads.insert(a.reads.end(), p.reads.begin(), p.reads.end());
    }
    return a;
}

void render_call(const KernelCall &call, CWriter &w,
                 const std::function<std::string(const std::string &code, const std::string &message)> &fail)
{
    if (!call.note.empty()) w.comment(call.note);
    bool block = false;
    for (const CArg &a : call.args) block = block || a.kind == CArg::Kind::Array || a.kind == CArg::Kind::PointerArray;
    if (block) w.open("");
    for (const CArg &a : call.args) {
        if (a.kind == CArg::Kind::Array)  // constant unless it holds sizes known only at run time
            w.line(fmt::format("{}const {} {}[] = {{{}}};", a.reads.empty() ? "static " : "", a.elem, a.label,
                               join(a.items, ", ")));
        else if (a.kind == CArg::Kind::PointerArray)
            w.line(fmt::format("{}const {}[] = {{{}}};", a.elem, a.label, join(a.items, ", ")));
    }
    std::vector<std::string> args;
    for (const CArg &a : call.args) args.push_back(a.named ? a.text : fmt::format("/*{}=*/{}", a.label, a.text));
    std::string text = fmt::format("{}({})", call.kernel, join(args, ", "));
    if (call.fails_if.empty()) {
        w.line(text + ";");
    } else {
        w.open(fmt::format("if ({} {})", text, call.fails_if));
        w.line(fail(call.fail_code, call.fail_message));
        w.close();
    }
    if (block) w.close();
}

}  // namespace ckc
