/* What a split-mode switch moves, in which order, and what it costs each
 * device (see reshard.h). Pure: two plans in, numbers out. */
#include "reshard.h"

#include <string.h>

#include <stdlib.h>

#include "base/error.h"
#include "base/mem.h"

static plan_range range_of(uint32_t lo, uint32_t hi) { return (plan_range){lo, hi}; }
static bool same(plan_range a, plan_range b) {
    return (a.lo == b.lo && a.hi == b.hi) || (a.lo == a.hi && b.lo == b.hi);
}
static uint32_t len(plan_range r) { return r.hi - r.lo; }

plan_range reshard_units(const plan *p, const model_hparams *hp, size_t d, enum reshard_piece piece,
                         uint32_t layer) {
    plan_range none = range_of(0, 0);
    if (!p || !hp || d >= p->n_devices) return none;
    bool tensor = p->mode == CLEAVE_SPLIT_TENSOR;
    switch (piece) {
    case RESHARD_HEADS:
        if (layer >= hp->n_layer) return none;
        if (tensor) return p->kv_heads[d];
        return p->layer_device[layer] == (int)d ? range_of(0, hp->n_head_kv) : none;
    case RESHARD_FF_ROWS:
        if (layer >= hp->n_layer) return none;
        if (tensor) return p->ff_rows[d];
        return p->layer_device[layer] == (int)d ? range_of(0, hp->n_ff) : none;
    case RESHARD_EMBD:
        if (tensor) return p->vocab_rows[d];
        return p->embd_device == (int)d ? range_of(0, hp->n_vocab) : none;
    case RESHARD_HEAD:
        if (tensor) return p->vocab_rows[d];
        return p->head_device == (int)d ? range_of(0, hp->n_vocab) : none;
    }
    return none;
}

static cleave_status check_plans(const plan *from, const plan *to, const model_hparams *hp) {
    if (!from || !to || !hp) return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: plans and model required");
    if (from->n_devices != to->n_devices || from->n_devices == 0 || from->n_devices > CLEAVE_MAX_DEVICES)
        return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: plans over %zu and %zu devices", from->n_devices,
                       to->n_devices);
    if (from->n_layer != hp->n_layer || to->n_layer != hp->n_layer || !from->layer_device ||
        !to->layer_device)
        return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: plans are not of this model (%u layers)",
                       hp->n_layer);
    return CLEAVE_OK;
}

static bool is_block_piece(enum reshard_piece p) { return p == RESHARD_HEADS || p == RESHARD_FF_ROWS; }

cleave_status reshard_moves(const plan *from, const plan *to, const model_hparams *hp,
                            enum reshard_piece piece, uint32_t layer, reshard_move *out, size_t cap,
                            size_t *n) {
    cleave_status st = check_plans(from, to, hp);
    if (st) return st;
    if (!n || (cap && !out)) return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: nowhere to put the moves");
    if (is_block_piece(piece) && layer >= hp->n_layer)
        return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: block %u of %u", layer, hp->n_layer);
    *n = 0;
    for (size_t dst = 0; dst < to->n_devices; dst++) {
        plan_range want = reshard_units(to, hp, dst, piece, layer);
        if (!len(want) || same(want, reshard_units(from, hp, dst, piece, layer))) continue;
        for (size_t src = 0; src < from->n_devices; src++) {
            plan_range have = reshard_units(from, hp, src, piece, layer);
            uint32_t lo = have.lo > want.lo ? have.lo : want.lo, hi = have.hi < want.hi ? have.hi : want.hi;
            if (lo >= hi) continue;
            if (*n == cap)
                return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: more than %zu moves for one piece", cap);
            out[(*n)++] = (reshard_move){piece, layer, (int)src, (int)dst, lo, hi};
        }
    }
    return CLEAVE_OK;
}

/* ---- bytes ---------------------------------------------------------------- */

reshard_sizes reshard_sizes_of(const plan_request *req, uint32_t n_ctx, uint32_t cells) {
    const model_hparams *hp = req->hp;
    size_t attn = req->layer_attn_bytes ? req->layer_attn_bytes[0] : 0;
    size_t ffn = req->layer_ffn_bytes ? req->layer_ffn_bytes[0] : 0;
    size_t norms = req->layer_bytes[0] > attn + ffn ? req->layer_bytes[0] - attn - ffn : 0;
    size_t lm = req->head_bytes > req->output_norm_bytes ? req->head_bytes - req->output_norm_bytes : 0;
    reshard_sizes sz = {
        .head_weight_bytes = attn / hp->n_head_kv, .ff_row_bytes = ffn / hp->n_ff, .norm_bytes = norms,
        .head_kv_bytes = model_kv_bytes_per_token(hp, req->kv_type, req->kv_type_v) / hp->n_layer / hp->n_head_kv,
        .embd_row_bytes = req->embd_bytes / hp->n_vocab,
        .head_row_bytes = req->tied ? 0 : lm / hp->n_vocab,
        .output_norm_bytes = req->output_norm_bytes, .n_ctx = n_ctx, .cells = cells,
    };
    return sz;
}

/* Whether device d holds any part of block l under p (then its norms). */
static bool holds_block(const plan *p, const model_hparams *hp, size_t d, uint32_t l) {
    return len(reshard_units(p, hp, d, RESHARD_HEADS, l)) || len(reshard_units(p, hp, d, RESHARD_FF_ROWS, l));
}

/* Bytes device d holds of a piece under p; a block's norms count with its
 * HEADS piece, the output norm with the lm head. */
static size_t piece_bytes(const plan *p, const model_hparams *hp, const reshard_sizes *sz, size_t d,
                          reshard_step s) {
    uint32_t u = len(reshard_units(p, hp, d, s.piece, s.layer));
    switch (s.piece) {
    case RESHARD_HEADS:
        return u * (sz->head_weight_bytes + sz->head_kv_bytes * sz->n_ctx) +
               (holds_block(p, hp, d, s.layer) ? sz->norm_bytes : 0);
    case RESHARD_FF_ROWS: return u * sz->ff_row_bytes;
    case RESHARD_EMBD: return u * sz->embd_row_bytes;
    case RESHARD_HEAD: return u * sz->head_row_bytes + (u ? sz->output_norm_bytes : 0);
    }
    return 0;
}

/* Whether device d's buffers of a piece change (a new one is allocated). */
static bool piece_changes(const plan *from, const plan *to, const model_hparams *hp, size_t d,
                          reshard_step s) {
    if (!same(reshard_units(from, hp, d, s.piece, s.layer), reshard_units(to, hp, d, s.piece, s.layer)))
        return true;
    return s.piece == RESHARD_HEADS && holds_block(from, hp, d, s.layer) != holds_block(to, hp, d, s.layer);
}

/* Bytes that cross between devices in a piece's moves, per device. */
static void count_moves(const plan *from, const plan *to, const model_hparams *hp,
                        const reshard_sizes *sz, reshard_step s, reshard_cost *c) {
    reshard_move mv[CLEAVE_MAX_DEVICES * CLEAVE_MAX_DEVICES];
    size_t n = 0;
    if (reshard_moves(from, to, hp, s.piece, s.layer, mv, sizeof mv / sizeof *mv, &n)) return;
    size_t unit = s.piece == RESHARD_HEADS     ? sz->head_weight_bytes + sz->head_kv_bytes * sz->cells
                  : s.piece == RESHARD_FF_ROWS ? sz->ff_row_bytes
                  : s.piece == RESHARD_EMBD    ? sz->embd_row_bytes
                                               : sz->head_row_bytes;
    for (size_t i = 0; i < n; i++) {
        if (mv[i].src == mv[i].dst) continue;
        size_t b = (size_t)(mv[i].hi - mv[i].lo) * unit;
        c->moved_out[mv[i].src] += b;
        c->moved_in[mv[i].dst] += b;
    }
    /* replicated vectors, from the first device that had them */
    bool norms = s.piece == RESHARD_HEADS || s.piece == RESHARD_HEAD;
    size_t vec = s.piece == RESHARD_HEADS ? sz->norm_bytes : sz->output_norm_bytes;
    if (!norms || !vec) return;
    int first = -1;
    for (size_t d = 0; d < from->n_devices && first < 0; d++)
        if (s.piece == RESHARD_HEADS ? holds_block(from, hp, d, s.layer)
                                     : len(reshard_units(from, hp, d, RESHARD_HEAD, 0)) > 0)
            first = (int)d;
    for (size_t d = 0; first >= 0 && d < to->n_devices; d++) {
        bool had = s.piece == RESHARD_HEADS ? holds_block(from, hp, d, s.layer)
                                            : len(reshard_units(from, hp, d, RESHARD_HEAD, 0)) > 0;
        bool has = s.piece == RESHARD_HEADS ? holds_block(to, hp, d, s.layer)
                                            : len(reshard_units(to, hp, d, RESHARD_HEAD, 0)) > 0;
        if (has && !had) c->moved_out[first] += vec, c->moved_in[d] += vec;
    }
}

/* ---- order ---------------------------------------------------------------- */

cleave_status reshard_schedule(const plan *from, const plan *to, const model_hparams *hp,
                               const reshard_sizes *sz, reshard_step *steps, size_t cap, size_t *n,
                               reshard_cost *cost) {
    cleave_status st = check_plans(from, to, hp);
    if (st) return st;
    if (!sz || !n || !cost || (cap && !steps))
        return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: sizes and outputs required");
    memset(cost, 0, sizeof *cost);
    *n = 0;
    size_t nd = from->n_devices, total = 2 * (size_t)hp->n_layer + 2;
    /* the pieces that change on some device, with their bytes per device */
    reshard_step *todo = mem_alloc(total * sizeof *todo, "reshard steps");
    if (!todo) return CLEAVE_ERR_OOM;
    size_t n_todo = 0;
    for (size_t i = 0; i < total; i++) {
        reshard_step s = i < 2 * (size_t)hp->n_layer
                             ? (reshard_step){i % 2 ? RESHARD_FF_ROWS : RESHARD_HEADS, (uint32_t)(i / 2)}
                             : (reshard_step){i == total - 2 ? RESHARD_EMBD : RESHARD_HEAD, 0};
        bool changes = false;
        for (size_t d = 0; d < nd; d++) {
            cost->before[d] += piece_bytes(from, hp, sz, d, s);
            cost->after[d] += piece_bytes(to, hp, sz, d, s);
            changes |= piece_changes(from, to, hp, d, s);
        }
        if (changes) todo[n_todo++] = s;
    }
    if (n_todo > cap) {
        free(todo);
        return err_set(CLEAVE_ERR_INVALID_ARG, "reshard: %zu steps, room for %zu", n_todo, cap);
    }
    size_t held[CLEAVE_MAX_DEVICES];
    memcpy(held, cost->before, sizeof held);
    memcpy(cost->peak, cost->before, sizeof cost->peak);
    /* greedy: next, the piece whose allocation leaves the fullest device
     * (measured against the larger of its two plans) emptiest, and among
     * equals the one that leaves it emptiest once its old buffers are
     * freed: a device that gains slices and gives some away then takes
     * turns instead of gaining everything first */
    while (n_todo) {
        size_t best = 0;
        double best_during = 0, best_after = 0;
        for (size_t i = 0; i < n_todo; i++) {
            double during = -1e300, after = -1e300;
            for (size_t d = 0; d < nd; d++) {
                size_t lim = cost->before[d] > cost->after[d] ? cost->before[d] : cost->after[d];
                size_t add = 0, drop = 0;
                if (piece_changes(from, to, hp, d, todo[i]))
                    add = piece_bytes(to, hp, sz, d, todo[i]), drop = piece_bytes(from, hp, sz, d, todo[i]);
                double x = (double)(held[d] + add) - (double)lim, y = x - (double)drop;
                if (x > during) during = x;
                if (y > after) after = y;
            }
            if (i == 0 || during < best_during || (during == best_during && after < best_after))
                best = i, best_during = during, best_after = after;
        }
        reshard_step s = todo[best];
        for (size_t d = 0; d < nd; d++) {
            if (!piece_changes(from, to, hp, d, s)) continue;
            size_t add = piece_bytes(to, hp, sz, d, s), drop = piece_bytes(from, hp, sz, d, s);
            if (held[d] + add > cost->peak[d]) cost->peak[d] = held[d] + add;
            size_t big = add > drop ? add : drop;
            if (big > cost->largest_piece[d]) cost->largest_piece[d] = big;
            held[d] = held[d] + add - drop;
        }
        count_moves(from, to, hp, sz, s, cost);
        steps[(*n)++] = s;
        todo[best] = todo[--n_todo];
    }
    free(todo);
    return CLEAVE_OK;
}
