/* Weights placed from another placement of the same model on the same
 * devices (a split-mode switch): each slice a device needs is copied from
 * the devices that hold it now, device to device (peer copies, or staged
 * through pinned host memory), in the layout the devices keep it in.
 * Nothing is read from the model file, except experts' weights (place.c
 * places those from the file). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"
#include "quant/quant.h"

/* Which part of a tensor a device of a placement holds. */
typedef enum { RANGE_ALL, RANGE_Q, RANGE_K, RANGE_F, RANGE_VOCAB } range_kind;

/* A block's tensors: where the model keeps them, where a placement keeps
 * them, what slice of them a tensor split gives each device. */
static const struct {
    size_t model_off, engine_off;
    range_kind kind;
    bool vec, by_cols; /* a vector; a matrix a tensor split cuts by columns */
} fields[] = {
    {offsetof(model_layer, wq), offsetof(engine_layer, wq), RANGE_Q, false, false},
    {offsetof(model_layer, wk), offsetof(engine_layer, wk), RANGE_K, false, false},
    {offsetof(model_layer, wv), offsetof(engine_layer, wv), RANGE_K, false, false},
    {offsetof(model_layer, wo), offsetof(engine_layer, wo), RANGE_Q, false, true},
    {offsetof(model_layer, w_gate), offsetof(engine_layer, w_gate), RANGE_F, false, false},
    {offsetof(model_layer, w_up), offsetof(engine_layer, w_up), RANGE_F, false, false},
    {offsetof(model_layer, w_down), offsetof(engine_layer, w_down), RANGE_F, false, true},
    {offsetof(model_layer, attn_norm), offsetof(engine_layer, attn_norm), RANGE_ALL, true, false},
    {offsetof(model_layer, ffn_norm), offsetof(engine_layer, ffn_norm), RANGE_ALL, true, false},
    {offsetof(model_layer, bq), offsetof(engine_layer, bq), RANGE_Q, true, false},
    {offsetof(model_layer, bk), offsetof(engine_layer, bk), RANGE_K, true, false},
    {offsetof(model_layer, bv), offsetof(engine_layer, bv), RANGE_K, true, false},
    {offsetof(model_layer, q_norm), offsetof(engine_layer, q_norm), RANGE_ALL, true, false},
    {offsetof(model_layer, k_norm), offsetof(engine_layer, k_norm), RANGE_ALL, true, false},
    {offsetof(model_layer, router), offsetof(engine_layer, router), RANGE_ALL, false, false},
};

/* One device's part of a tensor: its matrix or vector, and the range of
 * the axis its placement cuts (rows, or columns when by_cols; a vector's
 * elements) that it covers. */
typedef struct {
    int dev;
    const be_mat *mat;
    const float *vec;
    size_t lo, hi;
    bool by_cols;
} part;

/* The range device d of placement o holds of a tensor whose split axis
 * has `full` units. */
static void held(const placement *o, size_t d, range_kind k, size_t full, size_t *lo,
                 size_t *hi) {
    const model_hparams *hp = &o->model->hp;
    *lo = 0, *hi = full;
    if (o->plan.mode != CLEAVE_SPLIT_TENSOR || k == RANGE_ALL) return;
    enum reshard_piece p = k == RANGE_F ? RESHARD_FF_ROWS : k == RANGE_VOCAB ? RESHARD_EMBD : RESHARD_HEADS;
    size_t per = k == RANGE_Q ? (size_t)hp->n_head / hp->n_head_kv * hp->head_dim
                 : k == RANGE_K ? hp->head_dim : 1; /* rows or elements per unit */
    plan_range r = reshard_units(&o->plan, hp, d, p, 0);
    *lo = r.lo * per, *hi = r.hi * per;
}

/* The parts of tensor t that placement o holds; a replicated tensor gives
 * its first holder only. */
static size_t parts_of(const placement *o, const gguf_tensor *t, part *out) {
    size_t rows = (size_t)(t->n_elems / t->ne[0]), ne0 = (size_t)t->ne[0];
    const struct cleave_model *m = o->model;
    bool tensor = o->plan.mode == CLEAVE_SPLIT_TENSOR;
    size_t n = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
            if (*(const gguf_tensor *const *)((const char *)&m->layers[l] + fields[f].model_off) != t)
                continue;
            size_t full = fields[f].vec ? (size_t)t->n_elems : fields[f].by_cols ? ne0 : rows;
            for (size_t d = 0; d < o->n_dev; d++) {
                const engine_layer *E = tensor ? (o->devs[d].active ? &o->slices[d][l] : NULL)
                                               : (o->plan.layer_device[l] == (int)d ? &o->layers[l] : NULL);
                if (!E) continue;
                part p = {(int)d, NULL, NULL, 0, 0, fields[f].by_cols};
                held(o, d, fields[f].kind, full, &p.lo, &p.hi);
                if (p.lo >= p.hi) continue;
                const char *at = (const char *)E + fields[f].engine_off;
                if (fields[f].vec) p.vec = *(float *const *)at;
                else p.mat = (const be_mat *)at;
                out[n++] = p;
                if (fields[f].kind == RANGE_ALL) return n;
            }
            return n;
        }
    /* the vocabulary tables (a tied lm head is the embedding), the output
     * norm and the rope factors */
    bool embd = t == m->tok_embd, head = t == m->output, onorm = t == m->output_norm;
    for (size_t d = 0; d < o->n_dev && (embd || head || onorm || t == m->rope_freqs); d++) {
        const engine_device *D = &o->devs[d];
        size_t full = onorm || t == m->rope_freqs ? (size_t)t->n_elems : rows;
        part p = {(int)d, NULL, NULL, 0, full, false};
        if (t == m->rope_freqs) {
            if (!D->active || !D->rope_freqs) continue;
            p.vec = D->rope_freqs;
            out[n++] = p;
            return n;
        }
        if (tensor) {
            if (!D->active) continue;
            held(o, d, onorm ? RANGE_ALL : RANGE_VOCAB, full, &p.lo, &p.hi);
            if (p.lo >= p.hi) continue;
            if (onorm) p.vec = D->output_norm;
            else p.mat = embd ? &D->tok_embd : &D->output;
        } else if (embd && o->plan.embd_device == (int)d) {
            p.mat = &o->tok_embd;
        } else if (!embd && o->plan.head_device == (int)d) {
            if (onorm) p.vec = o->output_norm;
            else p.mat = &o->output;
        } else {
            continue;
        }
        out[n++] = p;
        if (onorm) return n;
    }
    return n;
}

void engine_count_move(placement *pl, int from, int to, size_t bytes) {
    if (!pl->moves) return;
    pl->moves->bytes_out[from] += bytes;
    pl->moves->bytes_in[to] += bytes;
    if (from != to) pl->moves->peer_out[from] += bytes, pl->moves->peer_in[to] += bytes;
}

cleave_status engine_copy_block(be_device *d, void *dst, size_t dpitch, be_device *s,
                                const void *src, size_t spitch, size_t width, size_t height) {
    if (!width || !height) return CLEAVE_OK;
    if (be_same_backend(d, s) && be_has(d, BE_CAP_COPY2D))
        return be_copy2d_from(d, dst, dpitch, s, src, spitch, width, height, NULL);
    char *buf = mem_alloc(spitch * (height - 1) + width, "copy staging");
    if (!buf) return CLEAVE_ERR_OOM;
    cleave_status st = be_read(s, buf, src, spitch * (height - 1) + width);
    for (size_t r = 0; !st && r < height; r++)
        st = be_write(d, (char *)dst + r * dpitch, buf + r * spitch, width);
    free(buf);
    return st;
}

/* Bytes of the first `cols` columns of a row of m, in its layout: int8 in
 * the split q8_0 layout (plane: scales = false) or its f16 scales (true);
 * else whole blocks of its type. */
static size_t col_bytes(const be_mat *m, size_t cols, bool scales) {
    if (m->scales) return scales ? cols / QK8_0 * 2 : cols;
    return quant_row_bytes(m->type, cols);
}

static size_t plane_pitch(const be_mat *m, bool scales) {
    return scales ? m->ne0 / QK8_0 * 2 : m->nb1;
}

cleave_status engine_copy_mat(placement *pl, const placement *src, int d, const gguf_tensor *t, bool by_cols,
                              size_t lo, size_t hi, void *at, be_mat *m) {
    const placement *o = src;
    size_t rows = (size_t)(t->n_elems / t->ne[0]), ne0 = (size_t)t->ne[0];
    part parts[CLEAVE_MAX_DEVICES];
    size_t n = parts_of(o, t, parts);
    /* the rectangle wanted: rows [r0, r1) x columns [c0, c1) */
    size_t r0 = by_cols ? 0 : lo, r1 = by_cols ? rows : hi, c0 = by_cols ? lo : 0, c1 = by_cols ? hi : ne0;
    memset(m, 0, sizeof *m);
    m->type = (cleave_type)t->type;
    m->ne0 = c1 - c0, m->ne1 = r1 - r0;
    if (!m->ne0 || !m->ne1) {
        m->nb1 = quant_row_bytes(m->type, m->ne0);
        return CLEAVE_OK;
    }
    if (!n || !parts[0].mat)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: no device holds %s", t->name);
    bool split = parts[0].mat->scales != NULL;
    if (split && at)
        return err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: %s is kept split, not in rows",
                       t->name);
    m->nb1 = split ? m->ne0 : quant_row_bytes(m->type, m->ne0);
    void *data = at ? at : engine_dev_alloc(pl, d, m->ne1 * m->nb1, t->name);
    void *sc = data && split ? engine_dev_alloc(pl, d, m->ne1 * (m->ne0 / QK8_0) * 2, t->name) : NULL;
    if (!data || (split && !sc)) return CLEAVE_ERR_OOM;
    m->data = data, m->scales = sc;
    be_device *dv = pl->devs[d].dev;
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < n && !st; i++) {
        const be_mat *s = parts[i].mat;
        /* the part's rectangle, and its overlap with the one wanted */
        size_t pr0 = parts[i].by_cols ? 0 : parts[i].lo, pr1 = parts[i].by_cols ? rows : parts[i].hi;
        size_t pc0 = parts[i].by_cols ? parts[i].lo : 0, pc1 = parts[i].by_cols ? parts[i].hi : ne0;
        size_t ra = r0 > pr0 ? r0 : pr0, rb = r1 < pr1 ? r1 : pr1;
        size_t ca = c0 > pc0 ? c0 : pc0, cb = c1 < pc1 ? c1 : pc1;
        if (ra >= rb || ca >= cb) continue;
        if (!s || (s->scales != NULL) != split)
            return err_set(CLEAVE_ERR_UNSUPPORTED, "split-mode switch: %s is kept in two layouts",
                           t->name);
        be_device *sv = o->devs[parts[i].dev].dev;
        for (int plane = 0; plane < (split ? 2 : 1) && !st; plane++) {
            bool scp = plane == 1;
            const char *sb = scp ? (const char *)s->scales : (const char *)s->data;
            char *db = scp ? (char *)sc : (char *)data;
            size_t sp = plane_pitch(s, scp), dp = plane_pitch(m, scp);
            size_t w = col_bytes(m, cb - ca, scp);
            st = engine_copy_block(dv, db + (ra - r0) * dp + col_bytes(m, ca - c0, scp), dp, sv,
                                   sb + (ra - pr0) * sp + col_bytes(s, ca - pc0, scp), sp, w, rb - ra);
            engine_count_move(pl, parts[i].dev, d, w * (rb - ra));
        }
    }
    return st;
}

cleave_status engine_copy_vec(placement *pl, const placement *src, int d, const gguf_tensor *t, size_t i0,
                              size_t n_el, float **out) {
    const placement *o = src;
    part parts[CLEAVE_MAX_DEVICES];
    size_t n = parts_of(o, t, parts);
    *out = NULL;
    if (!n_el) return CLEAVE_OK;
    float *p = engine_dev_alloc(pl, d, n_el * sizeof(float), t->name);
    if (!p) return CLEAVE_ERR_OOM;
    *out = p;
    size_t got = 0;
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < n && !st; i++) {
        size_t a = i0 > parts[i].lo ? i0 : parts[i].lo;
        size_t b = i0 + n_el < parts[i].hi ? i0 + n_el : parts[i].hi;
        if (a >= b || !parts[i].vec) continue;
        st = engine_copy_block(pl->devs[d].dev, p + (a - i0), 0, o->devs[parts[i].dev].dev,
                               parts[i].vec + (a - parts[i].lo), 0, (b - a) * sizeof(float), 1);
        engine_count_move(pl, parts[i].dev, d, (b - a) * sizeof(float));
        got += b - a;
    }
    if (!st && got != n_el)
        st = err_set(CLEAVE_ERR_INVALID_ARG, "split-mode switch: %zu of %zu elements of %s found",
                     got, n_el, t->name);
    return st;
}
