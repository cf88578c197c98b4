/* Host-to-device writes: small ones through the staging, large ones
 * through the pinned chunks (more chunks than slots, a tail, odd offsets
 * and sizes), each source clobbered as soon as its write returns (the
 * contract: it is the caller's again), from malloc'd memory and from a
 * mapped file as weights come; q8_0 weights split on upload from several
 * chunks. Pipelined (default threads and one) and synchronous
 * (CLEAVE_UPLOAD_THREADS=0). Prints the rate of the mapped-file write. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "quant/quant.h"
#include "testutil.h"

static unsigned char pat(size_t i, unsigned seed) {
    return (unsigned char)(i * 131 + seed * 17 + (i >> 13) + 7);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Writes into one device buffer, tracked in `want`, then one read back. */
static void writes(be_device *d, const char *label) {
    const size_t total = ((size_t)100 << 20) + 123;
    struct {
        size_t doff, n, soff;
    } w[] = {
        {0, total, 0},                                          /* 7 chunks: slots reused */
        {3, 100, 1},                                            /* small: the staging */
        {5, (size_t)1 << 20, 3},                                /* the smallest large write */
        {((size_t)1 << 20) + 7, ((size_t)16 << 20) + 1, 1},     /* a chunk and one byte */
        {((size_t)40 << 20) + 1, ((size_t)48 << 20) + 4097, 2}, /* exactly 3 chunks and a tail */
        {11, 4000, 0},                                          /* small again, after large ones */
        {total - 777, 777, 5},
    };
    unsigned char *src = malloc(total + 16), *want = malloc(total), *back = malloc(total);
    unsigned char *dev = be_alloc(d, total, "upload test");
    CHECK(src && want && back && dev);
    if (src && want && back && dev) {
        for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
            for (size_t i = 0; i < w[k].n; i++)
                src[w[k].soff + i] = pat(i, (unsigned)k);
            memcpy(want + w[k].doff, src + w[k].soff, w[k].n);
            CHECK_OK(be_write(d, dev + w[k].doff, src + w[k].soff, w[k].n));
            memset(src, 0x5a, total + 16); /* the copy must not read it any more */
        }
        CHECK_OK(be_read(d, back, dev, total));
        size_t bad = 0, first = total;
        for (size_t i = 0; i < total; i++)
            if (back[i] != want[i]) {
                bad++;
                if (first == total) first = i;
            }
        fprintf(stderr, "%-22s writes: %s\n", label, bad ? "WRONG" : "ok");
        CHECK_MSG(!bad, "%s: %zu wrong bytes, the first at %zu", label, bad, first);
    }
    if (dev) be_free(d, dev);
    free(src);
    free(want);
    free(back);
}

/* A file's mapping written whole, as the loader writes weights: its pages
 * are first touched by the upload. */
static void mapped(be_device *d, const char *label, const char *path, size_t n) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    if (fd < 0) return;
    const unsigned char *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    unsigned char *dev = be_alloc(d, n, "upload test");
    unsigned char *back = malloc(n);
    CHECK(map != MAP_FAILED && dev && back);
    if (map != MAP_FAILED && dev && back) {
        CHECK_OK(be_sync(d));
        double t0 = now_s();
        CHECK_OK(be_write(d, dev, map, n));
        CHECK_OK(be_sync(d));
        double s = now_s() - t0;
        CHECK_OK(be_read(d, back, dev, n));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += back[i] != pat(i, 99);
        fprintf(stderr, "%-22s mapped file, %zu MiB: %.2f GB/s %s\n", label, n >> 20,
                (double)n / s * 1e-9, bad ? "WRONG" : "ok");
        CHECK_MSG(!bad, "%s: %zu wrong bytes from the mapped file", label, bad);
    }
    if (map != MAP_FAILED) munmap((void *)map, n);
    if (dev) be_free(d, dev);
    free(back);
}

/* rows x ne0 q8_0 weights (> 64 MiB: two passes of the split, each over
 * several pinned chunks) against the int8 and scale planes read back. */
static void q8(be_device *d, const char *label) {
    const size_t ne0 = 4096, rows = 20000, nb = ne0 / QK8_0;
    be_mat host = {
        .type = CLEAVE_TYPE_Q8_0, .ne0 = ne0, .ne1 = rows, .nb1 = nb * sizeof(block_q8_0)};
    block_q8_0 *b = malloc(rows * host.nb1);
    int8_t *qs = malloc(rows * ne0);
    uint16_t *sc = malloc(rows * nb * 2);
    CHECK(b && qs && sc);
    be_mat m = {0};
    if (b && qs && sc) {
        for (size_t i = 0; i < rows * nb; i++) {
            b[i].d = (uint16_t)(i * 2654435761u >> 7);
            for (int k = 0; k < QK8_0; k++)
                b[i].qs[k] = (int8_t)pat(i * QK8_0 + (size_t)k, 3);
        }
        host.data = b;
        CHECK_OK(be_upload_mat(d, &host, &m, "q8 test"));
        memset(b + rows * nb / 2, 0, rows * nb / 2 * sizeof *b); /* the caller's again */
    }
    if (m.data && m.scales) {
        CHECK_OK(be_read(d, qs, m.data, rows * ne0));
        CHECK_OK(be_read(d, sc, m.scales, rows * nb * 2));
        size_t bad = 0;
        for (size_t i = 0; i < rows * nb; i++) {
            bad += sc[i] != (uint16_t)(i * 2654435761u >> 7);
            for (int k = 0; k < QK8_0; k++)
                bad += qs[i * QK8_0 + (size_t)k] != (int8_t)pat(i * QK8_0 + (size_t)k, 3);
        }
        fprintf(stderr, "%-22s q8_0 split: %s\n", label, bad ? "WRONG" : "ok");
        CHECK_MSG(!bad, "%s: %zu wrong q8_0 values", label, bad);
    }
    if (m.data) be_free(d, (void *)m.data);
    if (m.scales) be_free(d, (void *)m.scales);
    free(b);
    free(qs);
    free(sc);
}

/* The test file: n bytes of pat(i, 99). */
static const char *make_file(size_t n) {
    const char *path = tu_tmp("upload.bin");
    FILE *f = fopen(path, "wb");
    unsigned char *buf = malloc((size_t)1 << 20);
    bool ok = f && buf;
    for (size_t off = 0; ok && off < n; off += (size_t)1 << 20) {
        size_t len = n - off < ((size_t)1 << 20) ? n - off : ((size_t)1 << 20);
        for (size_t i = 0; i < len; i++)
            buf[i] = pat(off + i, 99);
        ok = fwrite(buf, 1, len, f) == len;
    }
    if (f && fclose(f)) ok = false;
    free(buf);
    CHECK_MSG(ok, "cannot write %s", path);
    return ok ? path : NULL;
}

int main(void) {
    be_device *d = NULL;
    if (be_cuda_create(0, 0, &d)) tu_skip("no CUDA device");
    be_destroy(d);
    const size_t file_bytes = ((size_t)512 << 20) + 4096 + 13;
    const char *path = make_file(file_bytes);
    struct {
        const char *threads, *label;
    } modes[] = {{NULL, "pipelined"}, {"1", "pipelined, one thread"}, {"0", "synchronous"}};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        /* read at a device's first large write: a fresh device per mode */
        if (modes[k].threads)
            setenv("CLEAVE_UPLOAD_THREADS", modes[k].threads, 1);
        else
            unsetenv("CLEAVE_UPLOAD_THREADS");
        d = NULL;
        CHECK_OK(be_cuda_create(0, 0, &d));
        if (!d) continue;
        writes(d, modes[k].label);
        if (path) mapped(d, modes[k].label, path, file_bytes);
        q8(d, modes[k].label);
        be_destroy(d);
    }
    unsetenv("CLEAVE_UPLOAD_THREADS");
    if (path) unlink(path);
    return tu_finish("test_gpu_upload");
}
