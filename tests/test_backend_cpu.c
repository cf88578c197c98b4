/* The CPU device against naive references written here: every op, each
 * weight/cache type, the SIMD and C kernels (CLEAVE_NO_SIMD), 1 and 3
 * threads; plus the memory budget, argument errors and the thread pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/threadpool.h"
#include "base/error.h"
#include "quant/quant.h"
#include "base/options.h"
#include "testutil.h"

static const cleave_type all_types[] = {CLEAVE_TYPE_F32, CLEAVE_TYPE_F16, CLEAVE_TYPE_BF16,
                                        CLEAVE_TYPE_Q8_0};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

static be_device *make_dev(int threads, bool simd, size_t budget) {
    if (simd)
        unsetenv("CLEAVE_NO_SIMD");
    else
        setenv("CLEAVE_NO_SIMD", "1", 1);
    options_reload(); /* the switch is read when the device is made */
    be_device *d = NULL;
    CHECK_OK(be_cpu_create(simd ? "cpu-simd" : "cpu-c", threads, budget, &d));
    unsetenv("CLEAVE_NO_SIMD");
    options_reload();
    return d;
}

/* A quantized copy of a random [rows][cols] matrix, rows `pad` bytes apart
 * beyond the packed size, plus its dequantized values for the reference. */
typedef struct {
    be_mat m;
    void *data;
    float *deq;
} test_mat;

static test_mat make_mat(cleave_type t, size_t rows, size_t cols, size_t pad) {
    test_mat tm;
    memset(&tm, 0, sizeof tm);
    size_t rb = quant_row_bytes(t, cols), nb1 = rb + pad;
    float *src = malloc(cols * sizeof(float));
    tm.data = calloc(rows, nb1);
    tm.deq = malloc(rows * cols * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        fill(src, cols, 1.0f);
        quant_quantize_row(t, src, (char *)tm.data + r * nb1, cols);
        quant_dequantize_row(t, (char *)tm.data + r * nb1, tm.deq + r * cols, cols);
    }
    free(src);
    tm.m = (be_mat){.data = tm.data, .type = t, .ne0 = cols, .ne1 = rows, .nb1 = nb1};
    return tm;
}

static void free_mat(test_mat *tm) {
    free(tm->data);
    free(tm->deq);
}

/* ---- memory ------------------------------------------------------------- */

static void test_memory(void) {
    be_device *d = make_dev(2, true, 1 << 20);
    if (!d) return;
    CHECK(strcmp(be_name(d), "cpu-simd") == 0);
    be_mem_stats ms;
    void *a = be_alloc(d, 600000, "a");
    CHECK(a != NULL);
    CHECK(((uintptr_t)a & 63) == 0);
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 600000 && ms.peak == 600000 && ms.budget == 1 << 20);

    err_clear();
    void *b = be_alloc(d, 500000, "big buffer");
    CHECK(b == NULL);
    CHECK_MSG(strstr(cleave_last_error(), "cpu-simd") && strstr(cleave_last_error(), "500000") &&
                  strstr(cleave_last_error(), "600000") && strstr(cleave_last_error(), "1048576") &&
                  strstr(cleave_last_error(), "big buffer"),
              "message: %s", cleave_last_error());
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 600000);

    void *c = be_alloc(d, 400000, "c");
    CHECK(c != NULL);
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 1000000 && ms.peak == 1000000);
    be_free(d, a);
    be_free(d, NULL);
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 400000 && ms.peak == 1000000);
    /* Exactly up to the budget is allowed. */
    void *e = be_alloc(d, (1 << 20) - 400000, "e");
    CHECK(e != NULL);
    CHECK(be_alloc(d, 1, "one more") == NULL);
    be_free(d, e);

    /* Copies. */
    float host[64], back[64];
    fill(host, 64, 1.0f);
    float *dp = c;
    CHECK_OK(be_write(d, dp, host, sizeof host));
    CHECK_OK(be_copy(d, dp + 64, dp, sizeof host));
    CHECK_OK(be_read(d, back, dp + 64, sizeof back));
    CHECK(memcmp(host, back, sizeof host) == 0);
    CHECK_OK(be_sync(d));
    CHECK(be_write(d, NULL, host, 4) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_map_host(d, host, sizeof host) == (const void *)host);
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 400000); /* mapping costs nothing */

    /* c is left allocated on purpose: destroy must free it (ASan checks). */
    be_destroy(d);

    /* Unlimited budget, all cores. */
    be_device *u = NULL;
    CHECK_OK(be_cpu_create(NULL, 0, 0, &u));
    if (u) {
        void *big = be_alloc(u, (size_t)64 << 20, "big");
        CHECK(big != NULL);
        be_get_mem_stats(u, &ms);
        CHECK(ms.budget == 0 && ms.used == (size_t)64 << 20);
        be_free(u, big);
        be_get_mem_stats(u, &ms);
        CHECK(ms.used == 0 && ms.peak == (size_t)64 << 20);
        /* A block freed on the wrong device is left alone. */
        be_device *v = make_dev(1, true, 0);
        void *vb = v ? be_alloc(v, 1000, "v") : NULL;
        CHECK(vb != NULL);
        be_free(u, vb);
        if (v) {
            be_get_mem_stats(v, &ms);
            CHECK(ms.used == 1000);
            be_free(v, vb);
            be_get_mem_stats(v, &ms);
            CHECK(ms.used == 0);
            be_destroy(v);
        }
        be_destroy(u);
    }
    be_device *bad = NULL;
    CHECK(be_cpu_create("x", -1, 0, &bad) == CLEAVE_ERR_INVALID_ARG && bad == NULL);
}

/* Every allocation failure is reported as CLEAVE_ERR_OOM and leaks nothing
 * (ASan's leak check runs over this test). */
static void test_injected_oom(void) {
    be_device *d = NULL;
    int failures = 0;
    for (long at = 1; at < 50; at++) {
        err_fail_alloc_countdown = at;
        d = NULL;
        cleave_status st = be_cpu_create("oom", 3, 0, &d);
        err_fail_alloc_countdown = 0;
        if (st == CLEAVE_OK) break;
        failures++;
        CHECK(st == CLEAVE_ERR_OOM && d == NULL);
    }
    CHECK(failures >= 3 && d != NULL);
    if (!d) return;
    be_mem_stats ms;
    err_fail_alloc_countdown = 1;
    CHECK(be_alloc(d, 1000, "doomed") == NULL);
    err_fail_alloc_countdown = 0;
    CHECK(strstr(cleave_last_error(), "oom") != NULL);
    be_get_mem_stats(d, &ms);
    CHECK(ms.used == 0 && ms.peak == 0);

    /* Scratch growth (q8_0 panels) failing mid-op. */
    test_mat tm = make_mat(CLEAVE_TYPE_Q8_0, 30, 64, 0);
    float x[32 * 64], y[32 * 30];
    fill(x, 32 * 64, 1.0f);
    err_fail_alloc_countdown = 1;
    CHECK(be_matmul(d, &tm.m, x, 32, NULL, y) == CLEAVE_ERR_OOM);
    err_fail_alloc_countdown = 0;
    CHECK_OK(be_matmul(d, &tm.m, x, 32, NULL, y));
    free_mat(&tm);
    be_destroy(d);
}

/* ---- matmul ------------------------------------------------------------- */

/* Largest error of y against the double reference, relative to the sum of
 * |terms| of each output (a plain relative error is meaningless for sums
 * that cancel to nearly zero). */
static double mm_error(const test_mat *tm, const float *x, size_t n, const float *bias,
                       const float *y) {
    size_t k = tm->m.ne0, m = tm->m.ne1;
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) {
            double s = 0, mag = 0;
            for (size_t t = 0; t < k; t++) {
                double p = (double)tm->deq[j * k + t] * x[i * k + t];
                s += p;
                mag += fabs(p);
            }
            if (bias) {
                s += bias[j];
                mag += fabs(bias[j]);
            }
            double e = fabs(y[i * m + j] - s) / (mag > 0 ? mag : 1);
            if (e > worst) worst = e;
        }
    return worst;
}

static void test_matmul(void) {
    static const size_t k_list[] = {64, 96, 4096};
    static const size_t n_list[] = {1, 2, 3, 8, 17, 64, 130};
    be_device *devs[4] = {make_dev(1, true, 0), make_dev(3, true, 0), make_dev(1, false, 0),
                          make_dev(3, false, 0)};
    for (int di = 0; di < 4; di++)
        if (!devs[di]) return;
    const size_t m = 67;
    float *bias = malloc(m * sizeof(float));
    fill(bias, m, 1.0f);
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t ki = 0; ki < 3; ki++) {
            size_t k = k_list[ki];
            /* Padded rows on one shape prove nb1 is honoured. */
            test_mat tm = make_mat(all_types[ti], m, k, ki == 1 ? 36 : 0);
            double type_worst = 0;
            /* Weights are dequantized exactly; f32/f16/bf16 weights take f32
             * activations, so only f32 rounding is left. q8_0 takes int8
             * activations (blocks of 32, steps of amax/127), whose rounding
             * is at most half a step per element: for x uniform in [-1, 1]
             * that is about (1/254) / E|x| = 0.8% of sum |terms| at worst,
             * ~0.2% measured. test_cpu_quant checks the exact bound. */
            for (size_t ni = 0; ni < 7; ni++) {
                size_t n = n_list[ni];
                if (n == 130 && k == 4096) continue; /* slow reference, nothing new */
                double tol = all_types[ti] == CLEAVE_TYPE_Q8_0 ? 1e-2 : 1e-5;
                float *x = malloc(n * k * sizeof(float));
                float *y = malloc(n * m * sizeof(float));
                fill(x, n * k, 1.0f);
                for (int di = 0; di < 4; di++)
                    for (int wb = 0; wb < 2; wb++) {
                        /* The error is the same for every device; the
                         * reference is the expensive part, so only the
                         * full product runs per case. */
                        memset(y, 0xff, n * m * sizeof(float));
                        CHECK_OK(be_matmul(devs[di], &tm.m, x, n, wb ? bias : NULL, y));
                        double e = mm_error(&tm, x, n, wb ? bias : NULL, y);
                        if (e > type_worst) type_worst = e;
                        CHECK_MSG(e < tol, "matmul %s k=%zu n=%zu dev=%d bias=%d: err %.3g",
                                  cleave_type_name(all_types[ti]), k, n, di, wb, e);
                    }
                free(x);
                free(y);
            }
            fprintf(stderr, "matmul %s k=%zu: worst error %.2g\n", cleave_type_name(all_types[ti]),
                    k, type_worst);
            free_mat(&tm);
        }
    free(bias);

    /* Errors. */
    be_device *d = devs[1];
    float x[64], y[4];
    fill(x, 64, 1.0f);
    be_mat bad = {.data = x, .type = (cleave_type)16 /* iq2_xxs */, .ne0 = 256, .ne1 = 1, .nb1 = 66};
    err_clear();
    CHECK(be_matmul(d, &bad, x, 1, NULL, y) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "iq2_xxs") != NULL);
    be_mat ok = {.data = x, .type = CLEAVE_TYPE_F32, .ne0 = 64, .ne1 = 1, .nb1 = 256};
    CHECK(be_matmul(d, &ok, NULL, 1, NULL, y) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_matmul(d, &ok, x, 0, NULL, y) == CLEAVE_ERR_INVALID_ARG);
    be_mat q = {.data = x, .type = CLEAVE_TYPE_Q8_0, .ne0 = 48, .ne1 = 1, .nb1 = 64};
    CHECK(be_matmul(d, &q, x, 1, NULL, y) == CLEAVE_ERR_INVALID_ARG);
    be_mat shortrow = {.data = x, .type = CLEAVE_TYPE_F32, .ne0 = 64, .ne1 = 1, .nb1 = 100};
    CHECK(be_matmul(d, &shortrow, x, 1, NULL, y) == CLEAVE_ERR_INVALID_ARG);
    be_mat unaligned = {.data = x, .type = CLEAVE_TYPE_F32, .ne0 = 16, .ne1 = 2, .nb1 = 66};
    CHECK(be_matmul(d, &unaligned, x, 1, NULL, y) == CLEAVE_ERR_INVALID_ARG);
    for (int di = 0; di < 4; di++)
        be_destroy(devs[di]);
}

/* ---- get_rows, rms_norm ------------------------------------------------- */

static void test_get_rows(void) {
    be_device *d = make_dev(3, true, 0), *dc = make_dev(1, false, 0);
    if (!d || !dc) return;
    for (size_t ti = 0; ti < 4; ti++) {
        test_mat tm = make_mat(all_types[ti], 10, 96, 8);
        int32_t ids[5] = {3, 0, 9, 3, 7};
        float out[5 * 96], outc[5 * 96];
        CHECK_OK(be_get_rows(d, &tm.m, ids, 5, out));
        CHECK_OK(be_get_rows(dc, &tm.m, ids, 5, outc));
        for (size_t i = 0; i < 5; i++) {
            CHECK(memcmp(out + i * 96, tm.deq + (size_t)ids[i] * 96, 96 * sizeof(float)) == 0);
            CHECK(memcmp(outc + i * 96, tm.deq + (size_t)ids[i] * 96, 96 * sizeof(float)) == 0);
        }
        int32_t bad[2] = {1, 10};
        out[0] = 42.0f;
        err_clear();
        CHECK(be_get_rows(d, &tm.m, bad, 2, out) == CLEAVE_ERR_INVALID_ARG);
        CHECK_MSG(strstr(cleave_last_error(), "get_rows") && strstr(cleave_last_error(), "10"),
                  "%s", cleave_last_error());
        CHECK(out[0] == 42.0f); /* nothing written */
        bad[1] = -2;
        CHECK(be_get_rows(d, &tm.m, bad, 2, out) == CLEAVE_ERR_INVALID_ARG);
        /* -1: a token outside this device's vocab slice, a row of zeros */
        int32_t some[2] = {-1, 3};
        out[5] = 42.0f;
        CHECK_OK(be_get_rows(d, &tm.m, some, 2, out));
        CHECK(out[0] == 0.0f && out[5] == 0.0f && out[95] == 0.0f);
        CHECK(memcmp(out + 96, tm.deq + 3 * 96, 96 * sizeof(float)) == 0);
        free_mat(&tm);
    }
    be_destroy(d);
    be_destroy(dc);
}

static void test_rms_norm(void) {
    for (int simd = 0; simd < 2; simd++) {
        be_device *d = make_dev(3, simd, 0);
        if (!d) return;
        size_t widths[] = {1, 13, 4096};
        for (size_t wi = 0; wi < 3; wi++) {
            size_t w = widths[wi], rows = 7;
            float *x = malloc(rows * w * 4), *g = malloc(w * 4), *y = malloc(rows * w * 4);
            fill(x, rows * w, 3.0f);
            fill(g, w, 1.0f);
            CHECK_OK(be_rms_norm(d, x, g, y, rows, w, 1e-5f));
            double worst = 0;
            for (size_t r = 0; r < rows; r++) {
                double ss = 0;
                for (size_t i = 0; i < w; i++)
                    ss += (double)x[r * w + i] * x[r * w + i];
                double s = 1.0 / sqrt(ss / w + 1e-5);
                for (size_t i = 0; i < w; i++) {
                    double ref = x[r * w + i] * s * g[i];
                    double e = fabs(y[r * w + i] - ref) / (fabs(ref) + 1e-30);
                    if (e > worst) worst = e;
                }
            }
            CHECK_MSG(worst < 1e-6, "rms_norm w=%zu simd=%d err %.3g", w, simd, worst);
            /* In place gives the same result. */
            CHECK_OK(be_rms_norm(d, x, g, x, rows, w, 1e-5f));
            CHECK(memcmp(x, y, rows * w * 4) == 0);
            free(x);
            free(g);
            free(y);
        }
        float v = 1;
        CHECK(be_rms_norm(d, &v, &v, &v, 0, 1, 1e-5f) == CLEAVE_ERR_INVALID_ARG);
        CHECK(be_rms_norm(d, &v, NULL, &v, 1, 1, 1e-5f) == CLEAVE_ERR_INVALID_ARG);
        be_destroy(d);
    }
}

/* ---- rope --------------------------------------------------------------- */

static bool near(float a, double b, double tol) { return fabs(a - b) <= tol; }

/* An independent rope: rotation angle computed per dimension pair. With
 * scaling, YaRN as its paper states it: the interpolated angle (pos * f *
 * freq_scale) on slow pairs, the extrapolated one (pos * f) on pairs that
 * turn more than beta_fast times over the original context, a linear ramp
 * between the pairs turning beta_fast and beta_slow times, and cos, sin
 * scaled by attn_factor * (1 + 0.1 ln factor). */
static void rope_ref(float *x, size_t head_dim, int32_t pos, const be_rope *p) {
    size_t half = p->n_rot / 2;
    const be_rope_scaling *s = p->scaling;
    for (size_t i = 0; i < half; i++) {
        double f = pow(p->freq_base, -(double)(2 * i) / (double)p->n_rot);
        if (p->freq_factors) f /= p->freq_factors[i];
        double th = pos * f, m = 1;
        if (s) {
            double interp = th * s->freq_scale;
            m = s->attn_factor;
            if (s->ext_factor != 0) {
                /* pair d turns n_ctx_orig * f_d / (2 pi) times; solve for d */
                double dims = (double)p->n_rot / (2 * log(p->freq_base));
                double lo = floor(dims * log(s->n_ctx_orig / (2 * M_PI * s->beta_fast)));
                double hi = ceil(dims * log(s->n_ctx_orig / (2 * M_PI * s->beta_slow)));
                lo = lo < 0 ? 0 : lo, hi = hi > p->n_rot - 1 ? p->n_rot - 1 : hi;
                double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
                double ramp = y <= 0 ? 1 : y >= 1 ? 0 : 1 - y;
                th = interp + (th - interp) * ramp * s->ext_factor;
                m *= 1 + 0.1 * log(1 / s->freq_scale);
            } else {
                th = interp;
            }
        }
        size_t a = p->neox ? i : 2 * i, b = p->neox ? i + half : 2 * i + 1;
        double xa = x[a], xb = x[b];
        x[a] = (float)(m * (xa * cos(th) - xb * sin(th)));
        x[b] = (float)(m * (xa * sin(th) + xb * cos(th)));
    }
    (void)head_dim;
}

static void test_rope(void) {
    be_device *d = make_dev(3, true, 0);
    if (!d) return;
    /* Known values: head_dim 4, base 10000, pos 1: the pairs turn by 1 and
     * 0.01 radians. */
    int32_t pos1 = 1;
    be_rope p = {4, 10000.0f, false, NULL, NULL};
    float x[4] = {1, 0, 1, 0};
    CHECK_OK(be_apply_rope(d, x, 1, 4, 1, 4, &pos1, &p));
    CHECK(near(x[0], cos(1.0), 1e-6) && near(x[1], sin(1.0), 1e-6));
    CHECK(near(x[2], cos(0.01), 1e-6) && near(x[3], sin(0.01), 1e-6));
    p.neox = true;
    float xn[4] = {1, 1, 0, 0};
    CHECK_OK(be_apply_rope(d, xn, 1, 4, 1, 4, &pos1, &p));
    CHECK(near(xn[0], cos(1.0), 1e-6) && near(xn[2], sin(1.0), 1e-6));
    CHECK(near(xn[1], cos(0.01), 1e-6) && near(xn[3], sin(0.01), 1e-6));
    /* freq_factors divide the frequency: factor 100 on pair 0 gives 0.01. */
    float ff[2] = {100.0f, 1.0f};
    p = (be_rope){4, 10000.0f, false, ff, NULL};
    float xf[4] = {1, 0, 1, 0};
    CHECK_OK(be_apply_rope(d, xf, 1, 4, 1, 4, &pos1, &p));
    CHECK(near(xf[0], cos(0.01), 1e-6) && near(xf[1], sin(0.01), 1e-6));
    CHECK(near(xf[2], cos(0.01), 1e-6) && near(xf[3], sin(0.01), 1e-6));
    /* pos 0 is the identity. */
    int32_t pos0 = 0;
    float xi[4] = {0.5f, -2, 3, 4}, xi0[4] = {0.5f, -2, 3, 4};
    CHECK_OK(be_apply_rope(d, xi, 1, 4, 1, 4, &pos0, &p));
    CHECK(memcmp(xi, xi0, sizeof xi) == 0);

    /* Many rows and heads, partial rotation, padded rows, large positions:
     * against the reference, for both pairings and with factors. */
    enum { N = 40, NH = 6, HD = 64, RW = NH * HD + 16 };
    float factors[24];
    for (int i = 0; i < 24; i++)
        factors[i] = 1.0f + (float)i * 0.5f;
    /* linear factor 4; YaRN factor 8 from 4096 (ramp over pairs 5..12 of
     * 24); YaRN with its own ext/attn factors and betas, with Llama 3 factors */
    const be_rope_scaling linear = {0.25f, 0, 1, 32, 1, 4096}, yarn = {0.125f, 1, 1, 32, 1, 4096},
                          yarn2 = {0.25f, 0.5f, 1.3f, 16, 2, 2048};
    const be_rope_scaling *scalings[] = {NULL, NULL, NULL, &linear, &yarn, &yarn2};
    for (int variant = 0; variant < 6; variant++) {
        be_rope pr = {48, 500000.0f, variant % 2 == 1, variant == 2 || variant == 5 ? factors : NULL,
                      scalings[variant]};
        float *a = malloc(N * RW * 4), *b = malloc(N * RW * 4);
        int32_t pos[N];
        for (int i = 0; i < N; i++)
            pos[i] = i * 997 % 8000;
        fill(a, N * RW, 2.0f);
        memcpy(b, a, N * RW * 4);
        CHECK_OK(be_apply_rope(d, a, N, RW, NH, HD, pos, &pr));
        double worst = 0;
        for (int r = 0; r < N; r++) {
            for (int h = 0; h < NH; h++)
                rope_ref(b + r * RW + h * HD, HD, pos[r], &pr);
            for (int i = 0; i < RW; i++) {
                double e = fabs(a[r * RW + i] - b[r * RW + i]);
                if (e > worst) worst = e;
            }
        }
        CHECK_MSG(worst < 2e-6, "rope variant %d err %.3g", variant, worst);
        free(a);
        free(b);
    }
    be_rope odd = {3, 10000.0f, false, NULL, NULL};
    CHECK(be_apply_rope(d, x, 1, 4, 1, 4, &pos1, &odd) == CLEAVE_ERR_INVALID_ARG);
    be_rope wide = {8, 10000.0f, false, NULL, NULL};
    CHECK(be_apply_rope(d, x, 1, 4, 1, 4, &pos1, &wide) == CLEAVE_ERR_INVALID_ARG);
    /* scaling a yarn ramp cannot be computed for is refused, not guessed */
    be_rope_scaling no_ctx = {0.25f, 1, 1, 32, 1, 0}, zero = {0, 0, 1, 32, 1, 64};
    be_rope bad = {4, 10000.0f, false, NULL, &no_ctx};
    CHECK(be_apply_rope(d, x, 1, 4, 1, 4, &pos1, &bad) == CLEAVE_ERR_INVALID_ARG);
    bad.scaling = &zero;
    CHECK(be_apply_rope(d, x, 1, 4, 1, 4, &pos1, &bad) == CLEAVE_ERR_INVALID_ARG);
    be_destroy(d);
}

/* ---- kv_store, attention ------------------------------------------------ */

static void test_kv_store(void) {
    be_device *d = make_dev(1, true, 0), *dc = make_dev(1, false, 0);
    if (!d || !dc) return;
    enum { W = 96, CELLS = 8 };
    float src[3 * W];
    fill(src, 3 * W, 4.0f);
    int32_t cells[3] = {5, 0, 7};
    for (size_t ti = 0; ti < 4; ti++) {
        cleave_type t = all_types[ti];
        size_t rb = quant_row_bytes(t, W);
        char *cache = calloc(CELLS, rb), *cc = calloc(CELLS, rb), *ref = calloc(CELLS, rb);
        CHECK_OK(be_kv_store(d, src, 3, W, cache, t, cells));
        CHECK_OK(be_kv_store(dc, src, 3, W, cc, t, cells));
        for (int i = 0; i < 3; i++)
            quant_quantize_row(t, src + i * W, ref + cells[i] * rb, W);
        CHECK_MSG(memcmp(cache, ref, CELLS * rb) == 0, "kv_store %s simd", cleave_type_name(t));
        CHECK_MSG(memcmp(cc, ref, CELLS * rb) == 0, "kv_store %s C", cleave_type_name(t));
        free(cache);
        free(cc);
        free(ref);
    }
    float cache[W];
    int32_t neg = -1;
    CHECK(be_kv_store(d, src, 1, W, cache, CLEAVE_TYPE_F32, &neg) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_kv_store(d, src, 1, 40, cache, CLEAVE_TYPE_Q8_0, cells) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(be_kv_store(d, src, 1, W, cache, (cleave_type)16, cells) == CLEAVE_ERR_UNSUPPORTED);
    be_destroy(d);
    be_destroy(dc);
}

static void test_attention(void) {
    enum { NH = 8, NKV = 2, HD = 64, NT = 9, NC = 16 };
    const size_t qw = NH * HD, kw = NKV * HD;
    /* Batch: seq 0 at positions 3..7 (cells for 0..2 are already cached),
     * seq 1 at 0..2, and one token of seq 5 that has no cell at all. */
    int32_t tok_seq[NT] = {0, 0, 0, 0, 0, 1, 1, 1, 5};
    int32_t tok_pos[NT] = {3, 4, 5, 6, 7, 0, 1, 2, 0};
    /* Cells in scrambled order, two empty (pos -1) and one of seq 0 in the
     * future of every token (pos 9). */
    int32_t cell_seq[NC] = {1, 0, 0, -1, 0, 1, 0, 0, 0, 1, -1, 0, 0, 0, 0, 0};
    int32_t cell_pos[NC] = {2, 5, 0, -1, 3, 0, 9, 1, 7, 1, -1, 2, 4, 6, 0, 0};
    /* cells 14, 15: seq 0 pos 0 duplicates would double-count; give them
     * seq 3 instead, which nobody in the batch belongs to. */
    cell_seq[14] = 3;
    cell_seq[15] = 3;
    float *q = malloc(NT * qw * 4), *kv_k = malloc(NC * kw * 4), *kv_v = malloc(NC * kw * 4);
    float *out = malloc(NT * qw * 4), *ref = malloc(NT * qw * 4);
    fill(q, NT * qw, 1.0f);
    fill(kv_k, NC * kw, 1.0f);
    fill(kv_v, NC * kw, 1.0f);
    int32_t all_cells[NC];
    for (int i = 0; i < NC; i++)
        all_cells[i] = i;

    for (size_t ti = 0; ti < 4; ti++) {
        cleave_type t = all_types[ti];
        size_t rb = quant_row_bytes(t, kw);
        void *kc = calloc(NC, rb), *vc = calloc(NC, rb);
        float *kd = malloc(NC * kw * 4), *vd = malloc(NC * kw * 4);
        for (int c = 0; c < NC; c++) {
            quant_quantize_row(t, kv_k + c * kw, (char *)kc + c * rb, kw);
            quant_quantize_row(t, kv_v + c * kw, (char *)vc + c * rb, kw);
            quant_dequantize_row(t, (char *)kc + c * rb, kd + c * kw, kw);
            quant_dequantize_row(t, (char *)vc + c * rb, vd + c * kw, kw);
        }
        /* Reference in double over the dequantized cache. */
        float scale = 1.0f / sqrtf((float)HD);
        for (int tk = 0; tk < NT; tk++)
            for (int h = 0; h < NH; h++) {
                int hk = h / (NH / NKV);
                double s[NC], mx = -INFINITY, sum = 0;
                for (int c = 0; c < NC; c++) {
                    s[c] = NAN;
                    if (cell_seq[c] != tok_seq[tk] || cell_pos[c] < 0 || cell_pos[c] > tok_pos[tk])
                        continue;
                    double dot = 0;
                    for (int i = 0; i < HD; i++)
                        dot += (double)q[tk * qw + h * HD + i] * kd[c * kw + hk * HD + i];
                    s[c] = dot * scale;
                    if (s[c] > mx) mx = s[c];
                }
                for (int c = 0; c < NC; c++)
                    if (!isnan(s[c])) sum += exp(s[c] - mx);
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int c = 0; c < NC; c++)
                        if (!isnan(s[c])) o += exp(s[c] - mx) / sum * vd[c * kw + hk * HD + i];
                    ref[tk * qw + h * HD + i] = (float)o;
                }
            }
        for (int cfg = 0; cfg < 4; cfg++) {
            be_device *d = make_dev(cfg & 1 ? 3 : 1, cfg < 2, 0);
            if (!d) break;
            be_attn a = {.q = q, .k = kc, .v = vc, .kv_type = t, .v_type = t, .n_tokens = NT, .n_kv = NC,
                         .n_head = NH, .n_head_kv = NKV, .head_dim = HD, .tok_pos = tok_pos,
                         .tok_seq = tok_seq, .cell_pos = cell_pos, .cell_seq = cell_seq,
                         .scale = scale, .out = out};
            memset(out, 0xff, NT * qw * 4);
            CHECK_OK(be_attention(d, &a));
            double worst = 0;
            for (size_t i = 0; i < NT * qw; i++) {
                double e = fabs(out[i] - ref[i]);
                if (!(e <= worst)) worst = e; /* NaN counts as worst */
            }
            CHECK_MSG(worst < 1e-5, "attention %s cfg %d err %.3g", cleave_type_name(t), cfg,
                      worst);
            for (size_t i = 8 * qw; i < 9 * qw; i++)
                CHECK(out[i] == 0.0f);

            /* The cache written by kv_store is what attention reads. */
            void *kc2 = calloc(NC, rb), *vc2 = calloc(NC, rb);
            CHECK_OK(be_kv_store(d, kv_k, NC, kw, kc2, t, all_cells));
            CHECK_OK(be_kv_store(d, kv_v, NC, kw, vc2, t, all_cells));
            a.k = kc2;
            a.v = vc2;
            float *out2 = malloc(NT * qw * 4);
            a.out = out2;
            CHECK_OK(be_attention(d, &a));
            CHECK(memcmp(out, out2, NT * qw * 4) == 0);
            free(out2);
            free(kc2);
            free(vc2);

            if (cfg == 0 && ti == 0) {
                be_attn bad = a;
                bad.n_head_kv = 3;
                CHECK(be_attention(d, &bad) == CLEAVE_ERR_INVALID_ARG);
                bad = a;
                bad.kv_type = (cleave_type)16; /* iq2_xxs: no cache type */
                CHECK(be_attention(d, &bad) == CLEAVE_ERR_UNSUPPORTED);
                bad = a;
                bad.q = NULL;
                CHECK(be_attention(d, &bad) == CLEAVE_ERR_INVALID_ARG);
            }
            be_destroy(d);
        }
        free(kc);
        free(vc);
        free(kd);
        free(vd);
    }
    free(q);
    free(kv_k);
    free(kv_v);
    free(out);
    free(ref);
}

/* ---- swiglu, add -------------------------------------------------------- */

static void test_elementwise(void) {
    size_t sizes[] = {1, 100, 50001};
    for (int cfg = 0; cfg < 4; cfg++) {
        be_device *d = make_dev(cfg & 1 ? 3 : 1, cfg < 2, 0);
        if (!d) return;
        for (size_t si = 0; si < 3; si++) {
            size_t n = sizes[si];
            float *g = malloc(n * 4), *u = malloc(n * 4), *o = malloc(n * 4), *y = malloc(n * 4);
            fill(g, n, 30.0f);
            fill(u, n, 2.0f);
            if (n > 10) {
                g[0] = -100.0f;
                g[1] = 100.0f;
                g[2] = 0.0f;
                g[3] = -88.5f;
            }
            CHECK_OK(be_swiglu(d, g, u, o, n));
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                double e = fabs(o[i] - ref) / (fabs(ref) + 1e-30);
                if (fabs(ref) < 1e-30) e = fabs(o[i]);
                if (!(e <= worst)) worst = e;
            }
            CHECK_MSG(worst < 1e-5, "swiglu n=%zu cfg=%d err %.3g", n, cfg, worst);
            /* out aliasing gate */
            memcpy(y, g, n * 4);
            CHECK_OK(be_swiglu(d, y, u, y, n));
            CHECK(memcmp(y, o, n * 4) == 0);

            memcpy(y, u, n * 4);
            CHECK_OK(be_add(d, y, g, n));
            bool ok = true;
            for (size_t i = 0; i < n; i++)
                ok = ok && y[i] == u[i] + g[i];
            CHECK_MSG(ok, "add n=%zu cfg=%d", n, cfg);
            free(g);
            free(u);
            free(o);
            free(y);
        }
        float v = 0;
        CHECK(be_add(d, &v, NULL, 1) == CLEAVE_ERR_INVALID_ARG);
        CHECK(be_swiglu(d, &v, &v, &v, 0) == CLEAVE_ERR_INVALID_ARG);
        be_destroy(d);
    }
}

/* ---- thread pool -------------------------------------------------------- */

typedef struct {
    atomic_int *hits;
    atomic_int bad_thread;
    int n_threads;
} pool_ctx;

static void pool_task(void *vc, size_t task, int thread) {
    pool_ctx *c = vc;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_store(&c->bad_thread, 1);
}

static void test_threadpool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        threadpool *p = NULL;
        CHECK_OK(threadpool_create(nt, &p));
        if (!p) return;
        CHECK(threadpool_size(p) == nt);
        enum { TASKS = 37 };
        atomic_int hits[TASKS];
        pool_ctx c = {hits, 0, nt};
        bool ok = true;
        /* Many tiny jobs back to back: the decode pattern, and a hunt for
         * lost wake-ups. */
        for (int rep = 0; rep < 3000; rep++) {
            size_t n = (size_t)(rep % TASKS) + 1;
            for (size_t i = 0; i < TASKS; i++)
                atomic_init(&hits[i], 0);
            threadpool_run(p, n, pool_task, &c);
            for (size_t i = 0; i < TASKS; i++)
                ok = ok && atomic_load(&hits[i]) == (i < n);
        }
        CHECK_MSG(ok, "thread pool with %d threads missed or repeated tasks", nt);
        CHECK(atomic_load(&c.bad_thread) == 0);
        threadpool_run(p, 0, pool_task, &c);
        threadpool_destroy(p);
    }
    threadpool_destroy(NULL);
    threadpool *p = NULL;
    CHECK(threadpool_create(0, &p) == CLEAVE_ERR_INVALID_ARG && p == NULL);
}

/* Copies between two virtual devices: a block of columns of every row
 * into a buffer of another pitch, bytes outside the block untouched. */
static void test_copy2d(void) {
    be_device *a = make_dev(1, true, 0), *b = make_dev(1, true, 0);
    if (!a || !b) return;
    enum { ROWS = 7, SP = 40, DP = 24, W = 12, OFF = 5 };
    unsigned char *src = be_alloc(a, ROWS * SP, "src"), *dst = be_alloc(b, ROWS * DP, "dst");
    CHECK(src && dst);
    if (src && dst) {
        for (int i = 0; i < ROWS * SP; i++) src[i] = (unsigned char)(i * 7 + 1);
        memset(dst, 0xee, ROWS * DP);
        CHECK_OK(be_copy2d_from(b, dst + 3, DP, a, src + OFF, SP, W, ROWS, NULL));
        bool ok = true;
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < DP; c++) {
                unsigned char want = c >= 3 && c < 3 + W ? src[r * SP + OFF + c - 3] : 0xee;
                ok &= dst[r * DP + c] == want;
            }
        CHECK_MSG(ok, "2-D copy: wrong bytes");
        /* nothing to copy is fine; a pitch below the width is an error */
        CHECK_OK(be_copy2d_from(b, dst, DP, a, src, SP, 0, ROWS, NULL));
        CHECK(be_copy2d_from(b, dst, W - 1, a, src, SP, W, ROWS, NULL) == CLEAVE_ERR_INVALID_ARG);
        CHECK(be_copy2d_from(b, NULL, DP, a, src, SP, W, ROWS, NULL) == CLEAVE_ERR_INVALID_ARG);
    }
    be_free(a, src);
    be_free(b, dst);
    be_destroy(a);
    be_destroy(b);
}

/* The tiered KV cache's buffers: base spans device and host memory, alias
 * reads the same device memory and, past the head, only what was staged;
 * buffers of one slot share its staging; the budget counts head and
 * staging; bad shapes and budgets are refused. */
static void test_tiers(void) {
    size_t page = 4096;
    be_device *d = make_dev(1, true, 0);
    if (!d) return;
    page = be_tier_granularity(d);
    size_t bytes = 3 * page + 100, head = page;
    be_tier a, b;
    CHECK_OK(be_tier_alloc(d, bytes, head, 0, "K", &a));
    CHECK_OK(be_tier_alloc(d, bytes, head, 0, "V", &b));
    be_mem_stats ms;
    be_get_mem_stats(d, &ms);
    CHECK_MSG(ms.used == 2 * head + (3 * page + page - head), "tiers: %zu bytes counted", ms.used);
    unsigned char *base = a.base, *alias = a.alias;
    for (size_t i = 0; i < bytes; i++) base[i] = (unsigned char)(i * 13 + 5);
    bool head_shared = true, tail_apart = false;
    for (size_t i = 0; i < head; i++) head_shared &= alias[i] == base[i];
    for (size_t i = head; i < bytes; i++) tail_apart |= alias[i] != base[i];
    CHECK_MSG(head_shared && tail_apart, "tiers: the alias shares the head only");
    CHECK_OK(be_tier_stage(d, &a, head + 2 * page)); /* part of the tail */
    bool staged = true, rest_apart = false;
    for (size_t i = 0; i < head + 2 * page; i++) staged &= alias[i] == base[i];
    for (size_t i = head + 2 * page; i < bytes; i++) rest_apart |= alias[i] != base[i];
    CHECK_MSG(staged && rest_apart, "tiers: staging copies what was asked and no more");
    unsigned char *balias = b.alias;
    CHECK_MSG(!memcmp(balias + head, alias + head, 2 * page), "tiers: one slot, one staging");
    base[7] = 0x5a;
    CHECK_MSG(alias[7] == 0x5a, "tiers: a write to the head shows through the alias");
    CHECK(be_tier_stage(d, &a, bytes + 1) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(be_tier_stage(d, &a, 0));
    CHECK_OK(be_tier_join(d, &a));
    /* rows written through the alias reach the host tier: rows of 100
     * bytes; the first cell lies in the head, the second straddles it */
    int32_t c1 = (int32_t)(head / 100), c2 = c1 + 20, cells[3] = {0, c1, c2};
    for (size_t i = 0; i < bytes; i++) alias[i] = (unsigned char)(i * 7 + 1);
    CHECK_OK(be_tier_persist(d, &a, 1, 100, cells, 3));
    bool rows_in = true, rest_kept = true;
    for (size_t i = head; i < bytes; i++) {
        bool written = (i >= (size_t)c1 * 100 && i < (size_t)c1 * 100 + 100) ||
                       (i >= (size_t)c2 * 100 && i < (size_t)c2 * 100 + 100);
        if (written) rows_in &= base[i] == alias[i];
        else rest_kept &= base[i] == (unsigned char)(i * 13 + 5);
    }
    CHECK_MSG(rows_in && rest_kept, "tiers: persist copies the cells' rows past the head and no more");
    int32_t far = 1000;
    CHECK(be_tier_persist(d, &a, 1, 100, &far, 1) == CLEAVE_ERR_INVALID_ARG);
    be_tier c;
    CHECK(be_tier_alloc(d, bytes, head + 1, 1, "K", &c) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_tier_alloc(d, page, 2 * page, 1, "K", &c) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(be_tier_alloc(d, bytes, 0, 1, "all in host memory", &c));
    CHECK_OK(be_tier_stage(d, &c, bytes));
    be_tier_free(d, &c);
    be_tier_free(d, &a);
    be_tier_free(d, &b);
    be_tier_free(d, &b); /* freed twice: nothing */
    be_get_mem_stats(d, &ms);
    CHECK_MSG(ms.used == 0, "tiers: %zu bytes still counted", ms.used);
    be_destroy(d);
    /* a budget below the head and staging */
    be_device *small = make_dev(1, true, 2 * page);
    if (!small) return;
    CHECK(be_tier_alloc(small, 4 * page, 2 * page, 0, "K", &a) == CLEAVE_ERR_OOM);
    be_get_mem_stats(small, &ms);
    CHECK_MSG(ms.used == 0, "tiers: a refused buffer left %zu bytes counted", ms.used);
    be_destroy(small);
}

/* ---- the expert ops' bad arguments -------------------------------------- */

static void test_moe_errors(void) {
    be_device *d = NULL;
    CHECK_OK(be_cpu_create("cpu", 1, 0, &d));
    if (!d) return;
    float w[2 * 4 * 8], x[8], y[8], logits[4] = {1, 2, 3, 4}, wt[2];
    fill(w, 64, 1.0f), fill(x, 8, 1.0f);
    be_mat m = {.data = w, .type = CLEAVE_TYPE_F32, .ne0 = 8, .ne1 = 4, .nb1 = 32, .ne2 = 2, .nb2 = 128};
    int32_t ids[2] = {0, 2}; /* expert 2 of 2: out of range */
    err_clear();
    CHECK(be_matmul_id(d, &m, NULL, x, 1, 1, 2, ids, y) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "expert 2 of 2") != NULL);
    ids[1] = 1;
    CHECK_OK(be_matmul_id(d, &m, NULL, x, 1, 1, 2, ids, y));
    CHECK(be_matmul_id(d, &m, NULL, x, 3, 1, 2, ids, y) == CLEAVE_ERR_INVALID_ARG); /* rows per slot: 1 or k */
    CHECK(be_matmul_id(d, &m, NULL, NULL, 1, 1, 2, ids, y) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_moe_route(d, logits, 1, 4, 5, BE_GATING_SOFTMAX, true, 1.0f, ids, wt) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_moe_route(d, logits, 0, 4, 2, BE_GATING_SOFTMAX, true, 1.0f, ids, wt) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_moe_combine(d, y, NULL, 1, 2, 4, x) == CLEAVE_ERR_INVALID_ARG);
    CHECK(be_swiglu_oai(d, x, x, NULL, 8, 1.702f, 7.0f) == CLEAVE_ERR_INVALID_ARG);
    be_destroy(d);
}

int main(void) {
    fprintf(stderr, "CPU SIMD kernels %savailable\n", cpu_simd_available() ? "" : "not ");
    test_copy2d();
    test_tiers();
    test_threadpool();
    test_memory();
    test_injected_oom();
    test_get_rows();
    test_rms_norm();
    test_rope();
    test_kv_store();
    test_attention();
    test_elementwise();
    test_matmul();
    test_moe_errors();
    return tu_finish("test_backend_cpu");
}
