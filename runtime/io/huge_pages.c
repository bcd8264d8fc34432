/*
 * huge_pages.c — reading a file whole, and a model's weights on 2 MiB pages (internal to runtime/io; checkpoint.c
 * calls it, and it calls nothing of the checkpoint).
 *
 * Decode streams every weight once per token, so the TLB walks of 4 KiB pages cost: 1.1B q4_0 on one thread
 * decoded 60.8 tok/s from a mapping on 4 KiB pages and 65.0 from one on 2 MiB pages (AMD EPYC Zen 5 VM). A
 * mapped file sits on whatever the page cache holds: on 2 MiB folios when it was read cold (Linux 6.x, ext4 or
 * xfs), on 4 KiB ones when it was written in small pieces or while memory was fragmented (a file a quantizer or
 * a download wrote a moment ago), and such a file stays that way until it leaves the cache. Two ways out:
 * - ck_io_settle_huge (CK_OPEN_STREAM, the default for a model's weights): fault the mapping in, and where more
 *   than a tenth of it is on small pages, drop the file's cached pages and fault it in again: read back cold, on
 *   huge folios. (The bar was half, until a GGUF that `ckc quantize` had written was found mapped 340 of 590 MiB
 *   huge and left so: 1.1B q4_0 decode on one thread 56 -> 64 tok/s once read again, AMD EPYC Zen 5 VM.)
 *   The page cache stays shared; the next process finds it huge. It is tried on 2 MiB probes first (up to 4),
 *   so a file system that cannot cache on huge folios costs a few 2 MiB re-reads, not the whole file.
 * - ck_io_read_huge (CK_OPEN_READ): read the file into anonymous memory advised onto huge pages (a copy per
 *   process, and the only way onto huge pages where the page cache has no large folios at all).
 * Elsewhere than Linux the first does nothing and the second reads into ordinary anonymous memory.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE, posix_fadvise */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"

int ck_io_read_all(int fd, void *dst, size_t size)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, (char *)dst + got, size - got > (1u << 30) ? (1u << 30) : size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return CK_READ_ERRNO;
        if (n == 0) return CK_READ_SHORT;
        got += (size_t)n;
    }
    return CK_READ_OK;
}

#ifndef CK_NO_MMAP
#include <fcntl.h>
#include <sys/mman.h>
#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif

#define HUGE_PAGE ((size_t)2 << 20)
/* files below this are not worth a check: a few huge pages at most */
#define SETTLE_MIN_BYTES ((size_t)64 << 20)

void *ck_io_read_huge(int fd, size_t size, size_t *len, int *rc)
{
    size_t n = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), lead;
    char *raw, *p;
    *rc = CK_READ_NOMEM;
    if (n < size || n + HUGE_PAGE < n) return NULL;
    raw = (char *)mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1)); /* 2 MiB-aligned */
    lead = (size_t)(p - raw);
    if (lead) munmap(raw, lead);
    munmap(p + n, HUGE_PAGE - lead);
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* advice: where THP is off, small pages work the same */
#endif
    if ((*rc = ck_io_read_all(fd, p, size)) != CK_READ_OK) {
        const int e = errno; /* read()'s, for the message */
        munmap(p, n);
        errno = e;
        return NULL;
    }
    mprotect(p, n, PROT_READ); /* read-only, like a mapping */
    *len = n;
    return p;
}

#if defined(__linux__)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Bytes of the mapping that starts at `map` held by 2 MiB page-table entries (smaps' FilePmdMapped plus
 * AnonHugePages), and its resident bytes in *rss; -1 where /proc/self/smaps does not say. */
long long ck_io_huge_bytes(const void *map, long long *rss)
{
    char line[512], head[32];
    long long pmd = -1, kb;
    int in = 0, whole = 1; /* whole: this fgets starts a line (a longer line comes in pieces) */
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (rss) *rss = -1;
    if (!fp) return -1;
    snprintf(head, sizeof head, "%08lx-", (unsigned long)(uintptr_t)map); /* (smaps pads to 8 digits) */
    while (fgets(line, sizeof line, fp)) {
        int starts = whole;
        whole = strchr(line, '\n') != NULL;
        if (!starts) continue;
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) { /* "start-end perms ..." */
            if (in) break; /* the next mapping */
            if ((in = strncmp(line, head, strlen(head)) == 0)) pmd = 0;
        } else if (in && sscanf(line, "Rss: %lld kB", &kb) == 1) {
            if (rss) *rss = kb * 1024;
        } else if (in && (sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1 ||
                          sscanf(line, "AnonHugePages: %lld kB", &kb) == 1)) {
            pmd += kb * 1024;
        }
    }
    fclose(fp);
    return pmd;
}

/* Drops the cached pages of [off, off + n) from this mapping and the page cache (written back first: a dirty page
 * cannot be dropped), and faults them in again. With MADV_HUGEPAGE each fault reads a 2 MiB folio ahead: 590 MiB
 * came back in 0.16 s, all of it on huge pages, where read() in 8 MiB pieces left the first ~40 MiB on the small
 * folios of its readahead's ramp (AMD EPYC Zen 5 VM, virtio disk). */
static int reread(char *map, int fd, size_t off, size_t n)
{
    if (sync_file_range(fd, (off_t)off, (off_t)n,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
        return 0;
    if (madvise(map + off, n, MADV_DONTNEED) != 0) return 0; /* unmapped here, so the cache may drop them */
    if (posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED) != 0) return 0;
    return madvise(map + off, n, MADV_POPULATE_READ) == 0;
}

int ck_io_settle_huge(void *map, size_t size, int fd, const char *path)
{
    long long pmd, rss, now = -1, now_rss;
    const char *debug = getenv("CK_DEBUG");
    int k, grew = 0;
    if (size < SETTLE_MIN_BYTES || ((uintptr_t)map & (HUGE_PAGE - 1))) return CK_SETTLE_SKIPPED; /* no PMD maps it */
    madvise(map, size, MADV_HUGEPAGE);
    if (madvise(map, size, MADV_POPULATE_READ) != 0) return CK_SETTLE_SKIPPED; /* before 5.14: faulted lazily */
    pmd = ck_io_huge_bytes(map, &rss);
    if (pmd < 0 || rss <= 0) return CK_SETTLE_SKIPPED;
    if (ck_io_huge_enough(pmd, rss)) return CK_SETTLE_HUGE;
    /* Where some of it is mapped huge already, the file system caches this file on huge folios: it is read again
     * whole (SmolLM2's GGUF, cached by its download, had 6 of 93 MiB huge). Else the probes: does a 2 MiB range
     * of this file come back on a huge folio when read cold? (up to 4 ranges, each a 2 MiB re-read) */
    grew = pmd >= (long long)HUGE_PAGE;
    for (k = 1; k <= 4 && !grew; k++) {
        const size_t at = (size / 5 * (size_t)k) & ~(HUGE_PAGE - 1);
        if (!reread((char *)map, fd, at, HUGE_PAGE)) return CK_SETTLE_SKIPPED;
        now = ck_io_huge_bytes(map, &now_rss);
        grew = now >= pmd + (long long)HUGE_PAGE;
    }
    if (!grew) {
        if (debug)
            fprintf(stderr, "ckc: %s: %lld of %lld MiB mapped on 2 MiB pages, and 2 MiB probes read again stayed on "
                    "small ones (a file system without large folios, or fragmented memory): left as it is "
                    "(CK_WEIGHTS_LOAD=read copies it onto huge pages)\n",
                    path, pmd >> 20, rss >> 20);
        return CK_SETTLE_CANNOT;
    }
    reread((char *)map, fd, 0, size);
    if (debug) {
        now = ck_io_huge_bytes(map, &now_rss);
        fprintf(stderr, "ckc: %s: %lld of %lld MiB were mapped on 2 MiB pages; read again from the file: %lld of "
                "%lld MiB\n", path, pmd >> 20, rss >> 20, now >> 20, now_rss >> 20);
    }
    return CK_SETTLE_REREAD;
}
#else
long long ck_io_huge_bytes(const void *map, long long *rss)
{
    (void)map;
    if (rss) *rss = -1;
    return -1;
}

int ck_io_settle_huge(void *map, size_t size, int fd, const char *path)
{
    (void)map, (void)size, (void)fd, (void)path;
    return CK_SETTLE_SKIPPED;
}
#endif /* __linux__ */

#endif /* CK_NO_MMAP */
