/* What the libFuzzer harnesses share: a scratch directory of their own
 * (the readers under test take paths) and writing an input there. Each
 * harness feeds one parser arbitrary bytes; any status is fine, a crash,
 * a sanitizer report, a leak or a hang is the finding. */
#ifndef CLEAVE_FUZZ_COMMON_H
#define CLEAVE_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleave.h"

/* A path of this process's scratch directory (made on first use). */
static inline const char *fuzz_path(const char *name) {
    static char dir[256];
    static char paths[8][512];
    static int slot;
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/cleave-fuzz-XXXXXX", base);
        if (!mkdtemp(dir)) abort(); /* no scratch space: the harness cannot run at all */
    }
    char *p = paths[slot++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

/* Writes n bytes to path (whole, or the harness stops: a full disk is no finding). */
static inline void fuzz_spit(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) abort();
}

/* Two files in one input: its first 4 bytes (little-endian, modulo the
 * rest's size) say where the rest is cut; false when it is too short. */
static inline bool fuzz_split(const uint8_t **data, size_t *size, size_t *at) {
    if (*size < 4) return false;
    uint32_t cut;
    memcpy(&cut, *data, 4);
    *data += 4, *size -= 4;
    *at = *size ? cut % (*size + 1) : 0;
    return true;
}

/* A shared data file (CLEAVE_SHARED_DIR/rel), or NULL where absent. */
static inline const char *fuzz_shared(const char *rel) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", CLEAVE_SHARED_DIR, rel);
    return access(p, R_OK) == 0 ? p : NULL;
}

#endif
