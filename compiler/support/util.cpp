#include "support/util.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include <fmt/format.h>

#include "support/error.h"

namespace fs = std::filesystem;

namespace ckc {

std::string read_file(const std::string &path)
{
    std::error_code ec;
    if (fs::is_directory(path, ec)) io_error(path + ": is a directory, expected a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) io_error(path + ": cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) io_error(path + ": read failed");
    return ss.str();
}

uint64_t fnv1a64(const std::string &bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

std::string hex64(uint64_t v)
{
    char buf[19];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string join(const std::vector<std::string> &parts, const std::string &sep)
{
    std::string out;
    for (size_t i = 0; i < parts.size(); i++) {
        if (i) out += sep;
        out += parts[i];
    }
    return out;
}

bool starts_with(const std::string &s, const std::string &prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool ends_with(const std::string &s, const std::string &suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string to_lower(std::string s)
{
    for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string did_you_mean(const std::string &name, const std::vector<std::string> &known)
{
    const std::string a = to_lower(name);
    std::string best;
    size_t best_d = std::string::npos;
    for (const auto &k : known) {
        const std::string b = to_lower(k);
        std::vector<size_t> row(b.size() + 1);  // Levenshtein distance, one row at a time
        for (size_t j = 0; j <= b.size(); j++) row[j] = j;
        for (size_t i2 = 1; i2 <= a.size(); i2++) {
            size_t diag = row[0];
            row[0] = i2;
            for (size_t j = 1; j <= b.size(); j++) {
                size_t up = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i2 - 1] == b[j - 1] ? 0 : 1)});
                diag = up;
            }
        }
        if (row[b.size()] < best_d) {
            best_d = row[b.size()];
            best = k;
        }
    }
    // close: a third of the name's length, at least 1 and at most 3 edits
    size_t limit = std::max<size_t>(1, std::min<size_t>(3, a.size() / 3));
    return best_d <= limit && best_d > 0 ? " (did you mean '" + best + "'?)" : "";
}

std::string replace_all(std::string s, const std::string &from, const std::string &to)
{
    if (from.empty()) return s;
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
    return s;
}

std::string c_string(const std::string &s)
{
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
        else if (c < 0x20 || c == 0x7f) out += fmt::format("\\{:03o}", c);
        else if (c == '?') out += "\\?";  // no trigraphs
        else out += static_cast<char>(c);
    }
    return out + "\"";
}

std::string c_identifier(const std::string &name)
{
    std::string out;
    for (char c : name) {
        if (c == '{' || c == '}' || c == ',') continue;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        char d = ok ? c : '_';
        if (d == '_' && !out.empty() && out.back() == '_') continue;
        out += d;
    }
    while (!out.empty() && out.back() == '_') out.pop_back();
    if (out.empty()) out = "t";
    if (out[0] >= '0' && out[0] <= '9') out = "_" + out;
    return out;
}

std::string merge_names(const std::vector<std::string> &names)
{
    if (names.empty()) return "";
    if (names.size() == 1) return names[0];
    size_t pre = names[0].size(), suf = names[0].size();
    for (const auto &n : names) {
        size_t i = 0;
        while (i < pre && i < n.size() && n[i] == names[0][i]) i++;
        pre = i;
        size_t j = 0;
        while (j < suf && j < n.size() && n[n.size() - 1 - j] == names[0][names[0].size() - 1 - j]) j++;
        suf = j;
    }
    // never let prefix and suffix overlap inside the shortest name
    size_t shortest = names[0].size();
    for (const auto &n : names) shortest = std::min(shortest, n.size());
    if (pre + suf > shortest) suf = shortest - pre;
    std::vector<std::string> mids;
    for (const auto &n : names) mids.push_back(n.substr(pre, n.size() - pre - suf));
    return names[0].substr(0, pre) + "{" + join(mids, ",") + "}" + names[0].substr(names[0].size() - suf);
}

AtomicFiles::~AtomicFiles()
{
    if (committed_) return;
    for (const auto &p : pending_) std::remove(p.tmp.c_str());
}

void AtomicFiles::add(const std::string &path, const std::string &contents)
{
    std::error_code ec;
    fs::path dest(path);
    // the output replaces a file by rename: never a device, a directory or a FIFO (`-o /dev/null` would
    // replace the device node with a regular file)
    auto st = fs::status(dest, ec);
    if (!ec && fs::exists(st) && !fs::is_regular_file(st))
        io_error(path + ": exists and is not a regular file; ckc writes its outputs as new files (choose a path)");
    if (dest.has_parent_path()) {
        fs::create_directories(dest.parent_path(), ec);
        if (ec) io_error(path + ": cannot create directory " + dest.parent_path().string() + ": " + ec.message());
    }
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    pending_.push_back({path, tmp});
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) io_error(path + ": cannot open for writing");
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) io_error(path + ": write failed (disk full?)");
}

void AtomicFiles::commit()
{
    for (const auto &p : pending_) {
        if (std::rename(p.tmp.c_str(), p.path.c_str()) != 0) io_error(p.path + ": cannot move the output into place");
    }
    committed_ = true;
}

std::string absolute_path(const std::string &path)
{
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
    return ec ? fs::absolute(path).string() : p.string();
}

bool is_directory(const std::string &path)
{
    std::error_code ec;
    return fs::is_directory(path, ec);
}

bool is_file(const std::string &path)
{
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

std::string human_bytes(double b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

bool weights_any_path()
{
    const char *v = std::getenv("CK_WEIGHTS_ANY_PATH");
    return v && std::string(v) == "1";
}

}  // namespace ckc
