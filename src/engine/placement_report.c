/* "Will it fit": both phases' placements per device, the switch's peak and
 * the largest context under each mode, of a live context
 * (cleave_context_placement) or of one not made yet
 * (cleave_placement_preview: the devices opened for their budgets, no
 * weights, KV or scratch allocated). Both read the same plans the context
 * is made from (phase_plan.c), so the numbers are the ones it allocates. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "engine_internal.h"

static void phase_of(const plan *p, cleave_split_mode mode, bool fits, cleave_phase_placement *out) {
    memset(out, 0, sizeof *out);
    out->mode = mode;
    out->fits = fits;
    if (!fits) return; /* p is the prefill phase's */
    out->kv_vram_cells = p->kv_vram_cells;
    for (size_t d = 0; d < p->n_devices; d++) {
        out->shares[d] = p->mode == CLEAVE_SPLIT_NONE ? 0.0 : p->shares[d];
        out->weights[d] = p->bytes[d].weights, out->kv[d] = p->bytes[d].kv;
        out->compute[d] = p->bytes[d].compute, out->kv_host[d] = p->bytes[d].kv_host;
        if (p->mode == CLEAVE_SPLIT_TENSOR) {
            out->kv_heads[d] = p->kv_heads[d].hi - p->kv_heads[d].lo;
            out->ff_rows[d] = p->ff_rows[d].hi - p->ff_rows[d].lo;
        }
    }
    if (p->mode == CLEAVE_SPLIT_TENSOR) out->head_align = p->head_align, out->ff_align = p->ff_align;
}

/* The largest contexts (see cleave.h): each mode alone, fitted as the
 * context would be, and the two phases together. */
static void largest_contexts(const engine_plan_base *b, const cleave_context_params *p, uint32_t hi,
                             cleave_placement_report *out) {
    size_t margin_budgets[CLEAVE_MAX_DEVICES];
    plan_request r = engine_plan_request(b, CLEAVE_SPLIT_NONE, NULL);
    plan_margin_budgets(&r, ENGINE_FIT_MARGIN, margin_budgets);
    for (int m = CLEAVE_SPLIT_NONE; m <= CLEAVE_SPLIT_TENSOR; m++) {
        plan_request q = engine_plan_request(b, (cleave_split_mode)m, NULL);
        if (p->fit) q.budgets = margin_budgets;
        out->largest_ctx[m] = b->req.n_devices > 1 || m == CLEAVE_SPLIT_NONE ? plan_largest_ctx(&q, 1, hi) : 0;
    }
    double pre_w[CLEAVE_MAX_DEVICES], gen_w[CLEAVE_MAX_DEVICES];
    plan_phases_request req = engine_phases_request(b, p, pre_w, gen_w);
    out->largest_ctx_phases = plan_phases_largest_ctx(&req, hi);
}

/* The report of phases ph made from base b for parameters p. */
static void fill(const engine_plan_base *b, const plan_phases *ph, be_device *const *devs,
                 const cleave_context_params *p, uint32_t hi, cleave_placement_report *out) {
    memset(out, 0, sizeof *out);
    out->n_devices = b->req.n_devices;
    for (size_t d = 0; d < out->n_devices; d++) {
        snprintf(out->device[d], sizeof out->device[d], "%s", be_name(devs[d]));
        out->budget[d] = b->budgets[d];
    }
    out->n_ctx = ph->n_ctx, out->n_batch = ph->n_batch;
    out->two_phases = ph->two;
    phase_of(&ph->phase[PLAN_PREFILL], ph->mode[PLAN_PREFILL], true, &out->phase[CLEAVE_PHASE_PREFILL]);
    phase_of(&ph->phase[PLAN_GENERATE], ph->mode[PLAN_GENERATE], ph->generate_fits,
             &out->phase[CLEAVE_PHASE_GENERATE]);
    memcpy(out->switch_peak[CLEAVE_PHASE_GENERATE], ph->peak[PLAN_GENERATE], sizeof ph->peak[0]);
    memcpy(out->switch_peak[CLEAVE_PHASE_PREFILL], ph->peak[PLAN_PREFILL], sizeof ph->peak[0]);
    memcpy(out->switch_bytes_out[CLEAVE_PHASE_GENERATE], ph->moved_out[PLAN_GENERATE], sizeof ph->moved_out[0]);
    memcpy(out->switch_bytes_in[CLEAVE_PHASE_GENERATE], ph->moved_in[PLAN_GENERATE], sizeof ph->moved_in[0]);
    memcpy(out->switch_bytes_out[CLEAVE_PHASE_PREFILL], ph->moved_out[PLAN_PREFILL], sizeof ph->moved_out[0]);
    memcpy(out->switch_bytes_in[CLEAVE_PHASE_PREFILL], ph->moved_in[PLAN_PREFILL], sizeof ph->moved_in[0]);
    out->switch_fits[CLEAVE_PHASE_GENERATE] = ph->switch_fits[PLAN_GENERATE];
    out->switch_fits[CLEAVE_PHASE_PREFILL] = ph->switch_fits[PLAN_PREFILL];
    snprintf(out->why, sizeof out->why, "%s", ph->why);
    largest_contexts(b, p, hi, out);
}

/* How far the largest contexts are searched: the context asked or the
 * model's training context, whichever is larger. */
static uint32_t search_limit(const struct cleave_model *m, uint32_t n_ctx) {
    uint32_t hi = m->hp.n_ctx_train > n_ctx ? m->hp.n_ctx_train : n_ctx;
    return hi > (1u << 24) ? 1u << 24 : hi;
}

cleave_status cleave_context_placement(const cleave_context *c, cleave_placement_report *out) {
    if (!c || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "placement report: a context and a place for it");
    cleave_context_params p;
    engine_saved_params(c, &p);
    unsigned long failures = mem_failures();
    /* the phases as made (their shares are in the plans) */
    fill(&c->base, &c->phases, c->devs, &p, search_limit(c->model, c->params.n_ctx), out);
    if (mem_failures() != failures) /* the largest contexts' search: a plan not made is not one too big */
        return err_set(CLEAVE_ERR_OOM, "out of memory while reporting the placement");
    return CLEAVE_OK;
}

cleave_status cleave_placement_preview(cleave_model *model, const cleave_context_params *params,
                                       cleave_placement_report *out) {
    if (!model || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "placement preview: a model and a place for it");
    memset(out, 0, sizeof *out);
    if (!model->tok_embd)
        return err_set(CLEAVE_ERR_INVALID_ARG, "placement preview: the model was loaded as a vocabulary alone");
    cleave_context_params p = params ? *params : cleave_context_default_params();
    cleave_status st = engine_resolve_params(model, &p);
    if (st) return st;
    be_device *devs[CLEAVE_MAX_DEVICES] = {0};
    size_t n_dev = 0;
    engine_plan_base base = {0};
    plan_phases ph;
    memset(&ph, 0, sizeof ph);
    st = engine_open_devices(&p, devs, &n_dev);
    if (!st) st = engine_plan_base_make(model, &p, devs, n_dev, &base);
    if (!st) st = engine_plan_phases(&base, &p, &ph);
    unsigned long failures = mem_failures();
    if (!st) fill(&base, &ph, devs, &p, search_limit(model, p.n_ctx), out);
    if (!st && mem_failures() != failures)
        st = err_set(CLEAVE_ERR_OOM, "out of memory while reporting the placement");
    plan_phases_free(&ph);
    engine_plan_base_free(&base);
    for (size_t d = 0; d < n_dev; d++) be_destroy(devs[d]);
    return st;
}
