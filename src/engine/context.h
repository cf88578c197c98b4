/* struct cleave_context: what survives a split-mode switch. The model,
 * the devices (opened and closed here), the KV cell table, the logits of
 * the last decode, the parameters the context was made with, and the
 * current placement (placement.h) with an optional spare kept by
 * keep_both_placements. Everything on the devices belongs to a placement. */
#ifndef CLEAVE_ENGINE_CONTEXT_H
#define CLEAVE_ENGINE_CONTEXT_H

#include "placement.h"

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
    float shares[CLEAVE_MAX_DEVICES];
    size_t budgets[CLEAVE_MAX_DEVICES];
    bool has_shares, has_budgets;
    cleave_switch_report last_switch; /* what the last switch moved */
    uint64_t kv_staged; /* bytes a tiered cache copied from its host part into staging */
};

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
