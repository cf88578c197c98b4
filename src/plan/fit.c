/* Fit: shares and a context that fit the devices' budgets, for one split
 * mode. Shares go where the room is: what a device has left once the
 * bytes it needs whatever its share are counted, so a device that also
 * holds the embedding, or whose budget is small next to its scratch,
 * gets less. Pure, like plan.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "plan.h"

void plan_margin_budgets(const plan_request *req, double margin, size_t out[CLEAVE_MAX_DEVICES]) {
    for (size_t d = 0; d < req->n_devices && d < CLEAVE_MAX_DEVICES; d++) {
        size_t b = req->budgets ? req->budgets[d] : 0;
        out[d] = b ? (size_t)((double)b * (1.0 - margin)) : 0;
        if (b && !out[d]) out[d] = 1; /* a tiny budget stays a limit */
    }
}

static bool any_unlimited(const plan_request *req) {
    for (size_t d = 0; d < req->n_devices; d++)
        if (!req->budgets || !req->budgets[d]) return true;
    return false;
}

static size_t kv_per_token(const plan_request *req) {
    return model_kv_bytes_per_token(req->hp, req->kv_type, req->kv_type_v);
}

/* Tensor: the bytes every active device holds whatever its share: the
 * blocks' replicated vectors, the scratch of a batch (all but its logits
 * slice), the cell table's copy and the all-reduce's buffers. */
static size_t tensor_fixed(const plan_request *req, size_t n_active) {
    size_t rest = 0;
    for (uint32_t l = 0; l < req->hp->n_layer; l++) {
        size_t split = req->layer_attn_bytes[l] + req->layer_ffn_bytes[l];
        rest += req->layer_bytes[l] > split ? req->layer_bytes[l] - split : 0;
    }
    plan_scratch_role role = {.tensor = true};
    return rest + plan_scratch(req->hp, req->n_batch, role, NULL) + plan_cell_table_bytes(req->n_ctx) +
           (req->collective_on_device ? plan_collective_bytes(req->hp, req->n_batch, n_active) : 0);
}

/* Layer: what device d holds besides its layers, as the first and/or the
 * last device that runs some. */
static size_t layer_fixed(const plan_request *req, bool first, bool last) {
    const model_hparams *hp = req->hp;
    plan_scratch_role role = {.vocab_rows = last ? hp->n_vocab : 0, .embd = first};
    size_t b = plan_scratch(hp, req->n_batch, role, NULL) + plan_cell_table_bytes(req->n_ctx);
    if (first) b += req->embd_bytes;
    if (last) b += req->head_bytes + (req->tied && !first ? req->embd_bytes : 0);
    return b;
}

static double room(size_t budget, size_t fixed) { return budget > fixed ? (double)(budget - fixed) : 0.0; }

/* Shares in proportion to each device's room (layer: in whole layers). */
static void room_shares(const plan_request *req, double *w) {
    size_t n = req->n_devices;
    if (req->mode == CLEAVE_SPLIT_TENSOR) {
        size_t fixed = tensor_fixed(req, n);
        for (size_t d = 0; d < n; d++) w[d] = room(req->budgets[d], fixed);
        return;
    }
    /* layer: each device's room in layers of average size with their KV;
     * which devices are first and last depends on who gets layers, so
     * settle it over two rounds */
    size_t per_layer = kv_per_token(req) / req->hp->n_layer * req->n_ctx, all = 0;
    for (uint32_t l = 0; l < req->hp->n_layer; l++) all += req->layer_bytes[l];
    per_layer += all / req->hp->n_layer;
    if (!per_layer) per_layer = 1;
    size_t first = 0, last = n - 1;
    for (int round = 0; round < 2; round++) {
        for (size_t d = 0; d < n; d++)
            w[d] = floor(room(req->budgets[d], layer_fixed(req, d == first, d == last)) / (double)per_layer);
        size_t f = n, l = n;
        for (size_t d = 0; d < n; d++)
            if (w[d] > 0) {
                if (f == n) f = d;
                l = d;
            }
        if (f == n || (f == first && l == last)) break;
        first = f, last = l;
    }
}

/* Whether req (with these shares) has a plan at req->n_ctx. */
static bool fits_with(const plan_request *req, const double *w) {
    plan_request r = *req;
    r.shares = w;
    plan p;
    if (plan_make(&r, &p) != CLEAVE_OK) return false;
    plan_free(&p);
    return true;
}

bool plan_fit_shares(const plan_request *req, double shares[CLEAVE_MAX_DEVICES]) {
    size_t n = req->n_devices;
    if (!req->hp || n == 0 || n > CLEAVE_MAX_DEVICES || !req->layer_bytes) return false;
    for (size_t d = 0; d < n; d++) shares[d] = 1.0;
    if (req->mode == CLEAVE_SPLIT_NONE || any_unlimited(req)) return fits_with(req, shares);
    if (req->mode == CLEAVE_SPLIT_TENSOR && (!req->layer_attn_bytes || !req->layer_ffn_bytes)) return false;
    double cand[3][CLEAVE_MAX_DEVICES];
    room_shares(req, cand[0]);
    for (size_t d = 0; d < n; d++) cand[1][d] = (double)req->budgets[d], cand[2][d] = 1.0;
    for (int c = 0; c < 3; c++) {
        double sum = 0;
        for (size_t d = 0; d < n; d++) sum += cand[c][d];
        if (!(sum > 0) || !fits_with(req, cand[c])) continue;
        memcpy(shares, cand[c], n * sizeof *shares);
        return true;
    }
    memcpy(shares, cand[1], n * sizeof *shares); /* what fits best when nothing does */
    return false;
}

/* Whether req has a plan at ctx: with its shares, or fitted ones when it
 * has none (then in w). */
static bool fits_at(const plan_request *req, uint32_t ctx, double *w) {
    plan_request r = *req;
    r.n_ctx = ctx;
    if (r.n_batch > ctx) r.n_batch = ctx;
    if (req->shares || req->mode == CLEAVE_SPLIT_NONE) return fits_with(&r, req->shares);
    return plan_fit_shares(&r, w);
}

uint32_t plan_bisect_largest(uint32_t lo, uint32_t hi, bool (*fits)(uint32_t ctx, void *user), void *user) {
    uint32_t best = 0;
    while (lo <= hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (fits(mid, user)) {
            best = mid;
            lo = mid + 1;
        } else {
            if (mid == 0) break;
            hi = mid - 1;
        }
    }
    return best;
}

static bool request_fits(uint32_t ctx, void *user) {
    double w[CLEAVE_MAX_DEVICES];
    return fits_at(user, ctx, w);
}

uint32_t plan_largest_ctx(const plan_request *req, uint32_t lo, uint32_t hi) {
    return plan_bisect_largest(lo, hi, request_fits, (void *)req);
}

static cleave_status fit(const plan_request *req, uint32_t min_ctx, double margin, plan *out);

cleave_status plan_fit(const plan_request *req, uint32_t min_ctx, double margin, plan *out) {
    unsigned long failures = mem_failures();
    cleave_status st = fit(req, min_ctx, margin, out);
    if (mem_failures() != failures) { /* a plan could not be made: not "does not fit" */
        if (!st) plan_free(out);
        return err_set(CLEAVE_ERR_OOM, "out of memory while fitting the plan");
    }
    return st;
}

static cleave_status fit(const plan_request *req, uint32_t min_ctx, double margin, plan *out) {
    memset(out, 0, sizeof *out);
    if (!req->hp || req->n_devices == 0 || req->n_devices > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "fit: need a model and 1..%d devices", CLEAVE_MAX_DEVICES);
    if (!(margin >= 0 && margin < 1))
        return err_set(CLEAVE_ERR_INVALID_ARG, "fit: margin %g is not a fraction in [0, 1)", margin);
    if (min_ctx == 0 || min_ctx > req->n_ctx)
        return err_set(CLEAVE_ERR_INVALID_ARG, "fit: the smallest context (%u) must be 1..%u",
                       min_ctx, req->n_ctx);
    size_t budgets[CLEAVE_MAX_DEVICES];
    plan_margin_budgets(req, margin, budgets);
    plan_request r = *req;
    r.budgets = budgets;
    double w[CLEAVE_MAX_DEVICES];

    uint32_t ctx = plan_largest_ctx(&r, min_ctx, req->n_ctx);
    if (ctx) {
        r.n_ctx = ctx;
        if (r.n_batch > ctx) r.n_batch = ctx; /* as fits_at planned it */
        if (!r.shares && r.mode != CLEAVE_SPLIT_NONE) {
            plan_fit_shares(&r, w);
            r.shares = w;
        }
        return plan_make(&r, out);
    }
    /* Nothing fits: say where it falls short at the smallest context, then
     * what would fit instead. */
    r.n_ctx = min_ctx;
    if (r.n_batch > min_ctx) r.n_batch = min_ctx;
    if (!r.shares && r.mode != CLEAVE_SPLIT_NONE) {
        plan_fit_shares(&r, w);
        r.shares = w;
    }
    cleave_status st = plan_make(&r, out);
    if (st != CLEAVE_ERR_OOM) return st; /* a bad request, not a full device */
    char why[1024], alt[512];
    snprintf(why, sizeof why, "%s", cleave_last_error());
    char *hint = strstr(why, "; try a smaller context");
    if (hint) *hint = 0; /* it already is the smallest allowed */
    size_t at = 0;
    alt[0] = 0;
    plan_request q = r;
    q.shares = req->shares;
    if ((req->kv_type != CLEAVE_TYPE_Q8_0 || req->kv_type_v != CLEAVE_TYPE_Q8_0) && req->hp->head_dim % 32 == 0) {
        plan_request k = q;
        k.kv_type = k.kv_type_v = CLEAVE_TYPE_Q8_0;
        uint32_t c = plan_largest_ctx(&k, min_ctx, req->n_ctx);
        if (c)
            at += (size_t)snprintf(alt + at, sizeof alt - at, "; a q8_0 KV cache (-ctk q8_0 -ctv q8_0) fits %u cells", c);
    }
    for (int m = CLEAVE_SPLIT_LAYER; m <= CLEAVE_SPLIT_TENSOR && req->n_devices > 1 && at < sizeof alt; m++) {
        if (m == (int)req->mode || (m == CLEAVE_SPLIT_TENSOR && !req->layer_attn_bytes)) continue;
        plan_request o = q;
        o.mode = (cleave_split_mode)m;
        o.shares = NULL; /* fitted for that mode */
        uint32_t c = plan_largest_ctx(&o, min_ctx, req->n_ctx);
        if (c)
            at += (size_t)snprintf(alt + at, sizeof alt - at, "; split mode %s fits %u cells",
                                   cleave_split_mode_name(o.mode), c);
    }
    return err_set(CLEAVE_ERR_OOM, "nothing fits with %.0f%% of each budget kept free, even at %u cells (%s)%s",
                   margin * 100.0, min_ctx, why, at ? alt : "; no smaller cache or other split mode fits either");
}
