/* Copy bandwidth between devices through the backend's peer copies: the
 * link rate a split-mode switch's time is set against (bytes a device
 * sends or receives over this rate is the switch's least copy time).
 * For every pair of devices: one way alone, both ways at once (what a
 * switch between layer and tensor splits does: each device gives half of
 * its blocks and takes half of the other's), and both ways as 2-D blocks
 * (half of every 8 KiB row: a range of columns, as the switch moves the o
 * and down projections and a range of kv heads); then every device
 * sending to the next and the previous at once. Every copy is read back
 * and compared, so a wrong copy fails the run rather than looking fast.
 * CLEAVE_NO_P2P=1 measures the path staged through pinned host memory.
 * usage: cleave-peercopy [DEVICES] [MiB]   DEVICES: cuda:0,cuda:1 (the
 * default where CUDA is built, else cpu:2), cpu:N; MiB per copy (default
 * 256) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/backend_call.h"
#include "base/error.h"

#define MAX_DEV   CLEAVE_MAX_DEVICES
#define REPS      5
#define ROW_BYTES 8192 /* a 2-D copy's source rows; half of each moves */

typedef struct {
    size_t n, bytes;
    be_device *dev[MAX_DEV];
    uint8_t *src[MAX_DEV], *dst[MAX_DEV]; /* device buffers */
    uint8_t *host;                        /* a buffer's size, for writing and checking */
} rig;

typedef enum { ONE_WAY, BOTH_WAYS, BOTH_WAYS_2D, RING } pattern;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "cleave-peercopy: %s: %s\n", what, cleave_last_error());
    return 1;
}

/* Devices from "cpu:N" or a list "cuda:0,cuda:1" (a bare "cpu" in the list too). */
static cleave_status open_devices(const char *spec, rig *r) {
    if (strncmp(spec, "cpu:", 4) == 0) {
        int n = atoi(spec + 4);
        if (n < 2 || n > MAX_DEV)
            return err_set(CLEAVE_ERR_INVALID_ARG, "cpu:N needs N in 2..%d", MAX_DEV);
        for (int d = 0; d < n; d++) {
            char name[16];
            snprintf(name, sizeof name, "cpu:%d", d);
            cleave_status st = be_cpu_create(name, 1, 0, &r->dev[r->n]);
            if (st) return st;
            r->n++;
        }
        return CLEAVE_OK;
    }
    for (const char *at = spec; at && *at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL) {
        if (r->n == MAX_DEV) return err_set(CLEAVE_ERR_INVALID_ARG, "at most %d devices", MAX_DEV);
        cleave_status st;
        if (strncmp(at, "cuda:", 5) == 0) {
#ifdef CLEAVE_WITH_CUDA
            st = be_cuda_create(atoi(at + 5), 0, &r->dev[r->n]);
#else
            st = err_set(CLEAVE_ERR_UNSUPPORTED, "this build has no CUDA backend");
#endif
        } else if (strncmp(at, "cpu", 3) == 0 && (at[3] == ',' || at[3] == 0))
            st = be_cpu_create("cpu", 1, 0, &r->dev[r->n]);
        else
            st = err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': expected cuda:N, cpu or cpu:N", at);
        if (st) return st;
        r->n++;
    }
    return r->n >= 2 ? CLEAVE_OK
                     : err_set(CLEAVE_ERR_INVALID_ARG, "two or more devices are needed");
}

/* Device d's source: bytes that name the device and the offset. */
static uint8_t pattern_byte(size_t d, size_t i) { return (uint8_t)(d * 37 + i * 7 + (i >> 12)); }

/* One copy from a's source to b's destination, whole or as 2-D blocks. */
static cleave_status copy(rig *r, size_t a, size_t b, bool blocks) {
    if (!blocks) return be_copy_from(r->dev[b], r->dst[b], r->dev[a], r->src[a], r->bytes, NULL);
    return be_copy2d_from(r->dev[b], r->dst[b], ROW_BYTES / 2, r->dev[a], r->src[a], ROW_BYTES,
                          ROW_BYTES / 2, r->bytes / ROW_BYTES, NULL);
}

/* b's destination holds what a sent. */
static bool arrived(rig *r, size_t a, size_t b, bool blocks) {
    size_t n = blocks ? r->bytes / 2 : r->bytes;
    if (be_read(r->dev[b], r->host, r->dst[b], n)) return false;
    for (size_t i = 0; i < n; i++) {
        size_t at = blocks ? i / (ROW_BYTES / 2) * ROW_BYTES + i % (ROW_BYTES / 2) : i;
        if (r->host[i] != pattern_byte(a, at)) {
            fprintf(stderr, "cleave-peercopy: %s -> %s: byte %zu is %u, not %u\n",
                    be_name(r->dev[a]), be_name(r->dev[b]), i, r->host[i], pattern_byte(a, at));
            return false;
        }
    }
    return true;
}

/* The copies of one round: (a, b) as the pattern says; *moved: the bytes
 * the busiest device sent. */
static cleave_status round_of(rig *r, pattern p, size_t a, size_t b, size_t *moved) {
    bool blocks = p == BOTH_WAYS_2D;
    cleave_status st = CLEAVE_OK;
    if (p == RING) { /* every device to the next; the destination of each written once */
        for (size_t d = 0; d < r->n && !st; d++)
            st = copy(r, d, (d + 1) % r->n, false);
    } else {
        st = copy(r, a, b, blocks);
        if (!st && p != ONE_WAY) st = copy(r, b, a, blocks);
    }
    for (size_t d = 0; d < r->n && !st; d++)
        st = be_sync(r->dev[d]);
    *moved = blocks ? r->bytes / 2 : r->bytes;
    return st;
}

/* GB/s per direction of one pattern (best of REPS rounds after a warm-up),
 * its copies checked; < 0 on failure. */
static double rate(rig *r, pattern p, size_t a, size_t b) {
    size_t moved = 0;
    if (round_of(r, p, a, b, &moved)) return -1;
    bool ok = true;
    if (p == RING)
        for (size_t d = 0; d < r->n && ok; d++)
            ok = arrived(r, d, (d + 1) % r->n, false);
    else
        ok = arrived(r, a, b, p == BOTH_WAYS_2D) &&
             (p == ONE_WAY || arrived(r, b, a, p == BOTH_WAYS_2D));
    if (!ok) return -1;
    double best = 0;
    for (int k = 0; k < REPS; k++) {
        double t0 = now();
        if (round_of(r, p, a, b, &moved)) return -1;
        double gbs = (double)moved / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv) {
    rig r;
    memset(&r, 0, sizeof r);
#ifdef CLEAVE_WITH_CUDA
    const char *spec = argc > 1 ? argv[1] : "cuda:0,cuda:1";
#else
    const char *spec = argc > 1 ? argv[1] : "cpu:2";
#endif
    long mib = argc > 2 ? atol(argv[2]) : 256;
    if (mib < 1 || mib > 65536) {
        fprintf(stderr, "usage: cleave-peercopy [DEVICES] [MiB 1..65536]\n");
        return 2;
    }
    r.bytes = (size_t)mib << 20;
    if (open_devices(spec, &r)) return fail("devices");
    r.host = malloc(r.bytes);
    if (!r.host) return fail("host buffer");
    for (size_t d = 0; d < r.n; d++) {
        r.src[d] = be_alloc(r.dev[d], r.bytes, "source");
        r.dst[d] = be_alloc(r.dev[d], r.bytes, "destination");
        if (!r.src[d] || !r.dst[d]) return fail("device buffers");
        for (size_t i = 0; i < r.bytes; i++)
            r.host[i] = pattern_byte(d, i);
        if (be_write(r.dev[d], r.src[d], r.host, r.bytes) || be_sync(r.dev[d]))
            return fail("writing");
    }
    printf("peer copies of %ld MiB (best of %d), GB/s per direction\n\n", mib, REPS);
    printf("| devices | one way | both ways at once | both ways, 2-D blocks (half of %d-byte rows) "
           "|\n",
           ROW_BYTES);
    printf("| --- | ---: | ---: | ---: |\n");
    for (size_t a = 0; a < r.n; a++)
        for (size_t b = a + 1; b < r.n; b++) {
            double one = rate(&r, ONE_WAY, a, b), both = rate(&r, BOTH_WAYS, a, b),
                   blocks = rate(&r, BOTH_WAYS_2D, a, b);
            if (one < 0 || both < 0 || blocks < 0) return fail("copies");
            printf("| %s, %s | %.1f | %.1f | %.1f |\n", be_name(r.dev[a]), be_name(r.dev[b]), one,
                   both, blocks);
        }
    double ring = rate(&r, RING, 0, 0);
    if (ring < 0) return fail("copies");
    printf("\nevery device sending to the next at once: %.1f GB/s each\n", ring);
    for (size_t d = 0; d < r.n; d++) {
        be_free(r.dev[d], r.src[d]);
        be_free(r.dev[d], r.dst[d]);
        be_destroy(r.dev[d]);
    }
    free(r.host);
    return 0;
}
