/* When a phase switch pays: a cost model over measured rates, as a pure
 * function (no devices, no clocks), so its decisions can be unit-tested on
 * a grid.
 *
 * A request of P prompt tokens and N generated tokens, prefilled under
 * split mode a and generated under mode b, is predicted to take
 *
 *     T(a, b) = P / pp_a(P) + [a != b] * (fixed_ab + per_token_ab * P)
 *               + N / tg_b(P + N / 2)
 *
 * pp_a(P): mode a's prefill rate for a P-token prompt; tg_b(D): mode b's
 * generation rate at context depth D (taken at the middle of the answer);
 * the switch costs a fixed part (the weights move) plus a part per cached
 * token (the KV cache moves). Each rate is a few measured points, read
 * between them linearly in log(tokens) and held flat beyond the ends.
 *
 * The decision is the fastest of the four plans, except that a plan with a
 * switch must beat the best plan without one by `margin` (a fraction of
 * that plan's time), so that a prediction a little off never makes a
 * request slower than staying in one mode by more than the margin. */
#ifndef CLEAVE_POLICY_H
#define CLEAVE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

#define POLICY_MAX_POINTS 16

/* Rates measured at a few token counts, tokens strictly increasing. */
typedef struct policy_curve {
    size_t n;
    double tokens[POLICY_MAX_POINTS], rate[POLICY_MAX_POINTS]; /* tok/s */
} policy_curve;

/* The two modes a request can run under, as indices of the arrays below. */
enum { POLICY_MODE_LAYER, POLICY_MODE_TENSOR, POLICY_MODES };

typedef struct policy_rates {
    policy_curve pp[POLICY_MODES]; /* prefill rate by prompt length */
    policy_curve tg[POLICY_MODES]; /* generation rate by context depth */
    /* the switch away from mode m (to the other one): seconds */
    double switch_fixed_s[POLICY_MODES], switch_per_token_s[POLICY_MODES];
} policy_rates;

typedef enum policy_plan {
    POLICY_LAYER,             /* layer for both phases */
    POLICY_TENSOR,            /* tensor for both phases */
    POLICY_LAYER_THEN_TENSOR, /* prefill layer, generate tensor */
    POLICY_TENSOR_THEN_LAYER, /* prefill tensor, generate layer */
    POLICY_PLANS
} policy_plan;

typedef struct policy_decision {
    policy_plan plan;
    double seconds[POLICY_PLANS]; /* the predicted time of every plan */
} policy_decision;

/* The curve's rate at `tokens` (>= 0). INVALID_ARG for a malformed curve. */
cleave_status policy_rate_at(const policy_curve *c, double tokens, double *rate);
/* Checks every curve and cost of r (INVALID_ARG naming what is wrong). */
cleave_status policy_check(const policy_rates *r);
/* Predicted seconds of each plan for a request. */
cleave_status policy_predict(const policy_rates *r, uint32_t prompt, uint32_t n_gen,
                             double seconds[POLICY_PLANS]);
/* The plan to run (see the top of this file); margin in [0, 1). */
cleave_status policy_decide(const policy_rates *r, uint32_t prompt, uint32_t n_gen, double margin,
                            policy_decision *out);
/* The same among the plans with allowed[plan] (NULL: all), say those a
 * context can place: a switch that cannot fit is never chosen. With
 * neither single-mode plan allowed, the faster allowed switch. */
cleave_status policy_decide_among(const policy_rates *r, uint32_t prompt, uint32_t n_gen, double margin,
                                  const bool *allowed, policy_decision *out);
/* Rates as a small text file (what `cleave calibrate` measured), one
 * line per point: "pp layer 4096 51458.3", "tg tensor 128 321.1",
 * "switch layer 0.03 2e-7" (fixed seconds, seconds per cached token),
 * after a first line "cleave-psm-rates 1"; '#' starts a comment. Loading
 * checks the result with policy_check. */
cleave_status policy_save(const policy_rates *r, const char *path);
cleave_status policy_load(const char *path, policy_rates *out);
/* Several sequences share a context, and a switch moves them all: the
 * gate switches only when every active sequence is in the same phase and
 * that phase's mode differs from the context's, and not again within
 * min_dwell steps of the last switch (hysteresis: sequences that enter
 * and leave prefill in turn never make it thrash). While phases are
 * mixed the context stays in the mode it is in. */
typedef struct policy_gate {
    int mode;           /* the context's mode now (POLICY_MODE_*, or any modes used alike) */
    uint32_t since;     /* steps since the last switch */
    uint32_t min_dwell; /* steps a mode is kept at least */
} policy_gate;
/* The mode to run this step in (updates g). in_prefill[i]: whether active
 * sequence i is processing its prompt; prefill_mode / generate_mode: the
 * modes the decision chose for the two phases. */
int policy_gate_step(policy_gate *g, const bool *in_prefill, size_t n_active, int prefill_mode,
                     int generate_mode);
/* The mode of each phase under a plan (POLICY_MODE_*). */
int policy_prefill_mode(policy_plan p);
int policy_generate_mode(policy_plan p);
const char *policy_plan_name(policy_plan p);

#endif
