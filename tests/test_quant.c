/* The quantizers without Python: every type's error on Gaussian data stays
 * under its bound, zero/tiny/huge inputs give finite values (scales never
 * Inf/NaN), whole-tensor conversion gives the same bytes on any thread
 * count and refuses rows that are not whole blocks, and the mixture rules
 * pick llama.cpp's types and fallbacks. tests/quant_reference.py compares
 * the same code with the gguf package. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_mix.h"
#include "testutil.h"

#define N (1 << 16)

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { /* xorshift64 in (0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static const struct {
    cleave_type t;
    double bound; /* percent of the input's RMS; a little above the measured */
} types[] = {
    {CLEAVE_TYPE_Q8_0, 0.60},  {CLEAVE_TYPE_Q6_K, 1.85}, {CLEAVE_TYPE_Q5_K, 3.9},
    {CLEAVE_TYPE_Q5_1, 4.1},   {CLEAVE_TYPE_Q5_0, 4.6},  {CLEAVE_TYPE_Q4_K, 7.7},
    {CLEAVE_TYPE_Q4_1, 8.4},   {CLEAVE_TYPE_Q4_0, 9.2},  {CLEAVE_TYPE_IQ4_NL, 7.9},
    {CLEAVE_TYPE_IQ4_XS, 8.0}, {CLEAVE_TYPE_Q3_K, 15.5}, {CLEAVE_TYPE_Q2_K, 29.0},
    {CLEAVE_TYPE_MXFP4, 12.3},
};

static void test_errors_and_extremes(void) {
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 4), *q3 = malloc(N * 4);
    for (size_t i = 0; i < N; i++) x[i] = gauss();
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        cleave_type t = types[k].t;
        quant_quantize_row(t, x, q, N);
        quant_dequantize_row(t, q, y, N);
        double e = 0, s = 0;
        for (size_t i = 0; i < N; i++) e += (double)(x[i] - y[i]) * (x[i] - y[i]), s += (double)x[i] * x[i];
        double pct = 100 * sqrt(e / s);
        printf("%-7s rms error %.3f%% (bound %.2f%%)\n", cleave_type_name(t), pct, types[k].bound);
        CHECK_MSG(pct <= types[k].bound, "%s: %.3f%%", cleave_type_name(t), pct);

        /* the same bytes from 1 and 3 threads */
        CHECK_OK(quant_convert_rows(t, q3, CLEAVE_TYPE_F32, x, N / 1024, 1024, 3, NULL, NULL));
        CHECK_MSG(!memcmp(q, q3, quant_row_bytes(t, N)), "%s: threads change the bytes", cleave_type_name(t));

        /* zero, -0, subnormal, tiny, huge, FLT_MAX and mixed magnitudes */
        const float fill[] = {0.0f, -0.0f, 1e-40f, 1e-8f, 1e6f, 1e30f, 3.4e38f, -5.0f};
        for (size_t f = 0; f < sizeof fill / sizeof fill[0]; f++) {
            float v[512];
            for (int i = 0; i < 512; i++) v[i] = fill[f] * (i % 3 == 0 ? -1.0f : i % 3 == 1 ? 0.5f : 1.0f);
            if (f == 7) v[17] = 3e4f, v[300] = 1e-42f;
            quant_quantize_row(t, v, q, 512);
            quant_dequantize_row(t, q, y, 512);
            bool finite = true, zero = true;
            for (int i = 0; i < 512; i++) finite &= isfinite(y[i]) != 0, zero &= y[i] == 0;
            CHECK_MSG(finite, "%s: non-finite output for inputs of %g", cleave_type_name(t), fill[f]);
            if (f < 2) CHECK_MSG(zero, "%s: zero input does not give zeros", cleave_type_name(t));
        }
    }
    /* rows that are not whole blocks are refused, with a message */
    CHECK(quant_convert_rows(CLEAVE_TYPE_Q4_K, q, CLEAVE_TYPE_F32, x, 2, 96, 2, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "q4_K") != NULL);
    /* f16 sources are widened first: the same bytes as from f32 of them */
    uint16_t *h = malloc(N * sizeof *h);
    for (size_t i = 0; i < N; i++) h[i] = quant_f32_to_f16(x[i]), y[i] = quant_f16_to_f32(h[i]);
    CHECK_OK(quant_convert_rows(CLEAVE_TYPE_Q4_K, q, CLEAVE_TYPE_F16, h, N / 512, 512, 2, NULL, NULL));
    quant_quantize_row(CLEAVE_TYPE_Q4_K, y, q3, N);
    CHECK(!memcmp(q, q3, quant_row_bytes(CLEAVE_TYPE_Q4_K, N)));
    free(h);
    free(x);
    free(y);
    free(q);
    free(q3);
}

static cleave_type pick(const char *mix, const char *name, uint64_t ne0, cleave_type *from) {
    quant_mix_model mm = {.n_layer = 32, .n_gqa = 4, .n_attn_v = 32, .has_output = true};
    return quant_mix_tensor_type(quant_mix_find(mix), false, &mm, name, ne0, from);
}

static void test_mixtures(void) {
    cleave_type from;
    CHECK(quant_mix_find("q4_k_m")->ftype == 15 && quant_mix_find("Q4_K")->ftype == 15);
    CHECK(quant_mix_find("Q5_K_S")->ftype == 16 && quant_mix_find("IQ4_XS")->ftype == 30);
    CHECK(quant_mix_find("Q4_K_X") == NULL);
    CHECK(pick("Q4_K_M", "output.weight", 4096, &from) == CLEAVE_TYPE_Q6_K);
    CHECK(pick("Q4_K_M", "token_embd.weight", 4096, &from) == CLEAVE_TYPE_Q4_K);
    CHECK(pick("Q4_K_M", "blk.0.attn_v.weight", 4096, &from) == CLEAVE_TYPE_Q6_K);
    CHECK(pick("Q4_K_M", "blk.4.attn_v.weight", 4096, &from) == CLEAVE_TYPE_Q4_K);
    CHECK(pick("Q4_K_M", "blk.6.ffn_down.weight", 14336, &from) == CLEAVE_TYPE_Q6_K); /* (6-4)%3==2 */
    CHECK(pick("Q4_K_M", "blk.31.ffn_down.weight", 14336, &from) == CLEAVE_TYPE_Q6_K);
    CHECK(pick("Q4_K_M", "blk.5.ffn_down.weight", 14336, &from) == CLEAVE_TYPE_Q4_K);
    CHECK(pick("Q4_K_M", "blk.5.attn_q.weight", 4096, &from) == CLEAVE_TYPE_Q4_K);
    CHECK(pick("Q2_K", "blk.5.attn_v.weight", 4096, &from) == CLEAVE_TYPE_Q4_K); /* GQA 4 */
    CHECK(pick("Q3_K_M", "blk.1.attn_v.weight", 4096, &from) == CLEAVE_TYPE_Q5_K);
    CHECK(pick("Q4_0", "output.weight", 4096, &from) == CLEAVE_TYPE_Q6_K);
    CHECK(pick("Q8_0", "output.weight", 4096, &from) == CLEAVE_TYPE_Q8_0);
    /* Mixtral (8 experts): attn_k and attn_v in Q8_0, attn_output in Q5_K;
     * the merged ffn_down_exps takes its layer's ffn_down rule */
    quant_mix_model mx = {.n_layer = 32, .n_gqa = 4, .n_attn_v = 32, .has_output = true, .n_expert = 8};
    const quant_mix *km = quant_mix_find("Q4_K_M");
    CHECK(quant_mix_tensor_type(km, false, &mx, "blk.4.attn_v.weight", 4096, &from) == CLEAVE_TYPE_Q8_0);
    CHECK(quant_mix_tensor_type(km, false, &mx, "blk.4.attn_k.weight", 4096, &from) == CLEAVE_TYPE_Q8_0);
    CHECK(quant_mix_tensor_type(km, false, &mx, "blk.4.attn_output.weight", 4096, &from) == CLEAVE_TYPE_Q5_K);
    CHECK(quant_mix_tensor_type(km, false, &mx, "blk.6.ffn_down_exps.weight", 14336, &from) == CLEAVE_TYPE_Q6_K);
    CHECK(quant_mix_tensor_type(km, false, &mx, "blk.5.ffn_gate_exps.weight", 4096, &from) == CLEAVE_TYPE_Q4_K);
    /* MXFP4_MOE: experts MXFP4, the rest Q8_0 */
    const quant_mix *mxm = quant_mix_find("MXFP4_MOE");
    CHECK(mxm && mxm->ftype == 38);
    if (mxm) {
        CHECK(quant_mix_tensor_type(mxm, false, &mx, "blk.0.ffn_up_exps.weight", 2880, &from) == CLEAVE_TYPE_MXFP4);
        CHECK(quant_mix_tensor_type(mxm, false, &mx, "blk.0.attn_q.weight", 2880, &from) == CLEAVE_TYPE_Q8_0);
        CHECK(quant_mix_tensor_type(mxm, false, &mx, "output.weight", 2880, &from) == CLEAVE_TYPE_Q8_0);
    }
    /* fallbacks for rows that are not whole 256-blocks */
    CHECK(pick("Q4_K_M", "blk.5.attn_q.weight", 96, &from) == CLEAVE_TYPE_Q5_0 && from == CLEAVE_TYPE_Q4_K);
    CHECK(pick("Q5_K_M", "blk.5.attn_q.weight", 96, &from) == CLEAVE_TYPE_Q5_1);
    CHECK(pick("Q4_K_M", "blk.0.attn_v.weight", 96, &from) == CLEAVE_TYPE_Q8_0);
    CHECK(pick("Q3_K_S", "blk.5.attn_q.weight", 96, &from) == CLEAVE_TYPE_IQ4_NL);
    CHECK(pick("Q4_K_M", "output.weight", 96, &from) == CLEAVE_TYPE_Q8_0);
    CHECK(pick("Q4_K_M", "blk.5.attn_q.weight", 8, &from) == CLEAVE_TYPE_F16);
    CHECK(quant_mix_quantizes("blk.0.attn_q.weight", 2) && !quant_mix_quantizes("blk.0.attn_norm.weight", 2) &&
          !quant_mix_quantizes("output_norm.weight", 1) && !quant_mix_quantizes("rope_freqs.weight", 1));
}

int main(void) {
    test_errors_and_extremes();
    test_mixtures();
    return tu_finish("test_quant");
}
