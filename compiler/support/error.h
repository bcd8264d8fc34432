// error.h — the one error type of the compiler.
//
// Every failure the user can cause is a ckc::Error whose message names what
// is wrong and where (config key, tensor, node, layer). The kind picks the
// process exit code, documented in `ckc --help`:
//   1  invalid input (config.json / graph.json contents)
//   2  usage (bad command line; CLI11 reports these itself)
//   3  I/O (cannot read an input or write an output)
//   4  internal (a compiler bug: an IR invariant broke)
#pragma once

#include <stdexcept>
#include <string>

namespace ckc {

enum class ErrorKind { Input = 1, Usage = 2, IO = 3, Internal = 4 };

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string &msg) : std::runtime_error(msg), kind_(kind) {}
    ErrorKind kind() const { return kind_; }
    int exit_code() const { return static_cast<int>(kind_); }

private:
    ErrorKind kind_;
};

[[noreturn]] inline void input_error(const std::string &msg) { throw Error(ErrorKind::Input, msg); }
[[noreturn]] inline void io_error(const std::string &msg) { throw Error(ErrorKind::IO, msg); }
// A bug in ckc, not in the input: the CLI prints "ckc: internal error: " before the message.
[[noreturn]] inline void internal_error(const std::string &msg) { throw Error(ErrorKind::Internal, msg); }

}  // namespace ckc
