// cwriter.h — a small C source writer: indentation, blocks, comments,
// banners and float literals, so emitters produce tidy code without caring
// about layout.
#pragma once

#include <string>

namespace ckc {

class CWriter {
public:
    void line(const std::string &s = "");           // one line at the current indent
    void lines(const std::string &text);            // several lines, each indented
    void comment(const std::string &s);             // /* s */
    void banner(const std::string &title);          // /* ==== title ==== */ section banner
    void open(const std::string &head);             // "head {" and indent
    void close(const std::string &tail = "}");      // dedent and "tail"
    void indent() { depth_++; }
    void dedent() { depth_--; }
    const std::string &str() const { return out_; }

private:
    std::string out_;
    int depth_ = 0;
};

// A C float literal that round-trips the value as float: 1e-05f, 0.125f, 1.0f.
std::string c_float(double v);
// A C double literal: 10000.0, 1e-05, 0.5.
std::string c_double(double v);

}  // namespace ckc
