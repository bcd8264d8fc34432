/*
 * libFuzzer target: the tokenizer loaders on arbitrary files. The first byte picks the format (tokenizer.json,
 * SentencePiece tokenizer.model, GGUF); the rest is the file. Whatever loads is then used: encode a fixed text
 * and decode it. Built and run by tests/fuzz/fuzz_tokenizer.sh (ASan + UBSan).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "ck_tokenizer.h"

static int mkdir_p(const char *d) { return mkdir(d, 0700) != 0 && access(d, W_OK) != 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "model.gguf"};
    static char dir[64];
    char path[128], err[256];
    FILE *f;
    ck_tokenizer *t;
    if (size < 1) return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/ck-fuzz-load-%ld", (long)getpid());
        if (mkdir_p(dir)) return 0;
    }
    snprintf(path, sizeof path, "%s/%s", dir, names[data[0] % 3]);
    f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
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
