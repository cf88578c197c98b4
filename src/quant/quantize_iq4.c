/* Reference quantizers of IQ4_NL (32 weights, one f16 scale) and IQ4_XS
 * (256 weights: an f16 super-scale and eight 6-bit sub-block scales). Both
 * index the 16 non-uniform levels of kvalues_iq4nl, which are lopsided
 * (-127..113), so a block's scale is searched: candidate scales put the
 * largest magnitude near either end of the table, each candidate's levels
 * give a least-squares scale, and the one with the least squared error
 * wins. */
#include <math.h>
#include <string.h>

#include <pthread.h>

#include "quant_internal.h"

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

#define F16(h) quant_f16_to_f32(h)
#define FAN 6 /* candidates on each side of an end level */

/* Index of the level nearest to v (v in level units). Levels are at least
 * 9 apart, so below[] (how many midpoints between levels lie at or below
 * each integer) leaves at most one midpoint to compare. */
static uint8_t below[256];
static float midpoint[15];

static void level_tables(void) {
    for (int k = 0; k < 15; k++) midpoint[k] = 0.5f * (kvalues_iq4nl[k] + kvalues_iq4nl[k + 1]);
    for (int u = 0; u < 256; u++) {
        int c = 0;
        while (c < 15 && midpoint[c] <= (float)(u - 128)) c++;
        below[u] = (uint8_t)c;
    }
}

static int nearest_level(float v) {
    if (!(v > kvalues_iq4nl[0])) return 0;
    if (v >= kvalues_iq4nl[15]) return 15;
    int fl = (int)(v + 128.0f) - 128; /* floor: v + 128 > 0 */
    int k = below[fl + 128];
    return k < 15 && v > midpoint[k] ? k + 1 : k;
}

/* Levels for x at inverse scale id, and the least-squares scale of those
 * levels (through sxv/svv); returns sxv^2/svv, the error reduction. */
static double levels_for(const float *x, int n, double id, uint8_t *idx, double *scale) {
    double sxv = 0, svv = 0;
    for (int i = 0; i < n; i++) {
        int k = nearest_level((float)(x[i] * id));
        double v = kvalues_iq4nl[k];
        idx[i] = (uint8_t)k;
        sxv += x[i] * v;
        svv += v * v;
    }
    *scale = svv > 0 ? sxv / svv : 0;
    return svv > 0 ? sxv * sxv / svv : 0;
}

/* The best scale for n weights and their level indices. Unweighted: the
 * error measured is the plain squared error. */
static float iq4_fit(const float *x, int n, uint8_t *idx) {
    double amax = 0, xmax = 0;
    for (int i = 0; i < n; i++)
        if (fabs((double)x[i]) > amax) amax = fabs((double)x[i]), xmax = x[i];
    memset(idx, 8, (size_t)n); /* level 1: the nearest to zero */
    if (amax == 0) return 0;
    uint8_t cand[QK_K];
    double best = -1, best_s = 0;
    for (int side = 0; side < 2; side++) {
        double end = side == 0 ? kvalues_iq4nl[0] : kvalues_iq4nl[15];
        for (int t = -FAN; t <= FAN; t++) {
            double s, gain = levels_for(x, n, (end + t) / xmax, cand, &s);
            if (gain > best) {
                best = gain, best_s = s;
                memcpy(idx, cand, (size_t)n);
            }
        }
    }
    for (int it = 0; it < 3 && best_s != 0; it++) { /* re-pick levels on the fitted scale */
        double s, gain = levels_for(x, n, 1.0 / best_s, cand, &s);
        if (!(gain > best)) break;
        best = gain, best_s = s;
        memcpy(idx, cand, (size_t)n);
    }
    return (float)best_s;
}

/* 32 indices into 16 bytes: index j low nibble, j + 16 high. */
static void pack_idx(const uint8_t *idx, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
}

/* Levels of x for a stored scale d (0 gives the zero level). */
static void levels_at(const float *x, int n, float d, uint8_t *idx) {
    for (int i = 0; i < n; i++) idx[i] = d != 0 ? (uint8_t)nearest_level(x[i] / d) : 8;
}

void quant_iq4_nl_row(const float *x, block_iq4_nl *b, size_t nb) {
    pthread_once(&tables_once, level_tables);
    for (size_t i = 0; i < nb; i++, x += QK4_NL) {
        uint8_t idx[QK4_NL];
        b[i].d = quant_scale_to_f16(iq4_fit(x, QK4_NL, idx));
        /* re-pick on the f16 scale: what dequantization multiplies by */
        levels_at(x, QK4_NL, F16(b[i].d), idx);
        pack_idx(idx, b[i].qs);
    }
}

void quant_iq4_xs_row(const float *x, block_iq4_xs *b, size_t nb) {
    pthread_once(&tables_once, level_tables);
    for (size_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t idx[QK_K];
        float s[8], amax = 0, smax = 0;
        for (int j = 0; j < 8; j++) {
            s[j] = iq4_fit(x + 32 * j, 32, idx + 32 * j);
            if (fabsf(s[j]) > amax) amax = fabsf(s[j]), smax = s[j];
        }
        /* sub-block scales in -32..31 against d = smax / -32 */
        b[i].d = quant_scale_to_f16(smax / -32.0f);
        float d = F16(b[i].d);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int j = 0; j < 8; j++) {
            int l = d != 0 ? quant_nearest_int(s[j] / d, -32, 31) : 0;
            int u = l + 32;
            b[i].scales_l[j / 2] |= (uint8_t)((u & 0xF) << (4 * (j % 2)));
            b[i].scales_h |= (uint16_t)((u >> 4) << (2 * j));
            levels_at(x + 32 * j, 32, d * (float)l, idx + 32 * j);
            pack_idx(idx + 32 * j, b[i].qs + 16 * j);
        }
    }
}
