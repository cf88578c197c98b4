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
#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"
#include "plan/reshard.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The first `cells` cells of layer l's K and V (the used ones: the cell
 * table is the switching context's), from one placement's devices to
 * another's, by kv head. */
static cleave_status copy_kv_layer(struct cleave_context *from, struct cleave_context *to, uint32_t l,
                                   uint32_t cells) {
    const model_hparams *hp = &from->model->hp;
    const kv_cache *a = &from->kv;
    kv_cache *b = &to->kv;
    size_t hb = quant_row_bytes(a->type, hp->head_dim); /* one head of a cell row */
    cleave_status st = CLEAVE_OK;
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
    return st;
}

/* The cell table: which cells hold which positions of which sequences. */
static cleave_status copy_cells(const struct cleave_context *from, struct cleave_context *to) {
    const kv_cache *a = &from->kv;
    kv_cache *b = &to->kv;
    memcpy(b->pos, a->pos, (size_t)a->n_ctx * sizeof *a->pos);
    memcpy(b->seq, a->seq, (size_t)a->n_ctx * sizeof *a->seq);
    b->n_used = a->n_used, b->hi = a->hi;
    if (b->regions && b->regions == a->regions) { /* both made with the context's seq_regions */
        memcpy(b->region_hi, a->region_hi, (size_t)a->regions * sizeof *a->region_hi);
        memcpy(b->region_used, a->region_used, (size_t)(a->regions + 1) * sizeof *a->region_used);
    }
    b->dirty_lo = 0, b->dirty_hi = b->n_ctx;
    return kv_sync_cells(b);
}

/* Every layer's used cells, then the cell table. */
static cleave_status copy_kv(struct cleave_context *from, struct cleave_context *to) {
    cleave_status st = CLEAVE_OK;
    for (uint32_t l = 0; l < from->model->hp.n_layer && !st; l++) st = copy_kv_layer(from, to, l, from->kv.hi);
    return st ? st : copy_cells(from, to);
}

/* ---- the in-place switch: piece by piece ---------------------------------- */

/* Places a piece (with its KV layer, for HEADS) on every device of `to`
 * that the plan gives some of it, copying from `from`. */
static cleave_status place_step(struct cleave_context *to, struct cleave_context *from, reshard_step s,
                                uint32_t cells) {
    cleave_status st = CLEAVE_OK;
    double t0 = now_s();
    to->copy_src = from;
    for (int d = 0; d < (int)to->n_dev && !st; d++) st = engine_place_piece(to, s.piece, s.layer, d);
    /* K and V of the block where the plan gives the device its heads */
    for (size_t d = 0; !st && s.piece == RESHARD_HEADS && d < to->n_dev; d++) {
        plan_range h = reshard_units(&to->plan, &to->model->hp, d, RESHARD_HEADS, s.layer);
        if (to->kv.k[d] && h.hi > h.lo) st = kv_alloc_layer(&to->kv, d, s.layer);
    }
    if (!st && s.piece == RESHARD_HEADS) st = copy_kv_layer(from, to, s.layer, cells);
    to->copy_src = NULL;
    double t1 = now_s();
    if (!st) st = engine_sync_all(to); /* the copies done before their sources go */
    to->last_switch.seconds_alloc += t1 - t0;
    to->last_switch.seconds_copy += now_s() - t1;
    return st;
}

/* Frees c's buffers of a piece (the time counted in `into`'s report). */
static void release_step(struct cleave_context *c, reshard_step s, struct cleave_context *into) {
    double t0 = now_s();
    for (int d = 0; d < (int)c->n_dev; d++) engine_release_piece(c, s.piece, s.layer, d);
    into->last_switch.seconds_free += now_s() - t0;
}

/* Byte sizes for the schedule's order, from the model (per unit). */
static reshard_sizes sizes_of(const struct cleave_context *c) {
    const struct cleave_model *m = c->model;
    const model_hparams *hp = &m->hp;
    const model_layer *L = &m->layers[0];
    size_t attn = 0, ffn = 0, norms = 0;
    const gguf_tensor *a[] = {L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv};
    const gguf_tensor *f[] = {L->w_gate, L->w_up, L->w_down};
    const gguf_tensor *n[] = {L->attn_norm, L->ffn_norm, L->q_norm, L->k_norm};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++) attn += a[i] ? a[i]->nbytes : 0;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) ffn += f[i] ? f[i]->nbytes : 0;
    for (size_t i = 0; i < sizeof n / sizeof *n; i++) norms += n[i] ? n[i]->nbytes : 0;
    reshard_sizes sz = {
        .head_weight_bytes = attn / hp->n_head_kv, .ff_row_bytes = ffn / hp->n_ff, .norm_bytes = norms,
        .head_kv_bytes = 2 * quant_row_bytes(c->kv.type, hp->head_dim),
        .embd_row_bytes = m->tok_embd->nbytes / hp->n_vocab,
        .head_row_bytes = m->output == m->tok_embd ? 0 : m->output->nbytes / hp->n_vocab,
        .output_norm_bytes = m->output_norm ? m->output_norm->nbytes : 0,
        .n_ctx = c->plan.n_ctx, .cells = c->kv.hi,
    };
    return sz;
}

/* Moves c's model into `next` (built piecewise: tables only) one piece at
 * a time in reshard_schedule's order, each piece's old buffers freed once
 * its new ones hold it, so a device holds at most the larger of the two
 * placements plus about one piece. A failure puts back, from next, every
 * piece already given up, so c stays whole. */
static cleave_status move_in_place(struct cleave_context *c, struct cleave_context *next) {
    const struct cleave_model *m = c->model;
    uint32_t nl = m->hp.n_layer;
    size_t total = 2 * (size_t)nl + 2, n_sched = 0, n_order = 0;
    reshard_step *order = mem_alloc(2 * total * sizeof *order, "switch order");
    if (!order) return CLEAVE_ERR_OOM;
    reshard_step *sched = order + total;
    reshard_sizes sz = sizes_of(c);
    reshard_cost cost;
    cleave_status st = reshard_schedule(&c->plan, &next->plan, &m->hp, &sz, sched, total, &n_sched, &cost);
    /* the pieces that change in the schedule's order, then the rest (they
     * move too: into buffers of the new placement); a tied lm head right
     * after the embedding, whose buffer it shares */
    bool tied = m->output == m->tok_embd, seen_head = false;
    for (size_t i = 0; !st && i < n_sched + total; i++) {
        reshard_step s = i < n_sched ? sched[i]
                         : i - n_sched < 2 * (size_t)nl
                             ? (reshard_step){(i - n_sched) % 2 ? RESHARD_FF_ROWS : RESHARD_HEADS,
                                              (uint32_t)((i - n_sched) / 2)}
                             : (reshard_step){i - n_sched == 2 * (size_t)nl ? RESHARD_EMBD : RESHARD_HEAD, 0};
        bool dup = false;
        for (size_t k = 0; k < n_order && !dup; k++)
            dup = order[k].piece == s.piece && order[k].layer == s.layer;
        if (dup || (tied && s.piece == RESHARD_HEAD && !seen_head)) continue;
        order[n_order++] = s;
        if (tied && s.piece == RESHARD_EMBD) {
            order[n_order++] = (reshard_step){RESHARD_HEAD, 0};
            seen_head = true;
        }
    }
    size_t done = 0;
    for (; !st && done < n_order; done++) {
        reshard_step s = order[done];
        /* a tied head's pieces go together with the embedding's */
        if ((st = place_step(next, c, s, c->kv.hi))) break;
        if (tied && s.piece == RESHARD_EMBD) {
            if ((st = place_step(next, c, order[done + 1], c->kv.hi))) break;
            release_step(c, order[done + 1], next);
            release_step(c, s, next);
            done++;
            continue;
        }
        release_step(c, s, next);
        if (next->progress) next->progress((float)(done + 1) / (float)n_order, next->progress_user);
    }
    /* the fused norms, copied from the new placement itself where a block's
     * device needs the next block's */
    next->copy_src = next;
    if (!st) st = engine_place_finish(next);
    next->copy_src = NULL;
    if (st) {
        /* put back what c gave up, copied from next */
        char why[512];
        snprintf(why, sizeof why, "%s", cleave_last_error());
        cleave_status back = CLEAVE_OK;
        for (size_t k = 0; k < done && !back; k++) back = place_step(c, next, order[k], c->kv.hi);
        c->copy_src = c;
        if (!back) back = engine_place_finish(c);
        c->copy_src = NULL;
        for (size_t b = 0; b < ENGINE_GRAPH_SLOTS; b++) engine_drop_graphs(c, b); /* recorded with the old addresses */
        st = back ? err_set(back, "%s; putting the old placement back failed too: %s", why,
                            cleave_last_error())
                  : err_set(st, "%s", why);
    }
    free(order);
    return st;
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
    /* the communicator: the new placement's (made or borrowed), else the
     * one the handle had, kept for a switch back */
    c->comm = next->comm ? next->comm : old.comm, c->comm_borrowed = false;
    if (old.comm == c->comm) old.comm_borrowed = true;
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

    double t0 = now_s(), t_prepared = 0;
    cleave_status st = engine_sync_all(c);
    struct cleave_context *next = NULL;
    struct cleave_context *sp = c->spare;
    if (!st && sp && api_mode(sp->plan.mode) == mode && same_shares_as(sp, shares)) {
        /* the placement kept from before: only the KV cache moves */
        next = sp, c->spare = NULL;
        memset(&next->last_switch, 0, sizeof next->last_switch);
        st = copy_kv(c, next);
    } else if (!st && c->params.keep_both_placements) {
        /* the new placement whole beside the old, which stays */
        st = engine_context_on(c->model, &p, devs, c->n_dev, c, false, &next);
        if (st == CLEAVE_ERR_OOM && c->spare) { /* room for the new one before the old spare */
            cleave_context_free(c->spare);
            c->spare = NULL;
            st = engine_context_on(c->model, &p, devs, c->n_dev, c, false, &next);
        }
        t_prepared = now_s();
        if (!st) st = copy_kv(c, next);
    } else if (!st) {
        /* in place: the new placement's tables, then the model piece by piece */
        st = engine_context_on(c->model, &p, devs, c->n_dev, c, true, &next);
        t_prepared = now_s();
        if (!st) st = move_in_place(c, next);
        if (!st) st = copy_cells(c, next);
    }
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
    c->last_switch.n_devices = c->n_dev;
    c->last_switch.seconds = now_s() - t0;
    c->last_switch.seconds_prepare = t_prepared > t0 ? t_prepared - t0 : 0;
    return CLEAVE_OK;
}

cleave_status cleave_context_switch_report(const cleave_context *c, cleave_switch_report *out) {
    if (!c || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "switch report: context and out required");
    *out = c->last_switch;
    out->n_devices = c->n_dev;
    return CLEAVE_OK;
}
