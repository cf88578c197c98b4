/* The CPU device's mixture-of-experts ops: routing, the experts' matmul
 * (each chosen expert's rows gathered and run as one matmul, so an expert
 * chosen by many tokens of a prompt is read once) and the weighted sum of
 * the experts' outputs. */
#include <math.h>
#include <string.h>

#include "cpu_impl.h"
#include "base/error.h"

/* One token: the k largest logits (ties to the lower index), in order. */
static void top_k(const float *l, size_t n_expert, size_t k, int32_t *ids) {
    for (size_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (size_t e = 0; e < n_expert; e++) {
            bool taken = false;
            for (size_t i = 0; i < j && !taken; i++) taken = ids[i] == (int32_t)e;
            if (!taken && (best < 0 || l[e] > l[best])) best = (int32_t)e;
        }
        ids[j] = best;
    }
}

static cleave_status cpu_moe_route(be_device *dev, const float *logits, size_t n, size_t n_expert,
                                   size_t k, be_gating gating, bool norm, float scale, int32_t *ids,
                                   float *weights) {
    cpu_device *d = cpu_dev(dev);
    if (!logits) return cpu_null(d, "moe_route", "logits");
    if (!ids) return cpu_null(d, "moe_route", "ids");
    if (!weights) return cpu_null(d, "moe_route", "weights");
    if (!n) return cpu_zero(d, "moe_route", "n");
    if (!k || k > n_expert || k > 64)
        return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': moe_route: %zu of %zu experts", d->name,
                       k, n_expert);
    for (size_t t = 0; t < n; t++) {
        const float *l = logits + t * n_expert;
        int32_t *id = ids + t * k;
        float *w = weights + t * k;
        top_k(l, n_expert, k, id);
        float mx = l[id[0]], sum = 0, chosen = 0;
        if (gating == BE_GATING_SOFTMAX) {
            for (size_t e = 0; e < n_expert; e++) sum += expf(l[e] - mx);
            for (size_t j = 0; j < k; j++) chosen += w[j] = expf(l[id[j]] - mx) / sum;
            /* as llama.cpp: the sum clamped to f16's smallest normal */
            float div = norm ? fmaxf(chosen, 6.103515625e-5f) : 1.0f;
            for (size_t j = 0; j < k; j++) w[j] = w[j] / div * scale;
        } else {
            for (size_t j = 0; j < k; j++) sum += w[j] = expf(l[id[j]] - mx);
            for (size_t j = 0; j < k; j++) w[j] = w[j] / sum * scale;
        }
    }
    return CLEAVE_OK;
}

static cleave_status cpu_matmul_id(be_device *dev, const be_mat *w, const float *bias,
                                   const float *x, size_t x_slots, size_t n, size_t k,
                                   const int32_t *ids, float *y) {
    cpu_device *d = cpu_dev(dev);
    cleave_status st = cpu_check_mat(d, "matmul_id", w);
    if (st) return st;
    if (!x) return cpu_null(d, "matmul_id", "x");
    if (!ids) return cpu_null(d, "matmul_id", "ids");
    if (!y) return cpu_null(d, "matmul_id", "y");
    size_t n_expert = w->ne2 ? w->ne2 : 1;
    if (!n || !k || (x_slots != 1 && x_slots != k))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "device '%s': matmul_id: %zu tokens of %zu slots reading %zu rows each",
                       d->name, n, k, x_slots);
    for (size_t i = 0; i < n * k; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= n_expert)
            return err_set(CLEAVE_ERR_INVALID_ARG, "device '%s': matmul_id: expert %d of %zu",
                           d->name, (int)ids[i], n_expert);
    /* room: the gathered inputs, their outputs, and which slot each row is */
    size_t in = n * k * w->ne0, out = n * k * w->ne1;
    size_t *slot = NULL; /* first: the room is aligned for it, the floats after it need 4 bytes only */
    /* room of its own: cpu_op_matmul uses the op scratch */
    if ((st = cpu_grow(d, &d->moe_buf, &d->moe_bytes, n * k * sizeof(size_t) + (in + out) * sizeof(float),
                       "CPU expert scratch", (void **)&slot)))
        return st;
    float *gx = (float *)(slot + n * k), *gy = gx + in;
    for (size_t e = 0; e < n_expert; e++) {
        size_t m = 0;
        for (size_t i = 0; i < n * k; i++)
            if ((size_t)ids[i] == e) {
                size_t row = x_slots == 1 ? i / k : i;
                memcpy(gx + m * w->ne0, x + row * w->ne0, w->ne0 * sizeof(float));
                slot[m++] = i;
            }
        if (!m) continue;
        be_mat one = *w;
        one.data = (const char *)w->data + e * w->nb2;
        one.ne2 = 1;
        if ((st = cpu_op_matmul(dev, &one, gx, m, bias ? bias + e * w->ne1 : NULL, gy))) return st;
        for (size_t r = 0; r < m; r++) memcpy(y + slot[r] * w->ne1, gy + r * w->ne1, w->ne1 * sizeof(float));
    }
    return CLEAVE_OK;
}

static cleave_status cpu_moe_combine(be_device *dev, const float *y, const float *weights, size_t n,
                                     size_t k, size_t width, float *out) {
    cpu_device *d = cpu_dev(dev);
    if (!y) return cpu_null(d, "moe_combine", "y");
    if (!weights) return cpu_null(d, "moe_combine", "weights");
    if (!out) return cpu_null(d, "moe_combine", "out");
    if (!n || !k || !width) return cpu_zero(d, "moe_combine", "a size");
    for (size_t t = 0; t < n; t++) {
        float *o = out + t * width;
        for (size_t c = 0; c < width; c++) o[c] = 0;
        for (size_t j = 0; j < k; j++) {
            const float *r = y + (t * k + j) * width;
            float wj = weights[t * k + j];
            for (size_t c = 0; c < width; c++) o[c] += wj * r[c];
        }
    }
    return CLEAVE_OK;
}

static cleave_status cpu_swiglu_oai(be_device *dev, const float *gate, const float *up, float *out, size_t n,
                                    float alpha, float limit) {
    cpu_device *d = cpu_dev(dev);
    if (!gate || !up || !out) return cpu_null(d, "swiglu_oai", "a buffer");
    if (!n) return cpu_zero(d, "swiglu_oai", "n");
    for (size_t i = 0; i < n; i++) {
        float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
    return CLEAVE_OK;
}

const be_moe_ops cpu_moe_ops = {
    .route = cpu_moe_route,
    .matmul_id = cpu_matmul_id,
    .combine = cpu_moe_combine,
    .swiglu_oai = cpu_swiglu_oai,
};
