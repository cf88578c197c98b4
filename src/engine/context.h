/* struct cleave_context: what survives a split-mode switch. The model,
 * the devices (opened and closed here), the KV cell table, the logits of
 * the last decode, the parameters the context was made with, and the
 * current placement (placement.h) with an optional spare kept by
 * keep_both_placements. Everything on the devices belongs to a placement. */
#ifndef CLEAVE_ENGINE_CONTEXT_H
#define CLEAVE_ENGINE_CONTEXT_H

#include "placement.h"
#include "plan/phases.h"

/* What the plan module is asked for this context's model and devices
 * (phase_plan.c): the request, its per-block byte arrays (layer, attention,
 * FFN; owned) and the devices' budgets at creation. */
typedef struct engine_plan_base {
    plan_request req; /* its pointers are set by engine_plan_request */
    size_t *layer_bytes;
    size_t budgets[CLEAVE_MAX_DEVICES];
} engine_plan_base;

struct cleave_context {
    struct cleave_model *model;
    size_t n_dev;
    be_device *devs[CLEAVE_MAX_DEVICES];
    kv_cells cells;
    struct comm *comm; /* collectives, made by the first tensor placement that needs them */
    placement *pl;     /* the current placement */
    placement *spare;  /* keep_both_placements: the one the last switch left, or NULL */
    /* logits of the last decode, host side */
    float *logits;
    size_t logits_rows, logits_cap_rows;
    be_device *logits_pinned_by; /* the device that page-locked them, or NULL */
    bool logits_all;
    int32_t last_n;
    /* after a batch: the logits row of each token, or -1 */
    int32_t *row_of;
    size_t row_of_cap;
    bool logits_mapped;
    /* What the context was made with (pointer fields cleared; the arrays
     * they pointed to are copied beside), so a split-mode switch can build
     * the other placement with the same devices, context and budgets;
     * n_ctx and n_batch are the resolved ones. */
    cleave_context_params params;
    char devices_spec[256];
    float shares[CLEAVE_MAX_DEVICES], prefill_shares[CLEAVE_MAX_DEVICES];
    size_t budgets[CLEAVE_MAX_DEVICES];
    bool has_shares, has_budgets, has_prefill_shares;
    cleave_switch_report last_switch; /* what the last switch moved */
    /* the plan's inputs, and both phases' placements as planned at
     * creation (the same one twice without a prefill_split_mode) */
    engine_plan_base base;
    plan_phases phases;
    cleave_phase phase; /* the phase whose placement is current */
    uint64_t kv_staged; /* bytes a tiered cache copied from its host part into staging */
};

/* p checked against the model and resolved: n_ctx (the model's, at most
 * 4096, unless given), n_batch (at most n_ctx), kv_type_v. */
cleave_status engine_resolve_params(const struct cleave_model *model, cleave_context_params *p);
/* p's devices opened into devs, with their budgets; *n_open of them
 * opened, for the caller to destroy, also on failure. */
cleave_status engine_open_devices(const cleave_context_params *p, be_device **devs, size_t *n_open);
/* The parameters c was made with (pointers into c). */
void engine_saved_params(const struct cleave_context *c, cleave_context_params *p);
/* The environment a placement of c is built in (params: c's saved ones,
 * or the caller's). */
placement_env engine_env(struct cleave_context *c, const cleave_context_params *params);
/* Undoes the logits' page-locking (before they are freed). */
void engine_unpin_logits(struct cleave_context *c);
/* Room for rows x n_vocab host logits, page-locked where a device can. */
cleave_status engine_reserve_logits(struct cleave_context *c, size_t rows);
/* Room for one row of logits (engine_keep_logits_row then cannot fail). */
cleave_status engine_reserve_logits_row(struct cleave_context *c);
/* The logits of the last decode become this one row (a restored state's). */
cleave_status engine_keep_logits_row(struct cleave_context *c, const float *row);

#endif
