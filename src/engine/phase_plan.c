/* What the plan module is asked, from a model and context parameters:
 * the bytes of each block as stored (and the parts a tensor split
 * divides), the quant blocks shares round to, the devices' budgets; and
 * the two phases' placements from them (plan/phases.h). Made once per
 * context and kept, so every switch plans from the same numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/options.h"
#include "engine_internal.h"
#include "quant/quant.h"

static size_t tensor_bytes(const gguf_tensor *t) { return t ? t->nbytes : 0; }

/* What a tiered cache's host part may pin: 90% of the memory the kernel
 * reports available (options: host_budget_mib overrides), or 0 (unknown:
 * unlimited). */
static size_t host_pinnable_bytes(void) {
    if (options_get()->host_budget_mib) return options_get()->host_budget_mib << 20;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)(kib / 10 * 9) << 10;
}

cleave_status engine_plan_base_make(const struct cleave_model *m, const cleave_context_params *p,
                                    be_device *const *devs, size_t n_dev, engine_plan_base *out) {
    memset(out, 0, sizeof *out);
    uint32_t nl = m->hp.n_layer;
    out->layer_bytes = mem_calloc(3 * (size_t)nl, sizeof *out->layer_bytes, "plan input");
    if (!out->layer_bytes) return CLEAVE_ERR_OOM;
    size_t *attn_bytes = out->layer_bytes + nl, *ffn_bytes = attn_bytes + nl;
    size_t ff_align = 1, head_align = 1;
    /* o is split by columns, a kv head's query heads at a time */
    size_t head_cols = (size_t)m->hp.n_head / m->hp.n_head_kv * m->hp.head_dim;
    for (uint32_t l = 0; l < nl; l++) {
        const model_layer *L = &m->layers[l];
        const gguf_tensor *ts[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk,
                                   L->bv, L->q_norm, L->k_norm, L->ffn_norm, L->w_gate, L->w_up,
                                   L->w_down, L->router, L->bo, L->sinks, L->router_b, L->b_gate,
                                   L->b_up, L->b_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) out->layer_bytes[l] += tensor_bytes(ts[j]);
        /* what a tensor split divides by kv head, and by FFN row */
        const gguf_tensor *at[] = {L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv};
        for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) attn_bytes[l] += tensor_bytes(at[j]);
        ffn_bytes[l] = tensor_bytes(L->w_gate) + tensor_bytes(L->w_up) + tensor_bytes(L->w_down);
        size_t be = 1;
        /* down is split by columns: whole quant blocks per device */
        if (quant_type_info(L->w_down->type, NULL, &be, NULL) && be > ff_align) ff_align = be;
        /* and whole quant blocks of o: the fewest kv heads whose columns
         * fill blocks (2 heads of 128 columns for a 256-weight block) */
        if (quant_type_info(L->wo->type, NULL, &be, NULL)) {
            size_t g = be, c = head_cols;
            while (c) { size_t t = g % c; g = c; c = t; } /* gcd(be, head_cols) */
            if (be / g > head_align) head_align = be / g;
        }
    }
    bool all_cuda = true;
    for (size_t d = 0; d < n_dev; d++) {
        be_mem_stats ms = {0};
        be_get_mem_stats(devs[d], &ms);
        out->budgets[d] = ms.budget;
        all_cuda &= be_is_cuda(devs[d]);
    }
    out->req = (plan_request){
        .hp = &m->hp, .n_devices = n_dev, .main_device = p->main_device, .n_ctx = p->n_ctx,
        .n_batch = p->n_batch, .kv_type = p->kv_type, .kv_type_v = p->kv_type_v,
        .embd_bytes = tensor_bytes(m->tok_embd),
        .head_bytes = tensor_bytes(m->output_norm) + (m->output != m->tok_embd ? tensor_bytes(m->output) : 0),
        .output_norm_bytes = tensor_bytes(m->output_norm), .layer_attn_bytes = attn_bytes,
        .layer_ffn_bytes = ffn_bytes, .ff_align = (uint32_t)ff_align, .head_align = (uint32_t)head_align,
        .tied = m->output == m->tok_embd, .kv_tiered = p->kv_vram_cells != CLEAVE_KV_VRAM_ALL,
        .kv_vram_auto = p->kv_vram_cells == CLEAVE_KV_VRAM_AUTO,
        .kv_vram_cells = p->kv_vram_cells < 0 ? 0 : p->kv_vram_cells > UINT32_MAX ? UINT32_MAX : (uint32_t)p->kv_vram_cells,
        .host_budget = p->kv_vram_cells != CLEAVE_KV_VRAM_ALL ? host_pinnable_bytes() : 0,
        /* the CUDA communicator's buffers are device memory; the host one's not */
        .collective_on_device = all_cuda && n_dev > 1,
    };
    out->req.layer_bytes = out->layer_bytes;
    return CLEAVE_OK;
}

void engine_plan_base_free(engine_plan_base *b) {
    if (!b) return;
    free(b->layer_bytes);
    b->layer_bytes = NULL;
}

plan_request engine_plan_request(const engine_plan_base *b, cleave_split_mode mode, const double *shares) {
    plan_request r = b->req;
    r.layer_bytes = b->layer_bytes;
    r.layer_attn_bytes = b->layer_bytes + b->req.hp->n_layer;
    r.layer_ffn_bytes = r.layer_attn_bytes + b->req.hp->n_layer;
    r.budgets = b->budgets;
    r.mode = mode;
    r.shares = shares;
    return r;
}

/* float shares as the plan takes them */
static const double *shares_of(const float *f, size_t n, double *w) {
    if (!f) return NULL;
    for (size_t d = 0; d < n; d++) w[d] = f[d];
    return w;
}

plan_phases_request engine_phases_request(const engine_plan_base *b, const cleave_context_params *p,
                                          double pre_w[CLEAVE_MAX_DEVICES], double gen_w[CLEAVE_MAX_DEVICES]) {
    size_t n = b->req.n_devices;
    bool phased = p->prefill_split_mode != CLEAVE_SPLIT_AS_GENERATE;
    plan_phases_request req = {
        .base = engine_plan_request(b, p->split_mode, NULL),
        .phase = {{phased ? p->prefill_split_mode : p->split_mode,
                   shares_of(phased ? p->prefill_shares : p->shares, n, pre_w)},
                  {p->split_mode, shares_of(p->shares, n, gen_w)}},
        .fit = p->fit, .margin = ENGINE_FIT_MARGIN, .keep_both = p->keep_both_placements,
    };
    req.min_ctx = p->fit_min_ctx ? p->fit_min_ctx : 512;
    if (req.min_ctx > p->n_ctx) req.min_ctx = p->n_ctx;
    return req;
}

cleave_status engine_plan_phases(const engine_plan_base *b, const cleave_context_params *p, plan_phases *out) {
    double pre_w[CLEAVE_MAX_DEVICES], gen_w[CLEAVE_MAX_DEVICES];
    plan_phases_request req = engine_phases_request(b, p, pre_w, gen_w);
    return plan_phases_make(&req, out);
}

bool engine_plans_equal(const plan *a, const plan *b) {
    if (a->mode != b->mode || a->n_devices != b->n_devices || a->n_layer != b->n_layer || a->n_ctx != b->n_ctx ||
        a->embd_device != b->embd_device || a->head_device != b->head_device ||
        a->kv_vram_cells != b->kv_vram_cells)
        return false;
    if (memcmp(a->layer_device, b->layer_device, a->n_layer * sizeof *a->layer_device)) return false;
    for (size_t d = 0; d < a->n_devices; d++)
        if (memcmp(&a->kv_heads[d], &b->kv_heads[d], sizeof a->kv_heads[d]) ||
            memcmp(&a->ff_rows[d], &b->ff_rows[d], sizeof a->ff_rows[d]) ||
            memcmp(&a->vocab_rows[d], &b->vocab_rows[d], sizeof a->vocab_rows[d]))
            return false;
    return true;
}
