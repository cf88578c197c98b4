/* Both phases of a context placed, fitted and checked together (see
 * phases.h): the largest context both hold, and whether the switch
 * between them fits each device at its fullest point. */
#include "phases.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "reshard.h"

void plan_phases_free(plan_phases *p) {
    if (!p) return;
    plan_free(&p->phase[PLAN_PREFILL]);
    plan_free(&p->phase[PLAN_GENERATE]);
}

/* What the switch planner's order costs from `from` to `to` with `cells`
 * cells in use. */
static cleave_status schedule_cost(const plan_request *base, const plan *from, const plan *to, uint32_t cells,
                                   reshard_cost *cost) {
    size_t cap = 2 * (size_t)base->hp->n_layer + 2, n_steps = 0;
    reshard_step *steps = mem_alloc(cap * sizeof *steps, "switch steps");
    if (!steps) return CLEAVE_ERR_OOM;
    reshard_sizes sz = reshard_sizes_of(base, from->kv_vram_cells, cells);
    cleave_status st = reshard_schedule(from, to, base->hp, &sz, steps, cap, &n_steps, cost);
    free(steps);
    return st;
}

cleave_status plan_switch_peak(const plan_request *base, const plan *from, const plan *to, uint32_t cells,
                               bool keep_both, size_t peak[CLEAVE_MAX_DEVICES]) {
    size_t n = from->n_devices;
    if (!base || !base->hp || n != to->n_devices || n == 0 || n > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "switch peak: two plans of the same devices");
    /* the context keeps one communicator: held once when both are tensor */
    for (size_t d = 0; d < n; d++) {
        size_t shared = from->bytes[d].collective < to->bytes[d].collective ? from->bytes[d].collective
                                                                            : to->bytes[d].collective;
        peak[d] = plan_total_bytes(from, d) + plan_total_bytes(to, d) - shared;
    }
    if (keep_both) return CLEAVE_OK;
    reshard_cost cost;
    cleave_status st = schedule_cost(base, from, to, cells, &cost);
    if (st) return st;
    /* What the schedule does not move (cell tables, staging, the
     * all-reduce's buffers) is held by both placements all along, and
     * what it moves peaks where it says; the activation scratch changes
     * hands once the pieces have moved, the old one freed first. */
    for (size_t d = 0; d < n; d++) {
        int64_t fixed_from = (int64_t)plan_total_bytes(from, d) - (int64_t)cost.before[d];
        int64_t fixed_to = (int64_t)plan_total_bytes(to, d) - (int64_t)cost.after[d];
        int64_t scratch_from = (int64_t)plan_device_scratch(base->hp, from, d);
        int64_t scratch_to = (int64_t)plan_device_scratch(base->hp, to, d);
        int64_t shared = (int64_t)(from->bytes[d].collective < to->bytes[d].collective ? from->bytes[d].collective
                                                                                      : to->bytes[d].collective);
        int64_t moving = (int64_t)cost.peak[d] + fixed_from + fixed_to - scratch_to - shared;
        int64_t swapped = (int64_t)cost.after[d] + fixed_from - scratch_from + fixed_to - shared;
        int64_t p = moving > swapped ? moving : swapped;
        size_t floor_b = plan_total_bytes(from, d) > plan_total_bytes(to, d) ? plan_total_bytes(from, d)
                                                                              : plan_total_bytes(to, d);
        peak[d] = p > (int64_t)floor_b ? (size_t)p : floor_b;
    }
    return CLEAVE_OK;
}

cleave_status plan_switch_moved(const plan_request *base, const plan *from, const plan *to, uint32_t cells,
                                size_t out[CLEAVE_MAX_DEVICES], size_t in[CLEAVE_MAX_DEVICES]) {
    size_t n = from->n_devices;
    if (!base || !base->hp || n != to->n_devices || n == 0 || n > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "switch's copies: two plans of the same devices");
    reshard_cost cost;
    cleave_status st = schedule_cost(base, from, to, cells, &cost);
    if (st) return st;
    memcpy(out, cost.moved_out, n * sizeof *out);
    memcpy(in, cost.moved_in, n * sizeof *in);
    return CLEAVE_OK;
}

int plan_peak_over(const plan_request *base, const size_t *peak, size_t n_devices) {
    for (size_t d = 0; d < n_devices; d++) {
        size_t b = base->budgets ? base->budgets[d] : 0;
        if (b && peak[d] > b) return (int)d;
    }
    return -1;
}

/* ---- one context size ------------------------------------------------------- */

/* What fits at one context size. */
enum { FIT_PREFILL = 1, FIT_GENERATE = 2, FIT_SWITCH = 4, FIT_ALL = 7 };

typedef struct attempt {
    plan p[PLAN_PHASES];
    bool made[PLAN_PHASES];
    size_t peak[PLAN_PHASES][CLEAVE_MAX_DEVICES];
    int fits; /* FIT_* */
    char gen_why[512];
} attempt;

static void attempt_free(attempt *a) {
    for (int k = 0; k < PLAN_PHASES; k++)
        if (a->made[k]) plan_free(&a->p[k]), a->made[k] = false;
}

/* Places phase k at ctx into a->p[k] with shares w (NULL: equal); false
 * (a->gen_why set for the generation phase) when it does not fit. */
static bool place_phase(const plan_phases_request *req, const size_t *budgets, uint32_t ctx, int k,
                        const double *w, attempt *a) {
    plan_request r = req->base;
    r.mode = req->phase[k].mode;
    r.shares = w;
    r.budgets = budgets;
    r.n_ctx = ctx;
    if (r.n_batch > ctx) r.n_batch = ctx;
    if (a->made[k]) plan_free(&a->p[k]), a->made[k] = false;
    if (plan_make(&r, &a->p[k]) == CLEAVE_OK) return a->made[k] = true;
    if (k == PLAN_GENERATE) {
        snprintf(a->gen_why, sizeof a->gen_why, "%s", cleave_last_error());
        char *hint = strstr(a->gen_why, "; try a smaller context"); /* the remedies say it */
        if (hint) *hint = 0;
    }
    return false;
}

/* The switch's peaks both ways, and whether the one to generation fits
 * the full budgets. */
static bool peaks(const plan_phases_request *req, uint32_t ctx, attempt *a) {
    const plan *pre = &a->p[PLAN_PREFILL], *gen = &a->p[PLAN_GENERATE];
    /* a switch moves the cells in use: at most all of them */
    if (plan_switch_peak(&req->base, pre, gen, ctx, req->keep_both, a->peak[PLAN_GENERATE]) ||
        plan_switch_peak(&req->base, gen, pre, ctx, req->keep_both, a->peak[PLAN_PREFILL]))
        return false;
    return plan_peak_over(&req->base, a->peak[PLAN_GENERATE], pre->n_devices) < 0;
}

/* Fitted generation shares whose switch passes some device's budget:
 * that device's share lowered a step at a time (the switch brings it the
 * generation placement's pieces while it still holds the prefill
 * phase's), while the phase still fits. */
#define PEAK_STEPS 12

static void ease_peak(const plan_phases_request *req, const size_t *budgets, uint32_t ctx, double *w, attempt *a) {
    for (int step = 0; step < PEAK_STEPS; step++) {
        double next[CLEAVE_MAX_DEVICES];
        const size_t *b = req->base.budgets;
        bool over = false;
        for (size_t d = 0; d < req->base.n_devices; d++) {
            next[d] = w[d];
            if (b && b[d] && a->peak[PLAN_GENERATE][d] > b[d]) next[d] = w[d] * 0.85, over = true;
        }
        if (!over) return;
        attempt t = *a;
        t.made[PLAN_GENERATE] = false; /* a's plan stays a's until t's is good */
        if (!place_phase(req, budgets, ctx, PLAN_GENERATE, next, &t)) return;
        bool fits = peaks(req, ctx, &t);
        plan_free(&a->p[PLAN_GENERATE]);
        *a = t;
        memcpy(w, next, req->base.n_devices * sizeof *w);
        if (fits) {
            a->fits |= FIT_SWITCH;
            return;
        }
    }
}

/* The phases at ctx: each placed with its shares or fitted ones against
 * `budgets` (the fit's, less the margin), the switch's peak against the
 * full budgets. */
static void try_at(const plan_phases_request *req, const size_t *budgets, uint32_t ctx, attempt *a) {
    memset(a, 0, sizeof *a);
    double w[PLAN_PHASES][CLEAVE_MAX_DEVICES];
    bool fitted[PLAN_PHASES] = {false, false};
    for (int k = 0; k < PLAN_PHASES; k++) {
        const double *shares = req->phase[k].shares;
        if (req->fit && !shares && req->phase[k].mode != CLEAVE_SPLIT_NONE) {
            plan_request r = req->base;
            r.mode = req->phase[k].mode, r.budgets = budgets, r.n_ctx = ctx;
            if (r.n_batch > ctx) r.n_batch = ctx;
            plan_fit_shares(&r, w[k]);
            shares = w[k], fitted[k] = true;
        }
        if (place_phase(req, budgets, ctx, k, shares, a)) a->fits |= k == PLAN_PREFILL ? FIT_PREFILL : FIT_GENERATE;
    }
    if ((a->fits & (FIT_PREFILL | FIT_GENERATE)) != (FIT_PREFILL | FIT_GENERATE)) return;
    if (peaks(req, ctx, a)) a->fits |= FIT_SWITCH;
    else if (fitted[PLAN_GENERATE] && a->p[PLAN_GENERATE].mode == CLEAVE_SPLIT_TENSOR)
        ease_peak(req, budgets, ctx, w[PLAN_GENERATE], a);
}

typedef struct want_fit {
    const plan_phases_request *req;
    const size_t *budgets;
    int want;
} want_fit;

static bool all_fit(uint32_t ctx, void *user) {
    const want_fit *w = user;
    attempt a;
    try_at(w->req, w->budgets, ctx, &a);
    attempt_free(&a);
    return (a.fits & w->want) == w->want;
}

/* The largest context in [lo, hi] where all of `want` fits, or 0. */
static uint32_t largest(const plan_phases_request *req, const size_t *budgets, uint32_t lo, uint32_t hi, int want) {
    want_fit w = {req, budgets, want};
    return plan_bisect_largest(lo, hi, all_fit, &w);
}

uint32_t plan_phases_largest_ctx(const plan_phases_request *req, uint32_t hi) {
    size_t budgets[CLEAVE_MAX_DEVICES];
    if (req->fit) plan_margin_budgets(&req->base, req->margin, budgets);
    return largest(req, req->fit ? budgets : req->base.budgets, 1, hi, FIT_ALL);
}

static bool same_shares(const double *a, const double *b, size_t n) {
    if (!a || !b) return !a && !b;
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* ---- why a switch cannot happen --------------------------------------------- */

static void shares_text(const double *w, size_t n, char *buf, size_t cap) {
    double sum = 0;
    for (size_t d = 0; d < n; d++) sum += w[d];
    size_t at = 0;
    for (size_t d = 0; d < n && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%.1f", d ? "," : "", sum > 0 ? 100.0 * w[d] / sum : 0.0);
}

/* Appends to out->why what would let the switch happen at out's context:
 * other shares for a phase that has given ones, a smaller context, a
 * tiered KV cache. */
static void remedies(const plan_phases_request *req, const size_t *budgets, plan_phases *out, size_t at) {
    size_t cap = sizeof out->why;
    const char *sep = "; it would fit with ";
    uint32_t ctx = out->n_ctx;
    /* a context of less than an eighth of this one helps nobody */
    uint32_t lo = ctx / 8 > 0 ? ctx / 8 : 1;
    static const char *const flag[PLAN_PHASES] = {"-pts", "-ts"};
    for (int k = 0; k < PLAN_PHASES && at < cap; k++) {
        if (!req->phase[k].shares || req->phase[k].mode == CLEAVE_SPLIT_NONE) continue;
        /* that phase's shares fitted, at this context or the largest they hold */
        plan_phases_request q = *req;
        q.fit = true;
        q.phase[k].shares = NULL;
        uint32_t c = largest(&q, budgets, lo, ctx, FIT_ALL);
        if (!c) continue;
        attempt a;
        try_at(&q, budgets, c, &a);
        if (a.fits == FIT_ALL) {
            char s[160], with_ctx[64] = "";
            shares_text(a.p[k].shares, a.p[k].n_devices, s, sizeof s);
            if (c < ctx) snprintf(with_ctx, sizeof with_ctx, " and a context of %u cells (-c %u)", c, c);
            at += (size_t)snprintf(out->why + at, cap - at, "%sthe %s phase's shares %s (%s %s)%s", sep,
                                   k == PLAN_PREFILL ? "prefill" : "generation", s, flag[k], s, with_ctx);
            sep = ", or ";
        }
        attempt_free(&a);
    }
    uint32_t c = ctx > lo ? largest(req, budgets, lo, ctx - 1, FIT_ALL) : 0;
    if (c && at < cap) {
        at += (size_t)snprintf(out->why + at, cap - at, "%sa context of %u cells (-c %u)", sep, c, c);
        sep = ", or ";
    }
    if (!req->base.kv_tiered && at < cap) {
        plan_phases_request q = *req;
        q.base.kv_tiered = q.base.kv_vram_auto = true;
        attempt a;
        try_at(&q, budgets, ctx, &a);
        if (a.fits == FIT_ALL) {
            uint32_t cells = a.p[0].kv_vram_cells < a.p[1].kv_vram_cells ? a.p[0].kv_vram_cells : a.p[1].kv_vram_cells;
            at += (size_t)snprintf(out->why + at, cap - at,
                                   "%s%u of each layer's cells in device memory and the rest in host memory "
                                   "(--kv-vram-cells %u)",
                                   sep, cells, cells);
            sep = ", or ";
        }
        attempt_free(&a);
    }
    if (!strcmp(sep, "; it would fit with ") && at < cap)
        snprintf(out->why + at, cap - at, "; no other shares, smaller context or tiered KV cache makes it fit");
}

/* out->why for a switch to generation that cannot happen at a's context. */
static void explain(const plan_phases_request *req, const size_t *budgets, const attempt *a, plan_phases *out) {
    size_t cap = sizeof out->why, at = 0;
    const char *from = cleave_split_mode_name(req->phase[PLAN_PREFILL].mode),
               *to = cleave_split_mode_name(req->phase[PLAN_GENERATE].mode);
    at += (size_t)snprintf(out->why, cap, "the switch from %s to %s split cannot happen with a context of %u cells: ", from, to,
                           out->n_ctx);
    if (!(a->fits & FIT_GENERATE)) {
        char kept[64] = "";
        if (req->fit) snprintf(kept, sizeof kept, " with %.0f%% of each budget kept free", req->margin * 100.0);
        at += (size_t)snprintf(out->why + at, at < cap ? cap - at : 0, "the generation phase does not fit%s (%s)",
                               kept, a->gen_why);
    } else {
        const size_t *pk = a->peak[PLAN_GENERATE];
        const char *sep = "";
        for (size_t d = 0; d < a->p[0].n_devices && at < cap; d++) {
            size_t b = req->base.budgets ? req->base.budgets[d] : 0;
            if (!b || pk[d] <= b) continue;
            at += (size_t)snprintf(out->why + at, cap - at,
                                   "%sdevice %zu would hold %.1f MiB at the switch's fullest point (the "
                                   "pieces in flight beside both placements) but has %.1f MiB",
                                   sep, d, pk[d] / 1048576.0, b / 1048576.0);
            sep = "; ";
        }
    }
    if (at < cap) remedies(req, budgets, out, at);
}

/* ---- the phases ------------------------------------------------------------- */

static cleave_status take(const plan_phases_request *req, attempt *a, plan_phases *out) {
    out->phase[PLAN_PREFILL] = a->p[PLAN_PREFILL];
    a->made[PLAN_PREFILL] = false;
    out->n_ctx = out->phase[PLAN_PREFILL].n_ctx;
    out->n_batch = out->phase[PLAN_PREFILL].n_batch;
    out->generate_fits = (a->fits & FIT_GENERATE) != 0;
    if (out->generate_fits) {
        out->phase[PLAN_GENERATE] = a->p[PLAN_GENERATE];
        a->made[PLAN_GENERATE] = false;
        memcpy(out->peak, a->peak, sizeof out->peak);
        out->switch_fits[PLAN_GENERATE] = (a->fits & FIT_SWITCH) != 0;
        out->switch_fits[PLAN_PREFILL] =
            plan_peak_over(&req->base, a->peak[PLAN_PREFILL], out->phase[PLAN_PREFILL].n_devices) < 0;
        const plan *pre = &out->phase[PLAN_PREFILL], *gen = &out->phase[PLAN_GENERATE];
        cleave_status st = plan_switch_moved(&req->base, pre, gen, out->n_ctx, out->moved_out[PLAN_GENERATE],
                                             out->moved_in[PLAN_GENERATE]);
        if (!st)
            st = plan_switch_moved(&req->base, gen, pre, out->n_ctx, out->moved_out[PLAN_PREFILL],
                                   out->moved_in[PLAN_PREFILL]);
        return st;
    }
    return plan_copy(&out->phase[PLAN_PREFILL], &out->phase[PLAN_GENERATE]);
}

static cleave_status phases_make(const plan_phases_request *req, plan_phases *out);

cleave_status plan_phases_make(const plan_phases_request *req, plan_phases *out) {
    unsigned long failures = mem_failures();
    cleave_status st = phases_make(req, out);
    if (mem_failures() != failures) { /* some plan could not be made: not "does not fit" */
        if (!st) plan_phases_free(out);
        return err_set(CLEAVE_ERR_OOM, "out of memory while planning the phases");
    }
    return st;
}

static cleave_status phases_make(const plan_phases_request *req, plan_phases *out) {
    memset(out, 0, sizeof *out);
    const plan_request *b = &req->base;
    if (!b->hp || b->n_devices == 0 || b->n_devices > CLEAVE_MAX_DEVICES || !b->layer_bytes)
        return err_set(CLEAVE_ERR_INVALID_ARG, "phases: need a model and 1..%d devices", CLEAVE_MAX_DEVICES);
    if (req->fit && (req->min_ctx == 0 || req->min_ctx > b->n_ctx))
        return err_set(CLEAVE_ERR_INVALID_ARG, "fit: the smallest context (%u) must be 1..%u", req->min_ctx,
                       b->n_ctx);
    if (req->fit && !(req->margin >= 0 && req->margin < 1))
        return err_set(CLEAVE_ERR_INVALID_ARG, "fit: margin %g is not a fraction in [0, 1)", req->margin);
    const plan_phase_request *pre = &req->phase[PLAN_PREFILL], *gen = &req->phase[PLAN_GENERATE];
    out->mode[PLAN_PREFILL] = pre->mode, out->mode[PLAN_GENERATE] = gen->mode;
    out->two = pre->mode != gen->mode || !same_shares(pre->shares, gen->shares, b->n_devices);
    if (!out->two) {
        plan_request r = *b;
        r.mode = pre->mode, r.shares = pre->shares;
        cleave_status st = req->fit ? plan_fit(&r, req->min_ctx, req->margin, &out->phase[PLAN_PREFILL])
                                    : plan_make(&r, &out->phase[PLAN_PREFILL]);
        if (!st) st = plan_copy(&out->phase[PLAN_PREFILL], &out->phase[PLAN_GENERATE]);
        if (st) {
            plan_phases_free(out);
            return st;
        }
        out->n_ctx = out->phase[PLAN_PREFILL].n_ctx, out->n_batch = out->phase[PLAN_PREFILL].n_batch;
        out->generate_fits = out->switch_fits[PLAN_GENERATE] = out->switch_fits[PLAN_PREFILL] = true;
        return CLEAVE_OK;
    }
    size_t budgets[CLEAVE_MAX_DEVICES];
    if (req->fit) plan_margin_budgets(b, req->margin, budgets);
    const size_t *plan_budgets = req->fit ? budgets : b->budgets;
    uint32_t ctx = b->n_ctx;
    if (req->fit) {
        /* searched as plan_phases_largest_ctx searches, so the two agree
         * (fitted shares make "fits" not quite monotonic in the context) */
        ctx = largest(req, plan_budgets, 1, b->n_ctx, FIT_ALL);
        if (ctx < req->min_ctx) ctx = 0;
        /* no context holds both and the switch: the prefill phase alone says */
        if (!ctx) ctx = largest(req, plan_budgets, req->min_ctx, b->n_ctx, FIT_PREFILL);
        if (!ctx) { /* not even that: the prefill phase's own fit explains */
            plan_request r = *b;
            r.mode = pre->mode, r.shares = pre->shares;
            plan p;
            cleave_status st = plan_fit(&r, req->min_ctx, req->margin, &p);
            if (!st) {
                plan_free(&p);
                st = err_set(CLEAVE_ERR_OOM, "the prefill phase (%s split) does not fit",
                             cleave_split_mode_name(pre->mode));
            }
            return st;
        }
    }
    attempt a;
    try_at(req, plan_budgets, ctx, &a);
    if (!(a.fits & FIT_PREFILL)) {
        /* without fit: the request as given; say why in the prefill phase's words */
        attempt_free(&a);
        plan_request r = *b;
        r.mode = pre->mode, r.shares = pre->shares;
        plan p;
        cleave_status st = plan_make(&r, &p);
        if (!st) plan_free(&p);
        return st ? st : err_set(CLEAVE_ERR_OOM, "the prefill phase does not fit");
    }
    cleave_status st = take(req, &a, out);
    attempt_free(&a);
    if (st) {
        plan_phases_free(out);
        return st;
    }
    if (!out->switch_fits[PLAN_GENERATE]) {
        attempt again;
        try_at(req, plan_budgets, out->n_ctx, &again);
        explain(req, plan_budgets, &again, out);
        attempt_free(&again);
    }
    return CLEAVE_OK;
}
