/* Pure placement: which device runs each layer (or which slice of every
 * layer), and bytes per device for weights, KV cache and activation
 * scratch. The rules are in plan.h. */
#include "plan.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "base/error.h"
#include "base/mem.h"

const char *cleave_split_mode_name(cleave_split_mode mode) {
    switch (mode) {
    case CLEAVE_SPLIT_NONE: return "none";
    case CLEAVE_SPLIT_LAYER: return "layer";
    case CLEAVE_SPLIT_TENSOR: return "tensor";
    }
    return "?";
}

const char *const plan_scratch_names[PLAN_SCRATCH_COUNT] = {
    "hidden state", "normed state", "queries", "keys", "values", "attention output", "ffn gate", "ffn up",
    "logits", "partial sums", "token ids", "positions", "sequence ids", "cache cells", "cell windows",
    "live cell count", "router logits", "expert ids", "expert weights", "expert outputs",
};

size_t plan_scratch(const model_hparams *hp, uint32_t n_batch, plan_scratch_role role,
                    size_t bytes[PLAN_SCRATCH_COUNT]) {
    size_t n = n_batch, e = hp->n_embd * sizeof(float), q = (size_t)hp->n_head * hp->head_dim * sizeof(float),
           kv = (size_t)hp->n_head_kv * hp->head_dim * sizeof(float), ff = hp->n_ff * sizeof(float),
           id = sizeof(int32_t);
    size_t k = hp->n_expert ? hp->n_expert_used : 0, slots = k ? k : 1; /* FFN rows per token */
    size_t b[PLAN_SCRATCH_COUNT] = {
        [PLAN_SCRATCH_X] = n * e, [PLAN_SCRATCH_H] = n * e, [PLAN_SCRATCH_Q] = n * q,
        [PLAN_SCRATCH_K] = n * kv, [PLAN_SCRATCH_V] = n * kv, [PLAN_SCRATCH_ATT] = n * q,
        [PLAN_SCRATCH_GATE] = n * slots * ff, [PLAN_SCRATCH_UP] = n * slots * ff,
        [PLAN_SCRATCH_LOGITS] = n * role.vocab_rows * sizeof(float),
        [PLAN_SCRATCH_PART] = role.tensor ? n * e : 0,
        [PLAN_SCRATCH_IDS] = role.embd || role.tensor ? n * id : 0,
        [PLAN_SCRATCH_POS] = n * id, [PLAN_SCRATCH_SEQ] = n * id, [PLAN_SCRATCH_CELLS] = n * id,
        [PLAN_SCRATCH_WIN] = 2 * n * id, [PLAN_SCRATCH_LIVE] = id,
        [PLAN_SCRATCH_ROUTER] = n * hp->n_expert * sizeof(float), [PLAN_SCRATCH_EXPERT_IDS] = n * k * id,
        [PLAN_SCRATCH_EXPERT_W] = n * k * sizeof(float), [PLAN_SCRATCH_EXPERT_OUT] = n * k * e,
    };
    size_t sum = 0;
    for (size_t i = 0; i < PLAN_SCRATCH_COUNT; i++) sum += b[i];
    if (bytes) memcpy(bytes, b, sizeof b);
    return sum;
}

size_t plan_device_scratch(const model_hparams *hp, const plan *p, size_t d) {
    if (d >= p->n_devices || !p->bytes[d].compute) return 0; /* runs nothing */
    bool tensor = p->mode == CLEAVE_SPLIT_TENSOR;
    plan_scratch_role role = {
        .vocab_rows = tensor ? p->vocab_rows[d].hi - p->vocab_rows[d].lo : (int)d == p->head_device ? hp->n_vocab : 0,
        .tensor = tensor, .embd = (int)d == p->embd_device};
    return plan_scratch(hp, p->n_batch, role, NULL);
}

size_t plan_cell_table_bytes(uint32_t n_ctx) { return 2 * (size_t)n_ctx * sizeof(int32_t); }

size_t plan_compute_bytes(const model_hparams *hp, uint32_t n_batch, uint32_t n_ctx) {
    plan_scratch_role all = {.vocab_rows = hp->n_vocab, .embd = true};
    return plan_scratch(hp, n_batch, all, NULL) + plan_cell_table_bytes(n_ctx);
}

size_t plan_collective_bytes(const model_hparams *hp, uint32_t n_batch, size_t n_active) {
    size_t row = (size_t)n_batch * hp->n_embd * sizeof(float);
    /* across devices, the all-reduce's inboxes: a slot per device and call
     * parity, and the fused decode form's slots of two words per float
     * (src/comm/comm_cuda.cu) */
    size_t fused = (size_t)COMM_FUSED_MAX_FLOATS * 2 * sizeof(float);
    return n_active > 1 ? 2 * n_active * (row + fused) : 0;
}

size_t plan_total_bytes(const plan *p, size_t d) {
    return p->bytes[d].weights + p->bytes[d].kv + p->bytes[d].compute;
}

cleave_status plan_copy(const plan *src, plan *dst) {
    *dst = *src;
    dst->layer_device = mem_alloc(src->n_layer * sizeof *dst->layer_device, "plan layers");
    if (!dst->layer_device) return CLEAVE_ERR_OOM;
    memcpy(dst->layer_device, src->layer_device, src->n_layer * sizeof *dst->layer_device);
    return CLEAVE_OK;
}

void plan_free(plan *p) {
    if (!p) return;
    free(p->layer_device);
    p->layer_device = NULL;
}

static cleave_status check_budgets(const plan_request *req, const plan *p) {
    char msg[768];
    size_t at = 0;
    bool over = false;
    for (size_t d = 0; d < p->n_devices; d++) {
        size_t need = plan_total_bytes(p, d), budget = req->budgets ? req->budgets[d] : 0;
        if (budget && need > budget) {
            over = true;
            at += (size_t)snprintf(msg + at, at < sizeof msg ? sizeof msg - at : 0,
                                   "%sdevice %zu needs %.1f MiB (weights %.1f, KV %.1f, "
                                   "compute %.1f) but has %.1f MiB",
                                   at ? "; " : "", d, need / 1048576.0,
                                   p->bytes[d].weights / 1048576.0, p->bytes[d].kv / 1048576.0,
                                   p->bytes[d].compute / 1048576.0, budget / 1048576.0);
            if (at >= sizeof msg) at = sizeof msg - 1;
        }
    }
    if (over)
        return err_set(CLEAVE_ERR_OOM, "the model does not fit: %s; try a smaller context (-c)", msg);
    size_t host = 0;
    for (size_t d = 0; d < p->n_devices; d++) host += p->bytes[d].kv_host;
    if (req->host_budget && host > req->host_budget)
        return err_set(CLEAVE_ERR_OOM,
                       "the KV cache's host part needs %.1f MiB of pinned host memory but %.1f MiB "
                       "are available; try a smaller context (-c) or more cells in device memory "
                       "(--kv-vram-cells)",
                       host / 1048576.0, req->host_budget / 1048576.0);
    return CLEAVE_OK;
}

void plan_apportion(size_t units, const double *w, size_t n, size_t *parts) {
    double total = 0, rem[CLEAVE_MAX_DEVICES];
    for (size_t i = 0; i < n; i++) total += w[i];
    size_t given = 0;
    for (size_t i = 0; i < n; i++) {
        double exact = total > 0 ? (double)units * w[i] / total : 0;
        parts[i] = (size_t)floor(exact);
        if (parts[i] > units) parts[i] = units;
        rem[i] = w[i] > 0 ? exact - (double)parts[i] : -1.0;
        given += parts[i];
    }
    while (given < units) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (rem[i] >= 0 && (best == n || rem[i] > rem[best])) best = i;
        if (best == n) break; /* no weight at all: nothing to give */
        parts[best]++, given++;
        rem[best] = -1.0;
        /* every positive remainder taken once more than units left over can
         * only come from rounding: start another round */
        bool any = false;
        for (size_t i = 0; i < n; i++) any |= rem[i] >= 0;
        if (!any)
            for (size_t i = 0; i < n; i++) rem[i] = w[i] > 0 ? 0.0 : -1.0;
    }
}

/* The shares to use: the request's, checked, or equal ones. */
static cleave_status get_shares(const plan_request *req, double *w) {
    double sum = 0;
    for (size_t d = 0; d < req->n_devices; d++) {
        w[d] = req->shares ? req->shares[d] : 1.0;
        if (!(w[d] >= 0) || isinf(w[d]))
            return err_set(CLEAVE_ERR_INVALID_ARG, "split share %zu is %g: shares must be >= 0", d,
                           w[d]);
        sum += w[d];
    }
    if (!(sum > 0))
        return err_set(CLEAVE_ERR_INVALID_ARG, "split shares are all 0: some device must get work");
    return CLEAVE_OK;
}

static void place_none(const plan_request *req, plan *out) {
    const model_hparams *hp = req->hp;
    int d = req->main_device;
    out->embd_device = out->head_device = d;
    plan_device_bytes *b = &out->bytes[d];
    b->weights = req->embd_bytes + req->head_bytes;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        out->layer_device[l] = d;
        b->weights += req->layer_bytes[l];
    }
    b->kv = model_kv_bytes_per_token(hp, req->kv_type, req->kv_type_v) * req->n_ctx;
    b->compute = plan_compute_bytes(hp, req->n_batch, req->n_ctx);
}

static void place_layer(const plan_request *req, const double *w, plan *out) {
    const model_hparams *hp = req->hp;
    size_t n = req->n_devices, parts[CLEAVE_MAX_DEVICES];
    plan_apportion(hp->n_layer, w, n, parts);
    size_t kv_layer = model_kv_bytes_per_token(hp, req->kv_type, req->kv_type_v) / hp->n_layer * req->n_ctx;
    out->embd_device = out->head_device = -1;
    uint32_t l = 0;
    for (size_t d = 0; d < n; d++) {
        if (!parts[d]) continue;
        if (out->embd_device < 0) out->embd_device = (int)d;
        out->head_device = (int)d;
        plan_device_bytes *b = &out->bytes[d];
        for (size_t k = 0; k < parts[d]; k++, l++) {
            out->layer_device[l] = (int)d;
            b->weights += req->layer_bytes[l];
            b->kv += kv_layer;
        }
    }
    for (size_t d = 0; d < n; d++) {
        if (!parts[d]) continue;
        plan_scratch_role role = {.vocab_rows = (int)d == out->head_device ? hp->n_vocab : 0,
                                  .embd = (int)d == out->embd_device};
        out->bytes[d].compute = plan_scratch(hp, req->n_batch, role, NULL) + plan_cell_table_bytes(req->n_ctx);
    }
    out->bytes[out->embd_device].weights += req->embd_bytes;
    out->bytes[out->head_device].weights += req->head_bytes;
    if (req->tied && out->head_device != out->embd_device)
        out->bytes[out->head_device].weights += req->embd_bytes; /* the engine's second copy */
}

/* Ranges of `total` items in units of `align` items, apportioned. */
static void ranges(uint32_t total, uint32_t align, const double *w, size_t n, plan_range *r) {
    size_t parts[CLEAVE_MAX_DEVICES], units = (total + align - 1) / align, at = 0;
    plan_apportion(units, w, n, parts);
    for (size_t d = 0; d < n; d++) {
        size_t lo = at * align, hi = (at + parts[d]) * align;
        r[d].lo = (uint32_t)(lo < total ? lo : total);
        r[d].hi = (uint32_t)(hi < total ? hi : total);
        at += parts[d];
    }
}

static uint32_t range_len(plan_range r) { return r.hi - r.lo; }

static cleave_status place_tensor(const plan_request *req, const double *w, plan *out) {
    const model_hparams *hp = req->hp;
    size_t n = req->n_devices;
    if (!req->layer_attn_bytes || !req->layer_ffn_bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: tensor split needs attention and FFN bytes per layer");
    uint32_t align = req->ff_align ? req->ff_align : 1;
    ranges(hp->n_head_kv, req->head_align ? req->head_align : 1, w, n, out->kv_heads);
    ranges(hp->n_ff, align, w, n, out->ff_rows);
    ranges(hp->n_vocab, 1, w, n, out->vocab_rows);
    size_t kv_head_token = model_kv_bytes_per_token(hp, req->kv_type, req->kv_type_v) / hp->n_head_kv;
    for (uint32_t l = 0; l < hp->n_layer; l++) out->layer_device[l] = -1;
    out->embd_device = w[req->main_device] > 0 ? req->main_device : -1;
    size_t n_active = 0;
    for (size_t d = 0; d < n; d++) n_active += w[d] > 0;
    for (size_t d = 0; d < n; d++) {
        if (!(w[d] > 0)) continue;
        if (out->embd_device < 0) out->embd_device = (int)d;
        plan_device_bytes *b = &out->bytes[d];
        uint32_t heads = range_len(out->kv_heads[d]), rows = range_len(out->ff_rows[d]);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            size_t attn = req->layer_attn_bytes[l], ffn = req->layer_ffn_bytes[l];
            size_t rest = req->layer_bytes[l] > attn + ffn ? req->layer_bytes[l] - attn - ffn : 0;
            /* multiply first: a slice's bytes exact to one byte (a 70B
             * layer's FFN, 1.4 GB x 28672 rows, is far inside 64 bits) */
            b->weights += attn * heads / hp->n_head_kv + ffn * rows / hp->n_ff + rest;
        }
        /* the embedding and the lm head are both split by vocab rows */
        b->weights += (req->head_bytes + req->embd_bytes) * range_len(out->vocab_rows[d]) / hp->n_vocab;
        b->kv = kv_head_token * heads * req->n_ctx;
        plan_scratch_role role = {.vocab_rows = range_len(out->vocab_rows[d]), .tensor = true};
        b->collective = req->collective_on_device ? plan_collective_bytes(hp, req->n_batch, n_active) : 0;
        b->compute = plan_scratch(hp, req->n_batch, role, NULL) + (heads ? plan_cell_table_bytes(req->n_ctx) : 0) +
                     b->collective;
    }
    out->head_device = out->embd_device; /* where the vocab slices' logits are gathered */
    return CLEAVE_OK;
}

/* Layers whose K/V device d holds under plan p. */
static uint32_t kv_layers(const plan *p, size_t d) {
    if (p->mode == CLEAVE_SPLIT_TENSOR) return range_len(p->kv_heads[d]) ? p->n_layer : 0;
    uint32_t n = 0;
    for (uint32_t l = 0; l < p->n_layer; l++) n += p->layer_device[l] == (int)d;
    return n;
}

/* A tiered KV cache (kv_tiered): per device, the head of every layer's K
 * and V and the staging in device memory, the tail in host memory; with
 * kv_vram_auto the head is the largest that fits every budget. */
static void apply_tiers(const plan_request *req, plan *out) {
    uint32_t n_ctx = req->n_ctx, n = req->kv_vram_cells < n_ctx ? req->kv_vram_cells : n_ctx;
    out->kv_vram_cells = n_ctx;
    if (!req->kv_tiered) return;
    if (req->kv_vram_auto) n = n_ctx;
    for (size_t d = 0; req->kv_vram_auto && d < req->n_devices; d++) {
        plan_device_bytes *b = &out->bytes[d];
        size_t budget = req->budgets ? req->budgets[d] : 0;
        uint32_t layers = kv_layers(out, d);
        if (!budget || !layers || !b->kv) continue;
        /* per cell: K and V of every layer (head) or of one layer, four times (staging) */
        size_t cell = b->kv / n_ctx, stage = PLAN_KV_STAGING_BUFFERS * (cell / (2 * (size_t)layers));
        size_t fixed = b->weights + b->compute, all_tail = stage * n_ctx;
        uint32_t fits = 0;
        if (budget >= fixed + all_tail && cell > stage)
            fits = (uint32_t)((budget - fixed - all_tail) / (cell - stage) < n_ctx
                                  ? (budget - fixed - all_tail) / (cell - stage)
                                  : n_ctx);
        else if (budget >= fixed + cell * (size_t)n_ctx)
            fits = n_ctx;
        if (fits < n) n = fits;
    }
    out->kv_vram_cells = n;
    if (n >= n_ctx) return;
    for (size_t d = 0; d < req->n_devices; d++) {
        plan_device_bytes *b = &out->bytes[d];
        uint32_t layers = kv_layers(out, d);
        if (!layers || !b->kv) continue;
        size_t cell = b->kv / n_ctx, row = cell / (2 * (size_t)layers);
        b->kv_host = cell * (n_ctx - n);
        b->kv = cell * n + PLAN_KV_STAGING_BUFFERS * row * (n_ctx - n);
    }
}

cleave_status plan_make(const plan_request *req, plan *out) {
    memset(out, 0, sizeof *out);
    const model_hparams *hp = req->hp;
    if (!hp || req->n_devices == 0 || req->n_devices > CLEAVE_MAX_DEVICES || !req->layer_bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: need a model and 1..%d devices",
                       CLEAVE_MAX_DEVICES);
    if (req->n_ctx == 0 || req->n_batch == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: context and batch must be > 0");
    if (req->main_device < 0 || (size_t)req->main_device >= req->n_devices)
        return err_set(CLEAVE_ERR_INVALID_ARG, "main device %d out of range (have %zu)",
                       req->main_device, req->n_devices);
    if (req->mode != CLEAVE_SPLIT_NONE && req->mode != CLEAVE_SPLIT_LAYER && req->mode != CLEAVE_SPLIT_TENSOR)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: unknown split mode %d", (int)req->mode);
    if (hp->n_layer == 0 || hp->n_head_kv == 0 || hp->n_ff == 0 || hp->n_vocab == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "plan: the model has no layers, heads or rows");
    double w[CLEAVE_MAX_DEVICES];
    cleave_status st = req->mode == CLEAVE_SPLIT_NONE ? CLEAVE_OK : get_shares(req, w);
    if (st) return st;

    out->mode = req->mode;
    out->n_devices = req->n_devices;
    out->n_layer = hp->n_layer;
    out->n_ctx = req->n_ctx;
    out->n_batch = req->n_batch;
    out->kv_type = req->kv_type;
    out->kv_type_v = req->kv_type_v;
    out->head_align = req->head_align ? req->head_align : 1;
    out->ff_align = req->ff_align ? req->ff_align : 1;
    out->layer_device = mem_calloc(hp->n_layer, sizeof *out->layer_device, "plan layers");
    if (!out->layer_device) return CLEAVE_ERR_OOM;

    if (req->mode == CLEAVE_SPLIT_NONE)
        place_none(req, out);
    else if (req->mode == CLEAVE_SPLIT_LAYER)
        place_layer(req, w, out);
    else
        st = place_tensor(req, w, out);
    if (!st) apply_tiers(req, out);
    if (!st) st = check_budgets(req, out);
    if (!st && req->mode != CLEAVE_SPLIT_NONE) memcpy(out->shares, w, sizeof(double) * req->n_devices);
    if (st) plan_free(out);
    return st;
}
