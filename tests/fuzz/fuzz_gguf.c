/*
 * libFuzzer target: GGUF files through the runtime's reader (ck_checkpoint_open, what ck_model_init and
 * `ckc compile` open), then used as a generated model uses them (fuzz_checkpoint_use.h). Any crash, sanitizer
 * report, leak, or a refusal without a message is a finding. Seeds: tests/fuzz/seeds/gguf (written by
 * tests/fuzz/seeds.py: tiny GGUFs of every weight format, metadata of every type).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include "fuzz_checkpoint_use.h"
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_dir("gguf");
    char path[256], err[512] = "";
    ck_checkpoint *ck;
    if (!dir || fuzz_write(dir, "model.gguf", data, size, path, sizeof path)) return 0;
    ck = ck_checkpoint_open(path, err, sizeof err);
    if (ck) {
        fuzz_use_checkpoint(ck);
        ck_checkpoint_close(ck);
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
