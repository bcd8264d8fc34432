// symbolic.cpp — the table of symbolic sizes (see symbolic.h).
#include "ir/symbolic.h"

#include <cctype>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

using Terms = std::vector<SymProduct>;

struct Table {
    std::vector<Terms> exprs;
    std::map<std::string, size_t> index;  // key_of(terms) -> its place in exprs
    std::map<std::string, SymBounds> bounds;
    std::map<std::string, SymDerivation> derived;  // the derived symbols among them
};
Table &table()
{
    static Table t;
    return t;
}

std::string powers_key(const std::map<std::string, int> &powers)
{
    std::string k;
    for (const auto &[s, e] : powers) k += fmt::format("{}^{}*", s, e);
    return k;
}

std::string key_of(const Terms &t)
{
    std::string k;
    for (const auto &p : t) k += fmt::format("{}:{}+", p.coef, powers_key(p.powers));
    return k;
}

int64_t checked_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) throw std::runtime_error(fmt::format("the size {} + {} overflows", a, b));
    return r;
}

int64_t checked_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) throw std::runtime_error(fmt::format("the size {} x {} overflows", a, b));
    return r;
}

// like terms combined, zero ones dropped, in one order (the constant first)
Terms normalize(const Terms &in)
{
    std::map<std::string, SymProduct> acc;
    for (const auto &p : in) {
        if (p.coef == 0) continue;
        auto [it, added] = acc.emplace(powers_key(p.powers), p);
        if (!added) it->second.coef = checked_add(it->second.coef, p.coef);
    }
    Terms out;
    for (auto &[k, p] : acc)
        if (p.coef != 0) out.push_back(p);
    return out;
}

bool valid_symbol(const std::string &s)
{
    if (s.empty() || s.size() > 48 || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    return true;
}

Terms terms_of(int64_t d)
{
    if (is_sym(d)) return sym_terms(d);
    if (d < 0) internal_error(fmt::format("size {} in symbolic arithmetic", d));
    if (d == 0) return {};
    SymProduct p;
    p.coef = d;
    return {p};
}

// a term's value with each symbol at its min or max; false when it overflows
bool term_at(const SymProduct &p, bool max, int64_t &v)
{
    v = p.coef;
    for (const auto &[s, e] : p.powers)
        for (int i = 0; i < e; i++) {
            const SymBounds &b = sym_bounds(s);
            if (__builtin_mul_overflow(v, max ? b.max : b.min, &v)) return false;
        }
    return true;
}

// A symbolic size as text or as C: its terms, the constant (first in the table) last: "seq+1", "(sym_seq + 1)"
std::string render(int64_t d, bool c);

std::string term_str(const SymProduct &p, bool c)
{
    std::vector<std::string> f;
    int64_t coef = p.coef < 0 ? -p.coef : p.coef;
    if (coef != 1 || p.powers.empty()) f.push_back(std::to_string(coef));
    for (const auto &[s, e] : p.powers)
        for (int i = 0; i < e; i++) f.push_back(c ? sym_c_name(s) : s);
    if (!c) return join(f, "*");
    if (f.size() == 1) return f[0];
    return "(int64_t)" + join(f, " * ");
}

}  // namespace

bool is_sym(int64_t d)
{
    return d <= kSymBase && kSymBase - d < static_cast<int64_t>(table().exprs.size());
}

int64_t sym_make_sum(const std::vector<SymProduct> &terms)
{
    Terms t = normalize(terms);
    if (t.empty()) return 0;
    if (t.size() == 1 && t[0].powers.empty()) return t[0].coef;
    auto &tab = table();
    auto [it, added] = tab.index.emplace(key_of(t), tab.exprs.size());
    if (added) tab.exprs.push_back(t);
    return kSymBase - static_cast<int64_t>(it->second);
}

int64_t sym_make(const SymProduct &p)
{
    if (p.coef < 1) internal_error(fmt::format("symbolic size with coefficient {}", p.coef));
    return sym_make_sum({p});
}

int64_t sym_dim(const std::string &name)
{
    if (!valid_symbol(name)) throw std::runtime_error(fmt::format("'{}' is not a symbol name (letters, digits, _)", name));
    SymProduct p;
    p.powers[name] = 1;
    return sym_make(p);
}

const std::vector<SymProduct> &sym_terms(int64_t d)
{
    if (!is_sym(d)) internal_error(fmt::format("{} is not a symbolic size", d));
    return table().exprs[static_cast<size_t>(kSymBase - d)];
}

bool sym_is_product(int64_t d) { return is_sym(d) && sym_terms(d).size() == 1 && sym_terms(d)[0].coef > 0; }

const SymProduct &sym_product(int64_t d)
{
    if (!sym_is_product(d)) internal_error(fmt::format("{} is not a product of symbols", is_sym(d) ? dim_str(d) : std::to_string(d)));
    return sym_terms(d)[0];
}

std::vector<std::string> dim_symbols(int64_t d)
{
    std::set<std::string> out;
    if (is_sym(d))
        for (const auto &p : sym_terms(d))
            for (const auto &[s, e] : p.powers) out.insert(s);
    return {out.begin(), out.end()};
}

bool dim_linear(int64_t d, std::string &sym, int64_t &a, int64_t &b)
{
    if (!is_sym(d)) return false;
    a = 0, b = 0;
    sym.clear();
    for (const auto &p : sym_terms(d)) {
        if (p.powers.empty()) {
            b = p.coef;
        } else {
            if (!sym.empty() || p.powers.size() != 1 || p.powers.begin()->second != 1 || p.coef < 1) return false;
            sym = p.powers.begin()->first;
            a = p.coef;
        }
    }
    return !sym.empty();
}

int64_t dim_mul(int64_t a, int64_t b)
{
    // T (kTokens, -1) is the LLM sections' own symbol, which their rules keep out of products (a product with
    // it is never read): plain arithmetic, as before symbolic sizes existed
    if (a == -1 || b == -1) return a * b;
    if (!is_sym(a) && !is_sym(b)) {
        if (a < 0 || b < 0) internal_error(fmt::format("size {} x {} in symbolic arithmetic", a, b));
        if (a && b > std::numeric_limits<int64_t>::max() / a)  // (a graph.json's "4000000000*9000000000")
            throw std::runtime_error(fmt::format("the size {} x {} overflows", a, b));
        return a * b;
    }
    Terms out;
    for (const auto &p : terms_of(a))
        for (const auto &q : terms_of(b)) {
            SymProduct r = p;
            r.coef = checked_mul(p.coef, q.coef);
            for (const auto &[s, e] : q.powers) r.powers[s] += e;
            out.push_back(r);
        }
    return sym_make_sum(out);
}

bool dim_div(int64_t a, int64_t b, int64_t &q)
{
    if (a == b && a != 0) {
        q = 1;
        return true;
    }
    Terms d = terms_of(b);
    if (d.size() != 1) return false;  // by 0, or by a sum
    Terms out;
    for (SymProduct p : terms_of(a)) {
        if (p.coef % d[0].coef) return false;
        p.coef /= d[0].coef;
        for (const auto &[s, e] : d[0].powers) {
            auto it = p.powers.find(s);
            if (it == p.powers.end() || it->second < e) return false;
            if ((it->second -= e) == 0) p.powers.erase(it);
        }
        out.push_back(p);
    }
    q = sym_make_sum(out);
    return true;
}

int64_t dim_add(int64_t a, int64_t b)
{
    if (a == -1 || b == -1) internal_error("dim_add of the token count T");
    if (!is_sym(a) && !is_sym(b)) return checked_add(a, b);
    Terms t = terms_of(a), u = terms_of(b);
    t.insert(t.end(), u.begin(), u.end());
    return sym_make_sum(t);
}

int64_t dim_sub(int64_t a, int64_t b)
{
    if (a == -1 || b == -1) internal_error("dim_sub of the token count T");
    if (!is_sym(a) && !is_sym(b)) return a - b;
    Terms t = terms_of(a);
    for (SymProduct p : terms_of(b)) {
        p.coef = checked_mul(p.coef, -1);
        t.push_back(p);
    }
    return sym_make_sum(t);
}

std::string dim_str(int64_t d) { return render(d, false); }

std::string sym_c_name(const std::string &symbol) { return "sym_" + symbol; }

std::string dim_c(int64_t d) { return render(d, true); }

namespace {

std::string render(int64_t d, bool c)
{
    if (!is_sym(d)) return std::to_string(d);
    const Terms &t = sym_terms(d);
    if (t.size() == 1 && t[0].coef > 0) return term_str(t[0], c);  // a product: "8*batch", "(int64_t)8 * sym_batch"
    std::string out;
    for (size_t k = 0; k < t.size(); k++) {
        const SymProduct &p = t[(k + 1) % t.size()];
        const char *sign = p.coef < 0 ? (out.empty() || !c ? "-" : " - ") : out.empty() ? "" : c ? " + " : "+";
        out += sign + term_str(p, c);
    }
    return c ? "(" + out + ")" : out;
}

}  // namespace

std::vector<std::string> dim_reads(int64_t d)
{
    std::vector<std::string> out;
    for (const auto &s : dim_symbols(d)) out.push_back(sym_c_name(s));
    return out;
}

namespace {

// one term of a size: factors joined by '*'
int64_t parse_product(const std::string &text, const std::string &term)
{
    int64_t d = 1;
    size_t at = 0;
    while (at <= term.size()) {
        size_t star = term.find('*', at);
        std::string f = term.substr(at, star == std::string::npos ? std::string::npos : star - at);
        while (!f.empty() && f.front() == ' ') f.erase(f.begin());
        while (!f.empty() && f.back() == ' ') f.pop_back();
        if (f.empty()) throw std::runtime_error(fmt::format("size \"{}\": an empty factor", text));
        if (std::isdigit(static_cast<unsigned char>(f[0]))) {
            if (f.size() > 12 || f.find_first_not_of("0123456789") != std::string::npos)
                throw std::runtime_error(fmt::format("size \"{}\": '{}' is not a size", text, f));
            d = dim_mul(d, std::stoll(f));
        } else {
            d = dim_mul(d, sym_dim(f));
        }
        if (star == std::string::npos) break;
        at = star + 1;
    }
    return d;
}

}  // namespace

int64_t parse_dim(const std::string &text)
{
    if (text.empty()) throw std::runtime_error("an empty size");
    if (text.size() > 512) throw std::runtime_error(fmt::format("size \"{}...\": longer than 512 characters", text.substr(0, 32)));
    // terms joined by '+' or '-' (a leading '-' negates the first)
    int64_t d = 0;
    size_t at = 0;
    bool negative = false;
    if (text[0] == '-') negative = true, at = 1;
    while (true) {
        size_t op = text.find_first_of("+-", at);
        std::string term = text.substr(at, op == std::string::npos ? std::string::npos : op - at);
        int64_t t = parse_product(text, term);
        d = negative ? dim_sub(d, t) : dim_add(d, t);
        if (op == std::string::npos) break;
        negative = text[op] == '-';
        at = op + 1;
    }
    bool positive = !is_sym(d) ? d >= 0 : false;
    if (is_sym(d))
        for (const auto &t : sym_terms(d)) positive |= t.coef > 0;
    if (!positive) throw std::runtime_error(fmt::format("size \"{}\" is negative", text));
    return d;
}

void sym_declare(const std::string &name, SymBounds b)
{
    if (!valid_symbol(name)) throw std::runtime_error(fmt::format("'{}' is not a symbol name (letters, digits, _)", name));
    table().bounds[name] = b;
    table().derived.erase(name);
}

void sym_declare_derived(const std::string &name, int64_t of, int64_t div)
{
    if (!valid_symbol(name)) throw std::runtime_error(fmt::format("'{}' is not a symbol name (letters, digits, _)", name));
    if (div < 2 || div > (int64_t(1) << 30))
        throw std::runtime_error(fmt::format("divisor {} must be in [2, 2^30]", div));
    if (!is_sym(of)) throw std::runtime_error(fmt::format("{} names no symbol (write the size itself)", of));
    for (const auto &s : dim_symbols(of)) {
        if (s == name) throw std::runtime_error(fmt::format("'{}' is defined from itself", name));
        sym_bounds(s);  // declared before (throws)
    }
    int64_t lo, hi;
    if (!dim_range(of, lo, hi)) throw std::runtime_error(fmt::format("{} overflows within its symbols' bounds", dim_str(of)));
    if (lo < 0)
        throw std::runtime_error(fmt::format("{} is as low as {} within its symbols' bounds (ckc divides sizes >= 0)",
                                             dim_str(of), lo));
    table().bounds[name] = {lo / div, hi / div};
    static int64_t declared = 0;
    table().derived[name] = {of, div, ++declared};
}

const SymDerivation *sym_derivation(const std::string &name)
{
    auto it = table().derived.find(name);
    return it == table().derived.end() ? nullptr : &it->second;
}

std::string sym_rule(const std::string &name)
{
    const SymDerivation *d = sym_derivation(name);
    if (!d) return "";
    std::vector<std::string> syms = dim_symbols(d->of);
    bool alone = syms.size() == 1 && d->of == sym_dim(syms[0]);  // "seq//2", else "(seq+1)//2"
    return fmt::format("{}//{}", alone ? dim_str(d->of) : "(" + dim_str(d->of) + ")", d->div);
}

std::string sym_rule_c(const std::string &name)
{
    const SymDerivation *d = sym_derivation(name);
    if (!d) internal_error("sym_rule_c of the free symbol " + name);
    std::string of = dim_c(d->of);  // a sum prints in parentheses already; a product needs them
    if (sym_is_product(d->of) && of.find(' ') != std::string::npos) of = "(" + of + ")";
    return fmt::format("{} / {}", of, d->div);  // (of >= 0: C's division is the floor)
}

bool dim_nonneg(int64_t d)
{
    try {
        for (int round = 0; round < 8; round++) {
            int64_t lo, hi;
            if (!dim_range(d, lo, hi)) return false;
            if (lo >= 0) return true;
            if (!is_sym(d)) return false;
            const Terms &t = sym_terms(d);
            const SymDerivation *dv = nullptr;
            std::string q;
            for (const auto &p : t)  // the one declared last: its E may hold the others, never the reverse
                if (p.powers.size() == 1 && p.powers.begin()->second == 1)
                    if (const SymDerivation *e = sym_derivation(p.powers.begin()->first); e && (!dv || e->order > dv->order)) {
                        dv = e;
                        q = p.powers.begin()->first;
                    }
            if (!dv) return false;
            // k*d, each c*k*q of it replaced by c*E (c < 0: q <= E/k) or c*(E-k+1) (c > 0: q >= (E-k+1)/k)
            Terms out;
            for (const auto &p : t) {
                if (p.powers.size() == 1 && p.powers.count(q) && p.powers.at(q) == 1) {
                    int64_t e = p.coef < 0 ? dv->of : dim_sub(dv->of, dv->div - 1);
                    for (SymProduct r : terms_of(e)) {
                        r.coef = checked_mul(r.coef, p.coef);
                        out.push_back(r);
                    }
                } else {
                    SymProduct r = p;
                    r.coef = checked_mul(p.coef, dv->div);
                    out.push_back(r);
                }
            }
            d = sym_make_sum(out);
        }
    } catch (const std::runtime_error &) {  // (an overflow: not shown)
    }
    return false;
}

const SymBounds &sym_bounds(const std::string &name)
{
    auto it = table().bounds.find(name);
    if (it == table().bounds.end()) throw std::runtime_error(fmt::format("symbol '{}' has no declared bounds", name));
    return it->second;
}

bool dim_range(int64_t d, int64_t &lo, int64_t &hi)
{
    lo = hi = d;
    if (!is_sym(d)) return true;
    lo = hi = 0;
    for (const auto &p : sym_terms(d)) {
        int64_t a, b;  // the term at its smallest and largest
        if (!term_at(p, p.coef < 0, a) || !term_at(p, p.coef > 0, b) || __builtin_add_overflow(lo, a, &lo) ||
            __builtin_add_overflow(hi, b, &hi))
            return false;
    }
    return true;
}

int64_t dim_max(int64_t d)
{
    int64_t lo, hi;
    if (!dim_range(d, lo, hi)) internal_error(fmt::format("symbolic size {} overflows at its bounds", dim_str(d)));
    return hi;
}

int64_t dim_min(int64_t d)
{
    int64_t lo, hi;
    if (!dim_range(d, lo, hi)) internal_error(fmt::format("symbolic size {} overflows at its bounds", dim_str(d)));
    return lo;
}

}  // namespace ckc
