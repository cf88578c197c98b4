/* cleave_context_set_split_mode: a live context moves to another split
 * mode on the same devices, keeping its sequences, positions and logits.
 *
 * In place (the default): the new placement's tables are made, then the
 * model moves one piece at a time (a block's attention with its KV layer,
 * a block's FFN, the embedding, the lm head; reshard.h) in the order
 * reshard_schedule gives: each piece is copied device to device from the
 * devices that hold it into buffers of the new shape, then the old
 * buffers are freed, so a device holds at most about the larger of the
 * two placements plus one piece. Nothing is read from the model file. A
 * failure copies every piece already given up back from the new
 * placement, so the context stays whole and usable in its old mode.
 *
 * With keep_both_placements the new placement is built whole beside the
 * old one, which stays resident as a spare; a later switch back to it
 * moves only the KV cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "comm/comm.h"
#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"
#include "plan/reshard.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The first `cells` cells of layer l's K and V (the used ones), from one
 * placement's devices to another's, by kv head; counted in to->moves. */
static cleave_status copy_kv_layer(const placement *from, placement *to, uint32_t l, uint32_t cells) {
    const model_hparams *hp = &from->model->hp;
    const kv_store *a = &from->store;
    kv_store *b = &to->store;
    /* one head of a cell's K row and of its V row */
    size_t hb[2] = {quant_row_bytes(kv_store_type(a, false), hp->head_dim),
                    quant_row_bytes(kv_store_type(a, true), hp->head_dim)};
    cleave_status st = CLEAVE_OK;
    for (size_t dd = 0; dd < to->n_dev && !st; dd++) {
        char *bk = kv_store_k(b, dd, l), *bv = kv_store_v(b, dd, l);
        if (!bk) continue;
        plan_range want = reshard_units(&to->plan, hp, dd, RESHARD_HEADS, l);
        for (size_t sd = 0; sd < from->n_dev && !st; sd++) {
            const char *ak = kv_store_k(a, sd, l), *av = kv_store_v(a, sd, l);
            if (!ak) continue;
            plan_range have = reshard_units(&from->plan, hp, sd, RESHARD_HEADS, l);
            uint32_t lo = have.lo > want.lo ? have.lo : want.lo;
            uint32_t hi = have.hi < want.hi ? have.hi : want.hi;
            if (lo >= hi) continue;
            be_device *dv = to->devs[dd].dev, *sv = from->devs[sd].dev;
            size_t moved = 0;
            for (int v = 0; v < 2 && !st; v++) {
                size_t so = (lo - have.lo) * hb[v], doff = (lo - want.lo) * hb[v], w = (hi - lo) * hb[v];
                size_t arow = kv_store_row_bytes(a, sd, v), brow = kv_store_row_bytes(b, dd, v);
                st = engine_copy_block(dv, (v ? bv : bk) + doff, brow, sv, (v ? av : ak) + so, arow, w, cells);
                moved += w * cells;
            }
            engine_count_move(to, (int)sd, (int)dd, moved);
            if (to->moves) to->moves->kv_bytes += moved;
        }
    }
    return st;
}

/* Every layer's used cells. */
static cleave_status copy_kv(cleave_context *c, const placement *from, placement *to) {
    cleave_status st = CLEAVE_OK;
    uint32_t hi = kv_cells_hi(&c->cells);
    for (uint32_t l = 0; l < from->model->hp.n_layer && !st; l++) st = copy_kv_layer(from, to, l, hi);
    return st;
}

/* The new storage takes the whole cell table: it has never seen it. */
static cleave_status take_cells(cleave_context *c, placement *to) {
    kv_cells_mark_all_dirty(&c->cells);
    return kv_store_sync_cells(&to->store, &c->cells);
}

/* ---- the in-place switch: piece by piece ---------------------------------- */

/* Places a piece (with its KV layer, for HEADS) on every device of `to`
 * that the plan gives some of it, copying from `from`. */
static cleave_status place_step(placement *to, const placement *from, reshard_step s, uint32_t cells,
                                cleave_switch_report *r) {
    cleave_status st = CLEAVE_OK;
    double t0 = now_s();
    for (int d = 0; d < (int)to->n_dev && !st; d++) st = engine_place_piece(to, from, s.piece, s.layer, d);
    /* K and V of the block where the plan gives the device its heads */
    for (size_t d = 0; !st && s.piece == RESHARD_HEADS && d < to->n_dev; d++) {
        plan_range h = reshard_units(&to->plan, &to->model->hp, d, RESHARD_HEADS, s.layer);
        if (kv_store_on_device(&to->store, d) && h.hi > h.lo) st = kv_store_alloc_layer(&to->store, d, s.layer);
    }
    if (!st && s.piece == RESHARD_HEADS) st = copy_kv_layer(from, to, s.layer, cells);
    double t1 = now_s();
    if (!st) st = engine_sync_all(to); /* the copies done before their sources go */
    r->seconds_alloc += t1 - t0;
    r->seconds_copy += now_s() - t1;
    return st;
}

/* Frees pl's buffers of a piece (the time counted in r). */
static void release_step(placement *pl, reshard_step s, cleave_switch_report *r) {
    double t0 = now_s();
    for (int d = 0; d < (int)pl->n_dev; d++) engine_release_piece(pl, s.piece, s.layer, d);
    r->seconds_free += now_s() - t0;
}

/* Byte sizes for the schedule's order, from the plan's inputs (per unit). */
static reshard_sizes sizes_of(const cleave_context *c) {
    plan_request base = engine_plan_request(&c->base, c->pl->plan.mode, NULL);
    return reshard_sizes_of(&base, c->params.n_ctx, kv_cells_hi(&c->cells));
}

/* The order the pieces move in: those that change in the schedule's
 * order, then the rest (they move too: into buffers of the new
 * placement); a tied lm head right after the embedding, whose buffer it
 * shares. order: room for 2 n_layer + 2 steps. */
static cleave_status move_order(const cleave_context *c, const placement *next, reshard_step *order, size_t *n_order) {
    const struct cleave_model *m = c->model;
    uint32_t nl = m->hp.n_layer;
    size_t total = 2 * (size_t)nl + 2, n_sched = 0;
    reshard_step *sched = mem_alloc(total * sizeof *sched, "switch schedule");
    if (!sched) return CLEAVE_ERR_OOM;
    reshard_sizes sz = sizes_of(c);
    reshard_cost cost;
    cleave_status st = reshard_schedule(&c->pl->plan, &next->plan, &m->hp, &sz, sched, total, &n_sched, &cost);
    bool tied = m->output == m->tok_embd, seen_head = false;
    *n_order = 0;
    for (size_t i = 0; !st && i < n_sched + total; i++) {
        reshard_step s = i < n_sched ? sched[i]
                         : i - n_sched < 2 * (size_t)nl
                             ? (reshard_step){(i - n_sched) % 2 ? RESHARD_FF_ROWS : RESHARD_HEADS,
                                              (uint32_t)((i - n_sched) / 2)}
                             : (reshard_step){i - n_sched == 2 * (size_t)nl ? RESHARD_EMBD : RESHARD_HEAD, 0};
        bool dup = false;
        for (size_t k = 0; k < *n_order && !dup; k++) dup = order[k].piece == s.piece && order[k].layer == s.layer;
        if (dup || (tied && s.piece == RESHARD_HEAD && !seen_head)) continue;
        order[(*n_order)++] = s;
        if (tied && s.piece == RESHARD_EMBD) {
            order[(*n_order)++] = (reshard_step){RESHARD_HEAD, 0};
            seen_head = true;
        }
    }
    free(sched);
    return st;
}

/* Moves the context's placement into `next` (built piecewise: tables
 * only) one piece at a time, each piece's old buffers freed once its new
 * ones hold it, so a device holds at most the larger of the two
 * placements plus about one piece, then swaps the activation scratch. A
 * failure puts back, from next, the scratch and every piece already
 * given up, so the current placement stays whole. */
static cleave_status move_in_place(cleave_context *c, placement *next, cleave_switch_report *r) {
    placement *cur = c->pl;
    bool tied = c->model->output == c->model->tok_embd;
    size_t n_order = 0;
    reshard_step *order = mem_alloc((2 * (size_t)c->model->hp.n_layer + 2) * sizeof *order, "switch order");
    if (!order) return CLEAVE_ERR_OOM;
    cleave_status st = move_order(c, next, order, &n_order);
    uint32_t hi = kv_cells_hi(&c->cells);
    size_t done = 0;
    for (; !st && done < n_order; done++) {
        reshard_step s = order[done];
        /* a tied head's pieces go together with the embedding's */
        if ((st = place_step(next, cur, s, hi, r))) break;
        if (tied && s.piece == RESHARD_EMBD) {
            if ((st = place_step(next, cur, order[done + 1], hi, r))) break;
            release_step(cur, order[done + 1], r);
            release_step(cur, s, r);
            done++;
            continue;
        }
        release_step(cur, s, r);
        if (next->progress) next->progress((float)(done + 1) / (float)n_order, next->progress_user);
    }
    /* the fused norms, copied from the new placement itself where a block's
     * device needs the next block's */
    if (!st) st = engine_place_finish(next, next);
    /* the activation scratch last, the old placement's gone first, so no
     * device holds both (plan_switch_peak counts it so) */
    bool scratch_moved = false;
    if (!st) {
        engine_free_scratch(cur);
        scratch_moved = true;
        st = engine_alloc_scratch(next);
    }
    if (st) {
        /* put back what the current placement gave up, copied from next */
        char why[512];
        snprintf(why, sizeof why, "%s", cleave_last_error());
        cleave_switch_report ignored = {0};
        cleave_status back = CLEAVE_OK;
        if (scratch_moved) {
            engine_free_scratch(next);
            back = engine_alloc_scratch(cur);
        }
        for (size_t k = 0; k < done && !back; k++) back = place_step(cur, next, order[k], hi, &ignored);
        if (!back) back = engine_place_finish(cur, cur);
        engine_drop_graphs(cur); /* recorded with the old addresses */
        st = back ? err_set(back, "%s; putting the old placement back failed too: %s", why, cleave_last_error())
                  : err_set(st, "%s", why);
    }
    free(order);
    return st;
}

cleave_split_mode cleave_context_split_mode(const cleave_context *c) {
    return c ? c->pl->plan.mode : CLEAVE_SPLIT_NONE;
}

/* Where a switch from the current placement to `to` would pass a budget
 * at its fullest point: CLEAVE_ERR_OOM naming the device, else OK. */
static cleave_status check_peak(const cleave_context *c, const plan *to) {
    plan_request base = engine_plan_request(&c->base, to->mode, NULL);
    size_t peak[CLEAVE_MAX_DEVICES];
    cleave_status st = plan_switch_peak(&base, &c->pl->plan, to, kv_cells_hi(&c->cells),
                                        c->params.keep_both_placements, peak);
    if (st) return st;
    int d = plan_peak_over(&base, peak, c->n_dev);
    if (d < 0) return CLEAVE_OK;
    return err_set(CLEAVE_ERR_OOM,
                   "device %d would hold %.1f MiB at the switch's fullest point (the pieces in "
                   "flight beside both placements) but has %.1f MiB",
                   d, peak[d] / 1048576.0, c->base.budgets[d] / 1048576.0);
}

/* Moves the context to the placement of plan `to` (the caller's; copied). */
static cleave_status switch_to(cleave_context *c, const plan *to) {
    placement *cur = c->pl;
    if (engine_plans_equal(&cur->plan, to)) return CLEAVE_OK;
    cleave_split_mode mode = to->mode;
    cleave_context_params p;
    engine_saved_params(c, &p);
    p.split_mode = mode;
    p.fit = false; /* the same context: the cells and batch it has */
    cleave_switch_report r = {0};
    placement_env env = engine_env(c, &p);
    env.moves = &r;
    env.plan = to;

    double t0 = now_s(), t_prepared = 0;
    cleave_status st = engine_sync_all(cur);
    placement *next = NULL;
    if (!st && c->spare && engine_plans_equal(&c->spare->plan, to)) {
        /* the placement kept from before: only the KV cache moves */
        next = c->spare, c->spare = NULL;
        next->moves = &r;
        st = copy_kv(c, cur, next);
    } else if (!st && (st = check_peak(c, to))) {
        /* known before anything is allocated: nothing to undo */
    } else if (!st && c->params.keep_both_placements) {
        /* the new placement whole beside the old, which stays */
        st = placement_new(&env, cur, false, &next);
        if (st == CLEAVE_ERR_OOM && c->spare) { /* room for the new one before the old spare */
            placement_free(c->spare);
            c->spare = NULL;
            st = placement_new(&env, cur, false, &next);
        }
        t_prepared = now_s();
        if (!st) st = copy_kv(c, cur, next);
    } else if (!st) {
        /* in place: the new placement's tables, then the model piece by piece */
        st = placement_new(&env, NULL, true, &next);
        t_prepared = now_s();
        if (!st) st = move_in_place(c, next, &r);
    }
    if (!st) st = take_cells(c, next);
    if (!st) st = engine_sync_all(next);
    if (next) next->moves = NULL;
    if (st) {
        char why[768];
        snprintf(why, sizeof why, "%s", cleave_last_error());
        placement_free(next); /* a spare that failed to take the KV is dropped too */
        return err_set(st, "split-mode switch from %s to %s failed: %s; the context stays in %s mode",
                       cleave_split_mode_name(cur->plan.mode), cleave_split_mode_name(mode), why,
                       cleave_split_mode_name(cur->plan.mode));
    }
    c->pl = next;
    if (c->params.keep_both_placements) {
        placement_free(c->spare);
        c->spare = cur; /* the placement just left, kept for the way back */
    } else {
        placement_free(cur);
    }
    r.n_devices = c->n_dev;
    r.seconds = now_s() - t0;
    r.seconds_prepare = t_prepared > t0 ? t_prepared - t0 : 0;
    c->last_switch = r;
    return CLEAVE_OK;
}

cleave_status cleave_context_set_split_mode(cleave_context *c, cleave_split_mode mode, const float *shares,
                                            size_t n_shares) {
    if (!c) return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: no context");
    if (mode != CLEAVE_SPLIT_NONE && mode != CLEAVE_SPLIT_LAYER && mode != CLEAVE_SPLIT_TENSOR)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: unknown mode %d", (int)mode);
    if (shares && n_shares != c->n_dev)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: %zu shares for %zu devices", n_shares, c->n_dev);
    /* the plan of the context's cells and batch; without shares, fitted
     * ones where the context was fitted (else equal) */
    double w[CLEAVE_MAX_DEVICES] = {0};
    for (size_t d = 0; shares && d < c->n_dev; d++) w[d] = shares[d];
    plan_request req = engine_plan_request(&c->base, mode, shares ? w : NULL);
    req.n_ctx = c->params.n_ctx, req.n_batch = c->params.n_batch;
    if (!shares && c->params.fit && mode != CLEAVE_SPLIT_NONE) {
        size_t margin_budgets[CLEAVE_MAX_DEVICES];
        plan_margin_budgets(&req, ENGINE_FIT_MARGIN, margin_budgets);
        plan_request fitted = req;
        fitted.budgets = margin_budgets;
        unsigned long failures = mem_failures();
        if (plan_fit_shares(&fitted, w)) req.shares = w;
        if (mem_failures() != failures)
            return err_set(CLEAVE_ERR_OOM, "split-mode switch: out of memory while fitting the shares");
    }
    plan next;
    cleave_status st = plan_make(&req, &next);
    if (st) {
        const char *from = cleave_split_mode_name(c->pl->plan.mode);
        return err_set(st, "split-mode switch from %s to %s failed: %s; the context stays in %s mode", from,
                       cleave_split_mode_name(mode), cleave_last_error(), from);
    }
    st = switch_to(c, &next);
    plan_free(&next);
    return st;
}

cleave_status cleave_context_set_phase(cleave_context *c, cleave_phase phase) {
    if (!c) return err_set(CLEAVE_ERR_INVALID_ARG, "phase switch: no context");
    if (phase != CLEAVE_PHASE_PREFILL && phase != CLEAVE_PHASE_GENERATE)
        return err_set(CLEAVE_ERR_INVALID_ARG, "phase switch: unknown phase %d", (int)phase);
    const plan_phases *ph = &c->phases;
    int k = phase == CLEAVE_PHASE_PREFILL ? PLAN_PREFILL : PLAN_GENERATE;
    if (!ph->two) {
        c->phase = phase;
        return CLEAVE_OK;
    }
    if (!ph->generate_fits || !ph->switch_fits[PLAN_GENERATE]) {
        const char *where = cleave_split_mode_name(c->pl->plan.mode);
        if (phase == CLEAVE_PHASE_PREFILL && c->phase == CLEAVE_PHASE_PREFILL) return CLEAVE_OK;
        return err_set(CLEAVE_ERR_OOM, "%s; the context stays in %s mode", ph->why, where);
    }
    cleave_status st = switch_to(c, &ph->phase[k]);
    if (!st) c->phase = phase;
    return st;
}

cleave_phase cleave_context_phase(const cleave_context *c) { return c ? c->phase : CLEAVE_PHASE_PREFILL; }

cleave_status cleave_context_switch_report(const cleave_context *c, cleave_switch_report *out) {
    if (!c || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "switch report: context and out required");
    *out = c->last_switch;
    out->n_devices = c->n_dev;
    return CLEAVE_OK;
}
