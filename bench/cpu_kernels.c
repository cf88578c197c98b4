/* Speed of the CPU device's block-type matmuls, against the machine's
 * limits: decode (n = 1..8 activation rows) in GB/s of weight bytes read,
 * weights rotated through copies that outgrow the last-level cache so
 * every call streams from memory (compare with bench/membw.c); prefill
 * (n = 64, 512) in GFLOP/s on one 2048 x 2048 matrix, for the integer
 * tiles the device runs and, single-threaded, for the alternative of
 * dequantizing weight panels to f32 and running cpu_gemm's f32 tiles.
 *
 *   cleave-cpu-kernels [--threads 1,2] [--types q4_K,q6_K,...] [--reps N]
 *                      [--what decode,prefill,kernels]
 *
 * Weights are random blocks (tests/testutil.c), which the kernels run at
 * the speed of real ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_qdot.h"
#include "quant/quant.h"
#include "testutil.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This thread's CPU time: on a shared machine the single-threaded kernel
 * comparison counts only the cycles it got. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x1234567887654321ull;

static void *random_matrix(cleave_type t, size_t rows, size_t cols) {
    size_t rb = quant_row_bytes(t, cols);
    char *m = malloc(rows * rb);
    if (!m) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tu_random_blocks(t, m, rows * cols, 1.0f / 64, &rng);
    return m;
}

static float *random_floats(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    return x;
}

/* Decode: copies of a rows x cols matrix, 192 MiB in all, one matmul per
 * copy in turn; best of reps passes. */
static void bench_decode(be_device *d, int threads, cleave_type t, size_t n, int reps) {
    const size_t rows = 8192, cols = 2048;
    size_t rb = quant_row_bytes(t, cols), bytes = rows * rb;
    size_t copies = ((size_t)192 << 20) / bytes;
    if (copies < 2) copies = 2;
    void **w = malloc(copies * sizeof *w);
    for (size_t c = 0; c < copies; c++)
        w[c] = random_matrix(t, rows, cols);
    float *x = random_floats(n * cols), *y = malloc(n * rows * sizeof *y);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        for (size_t c = 0; c < copies; c++) {
            be_mat m = {.data = w[c], .type = t, .ne0 = cols, .ne1 = rows, .nb1 = rb};
            be_matmul(d, &m, x, n, NULL, y);
        }
        double dt = (now() - t0) / (double)copies;
        if (r > 0 && dt < best) best = dt; /* the first pass warms up */
    }
    printf("decode  %-7s %zux%zu n=%zu threads=%d  %7.3f ms  %6.2f GB/s\n", cleave_type_name(t),
           rows, cols, n, threads, best * 1e3, (double)bytes / best / 1e9);
    for (size_t c = 0; c < copies; c++)
        free(w[c]);
    free(w), free(x), free(y);
}

/* Prefill through the device: GFLOP/s of one 2048 x 2048 matmul. */
static void bench_prefill(be_device *d, int threads, cleave_type t, size_t n, int reps) {
    const size_t rows = 2048, cols = 2048;
    size_t rb = quant_row_bytes(t, cols);
    void *w = random_matrix(t, rows, cols);
    float *x = random_floats(n * cols), *y = malloc(n * rows * sizeof *y);
    be_mat m = {.data = w, .type = t, .ne0 = cols, .ne1 = rows, .nb1 = rb};
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        be_matmul(d, &m, x, n, NULL, y);
        double dt = now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    printf("prefill %-7s %zux%zu n=%zu threads=%d  %7.3f ms  %6.1f GFLOP/s\n", cleave_type_name(t),
           rows, cols, n, threads, best * 1e3, 2.0 * (double)n * rows * cols / best / 1e9);
    free(w), free(x), free(y);
}

/* The two prefill designs on one thread, same blocking as the device's
 * tasks (48 weight rows, 64 activation rows): int8 activations and integer
 * tiles, or weight panels dequantized to f32 and cpu_gemm's f32 tiles
 * (activations stay f32; dequantizing them too would cost a little more). */
static void bench_prefill_kernels(cleave_type t, size_t n, int reps) {
    const size_t rows = 2048, cols = 2048, panel = 48, xb = 64;
    size_t rb = quant_row_bytes(t, cols);
    char *w = random_matrix(t, rows, cols);
    float *x = random_floats(n * cols), *y = malloc(n * rows * sizeof *y);
    float *pf = malloc(panel * cols * sizeof *pf);
    cpu_qkernel k = cpu_qkernel_for(t, true);
    size_t xs = cpu_act_row_bytes(k.act, cols);
    char *xq = malloc(n * xs);
    double best_q = 1e30, best_f = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = cpu_now();
        for (size_t i = 0; i < n; i++)
            cpu_quantize_act(true, k.act, x + i * cols, xq + i * xs, cols);
        for (size_t r0 = 0; r0 < rows; r0 += panel)
            for (size_t i0 = 0; i0 < n; i0 += xb)
                k.tile(w + r0 * rb, rb, rows - r0 < panel ? rows - r0 : panel, xq + i0 * xs, xs,
                       n - i0 < xb ? n - i0 : xb, cols, y + i0 * rows + r0, rows);
        double dt = cpu_now() - t0;
        if (r > 0 && dt < best_q) best_q = dt;
        cpu_dequant_fn deq = cpu_dequant_for(t, true);
        t0 = cpu_now();
        for (size_t r0 = 0; r0 < rows; r0 += panel) {
            size_t nr = rows - r0 < panel ? rows - r0 : panel;
            for (size_t j = 0; j < nr; j++)
                deq(w + (r0 + j) * rb, pf + j * cols, cols);
            for (size_t i0 = 0; i0 < n; i0 += xb)
                cpu_gemm(true, CLEAVE_TYPE_F32, x + i0 * cols, cols, n - i0 < xb ? n - i0 : xb, pf,
                         cols * sizeof(float), nr, cols, y + i0 * rows + r0, rows);
        }
        dt = cpu_now() - t0;
        if (r > 0 && dt < best_f) best_f = dt;
    }
    double fl = 2.0 * (double)n * rows * cols / 1e9;
    printf("kernels %-7s %zux%zu n=%zu 1 thread (CPU time): int8 tiles %6.1f GFLOP/s, "
           "f32 panels %6.1f GFLOP/s\n",
           cleave_type_name(t), rows, cols, n, fl / best_q, fl / best_f);
    free(w), free(x), free(y), free(pf), free(xq);
}

int main(int argc, char **argv) {
    const char *types = "q4_K,q6_K,q5_K,q4_0,q8_0,q2_K,q3_K,q5_0,q4_1,q5_1,iq4_nl,iq4_xs";
    const char *threads = "1,2";
    const char *what = "decode,prefill,kernels";
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--types"))
            types = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--what"))
            what = argv[i + 1];
    }
    if (!cpu_simd_available()) printf("note: no AVX2: C kernels\n");
    char tl[256], th[64];
    snprintf(th, sizeof th, "%s", threads);
    for (char *ts = strtok(th, ","); ts; ts = strtok(NULL, ",")) {
        int nt = atoi(ts);
        be_device *d = NULL;
        if (be_cpu_create("bench", nt, 0, &d) != CLEAVE_OK) return 1;
        snprintf(tl, sizeof tl, "%s", types);
        char *save = NULL;
        for (char *s = strtok_r(tl, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
            cleave_type t;
            if (cleave_type_from_name(s, &t) != CLEAVE_OK) {
                fprintf(stderr, "unknown type %s\n", s);
                return 1;
            }
            if (strstr(what, "decode")) {
                bench_decode(d, nt, t, 1, reps);
                bench_decode(d, nt, t, 4, reps);
            }
            if (strstr(what, "prefill")) {
                bench_prefill(d, nt, t, 64, reps);
                bench_prefill(d, nt, t, 512, reps);
            }
            if (strstr(what, "kernels") && nt == 1 && cpu_act_for(t) != CPU_ACT_NONE) {
                bench_prefill_kernels(t, 64, reps);
                bench_prefill_kernels(t, 512, reps);
            }
        }
        be_destroy(d);
    }
    return 0;
}
