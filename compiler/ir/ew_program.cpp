#include "ir/ew_program.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "ck_kernels.h"
#include "ir/op_rules.h"
#include "ir/symbolic.h"
#include "support/util.h"

namespace ckc {

namespace {

const char *const kBinary[] = {
#define CK_EW_BINARY_NAME(name, formula, ints) #name,
    CK_BINARY_OPS(CK_EW_BINARY_NAME)
#undef CK_EW_BINARY_NAME
};
const char *const kUnary[] = {
#define CK_EW_UNARY_NAME(name, formula) #name,
    CK_UNARY_OPS(CK_EW_UNARY_NAME)
#undef CK_EW_UNARY_NAME
};

std::string lower(std::string s)
{
    for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string op_text(int op)
{
    if (op < CK_EW_UNARY) return lower(kBinary[op]);
    return lower(kUnary[op - CK_EW_UNARY]);
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> out(1);
    for (char c : s) {
        if (c == sep) out.emplace_back();
        else out.back() += c;
    }
    return out;
}

std::string trim(const std::string &s)
{
    size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

int ew_opcode(const std::string &name)
{
    for (int k = 0; k < CK_BIN_COUNT; k++)
        if (name == lower(kBinary[k])) return k;
    for (int k = 0; k < CK_UN_COUNT; k++)
        if (name == lower(kUnary[k])) return CK_EW_UNARY + k;
    return -1;
}

std::vector<EwInsn> parse_ew_program(const std::string &text, int nin)
{
    std::vector<EwInsn> prog;
    for (const std::string &raw : split(text, ';')) {
        std::string ins = trim(raw);
        int j = static_cast<int>(prog.size());
        auto bad = [&](const std::string &why) {
            return std::runtime_error(fmt::format("instruction {} '{}': {}", j, ins, why));
        };
        size_t open = ins.find('('), close = ins.rfind(')');
        if (open == std::string::npos || close != ins.size() - 1) throw bad("expected op(operand, ...)");
        EwInsn p;
        p.op = ew_opcode(trim(ins.substr(0, open)));
        if (p.op < 0) throw bad("unknown op (add sub mul div or a unary op of CK_UNARY_OPS)");
        std::vector<std::string> args = split(ins.substr(open + 1, close - open - 1), ',');
        bool unary = p.op >= CK_EW_UNARY, pow = p.op == CK_EW_UNARY + CK_UN_POW;
        size_t want = unary && !pow ? 1 : 2;
        if (args.size() != want) throw bad(fmt::format("takes {} operand{}", want, want == 1 ? "" : "s"));
        int slots[2] = {-1, -1}, numbers = 0;
        for (size_t k = 0; k < args.size(); k++) {
            std::string a = trim(args[k]);
            if (!a.empty() && (a[0] == 'i' || a[0] == 'v')) {
                char *end = nullptr;
                long idx = std::strtol(a.c_str() + 1, &end, 10);
                bool input = a[0] == 'i';
                if (a.size() < 2 || *end || idx < 0 || (input ? idx >= nin : idx >= j))
                    throw bad(fmt::format("operand '{}' names no {}", a, input ? "input" : "earlier value"));
                slots[k] = static_cast<int>(input ? idx : nin + idx);
            } else {
                char *end = nullptr;
                p.imm = std::strtod(a.c_str(), &end);
                if (a.empty() || *end) throw bad(fmt::format("operand '{}' is not iN, vN or a number", a));
                numbers++;
            }
        }
        if (numbers > 1 || (unary && slots[0] < 0) || (pow && slots[1] >= 0))
            throw bad(unary ? "needs a value operand (and pow a number exponent)" : "at most one number operand");
        p.a = slots[0];
        p.b = unary ? -1 : slots[1];
        prog.push_back(p);
    }
    if (prog.empty()) throw std::runtime_error("empty program");
    if (prog.size() > CK_EW_MAX_INSNS) throw std::runtime_error(fmt::format("more than {} instructions", CK_EW_MAX_INSNS));
    return prog;
}

std::optional<std::pair<int64_t, int64_t>> ew_index(const Shape &s, const Shape &o)
{
    if (s.size() > o.size()) return std::nullopt;
    Shape a = rules::aligned(s, o.size());
    int d0 = -1, d1 = -1;
    bool after = false;  // a broadcast dim seen after the run started
    for (size_t d = 0; d < o.size(); d++) {
        if (o[d] == 1) continue;
        if (a[d] == o[d]) {
            if (after) return std::nullopt;
            if (d0 < 0) d0 = static_cast<int>(d);
            d1 = static_cast<int>(d) + 1;
        } else if (a[d] != 1) {
            return std::nullopt;
        } else if (d0 >= 0) {
            after = true;
        }
    }
    int64_t div = 1, mod = 1;
    if (d0 >= 0) {
        for (size_t d = d1; d < o.size(); d++) div = dim_mul(div, o[d]);  // (symbolic sizes: products of them)
        for (int d = d0; d < d1; d++) mod = dim_mul(mod, o[d]);
    }
    return std::make_pair(div, mod);
}

std::string format_ew_program(const std::vector<EwInsn> &prog, int nin)
{
    std::vector<std::string> out;
    for (const EwInsn &p : prog) {
        auto operand = [&](int slot) {
            if (slot < 0) return fmt::format("{}", p.imm);  // shortest text that reads back as the same double
            return slot < nin ? fmt::format("i{}", slot) : fmt::format("v{}", slot - nin);
        };
        std::string args = operand(p.a);
        if (p.op < CK_EW_UNARY || p.op == CK_EW_UNARY + CK_UN_POW) args += ", " + operand(p.b);
        out.push_back(op_text(p.op) + "(" + args + ")");
    }
    return join(out, "; ");
}

}  // namespace ckc
