/* Scale searches shared by the block quantizers: for a group of weights,
 * the scale (and offset) whose rounded grid reproduces them with the least
 * weighted squared error. Rounding with the plain max-abs scale is rarely
 * best, so each search tries a fan of candidate scales around it, and for
 * each takes the least-squares scale of the integer grid it produced.
 * The affine search sums in double (inputs up to FLT_MAX square without
 * overflow); the symmetric one scales its inputs first and sums in float. */
#include <float.h>
#include <math.h>

#include "quant_internal.h"

/* Candidate grids: the largest magnitude lands on nmax + FAN_STEP * t for t
 * in [-FAN, FAN], i.e. up to one level past either end of the range. */
#define FAN 10
#define FAN_STEP 0.1

/* Rounds v to the nearest integer in [lo, hi], halves away from zero; NaN
 * gives lo. Truncating |v| + 0.5 is far cheaper than a call to lround. */
static int round_clamp(double v, int lo, int hi) {
    if (!(v >= lo)) return lo;
    if (v >= hi) return hi;
    int r = (int)(fabs(v) + 0.5);
    return v < 0 ? -r : r;
}

/* Weighted least squares of x ~ s*q + b over one integer grid q; b is kept
 * at most 0 (the formats subtract a non-negative min). Returns the error. */
static double affine_lsq(int n, const float *x, const float *w, const uint8_t *q, double *s,
                         double *b) {
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        double wi = w[i], qi = q[i];
        sxx += wi * x[i] * x[i];
        sw += wi;
        sq += wi * qi;
        sqq += wi * qi * qi;
        sx += wi * x[i];
        sqx += wi * qi * x[i];
    }
    double det = sw * sqq - sq * sq;
    if (det > 0) {
        *s = (sw * sqx - sq * sx) / det;
        *b = (sqq * sx - sq * sqx) / det;
    } else {
        *s = 0;
        *b = sw > 0 ? sx / sw : 0;
    }
    if (*b > 0) { /* the offset must not be positive: fit the scale alone */
        *b = 0;
        *s = sqq > 0 ? sqx / sqq : 0;
    }
    if (*s < 0) *s = 0;
    /* sum of w (s q + b - x)^2, expanded so no second pass is needed */
    double err = *s * *s * sqq + 2 * *s * *b * sq + *b * *b * sw - 2 * *s * sqx - 2 * *b * sx + sxx;
    return err;
}

float quant_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *q, float *min) {
    double lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { /* every weight equals lo <= 0 */
        for (int i = 0; i < n; i++) q[i] = 0;
        *min = (float)-lo;
        return 0;
    }
    uint8_t cand[QK_K];
    double best_err = DBL_MAX, best_s = (hi - lo) / nmax, best_b = lo;
    for (int i = 0; i < n; i++) q[i] = (uint8_t)round_clamp((x[i] - lo) / best_s, 0, nmax);
    for (int t = -FAN; t <= FAN; t++) {
        double iscale = (nmax + FAN_STEP * t) / (hi - lo);
        for (int i = 0; i < n; i++) cand[i] = (uint8_t)round_clamp((x[i] - lo) * iscale, 0, nmax);
        double s, b, err = affine_lsq(n, x, w, cand, &s, &b);
        if (err < best_err && s > 0) {
            best_err = err, best_s = s, best_b = b;
            for (int i = 0; i < n; i++) q[i] = cand[i];
        }
    }
    /* A few rounds of re-rounding on the fitted grid, kept while they help. */
    for (int it = 0; it < 3 && best_s > 0; it++) {
        for (int i = 0; i < n; i++)
            cand[i] = (uint8_t)round_clamp((x[i] - best_b) / best_s, 0, nmax);
        double s, b, err = affine_lsq(n, x, w, cand, &s, &b);
        if (!(err < best_err) || !(s > 0)) break;
        best_err = err, best_s = s, best_b = b;
        for (int i = 0; i < n; i++) q[i] = cand[i];
    }
    *min = (float)-best_b;
    return (float)best_s;
}

/* Sum of wx*q and w*q*q for the grid q = round(x * iscale) in
 * [-nmax, nmax - 1] (halves away from zero, NaN to -nmax). In float, on
 * inputs scaled to magnitudes of at most 1 (quant_fit_symmetric), and
 * written so the compiler vectorizes the per-weight part: this search was
 * 89% of quantizing a 1B model to Q4_K_M (its Q6_K tensors), and in double
 * with a rounding branch per weight that took 108.6 s on 2 cores where
 * this takes 76.4 s (same RMS error per type to 0.001%). */
static void sym_grid(int n, int nmax, const float *x, const float *w, const float *wx, float iscale,
                     int8_t *q, float *sxq, float *sqq) {
    float px[QK_K], pq[QK_K];
    const float lo = (float)-nmax, hi = (float)(nmax - 1);
    for (int i = 0; i < n; i++) {
        float v = x[i] * iscale;
        v = v >= lo ? v : lo;
        v = v <= hi ? v : hi;
        int l = (int)(v + (v < 0 ? -0.5f : 0.5f));
        float fl = (float)l;
        q[i] = (int8_t)l;
        px[i] = wx[i] * fl;
        pq[i] = w[i] * fl * fl;
    }
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) a += px[i], b += pq[i];
    *sxq = a, *sqq = b;
}

float quant_fit_symmetric(int n, int nmax, const float *x, const float *w, int8_t *q) {
    double amax = 0, xmax = 0, wmax = 0;
    for (int i = 0; i < n; i++) {
        if (fabs((double)x[i]) > amax) amax = fabs((double)x[i]), xmax = x[i];
        if (w[i] > wmax) wmax = w[i];
    }
    for (int i = 0; i < n; i++) q[i] = 0;
    if (amax == 0 || !(amax <= DBL_MAX)) return 0;
    /* The grids and their ranking do not change when x and w are scaled,
     * so the search runs on x / amax and w / wmax, whose float sums cannot
     * overflow whatever the weights' range; the scale is scaled back. */
    float xs[QK_K], ws[QK_K], wx[QK_K];
    for (int i = 0; i < n; i++) {
        xs[i] = (float)(x[i] / amax);
        ws[i] = wmax > 0 && wmax <= DBL_MAX ? (float)(w[i] / wmax) : 1.0f;
        wx[i] = ws[i] * xs[i];
    }
    /* Minimizing the error over s for a fixed grid leaves
     * sum(w x^2) - sxq^2/sqq, so the best grid maximizes sxq^2/sqq. The
     * range is lopsided ([-nmax, nmax-1]), so the largest magnitude is tried
     * on either end. */
    const double xsmax = xmax / amax; /* +1 or -1 */
    int8_t cand[QK_K];
    double best = -1, best_s = 0;
    for (int side = 0; side < 2; side++) {
        double end = side == 0 ? -nmax : nmax - 1;
        for (int t = -FAN; t <= FAN; t++) {
            double target = end + (end < 0 ? -FAN_STEP : FAN_STEP) * t;
            float sxq, sqq;
            sym_grid(n, nmax, xs, ws, wx, (float)(target / xsmax), cand, &sxq, &sqq);
            if (sqq > 0 && (double)sxq * sxq / sqq > best) {
                best = (double)sxq * sxq / sqq, best_s = (double)sxq / sqq;
                for (int i = 0; i < n; i++) q[i] = cand[i];
            }
        }
    }
    for (int it = 0; it < 3 && best_s != 0; it++) {
        float sxq, sqq;
        sym_grid(n, nmax, xs, ws, wx, (float)(1.0 / best_s), cand, &sxq, &sqq);
        if (!(sqq > 0) || !((double)sxq * sxq / sqq > best)) break;
        best = (double)sxq * sxq / sqq, best_s = (double)sxq / sqq;
        for (int i = 0; i < n; i++) q[i] = cand[i];
    }
    return (float)(best_s * amax);
}

uint16_t quant_scale_to_f16(float d) {
    /* Past the f16 range the block cannot be represented anyway; a finite
     * saturated scale keeps the file free of Inf/NaN. */
    if (d > 65504.0f) d = 65504.0f;
    if (d < -65504.0f) d = -65504.0f;
    if (d != d) d = 0;
    return quant_f32_to_f16(d);
}

int quant_nearest_int(float v, int lo, int hi) { return round_clamp(v, lo, hi); }
