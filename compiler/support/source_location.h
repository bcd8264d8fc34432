// source_location.h — errors that point into the JSON file they are about:
//
//   config.json:7:3: key "head_dim": 1024 is larger than the attention kernel supports (512)
//       "head_dim": 1024,
//       ^~~~~~~~~~
//
// The JSON library keeps no positions, so a key or a value is found again in
// the text (the first `"key":` after its enclosing key, or `"key": "value"`).
// When it is not found, the message is just "file: ...".
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace ckc {

constexpr size_t kNoPosition = std::string::npos;

// The byte of `"key"` used as an object key (followed by ':') at or after `from`; kNoPosition if absent.
size_t find_json_key(const std::string &text, const std::string &key, size_t from = 0);
// The byte of the string `"value"` given to `"key"` (`"key": "value"`); kNoPosition if absent.
size_t find_json_string_value(const std::string &text, const std::string &key, const std::string &value);

// "path:line:col: msg" with the line and a caret under `len` bytes from `at`; "path: msg" for kNoPosition.
std::string located_message(const std::string &path, const std::string &text, size_t at, size_t len,
                            const std::string &msg);

// A JSON parser's error as a located message: `byte` is its 1-based offset (0 when unknown), `what` its text.
std::string json_syntax_error(const std::string &path, const std::string &text, size_t byte, const std::string &what);

// `text` (the contents of `path`) parsed; anything the parser refuses (bad syntax, a number out of range such as
// 1e606, invalid UTF-8) is an input error located in the file, never an escaping library exception.
nlohmann::json parse_json_text(const std::string &path, const std::string &text);

}  // namespace ckc
