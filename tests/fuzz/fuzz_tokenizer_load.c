/*
 * libFuzzer target: the tokenizer loaders on arbitrary files. The first byte picks the format (tokenizer.json,
 * SentencePiece tokenizer.model, GGUF); the rest is the file. Whatever loads is then used: encode a fixed text
 * and decode it. Built and run by tests/fuzz/fuzz_tokenizer.sh (ASan + UBSan).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include "ck_tokenizer.h"
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "model.gguf"};
    const char *dir = fuzz_dir("tokenizer-load");
    char path[256], err[256];
    ck_tokenizer *t;
    if (size < 1 || !dir || fuzz_write(dir, names[data[0] % 3], data + 1, size - 1, path, sizeof path)) return 0;
    t = ck_tokenizer_load(path, err, sizeof err);
    if (t) {
        static const char text[] = "Hello, world! 123 <s> \xe6\x97\xa5\xe6\x9c\xac \xff end";
        int32_t ids[256];
        char out[1024];
        long n = ck_tokenizer_encode(t, text, sizeof text - 1, 1, ids, 256);
        if (n > 0) ck_tokenizer_decode(t, ids, n < 256 ? n : 256, 0, out, sizeof out);
        ck_tokenizer_free(t);
    } else if (!err[0]) {
        abort(); /* a refusal always says why */
    }
    unlink(path);
    return 0;
}
