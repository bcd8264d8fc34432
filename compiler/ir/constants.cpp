// constants.cpp — constant values of graph programs (see constants.h).
#include "ir/constants.h"

#include <cstring>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "ck_quant.h"
#include "ck_checkpoint.h"
#include "ir/eval.h"
#include "support/error.h"
#include "support/util.h"
#include "support/checkpoint.h"

namespace ckc {

DType dtype_from_checkpoint(ck_dtype d, const std::string &name)
{
    switch (d) {
    case CK_DT_F32: return DType::F32;
    case CK_DT_F16: return DType::F16;
    case CK_DT_BF16: return DType::BF16;
    case CK_DT_I64: return DType::I64;
    case CK_DT_I32: return DType::I32;
    case CK_DT_BOOL:
    case CK_DT_U8: return DType::Bool;
    case CK_DT_F64:
    case CK_DT_I16:
    case CK_DT_I8:
    case CK_DT_F8_E4M3:
    case CK_DT_F8_E5M2:
    case CK_DT_GGML: break;
    }
    input_error(fmt::format("weights: tensor '{}' has dtype {}, which ckc does not read", name, ck_dtype_name(d)));
}

ck_dtype checkpoint_dtype(DType t)
{
    switch (t) {
    case DType::F32: return CK_DT_F32;
    case DType::F16: return CK_DT_F16;
    case DType::BF16: return CK_DT_BF16;
    case DType::I32: return CK_DT_I32;
    case DType::I64: return CK_DT_I64;
    case DType::Bool: return CK_DT_BOOL;
    }
    internal_error("checkpoint_dtype: a DType outside the enum");
}

namespace {

// Element i of a checkpoint tensor stored as `dt` (dtype_from_checkpoint of its dtype).
double element(const ck_tensor_info &ti, DType dt, int64_t i)
{
    const unsigned char *p = static_cast<const unsigned char *>(ti.data);
    switch (dt) {
    case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return ck_fp16_to_fp32(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return ck_bf16_to_fp32(v); }
    case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::Bool: return p[i] ? 1.0 : 0.0;
    }
    internal_error("element: a DType outside the enum");
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
    DType stored = dtype_from_checkpoint(ti->dtype, name);
    for (int64_t i = 0; i < d.numel(); i++) d.v[i] = round_to_dtype(element(*ti, stored, i), d.dtype);
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

}  // namespace ckc
