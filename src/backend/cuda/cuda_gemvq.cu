/* Which matrices the decode GEMV of the block types (cuda_gemvq.cuh)
 * takes, and its launch through the type's file: the rows of a launch's
 * matrices must share type and width, start 16-byte aligned, and keep the
 * alignment the type's block reads need; x must be 16-byte aligned. */
#include "base/options.h"
#include "cuda_gemvq.cuh"

size_t cuda_gemvq_max_n(void) {
    static size_t max_n; /* read once; every thread computes the same value */
    if (!max_n) max_n = cuda_option_n(options_get()->gemvq_max_n, CUDA_GEMVQ_MAX_N, OPTIONS_GEMVQ_MAX_N);
    return max_n;
}

static const gq_ops *gq_ops_of(cleave_type t) {
    switch (t) {
    case CLEAVE_TYPE_Q4_0: return &gq_ops_q4_0;
    case CLEAVE_TYPE_Q4_1: return &gq_ops_q4_1;
    case CLEAVE_TYPE_Q5_0: return &gq_ops_q5_0;
    case CLEAVE_TYPE_Q5_1: return &gq_ops_q5_1;
    case CLEAVE_TYPE_IQ4_NL: return &gq_ops_iq4_nl;
    case CLEAVE_TYPE_Q2_K: return &gq_ops_q2_k;
    case CLEAVE_TYPE_Q3_K: return &gq_ops_q3_k;
    case CLEAVE_TYPE_Q4_K: return &gq_ops_q4_k;
    case CLEAVE_TYPE_Q5_K: return &gq_ops_q5_k;
    case CLEAVE_TYPE_Q6_K: return &gq_ops_q6_k;
    case CLEAVE_TYPE_IQ4_XS: return &gq_ops_iq4_xs;
    case CLEAVE_TYPE_MXFP4: return &gq_ops_mxfp4;
    default: return NULL;
    }
}

/* a matrix's rows as the kernel reads them */
static bool gq_takes(const gq_ops *ops, const be_mat *w, size_t ne0) {
    return !w->scales && w->ne0 == ne0 && (uintptr_t)w->data % 16 == 0 &&
           w->nb1 % (size_t)ops->align == 0 && w->nb1 >= quant_row_bytes(w->type, ne0);
}

static bool gq_fill(gq_job *j, const gq_ops **ops, const be_mat *const *w, const float *const *bias,
                    float *const *y, int count, const float *x, size_t n, bool dual) {
    if (count < 1 || count > GEMV_MAX_SEG || n == 0 || n > cuda_gemvq_max_n() || (uintptr_t)x % 16)
        return false;
    *ops = gq_ops_of(w[0]->type);
    size_t qk = cuda_qk(w[0]->type), ne0 = w[0]->ne0;
    if (!*ops || !ne0 || ne0 % qk || (*ops)->fit_n(ne0, dual) < 1) return false;
    *j = gq_job{};
    j->n_seg = count;
    j->ne0 = ne0;
    j->x = x;
    size_t rows = 0;
    for (int s = 0; s < count; s++) {
        if (w[s]->type != w[0]->type || !gq_takes(*ops, w[s], ne0)) return false;
        j->w[s] = (const uint8_t *)w[s]->data;
        j->nb1[s] = w[s]->nb1;
        j->rows[s] = w[s]->ne1;
        j->bias[s] = bias ? bias[s] : NULL;
        j->y[s] = y[s];
        rows += w[s]->ne1;
    }
    return rows > 0;
}

/* The launches for count matrices on x: one per weight type among them
 * (segments of one type share a launch; Q4_K_M files keep some layers' v
 * in Q6_K beside Q4_K q and k, which took three launches where two do).
 * False where the GEMV does not take one of them. */
struct gq_plan {
    int n;
    gq_job job[GEMV_MAX_SEG];
    const gq_ops *ops[GEMV_MAX_SEG];
};
static bool gq_make_plan(gq_plan *p, const be_mat *const *w, const float *const *bias,
                         float *const *y, int count, const float *x, size_t n) {
    if (count < 1 || count > GEMV_MAX_SEG) return false;
    bool used[GEMV_MAX_SEG] = {};
    p->n = 0;
    for (int i = 0; i < count; i++) {
        if (used[i]) continue;
        const be_mat *gw[GEMV_MAX_SEG];
        const float *gb[GEMV_MAX_SEG];
        float *gy[GEMV_MAX_SEG];
        int m = 0;
        for (int k = i; k < count; k++) {
            if (used[k] || w[k]->type != w[i]->type) continue;
            used[k] = true;
            gw[m] = w[k], gb[m] = bias ? bias[k] : NULL, gy[m] = y[k];
            m++;
        }
        if (!gq_fill(&p->job[p->n], &p->ops[p->n], gw, gb, gy, m, x, n, false)) return false;
        p->n++;
    }
    return true;
}

bool cuda_gemvq(cuda_device *d, const be_mat *const *w, const float *const *bias, float *const *y,
                int count, const float *x, size_t n, cleave_status *st) {
    gq_plan p;
    if (!gq_make_plan(&p, w, bias, y, count, x, n)) return false;
    *st = CLEAVE_OK;
    for (int k = 0; k < p.n; k++) {
        cudaError_t e = p.ops[k]->launch(d, p.job[k], n, false);
        if (e != cudaSuccess) {
            *st = cuda_fail(e, "k_gemvq", __FILE__, __LINE__);
            break;
        }
    }
    return true;
}

bool cuda_gemvq_swiglu(cuda_device *d, const be_mat *g, const be_mat *u, const float *x, size_t n,
                       float *y, cleave_status *st) {
    gq_job j;
    const gq_ops *ops;
    if (!gq_fill(&j, &ops, &g, NULL, &y, 1, x, n, true) || u->type != g->type || u->ne1 != g->ne1 ||
        u->nb1 != g->nb1 || !gq_takes(ops, u, g->ne0))
        return false;
    j.w_up = (const uint8_t *)u->data;
    cudaError_t e = ops->launch(d, j, n, true);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_gemvq (gate/up)", __FILE__, __LINE__);
    return true;
}


bool cuda_gemvq_id(cuda_device *d, const be_mat *w, const be_mat *wu, const float *bias, const float *bias_u,
                   const float *x, size_t x_slots, size_t n, size_t k, const int32_t *ids, bool group, bool oai,
                   float alpha, float limit, float *y, cleave_status *st) {
    const gq_ops *ops = gq_ops_of(w->type);
    if (group && w->ne2 > GQ_GROUP_MAX_EXPERTS) return false;
    const size_t ne0 = w->ne0, pairs = n * k, n_x = x_slots == 1 ? n : pairs;
    const bool dual = wu != NULL;
    if (!ops || !ne0 || ne0 % cuda_qk(w->type) || (uintptr_t)x % 16 || !gq_takes(ops, w, ne0) ||
        w->nb2 % 16 || pairs > GQ_ID_MAX_PAIRS || pairs * w->ne1 > UINT32_MAX || !ops->fits_x(0, ne0, dual, group))
        return false;
    if (dual && (wu->type != w->type || wu->ne1 != w->ne1 || wu->nb1 != w->nb1 || wu->nb2 != w->nb2 ||
                 !gq_takes(ops, wu, ne0)))
        return false;
    gq_job j = gq_job{};
    j.n_seg = 1;
    j.ne0 = ne0;
    j.x = x;
    j.w[0] = (const uint8_t *)w->data;
    j.nb1[0] = w->nb1;
    j.rows[0] = w->ne1;
    j.bias[0] = bias;
    j.y[0] = y;
    j.w_up = dual ? (const uint8_t *)wu->data : NULL;
    j.ids = ids;
    j.nb2 = w->nb2;
    j.n_expert = w->ne2;
    j.id_k = (int)k;
    j.n_pairs = (int)pairs;
    j.group = group;
    j.x_per_pair = x_slots != 1;
    j.n_x = (int)n_x;
    j.bias_u = bias_u;
    j.act = oai ? GQ_ACT_OAI : GQ_ACT_SWIGLU;
    j.alpha = alpha;
    j.limit = limit;
    size_t gx = ops->gx_bytes(j, dual); /* x too large for shared memory: quantized once into scratch */
    if (gx && (*st = cuda_scratch(d, CUDA_SCRATCH_MOE, gx, &j.gx))) return true;
    cudaError_t e = ops->launch_id(d, j, dual);
    *st = e == cudaSuccess ? CLEAVE_OK : cuda_fail(e, "k_gemvq (experts)", __FILE__, __LINE__);
    return true;
}
