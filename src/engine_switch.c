/* cleave_context_set_split_mode: a live context moves to another split
 * mode on the same devices, keeping its sequences, positions and logits.
 *
 * This first form builds the new placement whole beside the old one (each
 * weight slice and the KV cache copied from the devices that hold them
 * now, device to device, the KV re-split by kv head; nothing is read from
 * the model file), carries the cell table over, then hands the new
 * placement to the context and frees the old. Both placements are
 * resident for a moment, so the switch needs room for both; any failure
 * frees what the new one took and leaves the context as it was, usable in
 * its old mode. (reshard.h plans the in-place form, piece by piece within
 * max(old, new) plus one piece; that replaces this once the engine frees
 * weights piece by piece.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "error.h"
#include "mem.h"
#include "quant.h"
#include "reshard.h"

/* The used cells of every layer's K and V, from the old placement's
 * devices to the new one's, by kv head; then the cell table. */
static cleave_status copy_kv(const struct cleave_context *from, struct cleave_context *to) {
    const model_hparams *hp = &from->model->hp;
    const kv_cache *a = &from->kv;
    kv_cache *b = &to->kv;
    size_t hb = quant_row_bytes(a->type, hp->head_dim); /* one head of a cell row */
    uint32_t cells = a->hi;
    cleave_status st = CLEAVE_OK;
    for (uint32_t l = 0; l < hp->n_layer && !st; l++)
        for (size_t dd = 0; dd < to->n_dev && !st; dd++) {
            if (!b->k[dd] || !b->k[dd][l]) continue;
            plan_range want = reshard_units(&to->plan, hp, dd, RESHARD_HEADS, l);
            for (size_t sd = 0; sd < from->n_dev && !st; sd++) {
                if (!a->k[sd] || !a->k[sd][l]) continue;
                plan_range have = reshard_units(&from->plan, hp, sd, RESHARD_HEADS, l);
                uint32_t lo = have.lo > want.lo ? have.lo : want.lo;
                uint32_t hi = have.hi < want.hi ? have.hi : want.hi;
                if (lo >= hi) continue;
                size_t so = (lo - have.lo) * hb, doff = (lo - want.lo) * hb, w = (hi - lo) * hb;
                be_device *dv = to->devs[dd].dev, *sv = from->devs[sd].dev;
                st = engine_copy_block(dv, (char *)b->k[dd][l] + doff, b->row_bytes[dd], sv,
                                (const char *)a->k[sd][l] + so, a->row_bytes[sd], w, cells);
                if (!st)
                    st = engine_copy_block(dv, (char *)b->v[dd][l] + doff, b->row_bytes[dd], sv,
                                    (const char *)a->v[sd][l] + so, a->row_bytes[sd], w, cells);
                engine_count_move(to, (int)sd, (int)dd, 2 * w * cells);
                to->last_switch.kv_bytes += 2 * w * cells;
            }
        }
    if (st) return st;
    memcpy(b->pos, a->pos, (size_t)a->n_ctx * sizeof *a->pos);
    memcpy(b->seq, a->seq, (size_t)a->n_ctx * sizeof *a->seq);
    b->n_used = a->n_used, b->hi = a->hi;
    b->dirty_lo = 0, b->dirty_hi = b->n_ctx;
    return kv_sync_cells(b);
}

/* Moves the placement of `next` into c (whose handle the caller holds)
 * and the old one into `next`, to be freed; what belongs to the handle
 * rather than to a placement (the logits, the progress callback) stays. */
static void hand_over(struct cleave_context *c, struct cleave_context *next) {
    struct cleave_context old = *c;
    *c = *next;
    c->spare = old.spare, old.spare = NULL; /* the handle's, not a placement's */
    c->logits = old.logits, c->logits_rows = old.logits_rows;
    c->logits_cap_rows = old.logits_cap_rows, c->logits_all = old.logits_all;
    c->last_n = old.last_n, c->row_of = old.row_of, c->row_of_cap = old.row_of_cap;
    c->logits_mapped = old.logits_mapped;
    c->progress = old.progress, c->progress_user = old.progress_user;
    c->borrowed_devices = old.borrowed_devices; /* the handle keeps owning its devices */
    *next = old;
    next->logits = NULL, next->row_of = NULL;
    next->borrowed_devices = true;
}

static cleave_split_mode api_mode(enum split_mode m) {
    return m == SPLIT_TENSOR ? CLEAVE_SPLIT_TENSOR : m == SPLIT_LAYER ? CLEAVE_SPLIT_LAYER : CLEAVE_SPLIT_NONE;
}

/* Whether placement c was made with these shares (NULL: equal). */
static bool same_shares_as(const struct cleave_context *c, const float *shares) {
    bool same = !shares == !c->has_shares;
    for (size_t d = 0; same && shares && d < c->n_dev; d++) same = shares[d] == c->shares[d];
    return same;
}

cleave_split_mode cleave_context_split_mode(const cleave_context *c) {
    return c ? api_mode(c->plan.mode) : CLEAVE_SPLIT_NONE;
}

cleave_status cleave_context_set_split_mode(cleave_context *c, cleave_split_mode mode,
                                            const float *shares, size_t n_shares) {
    if (!c) return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: no context");
    if (mode != CLEAVE_SPLIT_NONE && mode != CLEAVE_SPLIT_LAYER && mode != CLEAVE_SPLIT_TENSOR)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: unknown mode %d", (int)mode);
    if (shares && n_shares != c->n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: %zu shares for %zu devices",
                       n_shares, c->n_dev);
    if (mode == api_mode(c->plan.mode) && same_shares_as(c, shares)) return CLEAVE_OK;

    cleave_context_params p;
    engine_saved_params(c, &p);
    p.split_mode = mode;
    p.shares = shares, p.n_shares = shares ? n_shares : 0;
    /* the same context: no fit, the cells and batch the context has */
    p.fit = false;
    p.n_ctx = c->plan.n_ctx, p.n_batch = c->plan.n_batch;
    p.progress = c->progress, p.progress_user = c->progress_user;
    be_device *devs[PLAN_MAX_DEVICES];
    for (size_t d = 0; d < c->n_dev; d++) devs[d] = c->devs[d].dev;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cleave_status st = engine_sync_all(c);
    struct cleave_context *next = NULL;
    struct cleave_context *sp = c->spare;
    if (!st && sp && sp->plan.mode == (mode == CLEAVE_SPLIT_TENSOR ? SPLIT_TENSOR
                                       : mode == CLEAVE_SPLIT_LAYER ? SPLIT_LAYER : SPLIT_NONE) &&
        same_shares_as(sp, shares)) {
        /* the placement kept from before: only the KV cache moves */
        next = sp, c->spare = NULL;
        memset(&next->last_switch, 0, sizeof next->last_switch);
    } else if (!st) {
        st = engine_context_on(c->model, &p, devs, c->n_dev, c, &next);
        if (st == CLEAVE_ERR_OOM && c->spare) { /* room for the new one before the old spare */
            cleave_context_free(c->spare);
            c->spare = NULL;
            st = engine_context_on(c->model, &p, devs, c->n_dev, c, &next);
        }
    }
    if (!st) st = copy_kv(c, next);
    if (!st) st = engine_sync_all(next);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", cleave_last_error());
        cleave_context_free(next); /* a spare that failed to take the KV is dropped too */
        const char *to = mode == CLEAVE_SPLIT_TENSOR ? "tensor" : mode == CLEAVE_SPLIT_LAYER ? "layer" : "none";
        return err_set(st, "split-mode switch from %s to %s failed: %s; the context stays in %s mode",
                       plan_mode_name(c->plan.mode), to, why, plan_mode_name(c->plan.mode));
    }
    hand_over(c, next);
    if (c->params.keep_both_placements) {
        cleave_context_free(c->spare);
        c->spare = next; /* the placement just left, kept for the way back */
    } else {
        cleave_context_free(next);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->last_switch.n_devices = c->n_dev;
    c->last_switch.seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return CLEAVE_OK;
}

cleave_status cleave_context_switch_report(const cleave_context *c, cleave_switch_report *out) {
    if (!c || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "switch report: context and out required");
    *out = c->last_switch;
    out->n_devices = c->n_dev;
    return CLEAVE_OK;
}
