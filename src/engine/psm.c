/* Prefill and generation under different split modes, in the public API:
 * calibration (measuring what policy.c's cost model needs on a context's
 * devices) and the per-request decision. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"
#include "plan/policy.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

#define TG_STEPS 16 /* generation steps timed per depth */

typedef struct {
    cleave_context *c;
    const int32_t *toks;
    double done, total;
    cleave_progress_fn progress;
    void *user;
} calib;

static bool tick(calib *k, double work) {
    k->done += work;
    return !k->progress || k->progress((float)(k->done / k->total), k->user);
}

/* n prompt tokens from an empty cache: tok/s */
static cleave_status time_prefill(calib *k, uint32_t n, double *rate) {
    cleave_kv_clear(k->c);
    double t0 = now_s();
    cleave_status st = cleave_decode(k->c, k->toks, n, 0, 0, false);
    double t = now_s() - t0;
    if (!st) *rate = n / (t > 0 ? t : 1e-9);
    return st;
}

/* TG_STEPS one-token steps after a cache of depth tokens: tok/s */
static cleave_status time_generation(calib *k, uint32_t depth, double *rate) {
    cleave_kv_clear(k->c);
    cleave_status st = cleave_decode(k->c, k->toks, depth, 0, 0, false);
    double t0 = now_s();
    for (int i = 0; !st && i < TG_STEPS; i++)
        st = cleave_decode(k->c, &k->toks[depth + i], 1, (int32_t)(depth + i), 0, false);
    double t = now_s() - t0;
    if (!st) *rate = TG_STEPS / (t > 0 ? t : 1e-9);
    return st;
}

/* a switch to mode with the cache as it is: seconds */
static cleave_status time_switch(calib *k, cleave_split_mode mode, double *s) {
    double t0 = now_s();
    cleave_status st = cleave_context_set_split_mode(k->c, mode, NULL, 0);
    *s = now_s() - t0;
    return st;
}

static bool increasing(const uint32_t *v, size_t n, uint32_t below) {
    for (size_t i = 0; i < n; i++)
        if (v[i] == 0 || v[i] >= below || (i && v[i] <= v[i - 1])) return false;
    return true;
}

cleave_status cleave_psm_calibrate(cleave_context *c, const uint32_t *pp, size_t n_pp,
                                   const uint32_t *depths, size_t n_depths, const char *path,
                                   cleave_progress_fn progress, void *user) {
    if (!c || !pp || !depths || !path)
        return err_set(CLEAVE_ERR_INVALID_ARG, "calibrate: context, lengths and a path required");
    if (c->n_dev < 2)
        return err_set(CLEAVE_ERR_INVALID_ARG, "calibrate: the context has one device; split modes need two or more");
    uint32_t n_ctx = c->params.n_ctx;
    if (n_pp < 1 || n_pp > POLICY_MAX_POINTS || n_depths < 1 || n_depths > POLICY_MAX_POINTS ||
        !increasing(pp, n_pp, n_ctx) || !increasing(depths, n_depths, n_ctx - TG_STEPS))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "calibrate: 1..%d increasing prompt lengths below the context (%u) and depths "
                       "below it by %d",
                       POLICY_MAX_POINTS, n_ctx, TG_STEPS);
    uint32_t n_vocab = c->model->hp.n_vocab;
    int32_t *toks = mem_alloc((size_t)n_ctx * sizeof *toks, "calibration tokens");
    if (!toks) return CLEAVE_ERR_OOM;
    uint32_t s = 12345;
    for (uint32_t i = 0; i < n_ctx; i++) {
        s = s * 1664525u + 1013904223u;
        toks[i] = (int32_t)((s >> 8) % n_vocab);
    }
    calib k = {c, toks, 0, 0, progress, user};
    for (size_t i = 0; i < n_pp; i++) k.total += 2.0 * pp[i];
    for (size_t i = 0; i < n_depths; i++) k.total += 2.0 * (depths[i] + TG_STEPS);
    policy_rates r;
    memset(&r, 0, sizeof r);
    const cleave_split_mode modes[POLICY_MODES] = {CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR};
    double big[POLICY_MODES] = {0}, small[POLICY_MODES] = {0};
    uint32_t deepest = depths[n_depths - 1] + TG_STEPS;
    cleave_status st = cleave_context_set_split_mode(c, CLEAVE_SPLIT_LAYER, NULL, 0);
    for (int m = 0; !st && m < POLICY_MODES; m++) {
        if (m > 0) st = time_switch(&k, modes[m], &big[m - 1]); /* with the deepest cache */
        double rate = 0;
        /* warm-up: the kernels' first use, and a whole batch, so that what
         * starts with the first large all-reduce (NCCL) is not timed */
        uint32_t warm = pp[n_pp - 1] < c->params.n_batch ? pp[n_pp - 1] : c->params.n_batch;
        if (!st) st = time_prefill(&k, warm, &rate);
        for (size_t i = 0; !st && i < n_pp; i++) {
            if (!(st = time_prefill(&k, pp[i], &rate))) {
                r.pp[m].tokens[i] = pp[i], r.pp[m].rate[i] = rate;
                if (!tick(&k, pp[i])) st = err_set(CLEAVE_ERR_INVALID_ARG, "calibration cancelled");
            }
        }
        r.pp[m].n = n_pp;
        for (size_t i = 0; !st && i < n_depths; i++) {
            if (!(st = time_generation(&k, depths[i], &rate))) {
                r.tg[m].tokens[i] = depths[i], r.tg[m].rate[i] = rate;
                if (!tick(&k, depths[i] + TG_STEPS)) st = err_set(CLEAVE_ERR_INVALID_ARG, "calibration cancelled");
            }
        }
        r.tg[m].n = n_depths;
    }
    /* back to layer with the deepest cache, then both ways with one cell */
    if (!st) st = time_switch(&k, CLEAVE_SPLIT_LAYER, &big[POLICY_MODE_TENSOR]);
    cleave_kv_clear(c);
    if (!st) st = cleave_decode(c, toks, 1, 0, 0, false);
    if (!st) st = time_switch(&k, CLEAVE_SPLIT_TENSOR, &small[POLICY_MODE_LAYER]);
    if (!st) st = time_switch(&k, CLEAVE_SPLIT_LAYER, &small[POLICY_MODE_TENSOR]);
    cleave_kv_clear(c);
    for (int m = 0; !st && m < POLICY_MODES; m++) {
        double per = (big[m] - small[m]) / (double)(deepest - 1);
        r.switch_fixed_s[m] = small[m];
        r.switch_per_token_s[m] = per > 0 ? per : 0;
    }
    free(toks);
    if (!st) st = policy_save(&r, path);
    return st;
}

cleave_status cleave_psm_decide(const char *rates_path, uint32_t prompt, uint32_t n_gen,
                                double margin, cleave_psm_decision *out) {
    return cleave_psm_decide_among(rates_path, prompt, n_gen, margin, NULL, out);
}

cleave_status cleave_psm_decide_among(const char *rates_path, uint32_t prompt, uint32_t n_gen, double margin,
                                      const bool allowed[4], cleave_psm_decision *out) {
    if (!out) return err_set(CLEAVE_ERR_INVALID_ARG, "psm decision: nowhere to put it");
    policy_rates r;
    cleave_status st = policy_load(rates_path, &r);
    policy_decision d;
    if (!st) st = policy_decide_among(&r, prompt, n_gen, margin, allowed, &d);
    if (st) return st;
    out->prefill = policy_prefill_mode(d.plan) == POLICY_MODE_TENSOR ? CLEAVE_SPLIT_TENSOR : CLEAVE_SPLIT_LAYER;
    out->generate = policy_generate_mode(d.plan) == POLICY_MODE_TENSOR ? CLEAVE_SPLIT_TENSOR : CLEAVE_SPLIT_LAYER;
    for (int p = 0; p < POLICY_PLANS; p++) out->seconds[p] = d.seconds[p];
    return CLEAVE_OK;
}

cleave_split_mode cleave_psm_gate_step(cleave_psm_gate *g, const bool *in_prefill, size_t n_active,
                                       cleave_split_mode prefill_mode, cleave_split_mode generate_mode) {
    if (!g) return prefill_mode;
    /* the policy's gate over the API's modes (it treats modes as tokens) */
    policy_gate pg = {(int)g->mode, g->since, g->min_dwell};
    int m = policy_gate_step(&pg, in_prefill, n_active, (int)prefill_mode, (int)generate_mode);
    g->mode = (cleave_split_mode)m, g->since = pg.since;
    return g->mode;
}
