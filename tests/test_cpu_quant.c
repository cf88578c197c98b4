/* The CPU device's block-type kernels against double-precision references
 * over quant_dequantize_row's values, for every block type: activation
 * quantization, the integer dots (C reference and AVX2), tiles against
 * dots, matmul through the device (decode and batched shapes, 1 and 3
 * threads), get_rows, attention over Q4_0/Q5_0 caches, and the errors.
 * Weights are random blocks (random quant bytes, sane f16 scales), so the
 * test needs no quantizer.
 *
 * Tolerances. The integer dots see activations rounded to int8 blocks:
 * x[k] ~ d q[k] with |x[k] - d q[k]| <= d / 2 (d = amax / 127 of x's block;
 * round to nearest). Two checks follow:
 *   exact:  |y - sum w[k] d q[k]| <= 1e-5 sum |w[k] d q[k]|, the f32
 *           rounding of per-block scaling and summation only; this catches
 *           any unpacking or scale error, however small its share.
 *   true:   |y - sum w[k] x[k]| <= sum |w[k]| d / 2 (+ the same 1e-5 term),
 *           the worst case of the activation rounding, never exceeded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_qdot.h"
#include "base/error.h"
#include "base/options.h"
#include "quant/quant.h"
#include "testutil.h"

static const cleave_type qtypes[] = {
    CLEAVE_TYPE_Q4_0, CLEAVE_TYPE_Q4_1,   CLEAVE_TYPE_Q5_0, CLEAVE_TYPE_Q5_1,
    CLEAVE_TYPE_Q8_0, CLEAVE_TYPE_IQ4_NL, CLEAVE_TYPE_Q2_K, CLEAVE_TYPE_Q3_K,
    CLEAVE_TYPE_Q4_K, CLEAVE_TYPE_Q5_K,   CLEAVE_TYPE_Q6_K, CLEAVE_TYPE_IQ4_XS,
    CLEAVE_TYPE_MXFP4,
};
#define N_QTYPES (sizeof qtypes / sizeof qtypes[0])

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)rnd32() / 4294967296.0f * 2.0f - 1.0f; } /* [-1, 1) */

static size_t block_elems(cleave_type t) {
    size_t be;
    quant_type_info((uint32_t)t, NULL, &be, NULL);
    return be;
}

/* n weights of random blocks (f16 scales of magnitude 2^-6 .. 2^-5). */
static void random_row(cleave_type t, void *row, size_t n) {
    tu_random_blocks(t, row, n, 1.0f / 32, &rng);
}

/* x with a different magnitude per 32 (down to 1e-3 of the largest, and
 * one block of zeros, the d = 0 case), so activation scales vary. */
static void random_act(float *x, size_t n) {
    for (size_t i = 0; i < n; i += 32) {
        float s = i == 64 ? 0.0f : powf(10.0f, -3.0f * (float)(rnd32() % 1000) / 1000.0f);
        for (size_t j = 0; j < 32; j++)
            x[i + j] = frand() * s;
    }
}

/* The activation values the kernels see (d q) and their steps d. */
static void act_values(cpu_act_kind k, const void *xq, size_t n, double *xv, double *step) {
    size_t bs = k == CPU_ACT_Q32 ? 32 : 256;
    for (size_t i = 0; i < n; i++) {
        double d, q;
        if (k == CPU_ACT_Q32) {
            const cpu_qa32 *b = (const cpu_qa32 *)xq + i / bs;
            d = b->d, q = b->qs[i % bs];
        } else {
            const cpu_qa256 *b = (const cpu_qa256 *)xq + i / bs;
            d = b->d, q = b->qs[i % bs];
        }
        xv[i] = d * q;
        step[i] = d;
    }
}

typedef struct {
    double exact, exact_mag, truth, bound;
} ref_dot;

static ref_dot reference(const float *w, const float *x, const double *xv, const double *step,
                         size_t n) {
    ref_dot r = {0, 0, 0, 0};
    double mag = 0;
    for (size_t k = 0; k < n; k++) {
        r.exact += w[k] * xv[k];
        r.exact_mag += fabs(w[k] * xv[k]);
        r.truth += (double)w[k] * x[k];
        mag += fabs((double)w[k] * x[k]);
        r.bound += fabs((double)w[k]) * step[k] / 2;
    }
    r.bound = r.bound * (1 + 1e-6) + 1e-5 * mag;
    return r;
}

/* Checks y against both references; returns the error of the exact one
 * relative to its magnitude. */
static double check_dot(const char *what, cleave_type t, size_t n, float y, const ref_dot *r) {
    double e = fabs(y - r->exact), tol = 1e-5 * r->exact_mag + 1e-30;
    CHECK_MSG(e <= tol, "%s %s n=%zu: %.9g vs exact %.9g (err %.3g > %.3g)", what,
              cleave_type_name(t), n, y, r->exact, e, tol);
    CHECK_MSG(fabs(y - r->truth) <= r->bound, "%s %s n=%zu: %.9g vs %.9g beyond the bound %.3g",
              what, cleave_type_name(t), n, y, r->truth, r->bound);
    return r->exact_mag > 0 ? e / r->exact_mag : 0;
}

/* ---- activation quantization and dots ------------------------------------ */

static void test_dots(void) {
    static const size_t lens[] = {256, 1024, 4096};
    bool simd = cpu_simd_available();
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        cleave_type t = qtypes[ti];
        cpu_qkernel kc = cpu_qkernel_for(t, false), ks = cpu_qkernel_for(t, true);
        CHECK(kc.dot != NULL && kc.act != CPU_ACT_NONE && kc.tile == NULL);
        double worst_c = 0, worst_s = 0;
        for (size_t li = 0; li < 3; li++) {
            size_t n = lens[li];
            void *row = malloc(quant_row_bytes(t, n));
            float *w = malloc(n * 4), *x = malloc(n * 4);
            double *xv = malloc(n * 8), *step = malloc(n * 8);
            size_t ab = cpu_act_row_bytes(kc.act, n);
            void *xq = malloc(ab), *xq2 = malloc(ab);
            for (int rep = 0; rep < 4; rep++) {
                random_row(t, row, n);
                quant_dequantize_row(t, row, w, n);
                random_act(x, n);
                cpu_quantize_act(false, kc.act, x, xq, n);
                act_values(kc.act, xq, n, xv, step);
                for (size_t k = 0; k < n; k++)
                    CHECK_MSG(fabs(x[k] - xv[k]) <= step[k] / 2 * (1 + 1e-6),
                              "activation %zu: %g vs %g (step %g)", k, x[k], xv[k], step[k]);
                ref_dot r = reference(w, x, xv, step, n);
                double e = check_dot("C dot", t, n, kc.dot(row, xq, n), &r);
                if (e > worst_c) worst_c = e;
                if (!simd) continue;
                /* both quantizers give the same bytes, so either feeds either dot */
                cpu_quantize_act(true, kc.act, x, xq2, n);
                CHECK_MSG(memcmp(xq, xq2, ab) == 0, "%s: AVX2 activation bytes differ",
                          cleave_type_name(t));
                e = check_dot("AVX2 dot", t, n, ks.dot(row, xq2, n), &r);
                if (e > worst_s) worst_s = e;
            }
            free(row), free(w), free(x), free(xv), free(step), free(xq), free(xq2);
        }
        fprintf(stderr, "dot %-7s worst error vs the exact reference: C %.2e, AVX2 %.2e\n",
                cleave_type_name(t), worst_c, worst_s);
    }
}

/* A tile's outputs equal the one-pair dot bit for bit, for every row count
 * (the remainder tiles of 1..3 rows included). */
static void test_tiles(void) {
    if (!cpu_simd_available()) return;
    enum { NW = 5, NX = 11 };
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        cleave_type t = qtypes[ti];
        cpu_qkernel k = cpu_qkernel_for(t, true);
        CHECK(k.tile != NULL);
        if (!k.tile) continue;
        size_t n = 512, rb = quant_row_bytes(t, n), nb1 = rb + 6; /* padded rows */
        size_t xs = cpu_act_row_bytes(k.act, n);
        char *w = calloc(NW, nb1), *xq = malloc(NX * xs);
        float *x = malloc(n * 4), y[NX * NW];
        for (int j = 0; j < NW; j++)
            random_row(t, w + j * nb1, n);
        for (int i = 0; i < NX; i++) {
            random_act(x, n);
            cpu_quantize_act(true, k.act, x, xq + i * xs, n);
        }
        for (size_t nx = 1; nx <= NX; nx++) {
            memset(y, 0xff, sizeof y);
            k.tile(w, nb1, NW, xq, xs, nx, n, y, NW);
            for (size_t i = 0; i < nx; i++)
                for (int j = 0; j < NW; j++) {
                    float d = k.dot(w + j * nb1, xq + i * xs, n);
                    CHECK_MSG(memcmp(&d, &y[i * NW + j], 4) == 0,
                              "%s tile nx=%zu (%zu,%d): %.9g vs dot %.9g", cleave_type_name(t), nx,
                              i, j, y[i * NW + j], d);
                }
        }
        free(w), free(xq), free(x);
    }
}

/* ---- through the device ---------------------------------------------------- */

static be_device *make_dev(int threads, bool simd) {
    if (simd)
        unsetenv("CLEAVE_NO_SIMD");
    else
        setenv("CLEAVE_NO_SIMD", "1", 1);
    options_reload(); /* read when the device is made */
    be_device *d = NULL;
    CHECK_OK(be_cpu_create(simd ? "cpu-simd" : "cpu-c", threads, 0, &d));
    unsetenv("CLEAVE_NO_SIMD");
    options_reload();
    return d;
}

/* Every shape of matmul: decode (n <= 8, all rows per task) and batched
 * (tiles over row blocks), padded rows, with and without bias, against
 * both references per output; and each token's outputs equal, bit for
 * bit, what it gets alone (with int8 activations even a last-bit
 * difference can round a later activation the other way: ~1e-2 in the
 * logits). */
static void test_matmul(void) {
    static const size_t ns[] = {1, 2, 3, 4, 7, 8, 9, 33, 100};
    const size_t m = 37;
    be_device *devs[4] = {make_dev(1, true), make_dev(3, true), make_dev(1, false),
                          make_dev(3, false)};
    for (int di = 0; di < 4; di++)
        if (!devs[di]) return;
    float *bias = malloc(m * 4);
    for (size_t j = 0; j < m; j++)
        bias[j] = frand();
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        cleave_type t = qtypes[ti];
        size_t k = block_elems(t) == 32 ? 96 * 8 : 768, pad = ti % 2 ? 10 : 0;
        size_t nb1 = quant_row_bytes(t, k) + pad;
        char *wq = calloc(m, nb1);
        float *w = malloc(m * k * 4), *x = malloc(100 * k * 4), *y = malloc(100 * m * 4),
              *y1 = malloc(m * 4);
        for (size_t j = 0; j < m; j++) {
            random_row(t, wq + j * nb1, k);
            quant_dequantize_row(t, wq + j * nb1, w + j * k, k);
        }
        for (size_t i = 0; i < 100; i++)
            random_act(x + i * k, k);
        cpu_act_kind ak = cpu_act_for(t);
        void *xq = malloc(cpu_act_row_bytes(ak, k));
        double *xv = malloc(k * 8), *step = malloc(k * 8);
        ref_dot *ref = malloc(100 * m * sizeof *ref);
        for (size_t i = 0; i < 100; i++) {
            cpu_quantize_act(false, ak, x + i * k, xq, k);
            act_values(ak, xq, k, xv, step);
            for (size_t j = 0; j < m; j++)
                ref[i * m + j] = reference(w + j * k, x + i * k, xv, step, k);
        }
        be_mat mat = {.data = wq, .type = t, .ne0 = k, .ne1 = m, .nb1 = nb1};
        for (int di = 0; di < 4; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                size_t n = ns[ni];
                bool wb = (ni + (size_t)di) % 2;
                memset(y, 0xff, n * m * 4);
                CHECK_OK(be_matmul(devs[di], &mat, x, n, wb ? bias : NULL, y));
                for (size_t i = 0; i < n; i++)
                    for (size_t j = 0; j < m; j++) {
                        ref_dot r = ref[i * m + j];
                        if (wb) r.exact += bias[j], r.truth += bias[j];
                        check_dot("matmul", t, k, y[i * m + j], &r);
                    }
                /* the last token alone: the same bits */
                CHECK_OK(be_matmul(devs[di], &mat, x + (n - 1) * k, 1, wb ? bias : NULL, y1));
                CHECK_MSG(memcmp(y1, y + (n - 1) * m, m * 4) == 0,
                          "matmul %s dev %d: token %zu of %zu differs from the token alone",
                          cleave_type_name(t), di, n - 1, n);
            }
        free(wq), free(w), free(x), free(y), free(y1), free(xq), free(xv), free(step), free(ref);
    }
    free(bias);

    /* rows that are not whole blocks, named by type */
    float xe[512], ye[4];
    memset(xe, 0, sizeof xe);
    be_mat bad = {.data = xe, .type = CLEAVE_TYPE_Q4_K, .ne0 = 96, .ne1 = 1, .nb1 = 144};
    err_clear();
    CHECK(be_matmul(devs[0], &bad, xe, 1, NULL, ye) == CLEAVE_ERR_INVALID_ARG);
    CHECK_MSG(strstr(cleave_last_error(), "q4_K") && strstr(cleave_last_error(), "96"), "%s",
              cleave_last_error());
    bad.type = CLEAVE_TYPE_Q5_0;
    bad.ne0 = 48;
    CHECK(be_matmul(devs[0], &bad, xe, 1, NULL, ye) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "q5_0") != NULL);
    for (int di = 0; di < 4; di++)
        be_destroy(devs[di]);
}

/* Embedding rows are the reference dequantization, bit for bit. */
static void test_get_rows(void) {
    be_device *d = make_dev(3, true), *dc = make_dev(1, false);
    if (!d || !dc) return;
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        cleave_type t = qtypes[ti];
        size_t k = 512, rows = 9, nb1 = quant_row_bytes(t, k) + 2;
        char *tab = calloc(rows, nb1);
        float *ref = malloc(rows * k * 4), *out = malloc(4 * k * 4), *outc = malloc(4 * k * 4);
        for (size_t r = 0; r < rows; r++) {
            random_row(t, tab + r * nb1, k);
            quant_dequantize_row(t, tab + r * nb1, ref + r * k, k);
        }
        be_mat mat = {.data = tab, .type = t, .ne0 = k, .ne1 = rows, .nb1 = nb1};
        int32_t ids[4] = {8, 0, 3, 8};
        CHECK_OK(be_get_rows(d, &mat, ids, 4, out));
        CHECK_OK(be_get_rows(dc, &mat, ids, 4, outc));
        for (int i = 0; i < 4; i++) {
            CHECK_MSG(memcmp(out + i * k, ref + ids[i] * k, k * 4) == 0, "get_rows %s simd",
                      cleave_type_name(t));
            CHECK_MSG(memcmp(outc + i * k, ref + ids[i] * k, k * 4) == 0, "get_rows %s C",
                      cleave_type_name(t));
        }
        free(tab), free(ref), free(out), free(outc);
    }
    be_destroy(d);
    be_destroy(dc);
}

/* Attention over quantized caches of random blocks: one sequence, causal,
 * GQA, one empty cell; against double precision over the dequantized
 * cache (exact values, f32 math: the same 1e-5 as the float caches). */
static void test_attention(void) {
    enum { NH = 4, NKV = 2, HD = 64, NT = 5, NC = 12 };
    const cleave_type types[] = {CLEAVE_TYPE_Q4_0, CLEAVE_TYPE_Q5_0};
    const size_t qw = NH * HD, kw = NKV * HD;
    int32_t tok_seq[NT], tok_pos[NT], cell_seq[NC], cell_pos[NC];
    for (int i = 0; i < NT; i++)
        tok_seq[i] = 0, tok_pos[i] = 7 + i;
    for (int c = 0; c < NC; c++)
        cell_seq[c] = 0, cell_pos[c] = (c * 5) % NC; /* scrambled */
    cell_pos[4] = -1;                                /* empty */
    float *q = malloc(NT * qw * 4), *out = malloc(NT * qw * 4), *ref = malloc(NT * qw * 4);
    for (size_t i = 0; i < NT * qw; i++)
        q[i] = frand() * 4.0f;
    for (int ti = 0; ti < 2; ti++) {
        cleave_type t = types[ti];
        size_t rb = quant_row_bytes(t, kw);
        char *kc = malloc(NC * rb), *vc = malloc(NC * rb);
        float *kd = malloc(NC * kw * 4), *vd = malloc(NC * kw * 4);
        for (int c = 0; c < NC; c++) {
            random_row(t, kc + c * rb, kw);
            random_row(t, vc + c * rb, kw);
            quant_dequantize_row(t, kc + c * rb, kd + c * kw, kw);
            quant_dequantize_row(t, vc + c * rb, vd + c * kw, kw);
        }
        float scale = 1.0f / sqrtf((float)HD);
        for (int tk = 0; tk < NT; tk++)
            for (int h = 0; h < NH; h++) {
                int hk = h / (NH / NKV);
                double s[NC], mx = -INFINITY, sum = 0;
                for (int c = 0; c < NC; c++) {
                    s[c] = NAN;
                    if (cell_pos[c] < 0 || cell_pos[c] > tok_pos[tk]) continue;
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
            be_device *d = make_dev(cfg & 1 ? 3 : 1, cfg < 2);
            if (!d) break;
            be_attn a = {.q = q,
                         .k = kc,
                         .v = vc,
                         .kv_type = t,
                         .v_type = t,
                         .n_tokens = NT,
                         .n_kv = NC,
                         .n_head = NH,
                         .n_head_kv = NKV,
                         .head_dim = HD,
                         .tok_pos = tok_pos,
                         .tok_seq = tok_seq,
                         .cell_pos = cell_pos,
                         .cell_seq = cell_seq,
                         .scale = scale,
                         .out = out};
            memset(out, 0xff, NT * qw * 4);
            CHECK_OK(be_attention(d, &a));
            double worst = 0;
            for (size_t i = 0; i < NT * qw; i++) {
                double e = fabs(out[i] - ref[i]);
                if (!(e <= worst)) worst = e; /* NaN counts as worst */
            }
            CHECK_MSG(worst < 1e-5, "attention %s cfg %d err %.3g", cleave_type_name(t), cfg,
                      worst);
            if (cfg == 0) { /* a head that splits a block is refused */
                be_attn bad = a;
                bad.head_dim = 16, bad.n_head_kv = NKV * HD / 16, bad.n_head = bad.n_head_kv;
                err_clear();
                CHECK(be_attention(d, &bad) == CLEAVE_ERR_INVALID_ARG);
                CHECK(strstr(cleave_last_error(), cleave_type_name(t)) != NULL);
            }
            be_destroy(d);
        }
        free(kc), free(vc), free(kd), free(vd);
    }
    free(q), free(out), free(ref);
}

int main(void) {
    fprintf(stderr, "CPU SIMD kernels %savailable\n", cpu_simd_available() ? "" : "not ");
    test_dots();
    test_tiles();
    test_matmul();
    test_get_rows();
    test_attention();
    return tu_finish("test_cpu_quant");
}
