// gguf_writer.cpp — see gguf_writer.h.
#include "tools/gguf_writer.h"

#include <cstring>

#include "ck_quant.h"
#include "ck_checkpoint.h"
#include "support/error.h"

namespace ckc {

namespace {

constexpr uint64_t kAlign = 32;

void put(std::string &s, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_str(std::string &s, const std::string &v)
{
    put(s, v.size(), 8);
    s += v;
}

}  // namespace

void GgufWriter::key(const std::string &k, uint32_t type)
{
    put_str(kv_, k);
    put(kv_, type, 4);
    n_kv_++;
}

void GgufWriter::set_str(const std::string &k, const std::string &v)
{
    key(k, CK_GGUF_STRING);
    put_str(kv_, v);
}

void GgufWriter::set_u32(const std::string &k, uint32_t v)
{
    key(k, CK_GGUF_U32);
    put(kv_, v, 4);
}

void GgufWriter::set_i32(const std::string &k, int32_t v)
{
    key(k, CK_GGUF_I32);
    put(kv_, static_cast<uint32_t>(v), 4);
}

void GgufWriter::set_f32(const std::string &k, float v)
{
    uint32_t u;
    std::memcpy(&u, &v, 4);
    key(k, CK_GGUF_F32);
    put(kv_, u, 4);
}

void GgufWriter::set_bool(const std::string &k, bool v)
{
    key(k, CK_GGUF_BOOL);
    put(kv_, v ? 1 : 0, 1);
}

void GgufWriter::set_str_array(const std::string &k, const std::vector<std::string> &v)
{
    key(k, CK_GGUF_ARRAY);
    put(kv_, CK_GGUF_STRING, 4);
    put(kv_, v.size(), 8);
    for (const auto &s : v) put_str(kv_, s);
}

void GgufWriter::set_i32_array(const std::string &k, const std::vector<int32_t> &v)
{
    key(k, CK_GGUF_ARRAY);
    put(kv_, CK_GGUF_I32, 4);
    put(kv_, v.size(), 8);
    for (int32_t x : v) put(kv_, static_cast<uint32_t>(x), 4);
}

void GgufWriter::set_f32_array(const std::string &k, const std::vector<float> &v)
{
    key(k, CK_GGUF_ARRAY);
    put(kv_, CK_GGUF_F32, 4);
    put(kv_, v.size(), 8);
    for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        put(kv_, u, 4);
    }
}

void GgufWriter::add_tensor(const std::string &name, const std::vector<int64_t> &shape, int qtype,
                            std::vector<uint8_t> data)
{
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); i++) rows *= shape[i];
    size_t want = shape.empty() ? 0 : ck_qtype_row_bytes(qtype, shape.back()) * static_cast<size_t>(rows);
    if (shape.empty() || shape.size() > 4 || want != data.size())
        internal_error("gguf: tensor '" + name + "': " + std::to_string(data.size()) + " bytes for its shape and type " +
                       ck_qtype_name(qtype));
    tensors_.push_back({name, shape, qtype, std::move(data)});
}

std::string GgufWriter::bytes() const
{
    std::string out = "GGUF";
    put(out, 3, 4);
    put(out, tensors_.size(), 8);
    put(out, n_kv_, 8);
    out += kv_;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto &t : tensors_) {
        put_str(out, t.name);
        put(out, t.shape.size(), 4);
        for (size_t i = t.shape.size(); i-- > 0;) put(out, static_cast<uint64_t>(t.shape[i]), 8);  // innermost first
        put(out, static_cast<uint32_t>(t.qtype), 4);
        put(out, offset, 8);
        offsets.push_back(offset);
        offset += (t.data.size() + kAlign - 1) / kAlign * kAlign;
    }
    out.resize((out.size() + kAlign - 1) / kAlign * kAlign, '\0');
    size_t base = out.size();
    out.resize(base + offset, '\0');
    for (size_t i = 0; i < tensors_.size(); i++)
        if (!tensors_[i].data.empty()) std::memcpy(&out[base + offsets[i]], tensors_[i].data.data(), tensors_[i].data.size());
    return out;
}

}  // namespace ckc
