/* Weights onto the devices the plan names: whole tensors (mapped where
 * the device can read host memory, else uploaded), and for the tensor
 * split their row or column slices; during a split-mode switch, copied
 * from the placement being replaced instead (engine_place_copy.c). */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/options.h"
#include "quant/quant.h"
#include "plan/reshard.h"

/* Reports placement progress; a callback returning false cancels. */
static cleave_status placed(placement *pl, size_t bytes) {
    pl->placed_bytes += bytes;
    if (pl->progress && pl->total_bytes &&
        !pl->progress((float)pl->placed_bytes / (float)pl->total_bytes, pl->progress_user))
        return err_set(CLEAVE_ERR_INVALID_ARG, "loading cancelled");
    return CLEAVE_OK;
}

/* Whether device d reads weights from the mapped model file in place. */
static bool maps_file(const placement *pl, int d) {
    return be_has(pl->devs[d].dev, BE_CAP_MAP_HOST) && !options_get()->no_map;
}

/* host (rows in host memory, `bytes` of them) onto device d. mappable: the
 * memory is the mapped model file, which outlives the context, so a device
 * that reads host memory (CPU) may alias it instead of copying. at: where
 * the rows go, as they are, in an allocation pl already owns (a joined
 * one), or NULL for an allocation of their own. */
static cleave_status place_host(placement *pl, int d, const be_mat *host, size_t bytes,
                                bool mappable, const char *name, void *at, be_mat *m) {
    be_device *dev = pl->devs[d].dev;
    *m = *host;
    if (at) {
        m->data = at;
        cleave_status st = be_write(dev, at, host->data, bytes);
        return st ? st : placed(pl, bytes);
    }
    const void *mapped = mappable && maps_file(pl, d) ? be_map_host(dev, host->data, bytes) : NULL;
    if (mapped) {
        m->data = mapped;
        return CLEAVE_OK;
    }
    if (be_has(dev, BE_CAP_UPLOAD_MAT)) {
        cleave_status st = be_upload_mat(dev, host, m, name);
        if (st) return st;
        if ((st = engine_own(pl, d, (void *)m->data))) {
            be_free(dev, (void *)m->data);
            if (m->scales) be_free(dev, (void *)m->scales);
            return st;
        }
        if (m->scales && (st = engine_own(pl, d, (void *)m->scales))) {
            be_free(dev, (void *)m->scales);
            return st;
        }
        return placed(pl, bytes);
    }
    void *p = engine_dev_alloc(pl, d, bytes, name);
    if (!p) return CLEAVE_ERR_OOM;
    m->data = p;
    cleave_status st = be_write(dev, p, host->data, bytes);
    return st ? st : placed(pl, bytes);
}

/* Rows [r0, r1) of a weight matrix onto device d (an empty range places
 * nothing and leaves m with no rows); at as in place_host. */
static cleave_status place_rows_at(placement *pl, const placement *src, int d, const gguf_tensor *t,
                                   size_t r0, size_t r1, void *at, be_mat *m) {
    if (src) return engine_copy_mat(pl, src, d, t, false, r0, r1, at, m);
    memset(m, 0, sizeof *m);
    be_mat host = {.type = (cleave_type)t->type, .ne0 = (size_t)t->ne[0]};
    host.nb1 = quant_row_bytes(t->type, host.ne0);
    host.ne1 = r1 - r0;
    host.data = (const char *)t->data + r0 * host.nb1;
    if (!host.ne1) {
        *m = host;
        return CLEAVE_OK;
    }
    return place_host(pl, d, &host, host.ne1 * host.nb1, true, t->name, at, m);
}

static cleave_status place_rows(placement *pl, const placement *src, int d, const gguf_tensor *t, size_t r0,
                                size_t r1, be_mat *m) {
    return place_rows_at(pl, src, d, t, r0, r1, NULL, m);
}

/* Matrices multiplied by one input (q, k, v; gate, up): rows [r0[i],
 * r1[i]) of t[i] into m[i]. Where the device copies weights (it does not
 * read the file in place) and they share a type and a row length, they
 * go into one allocation, one after another, so a backend can run them
 * as one GEMM of all their rows (H200, 8B bf16, batched decode of 32
 * sequences: 4681 -> 4933 tok/s; of 8: 1368 -> 1473). Q8_0 is excluded:
 * its upload changes the layout. The first matrix owns the allocation,
 * so releasing it gives back all. */
static cleave_status place_rows_joined(placement *pl, const placement *src, int d, const gguf_tensor *const *t,
                                       const size_t *r0, const size_t *r1, be_mat *const *m, size_t count) {
    size_t total = 0;
    bool join = count > 1 && !maps_file(pl, d) && !options_get()->no_join && t[0]->type != CLEAVE_TYPE_Q8_0;
    for (size_t i = 0; join && i < count; i++) {
        size_t bytes = (r1[i] - r0[i]) * quant_row_bytes(t[i]->type, (size_t)t[i]->ne[0]);
        /* every part 256-byte aligned, as the device's own allocations are */
        join = t[i]->type == t[0]->type && t[i]->ne[0] == t[0]->ne[0] && bytes && bytes % 256 == 0;
        total += bytes;
    }
    cleave_status st = CLEAVE_OK;
    char *at = join ? engine_dev_alloc(pl, d, total, t[0]->name) : NULL;
    if (join && !at) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < count && !st; i++) {
        st = place_rows_at(pl, src, d, t[i], r0[i], r1[i], at, m[i]);
        if (at) at += m[i]->ne1 * m[i]->nb1;
    }
    return st;
}

static cleave_status place_mat(placement *pl, const placement *src, int d, const gguf_tensor *t, be_mat *m) {
    return place_rows(pl, src, d, t, 0, (size_t)(t->n_elems / t->ne[0]), m);
}

/* Columns [c0, c1) of every row onto device d, gathered in host memory
 * first; quantized types need whole blocks. */
static cleave_status place_cols(placement *pl, const placement *src, int d, const gguf_tensor *t, size_t c0,
                                size_t c1, be_mat *m) {
    if (src) return engine_copy_mat(pl, src, d, t, true, c0, c1, NULL, m);
    /* every column: the rows as they are (mapped where the device reads
     * host memory, one upload otherwise), no gather */
    if (c0 == 0 && c1 == (size_t)t->ne[0]) return place_mat(pl, src, d, t, m);
    memset(m, 0, sizeof *m);
    size_t be, bb, ne0 = (size_t)t->ne[0], rows = (size_t)(t->n_elems / t->ne[0]);
    if (!quant_type_info(t->type, NULL, &be, &bb)) return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: type", t->name);
    if (c0 % be || (c1 % be && c1 != ne0))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "tensor split: columns [%zu, %zu) of %s cut through its %zu-element blocks",
                       c0, c1, t->name, be);
    be_mat host = {.type = (cleave_type)t->type, .ne0 = c1 - c0, .ne1 = rows};
    host.nb1 = quant_row_bytes(t->type, host.ne0);
    if (!host.ne0) {
        *m = host;
        return CLEAVE_OK;
    }
    size_t src_nb1 = quant_row_bytes(t->type, ne0), off = quant_row_bytes(t->type, c0);
    char *buf = mem_alloc(rows * host.nb1, t->name);
    if (!buf) return CLEAVE_ERR_OOM;
    for (size_t r = 0; r < rows; r++)
        memcpy(buf + r * host.nb1, (const char *)t->data + r * src_nb1 + off, host.nb1);
    host.data = buf;
    cleave_status st = place_host(pl, d, &host, rows * host.nb1, false, t->name, NULL, m);
    free(buf);
    return st;
}

/* Expert tensor t ([ne0, ne1, n_expert]) onto device d as one be_mat of
 * n_expert matrices: rows [lo, hi) of each expert, or (by_cols) columns
 * [lo, hi) of every row. Bytes as the file has them (no upload_mat
 * layout: the expert kernels read GGUF's blocks), mapped where the device
 * reads the file in place. Always from the file: a switch reads the
 * mapped file for experts instead of copying them from the other
 * placement. */
static cleave_status place_experts(placement *pl, int d, const gguf_tensor *t, bool by_cols, size_t lo,
                                   size_t hi, be_mat *m) {
    size_t ne0 = (size_t)t->ne[0], ne1 = (size_t)t->ne[1], ne2 = (size_t)t->ne[2], be = 1;
    size_t nb1 = quant_row_bytes(t->type, ne0);
    bool whole = lo == 0 && hi == (by_cols ? ne0 : ne1);
    memset(m, 0, sizeof *m);
    if (!quant_type_info(t->type, NULL, &be, NULL)) return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: type", t->name);
    if (by_cols && !whole && (lo % be || (hi % be && hi != ne0)))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "tensor split: columns [%zu, %zu) of %s cut through its %zu-element blocks", lo, hi,
                       t->name, be);
    m->type = (cleave_type)t->type;
    m->ne0 = by_cols ? hi - lo : ne0;
    m->ne1 = by_cols ? ne1 : hi - lo;
    m->nb1 = by_cols ? quant_row_bytes(t->type, m->ne0) : nb1;
    m->ne2 = ne2;
    m->nb2 = m->ne1 * m->nb1;
    size_t bytes = ne2 * m->nb2;
    if (!bytes) return CLEAVE_OK;
    if (whole && maps_file(pl, d) && (m->data = be_map_host(pl->devs[d].dev, t->data, bytes))) return CLEAVE_OK;
    const char *host = t->data;
    char *buf = NULL;
    if (!whole) { /* gather the slice of every row (by_cols) or of every expert */
        if (!(buf = mem_alloc(bytes, t->name))) return CLEAVE_ERR_OOM;
        size_t off = by_cols ? quant_row_bytes(t->type, lo) : 0;
        for (size_t e = 0; e < ne2; e++)
            for (size_t r = 0; r < m->ne1; r++)
                memcpy(buf + e * m->nb2 + r * m->nb1,
                       (const char *)t->data + (e * ne1 + (by_cols ? r : lo + r)) * nb1 + off, m->nb1);
        host = buf;
    }
    void *p = engine_dev_alloc(pl, d, bytes, t->name);
    cleave_status st = p ? be_write(pl->devs[d].dev, p, host, bytes) : CLEAVE_ERR_OOM;
    free(buf);
    m->data = p;
    return st ? st : placed(pl, bytes);
}

/* Elements [lo, hi) of every `per`-element row of t (an expert bias:
 * n_expert rows) as f32 on device d, rows packed; from the file. */
static cleave_status place_rows_of_vec(placement *pl, int d, const gguf_tensor *t, size_t per, size_t lo,
                                       size_t hi, float **out) {
    *out = NULL;
    if (!t || hi <= lo) return CLEAVE_OK;
    size_t all = (size_t)t->n_elems, rows = all / per, w = hi - lo;
    float *host = mem_alloc(all * sizeof(float), t->name);
    if (!host) return CLEAVE_ERR_OOM;
    quant_dequantize_row((cleave_type)t->type, t->data, host, all);
    for (size_t r = 0; r < rows; r++) memmove(host + r * w, host + r * per + lo, w * sizeof(float));
    float *p = engine_dev_alloc(pl, d, rows * w * sizeof(float), t->name);
    cleave_status st = p ? be_write(pl->devs[d].dev, p, host, rows * w * sizeof(float)) : CLEAVE_ERR_OOM;
    free(host);
    *out = p;
    return st ? st : placed(pl, rows * w * sizeof(float));
}

/* Elements [i0, i0 + n) of a vector as f32 on device d (NULL tensor or
 * n == 0 -> NULL). */
static cleave_status place_vec_range(placement *pl, const placement *src, int d, const gguf_tensor *t,
                                     size_t i0, size_t n, float **out) {
    *out = NULL;
    if (!t || !n) return CLEAVE_OK;
    if (src) return engine_copy_vec(pl, src, d, t, i0, n, out);
    be_device *dev = pl->devs[d].dev;
    size_t all = (size_t)t->n_elems;
    float *host = mem_alloc(all * sizeof(float), t->name);
    if (!host) return CLEAVE_ERR_OOM;
    quant_dequantize_row((cleave_type)t->type, t->data, host, all);
    float *p = engine_dev_alloc(pl, d, n * sizeof(float), t->name);
    cleave_status st = p ? be_write(dev, p, host + i0, n * sizeof(float)) : CLEAVE_ERR_OOM;
    free(host);
    *out = p;
    return st ? st : placed(pl, n * sizeof(float));
}

static cleave_status place_vec(placement *pl, const placement *src, int d, const gguf_tensor *t, float **out) {
    return place_vec_range(pl, src, d, t, 0, t ? (size_t)t->n_elems : 0, out);
}

/* ---- pieces ------------------------------------------------------------- */

/* The tables the pieces land in (the blocks of each device, or of the
 * layer split) and the rope factors of each active device. */
cleave_status engine_place_tables(placement *pl, const placement *src) {
    const struct cleave_model *m = pl->model;
    cleave_status st;
    for (size_t d = 0; d < pl->n_dev; d++)
        if (pl->devs[d].active && (st = place_vec(pl, src, (int)d, m->rope_freqs, &pl->devs[d].rope_freqs)))
            return st;
    if (pl->plan.mode == CLEAVE_SPLIT_TENSOR) {
        for (size_t d = 0; d < pl->n_dev; d++) {
            if (!pl->devs[d].active) continue;
            if (!(pl->slices[d] = mem_calloc(m->hp.n_layer, sizeof(engine_layer), "tensor slices")))
                return CLEAVE_ERR_OOM;
            for (uint32_t l = 0; l < m->hp.n_layer; l++) pl->slices[d][l].dev = (int)d;
        }
        return CLEAVE_OK;
    }
    if (!(pl->layers = mem_calloc(m->hp.n_layer, sizeof *pl->layers, "engine layers"))) return CLEAVE_ERR_OOM;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) pl->layers[l].dev = pl->plan.layer_device[l];
    return CLEAVE_OK;
}

/* Block l's attention (with the block's norms) or FFN on device d: a
 * tensor split's slice, or the whole of it on the block's device. */
static cleave_status place_block_piece(placement *pl, const placement *src, enum reshard_piece p, uint32_t l,
                                       int d) {
    const model_hparams *hp = &pl->model->hp;
    const model_layer *L = &pl->model->layers[l];
    const plan *pn = &pl->plan;
    bool tensor = pn->mode == CLEAVE_SPLIT_TENSOR;
    if (tensor ? !pl->devs[d].active : pn->layer_device[l] != d) return CLEAVE_OK;
    engine_layer *E = tensor ? &pl->slices[d][l] : &pl->layers[l];
    size_t hd = hp->head_dim, G = hp->n_head / hp->n_head_kv;
    plan_range h = reshard_units(pn, hp, (size_t)d, RESHARD_HEADS, l);
    plan_range f = reshard_units(pn, hp, (size_t)d, RESHARD_FF_ROWS, l);
    size_t f0 = f.lo, f1 = f.hi;
    size_t q0 = h.lo * G * hd, q1 = h.hi * G * hd, k0 = h.lo * hd, k1 = h.hi * hd;
    cleave_status st;
    if (p == RESHARD_FF_ROWS && L->router) { /* experts: the router whole, each expert's rows */
        size_t ff = hp->n_ff;
        if ((st = place_mat(pl, src, d, L->router, &E->router)) ||
            (st = place_experts(pl, d, L->w_gate, false, f0, f1, &E->w_gate)) ||
            (st = place_experts(pl, d, L->w_up, false, f0, f1, &E->w_up)) ||
            (st = place_experts(pl, d, L->w_down, true, f0, f1, &E->w_down)) ||
            (st = place_vec(pl, NULL, d, L->router_b, &E->router_b)) ||
            (st = place_rows_of_vec(pl, d, L->b_gate, ff, f0, f1, &E->b_gate)) ||
            (st = place_rows_of_vec(pl, d, L->b_up, ff, f0, f1, &E->b_up)) ||
            (st = f0 == 0 && f1 > f0 ? place_vec(pl, NULL, d, L->b_down, &E->b_down) : CLEAVE_OK))
            return st;
        return CLEAVE_OK;
    }
    if (p == RESHARD_FF_ROWS) {
        const gguf_tensor *ft[2] = {L->w_gate, L->w_up};
        const size_t fr0[2] = {f0, f0}, fr1[2] = {f1, f1};
        be_mat *fm[2] = {&E->w_gate, &E->w_up};
        if ((st = place_rows_joined(pl, src, d, ft, fr0, fr1, fm, 2)) ||
            (st = place_cols(pl, src, d, L->w_down, f0, f1, &E->w_down)))
            return st;
        return CLEAVE_OK;
    }
    const gguf_tensor *qkv[3] = {L->wq, L->wk, L->wv};
    const size_t ar0[3] = {q0, k0, k0}, ar1[3] = {q1, k1, k1};
    be_mat *am[3] = {&E->wq, &E->wk, &E->wv};
    if ((st = place_rows_joined(pl, src, d, qkv, ar0, ar1, am, 3)) || (st = place_cols(pl, src, d, L->wo, q0, q1, &E->wo)) ||
        (st = place_vec(pl, src, d, L->attn_norm, &E->attn_norm)) ||
        (st = place_vec(pl, src, d, L->ffn_norm, &E->ffn_norm)) ||
        (st = place_vec_range(pl, src, d, L->bq, q0, q1 - q0, &E->bq)) ||
        (st = place_vec_range(pl, src, d, L->bk, k0, k1 - k0, &E->bk)) ||
        (st = place_vec_range(pl, src, d, L->bv, k0, k1 - k0, &E->bv)) ||
        (st = place_vec(pl, src, d, L->q_norm, &E->q_norm)) || (st = place_vec(pl, src, d, L->k_norm, &E->k_norm)))
        return st;
    /* gpt-oss: o's bias once (the device with the first heads), the sinks
     * of this device's query heads; from the file */
    if ((st = h.lo == 0 && h.hi > h.lo ? place_vec(pl, NULL, d, L->bo, &E->bo) : CLEAVE_OK) ||
        (st = place_vec_range(pl, NULL, d, L->sinks, h.lo * G, (h.hi - h.lo) * G, &E->sinks)))
        return st;
    return CLEAVE_OK;
}

cleave_status engine_place_piece(placement *pl, const placement *src, enum reshard_piece p, uint32_t l, int d) {
    if (p == RESHARD_HEADS || p == RESHARD_FF_ROWS) return place_block_piece(pl, src, p, l, d);
    const struct cleave_model *m = pl->model;
    const plan *pn = &pl->plan;
    bool tensor = pn->mode == CLEAVE_SPLIT_TENSOR, tied = m->output == m->tok_embd;
    if (tensor) {
        if (!pl->devs[d].active) return CLEAVE_OK;
        engine_device *D = &pl->devs[d];
        size_t v0 = pn->vocab_rows[d].lo, v1 = pn->vocab_rows[d].hi;
        if (p == RESHARD_EMBD) return place_rows(pl, src, d, m->tok_embd, v0, v1, &D->tok_embd);
        cleave_status st = place_vec(pl, src, d, m->output_norm, &D->output_norm);
        if (st) return st;
        if (tied) { /* the lm head is the embedding's slice (placed first) */
            D->output = D->tok_embd;
            return CLEAVE_OK;
        }
        return place_rows(pl, src, d, m->output, v0, v1, &D->output);
    }
    if (p == RESHARD_EMBD) return d == pn->embd_device ? place_mat(pl, src, d, m->tok_embd, &pl->tok_embd) : CLEAVE_OK;
    if (d != pn->head_device) return CLEAVE_OK;
    cleave_status st = place_vec(pl, src, d, m->output_norm, &pl->output_norm);
    if (st) return st;
    if (tied && pn->head_device == pn->embd_device) {
        pl->output = pl->tok_embd;
        return CLEAVE_OK;
    }
    return place_mat(pl, src, d, m->output, &pl->output);
}

/* The norm each block's last add is fused with, on that block's device:
 * the next block's attn_norm or the output norm, a copy of it where the
 * next block runs elsewhere. */
cleave_status engine_place_finish(placement *pl, const placement *src) {
    const struct cleave_model *m = pl->model;
    uint32_t n = m->hp.n_layer;
    if (pl->plan.mode == CLEAVE_SPLIT_TENSOR) {
        for (size_t d = 0; d < pl->n_dev; d++)
            for (uint32_t l = 0; pl->slices[d] && l < n; l++)
                pl->slices[d][l].next_norm = l + 1 < n ? pl->slices[d][l + 1].attn_norm : pl->devs[d].output_norm;
        return CLEAVE_OK;
    }
    cleave_status st;
    for (uint32_t l = 0; l < n; l++) {
        engine_layer *E = &pl->layers[l];
        if (l + 1 == n)
            E->next_norm = pl->output_norm; /* the last block runs on the head device */
        else if (pl->layers[l + 1].dev == E->dev)
            E->next_norm = pl->layers[l + 1].attn_norm;
        else if ((st = place_vec(pl, src, E->dev, m->layers[l + 1].attn_norm, &E->next_norm)))
            return st;
    }
    return CLEAVE_OK;
}

cleave_status engine_place_weights(placement *pl, const placement *src) {
    const struct cleave_model *m = pl->model;
    cleave_status st = engine_place_tables(pl, src);
    for (uint32_t l = 0; !st && l < m->hp.n_layer; l++)
        for (int d = 0; !st && d < (int)pl->n_dev; d++)
            if (!(st = engine_place_piece(pl, src, RESHARD_HEADS, l, d))) st = engine_place_piece(pl, src, RESHARD_FF_ROWS, l, d);
    for (int d = 0; !st && d < (int)pl->n_dev; d++)
        if (!(st = engine_place_piece(pl, src, RESHARD_EMBD, 0, d))) st = engine_place_piece(pl, src, RESHARD_HEAD, 0, d);
    return st ? st : engine_place_finish(pl, src);
}

/* ---- giving pieces back (a split-mode switch) ----------------------------- */

static void release_mat(placement *pl, int d, be_mat *m) {
    engine_release(pl, d, m->data);
    engine_release(pl, d, m->scales);
    memset(m, 0, sizeof *m);
}

static void release_vec(placement *pl, int d, float **v) {
    engine_release(pl, d, *v);
    *v = NULL;
}

void engine_release_piece(placement *pl, enum reshard_piece p, uint32_t l, int d) {
    const plan *pn = &pl->plan;
    bool tensor = pn->mode == CLEAVE_SPLIT_TENSOR;
    if (p == RESHARD_HEADS || p == RESHARD_FF_ROWS) {
        if (tensor ? !pl->slices[d] : pn->layer_device[l] != d) return;
        engine_layer *E = tensor ? &pl->slices[d][l] : &pl->layers[l];
        if (p == RESHARD_FF_ROWS) {
            release_mat(pl, d, &E->w_gate), release_mat(pl, d, &E->w_up), release_mat(pl, d, &E->w_down);
            release_mat(pl, d, &E->router);
            float **vecs[] = {&E->router_b, &E->b_gate, &E->b_up, &E->b_down};
            for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) release_vec(pl, d, vecs[i]);
            return;
        }
        release_mat(pl, d, &E->wq), release_mat(pl, d, &E->wk), release_mat(pl, d, &E->wv);
        release_mat(pl, d, &E->wo);
        /* a layer split's own copy of the next block's norm (not an alias) */
        uint32_t n = pl->model->hp.n_layer;
        if (!tensor && E->next_norm && E->next_norm != pl->output_norm &&
            (l + 1 >= n || E->next_norm != pl->layers[l + 1].attn_norm))
            release_vec(pl, d, &E->next_norm);
        float **vecs[] = {&E->attn_norm, &E->ffn_norm, &E->bq, &E->bk, &E->bv, &E->q_norm, &E->k_norm,
                          &E->bo,        &E->sinks};
        for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) release_vec(pl, d, vecs[i]);
        kv_store_free_layer(&pl->store, (size_t)d, l);
        return;
    }
    if (tensor) {
        engine_device *D = &pl->devs[d];
        if (p == RESHARD_EMBD) release_mat(pl, d, &D->tok_embd);
        else release_mat(pl, d, &D->output), release_vec(pl, d, &D->output_norm);
        return;
    }
    if (p == RESHARD_EMBD && d == pn->embd_device) release_mat(pl, d, &pl->tok_embd);
    if (p == RESHARD_HEAD && d == pn->head_device)
        release_mat(pl, d, &pl->output), release_vec(pl, d, &pl->output_norm);
}
