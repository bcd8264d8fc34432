#include "support/source_location.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "support/error.h"

namespace ckc {

namespace {

size_t skip_space(const std::string &t, size_t i)
{
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) i++;
    return i;
}

}  // namespace

size_t find_json_key(const std::string &text, const std::string &key, size_t from)
{
    const std::string quoted = "\"" + key + "\"";
    for (size_t at = text.find(quoted, from); at != std::string::npos; at = text.find(quoted, at + 1)) {
        size_t after = skip_space(text, at + quoted.size());
        if (after < text.size() && text[after] == ':') return at;
    }
    return kNoPosition;
}

size_t find_json_string_value(const std::string &text, const std::string &key, const std::string &value)
{
    const std::string quoted = "\"" + value + "\"";
    for (size_t k = find_json_key(text, key); k != kNoPosition; k = find_json_key(text, key, k + 1)) {
        size_t v = skip_space(text, text.find(':', k) + 1);
        if (text.compare(v, quoted.size(), quoted) == 0) return v;
    }
    return kNoPosition;
}

std::string located_message(const std::string &path, const std::string &text, size_t at, size_t len,
                            const std::string &msg)
{
    if (at == kNoPosition || at >= text.size()) return path + ": " + msg;
    size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
    begin = begin == std::string::npos || at == 0 ? 0 : begin + 1;
    if (begin > at) begin = 0;
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    size_t col = at - begin + 1;
    std::string src = text.substr(begin, end - begin);
    std::string pad;
    for (size_t i = begin; i < at; i++) pad += text[i] == '\t' ? '\t' : ' ';
    size_t marks = std::max<size_t>(1, std::min(len, end - at));
    return fmt::format("{}:{}:{}: {}\n    {}\n    {}^{}", path, line, col, msg, src, pad, std::string(marks - 1, '~'));
}

std::string json_syntax_error(const std::string &path, const std::string &text, size_t byte, const std::string &what)
{
    size_t pos = what.find("syntax error");  // drop the library's "[json.exception.parse_error.101] ..." prefix
    size_t at = text.empty() ? kNoPosition : std::min<size_t>(byte ? byte - 1 : 0, text.size() - 1);
    return located_message(path, text, at, 1, "not valid JSON: " + (pos == std::string::npos ? what : what.substr(pos)));
}

nlohmann::json parse_json_text(const std::string &path, const std::string &text)
{
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error &e) {
        throw Error(ErrorKind::Input, json_syntax_error(path, text, e.byte, e.what()));
    } catch (const nlohmann::json::exception &e) {
        // out_of_range.406 "number overflow parsing '1e606'": the library gives no offset, the token is quoted
        std::string what = e.what();
        size_t q = what.find('\''), q2 = q == std::string::npos ? q : what.find('\'', q + 1);
        size_t at = kNoPosition, len = 1;
        if (q2 != std::string::npos && q2 > q + 1) {
            at = text.find(what.substr(q + 1, q2 - q - 1));
            len = q2 - q - 1;
        }
        size_t tag = what.find("] ");
        std::string msg = tag == std::string::npos ? what : what.substr(tag + 2);
        if (msg.find("number overflow") != std::string::npos) msg += " (a number beyond the range of a double)";
        throw Error(ErrorKind::Input, located_message(path, text, at, len, "not valid JSON: " + msg));
    }
}

}  // namespace ckc
