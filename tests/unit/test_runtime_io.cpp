// The runtime's JSON reader, safetensors checkpoints and weight loader:
// every malformed input is a clear error naming the file and the tensor.
#include "helpers.h"

#include <cstring>

#include "ck_json.h"
#include "ck_quant.h"
#include "ck_weights.h"
#include "tools/gguf_writer.h"
#include "support/safetensors_writer.h"

using namespace ckc;
using namespace ckc_test;
using Catch::Matchers::Contains;

namespace {

StTensor f32_tensor(const std::string &name, std::vector<int64_t> shape, float start = 0.0f)
{
    StTensor t;
    t.name = name;
    t.shape = shape;
    int64_t n = 1;
    for (auto d : shape) n *= d;
    t.data.resize(static_cast<size_t>(n) * 4);
    for (int64_t i = 0; i < n; i++) {
        float f = start + static_cast<float>(i);
        std::memcpy(t.data.data() + i * 4, &f, 4);
    }
    return t;
}

std::string open_error(const std::string &path)
{
    char err[512] = "";
    ck_checkpoint *ck = ck_checkpoint_open(path.c_str(), err, sizeof err);
    if (ck) {
        ck_checkpoint_close(ck);
        FAIL("expected an error opening " << path);
    }
    return err;
}

std::string with_header(const std::string &header_json, const std::string &data)
{
    std::string out;
    uint64_t n = header_json.size();
    for (int i = 0; i < 8; i++) out += static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header_json + data;
}

}  // namespace

TEST_CASE("json: values, escapes, errors with offsets", "[io]")
{
    char err[200];
    std::string text = R"({"a": [1, -2.5e3, true, null], "s": "x\n\u00e9\ud83d\ude00", "o": {}})";
    ck_json_doc *doc = ck_json_parse(text.data(), text.size(), err, sizeof err);
    REQUIRE(doc);
    const ck_json *root = ck_json_root(doc);
    const ck_json *a = ck_json_get(root, "a");
    REQUIRE(a);
    CHECK(a->count == 4);
    CHECK(a->child->number == 1);
    CHECK(a->child->next->number == -2500);
    CHECK(a->child->next->next->type == CK_JSON_BOOL);
    CHECK(a->child->next->next->boolean == 1);
    CHECK(std::string(ck_json_get(root, "s")->string) == "x\n\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(ck_json_get(root, "missing") == nullptr);
    ck_json_free(doc);
    for (const char *bad : {"{", "{\"a\" 1}", "[1,]", "\"abc", "01", "{\"a\":1} x", "\"\\q\""}) {
        CHECK(ck_json_parse(bad, std::strlen(bad), err, sizeof err) == nullptr);
        CHECK_THAT(std::string(err), Contains("JSON error at byte"));
    }
    std::string deep(100, '[');
    CHECK(ck_json_parse(deep.data(), deep.size(), err, sizeof err) == nullptr);
    CHECK_THAT(std::string(err), Contains("nesting"));
}

TEST_CASE("safetensors: a valid file opens and finds tensors", "[io]")
{
    TempFile f(safetensors_bytes({f32_tensor("b", {2, 3}), f32_tensor("a", {4})}), ".safetensors");
    char err[512];
    ck_checkpoint *ck = ck_checkpoint_open(f.path.c_str(), err, sizeof err);
    REQUIRE(ck);
    CHECK(ck_checkpoint_count(ck) == 2);
    const ck_tensor_info *b = ck_checkpoint_find(ck, "b");
    REQUIRE(b);
    CHECK(b->dtype == CK_DT_F32);
    CHECK(b->ndim == 2);
    CHECK(b->shape[1] == 3);
    CHECK(b->nbytes == 24);
    CHECK(static_cast<const float *>(b->data)[5] == 5.0f);
    CHECK(ck_checkpoint_find(ck, "c") == nullptr);
    ck_checkpoint_close(ck);
}

TEST_CASE("a checkpoint in memory (weights compiled in) reads in place, and a broken one is an error naming it", "[io]")
{
    const std::string bytes = safetensors_bytes({f32_tensor("b", {2, 3}), f32_tensor("a", {4}, 10.0f)});
    char err[512] = "";
    ck_checkpoint *ck = ck_checkpoint_open_memory("model.safetensors (compiled in)", bytes.data(), bytes.size(), err,
                                                  sizeof err);
    REQUIRE(ck);
    const ck_tensor_info *a = ck_checkpoint_find(ck, "a");
    REQUIRE(a);
    CHECK(static_cast<const float *>(a->data)[1] == 11.0f);
    CHECK(static_cast<const char *>(a->data) >= bytes.data());  // in place: no copy
    CHECK(static_cast<const char *>(a->data) < bytes.data() + bytes.size());
    ck_checkpoint_close(ck);  // the bytes are the caller's: still readable below
    CHECK(bytes.size() > 16);
    for (size_t cut : {size_t(0), size_t(7), bytes.size() / 2, bytes.size() - 1}) {
        err[0] = 0;
        CHECK(ck_checkpoint_open_memory("model.safetensors (compiled in)", bytes.data(), cut, err, sizeof err) ==
              nullptr);
        CHECK(std::string(err).find("model.safetensors (compiled in)") != std::string::npos);
    }
}

TEST_CASE("safetensors: malformed files are clear errors", "[io][errors]")
{
    std::string good = safetensors_bytes({f32_tensor("w", {2, 3})});
    SECTION("empty and truncated")
    {
        TempFile f("abc", ".safetensors");
        CHECK_THAT(open_error(f.path), Contains("truncated"));
        TempFile g(good.substr(0, good.size() - 4), ".safetensors");
        CHECK_THAT(open_error(g.path), Contains("tensor 'w'"));
        CHECK_THAT(open_error(g.path), Contains("past the end"));
    }
    SECTION("header length beyond the file, and overflowing")
    {
        std::string s = good;
        s[0] = '\xff';
        s[1] = '\xff';
        TempFile f(s, ".safetensors");
        CHECK_THAT(open_error(f.path), Contains("exceeds the file size"));
        std::string o = good;
        for (int i = 0; i < 8; i++) o[i] = '\xff';  // 2^64 - 1: must not wrap around
        TempFile g(o, ".safetensors");
        CHECK_THAT(open_error(g.path), Contains("exceeds the file size"));
    }
    SECTION("bad JSON header")
    {
        TempFile f(with_header("{not json", ""), ".safetensors");
        CHECK_THAT(open_error(f.path), Contains("bad header"));
        TempFile g(with_header("[1,2]", ""), ".safetensors");
        CHECK_THAT(open_error(g.path), Contains("JSON object"));
    }
    SECTION("offset past the end")
    {
        TempFile f(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8000]}})", std::string(8, '\0')), ".safetensors");
        std::string e = open_error(f.path);
        CHECK_THAT(e, Contains("tensor 'w'"));
        CHECK_THAT(e, Contains("past the end"));
    }
    SECTION("shape that disagrees with the byte count")
    {
        TempFile f(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')), ".safetensors");
        CHECK_THAT(open_error(f.path), Contains("needs 12 bytes"));
    }
    SECTION("unknown dtype, bad shape entries, missing fields")
    {
        TempFile a(with_header(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')), ".safetensors");
        CHECK_THAT(open_error(a.path), Contains("unknown dtype \"Q4\""));
        TempFile b(with_header(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')), ".safetensors");
        CHECK_THAT(open_error(b.path), Contains("non-negative integers"));
        TempFile c(with_header(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')), ".safetensors");
        CHECK_THAT(open_error(c.path), Contains("data_offsets"));
    }
    SECTION("a folder without weights, and a missing path")
    {
        CHECK_THAT(open_error("/tmp"), Contains("no model.safetensors"));
        CHECK_THAT(open_error("/nonexistent/x.safetensors"), Contains("/nonexistent/x.safetensors"));
    }
}

TEST_CASE("safetensors: sharded checkpoints load as one", "[io]")
{
    char dir[] = "/tmp/ckc_shards_XXXXXX";
    REQUIRE(mkdtemp(dir));
    std::vector<StTensor> ts = {f32_tensor("a", {100}), f32_tensor("b", {100}, 1000), f32_tensor("c", {100}, 2000)};
    write_checkpoint(dir, ts, 500);  // 400 bytes each: one per shard
    char err[512];
    ck_checkpoint *ck = ck_checkpoint_open(dir, err, sizeof err);
    REQUIRE(ck);
    CHECK(ck_checkpoint_count(ck) == 3);
    CHECK(static_cast<const float *>(ck_checkpoint_find(ck, "c")->data)[1] == 2001.0f);
    CHECK(std::string(ck_checkpoint_find(ck, "c")->file).find("model-00003-of-00003") != std::string::npos);
    ck_checkpoint_close(ck);
    // an index naming a tensor its shard does not hold
    std::string idx = std::string(dir) + "/model.safetensors.index.json";
    std::ofstream(idx) << R"({"weight_map": {"a": "model-00001-of-00003.safetensors", "zz": "model-00001-of-00003.safetensors"}})";
    CHECK_THAT(open_error(idx), Contains("'zz'"));
    std::ofstream(idx) << R"({"weight_map": {"a": "model-00009-of-00009.safetensors"}})";
    CHECK_THAT(open_error(idx), Contains("model-00009-of-00009.safetensors"));
    std::system((std::string("rm -rf ") + dir).c_str());
}

TEST_CASE("weights: load, convert, concatenate, and name what is wrong", "[io]")
{
    StTensor h;  // f16 [1, 2, -0.5, 65504]
    h.name = "h";
    h.shape = {4};
    h.dtype = CK_DT_F16;
    for (float f : {1.0f, 2.0f, -0.5f, 65504.0f}) {
        uint16_t v = ck_fp32_to_fp16(f);
        h.data.push_back(static_cast<uint8_t>(v & 0xff));
        h.data.push_back(static_cast<uint8_t>(v >> 8));
    }
    StTensor b = h;  // bf16
    b.name = "b";
    b.dtype = CK_DT_BF16;
    b.data.clear();
    for (float f : {1.0f, 2.0f, -0.5f, 3.0f}) {
        uint16_t v = ck_fp32_to_bf16(f);
        b.data.push_back(static_cast<uint8_t>(v & 0xff));
        b.data.push_back(static_cast<uint8_t>(v >> 8));
    }
    StTensor i64;
    i64.name = "ids";
    i64.shape = {2};
    i64.dtype = CK_DT_I64;
    i64.data.resize(16);
    // layers.0.{p,q} sort adjacently in the file: concatenation can use them in place
    TempFile f(safetensors_bytes({f32_tensor("layers.0.p", {2, 3}), f32_tensor("layers.0.q", {1, 3}, 6), h, b, i64}),
               ".safetensors");
    char err[512];
    ck_checkpoint *ck = ck_checkpoint_open(f.path.c_str(), err, sizeof err);
    REQUIRE(ck);
    ck_weight_store store = {};
    const float *w = nullptr;

    ck_weight_spec cat = {0, 2, {"layers.%d.p", "layers.%d.q"}, 2, {{2, 3}, {1, 3}}};
    REQUIRE(ck_weights_load(ck, &cat, 0, &w, &store, err, sizeof err) == 0);
    for (int i = 0; i < 9; i++) CHECK(w[i] == static_cast<float>(i));
    CHECK(store.bytes_owned == 0);  // adjacent f32 parts: used in place
    CHECK(store.bytes_mapped == 36);

    ck_weight_spec rev = {0, 2, {"layers.%d.q", "layers.%d.p"}, 2, {{1, 3}, {2, 3}}};
    REQUIRE(ck_weights_load(ck, &rev, 0, &w, &store, err, sizeof err) == 0);
    CHECK(w[0] == 6.0f);
    CHECK(w[3] == 0.0f);
    CHECK(store.bytes_owned == 36);  // not in file order: copied

    ck_weight_spec half = {0, 1, {"h"}, 1, {{4}}};
    REQUIRE(ck_weights_load(ck, &half, -1, &w, &store, err, sizeof err) == 0);
    CHECK(w[0] == 1.0f);
    CHECK(w[2] == -0.5f);
    CHECK(w[3] == 65504.0f);
    ck_weight_spec bf = {0, 1, {"b"}, 1, {{4}}};
    REQUIRE(ck_weights_load(ck, &bf, -1, &w, &store, err, sizeof err) == 0);
    CHECK(w[3] == 3.0f);

    ck_weight_spec missing = {0, 1, {"layers.%d.r"}, 1, {{3}}};
    CHECK(ck_weights_load(ck, &missing, 7, &w, &store, err, sizeof err) != 0);
    CHECK_THAT(std::string(err), Contains("missing tensor 'layers.7.r'"));
    ck_weight_spec shape = {0, 1, {"layers.%d.p"}, 2, {{3, 2}}};
    CHECK(ck_weights_load(ck, &shape, 0, &w, &store, err, sizeof err) != 0);
    CHECK_THAT(std::string(err), Contains("'layers.0.p'"));
    CHECK_THAT(std::string(err), Contains("has shape [2, 3], but the model expects [3, 2]"));
    ck_weight_spec dtype = {0, 1, {"ids"}, 1, {{2}}};
    CHECK(ck_weights_load(ck, &dtype, -1, &w, &store, err, sizeof err) != 0);
    CHECK_THAT(std::string(err), Contains("'ids'"));
    CHECK_THAT(std::string(err), Contains("I64"));
    // a malformed table (more parts than the arrays hold, no part) is refused before any array is read
    ck_weight_spec none = {0, 0, {"h"}, 1, {{4}}};
    CHECK(ck_weights_load(ck, &none, -1, &w, &store, err, sizeof err) != 0);
    CHECK_THAT(std::string(err), Contains("0 parts"));
    ck_weight_spec many = {0, CK_WEIGHT_MAX_PARTS + 1, {"h"}, 1, {{4}}};
    CHECK(ck_weights_load(ck, &many, -1, &w, &store, err, sizeof err) != 0);
    CHECK_THAT(std::string(err), Contains("5 parts"));

    ck_weight_store_free(&store);
    ck_checkpoint_close(ck);
}

TEST_CASE("f16 / bf16 conversions round to nearest even", "[io]")
{
    CHECK(ck_fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(ck_bf16_to_fp32(ck_fp32_to_bf16(3.14159f)) == Approx(3.14159f).epsilon(1e-2));
    CHECK(ck_fp32_to_fp16(1.0f) == 0x3c00);
    CHECK(ck_fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(ck_fp32_to_fp16(1e6f) == 0x7c00);           // overflow to inf
    CHECK(ck_fp16_to_fp32(ck_fp32_to_fp16(5.96e-8f)) == Approx(5.96e-8f).epsilon(1e-2));  // smallest subnormal
    for (float f : {0.1f, -2.5f, 1000.25f, 6.1e-5f})
        CHECK(ck_fp16_to_fp32(ck_fp32_to_fp16(f)) == Approx(f).epsilon(1e-3));
}

// ---- GGUF -----------------------------------------------------------------------

namespace {

std::vector<uint8_t> quantized(int type, const std::vector<float> &x)
{
    std::vector<uint8_t> q(ck_qtype_row_bytes(type, static_cast<int64_t>(x.size())));
    REQUIRE(ck_quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size())) == 0);
    return q;
}

std::string small_gguf()
{
    GgufWriter w;
    w.set_str("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_str_array("tokenizer.ggml.tokens", {"<s>", "a", "b\xc3\xa9"});
    w.set_i32_array("tokenizer.ggml.token_type", {3, 1, 1});
    std::vector<float> m(4 * 64);
    for (size_t i = 0; i < m.size(); i++) m[i] = std::sin(0.1f * static_cast<float>(i));
    w.add_tensor("blk.0.attn_q.weight", {4, 64}, CK_Q_Q8_0, quantized(CK_Q_Q8_0, m));
    w.add_tensor("output_norm.weight", {64}, CK_Q_F32, quantized(CK_Q_F32, std::vector<float>(64, 0.5f)));
    return w.bytes();
}

}  // namespace

TEST_CASE("gguf: tensors (shape outermost first, in place) and metadata", "[io][gguf]")
{
    TempFile f(small_gguf(), ".gguf");
    char err[512] = "";
    ck_checkpoint *ck = ck_checkpoint_open(f.path.c_str(), err, sizeof err);
    REQUIRE(ck);
    INFO(err);
    REQUIRE(ck_checkpoint_count(ck) == 2);
    const ck_tensor_info *q = ck_checkpoint_find(ck, "blk.0.attn_q.weight");
    REQUIRE(q);
    CHECK(q->dtype == CK_DT_GGML);
    CHECK(q->qtype == CK_Q_Q8_0);
    CHECK(q->ndim == 2);
    CHECK(q->shape[0] == 4);
    CHECK(q->shape[1] == 64);
    CHECK(q->nbytes == 4 * 68);
    CHECK(reinterpret_cast<uintptr_t>(q->data) % 32 == 0);
    const ck_tensor_info *n = ck_checkpoint_find(ck, "output_norm.weight");
    REQUIRE(n);
    CHECK(n->dtype == CK_DT_F32);
    CHECK(static_cast<const float *>(n->data)[63] == 0.5f);

    REQUIRE(ck_checkpoint_kv_count(ck) == 6);
    int64_t v = 0;
    double d = 0;
    size_t len = 0;
    const char *s = ck_gguf_kv_str(ck_checkpoint_kv_find(ck, "general.architecture"), 0, &len);
    REQUIRE(s);
    CHECK(std::string(s, len) == "llama");
    CHECK(ck_gguf_kv_int(ck_checkpoint_kv_find(ck, "llama.block_count"), 0, &v) == 0);
    CHECK(v == 2);
    CHECK(ck_gguf_kv_num(ck_checkpoint_kv_find(ck, "llama.attention.layer_norm_rms_epsilon"), 0, &d) == 0);
    CHECK(d == Approx(1e-5));
    CHECK(ck_gguf_kv_int(ck_checkpoint_kv_find(ck, "tokenizer.ggml.add_bos_token"), 0, &v) == 0);
    CHECK(v == 1);
    const ck_gguf_kv *tokens = ck_checkpoint_kv_find(ck, "tokenizer.ggml.tokens");
    REQUIRE(tokens);
    CHECK(tokens->count == 3);
    s = ck_gguf_kv_str(tokens, 2, &len);
    REQUIRE(s);
    CHECK(std::string(s, len) == "b\xc3\xa9");
    CHECK(ck_gguf_kv_str(tokens, 3, &len) == nullptr);  // past the end
    CHECK(ck_gguf_kv_int(tokens, 0, &v) != 0);           // not an integer
    CHECK(ck_gguf_kv_int(ck_checkpoint_kv_find(ck, "tokenizer.ggml.token_type"), 0, &v) == 0);
    CHECK(v == 3);
    CHECK(ck_checkpoint_kv_find(ck, "missing") == nullptr);

    // the weight loader dequantizes a block type to float32
    ck_weight_spec spec = {0, 1, {"blk.%d.attn_q.weight"}, 2, {{4, 64}}};
    ck_weight_store store = {};
    const float *w = nullptr;
    REQUIRE(ck_weights_load(ck, &spec, 0, &w, &store, err, sizeof err) == 0);
    std::vector<float> ref(4 * 64);
    ck_dequantize_row(CK_Q_Q8_0, q->data, ref.data(), 256);
    for (size_t i = 0; i < ref.size(); i++) REQUIRE(w[i] == ref[i]);
    ck_weight_store_free(&store);
    ck_checkpoint_close(ck);
}

TEST_CASE("gguf: every corruption is an error naming what is wrong, never a crash", "[io][gguf]")
{
    const std::string good = small_gguf();
    auto patched = [&](size_t at, const std::string &bytes) {
        std::string s = good;
        s.replace(at, bytes.size(), bytes);
        return s;
    };
    auto u64 = [](uint64_t v) {
        std::string s;
        for (int i = 0; i < 8; i++) s += static_cast<char>((v >> (8 * i)) & 0xff);
        return s;
    };
    // every truncation of the header and of the data
    for (size_t cut : {size_t(0), size_t(3), size_t(7), size_t(20), size_t(40), size_t(100), size_t(200),
                       good.size() / 2, good.size() - 1}) {
        TempFile f(good.substr(0, cut), ".gguf");
        INFO("cut at " << cut);
        std::string e = open_error(f.path);
        CHECK_THAT(e, Contains(f.path));
    }
    {
        TempFile f(patched(0, "GGUX"), ".gguf");
        CHECK_THAT(open_error(f.path), Contains("not a GGUF file"));
    }
    {
        TempFile f(patched(4, std::string("\x01\0\0\0", 4)), ".gguf");
        CHECK_THAT(open_error(f.path), Contains("GGUF version 1"));
    }
    {
        TempFile f(patched(8, u64(1ull << 40)), ".gguf");  // tensor count
        CHECK_THAT(open_error(f.path), Contains("cannot fit"));
    }
    {
        TempFile f(patched(16, u64(1ull << 60)), ".gguf");  // metadata count
        CHECK_THAT(open_error(f.path), Contains("cannot fit"));
    }
    // the tensor infos are the last bytes before the aligned data: find the q tensor's type and offset
    size_t name_at = good.find("blk.0.attn_q.weight");
    REQUIRE(name_at != std::string::npos);
    size_t type_at = name_at + 19 + 4 + 16, off_at = type_at + 4;
    {
        TempFile f(patched(type_at, std::string("\x0b\0\0\0", 4)), ".gguf");  // q3_K
        std::string e = open_error(f.path);
        CHECK_THAT(e, Contains("'blk.0.attn_q.weight'"));
        CHECK_THAT(e, Contains("q3_K"));
        CHECK_THAT(e, Contains("does not read"));
    }
    {
        TempFile f(patched(type_at, std::string("\x63\0\0\0", 4)), ".gguf");  // no such type
        CHECK_THAT(open_error(f.path), Contains("GGML type 99 (unknown)"));
    }
    {
        TempFile f(patched(type_at, std::string("\x0c\0\0\0", 4)), ".gguf");  // q4_K: 64 is not a block of 256
        CHECK_THAT(open_error(f.path), Contains("not a whole number of q4_K blocks"));
    }
    {
        TempFile f(patched(off_at, u64(1u << 20)), ".gguf");
        std::string e = open_error(f.path);
        CHECK_THAT(e, Contains("'blk.0.attn_q.weight'"));
        CHECK_THAT(e, Contains("past the end"));
    }
    {
        TempFile f(patched(off_at, u64(4)), ".gguf");
        CHECK_THAT(open_error(f.path), Contains("not aligned"));
    }
    {
        TempFile f(patched(type_at, std::string("\x00\0\0\0", 4)), ".gguf");  // f32: 4 x 64 x 4 bytes > the data
        CHECK_THAT(open_error(f.path), Contains("past the end"));
    }
}

// ---- a model's weights on huge pages (huge_pages.c) ------------------------------------------------------------

extern "C" {
#include "../../runtime/io/checkpoint.h"
}

#include <fcntl.h>
#include <sys/mman.h>

namespace {

// `bytes` written to a new file in 4 KiB write()s: Linux caches such a file on 4 KiB pages
std::string write_in_small_pieces(const std::string &bytes)
{
    char tmpl[] = "/tmp/ckc_test_huge_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    for (size_t off = 0; off < bytes.size(); off += 4096) {
        size_t n = std::min<size_t>(4096, bytes.size() - off);
        REQUIRE(write(fd, bytes.data() + off, n) == static_cast<ssize_t>(n));
    }
    close(fd);
    return tmpl;
}

// [at, at + len) of the file at path dropped from the page cache and read cold through a mapping advised onto
// huge pages: on huge folios where the file system can
void read_cold(const std::string &path, size_t file_size, size_t at, size_t len)
{
    volatile char sum = 0;
    int fd = open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    char *m = static_cast<char *>(mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0));
    REQUIRE(m != MAP_FAILED);
    madvise(m, file_size, MADV_HUGEPAGE);
    REQUIRE(fdatasync(fd) == 0);  // (a dirty page cannot be dropped)
    madvise(m + at, len, MADV_DONTNEED);
    posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    for (size_t i = 0; i < len; i += 4096) sum += m[at + i];
    munmap(m, file_size);
    close(fd);
}

// every value of the tensor "w" made by f32_tensor: the bytes survived whatever the loader did
bool values_intact(const ck_checkpoint *ck, size_t n)
{
    const ck_tensor_info *w = ck_checkpoint_find(ck, "w");
    if (!w || w->nbytes != n * 4) return false;
    const float *v = static_cast<const float *>(w->data);
    for (size_t i = 0; i < n; i += 1 + i / 7)
        if (v[i] != static_cast<float>(i)) return false;
    return v[n - 1] == static_cast<float>(n - 1);
}

std::string thp_setting()
{
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string s;
    std::getline(f, s);
    return s;
}

}  // namespace

TEST_CASE("weights on huge pages: a file cached on small pages is read again onto huge ones, or copied (CK_OPEN_READ)",
          "[io][huge]")
{
#if defined(__linux__)
    const size_t n = (size_t)18 << 20;  // 72 MiB of f32: past the 64 MiB below which the loader does not look
    std::string path = write_in_small_pieces(safetensors_bytes({f32_tensor("w", {(int64_t)n})}));
    char err[512] = "";
    volatile char sum = 0;

    // a plain mapping, faulted in: where it sits now
    ck_checkpoint *ck = ck_checkpoint_open_flags(path.c_str(), 0, err, sizeof err);
    REQUIRE(ck);
    REQUIRE(values_intact(ck, n));
    for (size_t i = 0; i < ck->files[0].size; i += 4096) sum += static_cast<const char *>(ck->files[0].map)[i];
    long long rss0, huge0 = ck_io_huge_bytes(ck->files[0].map, &rss0);
    CHECK(ck->files[0].settled == CK_SETTLE_SKIPPED);
    const size_t file_size = ck->files[0].size;
    ck_checkpoint_close(ck);

    // where the first probe of ck_io_settle_huge looks (a fifth in), the cache is made huge already: a probe
    // there adds nothing, and the next one must decide (as SmolLM2's GGUF was cached: 6 of 93 MiB huge). Where
    // that range did come back huge, this file system can cache on huge folios, so the loader must re-read.
    bool can = false;
    const size_t two = size_t(2) << 20;
    if (huge0 >= 0 && !ck_io_huge_enough(huge0, rss0)) {
        read_cold(path, file_size, (file_size / 5) & ~(two - 1), two);
        ck = ck_checkpoint_open_flags(path.c_str(), 0, err, sizeof err);
        REQUIRE(ck);
        for (size_t i = 0; i < file_size; i += 4096) sum += static_cast<const char *>(ck->files[0].map)[i];
        long long rss_part, huge_part = ck_io_huge_bytes(ck->files[0].map, &rss_part);
        ck_checkpoint_close(ck);
        INFO("after making the first probe's range huge: " << huge_part << " of " << rss_part << " bytes huge");
        can = huge_part == (long long)two;
        if (!can) WARN("a 2 MiB range read cold stayed on small pages here (" << huge_part << " bytes huge)");
    }

    // CK_OPEN_STREAM: onto huge pages when the file system can (a 2 MiB probe tells)
    ck = ck_checkpoint_open_flags(path.c_str(), CK_OPEN_STREAM, err, sizeof err);
    REQUIRE(ck);
    CHECK(values_intact(ck, n));
    long long rss1, huge1 = ck_io_huge_bytes(ck->files[0].map, &rss1);
    int settled = ck->files[0].settled;
    ck_checkpoint_close(ck);
    if (huge0 < 0) {
        WARN("no /proc/self/smaps: where the pages sit is not known here; only the bytes were checked");
        CHECK(settled == CK_SETTLE_SKIPPED);
    } else if (ck_io_huge_enough(huge0, rss0)) {
        WARN("this kernel cached the file written in 4 KiB pieces on huge folios (" << (huge0 >> 20) << " of "
             << (rss0 >> 20) << " MiB): the re-read is not needed here, so not tested");
        CHECK(settled == CK_SETTLE_HUGE);
    } else if (settled == CK_SETTLE_CANNOT) {
        CHECK_FALSE(can);  // the probes missed a file system that can
        WARN("the file system of /tmp gives small folios when read cold as well: the re-read is not tested here");
        CHECK(huge1 * 2 < rss1);
    } else {
        INFO("huge pages before: " << (huge0 >> 20) << " of " << (rss0 >> 20) << " MiB; after: " << (huge1 >> 20)
                                   << " of " << (rss1 >> 20) << " MiB");
        CHECK(settled == CK_SETTLE_REREAD);
        CHECK(ck_io_huge_enough(huge1, rss1));
    }

    // A file mostly on huge pages, the rest small (as a GGUF `ckc quantize` had written was found: 340 of 590
    // MiB huge): read again too, where the file system can. Its huge part covers the 2 MiB ranges the probes
    // would read (a fifth in, ... four fifths): it is some of the file on huge pages that says the file system can.
    if (can) {
        std::string mostly = write_in_small_pieces(safetensors_bytes({f32_tensor("w", {(int64_t)n})}));
        const size_t fifth = (file_size / 5) & ~(two - 1), last = (file_size / 5 * 4) & ~(two - 1);
        read_cold(mostly, file_size, fifth, last + two - fifth);
        ck = ck_checkpoint_open_flags(mostly.c_str(), 0, err, sizeof err);
        REQUIRE(ck);
        for (size_t i = 0; i < file_size; i += 4096) sum += static_cast<const char *>(ck->files[0].map)[i];
        long long rss3, huge3 = ck_io_huge_bytes(ck->files[0].map, &rss3);
        ck_checkpoint_close(ck);
        ck = ck_checkpoint_open_flags(mostly.c_str(), CK_OPEN_STREAM, err, sizeof err);
        REQUIRE(ck);
        CHECK(values_intact(ck, n));
        long long rss4, huge4 = ck_io_huge_bytes(ck->files[0].map, &rss4);
        INFO("huge pages before: " << (huge3 >> 20) << " of " << (rss3 >> 20) << " MiB; after: " << (huge4 >> 20)
                                   << " of " << (rss4 >> 20) << " MiB");
        CHECK(huge3 * 2 >= rss3);  // (the case: more than half of it huge)
        CHECK_FALSE(ck_io_huge_enough(huge3, rss3));
        CHECK(ck->files[0].settled == CK_SETTLE_REREAD);
        CHECK(ck_io_huge_enough(huge4, rss4));
        ck_checkpoint_close(ck);
        std::remove(mostly.c_str());
    }

    // CK_OPEN_READ: a read-only copy on anonymous huge pages, whatever the page cache holds
    ck = ck_checkpoint_open_flags(path.c_str(), CK_OPEN_READ, err, sizeof err);
    REQUIRE(ck);
    CHECK(values_intact(ck, n));
    CHECK(ck->files[0].read_len >= ck->files[0].size);
    CHECK(reinterpret_cast<uintptr_t>(ck->files[0].map) % (2u << 20) == 0);
    long long rss2, huge2 = ck_io_huge_bytes(ck->files[0].map, &rss2);
    if (thp_setting().find("[never]") != std::string::npos || huge2 < 0)
        WARN("transparent huge pages are off (or smaps is missing): only the copy's bytes were checked");
    else
        CHECK(huge2 * 2 >= rss2);
    ck_checkpoint_close(ck);
    std::remove(path.c_str());
#else
    WARN("huge pages are a Linux matter: not tested on this system");
#endif
}

TEST_CASE("CK_WEIGHTS_LOAD picks how a model's weights are loaded, and a wrong value names itself", "[io][huge]")
{
    TempFile f(safetensors_bytes({f32_tensor("w", {64})}), ".safetensors");
    char err[512] = "";
    const char *old = getenv("CK_WEIGHTS_LOAD");
    std::string saved = old ? old : "";
    struct Case {
        const char *value;
        bool read;
    } cases[] = {{"read", true}, {"map", false}, {"stream", false}, {"", false}};
    for (const Case &c : cases) {
        setenv("CK_WEIGHTS_LOAD", c.value, 1);
        ck_checkpoint *ck = ck_checkpoint_open_weights(f.path.c_str(), err, sizeof err);
        REQUIRE(ck);
        CHECK((ck->files[0].read_len > 0) == c.read);
        CHECK((c.read || c.value == std::string("map")) == !(ck->flags & CK_OPEN_STREAM));
        CHECK(values_intact(ck, 64));
        ck_checkpoint_close(ck);
    }
    setenv("CK_WEIGHTS_LOAD", "mmap", 1);
    CHECK(ck_checkpoint_open_weights(f.path.c_str(), err, sizeof err) == nullptr);
    CHECK_THAT(std::string(err), Contains("CK_WEIGHTS_LOAD=mmap") && Contains("stream") && Contains("read"));
    if (old)
        setenv("CK_WEIGHTS_LOAD", saved.c_str(), 1);
    else
        unsetenv("CK_WEIGHTS_LOAD");
}
