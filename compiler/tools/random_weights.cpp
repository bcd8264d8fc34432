#include "tools/random_weights.h"

#include "ck_quant.h"
#include "ir/constants.h"

#include <cmath>
#include <cstring>
#include <map>

#include "support/util.h"

namespace ckc {

namespace {

// PCG32 (O'Neill), seeded per tensor from (seed, name) so adding a tensor
// never changes the others.
struct Pcg32 {
    uint64_t state, inc;
    Pcg32(uint64_t seed, uint64_t stream) : state(0), inc((stream << 1u) | 1u)
    {
        next();
        state += seed;
        next();
    }
    uint32_t next()
    {
        uint64_t old = state;
        state = old * 6364136223846793005ull + inc;
        uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
        uint32_t rot = static_cast<uint32_t>(old >> 59u);
        return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
    }
    double uniform() { return (next() + 0.5) / 4294967296.0; }  // (0, 1)
    double normal()
    {
        double u1 = uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

enum class Role { Matrix, Norm, Bias };

Role role_of(const std::string &name, const Shape &shape)
{
    if (shape.size() >= 2) return Role::Matrix;
    if (ends_with(name, ".bias")) return Role::Bias;
    if (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos) return Role::Norm;
    return Role::Bias;
}

}  // namespace

std::vector<std::pair<std::string, Shape>> required_tensors(const Program &p)
{
    std::map<std::string, Shape> out;
    for (Section s : p.sections())
        for (const auto &[name, t] : p.section(s).tensors()) {
            if (t.storage != Storage::Weight) continue;
            for (size_t i = 0; i < t.source.parts.size(); i++) {
                // a mixture's experts, one tensor each: {E} in the name, the experts first in the shape
                std::vector<std::string> parts;
                if (t.source.parts[i].find("{E}") == std::string::npos) parts.push_back(t.source.parts[i]);
                else
                    for (int64_t e = 0; e < t.shape[0]; e++)
                        parts.push_back(replace_all(t.source.parts[i], "{E}", std::to_string(e)));
                for (const std::string &part : parts) {
                    if (is_layer_section(s)) {
                        for (int64_t l = 0; l < p.info.n_layers; l++)
                            if (p.layer_runs(l, s)) out[replace_all(part, "{L}", std::to_string(l))] = t.source.part_shapes[i];
                    } else {
                        out[part] = t.source.part_shapes[i];
                    }
                }
            }
        }
    return {out.begin(), out.end()};
}

std::vector<StTensor> random_tensors(const Program &p, const RandomWeightOptions &o)
{
    std::vector<StTensor> out;
    for (const auto &[name, shape] : required_tensors(p)) {
        Pcg32 rng(o.seed, fnv1a64(name));
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        Role role = role_of(name, shape);
        StTensor t;
        t.name = name;
        t.shape = shape;
        t.dtype = checkpoint_dtype(o.dtype);
        t.data.resize(static_cast<size_t>(n * dtype_size(o.dtype)));
        for (int64_t i = 0; i < n; i++) {
            double v = role == Role::Matrix ? o.std * rng.normal()
                     : role == Role::Norm   ? 1.0 + 0.1 * rng.normal()
                                            : 0.1 * rng.normal();
            float f = static_cast<float>(v);
            uint8_t *dst = t.data.data() + i * dtype_size(o.dtype);
            if (o.dtype == DType::F32) {
                std::memcpy(dst, &f, 4);
            } else {
                uint16_t h = o.dtype == DType::BF16 ? ck_fp32_to_bf16(f) : ck_fp32_to_fp16(f);
                dst[0] = static_cast<uint8_t>(h & 0xff);
                dst[1] = static_cast<uint8_t>(h >> 8);
            }
        }
        out.push_back(std::move(t));
    }
    return out;
}

}  // namespace ckc
