/* A context's two phases, each placed on its own: prompts processed under
 * one split mode and shares (the prefill phase), answers generated under
 * another (the generation phase), both holding the same context, since
 * the cells and sequences survive the switch; and the switch between
 * them checked against the budgets before any prompt is processed. Pure,
 * like plan.h: the engine makes the context from the result, `cleave
 * info` prints it.
 *
 * Fit (req.fit): a phase without shares of its own gets fitted ones
 * (plan_fit_shares) and the context is the largest in [min_ctx, n_ctx]
 * at which both phases fit with `margin` of each budget free and the
 * switch's peak fits the budgets. Where no context does, the prefill
 * phase alone decides it (the context is made in that phase and stays
 * usable) and the result says why the switch cannot happen. Without fit
 * the context is n_ctx, and a prefill phase that does not fit is an
 * error; the generation phase or the switch not fitting is a warning. */
#ifndef CLEAVE_PLAN_PHASES_H
#define CLEAVE_PLAN_PHASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"

enum { PLAN_PREFILL, PLAN_GENERATE, PLAN_PHASES };

typedef struct plan_phase_request {
    cleave_split_mode mode;
    const double *shares; /* [n_devices], NULL: fitted (fit) or equal */
} plan_phase_request;

typedef struct plan_phases_request {
    /* the model's bytes, devices, budgets, n_ctx (the most wanted), batch,
     * KV types and tiers; its mode and shares are not read */
    plan_request base;
    plan_phase_request phase[PLAN_PHASES];
    bool fit;
    uint32_t min_ctx; /* fit: the smallest context to take (1..n_ctx) */
    double margin;    /* fit: the fraction of each budget kept free */
    /* the switch builds the new placement whole beside the old one, which
     * stays (keep_both_placements): both are held at once */
    bool keep_both;
} plan_phases_request;

typedef struct plan_phases {
    plan phase[PLAN_PHASES]; /* one phase: the same placement twice */
    /* the modes asked for: a generation phase that does not fit holds
     * the prefill phase's placement (where generation then runs) */
    cleave_split_mode mode[PLAN_PHASES];
    bool two;                /* the phases' placements differ */
    uint32_t n_ctx, n_batch;
    /* each device's fullest point in a switch to generation and back
     * (the pieces of both placements while they move, beside what each
     * holds besides them) */
    size_t peak[PLAN_PHASES][CLEAVE_MAX_DEVICES];
    /* the bytes each device sends and receives in those switches with the
     * whole context in use (weights, then K and V of n_ctx cells): what
     * the copies cost over the links between the devices */
    size_t moved_out[PLAN_PHASES][CLEAVE_MAX_DEVICES], moved_in[PLAN_PHASES][CLEAVE_MAX_DEVICES];
    bool generate_fits;      /* the generation phase has a placement */
    bool switch_fits[PLAN_PHASES]; /* [PLAN_GENERATE]: to generation; [PLAN_PREFILL]: back */
    char why[1024];          /* when a switch cannot happen: why, and what would make it */
} plan_phases;

cleave_status plan_phases_make(const plan_phases_request *req, plan_phases *out);
void plan_phases_free(plan_phases *p);
/* The largest context in [1, hi] at which both phases fit (with fit:
 * less the margin, shares fitted where not given) and so does the switch
 * to generation, or 0. */
uint32_t plan_phases_largest_ctx(const plan_phases_request *req, uint32_t hi);

/* Each device's fullest point while a context moves from plan `from` to
 * plan `to` in place (reshard_schedule's order: every piece's new buffers
 * before its old ones go, beside the old placement's scratch; then the
 * old scratch freed and the new one allocated; the all-reduce's buffers
 * once), or, keep_both, with both placements whole;
 * `cells` cells in use. base: the request both plans were made from. */
cleave_status plan_switch_peak(const plan_request *base, const plan *from, const plan *to, uint32_t cells,
                               bool keep_both, size_t peak[CLEAVE_MAX_DEVICES]);
/* The bytes each device sends (out) and receives (in) when a context with
 * `cells` cells in use moves from plan `from` to plan `to`: weights and K
 * and V that change device (reshard_schedule's moves; what stays on a
 * device is not counted). */
cleave_status plan_switch_moved(const plan_request *base, const plan *from, const plan *to, uint32_t cells,
                                size_t out[CLEAVE_MAX_DEVICES], size_t in[CLEAVE_MAX_DEVICES]);
/* The first device whose peak passes its budget (budgets of base), or -1. */
int plan_peak_over(const plan_request *base, const size_t *peak, size_t n_devices);

#endif
