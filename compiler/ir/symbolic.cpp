// symbolic.cpp — the table of symbolic sizes (see symbolic.h).
#include "ir/symbolic.h"

#include <cctype>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "support/error.h"

namespace ckc {

namespace {

struct Table {
    std::vector<SymProduct> products;
    std::map<std::string, size_t> index;  // key_of(product) -> its place in products
    std::map<std::string, SymBounds> bounds;
};
Table &table()
{
    static Table t;
    return t;
}

std::string key_of(const SymProduct &p)
{
    std::string k = std::to_string(p.coef);
    for (const auto &[s, e] : p.powers) k += fmt::format("*{}^{}", s, e);
    return k;
}

bool valid_symbol(const std::string &s)
{
    if (s.empty() || s.size() > 48 || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    return true;
}

}  // namespace

bool is_sym(int64_t d)
{
    return d <= kSymBase && kSymBase - d < static_cast<int64_t>(table().products.size());
}

int64_t sym_make(const SymProduct &p)
{
    if (p.coef < 1) internal_error(fmt::format("symbolic size with coefficient {}", p.coef));
    if (p.powers.empty()) return p.coef;
    auto &t = table();
    auto [it, added] = t.index.emplace(key_of(p), t.products.size());
    if (added) t.products.push_back(p);
    return kSymBase - static_cast<int64_t>(it->second);
}

int64_t sym_dim(const std::string &name)
{
    if (!valid_symbol(name)) throw std::runtime_error(fmt::format("'{}' is not a symbol name (letters, digits, _)", name));
    SymProduct p;
    p.powers[name] = 1;
    return sym_make(p);
}

const SymProduct &sym_product(int64_t d)
{
    if (!is_sym(d)) internal_error(fmt::format("{} is not a symbolic size", d));
    return table().products[static_cast<size_t>(kSymBase - d)];
}

static SymProduct product_of(int64_t d)
{
    if (is_sym(d)) return sym_product(d);
    if (d < 0) internal_error(fmt::format("size {} in symbolic arithmetic", d));
    SymProduct p;
    p.coef = d;
    return p;
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
    if (a == 0 || b == 0) return 0;
    SymProduct p = product_of(a), q = product_of(b);
    if (q.coef > std::numeric_limits<int64_t>::max() / p.coef)
        throw std::runtime_error(fmt::format("the size {} x {} overflows", dim_str(a), dim_str(b)));
    p.coef *= q.coef;
    for (const auto &[s, e] : q.powers) p.powers[s] += e;
    return sym_make(p);
}

bool dim_div(int64_t a, int64_t b, int64_t &q)
{
    SymProduct p = product_of(a), d = product_of(b);
    if (d.coef == 0 || p.coef % d.coef) return false;
    p.coef /= d.coef;
    for (const auto &[s, e] : d.powers) {
        auto it = p.powers.find(s);
        if (it == p.powers.end() || it->second < e) return false;
        if ((it->second -= e) == 0) p.powers.erase(it);
    }
    q = sym_make(p);
    return true;
}

std::string dim_str(int64_t d)
{
    if (!is_sym(d)) return std::to_string(d);
    const SymProduct &p = sym_product(d);
    std::string out = p.coef == 1 ? "" : std::to_string(p.coef);
    for (const auto &[s, e] : p.powers)
        for (int i = 0; i < e; i++) out += (out.empty() ? "" : "*") + s;
    return out;
}

std::string sym_c_name(const std::string &symbol) { return "sym_" + symbol; }

std::string dim_c(int64_t d)
{
    if (!is_sym(d)) return std::to_string(d);
    const SymProduct &p = sym_product(d);
    std::vector<std::string> f;
    if (p.coef != 1) f.push_back(std::to_string(p.coef));
    for (const auto &[s, e] : p.powers)
        for (int i = 0; i < e; i++) f.push_back(sym_c_name(s));
    if (f.size() == 1) return f[0];
    std::string out = "(int64_t)" + f[0];
    for (size_t i = 1; i < f.size(); i++) out += " * " + f[i];
    return out;
}

std::vector<std::string> dim_reads(int64_t d)
{
    std::vector<std::string> out;
    if (is_sym(d))
        for (const auto &[s, e] : sym_product(d).powers) out.push_back(sym_c_name(s));
    return out;
}

int64_t parse_dim(const std::string &text)
{
    int64_t d = 1;
    size_t at = 0;
    if (text.empty()) throw std::runtime_error("an empty size");
    while (at <= text.size()) {
        size_t star = text.find('*', at);
        std::string f = text.substr(at, star == std::string::npos ? std::string::npos : star - at);
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

void sym_declare(const std::string &name, SymBounds b)
{
    if (!valid_symbol(name)) throw std::runtime_error(fmt::format("'{}' is not a symbol name (letters, digits, _)", name));
    table().bounds[name] = b;
}

const SymBounds &sym_bounds(const std::string &name)
{
    auto it = table().bounds.find(name);
    if (it == table().bounds.end()) throw std::runtime_error(fmt::format("symbol '{}' has no declared bounds", name));
    return it->second;
}

int64_t dim_max(int64_t d)
{
    if (!is_sym(d)) return d;
    const SymProduct &p = sym_product(d);
    int64_t v = p.coef;
    for (const auto &[s, e] : p.powers)
        for (int i = 0; i < e; i++) {
            int64_t m = sym_bounds(s).max;
            if (m > 0 && v > std::numeric_limits<int64_t>::max() / m) internal_error("symbolic size overflows at its bounds");
            v *= m;
        }
    return v;
}

}  // namespace ckc
