/* Drives cleave's reference (de)quantization for tests/quant_reference.py,
 * which compares it with the gguf package's independent implementation:
 *   quant_ref_helper dequant TYPE BLOCKS.bin OUT.f32   blocks -> f32
 *   quant_ref_helper quant TYPE IN.f32 OUT.bin [THREADS]  f32 -> blocks
 * Files are raw little-endian arrays; TYPE is a ggml type name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return p;
}

static int spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    cleave_type type;
    if (argc < 5 || cleave_type_from_name(argv[2], &type)) {
        fprintf(stderr, "usage: quant_ref_helper dequant|quant TYPE IN OUT [THREADS]\n");
        return 2;
    }
    size_t be = 1, bb = 1, len = 0;
    quant_type_info((uint32_t)type, NULL, &be, &bb);
    void *in = slurp(argv[3], &len);
    if (!in) {
        fprintf(stderr, "quant_ref_helper: cannot read %s\n", argv[3]);
        return 1;
    }
    int rc = 1;
    if (!strcmp(argv[1], "dequant")) {
        size_t n = len / bb * be;
        float *out = malloc(n * sizeof(float) + 1);
        if (out) {
            quant_dequantize_row(type, in, out, n);
            rc = spit(argv[4], out, n * sizeof(float));
        }
        free(out);
    } else if (!strcmp(argv[1], "quant")) {
        /* rows of 1024 weights (4 super-blocks), converted on THREADS threads */
        size_t n = len / sizeof(float), row = 1024;
        int threads = argc > 5 ? atoi(argv[5]) : 1;
        if (n % row) {
            fprintf(stderr, "quant_ref_helper: %zu weights are not whole rows of %zu\n", n, row);
        } else {
            size_t out_len = quant_row_bytes(type, n);
            void *out = malloc(out_len + 1);
            if (out && quant_convert_rows(type, out, CLEAVE_TYPE_F32, in, n / row, row, threads,
                                          NULL, NULL) == CLEAVE_OK)
                rc = spit(argv[4], out, out_len);
            free(out);
        }
    }
    free(in);
    return rc;
}
