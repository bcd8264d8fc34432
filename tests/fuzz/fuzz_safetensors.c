/*
 * libFuzzer target: safetensors checkpoints through the runtime's reader (ck_checkpoint_open), then used as a
 * generated model uses them (fuzz_checkpoint_use.h). The first byte picks what the rest is:
 *   even: a model.safetensors file;
 *   odd:  a model.safetensors.index.json, beside two valid shards (shard-1.safetensors, shard-2.safetensors);
 *         names that leave the folder must be refused (the path rule), so nothing outside is ever opened.
 * Seeds: tests/fuzz/seeds/safetensors (tests/fuzz/seeds.py).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include "fuzz_checkpoint_use.h"
#include "fuzz_files.h"

/* a valid shard holding tensor `name`: F32 [2, 32] (a q8_0 block wide) */
static void write_shard(const char *dir, const char *file, const char *name)
{
    char header[256], path[256];
    unsigned char buf[512 + 256];
    size_t hlen, i;
    float v[64];
    hlen = (size_t)snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2,32],\"data_offsets\":[0,256]}}",
                            name);
    for (i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    for (i = 0; i < 64; i++) v[i] = (float)i * 0.25f - 3.0f;
    memcpy(buf + 8 + hlen, v, sizeof v);
    fuzz_write(dir, file, buf, 8 + hlen + sizeof v, path, sizeof path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_dir("safetensors");
    static int shards;
    char path[256], err[4400] = "";
    ck_checkpoint *ck;
    if (!dir || size < 1) return 0;
    if (!shards) {
        write_shard(dir, "shard-1.safetensors", "a");
        write_shard(dir, "shard-2.safetensors", "b");
        shards = 1;
    }
    if (fuzz_write(dir, data[0] % 2 ? "model.safetensors.index.json" : "model.safetensors", data + 1, size - 1, path,
                   sizeof path))
        return 0;
    ck = ck_checkpoint_open(path, err, sizeof err);
    if (ck) {
        int i;
        for (i = 0; i < ck_checkpoint_count(ck); i++) /* the path rule: every file read is in the folder */
            if (strncmp(ck_checkpoint_tensor(ck, i)->file, dir, strlen(dir)) != 0 ||
                strstr(ck_checkpoint_tensor(ck, i)->file, "/../"))
                abort();
        fuzz_use_checkpoint(ck);
        ck_checkpoint_close(ck);
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
