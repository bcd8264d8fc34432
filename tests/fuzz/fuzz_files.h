/*
 * fuzz_files.h — what the file-reading harnesses share: a private folder per fuzzing process and the input
 * written into it under the name the loader looks for (the loaders take paths, as users give them).
 */
#ifndef CK_FUZZ_FILES_H
#define CK_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the process's folder, /tmp/ck-fuzz-NAME-PID, made on first use; NULL if it cannot be */
static const char *fuzz_dir(const char *name)
{
    static char dir[128];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/ck-fuzz-%s-%ld", name, (long)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) return NULL;
    }
    return dir;
}

/* data[0..size) written to dir/file; the path in out (NUL-terminated); 0 on success */
static int fuzz_write(const char *dir, const char *file, const uint8_t *data, size_t size, char *out, size_t outlen)
{
    FILE *f;
    snprintf(out, outlen, "%s/%s", dir, file);
    f = fopen(out, "wb");
    if (!f) return -1;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return -1;
    }
    return fclose(f);
}

#endif
