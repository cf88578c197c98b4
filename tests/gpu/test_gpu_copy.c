/* Copies between GPUs (copy_from, copy2d_from): a block of columns of
 * every row into a buffer of another pitch, by peer copy and staged
 * through pinned host memory (CLEAVE_NO_P2P=1), one row and many, small
 * and larger than the staging slots were. Bytes outside the block must be
 * untouched. Uses cuda:0 and cuda:1, or two handles of cuda:0. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "testutil.h"

static void one_case(be_device *a, be_device *b, const char *label, size_t rows, size_t sp,
                     size_t dp, size_t w, size_t soff, size_t doff) {
    unsigned char *hs = malloc(rows * sp), *hd = malloc(rows * dp), *back = malloc(rows * dp);
    void *src = be_alloc(a, rows * sp, "src"), *dst = be_alloc(b, rows * dp, "dst");
    CHECK(hs && hd && back && src && dst);
    if (hs && hd && back && src && dst) {
        for (size_t i = 0; i < rows * sp; i++) hs[i] = (unsigned char)(i * 131 + 7);
        memset(hd, 0xee, rows * dp);
        CHECK_OK(be_write(a, src, hs, rows * sp));
        CHECK_OK(be_write(b, dst, hd, rows * dp));
        CHECK_OK(be_sync(a));
        CHECK_OK(be_sync(b));
        if (rows == 1)
            CHECK_OK(be_copy_from(b, (char *)dst + doff, a, (const char *)src + soff, w, NULL));
        else
            CHECK_OK(be_copy2d_from(b, (char *)dst + doff, dp, a, (const char *)src + soff, sp,
                                    w, rows, NULL));
        CHECK_OK(be_sync(b));
        CHECK_OK(be_read(b, back, dst, rows * dp));
        size_t bad = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < dp; c++) {
                unsigned char want = c >= doff && c < doff + w ? hs[r * sp + soff + c - doff] : 0xee;
                bad += back[r * dp + c] != want;
            }
        fprintf(stderr, "%-28s %6zu rows of %6zu bytes: %s\n", label, rows, w, bad ? "WRONG" : "ok");
        CHECK_MSG(!bad, "%s: %zu wrong bytes", label, bad);
    }
    if (src) be_free(a, src);
    if (dst) be_free(b, dst);
    free(hs);
    free(hd);
    free(back);
}

static void run(int o1, const char *label) {
    be_device *a = NULL, *b = NULL;
    CHECK_OK(be_cuda_create(0, 0, &a));
    CHECK_OK(be_cuda_create(o1, 0, &b));
    if (a && b) {
        one_case(a, b, label, 1, 4096, 4096, 1000, 16, 32);
        one_case(a, b, label, 7, 40, 24, 12, 5, 3);
        one_case(a, b, label, 4096, 4096, 2048, 2048, 1024, 0); /* half the columns of a layer */
        one_case(b, a, label, 2048, 1024, 4096, 1024, 0, 2048); /* and back into place */
    }
    if (a) be_destroy(a);
    if (b) be_destroy(b);
}

int main(void) {
    be_device *probe = NULL;
    if (be_cuda_create(0, 0, &probe)) tu_skip("no CUDA device");
    be_destroy(probe);
    int o1 = 1;
    if (be_cuda_create(1, 0, &probe)) o1 = 0; /* one GPU: two handles of it */
    else be_destroy(probe);
    fprintf(stderr, "devices: cuda:0, cuda:%d\n", o1);
    run(o1, "peer");
    setenv("CLEAVE_NO_P2P", "1", 1);
    run(o1, "staged through host memory");
    unsetenv("CLEAVE_NO_P2P");
    return tu_finish("test_gpu_copy");
}
