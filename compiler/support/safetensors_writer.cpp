#include "support/safetensors_writer.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/error.h"
#include "support/util.h"

namespace ckc {

std::string safetensors_bytes(const std::vector<StTensor> &tensors)
{
    std::vector<const StTensor *> sorted;
    for (const auto &t : tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto *a, auto *b) { return a->name < b->name; });
    nlohmann::json header = nlohmann::json::object();
    uint64_t off = 0;
    for (const StTensor *t : sorted) {
        header[t->name] = {{"dtype", ck_dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {off, off + t->data.size()}}};
        off += t->data.size();
    }
    header["__metadata__"] = {{"format", "pt"}, {"generator", "ckc random-weights"}};
    std::string h = header.dump();
    while ((8 + h.size()) % 8) h += ' ';  // align the data to 8 bytes
    std::string out;
    out.reserve(8 + h.size() + off);
    uint64_t n = h.size();
    for (int i = 0; i < 8; i++) out += static_cast<char>((n >> (8 * i)) & 0xff);
    out += h;
    for (const StTensor *t : sorted) out.append(reinterpret_cast<const char *>(t->data.data()), t->data.size());
    return out;
}

void write_checkpoint(const std::string &dir, const std::vector<StTensor> &tensors, uint64_t shard_bytes)
{
    uint64_t total = 0;
    for (const auto &t : tensors) total += t.data.size();
    AtomicFiles files;
    if (shard_bytes == 0 || total <= shard_bytes) {
        files.add(dir + "/model.safetensors", safetensors_bytes(tensors));
        files.commit();
        return;
    }
    std::vector<std::vector<StTensor>> shards(1);
    uint64_t cur = 0;
    std::vector<const StTensor *> sorted;
    for (const auto &t : tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto *a, auto *b) { return a->name < b->name; });
    for (const StTensor *t : sorted) {
        if (cur > 0 && cur + t->data.size() > shard_bytes) {
            shards.emplace_back();
            cur = 0;
        }
        shards.back().push_back(*t);
        cur += t->data.size();
    }
    nlohmann::json map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); i++) {
        std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
        for (const auto &t : shards[i]) map[t.name] = name;
        files.add(dir + "/" + name, safetensors_bytes(shards[i]));
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    files.add(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
    files.commit();
}

}  // namespace ckc
