// gguf_writer.h — writes GGUF files (version 3) that llama.cpp loads: the
// metadata in insertion order, then the tensor infos and the data, each
// tensor aligned to 32 bytes. Used by `ckc quantize` and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ckc {

class GgufWriter {
public:
    void set_str(const std::string &key, const std::string &v);
    void set_u32(const std::string &key, uint32_t v);
    void set_i32(const std::string &key, int32_t v);
    void set_f32(const std::string &key, float v);
    void set_bool(const std::string &key, bool v);
    void set_str_array(const std::string &key, const std::vector<std::string> &v);
    void set_i32_array(const std::string &key, const std::vector<int32_t> &v);
    void set_f32_array(const std::string &key, const std::vector<float> &v);
    // shape outermost first ([out, in] for a matrix; stored innermost first),
    // data already in `qtype` (ck_quant.h), rows of the last dim
    void add_tensor(const std::string &name, const std::vector<int64_t> &shape, int qtype, std::vector<uint8_t> data);
    std::string bytes() const;
    size_t n_tensors() const { return tensors_.size(); }

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        int qtype;
        std::vector<uint8_t> data;
    };
    void key(const std::string &k, uint32_t type);
    std::string kv_;
    uint64_t n_kv_ = 0;
    std::vector<Tensor> tensors_;
};

}  // namespace ckc
