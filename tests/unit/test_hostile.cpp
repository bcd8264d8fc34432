// Hostile files: each reproducer in tests/hostile/ (a finding of issue #32, from a fuzzer or by hand) is a clear
// error naming the file and the place, or, where the input is legal, a defined result. In the sanitizer build
// these run under ASan + UBSan + LeakSanitizer, which is what catches the undefined behaviour and the leaks.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ck_checkpoint.h"
#include "ck_errors.h"
#include "ck_quant.h"
#include "ck_tokenizer.h"

using Catch::Matchers::Contains;

namespace {

std::string hostile(const std::string &name) { return std::string(CKC_SOURCE_DIR) + "/tests/hostile/" + name; }

// the load error of a tokenizer file (the load must fail)
std::string tokenizer_error(const std::string &path)
{
    char err[512] = "";
    ck_tokenizer *t = ck_tokenizer_load(path.c_str(), err, sizeof err);
    ck_tokenizer_free(t);
    CHECK(t == nullptr);
    return err;
}

// the open error of a checkpoint (the open must fail)
std::string checkpoint_error(const std::string &path, int flags = 0)
{
    char err[4400] = "";
    ck_checkpoint *ck = ck_checkpoint_open_flags(path.c_str(), flags, err, sizeof err);
    ck_checkpoint_close(ck);
    CHECK(ck == nullptr);
    return err;
}

struct TempDir {
    std::string path;
    TempDir()
    {
        char tmpl[] = "/tmp/ckc_hostile_XXXXXX";
        REQUIRE(mkdtemp(tmpl));
        path = tmpl;
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
};

}  // namespace

TEST_CASE("hostile tokenizer.json: a huge id, one id for two pieces, a refused file", "[hostile][tokenizer]")
{
    // a 49-byte file with the id 1.1e9: the arrays are sized by the largest id, so it used to allocate 5.4 GB and
    // loop forever in the vocabulary's hash table (its 32-bit capacity wrapped to 0)
    std::string e = tokenizer_error(hostile("tokenizer-huge-id.json"));
    CHECK_THAT(e, Contains("tokenizer-huge-id.json") && Contains("model.vocab") && Contains("1100000000"));
    // two pieces with one id: which one the id decodes to would be a guess
    CHECK_THAT(tokenizer_error(hostile("tokenizer-shared-id.json")), Contains("id 1 is given to two pieces"));
    // refused after the vocabulary's scratch buffer was allocated (LeakSanitizer saw it leak)
    CHECK_THAT(tokenizer_error(hostile("tokenizer-refused.json")), Contains("model.vocab"));
}

TEST_CASE("hostile tokenizer.model: a SentencePiece model encodes empty and blank text", "[hostile][tokenizer]")
{
    // text that normalizes to nothing used to hand memcpy a null pointer (UBSan)
    char err[512] = "";
    ck_tokenizer *t = ck_tokenizer_load(hostile("sentencepiece-tiny.model").c_str(), err, sizeof err);
    REQUIRE(t);
    int32_t ids[16];
    for (const char *text : {"", " ", "   ", "\t"}) {
        long n = ck_tokenizer_encode(t, text, std::strlen(text), 1, ids, 16);
        INFO("text '" << text << "'");
        REQUIRE(n >= 1);
        CHECK(ids[0] == ck_tokenizer_bos(t));
    }
    CHECK(ck_tokenizer_encode(t, nullptr, 0, 0, ids, 16) == 0);
    long n = ck_tokenizer_encode(t, "a a", 3, 0, ids, 16);
    CHECK(n == 2);  // "▁a" "▁a"
    ck_tokenizer_free(t);
}

TEST_CASE("hostile safetensors: overlapping tensors, an empty index", "[hostile][safetensors]")
{
    std::string e = checkpoint_error(hostile("safetensors-overlap.safetensors"));
    CHECK_THAT(e, Contains("safetensors-overlap.safetensors") && Contains("'a' [0, 8)") && Contains("'b' [4, 12)") &&
                      Contains("overlap"));
    CHECK_THAT(checkpoint_error(hostile("index-empty")), Contains("\"weight_map\" is empty"));
}

TEST_CASE("hostile index: shards stay inside the model folder unless allowed", "[hostile][paths]")
{
    // "../weights-outside.safetensors": refused by default, read with the explicit option
    std::string e = checkpoint_error(hostile("index-escape"));
    CHECK_THAT(e, Contains("model.safetensors.index.json") && Contains("weight_map[\"a\"]") &&
                      Contains("\"..\" leaves the folder"));
    char err[512] = "";
    ck_checkpoint *ck = ck_checkpoint_open_flags(hostile("index-escape").c_str(), CK_OPEN_ANY_PATH, err, sizeof err);
    CHECK(ck);
    CHECK(ck_checkpoint_find(ck, "a"));
    ck_checkpoint_close(ck);
    // the environment's opt-out, read by ck_checkpoint_open (the generated model's loader)
    setenv("CK_WEIGHTS_ANY_PATH", "1", 1);
    ck = ck_checkpoint_open(hostile("index-escape").c_str(), err, sizeof err);
    unsetenv("CK_WEIGHTS_ANY_PATH");
    CHECK(ck);
    ck_checkpoint_close(ck);
    CHECK_THAT(checkpoint_error(hostile("index-absolute")), Contains("\"/etc/passwd\", an absolute path"));

    // a symlinked folder leading elsewhere is refused; a symlinked file (the Hugging Face cache's blobs) is not
    TempDir d;
    std::string model = d.path + "/model", elsewhere = d.path + "/elsewhere";
    REQUIRE(mkdir(model.c_str(), 0755) == 0);
    REQUIRE(mkdir(elsewhere.c_str(), 0755) == 0);
    REQUIRE(std::system(("cp " + hostile("weights-outside.safetensors") + " " + elsewhere + "/w.safetensors").c_str()) == 0);
    REQUIRE(symlink(elsewhere.c_str(), (model + "/sub").c_str()) == 0);
    REQUIRE(symlink((elsewhere + "/w.safetensors").c_str(), (model + "/blob.safetensors").c_str()) == 0);
    FILE *f = std::fopen((model + "/model.safetensors.index.json").c_str(), "w");
    std::fputs(R"({"weight_map": {"a": "sub/w.safetensors"}})", f);
    std::fclose(f);
    CHECK_THAT(checkpoint_error(model), Contains("outside the folder") && Contains("through a symlink"));
    f = std::fopen((model + "/model.safetensors.index.json").c_str(), "w");
    std::fputs(R"({"weight_map": {"a": "blob.safetensors"}})", f);
    std::fclose(f);
    ck = ck_checkpoint_open(model.c_str(), err, sizeof err);
    CHECK(ck);
    ck_checkpoint_close(ck);
}

TEST_CASE("hostile weights: a NaN or an infinity is refused by every block format", "[hostile][quant]")
{
    // the quantizers cast x / scale to an integer: undefined for NaN and infinities (UBSan)
    for (int i = 0; ck_qtype_traits_at(i); i++) {
        const ck_qtype_traits *tr = ck_qtype_traits_at(i);
        if (!tr->quantize || tr->block <= 1) continue;
        INFO(tr->name);
        for (float bad : {NAN, INFINITY, -INFINITY}) {
            std::vector<float> x(static_cast<size_t>(tr->block), 0.5f);
            x[3] = bad;
            std::vector<unsigned char> y(ck_qtype_row_bytes(tr->type, tr->block));
            CHECK(ck_quantize_row(tr->type, x.data(), y.data(), tr->block) == CK_EFORMAT);
        }
    }
}

TEST_CASE("hostile weights: a row whose scale is subnormal quantizes without undefined behaviour", "[hostile][quant]")
{
    // found by the safetensors fuzzer: amax 1e-40 gives a subnormal scale d, 1 / d is infinite and x / d was cast
    // to an integer (undefined); every code is now saturated, and the row dequantizes to finite values
    for (int i = 0; ck_qtype_traits_at(i); i++) {
        const ck_qtype_traits *tr = ck_qtype_traits_at(i);
        if (!tr->quantize || !tr->dequantize || tr->block <= 1) continue;
        INFO(tr->name);
        std::vector<float> x(static_cast<size_t>(tr->block)), back(x.size());
        for (size_t k = 0; k < x.size(); k++) x[k] = (k % 3 == 0 ? -1.0f : 1.0f) * 1e-40f * static_cast<float>(k % 7);
        std::vector<unsigned char> y(ck_qtype_row_bytes(tr->type, tr->block));
        REQUIRE(ck_quantize_row(tr->type, x.data(), y.data(), tr->block) == CK_OK);
        REQUIRE(ck_dequantize_row(tr->type, y.data(), back.data(), tr->block) == CK_OK);
        for (float v : back) CHECK(std::isfinite(v));
    }
}
