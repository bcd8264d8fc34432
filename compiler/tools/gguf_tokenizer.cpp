// gguf_tokenizer.cpp — see gguf_tokenizer.h. Byte-level BPE becomes a "gpt2" vocabulary (tokens in GPT-2's
// byte-to-character spelling, the merges in rank order, tokenizer.ggml.pre naming the split rules); SentencePiece
// BPE becomes a "llama" vocabulary (pieces with U+2581, scores, token types). A SentencePiece-style tokenizer.json
// has merge ranks, not scores: each token's score is minus the rank of the first merge that makes it, which
// orders merges the same way wherever one token has one merge (llama.cpp's converter faces the same gap).
#include "tools/gguf_tokenizer.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "support/error.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ckc {

namespace {

std::string byte_level_spelling(const char *p, uint32_t n)
{
    std::string out;
    char buf[4];
    for (uint32_t i = 0; i < n; i++) out.append(buf, static_cast<size_t>(ck_utf8_encode(ck_byte_level_cp(static_cast<unsigned char>(p[i])), buf)));
    return out;
}

const char *pre_name(const ck_tokenizer *t)
{
    if (t->n_split == 1 && t->split[0] == CK_SPLIT_GPT2) return "gpt-2";
    if (t->n_split == 1 && t->split[0] == CK_SPLIT_LLAMA3) return "llama-bpe";
    if (t->n_split == 1 && t->split[0] == CK_SPLIT_QWEN2) return "qwen2";
    if (t->n_split == 2 && t->split[0] == CK_SPLIT_DIGITS && t->split[1] == CK_SPLIT_GPT2) return "smollm";
    return nullptr;
}

}  // namespace

std::vector<std::string> write_gguf_tokenizer(const ck_tokenizer *t, GgufWriter &w, const std::string &where)
{
    std::vector<std::string> notes;
    const bool byte_level = t->kind == CK_TOK_BYTE_LEVEL;
    std::vector<std::string> tokens(static_cast<size_t>(t->n_vocab));
    std::vector<int32_t> types(static_cast<size_t>(t->n_vocab), CK_TT_NORMAL);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const int a = t->added_by_id[i];
        if (a >= 0) {
            tokens[i].assign(t->added[a].text, t->added[a].len);
            types[i] = t->added[a].special ? CK_TT_CONTROL : CK_TT_USER;
        } else if (!t->piece[i]) {
            tokens[i] = fmt::format("[PAD{}]", i);  // an id no file names (a gap before the added tokens)
            types[i] = CK_TT_UNUSED;
        } else {
            tokens[i] = byte_level ? byte_level_spelling(t->piece[i], t->piece_len[i])
                                   : std::string(t->piece[i], t->piece_len[i]);
            types[i] = t->type[i];
        }
        if (i == t->unk && a < 0) types[i] = CK_TT_UNKNOWN;
    }
    // the merges in rank order
    std::vector<const ck_merge_entry *> merges;
    for (uint32_t i = 0; i < t->merges_cap; i++)
        if (t->merges[i].key != ~uint64_t{0}) merges.push_back(&t->merges[i]);
    std::sort(merges.begin(), merges.end(), [](auto *x, auto *y) { return x->rank < y->rank; });
    auto left = [](const ck_merge_entry *e) { return static_cast<int32_t>(e->key >> 32); };
    auto right = [](const ck_merge_entry *e) { return static_cast<int32_t>(e->key & 0xFFFFFFFFu); };

    if (byte_level) {
        const char *pre = pre_name(t);
        if (!pre) input_error(where + ": the tokenizer's pre-tokenizer rules have no llama.cpp name (tokenizer.ggml.pre)");
        w.set_str("tokenizer.ggml.model", "gpt2");
        w.set_str("tokenizer.ggml.pre", pre);
        w.set_str_array("tokenizer.ggml.tokens", tokens);
        w.set_i32_array("tokenizer.ggml.token_type", types);
        std::vector<std::string> ms;
        ms.reserve(merges.size());
        for (auto *e : merges)
            ms.push_back(byte_level_spelling(t->piece[left(e)], t->piece_len[left(e)]) + " " +
                         byte_level_spelling(t->piece[right(e)], t->piece_len[right(e)]));
        w.set_str_array("tokenizer.ggml.merges", ms);
        for (int i = 0; i < t->n_norm; i++)
            if (t->norm[i].kind == CK_NORM_NFC)
                notes.push_back(where + ": the NFC normalizer has no GGUF key; llama.cpp tokenizes text as given "
                                        "(the same ids for text already in NFC)");
    } else {
        std::vector<float> scores(static_cast<size_t>(t->n_vocab), 0.0f);
        if (t->merge_mode == CK_MERGE_SCORES) {
            std::copy(t->score, t->score + t->n_vocab, scores.begin());
        } else {
            // minus the rank of the first merge that makes each token; tokens no merge makes are never merged into
            for (int32_t i = 0; i < t->n_vocab; i++) {
                int len = 0;
                if (types[i] != CK_TT_NORMAL || !t->piece[i]) continue;
                ck_utf8_decode(reinterpret_cast<const unsigned char *>(t->piece[i]), t->piece_len[i], &len);
                if (static_cast<uint32_t>(len) < t->piece_len[i]) scores[i] = -1e9f;  // more than one character
            }
            std::vector<bool> seen(static_cast<size_t>(t->n_vocab), false);
            for (auto *e : merges)
                if (!seen[e->id]) seen[e->id] = true, scores[e->id] = -static_cast<float>(e->rank);
        }
        bool prefix = false;
        for (int i = 0; i < t->n_norm; i++)
            prefix |= t->norm[i].kind == CK_NORM_PREPEND && std::string(t->norm[i].to) == "\xE2\x96\x81";
        prefix |= t->metaspace && t->metaspace_prepend > 0;
        if (t->metaspace && t->metaspace_prepend == 1)
            notes.push_back(where + ": Metaspace(prepend_scheme=first) becomes add_space_prefix: llama.cpp also puts "
                                    "U+2581 before text after a special token and before text that starts with a space");
        w.set_str("tokenizer.ggml.model", "llama");
        w.set_str("tokenizer.ggml.pre", "default");
        w.set_str_array("tokenizer.ggml.tokens", tokens);
        w.set_f32_array("tokenizer.ggml.scores", scores);
        w.set_i32_array("tokenizer.ggml.token_type", types);
        w.set_bool("tokenizer.ggml.add_space_prefix", prefix);
    }
    if (t->bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(t->bos));
    if (t->eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(t->eos));
    if (t->unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(t->unk));
    if (t->eot >= 0 && t->eot != t->eos) w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(t->eot));
    w.set_bool("tokenizer.ggml.add_bos_token", t->add_bos != 0);
    w.set_bool("tokenizer.ggml.add_eos_token", t->add_eos != 0);
    if (t->chat_template) w.set_str("tokenizer.chat_template", t->chat_template);
    return notes;
}

}  // namespace ckc
