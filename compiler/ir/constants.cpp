// constants.cpp — constant values of graph programs (see constants.h).
#include "weights/constants.h"

#include <cstring>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "ck_quant.h"
#include "ck_safetensors.h"
#include "ir/eval.h"
#include "support/error.h"
#include "support/util.h"
#include "weights/checkpoint.h"
#include "weights/safetensors_writer.h"

namespace ckc {

namespace {


DType dtype_of(ck_dtype d, const std::string &name)
{
    switch (d) {
    case CK_DT_F32: return DType::F32;
    case CK_DT_F16: return DType::F16;
    case CK_DT_BF16: return DType::BF16;
    case CK_DT_I64: return DType::I64;
    case CK_DT_I32: return DType::I32;
    case CK_DT_BOOL:
    case CK_DT_U8: return DType::Bool;
    default: input_error(fmt::format("weights: tensor '{}' has dtype {}, which ckc does not read", name, ck_dtype_name(d)));
    }
}

double element(const ck_tensor_info &ti, int64_t i)
{
    const unsigned char *p = static_cast<const unsigned char *>(ti.data);
    switch (ti.dtype) {
    case CK_DT_F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case CK_DT_F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return ck_fp16_to_fp32(v); }
    case CK_DT_BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return ck_bf16_to_fp32(v); }
    case CK_DT_I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case CK_DT_I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case CK_DT_BOOL:
    case CK_DT_U8: return p[i] ? 1.0 : 0.0;
    default: return 0.0;
    }
}

}  // namespace

const ConstData *constant_value(Program &p, const Tensor &t)
{
    if (t.storage != Storage::Weight || t.source.parts.size() != 1) return nullptr;
    const std::string &name = t.source.parts[0];
    if (name.find("{L}") != std::string::npos) return nullptr;
    std::string key = t.source.transposed ? name + "^T" : name;
    auto it = p.constants.find(key);
    if (it != p.constants.end()) return &it->second;
    if (t.source.transposed) {
        Tensor src = t;
        src.source.transposed = false;
        const ConstData *v = constant_value(p, src);
        if (!v || v->shape.size() != 2) return nullptr;
        ConstData tr;
        tr.dtype = v->dtype;
        tr.shape = {v->shape[1], v->shape[0]};
        tr.v.resize(v->v.size());
        for (int64_t r = 0; r < v->shape[0]; r++)
            for (int64_t c = 0; c < v->shape[1]; c++) tr.v[c * v->shape[0] + r] = v->v[r * v->shape[1] + c];
        return &(p.constants[key] = std::move(tr));
    }
    if (p.weights_path.empty()) return nullptr;
    CheckpointFile ck(p.weights_path, ErrorKind::IO);
    const ck_tensor_info *ti = ck.find(name);
    if (!ti) input_error(fmt::format("{}: constant '{}' is not in the weights file", p.weights_path, name));
    ConstData d;
    d.dtype = t.dtype;
    d.shape.assign(ti->shape, ti->shape + ti->ndim);
    d.v.resize(static_cast<size_t>(d.numel()));
    for (int64_t i = 0; i < d.numel(); i++) d.v[i] = round_to_dtype(element(*ti, i), d.dtype);
    return &(p.constants[key] = std::move(d));
}

std::string add_constant(Program &p, Graph &g, const std::string &base, ConstData data)
{
    std::string name = g.unique_name(base);
    while (p.constants.count(name)) name = g.unique_name(name + "_");
    Tensor t;
    t.name = name;
    t.shape = data.shape;
    t.dtype = data.dtype;
    t.storage = Storage::Weight;
    t.source.parts = {name};
    t.source.part_shapes = {data.shape};
    g.add_tensor(t);
    p.constants[name] = std::move(data);
    return name;
}

std::string graph_weights_bytes(const Program &p)
{
    std::set<std::string> names;
    for (Section s : kSections)
        for (const Node &n : p.section(s).nodes())
            for (const auto &in : n.inputs) {
                const Tensor &t = p.section(s).tensor(in);
                if (t.storage != Storage::Weight || t.dtype != DType::F32) continue;
                for (const auto &part : t.source.parts) {
                    if (part.find("{L}") == std::string::npos) {
                        names.insert(part);
                        continue;
                    }
                    for (int64_t l = 0; l < p.info.n_layers; l++) names.insert(replace_all(part, "{L}", std::to_string(l)));
                }
            }
    std::unique_ptr<CheckpointFile> ck;
    std::vector<StTensor> out;
    for (const auto &name : names) {
        StTensor st;
        st.name = name;
        auto it = p.constants.find(name);
        if (it != p.constants.end()) {
            st.shape = it->second.shape;
            st.dtype = DType::F32;
            st.data.resize(it->second.v.size() * 4);
            for (size_t i = 0; i < it->second.v.size(); i++) {
                float f = static_cast<float>(it->second.v[i]);
                std::memcpy(st.data.data() + 4 * i, &f, 4);
            }
        } else {
            if (!ck) {
                if (p.weights_path.empty()) internal_error("graph weight '" + name + "' has no source file");
                ck = std::make_unique<CheckpointFile>(p.weights_path, ErrorKind::IO);
            }
            const ck_tensor_info *ti = ck->find(name);
            if (!ti) input_error(fmt::format("{}: constant '{}' is not in the weights file", p.weights_path, name));
            st.shape.assign(ti->shape, ti->shape + ti->ndim);
            st.dtype = dtype_of(ti->dtype, name);
            const auto *b = static_cast<const uint8_t *>(ti->data);
            st.data.assign(b, b + ti->nbytes);
        }
        out.push_back(std::move(st));
    }
    return safetensors_bytes(out);
}

}  // namespace ckc
